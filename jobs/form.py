"""Job `form`: a being's new episodes formed (❶) and published, minutes after ingestion, not at night."""

import dagster as dg

# The `nodes` asset runs ❶ only (scenes -> nodes, embedded, clustered; marks and recall
# events folded): session counts advance once a night, in the patrol, never per ingestion.
FORM_RUN_CONFIG = {"ops": {"nodes": {"config": {"steps": "form"}}}}

form_job = dg.define_asset_job(
    "form",
    selection=["scene_notes", "nodes", "memories"],
    config=FORM_RUN_CONFIG,
    description="❶ for the beings that got new episodes (scenes, nodes, clusters), then publish "
    "`memories`: the fresh tail's episodes become memories. Started by `form_sensor` after ingestion.",
    executor_def=dg.in_process_executor,
)
