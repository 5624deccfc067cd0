"""Asset `journal_chunks`: the LanceDB index of each being's memory files (journal_memory_search)."""

import dataclasses

import dagster as dg

from assets.nodes import per_being_table
from assets.partitions import beings
from assets.policies import EXTERNAL_CALLS
from mindflow.resources import DuckDBResource, EmbeddingResource, LanceDBResource, MindflowHome


@dg.asset(
    deps=["story", "core_memory", "journal"],
    partitions_def=beings,
    backfill_policy=dg.BackfillPolicy.single_run(),
    pool="duckdb",
    group_name="narrative",
    kinds={"lancedb", "markdown"},
    code_version="1",
    retry_policy=EXTERNAL_CALLS,
)
def journal_chunks(
    context: dg.AssetExecutionContext,
    duckdb: DuckDBResource,
    lancedb: LanceDBResource,
    embeddings: EmbeddingResource,
    mindflow_home: MindflowHome,
) -> dg.MaterializeResult:
    """Chunks of the being's MEMORY.md, STORY.md, think.md, diary and daily logs, with line ranges and
    vectors; only files changed since the last index are read again."""
    from mindflow import audit, journal_index

    settings = mindflow_home.settings()

    def progress(done: int, total: int, name: str) -> None:
        context.log.info(f"[{done + 1}/{total}] indexing {name}")

    with duckdb.connect() as con:
        # Critical files are verified at the start of every run; a change is logged as ALERT.
        integrity = audit.verify_critical(settings, con, run_id=context.run_id)
        report = journal_index.reindex(
            con,
            lancedb.connect(),
            settings.workspace,
            context.partition_keys,
            embeddings.embedder(),
            progress=progress,
            log=context.log.info,
        )
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": report.rows,
            "files": report.total("files"),
            "chunks": report.total("chunks"),
            "new": report.total("new"),
            "changed": report.total("changed"),
            "removed": report.total("removed"),
            "unchanged": report.total("unchanged"),
            "embedded": report.embedded,
            "embedding_cache_hits": report.cached,
            "rebuilt": report.rebuilt,
            "seconds": round(report.seconds, 3),
            "table_version": report.version if report.version is not None else -1,
            "per_being": per_being_table({b: dataclasses.asdict(c) for b, c in report.beings.items()}),
            **integrity.metadata(),
        }
    )
