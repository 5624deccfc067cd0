"""Sensors `run_failure_alert` and `run_recovery`: failed runs of any mindflow job recorded and posted."""

from __future__ import annotations

import dagster as dg

from mindflow import failures
from mindflow.config import load_settings
from mindflow.models import utcnow


@dg.run_failure_sensor(default_status=dg.DefaultSensorStatus.RUNNING)
def run_failure_alert(context: dg.RunFailureSensorContext):
    """Record every failed run of a mindflow job in the audit log and `mindflow status`, and POST it
    to MINDFLOW_FAILURE_WEBHOOK_URL when that is set (mindflow/failures.py)."""
    run = context.dagster_run
    record = context.instance.get_run_record_by_id(run.run_id)
    # The error the first failed step raised; the run's own failure message when no step failed
    # (a run killed, a bad config).
    error, steps = failures.step_error(context.get_step_failure_events())
    error = error or context.failure_event.message
    done = failures.record(load_settings(), failures.of_run(run, record, error, steps))
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
    ended = failures.utc_of(record.end_time if record else None) or utcnow()
    if failures.resolve(load_settings(), run.job_name, run.run_id, ended):
        context.log.info(f"{run.job_name} succeeded again (run {run.run_id}) after a failure")
