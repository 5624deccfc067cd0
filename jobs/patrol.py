"""Job `patrol`: a being's scenes, nodes and clusters, then the published `memories` and `facts_graph`."""

import dagster as dg

from jobs.per_being import nightly_per_being

patrol_job = dg.define_asset_job(
    "patrol",
    selection=["scene_notes", "nodes", "clusters", "journal", "facts_graph", "memories"],
    description="The patrol of one being's memory (steps ❶-❼), then publish recall rows and the facts graph.",
    executor_def=dg.in_process_executor,
)


nightly_patrol = nightly_per_being(
    "nightly_patrol", patrol_job, "0 2 * * *", "Every night at 02:00, one patrol run per known being."
)
