"""Asset `journal`: each being's diary entry for the day and its think.md, written after ❼."""

import dagster as dg

from assets.clusters import clusters
from assets.nodes import PATROL, llm_metadata, per_being_table, resolve_llm
from assets.policies import EXTERNAL_CALLS
from mindflow import patrol
from mindflow.models import utcnow
from mindflow.resources import DuckDBResource


@dg.asset(deps=[clusters], retry_policy=EXTERNAL_CALLS, **(PATROL | {"kinds": {"duckdb", "git"}}))
def journal(context: dg.AssetExecutionContext, duckdb: DuckDBResource) -> dg.MaterializeResult:
    """The being's diary (3-5 lines for the day) and think.md (3-7 bullets), by the patrol model."""
    settings = duckdb.settings()
    llm, llm_meta = resolve_llm(context, settings, "patrol")
    if llm is None:
        context.log.info(patrol.BYOK_SKIP_MESSAGE)
        return dg.MaterializeResult(
            metadata={"written": 0, "llm_steps": "skipped: no model configured", **llm_meta}
        )
    per_being: dict[str, dict[str, int]] = {}
    for group, con in duckdb.beings(context.partition_keys):
        for being_id in group:
            report = patrol.step_journal(con, settings, being_id, llm, utcnow(), run_id=context.run_id)
            context.log.info(f"{being_id} {report.step}: {report.counts}")
            for error in report.errors:  # why an LLM answer was rejected (never a key)
                context.log.warning(f"{being_id} {report.step}: {error}")
            per_being[being_id] = report.counts
    written = sum(c["diary"] + c["think"] for c in per_being.values())
    rejected = sum(c["rejected"] for c in per_being.values())
    return dg.MaterializeResult(
        metadata=llm_metadata(
            llm,
            {
                "written": written,
                "rejected_llm_answers": rejected,
                "per_being": per_being_table(per_being),
                **llm_meta,
            },
        )  # fmt: skip
    )
