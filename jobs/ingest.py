"""Job `ingest`: inbox files -> `episodes`, started by the inbox sensor or a backfill."""

import dagster as dg

ingest_job = dg.define_asset_job(
    "ingest",
    selection=["episodes"],
    description="Parse landed inbox files into episodes for a range of days.",
    executor_def=dg.in_process_executor,
)
