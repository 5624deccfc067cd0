"""Pool `duckdb` across processes: which runs hold it, runs whose process is gone, and waiting.

With mindflow/runner.py and mindflow/resources.py, a library module that knows Dagster: it
reads the instance's run records, as the CLI, `mindflow init` and the `stale_run_sensor` do.

Every job of the code location opens the DuckDB file, so its assets are in pool `duckdb`
with limit 1 and `granularity: run` (dagster.yaml): a run holds the pool from its start to
its end. Dagster's queued run coordinator keeps daemon-launched runs queued while another
run that uses the pool is in progress, and the CLI waits the same way here, asleep, before
it starts its run in process. (At op granularity an in-process run blocked on the pool
polls the slot table in a loop at most of a core, and a run killed with -9 keeps its slot.)

A run killed with -9 stays "started" in Dagster's run storage forever. Its process is
known (`mindflow/pid` and `mindflow/host` tags on the CLI's runs; the pid of the process
that executed its steps, from its engine events, for runs a launcher started on this
machine), so a run whose process is gone is reported failed and its slots are freed
before anybody waits for it.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from mindflow.errors import MindflowError

POOL = "duckdb"
PID_TAG = "mindflow/pid"
PID_START_TAG = "mindflow/pid_start"  # the process's start time, so a reused pid is not taken for it
HOST_TAG = "mindflow/host"
# A re-execution (the UI's "Re-execute", a retry) copies its parent's tags, the CLI's pid among them.
PARENT_RUN_TAG = "dagster/parent_run_id"
WAIT_POLL_S = 1.0


@dataclass(frozen=True)
class Holder:
    """A run in progress that holds (or is about to hold) the pool."""

    run_id: str
    job: str
    status: str
    pid: int | None
    started: datetime | None

    def describe(self) -> str:
        when = f", since {self.started:%Y-%m-%d %H:%M:%S} UTC" if self.started else ""
        pid = f", pid {self.pid}" if self.pid else ""
        return f"{self.job} run {self.run_id[:8]} ({self.status.lower()}{pid}{when})"


@dataclass
class ReapReport:
    """What `reap_stale_runs` did: runs reported failed, runs whose leftover slots were freed."""

    failed: list[str] = field(default_factory=list)
    freed_slots: dict[str, int] = field(default_factory=dict)


def _stat(pid: int) -> list[bytes] | None:
    """Fields 3.. of /proc/<pid>/stat (state first), None where there is no such file."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: split after it.
    return stat[stat.rfind(b")") + 2 :].split()


def process_start(pid: int) -> str | None:
    """The start time of a process in clock ticks since boot (Linux), None where unknown."""
    fields = _stat(pid)
    return fields[19].decode() if fields and len(fields) > 19 else None


def process_alive(pid: int, start: str | None = None) -> bool:
    """Whether `pid` is a live process (not a zombie), and the same one if its start is known."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    fields = _stat(pid)
    if fields and fields[0] in (b"Z", b"X"):
        return False  # killed, not yet reaped by its parent: it holds nothing
    # Without /proc (not Linux) the signal above is all there is to know.
    return start is None or fields is None or len(fields) <= 19 or fields[19].decode() == start


def run_tags() -> dict[str, str]:
    """Tags that let any later process tell whether this process is still alive."""
    pid = os.getpid()
    tags = {PID_TAG: str(pid), HOST_TAG: socket.gethostname()}
    start = process_start(pid)
    if start is not None:
        tags[PID_START_TAG] = start
    return tags


def _local_storage(instance) -> bool:
    """Runs of an instance on SQLite files were all launched on this machine."""
    return type(instance.run_storage).__name__.lower().startswith("sqlite")


def _worker_pid(instance, run_id: str) -> int | None:
    """The pid of the process that executes a launched run's steps, from its engine events."""
    import dagster as dg

    pid = None
    for record in instance.get_records_for_run(
        run_id, of_type=dg.DagsterEventType.ENGINE_EVENT, limit=50
    ).records:
        event = record.event_log_entry.dagster_event
        data = getattr(event, "engine_event_data", None) if event else None
        value = (data.metadata or {}).get("pid") if data else None
        if value is not None:
            try:
                pid = int(value.value)
            except (TypeError, ValueError):
                continue
    return pid


def _process_of(instance, run) -> tuple[int | None, str | None, bool]:
    """(pid, its start time, whether this machine can check it) for a run."""
    tags = run.tags
    # The pid tags of a re-execution name its parent's process, not the run worker's.
    if PID_TAG in tags and PARENT_RUN_TAG not in tags:
        try:
            pid = int(tags[PID_TAG])
        except ValueError:
            return None, None, False
        return pid, tags.get(PID_START_TAG), tags.get(HOST_TAG) == socket.gethostname()
    if _local_storage(instance):
        return _worker_pid(instance, run.run_id), None, True
    return None, None, False


def _in_progress(instance) -> list:
    import dagster as dg

    return list(
        instance.get_run_records(
            filters=dg.RunsFilter(
                statuses=[
                    dg.DagsterRunStatus.NOT_STARTED,
                    dg.DagsterRunStatus.STARTING,
                    dg.DagsterRunStatus.STARTED,
                    dg.DagsterRunStatus.CANCELING,
                ]
            )
        )
    )


def _uses_pool(run) -> bool:
    concurrency = run.run_op_concurrency
    # A run recorded without its pools (older Dagster) is assumed to use it: every job does.
    return concurrency is None or POOL in (concurrency.all_pools or ())


class StorageLocked(MindflowError):
    """Dagster's SQLite storage is locked by a process stopped mid-write (Ctrl-Z, a debugger,
    SIGSTOP), and SQLite's busy timeout (30 s in Dagster) ran out waiting for it: a wait, not a
    failure of the storage."""

    def __init__(self) -> None:
        super().__init__(
            "Dagster's storage is held by a process stopped in the middle of writing to it: the storage "
            "is locked (a run suspended with Ctrl-Z or a debugger resumes with `fg` or `kill -CONT <pid>`)"
        )


# What SQLite says when a stopped writer holds its lock: "database is locked" once the busy
# timeout runs out, or "locking protocol" (SQLITE_PROTOCOL) when a WAL lock stays unobtainable.
_LOCKED = ("database is locked", "locking protocol")


def _storage_read(function):
    """`function`, raising StorageLocked where SQLite says a stopped writer holds its lock."""

    @functools.wraps(function)
    def reading(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except Exception as error:
            if type(error).__name__ == "OperationalError" and any(m in str(error) for m in _LOCKED):
                raise StorageLocked() from error
            raise

    return reading


def _dead_runs(instance) -> list[tuple[object, int]]:
    """(run record, pid) of each unfinished run whose process, checkable from here, is gone."""
    dead = []
    for record in _in_progress(instance):
        pid, start, checkable = _process_of(instance, record.dagster_run)
        # A launched run whose worker has not named its pid yet is still starting.
        if checkable and pid is not None and not process_alive(pid, start):
            dead.append((record, pid))
    return dead


@_storage_read
def dead_runs(instance) -> list[Holder]:
    """The unfinished runs whose process is gone, as `reap_stale_runs` judges them, without marking
    them: what `mindflow status` shows (it writes nothing)."""
    found = []
    for record, pid in _dead_runs(instance):
        run = record.dagster_run
        started = datetime.fromtimestamp(record.start_time, UTC) if record.start_time else None
        found.append(Holder(run.run_id, run.job_name, run.status.value, pid, started))
    return found


@_storage_read
def reap_stale_runs(instance, log: Callable[[str], None] | None = None) -> ReapReport:
    """Report failed every unfinished run whose process is gone; free the slots of finished runs.

    A run is only judged when its process can be checked from here: a run of another
    machine, or one whose pid is not known yet (being launched), is left to Dagster's run
    monitoring.
    """
    import dagster as dg

    report = ReapReport()
    for record, pid in _dead_runs(instance):
        run = record.dagster_run
        message = (
            f"The process of this run (pid {pid}) is gone (killed, or its machine restarted): "
            "mindflow marked the run failed and freed its pool slots so later runs can start."
        )
        if run.status == dg.DagsterRunStatus.CANCELING:
            instance.report_run_canceled(run, message=message)
        else:
            instance.report_run_failed(run, message=message)
        report.failed.append(run.run_id)
        if log:
            log(
                f"run {run.run_id} ({run.job_name}, pid {pid}) was left unfinished by a dead process: "
                "marked failed"
            )
    storage = instance.event_log_storage
    if storage.supports_global_concurrency_limits:
        holding = storage.get_concurrency_run_ids()
        if holding:
            status = {
                r.dagster_run.run_id: r.dagster_run.status
                for r in instance.get_run_records(dg.RunsFilter(run_ids=list(holding)))
            }
            done = (dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED)
            # A slot of a run missing from the run storage (deleted) is never freed by it either.
            for run_id in sorted(r for r in holding if r not in status or status[r] in done):
                freed = storage.free_concurrency_slots_for_run(run_id)
                report.freed_slots[run_id] = len(freed or ())
                if log:
                    log(f"freed the pool slots left by finished run {run_id}")
    return report


@_storage_read
def holders(instance) -> list[Holder]:
    """The live runs in progress that use the pool, oldest first."""
    import dagster as dg

    found = []
    for record in _in_progress(instance):
        run = record.dagster_run
        if not _uses_pool(run):
            continue
        if run.status == dg.DagsterRunStatus.NOT_STARTED:
            continue  # holds nothing until it starts; a dead one is reaped above
        pid, _, _ = _process_of(instance, run)
        started = datetime.fromtimestamp(record.start_time, UTC) if record.start_time else None
        found.append(Holder(run.run_id, run.job_name, run.status.value, pid, started))
    return sorted(found, key=lambda h: h.started or datetime.max.replace(tzinfo=UTC))


def wait_until_free(
    instance, say: Callable[[str], None], *, poll_s: float = WAIT_POLL_S, limit: int = 1
) -> float:
    """Sleep until fewer than `limit` other live runs hold the pool (none, at the default limit of
    one); returns the seconds waited.

    Says once what it waits for (and again when that changes). Between checks it sleeps,
    so waiting costs no measurable CPU, and Ctrl-C (KeyboardInterrupt) stops it at once (within
    SQLite's busy timeout while the storage is locked).
    """
    began = time.monotonic()
    last = None
    while True:
        try:
            reap_stale_runs(instance, log=say)
            found = holders(instance)
        except StorageLocked as locked:
            why = str(locked)
        else:
            if len(found) < limit:
                return time.monotonic() - began
            why = "held by " + "; ".join(h.describe() for h in found)
        if why != last:
            say(f"waiting for pool {POOL}: {why}. Ctrl-C stops waiting; nothing is lost.")
            last = why
        time.sleep(poll_s)


@dataclass(frozen=True)
class TurnNote:
    """What a CLI process that holds a turn at the pool writes beside the turn's lock file, so a
    process waiting for the turn can say who holds it without reading Dagster's storage (which a
    holder stopped mid-write keeps locked)."""

    job: str
    label: str
    pid: int
    start: str | None
    since: str

    @staticmethod
    def path(lock: Path) -> Path:
        return lock.with_name(lock.name + ".holder")

    def describe(self) -> str:
        return f"{self.job} run for {self.label} (pid {self.pid}, since {self.since} UTC)"


def write_turn_note(lock: Path, job: str, label: str) -> None:
    """Name this process as the holder of the turn at `lock` (written whole, then renamed in)."""
    pid = os.getpid()
    note = TurnNote(job, label, pid, process_start(pid), f"{datetime.now(UTC):%Y-%m-%d %H:%M:%S}")
    path = TurnNote.path(lock)
    partial = path.with_name(f"{path.name}.{pid}.partial")
    partial.write_text(json.dumps(dataclasses.asdict(note)))
    os.replace(partial, path)


def read_turn_note(lock: Path) -> TurnNote | None:
    """The live holder named beside `lock`; None when the note is missing, unreadable or names a
    process that is gone (the lock's holder has not written its note yet)."""
    try:
        note = TurnNote(**json.loads(TurnNote.path(lock).read_text()))
    except (OSError, ValueError, TypeError):
        return None
    return note if process_alive(note.pid, note.start) else None
