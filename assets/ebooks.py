"""Asset `ebook_chunks`: the LanceDB table of ebook chunks that `mindflow.rag.search` serves."""

import dagster as dg

from assets.policies import EXTERNAL_CALLS
from mindflow.materializations import ebook_chunks_metadata
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
    # The same metadata `mindflow ebooks reindex` reports outside a run, with this run's file check.
    return dg.MaterializeResult(metadata={**ebook_chunks_metadata(report, folder), **integrity.metadata()})
