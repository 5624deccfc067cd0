"""Tests for the `mindflow` command, run as a user runs it: a subprocess with its own MINDFLOW_HOME."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from readme import entry, fenced

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "data" / "samples" / "inbox"
MINDFLOW = REPO / ".venv" / "bin" / "mindflow"


def env_for(home: Path) -> dict[str, str]:
    return {
        **os.environ,
        "MINDFLOW_HOME": str(home),
        "DAGSTER_HOME": str(home / "dagster"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }


def start(home: Path, *args: str) -> subprocess.Popen:
    home.mkdir(parents=True, exist_ok=True)
    # The working directory is the home too, so no `.env` of the repository leaks in.
    return subprocess.Popen(
        [str(MINDFLOW), *args],
        env=env_for(home),
        cwd=home,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def mindflow(home: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    proc = start(home, *args)
    out, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


# --------------------------------------------------------------------------- error paths

ERROR_CASES = {
    "ingest-missing-file": (["ingest", "{home}/nowhere.jsonl", "--being", "ada"], "no such file"),
    "ingest-a-folder": (["ingest", "{home}", "--being", "ada"], "is a folder: give one file"),
    "audit-negative-limit": (["audit", "--limit", "-5"], "invalid --limit -5"),
    "memories-bad-since": (
        ["memories", "list", "--being", "ada", "--since", "notadate"],
        "invalid --since 'notadate': use YYYY-MM-DD or YYYY-MM-DDTHH:MM",
    ),
    "memories-bad-until": (
        ["memories", "list", "--being", "ada", "--until", "2026-02-30"],
        "invalid --until '2026-02-30': use YYYY-MM-DD or YYYY-MM-DDTHH:MM",
    ),
    "ingest-bad-being": (
        ["ingest", f"{SAMPLES}/bram/2026-10-20.md", "--being", "../etc"],
        "invalid being id '../etc'",
    ),
    "ingest-upper-case-being": (
        ["ingest", f"{SAMPLES}/bram/2026-10-20.md", "--being", "Bram"],
        "invalid being id 'Bram'",
    ),
    "ingest-bad-format": (
        ["ingest", f"{SAMPLES}/bram/2026-10-20.md", "--being", "bram", "--format", "csv"],
        "unknown format 'csv'; use one of: jsonl, openclaw, daily-md",
    ),
    "memories-list-unknown-being": (
        ["memories", "list", "--being", "nobody"],
        "unknown being 'nobody': it has no memories, no episodes and no inbox folder",
    ),
    "memories-show-unknown-being": (
        ["memories", "show", "n-1", "--being", "nobody"],
        "unknown being 'nobody'",
    ),
    "memories-history-unknown-being": (
        ["memories", "history", "n-1", "--being", "nobody"],
        "unknown being 'nobody'",
    ),
    "run-unknown-job": (
        ["run", "consolidate"],
        "unknown job 'consolidate'; use one of: ingest, extraction, patrol, form, decay, narrative, "
        "audit_digest, ebook_reindex, forget",
    ),
    "run-patrol-unknown-being": (["run", "patrol", "--being", "ghost"], "unknown being 'ghost'"),
    "run-decay-bad-day": (["run", "decay", "--partition", "2026-13-01"], "invalid day '2026-13-01'"),
    "run-decay-a-range": (
        ["run", "decay", "--partition", "2026-10-01...2026-10-05"],
        "invalid day '2026-10-01...2026-10-05': decay scores as of one day; use YYYY-MM-DD",
    ),
    "run-audit-digest-a-day": (
        ["run", "audit_digest", "--partition", "2026-11-05"],
        "invalid month '2026-11-05': use YYYY-MM",
    ),
    "run-audit-digest-junk-day": (
        ["run", "audit_digest", "--partition", "2026-10-xx"],
        "invalid month '2026-10-xx': use YYYY-MM",
    ),
    "run-audit-digest-before-the-partitions": (
        ["run", "audit_digest", "--partition", "2019-12"],
        "month '2019-12' lies outside the partitions (2020-01 .. ",
    ),
    "run-audit-digest-a-month-not-ended": (
        ["run", "audit_digest", "--partition", "2999-01"],
        "month '2999-01' lies outside the partitions (2020-01 .. ",
    ),
    "ingest-missing-argument": (
        ["ingest", "--being", "ada"],
        "missing argument PATH; see `mindflow ingest --help`",
    ),
    "run-missing-job": (["run"], "missing argument JOB; see `mindflow run --help`"),
    "memories-show-missing-being": (
        ["memories", "show", "n-1"],
        "missing option --being; see `mindflow memories show --help`",
    ),
    "memories-list-limit-zero": (
        ["memories", "list", "--being", "ada", "--limit", "0"],
        "invalid --limit 0: give how many memories, 1 or more",
    ),
    "memories-list-limit-not-a-number": (
        ["memories", "list", "--being", "ada", "--limit", "many"],
        "invalid --limit: ",
    ),
    "ebooks-search-k-zero": (
        ["ebooks", "search", "tea", "-k", "0"],
        "invalid -k 0: give how many passages, 1 to 50",
    ),
    "run-ingest-reversed-range": (
        ["run", "ingest", "--partition", "2026-10-05...2026-10-01"],
        "the end is before the start",
    ),
}


@pytest.fixture(scope="module")
def error_runs(tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess, Path]]:
    """Every error case at once, each in its own empty MINDFLOW_HOME (they are independent)."""
    root = tmp_path_factory.mktemp("errors")
    procs = {}
    for name, (args, _) in ERROR_CASES.items():
        home = root / name
        procs[name] = (start(home, *[a.format(home=home) for a in args]), home)
    results = {}
    for name, (proc, home) in procs.items():
        out, err = proc.communicate(timeout=240)
        results[name] = (subprocess.CompletedProcess(proc.args, proc.returncode, out, err), home)
    return results


@pytest.mark.parametrize("case", list(ERROR_CASES))
def test_errors_are_one_line_on_stderr_and_a_failing_exit_code(error_runs, case):
    result, home = error_runs[case]
    expected = ERROR_CASES[case][1]

    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert expected in lines[0]
    assert result.stdout == ""
    # Nothing was landed or stored by a refused command.
    inbox = home / "inbox"
    assert not inbox.exists() or not any(p.is_file() for p in inbox.rglob("*"))
    assert not (home / "mindflow.duckdb").exists()


def test_memories_of_a_being_known_only_by_its_inbox(tmp_path):
    home = tmp_path / "home"
    landed = mindflow(home, "ingest", str(SAMPLES / "bram" / "2026-10-27.md"), "--being", "bram")
    assert landed.returncode == 0, landed.stderr

    # Landed, not yet ingested: a being without memories so far, not an unknown one.
    procs = [
        start(home, "memories", "list", "--being", "bram", "--since", "2026-10-20T10:00:00Z"),
        start(home, "memories", "show", "n-1", "--being", "bram"),
        start(home, "memories", "list", "--being", "brum"),
    ]
    (listed, listed_err), (_, shown_err), (_, typo_err) = (p.communicate(timeout=240) for p in procs)
    assert procs[0].returncode == 0 and listed == "" and listed_err == "0 memories\n"
    assert procs[1].returncode == 1 and shown_err.startswith("error: being 'bram' has no memory 'n-1'")
    assert procs[2].returncode == 1 and typo_err.startswith("error: unknown being 'brum'")


# --------------------------------------------------------------------------- status and the happy path


def test_status_without_data_prints_a_hint(tmp_path):
    result = mindflow(tmp_path / "home", "status")

    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("no memory yet in ")
    assert "mindflow ingest" in result.stdout and "mindflow run ingest" in result.stdout
    assert not (tmp_path / "home" / "mindflow.duckdb").exists()


def test_a_run_with_nothing_to_do_says_why(tmp_path):
    home = tmp_path / "home"
    landed = mindflow(home, "ingest", str(SAMPLES / "bram" / "2026-10-20.md"), "--being", "bram")
    assert landed.returncode == 0, landed.stderr
    procs = {
        "range": start(home, "run", "ingest", "--partition", "2026-01-01...2026-01-05"),
        "patrol": start(home, "run", "patrol"),
    }
    said = {name: proc.communicate(timeout=240) for name, proc in procs.items()}
    assert all(proc.returncode == 0 for proc in procs.values()), said
    # The inbox holds a pending file, only not for those days.
    assert (
        said["range"][0]
        == "ingest: nothing to ingest for 2026-01-01...2026-01-05 (no episodes in those days)\n"
    )
    assert said["patrol"][0] == "patrol: nothing to do (no being has ingested episodes yet)\n"


def test_runs_started_at_once_on_a_new_home_all_open_its_instance(tmp_path):
    """Each run creates the Dagster instance's tables if they are missing: started together on a
    new home, one ended in a traceback ("table runs already exists")."""
    for round_ in range(2):
        home = tmp_path / f"home-{round_}"
        procs = [start(home, "run", "patrol") for _ in range(3)]
        said = [proc.communicate(timeout=240) for proc in procs]
        assert [proc.returncode for proc in procs] == [0, 0, 0], said
        assert all(out == "patrol: nothing to do (no being has ingested episodes yet)\n" for out, _ in said)


def test_landing_a_file_already_pending_says_so(tmp_path):
    home = tmp_path / "home"
    source = SAMPLES / "bram" / "2026-10-20.md"
    first = mindflow(home, "ingest", str(source), "--being", "bram")
    assert first.returncode == 0 and first.stdout.startswith("landed "), first.stderr
    target = home / "inbox" / "bram" / "2026-10-20.md"
    again = mindflow(home, "ingest", str(source), "--being", "bram")
    assert again.returncode == 0, again.stderr
    assert again.stdout == (
        f"already landed: {target} holds the same content, waiting to be ingested; nothing copied\n"
    )
    # Other content under the same name lands beside it, and a second landing of it is found there.
    edited = tmp_path / "2026-10-20.md"
    edited.write_bytes(source.read_bytes() + b"- [18:00] Bram locks the workshop.\n")
    beside = mindflow(home, "ingest", str(edited), "--being", "bram")
    assert beside.returncode == 0 and beside.stdout.startswith("landed "), beside.stderr
    twice = mindflow(home, "ingest", str(edited), "--being", "bram")
    assert twice.stdout.startswith("already landed: ") and "nothing copied" in twice.stdout
    assert len(list((home / "inbox" / "bram").rglob("*.md"))) == 2


def test_init_creates_the_stores_once(tmp_path):
    home = tmp_path / "home"
    first = mindflow(home, "init")
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == [f"MINDFLOW_HOME={home}", f"DAGSTER_HOME={home / 'dagster'}"]
    # Dagster's databases and the DuckDB schema exist before any run.
    assert (home / "dagster" / "history" / "runs.db").is_file()
    assert (home / "dagster" / "schedules" / "schedules.db").is_file()
    import duckdb

    with duckdb.connect(str(home / "mindflow.duckdb"), read_only=True) as con:
        tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        assert {"episodes", "nodes", "clusters", "decay_scores", "embedding_cache"} <= tables
        assert con.execute("SELECT count(*) FROM episodes").fetchall()[0][0] == 0
    assert (home / "inbox").is_dir() and (home / "lance").is_dir()
    again = mindflow(home, "init")
    assert again.returncode == 0 and again.stdout == first.stdout, again.stderr
    status = mindflow(home, "status")
    assert status.returncode == 0 and status.stdout.startswith("no memory yet in "), status.stderr


def test_init_and_demo_leave_the_lance_tables_the_data_layout_names(tmp_path):
    home = tmp_path / "home"
    said = entry(fenced("## Data layout"), "lance/")
    assert "`mindflow init` makes only the folder" in said
    made = mindflow(home, "init")
    assert made.returncode == 0, made.stderr
    assert (home / "lance").is_dir() and not any((home / "lance").iterdir())

    demo = mindflow(home, "demo")
    assert demo.returncode == 0, demo.stderr
    left = said.split("`make demo` leaves", 1)[1].replace(" and ", ", ")
    assert sorted(p.stem for p in (home / "lance").glob("*.lance")) == sorted(re.findall(r"[a-z_]+", left))


def parse_table(text: str) -> dict[str, dict[str, str]]:
    """The rows of `mindflow status`, keyed by being, then by column."""
    lines = [line for line in text.splitlines() if line.strip()]
    header = lines[0].split()
    assert set(lines[1].replace(" ", "")) == {"-"}
    return {row.split()[0]: dict(zip(header, row.split(), strict=True)) for row in lines[2:]}


def test_land_run_and_status(tmp_path):
    home = tmp_path / "home"

    landed = mindflow(home, "ingest", str(SAMPLES / "bram" / "2026-10-27.md"), "--being", "bram")
    assert landed.returncode == 0, landed.stderr
    target = home / "inbox" / "bram" / "2026-10-27.md"
    assert landed.stdout.strip() == (
        f"landed {target}: 11 episodes, 1 malformed lines (quarantined when ingested), "
        "0 heartbeats skipped, days 2026-10-27 .. 2026-10-27"
    )
    assert target.read_bytes() == (SAMPLES / "bram" / "2026-10-27.md").read_bytes()
    landed = mindflow(
        home,
        "ingest",
        str(SAMPLES / "ada" / "2026-10-31-openclaw.jsonl"),
        "--being",
        "ada",
        "--format",
        "openclaw",
    )
    assert landed.returncode == 0, landed.stderr
    assert re.search(
        r": 26 episodes, 0 malformed lines .*2 heartbeats skipped, days 2026-10-31 .. 2026-10-31$",
        landed.stdout.strip(),
    )

    ingested = mindflow(home, "run", "ingest")
    assert ingested.returncode == 0, ingested.stderr
    run_line, changes = ingested.stdout.strip().splitlines()
    assert re.fullmatch(r"ingest \[2026-10-27\.\.\.2026-10-31\] run [0-9a-f-]{36}: ok", run_line)
    # 26 OpenClaw messages and 11 daily-log entries; the log's malformed heading is quarantined.
    assert changes.strip() == "episodes: new=37 duplicates=0 quarantined=1 heartbeats_skipped=2"

    # Two independent commands at once, to spare a Dagster start-up.
    procs = [start(home, "run", "ingest"), start(home, "run", "patrol", "--being", "brum")]
    (again_out, again_err), (typo_out, typo_err) = (p.communicate(timeout=240) for p in procs)
    assert procs[0].returncode == 0, again_err
    assert again_out.strip() == "ingest: nothing to do (no pending inbox file)"
    # Patrol of a misspelt being says which beings exist.
    assert procs[1].returncode == 1 and typo_out == ""
    assert (
        typo_err.strip() == "error: unknown being 'brum': it has no ingested episodes yet (known: ada, bram)"
    )

    patrolled = mindflow(home, "run", "patrol")
    assert patrolled.returncode == 0, patrolled.stderr
    run_lines = [line for line in patrolled.stdout.strip().splitlines() if not line.startswith("  ")]
    # Every being in one run over the range of the beings partitions.
    assert [line.split(" run ")[0] for line in run_lines] == ["patrol [ada...bram]"]
    assert all(line.endswith(": ok") for line in run_lines)
    assert "  nodes: new=37 dying=0 revived=0;" in patrolled.stdout

    status = mindflow(home, "status")
    assert status.returncode == 0, status.stderr
    rows = parse_table(status.stdout)
    assert set(rows) == {"ada", "bram"}
    assert (rows["ada"]["episodes"], rows["bram"]["episodes"]) == ("26", "11")
    assert (rows["ada"]["nodes"], rows["bram"]["nodes"]) == ("26", "11")
    assert int(rows["ada"]["clusters"]) >= 2 and int(rows["bram"]["clusters"]) >= 2
