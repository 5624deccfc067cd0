"""Tests for mindflow.inbox: landing files and ingesting them into the DuckDB `episodes` table."""

from __future__ import annotations

import json
import re
import shutil
from datetime import date, datetime
from pathlib import Path

import pytest

from mindflow.errors import MindflowError
from mindflow.inbox import DONE, QUARANTINE, ingest, land_file, pending_files

SAMPLES = Path(__file__).resolve().parent.parent / "data" / "samples"


def OCT(day: int) -> date:  # noqa: N802 - a day of the sample month, spelled short
    return date(2026, 10, day)


PROBE = (
    "Read HEARTBEAT.md if it exists (workspace context). Follow it strictly. "
    "If nothing needs attention, reply HEARTBEAT_OK."
)


def write_jsonl(path: Path, records: list) -> Path:
    """Dicts become JSON lines, str and bytes are written verbatim."""
    path.parent.mkdir(parents=True, exist_ok=True)
    chunks = []
    for record in records:
        if isinstance(record, bytes):
            chunks.append(record)
        elif isinstance(record, str):
            chunks.append(record.encode("utf-8"))
        else:
            chunks.append(json.dumps(record).encode("utf-8"))
    path.write_bytes(b"\n".join(chunks) + b"\n")
    return path


def turn(day: int, text: str, **fields) -> dict:
    return {"ts": f"2026-10-{day:02d}T10:00:00Z", "speaker": "lena", "role": "user", "text": text, **fields}


def episodes_by_ref(con, being_id: str | None = None) -> dict[str, dict]:
    sql = (
        "SELECT being_id, episode_id, session_id, ts, day, speaker, role, text, kind, importance, "
        "confidence, tags, trigger, format, source_ref FROM episodes"
    )
    params = []
    if being_id:
        sql += " WHERE being_id = ?"
        params.append(being_id)
    cursor = con.execute(sql, params)
    names = [d[0] for d in cursor.description]
    return {row[-1]: dict(zip(names, row, strict=True)) for row in cursor.fetchall()}


def count(con, where: str = "TRUE", params=()) -> int:
    return con.execute(f"SELECT count(*) FROM episodes WHERE {where}", list(params)).fetchone()[0]


def quarantine_records(inbox: Path, being_id: str) -> list[dict]:
    folder = inbox / QUARANTINE / being_id
    records = []
    for path in sorted(folder.glob("*.jsonl")):
        records.extend(json.loads(line) for line in path.read_text().splitlines() if line.strip())
    return records


def files_in(folder: Path) -> list[str]:
    return (
        sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
        if folder.is_dir()
        else []
    )


# --------------------------------------------------------------------------- the three formats


def test_each_format_lands_as_episodes_with_their_fields(settings, con):
    inbox = settings.inbox
    write_jsonl(
        inbox / "ada" / "log.jsonl",
        [
            turn(
                12,
                "Let's use PKCE for the login.",
                id="c-1",
                kind="decision",
                importance=0.8,
                session_id="s-1",
                tags=["auth"],
            ),
            # 01:30 at +02:00 is still the 12th in UTC: the day follows UTC.
            {
                "ts": "2026-10-13T01:30:00+02:00",
                "speaker": "ada",
                "role": "assistant",
                "text": "Please remember that deploys happen on Thursdays.",
                "confidence": 1,
            },
        ],
    )
    write_jsonl(
        inbox / "ada" / "transcript.jsonl",
        [
            {"type": "session", "version": 3, "id": "oc-7", "timestamp": "2026-10-14T09:00:00Z"},
            {
                "type": "message",
                "id": "m1",
                "timestamp": "2026-10-14T09:00:03.120Z",
                "message": {
                    "role": "user",
                    "content": [{"type": "text", "text": "Can you rerun the flaky test?"}],
                },
            },
            {
                "type": "message",
                "id": "m2",
                "timestamp": "2026-10-14T09:00:06Z",
                "message": {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "Run it fifty times."},
                        {"type": "toolCall", "id": "c1", "name": "bash", "arguments": {"command": "pytest"}},
                        {"type": "text", "text": "Running it fifty times now."},
                    ],
                },
            },
            {
                "type": "message",
                "id": "m3",
                "timestamp": "2026-10-14T09:00:09Z",
                "message": {"role": "toolResult", "content": [{"type": "text", "text": "50 passed"}]},
            },
            {"type": "model_change", "id": "mc1", "timestamp": "2026-10-14T09:01:00Z", "modelId": "x"},
        ],
    )
    (inbox / "bram").mkdir(parents=True)
    (inbox / "bram" / "2026-10-20.md").write_text(
        "# 2026-10-20\n"
        "## 09:30 | decision | i=0.9 | confidence:high | tags:[work, job]\n"
        "Tomas decided to take the Lisbon offer.\n"
        "- [fact|i=0.4] Miso eats at six\n"
        "## Notes\n"
        "free prose under an ordinary heading is a note, not lost\n",
        encoding="utf-8",
    )

    report = ingest(con, inbox, OCT(12), OCT(20))

    assert report.new == 7 and report.quarantined == 0
    assert report.new_per_being == {"ada": 4, "bram": 3}
    rows = episodes_by_ref(con)
    assert set(rows) == {
        "log.jsonl:1",
        "log.jsonl:2",
        "transcript.jsonl:2",
        "transcript.jsonl:3",
        "2026-10-20.md:2",
        "2026-10-20.md:4",
        "2026-10-20.md:6",
    }

    pkce = rows["log.jsonl:1"]
    assert (pkce["being_id"], pkce["episode_id"], pkce["session_id"]) == ("ada", "c-1", "s-1")
    assert (pkce["ts"], pkce["day"]) == (datetime(2026, 10, 12, 10, 0), OCT(12))
    assert (pkce["speaker"], pkce["role"], pkce["kind"], pkce["importance"]) == (
        "lena",
        "user",
        "decision",
        0.8,
    )
    assert (pkce["tags"], pkce["trigger"], pkce["format"]) == (["auth"], None, "jsonl")

    deploy = rows["log.jsonl:2"]
    assert (deploy["ts"], deploy["day"]) == (datetime(2026, 10, 12, 23, 30), OCT(12))
    assert (deploy["speaker"], deploy["kind"], deploy["importance"]) == ("ada", "message", None)
    assert deploy["trigger"] is None  # the assistant's turn: only the user instructs the memory
    assert deploy["episode_id"].startswith("h-")  # no client id: a content hash

    asked, answered = rows["transcript.jsonl:2"], rows["transcript.jsonl:3"]
    assert (asked["episode_id"], asked["session_id"], asked["speaker"]) == ("m1", "oc-7", "user")
    assert asked["ts"] == datetime(2026, 10, 14, 9, 0, 3, 120000) and asked["day"] == OCT(14)
    # Only the text part is what the being said: no thinking, no tool call, no tool result.
    assert (answered["speaker"], answered["text"]) == ("ada", "Running it fifty times now.")
    assert {asked["format"], answered["format"]} == {"openclaw"}

    decision, bullet = rows["2026-10-20.md:2"], rows["2026-10-20.md:4"]
    assert decision["being_id"] == "bram" and decision["speaker"] == "bram"
    assert (decision["ts"], decision["day"]) == (datetime(2026, 10, 20, 9, 30), OCT(20))
    assert (decision["kind"], decision["importance"], decision["confidence"]) == ("decision", 0.9, 0.9)
    assert decision["text"] == "Tomas decided to take the Lisbon offer."
    assert decision["tags"] == ["work", "job"]
    assert (bullet["kind"], bullet["importance"], bullet["text"]) == ("fact", 0.4, "Miso eats at six")
    assert bullet["day"] == OCT(20) and bullet["format"] == "daily-md"
    prose = rows["2026-10-20.md:6"]
    assert (prose["kind"], prose["text"]) == (
        "message",
        "free prose under an ordinary heading is a note, not lost",
    )

    # Every file covered by the run is done.
    assert pending_files(inbox) == []
    assert files_in(inbox / DONE) == ["ada/log.jsonl", "ada/transcript.jsonl", "bram/2026-10-20.md"]


# --------------------------------------------------------------------------- quarantine


def test_every_kind_of_bad_line_is_quarantined_and_the_good_lines_ingested(settings, con):
    path = write_jsonl(
        settings.inbox / "bram" / "mixed.jsonl",
        [
            turn(12, "first good line", id="g-1"),
            '{"ts": "2026-10-12T10:01:00Z", "text": "truncated',
            {"ts": "2026-10-12T10:02:00Z", "speaker": "tomas", "id": "x-1"},
            turn(12, "second good line", id="g-2"),
            {"ts": "2026-02-30T10:00:00Z", "text": "no such day", "id": "x-2"},
            b'{"ts": "2026-10-12T10:03:00Z", "text": "costs 64 \xff\xfe euros", "id": "x-3"}',
            turn(12, "far too important", id="x-4", importance=1.7),
            "",
            turn(12, "third good line after a blank", id="g-3"),
        ],
    )
    raw_lines = path.read_bytes().split(b"\n")

    report = ingest(con, settings.inbox, OCT(12), OCT(12))

    assert report.quarantined == 5
    records = quarantine_records(settings.inbox, "bram")
    assert [(r["file"], r["line"]) for r in records] == [("mixed.jsonl", n) for n in (2, 3, 5, 6, 7)]
    reasons = {r["line"]: r["reason"] for r in records}
    assert reasons[2].startswith("bad JSON")
    assert reasons[3] == "missing text"
    assert reasons[5].startswith("invalid timestamp") and "2026-02-30" in reasons[5]
    assert reasons[6].startswith("invalid UTF-8") and "0xff" in reasons[6]
    assert reasons[7].startswith("importance out of range") and "1.7" in reasons[7]
    # The raw line is kept, so nothing is lost.
    for r in records:
        if r["line"] != 6:
            assert r["raw"] == raw_lines[r["line"] - 1].decode("utf-8")
    assert "costs 64" in next(r["raw"] for r in records if r["line"] == 6)
    assert report.quarantine_files == [str(p) for p in (settings.inbox / QUARANTINE / "bram").glob("*.jsonl")]

    rows = episodes_by_ref(con, "bram")
    assert set(rows) == {"mixed.jsonl:1", "mixed.jsonl:4", "mixed.jsonl:9"}
    assert sorted(r["episode_id"] for r in rows.values()) == ["g-1", "g-2", "g-3"]
    # A file with bad lines is still done: its bad lines live on in quarantine.
    assert files_in(settings.inbox / DONE) == ["bram/mixed.jsonl"]


def test_heartbeats_are_counted_never_stored(settings, con):
    write_jsonl(
        settings.inbox / "ada" / "beats.jsonl",
        [
            turn(12, "Morning, the importer is slow again.", id="a-1"),
            turn(12, PROBE, id="a-2"),
            {"ts": "2026-10-12T10:00:05Z", "speaker": "ada", "text": "HEARTBEAT_OK", "id": "a-3"},
            turn(12, "ping"),
            turn(12, "I edited HEARTBEAT.md to add a disk check.", id="a-4"),
        ],
    )

    report = ingest(con, settings.inbox, OCT(12), OCT(12))

    assert report.heartbeats == 3
    texts = sorted(r["text"] for r in episodes_by_ref(con).values())
    assert texts == ["I edited HEARTBEAT.md to add a disk check.", "Morning, the importer is slow again."]
    assert con.execute("SELECT heartbeats, episodes FROM inbox_files").fetchall() == [(3, 2)]


# --------------------------------------------------------------------------- idempotence


def test_landing_and_ingesting_the_same_file_again_adds_nothing(settings, con, tmp_path):
    source = write_jsonl(
        tmp_path / "src" / "log.jsonl",
        [turn(12, "with a client id", id="c-1"), turn(13, "without a client id"), "{broken"],
    )
    land_file(settings.inbox, source, "ada")
    first = ingest(con, settings.inbox, OCT(12), OCT(13))
    assert first.new == 2
    quarantined = quarantine_records(settings.inbox, "ada")
    assert len(quarantined) == 1

    again = land_file(settings.inbox, source, "ada")
    assert again.path == settings.inbox / "ada" / "log.jsonl" and again.path.is_file()
    second = ingest(con, settings.inbox, OCT(12), OCT(13))

    assert (second.new, second.duplicates) == (0, 2)
    assert count(con) == 2
    assert pending_files(settings.inbox) == []
    assert files_in(settings.inbox / DONE) == ["ada/log.jsonl"]
    assert con.execute("SELECT count(*) FROM inbox_files").fetchone()[0] == 1
    # Its quarantine is rewritten, not appended to.
    assert quarantine_records(settings.inbox, "ada") == quarantined


def test_the_same_client_id_in_two_beings_gives_two_rows(settings, con):
    write_jsonl(settings.inbox / "ada" / "a.jsonl", [turn(12, "ada's first line", id="t-0001")])
    write_jsonl(settings.inbox / "bram" / "b.jsonl", [turn(12, "bram's first line", id="t-0001")])

    report = ingest(con, settings.inbox, OCT(12), OCT(12))

    assert report.new_per_being == {"ada": 1, "bram": 1}
    rows = con.execute(
        "SELECT being_id, text FROM episodes WHERE episode_id = 't-0001' ORDER BY 1"
    ).fetchall()
    assert rows == [("ada", "ada's first line"), ("bram", "bram's first line")]


def test_the_same_content_under_a_new_file_name_adds_nothing(settings, con):
    records = [turn(12, "no id here"), turn(12, "an id here", id="k-1"), turn(13, "and a second day")]
    write_jsonl(settings.inbox / "ada" / "monday.jsonl", records)
    assert ingest(con, settings.inbox, OCT(12), OCT(13)).new == 3

    write_jsonl(settings.inbox / "ada" / "monday-copy.jsonl", records)
    report = ingest(con, settings.inbox, OCT(12), OCT(13))

    assert (report.new, report.duplicates) == (0, 3)
    assert count(con) == 3
    assert pending_files(settings.inbox) == []


# --------------------------------------------------------------------------- ranges and backfills


def test_a_partial_range_ingests_only_its_days_and_leaves_the_file_pending(settings, con):
    write_jsonl(
        settings.inbox / "ada" / "week.jsonl",
        [turn(12, "monday"), turn(13, "tuesday"), turn(14, "wednesday"), turn(14, "wednesday again")],
    )

    report = ingest(con, settings.inbox, OCT(12), OCT(13))

    assert report.new == 2 and report.out_of_range == 2 and report.moved_to_done == 0
    assert con.execute("SELECT DISTINCT day FROM episodes ORDER BY 1").fetchall() == [(OCT(12),), (OCT(13),)]
    assert [f.path.name for f in pending_files(settings.inbox)] == ["week.jsonl"]
    assert files_in(settings.inbox / DONE) == []
    assert con.execute("SELECT count(*) FROM inbox_files").fetchone()[0] == 0

    # A run over all of the file's days finishes it, without duplicating what is there.
    report = ingest(con, settings.inbox, OCT(12), OCT(14))

    assert (report.new, report.duplicates, report.moved_to_done) == (2, 2, 1)
    assert count(con) == 4
    assert pending_files(settings.inbox) == []
    assert files_in(settings.inbox / DONE) == ["ada/week.jsonl"]


def test_a_backfill_rederives_a_day_from_done_files(settings, con):
    write_jsonl(
        settings.inbox / "ada" / "week.jsonl",
        [
            turn(12, "monday"),
            turn(13, "tuesday", id="c-2", kind="fact", importance=0.7),
            turn(14, "wednesday"),
        ],
    )
    (settings.inbox / "bram").mkdir()
    (settings.inbox / "bram" / "2026-10-13.md").write_text("- [event|i=0.5] Ran 10 km by the canal\n")
    ingest(con, settings.inbox, OCT(12), OCT(14))
    assert pending_files(settings.inbox) == []
    before = con.execute(
        "SELECT * EXCLUDE (ingested_at) FROM episodes WHERE day = ? ORDER BY ALL", [OCT(13)]
    ).fetchall()
    assert len(before) == 2

    con.execute("DELETE FROM episodes WHERE day = ?", [OCT(13)])
    assert count(con) == 2
    report = ingest(con, settings.inbox, OCT(13), OCT(13))

    assert report.new == 2
    after = con.execute(
        "SELECT * EXCLUDE (ingested_at) FROM episodes WHERE day = ? ORDER BY ALL", [OCT(13)]
    ).fetchall()
    assert after == before
    assert count(con) == 4
    assert files_in(settings.inbox / DONE) == ["ada/week.jsonl", "bram/2026-10-13.md"]


def test_an_unreadable_file_is_quarantined_whole_and_the_rest_ingests(settings, con):
    notes = settings.inbox / "ada" / "notes.md"
    notes.parent.mkdir(parents=True)
    notes.write_text("# Things to remember\n- [fact] Lena likes tea\n")
    bad_date = settings.inbox / "ada" / "2026-02-30.md"
    bad_date.write_text("- [fact] the 30th of February\n")
    write_jsonl(settings.inbox / "ada" / "log.jsonl", [turn(12, "a fine line")])

    report = ingest(con, settings.inbox, OCT(12), OCT(12))

    assert count(con) == 1 and report.new == 1
    assert report.quarantined == 2
    assert not notes.exists() and not bad_date.exists()
    assert pending_files(settings.inbox) == []
    kept = files_in(settings.inbox / QUARANTINE / "ada")
    assert any(re.fullmatch(r"notes\.md-[0-9a-f]{8}", name) for name in kept)
    assert any(re.fullmatch(r"2026-02-30\.md-[0-9a-f]{8}", name) for name in kept)
    kept_notes = next(settings.inbox / QUARANTINE / "ada" / n for n in kept if n.startswith("notes.md-"))
    assert kept_notes.read_text() == "# Things to remember\n- [fact] Lena likes tea\n"
    reasons = {r["file"]: r["reason"] for r in quarantine_records(settings.inbox, "ada")}
    assert set(reasons) == {"notes.md", "2026-02-30.md"}
    assert "YYYY-MM-DD" in reasons["notes.md"] or "real date" in reasons["notes.md"]
    assert "rename" in reasons["2026-02-30.md"]


# --------------------------------------------------------------------------- land_file


@pytest.mark.parametrize(
    "being_id, fmt, name, expected",
    [
        ("ada", None, "missing.jsonl", "no such file"),
        ("../etc", None, "ok.jsonl", "invalid being id '../etc'"),
        ("Ada", None, "ok.jsonl", "invalid being id 'Ada'"),
        ("", None, "ok.jsonl", "invalid being id ''"),
        ("ada", "xml", "ok.jsonl", "unknown format 'xml'"),
        ("ada", None, "bad.jsonl", "no valid episode found as jsonl (line 1: bad JSON"),
        ("ada", "daily-md", "ok.jsonl", "the name must be a real date like 2026-01-05.md"),
    ],
)
def test_land_file_refuses_what_it_cannot_use(settings, tmp_path, being_id, fmt, name, expected):
    src = tmp_path / "src"
    write_jsonl(src / "ok.jsonl", [turn(12, "fine")])
    (src / "bad.jsonl").write_text("{nope\n" + json.dumps({"ts": "2026-10-12T10:00:00Z"}) + "\n")

    with pytest.raises(MindflowError) as excinfo:
        land_file(settings.inbox, src / name, being_id, fmt)

    assert expected in str(excinfo.value)
    assert files_in(settings.inbox) == []


def test_landing_identical_content_twice_keeps_one_file(settings, tmp_path):
    source = write_jsonl(tmp_path / "log.jsonl", [turn(12, "hello"), turn(13, "again"), turn(13, PROBE)])

    first = land_file(settings.inbox, source, "ada")
    second = land_file(settings.inbox, source, "ada")

    assert first.path == second.path == settings.inbox / "ada" / "log.jsonl"
    assert (first.episodes, first.heartbeats, first.first_day, first.last_day) == (2, 1, OCT(12), OCT(13))
    assert files_in(settings.inbox) == ["ada/log.jsonl"]
    # Different content under the same name is kept beside it, never overwriting.
    write_jsonl(source, [turn(14, "changed")])
    third = land_file(settings.inbox, source, "ada")
    assert third.path != first.path
    assert len(files_in(settings.inbox / "ada")) == 2
    assert json.loads(first.path.read_text().splitlines()[0])["text"] == "hello"


# --------------------------------------------------------------------------- the sample inbox


def _readme() -> str:
    return (SAMPLES / "README.md").read_text()


def _planted_bad_lines() -> set[tuple[str, str, int]]:
    section = _readme().split("Bad lines planted", 1)[1]
    return {(b, f, int(n)) for b, f, n in re.findall(r"`inbox/([a-z0-9_-]+)/([^`:]+):(\d+)`", section)}


def _heartbeat_lines() -> dict[str, set[int]]:
    line = next(line for line in _readme().splitlines() if line.startswith("- Heartbeats"))
    files = {
        "ada JSONL": "2026-10-session-log.jsonl",
        "bram JSONL": "2026-10-bram.jsonl",
        "OpenClaw": "2026-10-31-openclaw.jsonl",
    }
    out = {}
    for label, file_name in files.items():
        numbers = re.search(re.escape(label) + r" lines ([\d, ]+)", line)[1]
        out[file_name] = {int(n) for n in numbers.split(",") if n.strip()}
    return out


def _openclaw_said(path: Path) -> set[int]:
    """Line numbers of OpenClaw message records where the user or the being said something."""
    said = set()
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        record = json.loads(line)
        message = record.get("message") or {}
        if record.get("type") == "message" and message.get("role") in ("user", "assistant"):
            if any(p.get("type") == "text" and p.get("text", "").strip() for p in message.get("content", [])):
                said.add(number)
    return said


def test_the_sample_inbox_ingests_to_the_documented_counts(sample_inbox, con):
    openclaw = SAMPLES / "inbox" / "ada" / "2026-10-31-openclaw.jsonl"
    records = [json.loads(line) for line in openclaw.read_text().splitlines()]
    assert sum(r.get("type") == "message" for r in records) == 36  # as the README says
    heartbeats = _heartbeat_lines()
    openclaw_episodes = len(_openclaw_said(openclaw) - heartbeats[openclaw.name])
    bad_lines = _planted_bad_lines()
    assert len(bad_lines) == 6

    report = ingest(con, sample_inbox, OCT(12), OCT(31))

    per_format = dict(
        ((b, f), n)
        for b, f, n in con.execute("SELECT being_id, format, count(*) FROM episodes GROUP BY ALL").fetchall()
    )
    # README: ada 162 valid JSONL turns; bram 126 valid JSONL turns, 12 + 11 daily-log entries.
    assert per_format == {
        ("ada", "jsonl"): 162,
        ("ada", "openclaw"): openclaw_episodes,
        ("bram", "jsonl"): 126,
        ("bram", "daily-md"): 12 + 11,
    }
    assert report.new_per_being == {"ada": 162 + openclaw_episodes, "bram": 126 + 23}
    md_counts = dict(
        con.execute(
            "SELECT split_part(source_ref, ':', 1), count(*) FROM episodes "
            "WHERE format = 'daily-md' GROUP BY 1"
        ).fetchall()
    )
    assert md_counts == {"2026-10-20.md": 12, "2026-10-27.md": 11}

    assert report.quarantined == len(bad_lines)
    quarantined = {
        (r["being_id"], r["file"], r["line"])
        for being in ("ada", "bram")
        for r in quarantine_records(sample_inbox, being)
    }
    assert quarantined == bad_lines

    assert report.heartbeats == sum(len(lines) for lines in heartbeats.values())
    refs = {r[0] for r in con.execute("SELECT source_ref FROM episodes").fetchall()}
    for file_name, lines in heartbeats.items():
        assert not {f"{file_name}:{n}" for n in lines} & refs

    # Client ids are unique per being only: t-0001..t-0003 exist in both.
    shared = con.execute(
        "SELECT episode_id, count(DISTINCT being_id) FROM episodes "
        "WHERE episode_id IN ('t-0001', 't-0002', 't-0003') GROUP BY 1"
    ).fetchall()
    assert sorted(shared) == [("t-0001", 2), ("t-0002", 2), ("t-0003", 2)]

    # The explicit memory instructions the README lists, and no others.
    triggers = set(
        con.execute("SELECT source_ref, trigger FROM episodes WHERE trigger IS NOT NULL").fetchall()
    )
    listed = set(re.findall(r"(reflect|remember|forget) `([^`]+)`", _readme()))
    push = con.execute(
        "SELECT source_ref FROM episodes WHERE text LIKE '%Please remember that I push my own branches%'"
    ).fetchall()
    assert len(push) == 1
    assert triggers == {(ref, trigger) for trigger, ref in listed} | {(push[0][0], "remember")}

    assert pending_files(sample_inbox) == []
    assert files_in(sample_inbox / DONE) == sorted(
        str(p.relative_to(SAMPLES / "inbox")) for p in (SAMPLES / "inbox").rglob("*") if p.is_file()
    )
    assert con.execute("SELECT min(day), max(day) FROM episodes").fetchone() == (OCT(12), OCT(31))


def test_the_sample_inbox_copied_in_again_adds_nothing(sample_inbox, con):
    ingest(con, sample_inbox, OCT(12), OCT(31))
    total = count(con)
    shutil.copytree(SAMPLES / "inbox", sample_inbox, dirs_exist_ok=True)

    report = ingest(con, sample_inbox, OCT(12), OCT(31))

    assert report.new == 0 and report.duplicates == total
    assert count(con) == total
    assert pending_files(sample_inbox) == []


def test_a_file_that_grew_after_it_was_read_stays_pending(settings, con):
    """Lines the API appends while a run ingests are never moved to .done unread."""
    from mindflow.inbox import _record_and_move, pending_files
    from mindflow.ingest import parse_bytes
    from mindflow.models import utcnow

    path = settings.inbox / "ada" / "api-2026-10-01.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text('{"ts": "2026-10-01T09:00:00Z", "speaker": "Lena", "text": "first line"}\n')
    (landed,) = pending_files(settings.inbox)
    result = parse_bytes(path.read_bytes(), path.name, "ada", "jsonl")
    with path.open("a") as fh:  # an API write lands between the read and the move
        fh.write('{"ts": "2026-10-01T09:01:00Z", "speaker": "Lena", "text": "second line"}\n')
    assert _record_and_move(con, settings.inbox, landed, result, utcnow()) is False
    assert path.exists() and len(path.read_text().splitlines()) == 2
    report = ingest(con, settings.inbox, date(2026, 10, 1), date(2026, 10, 1))
    assert (report.new, report.moved_to_done) == (2, 1)
    assert not path.exists()


def test_a_file_is_parsed_once_per_content_and_again_when_it_changes(settings):
    """Planning an ingest and running it parse the same pending file once; new bytes parse anew."""
    from mindflow.inbox import parse_landed, pending_days

    path = settings.inbox / "ada" / "notes.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text('{"ts": "2026-10-01T09:00:00Z", "speaker": "Lena", "text": "first line"}\n')
    assert pending_days(settings.inbox) == {"ada": [OCT(1)]}
    (landed,) = pending_files(settings.inbox)
    planned = parse_landed(landed)
    assert parse_landed(landed) is planned and len(planned.episodes) == 1

    # A file that grows between its hashing and its parse: the parse answers for the bytes
    # read, but is not kept under the key of the content that was hashed.
    other = settings.inbox / "ada" / "later.jsonl"
    other.write_text('{"ts": "2026-10-03T09:00:00Z", "speaker": "Lena", "text": "third line"}\n')
    hashed = next(f for f in pending_files(settings.inbox) if f.path == other)
    with other.open("a") as fh:
        fh.write('{"ts": "2026-10-04T09:00:00Z", "speaker": "Lena", "text": "fourth line"}\n')
    grown = parse_landed(hashed)
    assert [e.day for e in grown.episodes] == [OCT(3), OCT(4)]
    assert parse_landed(hashed) is not grown
    current = next(f for f in pending_files(settings.inbox) if f.path == other)
    assert current.sha256 != hashed.sha256
    assert parse_landed(current) is parse_landed(current)
    assert pending_days(settings.inbox) == {"ada": [OCT(1), OCT(3), OCT(4)]}
