"""Sensors `reflection_sensor` (a session ended, the reflect phrase, episodes piling up) and
`approvals_sensor` (a decision waits to be carried out)."""

import dagster as dg

from assets.partitions import beings
from jobs.reflection import approvals_job, reflection_job
from sensors.proposal_runs import run_for

TAG = "mindflow/approved"


@dg.sensor(job=reflection_job, minimum_interval_seconds=120, default_status=dg.DefaultSensorStatus.RUNNING)
def reflection_sensor(context: dg.SensorEvaluationContext):
    """A reflection run for each being whose session ended (no episode for
    MINDFLOW_REFLECTION_SESSION_GAP_MIN minutes), who said the reflect phrase, or who has more than
    MINDFLOW_REFLECTION_MAX_UNPROCESSED episodes since its last reflection."""
    from mindflow import store
    from mindflow.config import load_settings
    from mindflow.errors import MindflowError
    from mindflow.reflection.triggers import due

    settings = load_settings()
    known = context.instance.get_dynamic_partitions(beings.name)
    if not known or not settings.duckdb_path.exists():
        return dg.SkipReason("no being has episodes yet")
    requests = []
    try:
        # Read-only: a job holding the file makes this evaluation skip, not wait.
        with store.connect(settings.duckdb_path, read_only=True) as con:
            found = [d for d in (due(con, settings, being) for being in known) if d is not None]
    except MindflowError as exc:
        return dg.SkipReason(f"DuckDB busy: {exc}")
    for d in found:
        requests.append(
            dg.RunRequest(
                run_key=f"reflection-{d.being_id}-{d.reason}-{d.key}",
                partition_key=d.being_id,
                tags={"mindflow/reflection_reason": d.reason, "mindflow/episodes": str(d.episodes)},
            )
        )
    return requests or dg.SkipReason("no session ended, no reflect phrase, no pile of new episodes")


@dg.sensor(job=approvals_job, minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING)
def approvals_sensor(context: dg.SensorEvaluationContext):
    """An `approvals` run when an approved proposal waits to be applied: one per set of proposals,
    and one more after a run of them failed or was killed (applying is idempotent)."""
    from mindflow.config import load_settings
    from mindflow.loop.proposals import ProposalStore
    from mindflow.reflection.apply import waiting

    store = ProposalStore(load_settings().proposals)
    ids = sorted(p.proposal_id for being in store.beings() for p in waiting(store, being))
    if not ids:
        return dg.SkipReason("no approved proposal waits")
    return run_for(
        context, approvals_job, ids, tag=TAG,
        gave_up="did not apply them all; see the last run's warnings, fix them, "
        "then `mindflow run approvals`",
    )  # fmt: skip
