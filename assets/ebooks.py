"""Asset `ebook_chunks`: the LanceDB table of ebook chunks that `mindflow.rag.search` serves."""

import dagster as dg

from assets.policies import EXTERNAL_CALLS
from mindflow.rag.index import ReindexParams, reindex
from mindflow.resources import DuckDBResource, EmbeddingResource, LanceDBResource, MindflowHome


@dg.asset(
    pool="duckdb",
    group_name="ebooks",
    kinds={"lancedb", "duckdb"},
    code_version="1",
    retry_policy=EXTERNAL_CALLS,
)
def ebook_chunks(
    context: dg.AssetExecutionContext,
    duckdb: DuckDBResource,
    lancedb: LanceDBResource,
    embeddings: EmbeddingResource,
    mindflow_home: MindflowHome,
) -> dg.MaterializeResult:
    """Chunks of every document in the ebook folder, with title, chapter, offsets and vector."""
    settings = mindflow_home.settings()
    folder = settings.ebooks
    if not folder.is_dir():
        context.log.info(f"no ebook folder at {folder}: nothing to index")
    embedder = embeddings.embedder()

    def progress(done: int, total: int, doc_id: str) -> None:
        if doc_id:
            context.log.info(f"[{done + 1}/{total}] indexing {doc_id}")

    with duckdb.connect() as con:
        # Critical files are verified at the start of every run; a change is logged as ALERT.
        from mindflow import audit

        integrity = audit.verify_critical(settings, con, run_id=context.run_id)
        report = reindex(
            con,
            lancedb.connect(),
            folder,
            embedder,
            ReindexParams.from_settings(settings),
            progress=progress,
            log=context.log.info,
        )
    failures = "\n".join(
        f"| {doc} | {reason.replace('|', '/')} |" for doc, reason in sorted(report.failed.items())
    )
    per_document = "\n".join(f"| {doc} | {n} |" for doc, n in sorted(report.chunks_by_document.items()))
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": report.chunks,
            "documents": report.documents,
            "chunks": report.chunks,
            "new": len(report.new),
            "changed": len(report.changed),
            "removed": len(report.removed),
            "unchanged": report.unchanged,
            "failed": len(report.failed),
            "embedded": report.embedded,
            "embedding_cache_hits": report.cached,
            "seconds": round(report.seconds, 3),
            "vector_index": report.vector_index,
            "table_version": report.version if report.version is not None else -1,
            "folder": str(folder),
            **integrity.metadata(),
            "failures": dg.MetadataValue.md(
                "| document | reason |\n|---|---|\n" + failures if failures else "none"
            ),
            "chunks_per_document": dg.MetadataValue.md(
                "| document | chunks |\n|---|---|\n" + per_document if per_document else "no documents"
            ),
        }
    )
