"""Sensor `forget_sensor`: a `forget` run as soon as a permanent forget is approved."""

import hashlib

import dagster as dg

from jobs.forget import forget_job


@dg.sensor(job=forget_job, minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING)
def forget_sensor(context: dg.SensorEvaluationContext):
    """A run when an approved permanent forget has not been applied; once per set of proposals."""
    from mindflow.config import load_settings
    from mindflow.loop.erase import pending

    waiting = sorted(p.proposal_id for proposals in pending(load_settings()).values() for p in proposals)
    if not waiting:
        return dg.SkipReason("no approved permanent forget waits")
    # The same proposals ask for one run; a new approval (or a failed run's successor set) asks again.
    key = hashlib.sha256(" ".join(waiting).encode()).hexdigest()[:24]
    return dg.RunRequest(run_key=f"forget-{key}", tags={"mindflow/proposals": str(len(waiting))})
