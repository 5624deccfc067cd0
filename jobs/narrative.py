"""Job `narrative`: each being's STORY.md, then its MEMORY.md."""

import dagster as dg

from assets.partitions import beings

narrative_job = dg.define_asset_job(
    "narrative",
    selection=["story", "core_memory"],
    description="Narrate the episodes past STORY.md's anchor, then rewrite MEMORY.md under 3,000 tokens.",
    executor_def=dg.in_process_executor,
)


@dg.schedule(
    job=narrative_job,
    cron_schedule="30 3 * * *",
    execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING,
)
def nightly_narrative(context: dg.ScheduleEvaluationContext):
    """Every night at 03:30 (after patrol and decay), one narrative run per known being."""
    day = context.scheduled_execution_time.strftime("%Y-%m-%d")
    known = context.instance.get_dynamic_partitions(beings.name)
    if not known:
        return dg.SkipReason("no being has episodes yet")
    return [dg.RunRequest(run_key=f"narrative-{being}-{day}", partition_key=being) for being in known]
