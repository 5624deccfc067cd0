"""The recall tools: ranked recall, keyword search_memory, and a cluster's memories."""

from __future__ import annotations

from datetime import datetime

import numpy as np
import pyarrow as pa

from mindflow import lance
from mindflow.models import utcnow
from mindflow.recall import primitives, rerank
from mindflow.recall.config import RecallConfig
from mindflow.recall.models import Memory

RECALLABLE = ("active", "dying")  # dormant memories only through search_memory
SEARCHABLE = ("active", "dying", "dormant")


def _rows(table: pa.Table | None) -> list[dict]:
    return table.to_pylist() if table is not None and table.num_rows else []


def recall(
    table,
    being_id: str,
    query: str,
    query_vector: np.ndarray,
    *,
    k: int = 5,
    config: RecallConfig | None = None,
    exclude_refs: tuple[str, ...] | list[str] = (),
    since: datetime | None = None,
    until: datetime | None = None,
    now: datetime | None = None,
) -> list[Memory]:
    """Hybrid recall: vector and full-text candidates fused, weighted by decay and recency, then MMR."""
    config = config or RecallConfig()
    where = primitives.memory_filter(
        being_id, statuses=RECALLABLE, exclude_refs=exclude_refs, since=since, until=until
    )
    if table is None or k <= 0:
        return []
    limit = max(config.candidates, 2 * k)
    by_vector = _rows(primitives.vector_candidates(table, query_vector, where, limit))
    by_text = _rows(primitives.text_candidates(table, query, where, limit))
    rows: dict[str, dict] = {}
    vector_rank: dict[str, int] = {}
    text_rank: dict[str, int] = {}
    bm25: dict[str, float] = {}
    for rank, row in enumerate(by_vector):
        rows.setdefault(row["memory_ref"], row)
        vector_rank[row["memory_ref"]] = rank
    for rank, row in enumerate(by_text):
        rows.setdefault(row["memory_ref"], row)
        text_rank[row["memory_ref"]] = rank
        bm25[row["memory_ref"]] = float(row["_score"])
    if not rows:
        return []
    refs = list(rows)
    vectors = np.asarray([rows[r]["vector"] for r in refs], dtype=np.float32)
    vectors /= np.clip(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12, None)
    q = np.asarray(query_vector, dtype=np.float32)
    q = q / max(float(np.linalg.norm(q)), 1e-12)
    cosine = vectors @ q
    keep = cosine >= config.floor
    if not keep.any():
        return []
    refs = [r for r, kept in zip(refs, keep, strict=True) if kept]
    vectors, cosine = vectors[keep], cosine[keep]

    v_rank = np.array([vector_rank.get(r, -1) for r in refs])
    t_rank = np.array([text_rank.get(r, -1) for r in refs])
    weights = [config.vector_weight, config.text_weight]
    if config.fusion == "rrf":
        fused = rerank.rrf([v_rank, t_rank], weights, config.rrf_k)
    else:
        fused = rerank.weighted([cosine, np.array([bm25.get(r, 0.0) for r in refs])], weights)
    decay = rerank.decay_factor(np.array([rows[r]["decay_score"] or 1.0 for r in refs]), config)
    recency = rerank.recency_factor([rows[r]["ts"] for r in refs], now or utcnow(), config)
    final = fused * decay * recency
    order = rerank.mmr(final, vectors, k, config.mmr_lambda)
    out = []
    for i in order:
        memory = Memory.from_row(rows[refs[i]])
        memory.score = float(final[i])
        memory.parts = {
            "cosine": float(cosine[i]),
            "bm25": bm25.get(refs[i], 0.0),
            "vector_rank": int(v_rank[i]),
            "text_rank": int(t_rank[i]),
            "fused": float(fused[i]),
            "decay": float(decay[i]),
            "recency": float(recency[i]),
        }
        out.append(memory)
    return out


def search_memory(table, being_id: str, query: str, *, mode: str = "or", k: int = 10) -> list[Memory]:
    """Keyword search over action, feeling, themes and the `when` history; dormant memories included."""
    if mode not in ("or", "and"):
        raise ValueError("mode must be 'or' or 'and'")
    where = primitives.memory_filter(being_id, statuses=SEARCHABLE)
    words = primitives.keywords(query)
    if table is None or not words or k <= 0:
        return []
    # Full-text over the action, plus substring matches over feeling, themes and when.
    matches = [
        "("
        + " OR ".join(
            f"lower({column}) LIKE {lance.literal('%' + w + '%')}"
            for column in ("feeling", "array_to_string(themes, ' ')", "array_to_string(when_dates, ' ')")
        )
        + ")"
        for w in words
    ]
    side = primitives.filtered_rows(table, lance.all_of(where, " OR ".join(matches)), 10 * k)
    by_text = primitives.text_candidates(table, query, where, 10 * k)
    rows = {r["memory_ref"]: r for r in _rows(side) + _rows(by_text)}
    scored = []
    for row in rows.values():
        haystack = " ".join(
            [row["text"] or "", row["feeling"] or "", *(row["themes"] or []), *(row["when_dates"] or [])]
        ).lower()
        hits = sum(1 for w in words if w in haystack)
        if hits == 0 or (mode == "and" and hits < len(words)):
            continue
        scored.append((hits, row["ts"] or datetime.min, row))
    scored.sort(key=lambda item: (item[0], item[1]), reverse=True)
    out = []
    for hits, _, row in scored[:k]:
        memory = Memory.from_row(row)
        memory.score = hits / len(words)
        memory.parts = {"matched_words": float(hits)}
        out.append(memory)
    return out


def cluster_memories(table, being_id: str, cluster_id: str, *, k: int = 50) -> list[Memory]:
    """The memories of one cluster, newest first (the seed's recall_memory)."""
    where = primitives.memory_filter(being_id, statuses=SEARCHABLE, cluster_id=cluster_id)
    if table is None or k <= 0:
        return []
    rows = _rows(primitives.filtered_rows(table, where, None))
    rows.sort(key=lambda r: (r["ts"] or datetime.min, r["memory_ref"]), reverse=True)
    return [Memory.from_row(r) for r in rows[:k]]
