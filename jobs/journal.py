"""Job `journal_reindex`: a being's memory files -> `journal_chunks`, when they change."""

import dagster as dg

journal_reindex_job = dg.define_asset_job(
    "journal_reindex",
    selection=["journal_chunks"],
    description="Incremental index of a being's memory files (MEMORY.md, STORY.md, think.md, diary, "
    "daily logs) for journal_memory_search: unchanged files skipped.",
    executor_def=dg.in_process_executor,
)
