"""The incremental reindex of the ebook folder into the LanceDB table `ebook_chunks`.

Each document's content hash and the chunking that indexed it are kept in DuckDB
(`ebook_documents`): an unchanged document is skipped without being read, a changed
one is re-chunked and its rows replaced, a removed one's rows deleted. Chunk vectors
go through the embedding cache, so re-chunking a document embeds only new text.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

import duckdb
import numpy as np
import pyarrow as pa

from mindflow import lance
from mindflow.config import Settings
from mindflow.embeddings import Embedder, text_sha256
from mindflow.models import utcnow
from mindflow.rag import TABLE
from mindflow.rag.chunking import Chunk, chunk_document, tokenizer_spans
from mindflow.rag.folder import FileStat, file_sha256, index_key, scan
from mindflow.rag.parsers import Document, DocumentError, parse_document

# Called as progress(done, total, doc_id) before and after each document that is (re)indexed.
Progress = Callable[[int, int, str], None]


@dataclass
class ReindexParams:
    chunk_tokens: int = 350
    chunk_overlap: int = 50
    keep_versions: timedelta = timedelta(days=7)
    vector_index_min_rows: int = 20_000

    @classmethod
    def from_settings(cls, settings: Settings) -> ReindexParams:
        return cls(
            chunk_tokens=settings.ebooks_chunk_tokens,
            chunk_overlap=settings.ebooks_chunk_overlap,
            keep_versions=timedelta(days=settings.ebooks_keep_versions_days),
            vector_index_min_rows=settings.ebooks_vector_index_min_rows,
        )


@dataclass
class ReindexReport:
    documents: int = 0  # documents indexed now (failed ones not counted)
    chunks: int = 0  # rows of `ebook_chunks`
    new: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: int = 0
    touched: int = 0  # unchanged content under a new modification time
    failed: dict[str, str] = field(default_factory=dict)  # doc_id -> reason, including earlier failures
    chunks_by_document: dict[str, int] = field(default_factory=dict)
    embedded: int = 0  # chunk texts embedded by the model in this reindex
    cached: int = 0  # chunk texts whose vector came from the embedding cache
    chunk_tokens: int = 0  # the chunk length used (capped at the model's window)
    vector_index: bool = False
    version: int | None = None
    seconds: float = 0.0

    @property
    def changes(self) -> int:
        return len(self.new) + len(self.changed) + len(self.removed)


@dataclass
class _Known:
    size: int
    mtime_ns: int
    sha256: str
    index_key: str
    status: str
    reason: str | None
    chunks: int


def _state(con: duckdb.DuckDBPyConnection) -> dict[str, _Known]:
    rows = con.execute(
        "SELECT doc_id, size, mtime_ns, sha256, index_key, status, reason, chunks FROM ebook_documents"
    ).fetchall()
    return {r[0]: _Known(*r[1:]) for r in rows}


def _save(
    con: duckdb.DuckDBPyConnection,
    st: FileStat,
    sha: str,
    key: str,
    *,
    status: str,
    document: Document | None = None,
    chunks: int = 0,
    reason: str | None = None,
) -> None:
    con.execute(
        "INSERT OR REPLACE INTO ebook_documents VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            st.doc_id,
            st.size,
            st.mtime_ns,
            sha,
            key,
            document.format if document else None,
            document.title if document else None,
            document.author if document else None,
            len(document.chapters) if document else 0,
            chunks,
            status,
            reason,
            utcnow(),
        ],
    )


def effective_chunk_tokens(requested: int, window: int | None) -> int:
    """Chunks fit the model's input window: text past it would be cut off unembedded."""
    return max(16, min(requested, window)) if window else requested


def reindex(
    con: duckdb.DuckDBPyConnection,
    db,
    folder,
    embedder: Embedder,
    params: ReindexParams | None = None,
    progress: Progress | None = None,
    log: Callable[[str], None] | None = None,
) -> ReindexReport:
    """Bring `ebook_chunks` in line with the documents in `folder`."""
    started = time.perf_counter()
    params = params or ReindexParams()
    report = ReindexReport()
    files = scan(folder)
    known = _state(con)
    table = lance.open_table(db, TABLE)
    key = index_key(embedder.model, params.chunk_tokens, params.chunk_overlap)

    todo: list[tuple[FileStat, str]] = []
    for doc_id, st in files.items():
        before = known.get(doc_id)
        usable = before is not None and before.index_key == key
        usable = usable and (table is not None or before.status == "failed")
        if usable and before.size == st.size and before.mtime_ns == st.mtime_ns:
            _count_unchanged(report, doc_id, before)
            continue
        try:
            sha = file_sha256(st.path)
        except OSError as exc:
            report.failed[doc_id] = f"cannot read: {exc}"
            continue
        if usable and before.sha256 == sha:
            con.execute(
                "UPDATE ebook_documents SET size = ?, mtime_ns = ? WHERE doc_id = ?",
                [st.size, st.mtime_ns, doc_id],
            )
            report.touched += 1
            _count_unchanged(report, doc_id, before)
            continue
        todo.append((st, sha))

    removed = sorted(known.keys() - files.keys())
    if todo:
        spans, window = tokenizer_spans(embedder.model)
        size = effective_chunk_tokens(params.chunk_tokens, window)
        report.chunk_tokens = size
        if table is not None and _dimension(table) != embedder.dimension:
            if log:
                log(f"{TABLE}: vectors of another dimension (model changed); rebuilding the table")
            db.drop_table(TABLE)
            table = None
        for done, (st, sha) in enumerate(todo):
            if progress:
                progress(done, len(todo), st.doc_id)
            before = known.get(st.doc_id)
            (report.new if before is None else report.changed).append(st.doc_id)
            try:
                document = parse_document(st.path)
            except (DocumentError, OSError) as exc:
                report.failed[st.doc_id] = str(exc)
                if log:
                    log(f"{st.doc_id}: failed: {exc}")
                if table is not None and before is not None:
                    table.delete(lance.where(doc_id=st.doc_id))
                _save(con, st, sha, key, status="failed", reason=str(exc))
                continue
            chunks = chunk_document(st.doc_id, document, spans, size, params.chunk_overlap)
            before_stats = dict(embedder.stats)
            vectors = embedder.encode_cached(con, [c.text for c in chunks])
            report.embedded += embedder.stats["embedded"] - before_stats["embedded"]
            report.cached += embedder.stats["cached"] - before_stats["cached"]
            write_id = uuid.uuid4().hex
            rows = _rows(document, sha, write_id, chunks, vectors)
            if table is None:
                table = _create(db, rows)
            else:
                # New rows first, then the old ones out: a reader never finds the document missing.
                table.add(rows)
                table.delete(
                    lance.all_of(lance.where(doc_id=st.doc_id), lance.compare("write_id", "<>", write_id))
                )
            _save(con, st, sha, key, status="indexed", document=document, chunks=len(chunks))
            report.documents += 1
            report.chunks_by_document[st.doc_id] = len(chunks)
            if log:
                log(f"{st.doc_id}: {len(chunks)} chunks in {len(document.chapters)} chapters")
        if progress:
            progress(len(todo), len(todo), "")
    if removed:
        if table is not None:
            for start in range(0, len(removed), 500):
                table.delete(lance.where(doc_id=removed[start : start + 500]))
        con.execute("DELETE FROM ebook_documents WHERE list_contains(?, doc_id)", [removed])
        report.removed = removed
    if table is not None and report.changes:
        report.vector_index = _maintain(table, params)
    elif table is not None:
        report.vector_index = _has_vector_index(table)
    if table is not None:
        report.chunks = table.count_rows()
        report.version = table.version
    report.seconds = time.perf_counter() - started
    return report


def _count_unchanged(report: ReindexReport, doc_id: str, before: _Known) -> None:
    report.unchanged += 1
    if before.status == "failed":
        report.failed[doc_id] = before.reason or "failed"
    else:
        report.documents += 1
        report.chunks_by_document[doc_id] = before.chunks


def _rows(document: Document, sha: str, write_id: str, chunks: list[Chunk], vectors: np.ndarray) -> pa.Table:
    dim = vectors.shape[1]
    return pa.table(
        {
            "doc_id": pa.array([c.doc_id for c in chunks], pa.string()),
            "doc_sha256": pa.array([sha] * len(chunks), pa.string()),
            # Which reindex wrote the row: the document's rows of earlier writes are deleted after it.
            "write_id": pa.array([write_id] * len(chunks), pa.string()),
            "title": pa.array([document.title] * len(chunks), pa.string()),
            "author": pa.array([document.author] * len(chunks), pa.string()),
            "format": pa.array([document.format] * len(chunks), pa.string()),
            "chapter": pa.array([c.chapter for c in chunks], pa.string()),
            "chapter_index": pa.array([c.chapter_index for c in chunks], pa.int32()),
            "ordinal": pa.array([c.ordinal for c in chunks], pa.int32()),
            "char_start": pa.array([c.char_start for c in chunks], pa.int64()),
            "char_end": pa.array([c.char_end for c in chunks], pa.int64()),
            "tokens": pa.array([c.tokens for c in chunks], pa.int32()),
            "text": pa.array([c.text for c in chunks], pa.string()),
            "text_sha256": pa.array([text_sha256(c.text) for c in chunks], pa.string()),
            "vector": pa.FixedSizeListArray.from_arrays(
                pa.array(np.asarray(vectors, dtype=np.float32).reshape(-1), pa.float32()), dim
            ),
        }
    )


def _create(db, rows: pa.Table):
    from lancedb.index import FTS

    table = db.create_table(TABLE, data=rows)
    table.create_index("text", config=FTS(), replace=True)
    return table


def _dimension(table) -> int:
    return table.schema.field("vector").type.list_size


def _has_vector_index(table) -> bool:
    return any("vector" in index.columns for index in table.list_indices())


def _maintain(table, params: ReindexParams) -> bool:
    """Vector index once large enough, then optimize: new rows into the indexes, small fragments
    compacted, versions older than the retention removed."""
    has_vector = _has_vector_index(table)
    if not any("text" in index.columns for index in table.list_indices()):
        from lancedb.index import FTS

        table.create_index("text", config=FTS(), replace=True)
    rows = table.count_rows()
    if not has_vector and rows >= params.vector_index_min_rows:
        from lancedb.index import IvfHnswSq

        partitions = max(1, int(np.sqrt(rows) / 6))
        table.create_index(
            "vector", config=IvfHnswSq(distance_type="cosine", num_partitions=partitions), replace=True
        )
        has_vector = True
    table.optimize(cleanup_older_than=params.keep_versions)
    return has_vector
