"""Job `decay`: decay scores and fact activation as of a day, then published to `memories` and the graph."""

import dagster as dg

decay_job = dg.define_asset_job(
    "decay",
    selection=["decay_scores", "memories", "facts_graph"],
    description="Recompute decay scores and statuses and fact activation as of a day (config `as_of`, "
    "by default now), then publish them.",
    executor_def=dg.in_process_executor,
)


@dg.schedule(
    job=decay_job,
    cron_schedule="0 3 * * *",
    execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING,
)
def nightly_decay(context: dg.ScheduleEvaluationContext):
    """Every night at 03:00, decay as of that day."""
    day = context.scheduled_execution_time.strftime("%Y-%m-%d")
    return dg.RunRequest(run_key=f"decay-{day}", run_config=as_of_config(day))


def as_of_config(day: str) -> dict:
    """The run config of a decay run as of `day` (YYYY-MM-DD)."""
    return {"ops": {"decay_scores": {"config": {"as_of": day}}}}
