"""Recall events: durable appends from concurrent writers, and a fold that applies each event once.

Real files in tmp_path, real DuckDB, the real patrol and decay registration; writers in
other processes are real Python processes.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from datetime import date, datetime, timedelta
from pathlib import Path

import dagster as dg
import duckdb
import pytest

from mindflow import decay, patrol, store
from mindflow.errors import MindflowError
from mindflow.events import (
    RecallEvent,
    append_events,
    event_files,
    fold_events,
    increments_for,
    read_events,
    recall_event,
    unread_files,
)
from mindflow.files import atomic_write
from mindflow.inbox import episodes_table
from mindflow.models import Episode
from mindflow.resources import DuckDBResource, EmbeddingResource

REPO = Path(__file__).resolve().parent.parent

ADA = "ada"
BOB = "bob"
TS = datetime(2026, 1, 5, 9, 0, 0)
NOW = datetime(2026, 1, 6, 3, 0, 0)
T1, T2, T3 = (datetime(2026, 1, 6, 10, 0, 0) + timedelta(minutes=m) for m in (0, 5, 30))
LATER = datetime(2026, 1, 7, 3, 0, 0)


def event(being, refs, increments, ts=T1, tool="recall", event_id=None):
    return RecallEvent(
        event_id=event_id or os.urandom(16).hex(),
        being_id=being,
        tool=tool,
        memory_refs=tuple(refs),
        increments=tuple(increments),
        ts=ts,
    )


def make_memories(con, embedder, being, texts):
    """Episodes -> scenes -> nodes through the patrol, with their decay rows; returns node ids."""
    episodes = [
        Episode(episode_id=f"{being}{i}", being_id=being, ts=TS, speaker="sam", role="user", text=t)
        for i, t in enumerate(texts)
    ]
    con.register("test_episodes", episodes_table(episodes))
    try:
        con.execute("INSERT INTO episodes SELECT *, ?::TIMESTAMP FROM test_episodes", [NOW])
    finally:
        con.unregister("test_episodes")
    patrol.run_patrol(con, being, embedder, now=NOW)
    decay.register_nodes(con, NOW, decay.DecayParams())
    rows = con.execute(
        "SELECT n.scene.action, n.node_id FROM nodes n WHERE n.being_id = ?", [being]
    ).fetchall()
    return [dict(rows)[t] for t in texts]


def reinforcement(con, node_ids):
    """(reactivation_count, last_activated, access_count, last_accessed) per node."""
    rows = con.execute(
        "SELECT n.node_id, n.reactivation_count, n.last_activated, d.access_count, d.last_accessed "
        "FROM nodes n LEFT JOIN decay_scores d ON d.memory_ref = n.node_id "
        "WHERE list_contains(?, n.node_id)",
        [node_ids],
    ).fetchall()
    return {r[0]: r[1:] for r in rows}


def folded(con):
    return dict(con.execute("SELECT event_id, being_id FROM folded_events").fetchall())


# --------------------------------------------------------------------------- writing and reading


def test_increments_follow_the_seed_table():
    statuses = ["active", "dying", "dormant", "dead"]
    assert increments_for("recall", statuses) == [1, 1, 1, 0]
    assert increments_for("resonance", statuses) == [1, 1, 1, 0]
    assert increments_for("recall_memory", statuses) == [1, 1, 1, 2]
    assert increments_for("search_memory", statuses) == [1, 1, 1, 2]
    with pytest.raises(MindflowError, match="unknown recall tool 'grep'"):
        increments_for("grep", statuses)
    made = recall_event(ADA, "search_memory", ["n-a", "n-b"], ["active", "dead"], ts=T1)
    assert (made.increments, made.ts, len(made.event_id)) == ((1, 2), T1, 32)


def test_append_and_read_round_trip(tmp_path):
    events_dir = tmp_path / "events"
    first = [event(ADA, ["n-ü", "n-2"], [1, 2], tool="search_memory"), event(BOB, [], [])]
    second = [event(ADA, ["n-3"], [1], ts=datetime(2026, 1, 7, 0, 0, 1))]

    append_events(events_dir, first)
    append_events(events_dir, second)

    assert list(read_events(events_dir)) == first + second
    own_file = f"{socket.gethostname()}-{os.getpid()}.jsonl"
    assert sorted(str(p.relative_to(events_dir)) for p in events_dir.rglob("*.jsonl")) == [
        f"2026-01-06/{own_file}",
        f"2026-01-07/{own_file}",
    ]
    assert list(read_events(events_dir, since_day=date(2026, 1, 7))) == second
    assert list(read_events(tmp_path / "missing")) == []
    with pytest.raises(MindflowError, match="one non-negative increment per memory ref"):
        append_events(events_dir, [event(ADA, ["n-1", "n-2"], [1])])
    assert len(list(read_events(events_dir))) == 3


WRITER = """
import sys
from datetime import datetime
from pathlib import Path
from mindflow.events import RecallEvent, append_events

events_dir, tag = Path(sys.argv[1]), sys.argv[2]
for i in range(500):
    append_events(events_dir, [RecallEvent(f"{tag}-{i:04d}", "ada", "recall", (f"n-{tag}-{i}",) * 3,
                                           (1, 1, 1), datetime(2026, 1, 6, 10, 0, 0))])
"""


def test_two_processes_appending_at_once_lose_and_tear_nothing(tmp_path):
    events_dir = tmp_path / "events"
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(events_dir), tag], stderr=subprocess.PIPE)
        for tag in ("p", "q")
    ]
    for writer in writers:
        _, err = writer.communicate(timeout=60)
        assert writer.returncode == 0, err.decode()

    files = sorted(events_dir.rglob("*.jsonl"))
    assert len(files) == 2  # one per process
    lines = [line for f in files for line in f.read_text().splitlines()]
    assert len(lines) == 1000 and all(json.loads(line)["increments"] == [1, 1, 1] for line in lines)
    ids = sorted(e.event_id for e in read_events(events_dir))
    assert ids == sorted(f"{tag}-{i:04d}" for tag in ("p", "q") for i in range(500))


def test_threads_of_one_process_share_its_file_without_tearing(tmp_path):
    events_dir = tmp_path / "events"

    def write(tag):
        for i in range(100):
            append_events(events_dir, [event(ADA, [f"n-{tag}-{i}"] * 20, [1] * 20, event_id=f"{tag}{i}")])

    threads = [threading.Thread(target=write, args=(tag,)) for tag in "abcd"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    (only,) = events_dir.rglob("*.jsonl")
    assert len(only.read_text().splitlines()) == 400
    assert len({e.event_id for e in read_events(events_dir)}) == 400


def test_an_append_waits_for_a_rewrite_holding_the_files_lock(tmp_path):
    """A forget rewrites an event file under `filelock.FileLock(<file>.lock)`; the server's append
    (a flock of the same file) waits for it and lands in the rewritten file, nothing lost."""
    from filelock import FileLock

    from mindflow.files import append_locked, atomic_write

    path = tmp_path / "events" / "2026-01-05" / "host-1.jsonl"
    append_locked(path, b"old\n")
    appended = threading.Event()

    def append():
        append_locked(path, b"new\n")
        appended.set()

    writer = threading.Thread(target=append)
    with FileLock(str(path) + ".lock"):
        writer.start()
        assert not appended.wait(0.5)  # held off by the rewrite
        atomic_write(path, b"rewritten\n")
    writer.join(timeout=10)
    assert appended.is_set()
    assert path.read_text() == "rewritten\nnew\n"


def test_a_torn_last_line_is_skipped_and_the_next_append_starts_a_new_line(tmp_path, caplog):
    events_dir = tmp_path / "events"
    whole = [event(ADA, ["n-1"], [1]), event(ADA, ["n-2"], [1])]
    append_events(events_dir, whole)
    (path,) = events_dir.rglob("*.jsonl")
    torn = json.dumps({"event_id": "torn", "being_id": ADA, "tool": "recall", "memory_refs": ["n-3"]})
    with path.open("a") as f:
        f.write(torn[: len(torn) // 2])  # a crash mid-write: half a line, no newline

    assert list(read_events(events_dir)) == whole
    assert f"{path}:3" in caplog.text

    # The same file appended to again (pid reuse): the new event is not glued to the torn one.
    after = [event(ADA, ["n-4"], [1])]
    append_events(events_dir, after)
    assert list(read_events(events_dir)) == whole + after


# --------------------------------------------------------------------------- folding


def test_fold_applies_each_event_exactly_once(con, embedder, tmp_path):
    events_dir = tmp_path / "events"
    live, dead, other = make_memories(
        con, embedder, ADA, ["Walked the dog by the river", "Lost my keys at the gym", "Tea time"]
    )
    con.execute("UPDATE nodes SET status = 'dead' WHERE node_id = ?", [dead])
    before = reinforcement(con, [live, dead, other])
    assert before[live] == (0, None, 1, NOW)  # creation counts as the first access

    append_events(
        events_dir,
        [
            event(ADA, [live], increments_for("recall", ["active"]), ts=T1),
            event(ADA, [live], increments_for("recall", ["active"]), ts=T3),
            event(ADA, [live, dead], increments_for("search_memory", ["active", "dead"]), ts=T2),
        ],
    )

    report = fold_events(con, events_dir, ADA, LATER)

    assert (report.events, report.refs, report.reactivations, report.unknown) == (3, 2, 5, 0)
    after = reinforcement(con, [live, dead, other])
    assert after[live] == (1 + 1 + 1, T3, 1 + 3, T3)
    assert after[dead] == (2, T2, 1 + 1, T2)
    assert after[other] == before[other]
    assert set(folded(con).values()) == {ADA} and len(folded(con)) == 3
    # Reinforcement alone does not revive: that is left to LLM consolidation.
    assert con.execute("SELECT status FROM nodes WHERE node_id = ?", [dead]).fetchall() == [("dead",)]

    again = fold_events(con, events_dir, ADA, LATER + timedelta(days=1))

    assert (again.events, again.refs, again.reactivations, again.unknown) == (0, 0, 0, 0)
    assert reinforcement(con, [live, dead, other]) == after

    # An event appended twice (a retried write) counts once; an older ts never moves time back.
    duplicate = event(ADA, [live], [1], ts=T1)
    append_events(events_dir, [duplicate, duplicate])
    assert fold_events(con, events_dir, ADA, LATER).events == 1
    assert reinforcement(con, [live])[live] == (4, T3, 5, T3)


def unread(con, events_dir, being=ADA):
    return [f.name for f in unread_files(con, event_files(events_dir), "recall", being)]


def test_a_fold_reads_only_the_files_new_or_changed_since_the_last(con, embedder, tmp_path):
    """Events files only grow; each fold notes the files it read (size and mtime) with its events,
    and the next reads only new and changed ones, so a night's fold does not grow with the year."""
    events_dir = tmp_path / "events"
    (node,) = make_memories(con, embedder, ADA, ["Swam in the lake at dawn"])
    append_events(events_dir, [event(ADA, [node], [1], ts=T1, event_id="e" * 32)])
    (old,) = events_dir.rglob("*.jsonl")
    assert unread(con, events_dir) == [f"{T1.date()}/{old.name}"]

    assert fold_events(con, events_dir, ADA, LATER).events == 1
    assert unread(con, events_dir) == []

    # The next day's file is new: only it is read.
    next_day = T1 + timedelta(days=1)
    append_events(events_dir, [event(ADA, [node], [1], ts=next_day)])
    assert unread(con, events_dir) == [f"{next_day.date()}/{old.name}"]
    assert fold_events(con, events_dir, ADA, LATER).events == 1

    # The old file, unchanged to the fold's eye (same inode, size and mtime), is not read again:
    # an event put in it behind the fold's back, byte for byte as long, is not folded ...
    stat = old.stat()
    old.write_text(old.read_text().replace("e" * 32, "f" * 32))
    os.utime(old, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert old.stat().st_ino == stat.st_ino
    assert fold_events(con, events_dir, ADA, LATER).events == 0
    # ... until it changes: replaced as a forget rewrites it (a new inode; here with the same
    # bytes and mtime), it is read whole, and what was folded stays folded ...
    atomic_write(old, old.read_bytes())
    os.utime(old, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert fold_events(con, events_dir, ADA, LATER).events == 1
    # ... and appended to, the same.
    append_events(events_dir, [event(ADA, [node], [1], ts=T2)])
    assert fold_events(con, events_dir, ADA, LATER).events == 1
    assert reinforcement(con, [node])[node][0] == 4

    # Bob's fold has read nothing yet; a file gone is forgotten by the next fold that reads.
    assert len(unread(con, events_dir, BOB)) == 2
    old.unlink()
    append_events(events_dir, [event(ADA, [node], [1], ts=next_day)])
    assert fold_events(con, events_dir, ADA, LATER).events == 1
    assert [
        r[0] for r in con.execute("SELECT file FROM folded_event_files WHERE being_id = ?", [ADA]).fetchall()
    ] == [f"{next_day.date()}/{old.name}"]


def test_a_retried_patrol_folds_nothing_twice_and_beings_fold_their_own(con, embedder, tmp_path):
    events_dir = tmp_path / "events"
    (ada_node,) = make_memories(con, embedder, ADA, ["Planted tulips in the garden"])
    (bob_node,) = make_memories(con, embedder, BOB, ["Fixed the flaky deployment test"])
    append_events(
        events_dir,
        [
            event(ADA, [ada_node, "n-forgotten"], [1, 1], ts=T1),
            event(BOB, [bob_node], [1], ts=T2),
            # Ada's event naming Bob's node must not touch it: beings are isolated.
            event(ADA, [bob_node], [2], tool="search_memory", ts=T2),
        ],
    )

    first = patrol.run_patrol(con, ADA, embedder, now=LATER, events_dir=events_dir)
    retried = patrol.run_patrol(con, ADA, embedder, now=LATER, events_dir=events_dir)

    assert first[0].step == "⓪ recall events"
    assert first[0].counts == {"events": 2, "reinforced": 1, "reactivations": 1, "unknown": 2}
    assert retried[0].counts == {"events": 0, "reinforced": 0, "reactivations": 0, "unknown": 0}
    assert reinforcement(con, [ada_node])[ada_node] == (1, T1, 2, T1)
    assert reinforcement(con, [bob_node])[bob_node] == (0, None, 1, NOW)  # waits for Bob's patrol
    assert sorted(folded(con).values()) == [ADA, ADA]

    bob = patrol.run_patrol(con, BOB, embedder, now=LATER, events_dir=events_dir)

    assert bob[0].counts == {"events": 1, "reinforced": 1, "reactivations": 1, "unknown": 0}
    assert reinforcement(con, [bob_node])[bob_node] == (1, T2, 2, T2)
    assert reinforcement(con, [ada_node])[ada_node] == (1, T1, 2, T1)


def test_an_inconsistent_event_refuses_the_fold_before_writing(con, embedder, tmp_path):
    events_dir = tmp_path / "events"
    (node,) = make_memories(con, embedder, ADA, ["Read a novel on the train"])
    good = event(ADA, [node], [1])
    append_events(events_dir, [good])
    (path,) = events_dir.rglob("*.jsonl")
    bad = {
        "event_id": "bad1",
        "being_id": ADA,
        "tool": "recall",
        "memory_refs": [node, node],
        "increments": [1],  # one short
        "ts": T1.isoformat(),
    }
    with path.open("a") as f:
        f.write(json.dumps(bad) + "\n")
    before = reinforcement(con, [node])

    with pytest.raises(MindflowError, match=r"\['bad1'\].*remove their lines"):
        fold_events(con, events_dir, ADA, LATER)

    assert reinforcement(con, [node]) == before
    assert folded(con) == {}


def test_a_fold_failing_midway_rolls_back_everything(con, embedder, tmp_path):
    events_dir = tmp_path / "events"
    first, second = make_memories(con, embedder, ADA, ["Baked bread", "Called my sister"])
    append_events(events_dir, [event(ADA, [first, second], [1, 1])])
    # The nodes update succeeds, then the decay update overflows an INTEGER: a real failure
    # after the first write of the transaction.
    con.execute("UPDATE decay_scores SET access_count = 2147483647 WHERE memory_ref = ?", [second])
    before = reinforcement(con, [first, second])

    with pytest.raises(duckdb.ConversionException, match="out of range"):
        fold_events(con, events_dir, ADA, LATER)

    assert reinforcement(con, [first, second]) == before
    assert folded(con) == {}

    con.execute("UPDATE decay_scores SET access_count = 1 WHERE memory_ref = ?", [second])
    assert fold_events(con, events_dir, ADA, LATER).events == 1
    assert reinforcement(con, [first])[first] == (1, T1, 2, T1)


def test_the_nodes_asset_folds_recall_events_first(settings, embedder):
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from assets.nodes import nodes

    with store.connect(settings.duckdb_path) as con:
        (node,) = make_memories(con, embedder, ADA, ["Swam in the cold lake"])
    append_events(settings.events, [event(ADA, [node], [1]), event(ADA, [node], [1], ts=T2)])
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("beings", [ADA])
    resources = {"duckdb": DuckDBResource(), "embeddings": EmbeddingResource()}

    runs = [
        dg.materialize([nodes], partition_key=ADA, instance=instance, resources=resources) for _ in range(2)
    ]

    metadata = [r.asset_materializations_for_node("nodes")[0].metadata for r in runs]
    assert [(m["recall_events"].value, m["reinforced"].value) for m in metadata] == [(2, 1), (0, 0)]
    with store.connect(settings.duckdb_path) as con:
        assert reinforcement(con, [node])[node] == (2, T2, 3, T2)


def test_a_servers_concurrent_appends_share_writes_and_each_is_durable_when_it_returns(tmp_path):
    """EventWriter: appends arriving while one is written go out together, every event lands
    once, and each append has its own event on disk by the time it returns."""
    from concurrent.futures import ThreadPoolExecutor

    from mindflow.events import EventWriter

    writer = EventWriter(tmp_path / "events")

    def append(i: int) -> bool:
        writer.append([event(ADA, [f"n-{i}"], [1], event_id=f"e{i:03d}")])
        return f"e{i:03d}" in {e.event_id for e in read_events(tmp_path / "events")}

    with ThreadPoolExecutor(8) as threads:
        durable = list(threads.map(append, range(200)))
    assert all(durable)
    assert sorted(e.event_id for e in read_events(tmp_path / "events")) == [f"e{i:03d}" for i in range(200)]
    assert writer.writes < 200  # appends were shared


def test_a_bad_event_fails_its_own_append_and_not_the_others_written_with_it(tmp_path):
    from mindflow.events import EventWriter

    writer = EventWriter(tmp_path / "events")
    with pytest.raises(MindflowError, match="increment"):
        writer.append([event(ADA, ["n-1", "n-2"], [1], event_id="bad")])
    writer.append([event(ADA, ["n-3"], [1], event_id="good")])
    assert [e.event_id for e in read_events(tmp_path / "events")] == ["good"]


def test_submitted_events_are_written_by_the_writers_thread_each_once(tmp_path):
    """EventWriter.submit (a server's recalls): the events go out in shared writes, each once,
    and flush waits until every one submitted so far is on disk."""
    from concurrent.futures import ThreadPoolExecutor

    from mindflow.events import EventWriter

    writer = EventWriter(tmp_path / "events")
    with ThreadPoolExecutor(8) as threads:
        list(
            threads.map(
                lambda i: writer.submit([event(ADA, [f"n-{i}"], [1], event_id=f"e{i:03d}")]), range(200)
            )
        )
    assert writer.flush(30)
    assert sorted(e.event_id for e in read_events(tmp_path / "events")) == [f"e{i:03d}" for i in range(200)]
    assert writer.writes < 200


def test_a_submit_returns_while_the_event_file_is_held_and_lands_once_it_is_free(tmp_path):
    """No request waits on the event file: with its lock held (a slow disk, a patrol rewriting
    it), submit returns and the event is written once the lock is let go."""
    from filelock import FileLock

    from mindflow.events import EventWriter

    folder = tmp_path / "events" / T1.date().isoformat()
    folder.mkdir(parents=True)
    writer = EventWriter(tmp_path / "events")
    with FileLock(str(folder / f"{socket.gethostname()}-{os.getpid()}.jsonl.lock")):
        writer.submit([event(ADA, ["n-1"], [1], event_id="held")])  # returns: the lock is not its to wait on
        assert not writer.flush(0.3)
        assert list(read_events(tmp_path / "events")) == []
    assert writer.flush(30)
    assert [e.event_id for e in read_events(tmp_path / "events")] == ["held"]


def test_a_failed_write_of_submitted_events_is_logged_and_the_next_ones_land(tmp_path, caplog):
    from mindflow.events import EventWriter

    blocked = tmp_path / "events"
    blocked.write_text("a file where the events folder should be")
    writer = EventWriter(blocked)
    writer.submit([event(ADA, ["n-1"], [1], event_id="lost")])
    assert writer.flush(30)
    assert "could not append 1 recall events" in caplog.text
    blocked.unlink()
    writer.submit([event(ADA, ["n-2"], [1], event_id="kept")])
    assert writer.flush(30)
    assert [e.event_id for e in read_events(blocked)] == ["kept"]


def test_a_bad_event_fails_its_own_submit(tmp_path):
    from mindflow.events import EventWriter

    writer = EventWriter(tmp_path / "events")
    with pytest.raises(MindflowError, match="increment"):
        writer.submit([event(ADA, ["n-1", "n-2"], [1], event_id="bad")])
    assert writer.flush(5) and list(read_events(tmp_path / "events")) == []


def test_the_fold_benchmark_runs_on_the_code_of_today(tmp_path, capsys, monkeypatch):
    """bench/bench_fold.py writes a year of events and folds one being's: run small here, so a
    change to the events or the fold breaks this test, not a later `make bench`."""
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    import bench_fold

    assert bench_fold.main(events=3_650, folder=tmp_path) == 0
    printed = capsys.readouterr().out
    assert "3,650 in 365 daily files" in printed
    assert "first fold of one being (reads every file)" in printed and "(365 events folded)" in printed
    assert "(1 events folded; median of 3 nights)" in printed


def test_migration_20_drops_the_key_of_folded_events_and_keeps_its_rows(con):
    """The anti-join of each fold keeps ids unique; the key's index only grew the file."""
    con.execute("DROP TABLE folded_events")
    con.execute(
        "CREATE TABLE folded_events (event_id VARCHAR PRIMARY KEY, being_id VARCHAR NOT NULL, "
        "folded_at TIMESTAMP NOT NULL)"
    )
    rows = [(f"e-{i}", ADA, datetime(2026, 1, 3)) for i in (5, 1, 4)]
    con.executemany("INSERT INTO folded_events VALUES (?, ?, ?)", rows)
    con.execute("DELETE FROM schema_version WHERE version = 20")
    assert store.migrate(con) == 1
    keyed = (
        "SELECT count(*) FROM duckdb_constraints() "
        "WHERE table_name = 'folded_events' AND constraint_type = 'PRIMARY KEY'"
    )
    assert con.execute(keyed).fetchone()[0] == 0
    assert con.execute("SELECT * FROM folded_events ORDER BY rowid").fetchall() == rows
    # Migrating again (a run killed after the copy committed) changes nothing.
    con.execute("DELETE FROM schema_version WHERE version = 20")
    assert store.migrate(con) == 1
    assert con.execute("SELECT * FROM folded_events ORDER BY rowid").fetchall() == rows
