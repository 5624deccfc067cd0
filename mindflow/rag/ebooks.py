"""The ebook index's two entry points, with the settings' stores: search it and reindex it.

Heavy modules (lxml, pypdf, lancedb, the model) load inside them, on first use."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mindflow.errors import MindflowError

if TYPE_CHECKING:
    from mindflow.config import Settings
    from mindflow.embeddings import Embedder
    from mindflow.rag.hybrid import EbookHit
    from mindflow.rag.index import Progress, ReindexReport

TABLE = "ebook_chunks"


def search(
    query: str,
    k: int = 5,
    *,
    settings: Settings | None = None,
    embedder: Embedder | None = None,
) -> list[EbookHit]:
    """Hybrid (vector + full-text) search of the ebook index: text, title, chapter and score per hit."""
    from mindflow.config import load_settings
    from mindflow.embeddings import Embedder
    from mindflow.rag.hybrid import open_chunks, search_chunks

    settings = settings or load_settings()
    if not query or not query.strip():
        raise MindflowError("the search query is empty")
    if len(query) > settings.api_max_query_chars:
        raise MindflowError(
            f"query has {len(query):,} characters; the limit is {settings.api_max_query_chars:,}"
        )
    table = open_chunks(settings.lance_path)
    if table is None:
        return []
    embedder = embedder or Embedder.for_settings(settings)
    return search_chunks(table, query, embedder.encode([query])[0], k)


def reindex(
    settings: Settings | None = None,
    *,
    embedder: Embedder | None = None,
    progress: Progress | None = None,
) -> ReindexReport:
    """Reindex `settings.ebooks` into `ebook_chunks`, holding the DuckDB file as a job would."""
    from mindflow import lance, store
    from mindflow.config import load_settings
    from mindflow.embeddings import Embedder
    from mindflow.rag.index import ReindexParams
    from mindflow.rag.index import reindex as run

    settings = settings or load_settings()
    folder = settings.ebooks
    if not folder.is_dir():
        raise MindflowError(
            f"no ebook folder at {folder}: create it and put EPUB, PDF, HTML, TXT or MD files in it"
        )
    embedder = embedder or Embedder.for_settings(settings)
    with store.connect(settings.duckdb_path, lock_timeout_s=settings.duckdb_lock_timeout_s) as con:
        return run(
            con,
            lance.connect(settings.lance_path),
            folder,
            embedder,
            ReindexParams.from_settings(settings),
            progress=progress,
        )
