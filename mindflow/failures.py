"""Failed runs: recorded in the audit trail and `runs/failures.jsonl`, posted to a webhook, listed by status.

The run-failure sensor (sensors/failures.py) calls `record` once per failed run. It must not
block the sensor daemon, and a sensor evaluation killed half-way is evaluated again for the
same run (Dagster persists a sensor's cursor only with a finished tick), so `record` is
idempotent and ordered so that every step can be repeated:

1. the audit row (`ALERT`, target `job:<name>`), with an id and time derived from the run: into
   DuckDB when the file is free within a second or two; while a job holds it, the audit trail's
   journal keeps the row (its meta/audit.log line is written at once) and the next audited write
   that has a connection inserts it (mindflow/audit/writes.py: recover);
2. the webhook POST, if configured (a short timeout; a failure to deliver is logged, not raised);
3. the line in `runs/failures.jsonl`, an append-only file (one fsynced write per line) that
   `mindflow status` reads without DuckDB or Dagster. It is written last: its line is what says
   the failure is fully recorded, so a run already in it is skipped, and a repeated evaluation
   at worst posts the webhook twice (receivers can drop repeats by `run_id`).

`mindflow status` lists the failures of the last 24 hours, and older ones whose job has not
succeeded since: the success sensor appends a `recovered` line for a job's first successful run
after a failure (`resolve`).
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from mindflow.config import Settings
from mindflow.errors import MindflowError
from mindflow.files import append_locked
from mindflow.models import utcnow

FAILURES = "runs/failures.jsonl"
ACTOR = "run_failure_sensor"
# The error kept is its first line, at most this long. A step's error can quote what it was
# working on (a model's rejected answer, an episode's text), and the audit log, the status
# output and the webhook's receiver are not places for memory text: quoted spans are elided
# too. The whole error stays in the Dagster UI, beside the run.
ERROR_CHARS = 160
_QUOTED = re.compile(r"""(?<!\w)(['"`]).{12,}?\1(?!\w)""")
DUCKDB_WAIT_S = 2.0  # a sensor tick must stay short: past this the audit journal keeps the row
RECENT = timedelta(hours=24)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunFailure:
    """What is recorded of one failed run."""

    job: str
    run_id: str
    partition: str | None
    error: str  # first line only, see `first_line`
    ended_at: datetime
    started_at: datetime | None = None
    steps: list[str] = field(default_factory=list)  # the steps that failed

    def payload(self) -> dict:
        """The webhook's JSON body (and the failures.jsonl line)."""
        data = asdict(self)
        data["started_at"] = self.started_at.isoformat() + "Z" if self.started_at else None
        data["ended_at"] = self.ended_at.isoformat() + "Z"
        return {"event": "run_failed", **data}

    @classmethod
    def from_payload(cls, data: dict) -> RunFailure:
        def when(value: str | None) -> datetime | None:
            return datetime.fromisoformat(value.rstrip("Z")) if value else None

        return cls(
            job=data["job"],
            run_id=data["run_id"],
            partition=data.get("partition"),
            error=data.get("error", ""),
            ended_at=when(data["ended_at"]),
            started_at=when(data.get("started_at")),
            steps=list(data.get("steps") or []),
        )


def of_run(run, record, error: str, steps: list[str] | None = None) -> RunFailure:
    """The failure of a Dagster run (`run`, and its run `record` when there is one, for its times):
    what the run-failure sensor and `mindflow run` record alike."""
    return RunFailure(
        job=run.job_name,
        run_id=run.run_id,
        partition=partition_of(run.tags),
        error=first_line(error),
        ended_at=utc_of(record.end_time if record else None) or utcnow(),
        started_at=utc_of(record.start_time if record else None),
        steps=list(steps or []),
    )


def step_error(step_failures) -> tuple[str, list[str]]:
    """The first line of the error the first failed step raised (not Dagster's wrapper around it,
    nor what that error was raised from) and the failed steps, from a run's step-failure events;
    ("", []) when no step failed."""
    for event in step_failures:
        error = getattr(event.event_specific_data, "error", None)
        while error is not None and (error.cls_name or "").startswith("Dagster") and error.cause is not None:
            error = error.cause
        if error is not None:
            return first_line(error.message), [e.step_key for e in step_failures if e.step_key]
    return "", []


def utc_of(timestamp: float | None) -> datetime | None:
    """A run record's timestamp (seconds, as Dagster keeps them) as naive UTC, as mindflow keeps times."""
    return datetime.fromtimestamp(timestamp, UTC).replace(tzinfo=None) if timestamp else None


def partition_of(tags: dict[str, str]) -> str | None:
    """A run's partition from its tags: its key, or its range as `start...end`."""
    if "dagster/partition" in tags:
        return tags["dagster/partition"]
    start = tags.get("dagster/asset_partition_range_start")
    end = tags.get("dagster/asset_partition_range_end")
    return (start if start == end else f"{start}...{end}") if start else None


def first_line(message: str | None) -> str:
    """The first non-empty line of an error, quoted spans elided, at most ERROR_CHARS long."""
    line = next((x.strip() for x in (message or "").splitlines() if x.strip()), "")
    line = _QUOTED.sub(lambda m: f"{m.group(1)}…{m.group(1)}", line)
    return line if len(line) <= ERROR_CHARS else line[: ERROR_CHARS - 1] + "…"


def _path(settings: Settings) -> Path:
    return settings.resolved_home / FAILURES


def read(settings: Settings) -> list[dict]:
    """Every line of failures.jsonl, oldest first (a line cut short by a crash is skipped)."""
    path = _path(settings)
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict) and data.get("job") and data.get("run_id"):
            out.append(data)
    return out


def _append(settings: Settings, data: dict) -> None:
    append_locked(_path(settings), (json.dumps(data, ensure_ascii=False) + "\n").encode())


def audit_row(failure: RunFailure):
    from mindflow.audit import AuditRow

    where = f" [{failure.partition}]" if failure.partition else ""
    steps = f" in {', '.join(failure.steps)}" if failure.steps else ""
    return AuditRow(
        "ALERT",
        f"job:{failure.job}",
        ACTOR,
        f"run failed{where}{steps}: {failure.error or 'no error message'}",
        run_id=failure.run_id,
        ts=failure.ended_at.replace(microsecond=0),
        audit_id=f"a-failed-{failure.run_id}",
    )


def _audit(settings: Settings, failure: RunFailure) -> str:
    """Write the audit row; returns where it went ("duckdb" or "journal")."""
    import duckdb

    from mindflow import audit, store

    row = audit_row(failure)
    if any(r.audit_id == row.audit_id or r.line() == row.line() for r in audit.read_log(settings)):
        return "journal"  # an earlier evaluation, killed before its failures.jsonl line, wrote it
    try:
        with store.connect(settings.duckdb_path, lock_timeout_s=DUCKDB_WAIT_S) as con:
            audit.log_table_mutations(con, [row], settings)
            return "duckdb"
    except (MindflowError, duckdb.IOException) as exc:
        log.info("DuckDB is busy (%s): the audit row waits in the journal for the next writer", exc)
    audit.log_table_mutations(None, [row], settings)
    return "journal"


def post(url: str, failure: RunFailure, timeout_s: float) -> bool:
    """POST the failure as JSON; False (logged) when the receiver cannot be reached or refuses."""
    import httpx

    try:
        response = httpx.post(url, json=failure.payload(), timeout=timeout_s)
        response.raise_for_status()
    except httpx.HTTPError as exc:
        log.warning("run failure of %s %s not delivered to the webhook: %s", failure.job, failure.run_id, exc)
        return False
    return True


@dataclass
class Recorded:
    """What `record` did: where the audit row went, whether the webhook took it."""

    audit: str | None = None  # duckdb | journal | None (already recorded)
    posted: bool | None = None  # None: no webhook configured


def record(settings: Settings, failure: RunFailure) -> Recorded:
    """Record a failed run (idempotent: a run already in failures.jsonl is skipped)."""
    if any(r.get("run_id") == failure.run_id and r.get("event") == "run_failed" for r in read(settings)):
        return Recorded()
    done = Recorded(audit=_audit(settings, failure))
    if settings.failure_webhook_url:
        done.posted = post(settings.failure_webhook_url, failure, settings.failure_webhook_timeout_s)
    _append(settings, failure.payload())
    return done


def open_jobs(settings: Settings) -> set[str]:
    """Jobs whose latest recorded outcome is a failure."""
    latest: dict[str, str] = {}
    for r in read(settings):
        latest[r["job"]] = r.get("event", "")
    return {job for job, event in latest.items() if event == "run_failed"}


def resolve(settings: Settings, job: str, run_id: str, ended_at: datetime) -> bool:
    """Note a job's successful run when its last recorded outcome was a failure; True if noted."""
    if job not in open_jobs(settings):
        return False
    _append(
        settings,
        {"event": "recovered", "job": job, "run_id": run_id, "ended_at": ended_at.isoformat() + "Z"},
    )
    return True


def recent(settings: Settings, now: datetime | None = None) -> list[RunFailure]:
    """Failures of the last 24 hours, and older ones whose job has not succeeded since; newest first."""
    now = now or utcnow()
    rows = read(settings)
    out, recovered = [], set()
    for r in reversed(rows):
        if r.get("event") == "recovered":
            recovered.add(r["job"])
            continue
        if r.get("event") != "run_failed":
            continue
        failure = RunFailure.from_payload(r)
        if now - failure.ended_at <= RECENT or failure.job not in recovered:
            out.append(failure)
    return sorted(out, key=lambda f: f.ended_at, reverse=True)


def lines(settings: Settings, now: datetime | None = None) -> str:
    """`mindflow status`'s block of failed runs; empty when there is none to show."""
    failures = recent(settings, now)
    if not failures:
        return ""
    out = [f"ALERT {len(failures)} failed run(s) (last 24 h, and since each job's last success):"]
    for f in failures:
        where = f" [{f.partition}]" if f.partition else ""
        out.append(f"  {f.ended_at:%Y-%m-%d %H:%M} UTC  {f.job}{where}  run {f.run_id}")
        out.append(f"    {f.error or 'no error message'}")
    out.append("  details: the run's page in the Dagster UI (make dev); re-run with `mindflow run JOB`")
    return "\n".join(out)
