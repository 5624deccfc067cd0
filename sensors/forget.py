"""Sensor `forget_sensor`: a `forget` run as soon as a permanent forget is approved, again if one failed."""

import hashlib

import dagster as dg

from jobs.forget import forget_job

# Runs of one set of proposals that may fail before the sensor stops asking (then the run's
# error, in the UI or from `mindflow run forget`, says what to fix).
MAX_ATTEMPTS = 5
TAG = "mindflow/erase"
_UNDER_WAY = (
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
)


@dg.sensor(job=forget_job, minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING)
def forget_sensor(context: dg.SensorEvaluationContext):
    """A run when an approved permanent forget has not been applied: one per set of proposals, and
    one more after a run of them failed or was killed (every step of the erase is idempotent)."""
    from mindflow.config import load_settings
    from mindflow.loop.erase import pending

    waiting = sorted(p.proposal_id for proposals in pending(load_settings()).values() for p in proposals)
    if not waiting:
        return dg.SkipReason("no approved permanent forget waits")
    key = hashlib.sha256(" ".join(waiting).encode()).hexdigest()[:24]
    runs = context.instance.get_runs(filters=dg.RunsFilter(job_name=forget_job.name, tags={TAG: key}))
    if any(r.status in _UNDER_WAY for r in runs):
        return dg.SkipReason(f"a forget run of these {len(waiting)} proposals is under way")
    if len(runs) >= MAX_ATTEMPTS:
        return dg.SkipReason(
            f"{len(runs)} forget runs of these proposals failed; see the last one's error, fix it, "
            "then `mindflow run forget`"
        )
    return dg.RunRequest(run_key=f"forget-{key}-{len(runs)}", tags={TAG: key})
