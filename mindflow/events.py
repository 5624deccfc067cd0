"""Recall events: reinforcement appended durably by the read API, folded by the patrol exactly once."""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path

import duckdb
import pyarrow as pa

from mindflow import store
from mindflow.errors import MindflowError
from mindflow.files import append_locked
from mindflow.models import utcnow

log = logging.getLogger(__name__)

# Reinforcement per recalled memory, as in the seed: (active, dead). Plain recall and
# resonance never return dead memories; recall_memory and search_memory may, and
# reaching into the dead counts double.
REINFORCEMENT = {
    "recall": (1, 0),
    "resonance": (1, 0),
    "recall_memory": (1, 2),
    "search_memory": (1, 2),
}


@dataclass(frozen=True)
class RecallEvent:
    """One recall that returned memories: which ones, and how much each is reinforced."""

    event_id: str  # uuid4 hex
    being_id: str
    tool: str  # recall | recall_memory | search_memory | resonance | fact_access
    memory_refs: tuple[str, ...]
    increments: tuple[int, ...]  # one per memory_ref
    ts: datetime  # naive UTC


@dataclass
class FoldReport:
    """What one fold applied: events, memories reinforced, reactivations added, unknown refs."""

    events: int = 0
    refs: int = 0
    reactivations: int = 0
    unknown: int = 0


def increments_for(tool: str, statuses: Sequence[str]) -> list[int]:
    """The reinforcement of each recalled memory, by its status (anything not dead counts as active)."""
    if tool not in REINFORCEMENT:
        raise MindflowError(f"unknown recall tool {tool!r}; use one of {', '.join(REINFORCEMENT)}")
    active, dead = REINFORCEMENT[tool]
    return [dead if status == "dead" else active for status in statuses]


def recall_event(
    being_id: str,
    tool: str,
    memory_refs: Sequence[str],
    statuses: Sequence[str],
    ts: datetime | None = None,
) -> RecallEvent:
    """A new event for memories a recall returned, with their statuses at the time."""
    return RecallEvent(
        event_id=uuid.uuid4().hex,
        being_id=being_id,
        tool=tool,
        memory_refs=tuple(memory_refs),
        increments=tuple(increments_for(tool, statuses)),
        ts=ts or utcnow(),
    )


def _invalid(event: RecallEvent) -> bool:
    return len(event.memory_refs) != len(event.increments) or any(i < 0 for i in event.increments)


def _check(events: Sequence[RecallEvent]) -> None:
    bad = [e.event_id for e in events if _invalid(e)]
    if bad:
        raise MindflowError(f"recall events {bad} need one non-negative increment per memory ref")


class _Submitted:
    """Events handed to an `EventWriter`, and what became of their write."""

    __slots__ = ("events", "written", "error")

    def __init__(self, events: Sequence[RecallEvent]):
        self.events = events
        self.written = threading.Event()  # set once the write holding them is done or failed
        self.error: BaseException | None = None


class EventWriter:
    """`append_events` for the threads of a server process, on a thread of its own.

    A thread of the writer appends whatever was handed to it meanwhile in one write: one lock,
    one write and one fsync for all those events. 8 threads appending 2,000 events: 0.14-0.20 ms
    of CPU an event in ~500 shared writes, against 0.30-0.35 ms each alone (2026-11-27; the group
    commit of `mindflow.together` it replaces: 0.13-0.18 ms).

    A server's recalls `submit` their events and go on, so no request's thread waits on the
    file's fsync. Before, each response's background task held a thread of the server until its
    append was durable. With every write made 100 ms slower (a slow disk), 8 clients at 100,000
    memories: 186-188 requests/s, p95 69-70 ms that way, 221-231 requests/s, p95 48-52 ms with the
    thread (two alternating pairs); at this disk's own speed, the same within the machine's drift
    (three pairs: 208/206, 189/224, 218/217 requests/s). `append` waits until its events are
    durable, and raises if they could not be written.
    """

    def __init__(self, events_dir: Path):
        self.events_dir = events_dir
        self.writes = 0  # writes so far, each holding the events of one or more callers
        self._waiting: list[_Submitted] = []
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def append(self, events: Sequence[RecallEvent]) -> None:
        """Write `events` durably (in a write shared with those handed over meanwhile)."""
        submitted = self._hand_over(events)
        submitted.written.wait()
        if submitted.error is not None:
            raise submitted.error

    def submit(self, events: Sequence[RecallEvent]) -> None:
        """Hand `events` to the writer's thread and return at once. Crash-only as a response
        sent before its event: a killed process loses the events not written yet (a
        reinforcement each), never an event in part; a failed write is logged."""
        self._hand_over(events)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every event handed over so far is written (or failed); False on timeout."""
        with self._changed:
            last = self._waiting[-1] if self._waiting else None
        return last is None or last.written.wait(timeout)

    def _hand_over(self, events: Sequence[RecallEvent]) -> _Submitted:
        _check(events)  # a bad event fails its own caller, not the others in its write
        submitted = _Submitted(events)
        with self._changed:
            self._waiting.append(submitted)
            if self._thread is None:
                self._thread = threading.Thread(target=self._write, daemon=True, name="mindflow-events")
                self._thread.start()
            self._changed.notify()
        return submitted

    def _write(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: bool(self._waiting))
                batch = list(self._waiting)
            error = None
            try:
                append_events(self.events_dir, [event for s in batch for event in s.events])
            except Exception as exc:  # noqa: BLE001 - losing a reinforcement must not stop the others
                error = exc
                count = sum(len(s.events) for s in batch)
                log.exception("could not append %d recall events to %s", count, self.events_dir)
            with self._changed:
                del self._waiting[: len(batch)]  # only this thread removes, from the front
                self.writes += 1
            for submitted in batch:
                submitted.error = error
                submitted.written.set()


def append_events(events_dir: Path, events: Sequence[RecallEvent]) -> None:
    """Append events durably: one JSON line each, to `<day>/<hostname>-<pid>.jsonl`.

    One file per process and day, so concurrent server workers never share a file;
    one write on an O_APPEND descriptor, then fsync, so a crash loses at most the
    line being written. The file lock covers threads of the same process.
    """
    _check(events)
    by_day: dict[date, list[RecallEvent]] = {}
    for event in events:
        by_day.setdefault(event.ts.date(), []).append(event)
    for day, batch in sorted(by_day.items()):
        path = events_dir / day.isoformat() / f"{socket.gethostname()}-{os.getpid()}.jsonl"
        append_locked(path, "".join(_to_line(e) for e in batch).encode("utf-8"))


def _to_line(event: RecallEvent) -> str:
    record = {
        "event_id": event.event_id,
        "being_id": event.being_id,
        "tool": event.tool,
        "memory_refs": list(event.memory_refs),
        "increments": list(event.increments),
        "ts": event.ts.isoformat(),
    }
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"


@dataclass(frozen=True)
class EventFile:
    """One events file as a fold saw it. Appends change its size; a forget's rewrite replaces it
    (a new inode, fewer bytes)."""

    name: str  # <day>/<host>-<pid>.jsonl
    inode: int
    size: int
    modified_ns: int


def event_files(events_dir: Path) -> list[EventFile]:
    """Every events file, day by day, as it is before a fold reads it: anything appended later
    changes what the next fold sees, and is read then."""
    if not events_dir.is_dir():
        return []
    found = []
    for folder in sorted(p for p in events_dir.iterdir() if p.is_dir()):
        try:
            date.fromisoformat(folder.name)
        except ValueError:
            continue
        for path in sorted(folder.glob("*.jsonl")):
            try:
                stat = path.stat()
            except FileNotFoundError:  # replaced by a forget's rewrite in between: read next time
                continue
            found.append(EventFile(f"{folder.name}/{path.name}", stat.st_ino, stat.st_size, stat.st_mtime_ns))
    return found


def read_events(
    events_dir: Path, since_day: date | None = None, files: Sequence[EventFile] | None = None
) -> Iterator[RecallEvent]:
    """Every readable event, day by day (or those of `files`); a torn or invalid line is skipped
    with a warning."""
    for file in event_files(events_dir) if files is None else files:
        if since_day is not None and date.fromisoformat(file.name.split("/")[0]) < since_day:
            continue
        path = events_dir / file.name
        try:
            lines = path.open("rb")
        except FileNotFoundError:
            continue
        with lines:
            for number, raw in enumerate(lines, 1):
                if not raw.strip():
                    continue
                try:
                    event = _from_line(raw)
                except (ValueError, KeyError, TypeError) as exc:
                    log.warning("skipped unreadable recall event %s:%d (%s)", path, number, exc)
                    continue
                yield event


def unread_files(
    con: duckdb.DuckDBPyConnection, listed: Sequence[EventFile], fold: str, being_id: str
) -> list[EventFile]:
    """Those of `listed` the fold has not read as they are now: new files, and those appended to or
    rewritten (by a forget) since. Events files only grow, day after day; a fold that read every
    one would take longer every night (bench/bench_fold.py)."""
    seen = set(
        con.execute(
            "SELECT file, inode, size, modified_ns FROM folded_event_files WHERE fold = ? AND being_id = ?",
            [fold, being_id],
        ).fetchall()
    )
    return [f for f in listed if (f.name, f.inode, f.size, f.modified_ns) not in seen]


def record_files(
    con: duckdb.DuckDBPyConnection,
    fold: str,
    being_id: str,
    read: Sequence[EventFile],
    listed: Sequence[EventFile],
) -> None:
    """Note the files `read` as the fold saw them, in the caller's transaction: with their events
    folded, or neither. Rows of files no longer `listed` go."""
    table = pa.table(
        {
            "file": pa.array([f.name for f in read], pa.string()),
            "inode": pa.array([f.inode for f in read], pa.int64()),
            "size": pa.array([f.size for f in read], pa.int64()),
            "modified_ns": pa.array([f.modified_ns for f in read], pa.int64()),
        }
    )
    with store.registered(con, "read_event_files", table):
        con.execute(
            "INSERT OR REPLACE INTO folded_event_files "
            "SELECT ?, ?, file, inode, size, modified_ns FROM read_event_files",
            [fold, being_id],
        )
    con.execute(
        "DELETE FROM folded_event_files WHERE fold = ? AND being_id = ? AND NOT list_contains(?, file)",
        [fold, being_id, [f.name for f in listed]],
    )


def _from_line(raw: bytes) -> RecallEvent:
    record = json.loads(raw)
    ts = datetime.fromisoformat(record["ts"])
    if ts.tzinfo is not None:
        ts = ts.astimezone(UTC).replace(tzinfo=None)
    return RecallEvent(
        event_id=str(record["event_id"]),
        being_id=str(record["being_id"]),
        tool=str(record["tool"]),
        memory_refs=tuple(str(r) for r in record["memory_refs"]),
        increments=tuple(int(i) for i in record["increments"]),
        ts=ts,
    )


def fold_events(
    con: duckdb.DuckDBPyConnection, events_dir: Path, being_id: str, now: datetime, run_id: str | None = None
) -> FoldReport:
    """Apply every not-yet-folded event of a being to nodes and decay_scores, in one transaction.

    `folded_events` records each event id with the changes it made, so a retried
    patrol that reads the same files again folds nothing twice; `folded_event_files` records
    which files (as of their inode, size and mtime) the being's folds have read, so each reads only
    the files new or changed since. Refs that are no
    longer nodes of this being are folded without effect and counted as unknown.
    Other beings' events wait for their own patrol.

    Reinforcement raises reactivation_count / access_count and the last activation /
    access times, and resets the session count ("patrol cycles since last activation"),
    so the node's value is its importance again; ❺ then revives a dying node, or a dead one
    reactivated since it died. A recall of a node a ❹ merge absorbed reinforces its
    survivor, which holds its history now. Each `reinforced` history row is dated by the last
    recall it folds (not before the memory was formed, nor after `now`) and carries `run_id`.
    """
    listed = event_files(events_dir)
    files = unread_files(con, listed, "recall", being_id)
    if not files:
        return FoldReport()
    # Fact accesses share the files; the decay job folds them (mindflow.fact_activation).
    events = [
        e for e in read_events(events_dir, files=files) if e.being_id == being_id and e.tool in REINFORCEMENT
    ]
    # Checked before anything is written: a partial fold would miscount for good.
    bad = [e.event_id for e in events if _invalid(e)]
    if bad:
        raise MindflowError(
            f"recall events {bad} of {being_id} in {events_dir} do not have one non-negative "
            "increment per memory ref; remove their lines from the events files and run the "
            "patrol again"
        )
    table = pa.table(
        {
            "event_id": pa.array([e.event_id for e in events], pa.string()),
            "ts": pa.array([e.ts for e in events], pa.timestamp("us")),
            "memory_refs": pa.array([list(e.memory_refs) for e in events], pa.list_(pa.string())),
            "increments": pa.array([list(e.increments) for e in events], pa.list_(pa.int64())),
        }
    )
    with store.registered(con, "recall_events", table):
        try:
            with store.transaction(con):
                report = _fold(con, being_id, now, run_id) if events else FoldReport()
                record_files(con, "recall", being_id, files, listed)
        finally:
            con.execute("DROP TABLE IF EXISTS fold_new")
            con.execute("DROP TABLE IF EXISTS fold_refs")
    return report


def _fold(con: duckdb.DuckDBPyConnection, being_id: str, now: datetime, run_id: str | None) -> FoldReport:
    # An event appended twice (a retried write) is still one recall.
    con.execute(
        """
        CREATE TEMP TABLE fold_new AS
        SELECT * FROM recall_events e
        WHERE NOT EXISTS (SELECT 1 FROM folded_events f WHERE f.event_id = e.event_id)
        QUALIFY row_number() OVER (PARTITION BY event_id ORDER BY ts) = 1
        """
    )
    con.execute(
        """
        CREATE TEMP TABLE fold_refs AS
        SELECT coalesce(n.absorbed_into, t.memory_ref) AS memory_ref, sum(t.increment)::BIGINT AS increment,
               count(DISTINCT t.event_id)::BIGINT AS events, max(t.ts) AS last_ts,
               bool_or(n.node_id IS NOT NULL) AS known
        FROM (SELECT event_id, ts, unnest(memory_refs) AS memory_ref, unnest(increments) AS increment
              FROM fold_new) t
        LEFT JOIN nodes n ON n.node_id = t.memory_ref AND n.being_id = ?
        GROUP BY 1
        """,
        [being_id],
    )
    con.execute(
        """
        UPDATE nodes SET reactivation_count = nodes.reactivation_count + r.increment,
            session_count = 0, last_activated = greatest(nodes.last_activated, r.last_ts), updated_at = ?
        FROM fold_refs r
        WHERE nodes.node_id = r.memory_ref AND nodes.being_id = ? AND r.known
        """,
        [now, being_id],
    )
    # One history row per memory and fold, with what the recalls added, dated when they happened (the
    # last one): a mark set after them sorts after it, though the run folds marks first.
    con.execute(
        """
        INSERT INTO history (history_id, ts, memory_ref, being_id, operation, before, after, run_id, actor)
        SELECT 'h-' || uuid()::VARCHAR, least($now, greatest(r.last_ts, n.created_at)), n.node_id,
               n.being_id, 'reinforced',
               to_json({'reactivation_count': n.reactivation_count - r.increment}),
               to_json({'reactivation_count': n.reactivation_count, 'increment': r.increment,
                        'recalls': r.events}),
               $run_id, 'recall'
        FROM fold_refs r JOIN nodes n ON n.node_id = r.memory_ref AND n.being_id = $being
        WHERE r.known
        ORDER BY n.node_id
        """,
        {"now": now, "being": being_id, "run_id": run_id},
    )
    con.execute(
        """
        UPDATE decay_scores SET access_count = decay_scores.access_count + r.events,
            last_accessed = greatest(decay_scores.last_accessed, r.last_ts)
        FROM fold_refs r
        WHERE decay_scores.memory_ref = r.memory_ref AND decay_scores.being_id = ? AND r.known
        """,
        [being_id],
    )
    con.execute("INSERT INTO folded_events SELECT event_id, ?, ? FROM fold_new", [being_id, now])
    events = con.execute("SELECT count(*) FROM fold_new").fetchall()[0][0]
    refs, reactivations, unknown = con.execute(
        "SELECT count(*) FILTER (WHERE known), coalesce(sum(increment) FILTER (WHERE known), 0), "
        "count(*) FILTER (WHERE NOT known) FROM fold_refs"
    ).fetchall()[0]
    return FoldReport(events=events, refs=refs, reactivations=int(reactivations), unknown=unknown)
