"""Job `forget`: carry out the approved permanent forgets (asset `erasures`)."""

import dagster as dg

forget_job = dg.define_asset_job(
    "forget",
    selection=["erasures"],
    description="Erase approved permanent forgets everywhere under MINDFLOW_HOME; nothing waiting: a no-op.",
    executor_def=dg.in_process_executor,
)
