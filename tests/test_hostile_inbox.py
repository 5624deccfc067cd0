"""Hostile inbox lines (issue 13): each is quarantined with its reason, never a crash, never lost.

Lone surrogates, absurd nesting, over-long texts and reused ids reach the inbox through
file drops, `mindflow ingest`, the inbox sensor and POST episodes; every path must take the
good lines next to them and leave nothing behind that stops the next run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

import duckdb
import httpx
import pytest

from mindflow import store
from mindflow.api import create_app
from mindflow.api.episodes import append_episodes
from mindflow.api.server import BackgroundServer
from mindflow.config import Settings, load_settings
from mindflow.inbox import DONE, QUARANTINE, ingest, land_file, pending_days, pending_files
from mindflow.ingest import parse_bytes

REPO = Path(__file__).resolve().parent.parent
MINDFLOW = REPO / ".venv" / "bin" / "mindflow"
DAY = date(2026, 10, 5)
TS = "2026-10-05T10:00:00Z"
DEEP = "[" * 1_000 + "]" * 1_000
NESTING_LIMIT = 100  # mindflow.ingest.MAX_JSON_DEPTH, as the operator reads it in a reason


def line(**fields) -> str:
    """One inbox line; json.dumps writes a lone surrogate as its \\uXXXX escape, as a broken client does."""
    return json.dumps({"ts": TS, "speaker": "lena", **fields})


def deep_line() -> str:
    return line(text="deep")[:-1] + f', "extra": {DEEP}' + "}"


def write(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def quarantined(inbox: Path, being_id: str) -> list[dict]:
    records = []
    for path in sorted((inbox / QUARANTINE / being_id).glob("*.jsonl")):
        records.extend(json.loads(raw) for raw in path.read_text().splitlines() if raw.strip())
    return records


def stored(con, being_id: str) -> dict[str, str]:
    rows = con.execute("SELECT episode_id, text FROM episodes WHERE being_id = ?", [being_id]).fetchall()
    return dict(rows)


def ingest_all(con, settings: Settings):
    return ingest(con, settings.inbox, date(2026, 1, 1), date(2026, 12, 31))


# --------------------------------------------------------------------------- lone surrogates


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"text": "x \udfff"}, "text"),
        ({"text": "fine", "speaker": "x \udfff"}, "speaker"),
        ({"text": "fine", "id": "x \udfff"}, "id"),
        ({"text": "fine", "tags": ["ok", "x \udfff"]}, "tags[1]"),
        ({"text": "fine", "meta": {"notes": ["ok", {"by": "x \udfff"}]}}, "meta.notes[1].by"),
    ],
)
def test_a_lone_surrogate_is_quarantined_naming_its_field_and_every_being_still_ingests(
    settings, con, fields, where
):
    write(
        settings.inbox / "ada" / "chat.jsonl",
        [line(text="before", id="a1"), line(**fields), line(text="after")],
    )
    write(settings.inbox / "bram" / "run.jsonl", [line(text="bram ran on the same day", id="b1")])

    # Planning the runs (what `mindflow run ingest` and the sensor do first) reads every line.
    assert pending_days(settings.inbox) == {"ada": [DAY], "bram": [DAY]}
    report = ingest_all(con, settings)

    assert report.quarantined == 1 and report.new == 3
    assert sorted(stored(con, "ada").values()) == ["after", "before"]
    assert list(stored(con, "bram").values()) == ["bram ran on the same day"]
    [record] = quarantined(settings.inbox, "ada")
    assert record["line"] == 2
    assert record["reason"].startswith(f"text contains an unpaired surrogate \\udfff at field '{where}'")
    # The raw line is kept as it came, escape included, for the operator to fix and re-send.
    assert "\\udfff" in record["raw"]
    # Nothing is left pending, so the next run does not fail on it again.
    assert pending_files(settings.inbox) == []
    assert ingest_all(con, settings).quarantined == 0


@pytest.mark.parametrize(
    ("escaped", "lone"),
    [
        (r"emoji \ud83d\ude00 as a client escapes them", False),
        (r"a backslash then text: \\udfff", False),
        (r"a backslash then a lone one: \\\udfff", True),
        (r"a backslash then a pair: \\\ud83d\ude00", False),
        (r"a pair split by a backslash: \ud83d\\ude00", True),
        (r"two highs, one low: \ud83d\ud83d\ude00", True),
        (r"a low before a high: \ude00\ud83d", True),
    ],
)
def test_surrogate_escapes_are_judged_as_json_decodes_them(escaped, lone):
    raw = '{"ts": "2026-10-05T10:00:00Z", "text": "' + escaped + '"}'
    result = parse_bytes(raw.encode(), "e.jsonl", "ada", "jsonl")
    assert len(result.quarantined) == int(lone) and len(result.episodes) == int(not lone)
    if not lone:
        assert result.episodes[0].text == json.loads(raw)["text"]


# --------------------------------------------------------------------------- nesting


def test_a_deeply_nested_line_is_quarantined_where_it_lands_plans_and_ingests(settings, con, tmp_path):
    source = write(
        tmp_path / "deep.jsonl",
        [line(text="good before", id="a1"), deep_line(), line(text="good after")],
    )
    # An OpenClaw transcript whose first line is the deep one: format detection reads it first.
    write(
        settings.inbox / "bram" / "session.jsonl",
        [
            '{"type": "session", "id": "s1", "meta": ' + DEEP + "}",
            json.dumps({"type": "session", "id": "s1"}),
            json.dumps(
                {
                    "type": "message",
                    "id": "m1",
                    "timestamp": TS,
                    "message": {"role": "user", "content": "hello"},
                }
            ),
        ],
    )

    report = land_file(settings.inbox, source, "ada")
    assert (report.episodes, report.quarantined) == (2, 1)
    assert [f.fmt for f in pending_files(settings.inbox)] == ["jsonl", "openclaw"]
    assert pending_days(settings.inbox) == {"ada": [DAY], "bram": [DAY]}
    ingested = ingest_all(con, settings)

    assert ingested.new == 3 and ingested.quarantined == 2
    assert sorted(stored(con, "ada").values()) == ["good after", "good before"]
    assert list(stored(con, "bram").values()) == ["hello"]
    reason = f"line nested deeper than {NESTING_LIMIT} levels"
    assert [(r["line"], r["reason"]) for r in quarantined(settings.inbox, "ada")] == [(2, reason)]
    assert [(r["line"], r["reason"]) for r in quarantined(settings.inbox, "bram")] == [(1, reason)]
    assert pending_files(settings.inbox) == []


def test_nesting_up_to_the_limit_is_fine_and_brackets_in_text_do_not_count():
    def nested(levels: int) -> str:  # the line's own object is the first level
        arrays = levels - 1
        return line(text=f"nested {levels} deep")[:-1] + f', "extra": {"[" * arrays + "]" * arrays}' + "}"

    data = "\n".join(
        [nested(NESTING_LIMIT), line(text="[" * 5_000 + " a text of brackets"), nested(NESTING_LIMIT + 1)]
    ).encode()
    result = parse_bytes(data, "ok.jsonl", "ada", "jsonl")
    assert [e.source_ref for e in result.episodes] == ["ok.jsonl:1", "ok.jsonl:2"]
    assert [(q.line, q.reason) for q in result.quarantined] == [(3, "line nested deeper than 100 levels")]


def test_the_inbox_sensor_plans_runs_past_poison_lines(home, settings):
    from sensors.inbox import inbox_run_requests

    write(
        settings.inbox / "ada" / "poison.jsonl",
        [
            deep_line(),
            line(text="x \udfff"),
            line(text="y" * 40_000),
            line(text="the good line"),
        ],
    )
    requests, keys, beings, new_days = inbox_run_requests()
    assert beings == ["ada"] and len(keys) == 1 and new_days == [DAY.isoformat()]
    [request] = requests
    assert request.tags["dagster/asset_partition_range_start"] == DAY.isoformat()


# --------------------------------------------------------------------------- hidden and odd file names


def test_hidden_files_land_under_a_name_that_ingestion_reads(settings, con, tmp_path):
    notes = write(tmp_path / ".notes.jsonl", [line(text="from a hidden file", id="n1")])
    daily = tmp_path / "..2026-10-06.md"
    daily.write_text("# Diary\n\n- [event] Walked along the river.\n")

    first = land_file(settings.inbox, notes, "ada")
    second = land_file(settings.inbox, daily, "ada")

    assert first.path == settings.inbox / "ada" / "notes.jsonl"
    assert second.path == settings.inbox / "ada" / "2026-10-06.md" and second.episodes == 1
    assert sorted(f.path.name for f in pending_files(settings.inbox)) == ["2026-10-06.md", "notes.jsonl"]
    assert ingest_all(con, settings).new == 2
    assert sorted(stored(con, "ada").values()) == ["Walked along the river.", "from a hidden file"]
    assert pending_files(settings.inbox) == []


def test_a_file_name_that_is_not_utf8_lands_renamed_or_is_quarantined_when_dropped(settings, con, tmp_path):
    odd = os.fsdecode(b"caf\xe9.jsonl")  # Latin-1 bytes from an old tool
    source = write(tmp_path / odd, [line(text="landed through the CLI", id="c1")])
    assert land_file(settings.inbox, source, "ada").path.name == "caf\ufffd.jsonl"
    write(settings.inbox / "bram" / odd, [line(text="dropped by hand", id="d1")])
    write(settings.inbox / "bram" / "fine.jsonl", [line(text="the other file", id="d2")])

    report = ingest_all(con, settings)

    assert report.new == 2 and report.quarantined == 1
    assert list(stored(con, "ada").values()) == ["landed through the CLI"]
    assert list(stored(con, "bram").values()) == ["the other file"]
    [record] = quarantined(settings.inbox, "bram")
    assert "is not valid UTF-8; rename it" in record["reason"]
    assert pending_files(settings.inbox) == []


# --------------------------------------------------------------------------- reused ids


def test_an_id_reused_with_other_text_is_quarantined_and_an_identical_resend_is_a_duplicate(settings, con):
    write(
        settings.inbox / "ada" / "first.jsonl",
        [
            line(text="the first text", id="a1"),
            line(text="the first text", id="a1"),  # the same line sent twice: a duplicate
            line(text="a second text", id="a1"),
            line(text="another", id="a2"),
        ],
    )
    report = ingest_all(con, settings)
    assert (report.new, report.duplicates, report.quarantined) == (2, 1, 1)
    [record] = quarantined(settings.inbox, "ada")
    assert (record["line"], record["reason"]) == (3, "id already used with other text: 'a1' at line 1")
    assert json.loads(record["raw"])["text"] == "a second text"

    # Later files: against what is stored, and between two files of one run.
    write(
        settings.inbox / "ada" / "second.jsonl",
        [line(text="a third text", id="a1"), line(text="another", id="a2"), line(text="new here", id="a3")],
    )
    write(settings.inbox / "ada" / "third.jsonl", [line(text="not what second said", id="a3")])
    report = ingest_all(con, settings)

    # (Duplicates now count first.jsonl too: a run re-reads the done files of its days.)
    assert (report.new, report.quarantined) == (1, 2)
    assert stored(con, "ada") == {"a1": "the first text", "a2": "another", "a3": "new here"}
    reasons = {(r["file"], r["line"]): r["reason"] for r in quarantined(settings.inbox, "ada")}
    assert (
        reasons[("second.jsonl", 1)] == "id already used with other text: 'a1' is stored from first.jsonl:1"
    )
    assert reasons[("third.jsonl", 1)] == "id already used with other text: 'a3' is at second.jsonl:3"
    assert pending_files(settings.inbox) == []
    # A backfill reads the done files again: the quarantined lines stay out, quietly.
    again = ingest_all(con, settings)
    assert (again.new, again.quarantined) == (0, 0)
    assert stored(con, "ada") == {"a1": "the first text", "a2": "another", "a3": "new here"}
    assert (settings.inbox / DONE / "ada" / "second.jsonl").is_file()


# --------------------------------------------------------------------------- text length


def test_an_over_long_text_is_quarantined_at_landing_and_ingestion(settings, con, tmp_path):
    source = write(
        tmp_path / "dump.jsonl", [line(text="x" * 5_000_000, id="big"), line(text="short and sweet", id="ok")]
    )
    landed = land_file(settings.inbox, source, "ada")
    assert (landed.episodes, landed.quarantined) == (1, 1)

    report = ingest_all(con, settings)

    assert (report.new, report.quarantined) == (1, 1)
    assert stored(con, "ada") == {"ok": "short and sweet"}
    [record] = quarantined(settings.inbox, "ada")
    assert record["reason"] == (
        "text is 5,000,000 characters, over the 32,000 limit (MINDFLOW_MAX_EPISODE_CHARS)"
    )


def test_the_text_limit_is_a_setting_and_covers_every_format(home, monkeypatch):
    monkeypatch.setenv("MINDFLOW_MAX_EPISODE_CHARS", "20")
    limit = load_settings().max_episode_chars
    assert limit == 20
    too_long = "twenty-one characters"
    jsonl = "\n".join([line(text=too_long), line(text="fits")]).encode()
    openclaw = "\n".join(
        json.dumps(
            {"type": "message", "id": f"m{i}", "timestamp": TS, "message": {"role": "user", "content": t}}
        )
        for i, t in enumerate([too_long, "fits"])
    ).encode()
    daily = f"- [event] {too_long}\n- [event] fits\n## 10:00 | fact\n{too_long}\n".encode()
    for data, name, fmt in (
        (jsonl, "a.jsonl", "jsonl"),
        (openclaw, "s.jsonl", "openclaw"),
        (daily, "2026-10-05.md", "daily-md"),
    ):
        result = parse_bytes(data, name, "ada", fmt, max_chars=limit)
        assert [e.text for e in result.episodes] == ["fits"], fmt
        assert {q.reason for q in result.quarantined} == {
            "text is 21 characters, over the 20 limit (MINDFLOW_MAX_EPISODE_CHARS)"
        }, fmt


# --------------------------------------------------------------------------- the CLI, as a user runs it


def test_mindflow_ingest_and_run_ingest_take_the_good_lines_past_every_poison(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = {
        **os.environ,
        "MINDFLOW_HOME": str(home),
        "DAGSTER_HOME": str(home / "dagster"),
        "MINDFLOW_MAX_EPISODE_CHARS": "1000",
        "HF_HUB_OFFLINE": "1",
    }
    poison = write(
        tmp_path / "poison.jsonl",
        [
            line(text="good one", id="g1"),
            deep_line(),
            line(text="x \udfff"),
            line(text="y" * 2_000),
            line(text="other text", id="g1"),
            line(text="good two", id="g2"),
        ],
    )
    clean = write(tmp_path / "clean.jsonl", [line(text="bram on the same day", id="b1")])

    def mindflow(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(MINDFLOW), *args], env=env, cwd=home, capture_output=True, text=True, timeout=300
        )

    landed = mindflow("ingest", str(poison), "--being", "ada")
    assert landed.returncode == 0 and "Traceback" not in landed.stderr, landed.stderr
    assert ": 2 episodes, 4 malformed lines (quarantined when ingested)" in landed.stdout
    assert mindflow("ingest", str(clean), "--being", "bram").returncode == 0

    ran = mindflow("run", "ingest")

    assert ran.returncode == 0, ran.stderr
    assert "episodes: new=3 duplicates=0 quarantined=4" in ran.stdout
    with duckdb.connect(str(home / "mindflow.duckdb"), read_only=True) as db:
        assert stored(db, "ada") == {"g1": "good one", "g2": "good two"}
        assert stored(db, "bram") == {"b1": "bram on the same day"}
    reasons = [r["reason"] for r in quarantined(home / "inbox", "ada")]
    assert reasons[2] == "text is 2,000 characters, over the 1,000 limit (MINDFLOW_MAX_EPISODE_CHARS)"
    assert mindflow("run", "ingest").stdout.strip() == "ingest: nothing to do (no pending inbox file)"


# --------------------------------------------------------------------------- locks


def test_appending_and_ingesting_leave_no_lock_file_among_the_beings_files(settings, con):
    appended = append_episodes(settings.inbox, "ada", [{"ts": TS, "text": "through the API", "id": "p1"}])
    folder = settings.inbox / "ada"
    assert list(folder.iterdir()) == [appended.path]
    assert ingest_all(con, settings).new == 1
    assert list(folder.rglob("*")) == []
    assert not [p for p in (settings.inbox / DONE).rglob("*") if p.name.endswith(".lock")]


def test_a_writer_killed_while_holding_the_inbox_lock_blocks_nobody(settings, con):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from mindflow.inbox import inbox_lock\n"
            "lock = inbox_lock(Path(sys.argv[1]), 'ada', timeout=5)\n"
            "lock.acquire(); print('held', flush=True); time.sleep(60)",
            str(settings.inbox),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()

    started = time.monotonic()
    append_episodes(settings.inbox, "ada", [{"ts": TS, "text": "after the crash", "id": "k1"}])
    assert time.monotonic() - started < 5
    assert ingest_all(con, settings).new == 1
    assert [p for p in (settings.inbox / "ada").rglob("*")] == []


# --------------------------------------------------------------------------- POST episodes over HTTP


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    settings = Settings(home=tmp_path_factory.mktemp("hostile") / "home", _env_file=None)
    with (
        BackgroundServer(create_app(settings)) as server,
        httpx.Client(base_url=server.url, timeout=30) as http,
    ):
        http.settings = settings
        yield http


def post_raw(http: httpx.Client, being: str, body: str) -> httpx.Response:
    # httpx's json= cannot encode a lone surrogate; a broken client sends the escape.
    return http.post(
        f"/v1/beings/{being}/episodes", content=body.encode(), headers={"content-type": "application/json"}
    )


@pytest.mark.parametrize(
    ("episode", "says"),
    [
        ({"ts": TS, "text": "x \udfff"}, "unpaired surrogate \\udfff at field 'text'"),
        ({"ts": TS, "text": "fine", "speaker": "x \udfff"}, "unpaired surrogate \\udfff at field 'speaker'"),
        ({"ts": TS, "text": "fine", "id": "x \udfff"}, "unpaired surrogate \\udfff at field 'id'"),
        ({"ts": TS, "text": "fine", "tags": ["\udfff"]}, "unpaired surrogate \\udfff at field 'tags[0]'"),
        ({"ts": TS, "text": "y" * 40_000}, "text is 40,000 characters, over the 32,000 limit"),
    ],
)
def test_post_episodes_answers_422_naming_the_field_and_keeps_the_connection(api, episode, says):
    good = {"ts": TS, "text": "a good one"}
    response = post_raw(api, "ada", json.dumps({"episodes": [good, episode]}))

    assert response.status_code == 422, response.text
    body = response.json()
    assert says in body["error"] and body["error"].startswith("1 of 2 episodes are invalid")
    assert body["details"][0]["index"] == 1 and says in body["details"][0]["reason"]
    assert not (api.settings.inbox / "ada").exists()
    # The same keep-alive connection serves the next request.
    assert response.headers.get("connection") != "close"
    assert api.get("/healthz").status_code == 200


def test_post_episodes_refuses_an_id_reused_with_other_text(api):
    episodes = [{"ts": TS, "text": "one", "id": "r1"}, {"ts": TS, "text": "two", "id": "r1"}]
    response = api.post("/v1/beings/bram/episodes", json={"episodes": episodes})
    assert response.status_code == 422, response.text
    assert "episodes[1]: id already used with other text: 'r1' at line 1" in response.json()["error"]
    again = api.post("/v1/beings/bram/episodes", json={"episodes": [episodes[0], episodes[0]]})
    assert again.status_code == 200 and again.json()["ids"] == ["r1", "r1"]


def test_post_episodes_refuses_an_id_an_earlier_write_used_with_other_text(api):
    inbox = api.settings.inbox

    def post(*episodes: dict) -> httpx.Response:
        return api.post("/v1/beings/dana/episodes", json={"episodes": list(episodes)})

    def written() -> str:
        return "".join(p.read_text() for p in sorted(inbox.rglob("*.jsonl")) if "dana" in p.parts)

    first = post({"ts": TS, "text": "the first text", "id": "c1"})
    assert first.status_code == 200, first.text
    file = first.json()["file"]
    other = post(
        {"ts": TS, "text": "a fine new one", "id": "c2"}, {"ts": TS, "text": "other text", "id": "c1"}
    )
    assert other.status_code == 422, other.text
    assert other.json()["details"] == [
        {"index": 1, "reason": f"id already used with other text: 'c1' is at {file}:1"}
    ]
    assert "episodes[1]: id already used with other text: 'c1'" in other.json()["error"]
    assert "a fine new one" not in written() and "other text" not in written()
    # A retry (same id, same text) is taken, and ingestion stores it once.
    retry = post({"ts": TS, "text": "the first text", "id": "c1"})
    assert retry.status_code == 200 and retry.json()["ids"] == ["c1"]

    # Another writer's file, dropped a moment ago, counts at once; so do files ingestion moved.
    write(inbox / "dana" / "dropped.jsonl", [line(text="dropped by hand", id="c3")])
    dropped = post({"ts": TS, "text": "not what the file says", "id": "c3"})
    assert dropped.status_code == 422 and "'c3' is at dropped.jsonl:1" in dropped.json()["error"]
    with store.connect(api.settings.duckdb_path) as con:
        assert ingest_all(con, api.settings).new_per_being["dana"] == 2
    assert not (inbox / "dana" / "dropped.jsonl").exists()
    assert post({"ts": TS, "text": "other text", "id": "c1"}).status_code == 422
    assert post({"ts": TS, "text": "dropped by hand", "id": "c3"}).status_code == 200


@pytest.mark.parametrize(
    "body",
    [
        '{"episodes": [{"ts": "2026-10-05T10:00:00Z", "text": ' + DEEP + "}]}",
        '{"episodes": [{"ts": "2026-10-05T10:00:00Z", "text": "x", "extra": ' + DEEP + "}]}",
        '{"episodes": ' + "[" * 1_000 + "]" * 1_000 + "}",
        '{"episodes": [{"ts": "2026-10-05T10:00:00Z", "text": "x", "\\udfff": "y"}]}',
    ],
)
def test_post_episodes_answers_4xx_to_a_deep_or_broken_body(api, body):
    response = post_raw(api, "cleo", body)
    assert 400 <= response.status_code < 500, response.text
    assert response.json()["error"]
    assert not (api.settings.inbox / "cleo").exists()
