"""Assets `reflections` and `applied_proposals`: each being's reflection cycle; decisions carried out."""

import dagster as dg

from assets.nodes import llm_metadata, per_being_table, resolve_llm
from assets.partitions import beings
from assets.policies import EXTERNAL_CALLS
from assets.story import run_trigger
from mindflow.resources import DuckDBResource, EmbeddingResource, LanceDBResource


@dg.asset(
    deps=[
        dg.AssetDep("nodes", partition_mapping=dg.AllPartitionMapping()),
        "decay_scores",
    ],
    partitions_def=beings,
    backfill_policy=dg.BackfillPolicy.single_run(),
    pool="duckdb",
    group_name="reflection",
    kinds={"duckdb", "markdown"},
    code_version="1",
    retry_policy=EXTERNAL_CALLS,
)
def reflections(
    context: dg.AssetExecutionContext,
    duckdb: DuckDBResource,
    lancedb: LanceDBResource,
    embeddings: EmbeddingResource,
) -> dg.MaterializeResult:
    """A being's reflection: survey, meta-reflection, consolidation proposals, a proposed MEMORY.md and
    `reflection/pending-reflection.md`. In review mode nothing is applied until a person decides."""
    from mindflow.reflection.cycle import reflect_beings

    settings = duckdb.settings()
    model, llm_meta = resolve_llm(context, settings, "reflection")
    with duckdb.connect() as con:
        run = reflect_beings(
            con, settings, list(context.partition_keys), db=lancedb.connect(), embedder=embeddings.embedder,
            llm=model, run_id=context.run_id, trigger=run_trigger(context), log=context.log.info,
        )  # fmt: skip
    reports = run.reports
    proposed: dict[str, int] = {}
    for report in reports:
        for kind, n in report.proposed.items():
            proposed[kind] = proposed.get(kind, 0) + n
    return dg.MaterializeResult(
        metadata={
            "proposed": sum(proposed.values()),
            **{f"proposed_{kind}": n for kind, n in sorted(proposed.items())},
            "pending": sum(r.pending for r in reports),
            "applied": sum(r.applied.total for r in reports if r.applied),
            "modes": ", ".join(sorted({r.mode for r in reports})) or "none",
            "output_tokens": max((r.output_tokens for r in reports), default=0),
            "budget_tokens": settings.reflection_budget_tokens,
            "milestones": sum(r.milestone for r in reports),
            # Counts only: a model's error may quote memory text.
            "errors": sum(len(r.errors) for r in reports),
            "per_being": per_being_table(run.per_being()),
            **llm_metadata(model, llm_meta),
        }
    )


@dg.asset(
    pool="duckdb",
    group_name="reflection",
    kinds={"duckdb", "lancedb"},
    code_version="1",
    retry_policy=EXTERNAL_CALLS,
)
def applied_proposals(
    context: dg.AssetExecutionContext,
    duckdb: DuckDBResource,
    lancedb: LanceDBResource,
    embeddings: EmbeddingResource,
) -> dg.MaterializeResult:
    """Approved proposals carried out, each in one transaction with one audit commit (actor
    `reflection:<id>` or `bot:commit-from:<agent>`), then published to LanceDB."""
    from mindflow.reflection.approvals import apply_all

    with duckdb.connect() as con:
        report = apply_all(
            con, duckdb.settings(), lancedb.connect(), embeddings.embedder, run_id=context.run_id
        )
    for failure in report.failed:
        context.log.warning(f"not applied, left approved: {failure.split(':')[0]}")
    changed = report.count("changed")
    return dg.MaterializeResult(
        metadata={
            "applied": report.applied,
            **{f"applied_{kind}": n for kind, n in sorted(report.count().items())},
            "rows_changed": sum(changed.values()),
            "failed": len(report.failed),
            "published_memories": report.published.memories,
            "published_facts": report.published.facts,
            "published_procedures": report.published.procedures,
            "beings": ", ".join(r.being_id for r in report.reports) or "none",
        }
    )
