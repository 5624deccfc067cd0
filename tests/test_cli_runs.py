"""Runs the CLI starts are runs of the job rebuilt from the code location: listed under their job and
re-executed through Dagster's public API; with a Dagster UI configured, they are the UI's own runs
(listed, on the timeline, re-executed from the UI over GraphQL); CLI commands that change an asset
outside a run report its materialization."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import dagster as dg
import pytest
import requests

from tests.test_cli import MINDFLOW, REPO, SAMPLES, env_for, mindflow

DAGSTER = REPO / ".venv" / "bin" / "dagster"
RUNS_OF_JOB = """query($filter: RunsFilter) { runsOrError(filter: $filter) { ... on Runs { results {
  runId status repositoryOrigin { repositoryLocationName repositoryName } } } } }"""
REEXECUTE = """mutation($params: ReexecutionParams) { launchPipelineReexecution(reexecutionParams: $params) {
  __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message } } }"""
RUN_STATUS = """query($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }"""


def _instance(home: Path) -> dg.DagsterInstance:
    (home / "dagster").mkdir(parents=True, exist_ok=True)  # what the UI opens, run or not
    return dg.DagsterInstance.from_config(str(home / "dagster"))


@pytest.fixture
def patrolled(tmp_path) -> tuple[Path, str]:
    """A home where `mindflow run patrol` ran once (a finished process): its run id."""
    home = tmp_path / "home"
    landed = mindflow(home, "ingest", str(SAMPLES / "bram" / "2026-10-20.md"), "--being", "bram")
    assert landed.returncode == 0, landed.stderr
    for job in ("ingest", "patrol"):
        ran = mindflow(home, "run", job)
        assert ran.returncode == 0, ran.stderr
    (line,) = [line for line in ran.stdout.splitlines() if line.startswith("patrol [bram] run ")]
    return home, line.split()[3].rstrip(":")


def test_a_cli_run_is_listed_under_its_job_and_re_executes(patrolled, monkeypatch):
    """A finished `mindflow run patrol` is a run of its job on the instance, rebuilt from the code
    location: another process re-executes it through Dagster's public API."""
    from mindflow import launch

    home, run_id = patrolled
    monkeypatch.setenv("MINDFLOW_HOME", str(home))
    monkeypatch.setenv("DAGSTER_HOME", str(home / "dagster"))
    aged = _session_counts(home)
    assert aged and set(aged.values()) == {1}  # the run's patrol session
    with _instance(home) as instance:
        run = instance.get_run_by_id(run_id)
        assert run.tags["dagster/asset_partition_range_start"] == "bram"  # every known being
        assert run.job_code_origin is not None  # what a re-execution rebuilds the job from
        # The tag the UI's Runs tab of the job filters by, naming the location workspace.yaml names.
        assert run.tags[".dagster/repository"] == f"__repository__@{launch.LOCATION}"
        assert f"location_name: {launch.LOCATION}\n" in (REPO / "workspace.yaml").read_text()
        assert [r.run_id for r in instance.get_runs(dg.RunsFilter(job_name="patrol"))] == [run_id]
        again = launch.execute(instance, "patrol", run_config={}, tags={}, parent_run_id=run_id)
        assert again.success
        runs = instance.get_runs(dg.RunsFilter(job_name="patrol"))
        assert {(r.run_id, r.parent_run_id) for r in runs} == {(run_id, None), (again.run_id, run_id)}
        assert instance.get_run_by_id(again.run_id).tags["dagster/asset_partition_range_end"] == "bram"
        assert instance.get_run_by_id(again.run_id).tags[".dagster/repository"] == "__repository__@mindflow"
        # The re-execution is the same patrol session (its root run): memories do not age twice.
        assert _session_counts(home) == aged
        (nodes,) = [m.metadata for m in again.asset_materializations_for_node("nodes")]
        assert (nodes["sessions_advanced"].value, nodes["sessions_already_counted"].value) == (0, 1)
    ran = mindflow(home, "run", "patrol")  # a new session
    assert ran.returncode == 0, ran.stderr
    assert _session_counts(home) == {node_id: count + 1 for node_id, count in aged.items()}


def _session_counts(home: Path) -> dict[str, int]:
    """Each active node's session count, read from the home's DuckDB file."""
    import duckdb

    con = duckdb.connect(str(home / "mindflow.duckdb"), read_only=True)
    try:
        return dict(
            con.execute("SELECT node_id, session_count FROM nodes WHERE status = 'active'").fetchall()
        )
    finally:
        con.close()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def ui(patrolled):
    """`dagster dev` (the UI and its daemon, as `make dev` starts them) on the patrolled home."""
    home, _ = patrolled
    port = _free_port()
    proc = subprocess.Popen(
        [str(DAGSTER), "dev", "-w", str(REPO / "workspace.yaml"), "-h", "127.0.0.1", "-p", str(port)],
        env=env_for(home), cwd=home, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            try:
                if requests.get(f"{url}/server_info", timeout=1).ok:
                    break
            except requests.ConnectionError:
                pass
            assert proc.poll() is None, "dagster dev exited"
            time.sleep(0.5)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _graphql(url: str, query: str, **variables) -> dict:
    answer = requests.post(f"{url}/graphql", json={"query": query, "variables": variables}, timeout=60)
    answer.raise_for_status()
    return answer.json()["data"]


def _runs_tab(url: str, job: str) -> dict[str, dict]:
    """The runs the UI's Runs tab of `job` lists: its job name and the code location's repository tag."""
    tag = {"key": ".dagster/repository", "value": "__repository__@mindflow"}
    found = _graphql(url, RUNS_OF_JOB, filter={"pipelineName": job, "tags": [tag]})
    return {run["runId"]: run for run in found["runsOrError"]["results"]}


def test_cli_runs_through_the_ui_are_its_own_runs(patrolled, ui):
    """With MINDFLOW_DAGSTER_URL, `mindflow run` submits to the UI: the run is in the job's Runs tab
    with the workspace origin the timeline and the UI's Re-execute need, and re-executes from there."""
    home, in_process = patrolled
    # A run the CLI executed itself is listed in the job's Runs tab too (the UI cannot re-execute it).
    assert in_process in _runs_tab(ui, "patrol")

    ran = subprocess.run(
        [str(MINDFLOW), "run", "patrol"], env={**env_for(home), "MINDFLOW_DAGSTER_URL": ui}, cwd=home,
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    (line,) = [line for line in ran.stdout.splitlines() if line.startswith("patrol [bram] run ")]
    run_id = line.split()[3].rstrip(":")
    assert line.endswith(": ok") and f"run {run_id} started by the Dagster UI" in ran.stderr
    listed = _runs_tab(ui, "patrol")[run_id]
    assert listed["status"] == "SUCCESS"
    assert listed["repositoryOrigin"] == {
        "repositoryLocationName": "mindflow",
        "repositoryName": "__repository__",
    }

    # The UI's "Re-execute > All steps" button, over GraphQL.
    again = _graphql(ui, REEXECUTE, params={"parentRunId": run_id, "strategy": "ALL_STEPS"})
    again = again["launchPipelineReexecution"]
    assert again["__typename"] == "LaunchRunSuccess", again
    child = again["run"]["runId"]
    for _ in range(600):
        status = _graphql(ui, RUN_STATUS, id=child)["runOrError"]["status"]
        if status in ("SUCCESS", "FAILURE", "CANCELED"):
            break
        time.sleep(0.5)
    assert status == "SUCCESS"
    with _instance(home) as instance:
        assert instance.get_run_by_id(child).parent_run_id == run_id


def test_a_dagster_url_where_no_ui_answers_is_a_clear_error(patrolled):
    home, _ = patrolled
    url = f"http://127.0.0.1:{_free_port()}"
    ran = subprocess.run(
        [str(MINDFLOW), "run", "patrol"], env={**env_for(home), "MINDFLOW_DAGSTER_URL": url}, cwd=home,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert ran.returncode == 1
    assert f"no Dagster UI answers at MINDFLOW_DAGSTER_URL={url}" in ran.stderr
    assert "Traceback" not in ran.stderr


def test_run_job_records_a_run_of_the_code_location(sample_inbox, settings):
    """In process too (what `mindflow demo` does): the run carries the job's code origin."""
    from mindflow.runner import run_job

    (ingest,) = run_job(settings, "ingest", partition="2026-10-20")
    instance = dg.DagsterInstance.get()
    run = instance.get_run_by_id(ingest.run_id)
    assert run.tags["dagster/asset_partition_range_start"] == "2026-10-20"
    assert run.job_code_origin is not None
    assert [r.run_id for r in instance.get_runs(dg.RunsFilter(job_name="ingest"))] == [ingest.run_id]
    assert "episodes: new=" in ingest.changes


def test_a_run_in_process_leaves_the_objects_before_it_out_of_full_collections(
    sample_inbox, settings, monkeypatch
):
    import gc

    from mindflow import launch
    from mindflow.runner import run_job

    frozen = []
    execute = launch.execute

    def counted(*args, **kwargs):
        frozen.append(gc.get_freeze_count())  # the objects alive before the run, out of the passes
        return execute(*args, **kwargs)

    monkeypatch.setattr(launch, "execute", counted)
    (ingest,) = run_job(settings, "ingest", partition="2026-10-20")
    assert ingest.success
    assert frozen and frozen[0] > 100_000  # Dagster's imports alone
    assert gc.get_freeze_count() == 0  # given back after the run


def test_ebooks_reindex_reports_ebook_chunks_materialized(home, settings):
    from mindflow.runner import run_job

    settings.ebooks.mkdir(parents=True)
    (settings.ebooks / "bees.md").write_text("# Bees\n\nBees keep the hive warm in winter by shivering.\n")
    ran = mindflow(home, "ebooks", "reindex", "--no-progress")
    assert ran.returncode == 0, ran.stderr
    with _instance(home) as instance:
        latest = instance.get_latest_materialization_event(dg.AssetKey("ebook_chunks"))
        assert latest is not None and latest.run_id == ""  # before: "Never materialized"
        reported = latest.asset_materialization.metadata
        assert reported["documents"].value == 1 and reported["new"].value == 1
        assert reported["dagster/row_count"].value == reported["chunks"].value > 0

    # The same keys as a run of the asset reports, but the run's check of the critical files.
    (summary,) = run_job(settings, "ebook_reindex")
    by_run = dg.DagsterInstance.get().get_latest_materialization_event(dg.AssetKey("ebook_chunks"))
    assert by_run.run_id == summary.run_id
    assert set(reported) <= set(by_run.asset_materialization.metadata)
    assert by_run.asset_materialization.metadata["unchanged"].value == 1


def test_rollback_of_story_reports_its_materialization(home, settings):
    from mindflow import audit, store

    with store.connect(settings.duckdb_path) as con:
        for n in range(2):
            audit.write_file(
                settings, "ada/STORY.md", f"version {n}\n", action="EDIT", summary=f"v{n}",
                actor="narrative", trigger="t", run_id=f"r{n}", con=con,
            )  # fmt: skip
    first = audit.file_history(settings, "ada/STORY.md")[-1][0]
    ran = mindflow(home, "rollback", "ada/STORY.md", "--to", first[:10])
    assert ran.returncode == 0, ran.stderr
    with _instance(home) as instance:
        latest = instance.get_latest_materialization_event(dg.AssetKey("story"))
        assert latest is not None and latest.dagster_event.partition == "ada"
        meta = latest.asset_materialization.metadata
        assert meta["restored_from"].value == first and meta["mode"].value == "rollback"
        # A file no asset writes (a persona) reports nothing.
        assert instance.get_latest_materialization_event(dg.AssetKey("core_memory")) is None


def test_decay_as_of_a_day_before_the_memories_says_it_scored_none(patrolled):
    """A decay run as of a day before any memory was formed scores nothing; its printout said the
    table's current status counts as though it had scored them."""
    import re

    home, _ = patrolled
    earlier = mindflow(home, "run", "decay", "--partition", "2026-10-01")
    assert earlier.returncode == 0, earlier.stderr
    summary = re.search(r"decay_scores: as_of=(\S+) (.*)", earlier.stdout)
    assert summary and summary.group(1).startswith("2026-10-02T00:00:00"), earlier.stdout
    counts = dict(pair.split("=") for pair in summary.group(2).split(";")[0].split())
    later = int(counts.pop("formed_later"))
    assert later > 0 and counts == {
        "scored": "0", "new": "0", "active": "0", "fading": "0", "dormant": "0", "archived": "0",
    }  # fmt: skip

    today = mindflow(home, "run", "decay")
    assert today.returncode == 0, today.stderr
    summary = re.search(r"decay_scores: as_of=\S+ (.*)", today.stdout)
    counts = dict(pair.split("=") for pair in summary.group(1).split(";")[0].split())
    assert (counts["scored"], counts["new"], counts["formed_later"]) == (str(later), str(later), "0")
    assert sum(int(counts[s]) for s in ("active", "fading", "dormant", "archived")) == later


def test_patrol_runs_a_range_of_beings(tmp_path):
    """`--partition FIRST...LAST` patrols those beings in one run, as ingest takes a range of days;
    it was refused as an invalid being id."""
    from tests.test_cli import parse_table

    home = tmp_path / "home"
    for being in ("ada", "bram", "cleo"):
        landed = mindflow(home, "ingest", str(SAMPLES / "bram" / "2026-10-20.md"), "--being", being)
        assert landed.returncode == 0, landed.stderr
    ingested = mindflow(home, "run", "ingest")
    assert ingested.returncode == 0, ingested.stderr

    backwards = mindflow(home, "run", "patrol", "--partition", "cleo...bram")
    assert backwards.returncode == 1 and backwards.stdout == ""
    assert backwards.stderr == (
        "error: invalid range 'cleo...bram': bram comes before cleo among the beings (ada, bram, cleo)\n"
    )
    unknown = mindflow(home, "run", "patrol", "--partition", "bram...dora")
    assert unknown.returncode == 1 and unknown.stderr.startswith("error: unknown being 'dora'")

    ran = mindflow(home, "run", "patrol", "--partition", "bram...cleo")
    assert ran.returncode == 0, ran.stderr
    (line,) = [line for line in ran.stdout.splitlines() if not line.startswith("  ")]
    assert line.startswith("patrol [bram...cleo] run ") and line.endswith(": ok")
    rows = parse_table(mindflow(home, "status").stdout)
    assert rows["ada"]["nodes"] == "0"
    assert rows["bram"]["nodes"] == rows["cleo"]["nodes"] == rows["bram"]["episodes"] != "0"
