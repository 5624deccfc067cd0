"""Hybrid search over `ebook_chunks`: vector and full-text candidates fused by reciprocal rank."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mindflow import lance
from mindflow.rag.index import TABLE
from mindflow.recall import primitives, rerank

_WORD = re.compile(r"\w+")
COLUMNS = ["doc_id", "title", "author", "chapter", "ordinal", "char_start", "char_end", "text"]


@dataclass
class SearchConfig:
    candidates: int = 50  # per retriever
    vector_weight: float = 1.0
    text_weight: float = 1.0
    rrf_k: int = 60
    # A hit whose words overlap this much with a better hit of the same title and chapter
    # is left out: one book kept as EPUB and PDF would otherwise fill the results twice.
    duplicate: float = 0.6


@dataclass
class EbookHit:
    doc_id: str
    title: str
    author: str | None
    chapter: str
    ordinal: int
    char_start: int
    char_end: int
    text: str
    score: float
    parts: dict[str, float] = field(default_factory=dict)


def _jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def open_chunks(lance_path: Path):
    """`ebook_chunks`, or None before the first reindex; each read sees the latest committed version."""
    return lance.open_table(lance.reader(lance_path), TABLE)


def _vector_candidates(table, query_vector: np.ndarray, limit: int):
    """Nearest chunks by cosine, with `cosine` = 1 - distance.

    `refine_factor(1)` re-scores the candidates of the vector index (IVF_HNSW_SQ, built from
    `ebooks_vector_index_min_rows` chunks) on their stored vectors: the index alone ranks by
    its quantised distance, which is not the cosine distance. Without an index it changes nothing.
    """
    import pyarrow.compute as pc

    result = (
        table.search(np.asarray(query_vector, dtype=np.float32), vector_column_name="vector")
        .distance_type("cosine")
        .refine_factor(1)
        .select([*COLUMNS, "_distance"])
        .limit(limit)
        .to_arrow()
    )
    return result.append_column("cosine", pc.subtract(1.0, result.column("_distance")))


def search_chunks(
    table, query: str, query_vector: np.ndarray, k: int = 5, config: SearchConfig | None = None
) -> list[EbookHit]:
    """The k best chunks for a query; `score` is the fused reciprocal rank of both retrievers."""
    config = config or SearchConfig()
    if table is None or k <= 0:
        return []
    limit = max(config.candidates, k)
    by_vector = _vector_candidates(table, query_vector, limit).to_pylist()
    text = primitives.text_candidates(table, query, "TRUE", limit, COLUMNS)
    by_text = text.to_pylist() if text is not None else []

    def key(row: dict) -> tuple[str, int]:
        return row["doc_id"], row["ordinal"]

    rows: dict[tuple[str, int], dict] = {}
    for row in by_vector + by_text:
        rows.setdefault(key(row), row)
    cosine = {key(row): float(row["cosine"]) for row in by_vector}
    bm25 = {key(row): float(row["_score"]) for row in by_text}
    fused = rerank.fuse_ranked(
        [[key(r) for r in by_vector], [key(r) for r in by_text]],
        [config.vector_weight, config.text_weight],
        config.rrf_k,
    )
    hits = []
    kept: list[tuple[str, str, set[str]]] = []
    for found in fused:
        if len(hits) == k:
            break
        row = rows[found.key]
        words = set(_WORD.findall(row["text"].lower()))
        if any(
            title == row["title"] and chapter == row["chapter"] and _jaccard(words, other) >= config.duplicate
            for title, chapter, other in kept
        ):
            continue  # the same passage from another file of the same book
        kept.append((row["title"], row["chapter"], words))
        hits.append(
            EbookHit(
                doc_id=row["doc_id"],
                title=row["title"] or "",
                author=row["author"],
                chapter=row["chapter"] or "",
                ordinal=int(row["ordinal"]),
                char_start=int(row["char_start"]),
                char_end=int(row["char_end"]),
                text=row["text"],
                score=found.score,
                parts={
                    "cosine": cosine.get(found.key, 0.0),
                    "bm25": bm25.get(found.key, 0.0),
                    "vector_rank": float(found.ranks[0]),
                    "text_rank": float(found.ranks[1]),
                },
            )
        )
    return hits
