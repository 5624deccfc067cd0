"""Jobs `reflection` (each being's cycle) and `approvals` (decisions carried out); the nightly schedule."""

import dagster as dg

from jobs.per_being import nightly_per_being

reflection_job = dg.define_asset_job(
    "reflection",
    selection=["reflections"],
    description="Each being's reflection cycle: survey, meta-reflection, consolidation and core proposals, "
    "the pending-reflection.md summary; review mode applies nothing until a person decides.",
    executor_def=dg.in_process_executor,
)

approvals_job = dg.define_asset_job(
    "approvals",
    selection=["applied_proposals"],
    description="Carry out approved proposals (merges, archivals, settled contradictions, procedures, "
    "MEMORY.md, sub-agent memories), one audit commit each; nothing approved: a no-op.",
    executor_def=dg.in_process_executor,
)

nightly_reflection = nightly_per_being(
    "nightly_reflection",
    reflection_job,
    "0 4 * * *",
    "Every night at 04:00 (after decay at 03:00 and the narrative at 03:30), one reflection run per being.",
)
