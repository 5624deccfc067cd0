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
from mindflow.together import Together

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


# Appends that arrive during one go out together in the next, in one write (`EventWriter`).
APPENDS_TOGETHER = 64


class EventWriter:
    """`append_events` for the threads of a server process, those appending at once sharing a write.

    Each recall appends an event. Alone, each append takes the file's lock, writes and fsyncs
    (0.22-0.23 ms of CPU an event, half of it in the kernel, with 8 threads appending); the
    appends that arrive while one is under way wait for it and go out together in the next
    (`mindflow.together`): one lock, one write and one fsync for all of them (0.11-0.13 ms).
    Each `append` still returns only once its own events are durable, and raises if they could
    not be written.

    A server's recalls `submit` their events instead: a thread of the writer's own appends
    whatever was submitted meanwhile, so no request's thread waits on the file's fsync. Before,
    each response's background task held a thread of the server until its append was durable.
    With every write made 100 ms slower (a slow disk), 8 clients at 100,000 memories: 186-188
    requests/s, p95 69-70 ms that way, 221-231 requests/s, p95 48-52 ms with the thread (two
    alternating pairs); at this disk's own speed, the same within the machine's drift (three
    pairs: 208/206, 189/224, 218/217 requests/s).
    """

    def __init__(self, events_dir: Path):
        self.events_dir = events_dir
        self._together: Together[Sequence[RecallEvent], None] = Together(self._append, APPENDS_TOGETHER)
        self._submitted: list[RecallEvent] = []
        self._counts = [0, 0]  # events submitted, events the thread has appended (or failed to)
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def append(self, events: Sequence[RecallEvent]) -> None:
        _check(events)  # a bad event fails its own caller, not the others in its write
        self._together(events)

    def submit(self, events: Sequence[RecallEvent]) -> None:
        """Hand `events` to the writer's thread and return at once. Crash-only as a response
        sent before its event: a killed process loses the events not written yet (a
        reinforcement each), never an event in part."""
        _check(events)
        with self._changed:
            self._submitted.extend(events)
            self._counts[0] += len(events)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._write_submitted, daemon=True, name="mindflow-events"
                )
                self._thread.start()
            self._changed.notify_all()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every event submitted so far is appended (or failed); False on timeout."""
        with self._changed:
            target = self._counts[0]
            return self._changed.wait_for(lambda: self._counts[1] >= target, timeout)

    def _write_submitted(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: bool(self._submitted))
                batch, self._submitted = self._submitted, []
            try:
                self.append(batch)
            except Exception:  # noqa: BLE001 - losing a reinforcement must not stop the others
                log.exception("could not append %d recall events to %s", len(batch), self.events_dir)
            with self._changed:
                self._counts[1] += len(batch)
                self._changed.notify_all()

    @property
    def writes(self) -> int:
        """Writes so far (each holding the events of one or more appends)."""
        return self._together.runs

    def _append(self, batches: list[Sequence[RecallEvent]]) -> list[None]:
        append_events(self.events_dir, [event for batch in batches for event in batch])
        return [None] * len(batches)


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


def read_events(events_dir: Path, since_day: date | None = None) -> Iterator[RecallEvent]:
    """Every readable event, day by day; a torn or invalid line is skipped with a warning."""
    if not events_dir.is_dir():
        return
    for folder in sorted(p for p in events_dir.iterdir() if p.is_dir()):
        try:
            day = date.fromisoformat(folder.name)
        except ValueError:
            continue
        if since_day is not None and day < since_day:
            continue
        for path in sorted(folder.glob("*.jsonl")):
            with path.open("rb") as lines:
                for number, raw in enumerate(lines, 1):
                    if not raw.strip():
                        continue
                    try:
                        event = _from_line(raw)
                    except (ValueError, KeyError, TypeError) as exc:
                        log.warning("skipped unreadable recall event %s:%d (%s)", path, number, exc)
                        continue
                    yield event


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


def fold_events(con: duckdb.DuckDBPyConnection, events_dir: Path, being_id: str, now: datetime) -> FoldReport:
    """Apply every not-yet-folded event of a being to nodes and decay_scores, in one transaction.

    `folded_events` records each event id with the changes it made, so a retried
    patrol that reads the same files again folds nothing twice. Refs that are no
    longer nodes of this being are folded without effect and counted as unknown.
    Other beings' events wait for their own patrol.

    Reinforcement raises reactivation_count / access_count and the last activation /
    access times, and resets the session count ("patrol cycles since last activation"),
    so the node's value is its importance again; ❺ then revives a dying node, or a dead one
    reactivated since it died. A recall of a node a ❹ merge absorbed reinforces its
    survivor, which holds its history now.
    """
    # Fact accesses share the files; the decay job folds them (mindflow.fact_activation).
    events = [e for e in read_events(events_dir) if e.being_id == being_id and e.tool in REINFORCEMENT]
    if not events:
        return FoldReport()
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
        con.execute("BEGIN TRANSACTION")
        try:
            report = _fold(con, being_id, now)
            con.execute("COMMIT")
        except Exception:
            con.execute("ROLLBACK")
            raise
        finally:
            con.execute("DROP TABLE IF EXISTS fold_new")
            con.execute("DROP TABLE IF EXISTS fold_refs")
    return report


def _fold(con: duckdb.DuckDBPyConnection, being_id: str, now: datetime) -> FoldReport:
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
    # One history row per memory and fold, with what the recalls added; the run id is stamped by the run.
    con.execute(
        """
        INSERT INTO history (history_id, ts, memory_ref, being_id, operation, before, after, run_id, actor)
        SELECT 'h-' || uuid()::VARCHAR, ?, n.node_id, n.being_id, 'reinforced',
               to_json({'reactivation_count': n.reactivation_count - r.increment}),
               to_json({'reactivation_count': n.reactivation_count, 'increment': r.increment,
                        'recalls': r.events}),
               NULL, 'recall'
        FROM fold_refs r JOIN nodes n ON n.node_id = r.memory_ref AND n.being_id = ?
        WHERE r.known
        """,
        [now, being_id],
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
