"""Job `narrative`: each being's STORY.md, then its MEMORY.md, then the index of its memory files."""

import dagster as dg

from jobs.per_being import nightly_per_being

narrative_job = dg.define_asset_job(
    "narrative",
    selection=["story", "core_memory", "journal_chunks"],
    description="Narrate the episodes past STORY.md's anchor, rewrite MEMORY.md under 3,000 tokens, "
    "then index the memory files for journal_memory_search.",
    executor_def=dg.in_process_executor,
)


nightly_narrative = nightly_per_being(
    "nightly_narrative",
    narrative_job,
    "30 3 * * *",
    "Every night at 03:30 (after patrol and decay), one narrative run per known being.",
)
