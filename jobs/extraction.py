"""Job `extraction`: a being's new episodes -> scenes, entities, facts and relations (extraction model)."""

import dagster as dg

extraction_job = dg.define_asset_job(
    "extraction",
    selection=["scene_notes"],
    description="Scene and fact extraction of new episodes (one model call per batch); the patrol "
    "runs it first too. Without a model it makes the mechanical one-scene-per-episode notes.",
    executor_def=dg.in_process_executor,
)
