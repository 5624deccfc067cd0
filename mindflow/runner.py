"""Running the code location's jobs on the local Dagster instance, for the CLI and the demo.

With mindflow/resources.py, the only library module that imports Dagster: the CLI
needs Dagster's own API so that its runs are recorded in `$MINDFLOW_HOME/dagster`
and show up in the UI like any other run.
"""

from __future__ import annotations

import gc
import importlib.util
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path

from mindflow import failures, pool
from mindflow.config import Settings
from mindflow.errors import MindflowError
from mindflow.inbox import pending_days, plan_key_ranges, validate_being_id
from mindflow.models import utcnow

JOBS = (
    "ingest", "extraction", "patrol", "form", "decay", "narrative", "audit_digest", "ebook_reindex", "forget",
    "journal_reindex", "reflection", "approvals",
)  # fmt: skip
PROJECT_ROOT = Path(__file__).resolve().parent.parent
DAGSTER_YAML = """\
# Written by mindflow: the local Dagster instance of this MINDFLOW_HOME.
concurrency:
  pools:
    # Pool `duckdb` (every asset that opens the DuckDB file) admits one run at a time, held
    # from the run's start to its end: queued runs wait in the queue, asleep (see
    # mindflow/pool.py for why not per step).
    default_limit: 1
    granularity: run
telemetry:
  enabled: false
"""
_HEADER, _TELEMETRY = DAGSTER_YAML.split("concurrency:\n")[0], "telemetry:\n  enabled: false\n"
_OP_POOLS = """\
concurrency:
  pools:
    # Pool `duckdb` (every asset that opens the DuckDB file) runs one step at a time.
    default_limit: 1
"""
_RUN_POOLS = DAGSTER_YAML[len(_HEADER) : DAGSTER_YAML.index(_TELEMETRY)]
# Earlier mindflow versions named their own event log storage, a subclass of Dagster's
# internal SQLite storage; Dagster's default reads and writes the same files.
_OWN_STORAGE = """\
# Dagster's SQLite event log, keeping its connections and batching partition events
# (see mindflow/dagster_storage.py); same files, readable by plain Dagster.
event_log_storage:
  module: mindflow.dagster_storage
  class: MindflowSqliteEventLogStorage
"""
# The scale profile (MINDFLOW_DAGSTER_POSTGRES_URL): runs, event log and schedules in PostgreSQL,
# shared by run workers, the daemon and the UI wherever they run. The file names the variable,
# never the password; every process of the instance needs it in its environment.
POSTGRES_STORAGE = """\
storage:
  postgres:
    postgres_url:
      env: MINDFLOW_DAGSTER_POSTGRES_URL
"""


def dagster_yaml(writers: int = 1) -> str:
    """The instance configuration mindflow writes, with pool `duckdb`'s limit (MINDFLOW_DUCKDB_WRITERS)."""
    if writers == 1:
        return DAGSTER_YAML
    return DAGSTER_YAML.replace("admits one run at a time", f"admits {writers} runs at a time").replace(
        "default_limit: 1\n", f"default_limit: {writers}\n"
    )


# What earlier versions of mindflow wrote, upgraded in place while nobody has edited it.
_EARLIER_YAML = tuple(
    _HEADER + pools + _TELEMETRY + storage
    for pools in (_OP_POOLS, _RUN_POOLS)
    for storage in ("", _OWN_STORAGE)
    if _HEADER + pools + _TELEMETRY + storage != DAGSTER_YAML
)
# The CLI prints one line per run; the full event log is in the UI. A long run's progress lines
# (embedded N/M ...) reach stderr once it has lasted MINDFLOW_PROGRESS_AFTER_S (jobs/loggers.py).
_QUIET = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_MONTH = re.compile(r"^\d{4}-\d{2}$")


# What a run changed, as the CLI prints it: metadata keys per asset.
SUMMARY_KEYS = {
    "episodes": ("new", "duplicates", "quarantined", "heartbeats_skipped", "deleted"),
    "nodes": ("new", "dying", "revived"),
    "clusters": ("merged_to_sibling", "merged_to_root", "deleted"),
    "decay_scores": ("as_of", "scored", "new", "active", "fading", "dormant", "archived", "formed_later"),
    "memories": ("upserted", "deleted"),
    "story": ("mode", "narrated", "chapters_added", "failed_batches", "critical_alerts"),
    "core_memory": ("modes", "max_tokens", "pinned"),
    "audit_archive": ("digested", "months", "pruned_table_rows"),
    "ebook_chunks": ("documents", "chunks", "new", "changed", "removed", "failed", "seconds"),
    "journal_chunks": ("files", "chunks", "new", "changed", "removed", "unchanged", "embedded"),
    "erasures": ("proposals", "refs", "episodes", "lance_rows", "commits_rewritten", "seconds"),
    "reflections": ("modes", "proposed", "pending", "applied", "output_tokens", "errors"),
    "applied_proposals": ("applied", "rows_changed", "failed", "published_memories", "published_procedures"),
}


@dataclass
class RunSummary:
    job: str
    partition: str
    run_id: str
    success: bool
    changes: str = ""


def prepare_instance(settings: Settings) -> Path:
    """Create `$MINDFLOW_HOME/dagster/dagster.yaml` with the pool limit, and point DAGSTER_HOME at it."""
    home = settings.dagster_home
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    wanted = base = dagster_yaml(settings.duckdb_writers)
    if settings.dagster_postgres_url is not None:
        if importlib.util.find_spec("dagster_postgres") is None:
            raise MindflowError(
                "MINDFLOW_DAGSTER_POSTGRES_URL is set but dagster-postgres is not installed: "
                "pip install 'mindflow[scale]'"
            )
        wanted = base + POSTGRES_STORAGE
        _postgres_env(settings)
    # Switching profiles rewrites a file mindflow wrote; one a user edited is theirs.
    current = config.read_text() if config.exists() else None
    if current is None or current in _EARLIER_YAML or _ours(current):
        if current != wanted:
            config.write_text(wanted)
    elif "mindflow.dagster_storage" in current:
        raise MindflowError(
            f"{config} names mindflow.dagster_storage, which mindflow no longer has: delete its "
            "`event_log_storage:` block (Dagster's default storage reads the same files)"
        )
    os.environ["DAGSTER_HOME"] = str(home)
    os.environ["MINDFLOW_HOME"] = str(settings.resolved_home)
    # Dagster's opt-in: a run over a range of partitions records one "planned" event per
    # asset instead of one per partition (a backfill of two years of days wrote ~730 more
    # events, ~8 ms each on SQLite). Dagster's stated trade-off: partitions of such a run
    # that fails are shown as missing rather than failed; the run itself shows the failure.
    os.environ.setdefault("DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS", "true")
    # The materializations of a range run reach the event log as one batch.
    os.environ.setdefault("DAGSTER_EVENT_BATCH_SIZE", "1000")
    return home


def _postgres_env(settings: Settings) -> None:
    """MINDFLOW_DAGSTER_POSTGRES_URL as dagster.yaml's storage reads it."""
    scheme, _, rest = settings.dagster_postgres_url.get_secret_value().partition("://")
    # SQLAlchemy 2.1 reads a bare postgresql:// as psycopg 3; dagster-postgres brings psycopg2.
    scheme = "postgresql+psycopg2" if scheme in ("postgresql", "postgres") else scheme
    os.environ["MINDFLOW_DAGSTER_POSTGRES_URL"] = f"{scheme}://{rest}"


@contextmanager
def existing_instance(settings: Settings) -> Iterator:
    """The Dagster instance of this home as it is, for reading (`mindflow status`): None where no run
    was recorded yet. Unlike `prepare_instance` it writes no file and makes no database."""
    home = settings.dagster_home
    postgres = settings.dagster_postgres_url is not None and importlib.util.find_spec("dagster_postgres")
    if not (home / "dagster.yaml").exists() or not (postgres or (home / "history" / "runs.db").exists()):
        yield None
        return
    if postgres:
        _postgres_env(settings)
    import dagster as dg

    with dg.DagsterInstance.from_config(str(home)) as instance:
        yield instance


def _ours(text: str) -> bool:
    """Whether `text` is a configuration mindflow writes, for any pool limit and storage."""
    match = re.search(r"^    default_limit: (\d+)$", text, re.MULTILINE)
    if match is None or not 1 <= int(match.group(1)) <= 256:
        return False
    base = dagster_yaml(int(match.group(1)))
    return text in (base, base + POSTGRES_STORAGE)


def init_home(settings: Settings) -> Path:
    """An empty home with its stores: the folders, the Dagster instance (its SQLite run,
    event and schedule databases) and the DuckDB schema. Every command creates what it
    needs on first use; this does it ahead, once."""
    from mindflow import store

    for folder in (settings.inbox, settings.events, settings.workspace):
        folder.mkdir(parents=True, exist_ok=True)
    if isinstance(settings.lance_path, Path):  # on object storage the first table makes its prefix
        settings.lance_path.mkdir(parents=True, exist_ok=True)
    home = prepare_instance(settings)
    import dagster as dg

    # A run left "started" by a killed process is marked failed here too, as before any run.
    with dg.DagsterInstance.get() as instance:
        reap(settings, instance, _say)  # pool.StorageLocked (a MindflowError) says why it stops
    with store.connect(settings.duckdb_path, lock_timeout_s=settings.duckdb_lock_timeout_s):
        pass
    return home


DEAD_PROCESS = "the run's process is gone (killed, or its machine restarted): marked failed"


def reap(settings: Settings, instance, say: Callable[[str], None]) -> None:
    """Mark failed the runs a dead process left started (`pool.reap_stale_runs`), and record each
    as a failed run, as the run-failure sensor does where a Dagster daemon runs."""
    for run_id in pool.reap_stale_runs(instance, log=say).failed:
        record_failure(settings, instance, run_id, DEAD_PROCESS)


def record_failure(
    settings: Settings, instance, run_id: str, error: str, steps: list[str] | None = None
) -> None:
    """A failed run in the audit trail, the webhook and `mindflow status` (`failures.record`;
    idempotent, so a daemon's sensor recording it too adds nothing)."""
    record = instance.get_run_record_by_id(run_id)
    if record is not None:
        failures.record(settings, failures.of_run(record.dagster_run, record, error, steps))


_INSTANCE: list = []  # [((DAGSTER_HOME, its dagster.yaml), instance)] of the last run_job here


def local_instance():
    """The Dagster instance of DAGSTER_HOME, kept for the next job in this process.

    Opening an instance builds its storages and checks their schema revisions: a patrol
    right after an ingest started its run in 0.16 s instead of 0.78 s. `mindflow demo`
    and other callers that run several jobs in a row open it once. A new home, or an
    edited dagster.yaml, opens a new one.
    """
    import dagster as dg

    home = os.environ["DAGSTER_HOME"]
    key = (home, (Path(home) / "dagster.yaml").read_text())
    if _INSTANCE and _INSTANCE[0][0] == key:
        return _INSTANCE[0][1]
    while _INSTANCE:
        _INSTANCE.pop()[1].dispose()
    from filelock import FileLock

    # Two runs started at once on a new home both created the instance's SQLite tables, and one
    # ended in a traceback ("table runs already exists"): the first to open it creates them, the
    # other waits for that. The lock dies with its process, so a kill leaves nothing held.
    with FileLock(str(Path(home) / "instance.lock")):
        instance = dg.DagsterInstance.get()
    _INSTANCE.append((key, instance))
    return instance


def _parse_day(key: str) -> date:
    if not _DAY.fullmatch(key):
        raise MindflowError(f"invalid day {key!r}: use YYYY-MM-DD")
    try:
        return date.fromisoformat(key)
    except ValueError as exc:
        raise MindflowError(f"invalid day {key!r}: {exc}") from exc


def _day_range(partition: str) -> tuple[date, date]:
    """`YYYY-MM-DD` or `YYYY-MM-DD...YYYY-MM-DD`."""
    start, _, end = partition.partition("...")
    first, last = _parse_day(start), _parse_day(end or start)
    if last < first:
        raise MindflowError(f"invalid range {partition!r}: the end is before the start")
    if first < date(2020, 1, 1) or last > utcnow().date() + timedelta(days=1):
        raise MindflowError(f"range {partition!r} lies outside the partitions (2020-01-01 .. tomorrow)")
    return first, last


def _last_month() -> date:
    """The first day of the month that ended last: audit_archive's newest partition."""
    return (utcnow().date().replace(day=1) - timedelta(days=1)).replace(day=1)


def _month(partition: str) -> date:
    """`YYYY-MM`, one of audit_archive's partitions, as its first day (the partition key)."""
    if not _MONTH.fullmatch(partition):
        raise MindflowError(f"invalid month {partition!r}: use YYYY-MM")
    try:
        first = date.fromisoformat(partition + "-01")
    except ValueError as exc:
        raise MindflowError(f"invalid month {partition!r}: use YYYY-MM") from exc
    # Checked here: Dagster would refuse a month before its start only once the run is launched.
    if not date(2020, 1, 1) <= first <= _last_month():
        raise MindflowError(
            f"month {partition!r} lies outside the partitions (2020-01 .. {_last_month():%Y-%m}, "
            "the last month that has ended)"
        )
    return first


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@contextmanager
def _imports_frozen() -> Iterator[None]:
    """Leave the objects alive before a run (Dagster's and the other imports', ~700,000) out of
    the garbage collector's full passes while it runs (`gc.freeze`), and give them back after.

    Each full pass walks every live object, though none of those is garbage: over ingest +
    patrol of LoCoMo's 2,760 turns, full passes took 1.42 s in 10 passes, and 0.71 s in 12
    with the freeze (counted by `gc.callbacks`).
    """
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@contextmanager
def _pool_turn(instance, say: Callable[[str], None], writers: int, *, job: str, label: str) -> Iterator[None]:
    """Hold one of this home's `writers` turns at pool `duckdb` while a run executes in this process.

    A file lock per turn orders the CLI's own runs (the kernel drops it with a killed process,
    so a kill -9 never leaves it taken); then `pool.wait_until_free` waits out runs that the
    daemon or the UI launched. Both wait asleep, and say what they wait for.

    While it waits for a turn it names the holders from their turn notes, not from Dagster's
    storage: a holder suspended mid-write keeps that storage locked, and a read would hang for
    SQLite's busy timeout and fail.
    """
    from filelock import FileLock, Timeout

    folder = Path(os.environ["DAGSTER_HOME"])
    paths = [folder / (f"pool-{pool.POOL}.lock" if i == 0 else f"pool-{pool.POOL}-{i}.lock")
             for i in range(writers)]  # fmt: skip
    turns = [FileLock(str(path)) for path in paths]

    def free_turn():
        for path, turn in zip(paths, turns, strict=True):
            try:
                turn.acquire(timeout=0)
                return path, turn
            except Timeout:
                continue
        return None

    def noted_holders() -> str:
        notes = [note for note in map(pool.read_turn_note, paths) if note is not None]
        return "; ".join(note.describe() for note in notes) or "a run that is starting"

    held = free_turn()
    if held is None:
        said = noted_holders()
        say(
            f"waiting for pool {pool.POOL}: another mindflow process runs {said}. "
            "Ctrl-C stops waiting; nothing is lost."
        )
        while held is None:
            time.sleep(pool.WAIT_POLL_S)
            held = free_turn()
    path, turn = held
    try:
        pool.write_turn_note(path, job, label)
        pool.wait_until_free(instance, say, limit=writers)
        yield
    finally:
        pool.TurnNote.path(path).unlink(missing_ok=True)  # a killed holder's is ignored: its pid is gone
        turn.release()


def run_job(
    settings: Settings,
    job: str,
    *,
    being: str | None = None,
    partition: str | None = None,
    say: Callable[[str], None] | None = None,
) -> list[RunSummary]:
    """Execute a job through Dagster on the local instance; returns one summary per run.

    A run starts once pool `duckdb` is free: runs left unfinished by a dead process are
    marked failed first, and a wait for a live one is announced through `say` (stderr).
    """
    if job not in JOBS:
        raise MindflowError(f"unknown job {job!r}; use one of: {', '.join(JOBS)}")
    if being is not None:
        validate_being_id(being)
    # Everything a user can get wrong is checked before Dagster is imported (seconds).
    runs: list[tuple[str, dict]] = []
    if job == "ingest":
        if being is not None:
            raise MindflowError("ingest covers every being's inbox; drop --being")
        # The days to ingest; their runs are planned over the `days` partitions (see _ingest_runs).
        span = _day_range(partition) if partition else None
        pending = pending_days(settings.inbox, max_chars=settings.max_episode_chars)
        ingest_days = [d for ds in pending.values() for d in ds if span is None or span[0] <= d <= span[1]]
    elif job == "ebook_reindex":
        if being is not None or partition:
            raise MindflowError("ebook_reindex covers the whole ebook folder; drop --being and --partition")
        runs.append(("all", {}))
    elif job == "forget":
        if being is not None or partition:
            raise MindflowError("forget erases every approved permanent forget; drop --being and --partition")
        runs.append(("all", {}))
    elif job == "approvals":
        if being is not None or partition:
            raise MindflowError(
                "approvals applies every being's approved proposals; drop --being and --partition"
            )
        runs.append(("all", {}))
    elif job == "audit_digest":
        if being is not None:
            raise MindflowError("audit_digest covers the whole workspace; drop --being")
        first = _month(partition) if partition else _last_month()
        runs.append((first.strftime("%Y-%m"), {"partition_key": first.isoformat()}))
    elif job == "decay":
        if being is not None:
            raise MindflowError("decay covers every being; drop --being")
        if partition and "..." in partition:
            raise MindflowError(f"invalid day {partition!r}: decay scores as of one day; use YYYY-MM-DD")
        day = _day_range(partition)[0] if partition else utcnow().date()
        # decay_scores is not partitioned (one current score per memory): the day is its config.
        decay_config = {"ops": {"decay_scores": {"config": {"as_of": day.isoformat()}}}}
        runs.append((day.isoformat(), {"run_config": decay_config}))
    elif partition and being and partition != being:
        raise MindflowError("give the being either as --being or as --partition, not both")
    elif partition:
        for name in partition.split("...", 1):  # a being, or a range FIRST...LAST of them
            validate_being_id(name)

    prepare_instance(settings)
    import warnings

    import dagster as dg

    warnings.filterwarnings("ignore", category=dg.BetaWarning)
    instance = local_instance()
    # Runs a killed process left "started" are marked failed by every `mindflow run`, one that
    # finds nothing to do too, not only by one that waits for the pool.
    try:
        reap(settings, instance, say or _say)
    except pool.StorageLocked:
        pass  # a process stopped mid-write holds the storage: the wait for the pool says so, and reaps
    if job == "ingest":
        runs.extend(_ingest_runs(instance, ingest_days, span, settings.ingest_max_gap_days))
    if job in ("extraction", "patrol", "form", "narrative", "journal_reindex", "reflection"):
        known = instance.get_dynamic_partitions("beings")
        wanted = being or partition
        names = wanted.split("...", 1) if wanted else []
        for name in names:
            if name not in known:
                raise MindflowError(
                    f"unknown being {name!r}: it has no ingested episodes yet "
                    f"(known: {', '.join(known) or 'none'})"
                )
        if len(names) == 2 and known.index(names[1]) < known.index(names[0]):
            raise MindflowError(
                f"invalid range {wanted!r}: {names[1]} comes before {names[0]} among the beings "
                f"({', '.join(known)})"
            )
        if len(names) == 1:
            runs.append((wanted, {"partition_key": wanted}))
        elif known:
            # Every being (or a range of them) in one run: the model loads once, memories publish once.
            first, last = names or (known[0], known[-1])
            runs.append(
                (
                    f"{first}...{last}" if first != last else first,
                    {
                        "tags": {
                            "dagster/asset_partition_range_start": first,
                            "dagster/asset_partition_range_end": last,
                        }
                    },
                )
            )
    if not runs:
        return []
    from mindflow import launch

    summaries = []
    for label, kwargs in runs:
        tags = dict(kwargs.get("tags", {}))
        if "partition_key" in kwargs:
            tags["dagster/partition"] = kwargs["partition_key"]
        run_config = {**_run_config(job), **kwargs.get("run_config", {})}
        if settings.dagster_url:
            # The UI launches it from its workspace and its daemon queues it on pool `duckdb`.
            run_id = launch.submit(settings.dagster_url, job, run_config=run_config, tags=tags)
            status = launch.follow(settings.dagster_url, run_id, say or _say)
            events = launch.run_events(instance, run_id) if instance.get_run_by_id(run_id) else []
            success = status == "SUCCESS"
        else:
            with (
                _pool_turn(instance, say or _say, settings.duckdb_writers, job=job, label=label),
                _imports_frozen(),
            ):
                # A run of the job rebuilt from the code location, executed here (public execute_job).
                tags.update(pool.run_tags())
                result = launch.execute(instance, job, run_config=run_config, tags=tags)
            run_id, success, events = result.run_id, result.success, result.all_events
            if not success and _interrupted(events):
                # Ctrl-C mid-run: Dagster recorded the run failed ("interrupted"); the CLI says so.
                raise KeyboardInterrupt
        summaries.append(RunSummary(job, label, run_id, success, _changes(events)))
        # What the run-failure and recovery sensors record where a daemon runs, recorded here
        # for a run without one (both are idempotent).
        if success:
            failures.resolve(settings, job, run_id, utcnow())
        else:
            detail = launch.first_error(events)
            error, steps = failures.step_error([e for e in events if e.is_step_failure])
            record_failure(settings, instance, run_id, error or detail or "the run failed", steps)
            raise MindflowError(
                f"{job} run {run_id} for {label} failed{': ' + detail if detail else ''} "
                "(see the Dagster UI: make dev)"
            )
    return summaries


def _ingest_runs(
    instance, wanted: list[date], span: tuple[date, date] | None, max_gap: int
) -> list[tuple[str, dict]]:
    """Ingest runs over the `days` partitions: the pending days (within `span`, when given), and in a
    backfill of `span` the days already partitions there; new days are added as partitions first."""
    known = list(instance.get_dynamic_partitions("days"))
    if span is not None:
        wanted = wanted + [d for d in map(date.fromisoformat, known) if span[0] <= d <= span[1]]
    wanted = sorted(set(wanted))
    new = [d.isoformat() for d in wanted if d.isoformat() not in set(known)]
    if new:
        instance.add_dynamic_partitions("days", new)
    return [
        (
            f"{first}...{last}",
            {
                "tags": {
                    "dagster/asset_partition_range_start": first,
                    "dagster/asset_partition_range_end": last,
                }
            },
        )
        for first, last in plan_key_ranges(wanted, known + new, max_gap)
    ]


def _interrupted(events) -> bool:
    """Whether a run failed because this process was interrupted (SIGINT, Ctrl-C)."""
    for event in events:
        error = getattr(event.event_specific_data, "error", None) if event.is_failure else None
        while error is not None:
            if error.cls_name in ("KeyboardInterrupt", "DagsterExecutionInterruptedError"):
                return True
            error = error.cause
    return False


def _run_config(job: str) -> dict:
    """The CLI's quiet loggers, with what the job itself configures (a run config replaces the job's)."""
    from mindflow.config import load_settings

    progress = {"progress": {"config": {"after_s": load_settings().progress_after_s}}}
    quiet = {"loggers": {**_QUIET["loggers"], **progress}}
    if job == "form":
        if str(PROJECT_ROOT) not in sys.path:
            sys.path.insert(0, str(PROJECT_ROOT))
        from jobs.form import FORM_RUN_CONFIG

        return {**quiet, **FORM_RUN_CONFIG}
    return quiet


def _changes(events) -> str:
    """`episodes: new=3 quarantined=1; nodes: new=3 ...` from the run's materializations."""
    seen: dict[str, str] = {}
    for event in events:
        if not event.is_step_materialization:
            continue
        materialization = event.step_materialization_data.materialization
        name = materialization.asset_key.to_user_string()
        if name in seen or name not in SUMMARY_KEYS:
            continue
        meta = materialization.metadata
        parts = [f"{k}={meta[k].value}" for k in SUMMARY_KEYS[name] if k in meta]
        seen[name] = f"{name}: {' '.join(parts)}"
    return "; ".join(seen.values())
