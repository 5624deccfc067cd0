"""Sensor `forget_sensor`: a `forget` run as soon as a permanent forget is approved, again if one failed."""

import dagster as dg

from jobs.forget import forget_job
from sensors.proposal_runs import run_for

TAG = "mindflow/erase"


@dg.sensor(job=forget_job, minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING)
def forget_sensor(context: dg.SensorEvaluationContext):
    """A run when an approved permanent forget has not been applied: one per set of proposals, and
    one more after a run of them failed or was killed (every step of the erase is idempotent)."""
    from mindflow.config import load_settings
    from mindflow.loop.erase import pending

    waiting = sorted(p.proposal_id for proposals in pending(load_settings()).values() for p in proposals)
    if not waiting:
        return dg.SkipReason("no approved permanent forget waits")
    return run_for(
        context, forget_job, waiting, tag=TAG,
        gave_up="failed; see the last one's error, fix it, then `mindflow run forget`",
    )  # fmt: skip
