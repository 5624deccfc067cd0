"""Sensors `run_failure_alert` and `run_recovery`: failed runs of any mindflow job recorded and posted."""

from __future__ import annotations

from datetime import UTC, datetime

import dagster as dg

from mindflow import failures
from mindflow.config import load_settings
from mindflow.models import utcnow


def _when(timestamp: float | None) -> datetime | None:
    return datetime.fromtimestamp(timestamp, UTC).replace(tzinfo=None) if timestamp else None


def _partition(run: dg.DagsterRun) -> str | None:
    tags = run.tags
    if "dagster/partition" in tags:
        return tags["dagster/partition"]
    start, end = (
        tags.get("dagster/asset_partition_range_start"),
        tags.get("dagster/asset_partition_range_end"),
    )
    return (start if start == end else f"{start}...{end}") if start else None


def _error(context: dg.RunFailureSensorContext) -> tuple[str, list[str]]:
    """The error the first failed step raised (not Dagster's wrapper around it, nor what that error
    was raised from), and the failed steps; the run's own failure message when no step failed
    (a run killed, a bad config)."""
    steps = context.get_step_failure_events()
    for event in steps:
        error = getattr(event.event_specific_data, "error", None)
        while error is not None and (error.cls_name or "").startswith("Dagster") and error.cause is not None:
            error = error.cause
        if error is not None:
            return failures.first_line(error.message), [e.step_key for e in steps if e.step_key]
    return failures.first_line(context.failure_event.message), []


@dg.run_failure_sensor(default_status=dg.DefaultSensorStatus.RUNNING)
def run_failure_alert(context: dg.RunFailureSensorContext):
    """Record every failed run of a mindflow job in the audit log and `mindflow status`, and POST it
    to MINDFLOW_FAILURE_WEBHOOK_URL when that is set (mindflow/failures.py)."""
    run = context.dagster_run
    record = context.instance.get_run_record_by_id(run.run_id)
    error, steps = _error(context)
    failure = failures.RunFailure(
        job=run.job_name,
        run_id=run.run_id,
        partition=_partition(run),
        error=error,
        ended_at=_when(record.end_time if record else None) or utcnow(),
        started_at=_when(record.start_time if record else None),
        steps=steps,
    )
    done = failures.record(load_settings(), failure)
    # Nothing is returned: Dagster then goes on to the next failed run in the same tick and notes
    # on the failed run's page that this sensor handled it.
    if done.audit is None:
        context.log.info(f"run {run.run_id} of {run.job_name} was recorded already")
        return
    posted = {None: "", True: "; posted to the webhook", False: "; the webhook did not take it"}[done.posted]
    context.log.info(f"recorded failed run {run.run_id} of {run.job_name} (audit row: {done.audit}){posted}")


@dg.run_status_sensor(run_status=dg.DagsterRunStatus.SUCCESS, default_status=dg.DefaultSensorStatus.RUNNING)
def run_recovery(context: dg.RunStatusSensorContext):
    """Note the first successful run of a job after a failure, so `mindflow status` stops listing
    that job's older failures."""
    run = context.dagster_run
    record = context.instance.get_run_record_by_id(run.run_id)
    ended = _when(record.end_time if record else None) or utcnow()
    if failures.resolve(load_settings(), run.job_name, run.run_id, ended):
        context.log.info(f"{run.job_name} succeeded again (run {run.run_id}) after a failure")
