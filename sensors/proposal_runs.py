"""One run per set of approved proposals, again after it failed or was killed, up to a limit.

Shared by `forget_sensor` and `approvals_sensor`: both carry out what a person approved, every
step of it idempotent, so a run that died is simply asked for again with the same set.
"""

import hashlib

import dagster as dg

# Runs of one set of proposals that may fail before the sensor stops asking (then the run's
# error, in the UI or from `mindflow run <job>`, says what to fix).
MAX_ATTEMPTS = 5
_UNDER_WAY = (
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
)


def run_for(
    context: dg.SensorEvaluationContext,
    job: dg.JobDefinition,
    proposal_ids: list[str],
    *,
    tag: str,
    gave_up: str,
) -> dg.RunRequest | dg.SkipReason:
    """A run of `job` for these proposals (tagged `tag`=a key of the set), unless one is under way or
    MAX_ATTEMPTS of them ended without carrying them out (`gave_up` then says what to do)."""
    key = hashlib.sha256(" ".join(sorted(proposal_ids)).encode()).hexdigest()[:24]
    runs = context.instance.get_runs(filters=dg.RunsFilter(job_name=job.name, tags={tag: key}))
    if any(r.status in _UNDER_WAY for r in runs):
        return dg.SkipReason(f"a run of {job.name} for these {len(proposal_ids)} proposals is under way")
    if len(runs) >= MAX_ATTEMPTS:
        return dg.SkipReason(f"{len(runs)} runs of {job.name} for these proposals {gave_up}")
    return dg.RunRequest(run_key=f"{job.name}-{key}-{len(runs)}", tags={tag: key})
