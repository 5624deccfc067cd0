"""Job `ebook_reindex`: the ebook folder -> `ebook_chunks`, weekly and when the folder changes."""

import dagster as dg

ebook_reindex_job = dg.define_asset_job(
    "ebook_reindex",
    selection=["ebook_chunks"],
    description="Incremental reindex of the ebook folder: unchanged documents skipped by content hash.",
    executor_def=dg.in_process_executor,
)


@dg.schedule(
    job=ebook_reindex_job,
    cron_schedule="30 3 * * 0",
    execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING,
)
def weekly_ebook_reindex(context: dg.ScheduleEvaluationContext):
    """Every Sunday at 03:30, reindex the ebook folder."""
    day = context.scheduled_execution_time.strftime("%Y-%m-%d")
    return dg.RunRequest(run_key=f"ebook-reindex-{day}")
