"""Job `patrol`: a being's scenes, nodes and clusters, then the published `memories` and `facts_graph`."""

import dagster as dg

from assets.partitions import beings

patrol_job = dg.define_asset_job(
    "patrol",
    selection=["scene_notes", "nodes", "clusters", "journal", "facts_graph", "memories"],
    description="The patrol of one being's memory (steps ❶-❼), then publish recall rows and the facts graph.",
    executor_def=dg.in_process_executor,
)


@dg.schedule(
    job=patrol_job,
    cron_schedule="0 2 * * *",
    execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING,
)
def nightly_patrol(context: dg.ScheduleEvaluationContext):
    """Every night at 02:00, one patrol run per known being."""
    day = context.scheduled_execution_time.strftime("%Y-%m-%d")
    known = context.instance.get_dynamic_partitions(beings.name)
    if not known:
        return dg.SkipReason("no being has episodes yet")
    return [dg.RunRequest(run_key=f"patrol-{being}-{day}", partition_key=being) for being in known]
