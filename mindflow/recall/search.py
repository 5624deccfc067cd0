"""The recall tools: ranked recall, keyword search_memory, and a cluster's memories."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timedelta

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mindflow import lance
from mindflow.models import utcnow
from mindflow.onnx_encoder import cores
from mindflow.recall import feedback, primitives, rerank, speakers, timeframe
from mindflow.recall import pool as pools
from mindflow.recall.config import RecallConfig
from mindflow.recall.hot import BeingIndex
from mindflow.recall.models import Memory
from mindflow.recall.primitives import RECALLABLE, SEARCHABLE
from mindflow.recall.retrieval import EmptyRetrieval, FreshRetrieval, HotRetrieval, LanceRetrieval

__all__ = ["RECALLABLE", "SEARCHABLE", "cluster_memories", "recall", "search_memory"]


def _rows(table: pa.Table | None) -> list[dict]:
    return table.to_pylist() if table is not None and table.num_rows else []


# The full-text search runs here while the calling thread runs the vector search:
# both spend their time inside LanceDB, off the GIL.
_RETRIEVERS = ThreadPoolExecutor(max_workers=8, thread_name_prefix="mindflow-recall")


def _beside() -> bool:
    """Whether the full-text search runs on a thread of its own, beside the vector search: only
    where this process may use more than one CPU. A ranking process pinned to one CPU gains no
    overlap from it and pays the hand-off: in process on one CPU, 600 hot recalls at 100,000
    memories took 7.2-7.8 ms of CPU each with the search inline against 7.8-8.8 ms beside."""
    return cores() > 1


def recall(
    table,
    being_id: str,
    query: str,
    query_vector: np.ndarray | Callable[[], np.ndarray],
    *,
    k: int = 5,
    config: RecallConfig | None = None,
    exclude_refs: tuple[str, ...] | list[str] = (),
    since: datetime | None = None,
    until: datetime | None = None,
    now: datetime | None = None,
    index: BeingIndex | None = None,
    fresh: pa.Table | None = None,
    corpus: int = 0,
    fresh_terms: list | None = None,
    scanned: np.ndarray | None = None,
) -> list[Memory]:
    """Hybrid recall: vector and full-text candidates fused, lifted by their context,
    weighted by decay and recency, then MMR.

    `query_vector` may be a function returning it: the full-text search then starts
    before the query is embedded. With the being's hot `index` (the server's), vectors,
    context windows and rows come from memory and only the full text from the table.
    `fresh` are the being's fresh-tail memories the request may see (`mindflow.loop.tail.rows`),
    ranked in the same pool and returned with `fresh=True`; `corpus` is how many published
    memories the full-text statistics stand for; `fresh_terms` their `primitives.term_counts`.
    `scanned` are the index's `BeingIndex.scanned` positions for this query vector, the
    request's visible memories and `vector_limit`, when the caller scanned already.
    """
    config = config or RecallConfig()
    where = primitives.memory_filter(
        being_id, statuses=RECALLABLE, exclude_refs=exclude_refs, since=since, until=until
    )
    has_fresh = fresh is not None and fresh.num_rows > 0
    if (table is None and not has_fresh) or k <= 0:
        return []
    if table is None:
        source = EmptyRetrieval()
    elif index is not None and index.being_id == being_id:
        if len(index) == 0:
            if not has_fresh:
                # Nothing recallable at the index's version: no full-text query to pay for.
                return []
            source = EmptyRetrieval()
        else:
            keep = index.mask(exclude_refs, since, until)
            source = HotRetrieval(
                table, where, index, keep, own_text=config.hot_fulltext == "index", scanned=scanned
            )
    else:
        source = LanceRetrieval(table, where)
    if has_fresh:
        source = FreshRetrieval(source, fresh, corpus, fresh_terms)
    limit = max(config.candidates, 2 * k)
    slim = primitives.RANKING_COLUMNS
    reordering = config.reorder_weight > 0 and config.reorder_top > 1
    if (
        config.prf_terms > 0
        or (config.rescore_weight > 0 and config.rescore_top > 0)
        or config.session_doc_weight > 0
        or reordering
    ):
        # Those levers count the candidates' words: what the source needs for it is carried with them.
        slim = [*slim, *source.lever_columns]
    if config.speaker_weight > 0:
        slim = [*slim, "actors"]
    by_vector = by_text = None
    if config.text_weight > 0:
        if _beside():
            by_text = _RETRIEVERS.submit(source.text, query, limit, slim)
        else:
            by_text = Future()
            by_text.set_result(source.text(query, limit, slim))
    if callable(query_vector):
        query_vector = query_vector()
    if config.vector_weight > 0:
        by_vector = source.vector(query_vector, vector_limit(config, k), slim)
    by_text = by_text.result() if by_text is not None else None
    found = [p for p in (by_vector, by_text) if p is not None and len(p)]
    if not found:
        return []
    pool = pools.joined(found, slim)
    text_scores = by_text.scores if by_text is not None and len(by_text) else np.zeros(0)
    q = np.asarray(query_vector, dtype=np.float32)
    q = q / max(float(np.linalg.norm(q)), 1e-12)
    weights = [config.vector_weight, config.text_weight]
    expanded: dict[str, float] = {}  # BM25 of the feedback terms, when pseudo-relevance feedback runs
    now = now or utcnow()
    window = timeframe.named_window(query, now, source.newest) if config.time_weight > 0 else None
    if window is not None:
        window = window.widened(config.time_slack_days)

    def score(rows: pools.Pool, before: tuple | None = None):
        """Each candidate's refs, unit vectors, cosine, ranks, BM25 and fused score. `before` is
        this function's answer for the first candidates of `rows` (the pool before the context was
        added to it): their parts are kept, and only the candidates after them are read."""
        if before is not None and len(before[0]) == len(rows):
            refs, vectors, cosine, v_rank, t_rank, bm = before
        else:
            new = rows.after(len(before[0])) if before is not None else rows
            refs = new.refs
            vectors = new.vectors
            cosine = vectors @ q
            v_rank = new.rows_in(by_vector)
            t_rank = new.rows_in(by_text)
            bm = np.zeros(len(refs))
            bm[t_rank >= 0] = text_scores[t_rank[t_rank >= 0]]
            if before is not None:
                refs = before[0] + refs
                vectors, cosine, v_rank, t_rank, bm = (
                    np.concatenate([old, part])
                    for old, part in zip(before[1:], (vectors, cosine, v_rank, t_rank, bm), strict=True)
                )
        if config.fusion == "rrf":
            fused = rerank.rrf([v_rank, t_rank], weights, config.rrf_k)
        elif config.fusion == "scaled":
            fused = rerank.scaled(cosine, bm, weights)
        else:
            fused = rerank.weighted([cosine, bm], weights)
        if window is not None:
            inside = rerank.within(rows.ts, window.start, window.end)
            fused = fused + config.time_weight * inside
        return refs, vectors, cosine, v_rank, t_rank, bm, fused + fed_back(refs)

    def fed_back(refs: list[str]) -> np.ndarray | float:
        """What pseudo-relevance feedback adds to each memory's fused score (0 before it ran)."""
        if not expanded:
            return 0.0
        extra = np.array([expanded.get(r, 0.0) for r in refs], dtype=np.float64)
        return config.prf_weight * extra / max(max(expanded.values()), 1e-12)

    def weighting(rows: pools.Pool) -> tuple[np.ndarray, np.ndarray]:
        decay = rerank.decay_factor(rerank.nan_to(rows.decay, 1.0), config)
        return decay, rerank.recency_factor(rows.ts, now, config)

    refs, vectors, cosine, v_rank, t_rank, bm, fused = score(pool)
    decay, recency = weighting(pool)
    if config.prf_terms > 0 and config.text_weight > 0:
        _feedback(source, query, pool, fused * decay * recency, config, expanded)
        fused = fused + fed_back(refs)  # what score(pool) would give now, without scoring again
    context = np.zeros(len(refs))
    around = None
    support = cosine  # what the floor applies to: the memory's or, with context, its neighbourhood's
    if config.context_window > 0:
        pool, context, lifted, scored, around = _with_context(
            source,
            pool,
            fused * decay * recency,
            k,
            config,
            score,
            (refs, vectors, cosine, v_rank, t_rank, bm),
            slim,
        )
        if scored is not None:
            refs, vectors, cosine, v_rank, t_rank, bm, fused = scored
            decay, recency = weighting(pool)
            support = lifted
    keep = np.flatnonzero(support >= config.floor)
    if len(keep) == 0:
        return []
    if config.session_weight > 0:
        session = rerank.session_score(fused + context, pool.ts, 60.0 * config.session_gap_minutes)
        context = context + config.session_weight * session
    if config.session_doc_weight > 0:
        # After the context lift, as the session score: a session's turns are one another's
        # neighbours, and the lift would count the same session twice.
        documents = source.session_documents(query, pool, 60.0 * config.session_gap_minutes)
        context = context + config.session_doc_weight * documents
    named = np.zeros(len(refs))
    if config.speaker_weight > 0:
        # Added after the context lift: a turn's lift from its neighbour must not carry the
        # neighbour's speaker, most often the other person of the conversation.
        named = config.speaker_weight * speakers.named(query, pool.actors)
    fused, decay, recency = fused[keep] + context[keep] + named[keep], decay[keep], recency[keep]
    final = fused * decay * recency
    if config.rescore_weight > 0 and config.rescore_top > 0:
        final = _rescored(source, query, pool, keep, final, config)
    # MMR picks one memory after another, so its first k of more are the k it would pick alone.
    depth = max(k, config.reorder_top) if reordering else k
    chosen = [int(keep[j]) for j in rerank.mmr(final, vectors[keep], depth, config.mmr_lambda)]
    position = {int(i): j for j, i in enumerate(keep)}
    reordered = np.zeros(len(refs))
    if reordering:
        head, tail = chosen[: config.reorder_top], chosen[config.reorder_top :]
        head, reordered = _reordered(source, query, pool, head, final[[position[i] for i in head]], config)
        chosen = (head + tail)[:k]
    # Context windows read whole from LanceDB hold nearly every memory chosen; read the rest
    # (from a hot index, all of them) by ref.
    whole = around.whole if around is not None else None
    by_ref = {row["memory_ref"]: row for row in _rows(_of_refs(whole, [refs[i] for i in chosen]))}
    missing = [refs[i] for i in chosen if refs[i] not in by_ref]
    if missing:
        by_ref.update((row["memory_ref"], row) for row in _rows(source.by_ref(missing)))
    out = []
    for i in chosen:
        row = by_ref.get(refs[i])
        if row is None:  # deleted by a publish since the candidates were read
            continue
        j = position[i]
        memory = Memory.from_row(row)
        memory.fresh = isinstance(source, FreshRetrieval) and source.is_fresh(refs[i])
        memory.score = float(final[j] + reordered[i])
        memory.parts = {
            "cosine": float(cosine[i]),
            "bm25": float(bm[i]),
            "vector_rank": int(v_rank[i]),
            "text_rank": int(t_rank[i]),
            "context": float(context[i]),
            "speaker": float(named[i]),
            "fused": float(fused[j]),
            "decay": float(decay[j]),
            "recency": float(recency[j]),
            "reorder": float(reordered[i]),
        }
        out.append(memory)
    return out


def vector_limit(config: RecallConfig, k: int) -> int:
    """How many candidates recall asks of the vector search."""
    return max(config.vector_candidates, 2 * k)


def _with_context(
    source: LanceRetrieval,
    pool: pools.Pool,
    weighted: np.ndarray,
    k: int,
    config: RecallConfig,
    score,
    scored: tuple,
    columns: list[str],
):
    """Read the neighbours of the best candidates, add them to the pool, and lift each memory
    by its best neighbour.

    `scored` are `score`'s parts of the pool's candidates (refs, unit vectors, cosine, ranks,
    BM25), kept for them when the neighbours are added; `columns` those a pool of rows holds.
    Returns (pool, context bonus, floor support, new scores, the candidates read). The best
    candidates are those of the final score so far (fused x decay x recency); from LanceDB the
    same read brings their full rows, so the chosen memories rarely need a read of their own.
    """
    ranked = np.argsort(-weighted, kind="stable")
    top = pool.ts[ranked[: config.context_top]].tolist()
    gap = timedelta(minutes=config.context_gap_minutes)
    spans = primitives.windows([t for t in top if t is not None], gap * config.context_window)
    refs = scored[0]
    also = [refs[i] for i in ranked[: 3 * k]]
    # a safety bound for a being that writes many memories a minute
    limit = config.context_top * (2 * config.context_window + 1) * 20
    around = source.around(spans, limit, also, columns)
    if around is None or len(around) == 0:
        return pool, np.zeros(len(pool)), None, None, None
    pool = pools.joined([pool, around.not_in(pool)], columns)
    scored = score(pool, scored)  # the pool's own candidates first: only the added ones are read
    refs, _, cosine, _, _, _, fused = scored
    ts = pool.ts
    order = _time_order(ts, refs)
    # Only memories inside a window read whole know all their neighbours.
    in_window = np.zeros(len(order), dtype=bool)
    for start, end in spans:
        in_window |= (ts[order] >= np.datetime64(start, "us")) & (ts[order] <= np.datetime64(end, "us"))
    seconds = gap.total_seconds()
    lift = rerank.neighbourhood(fused[order], ts[order], config.context_window, seconds)
    near = rerank.neighbourhood(np.clip(cosine[order], 0, None), ts[order], config.context_window, seconds)
    context = np.zeros(len(refs))
    context[order] = np.where(in_window, config.context_weight * lift, 0.0)
    support = cosine.copy()
    support[order] = np.where(in_window, np.maximum(cosine[order], near), cosine[order])
    return pool, context, support, scored, around


def _time_order(ts: np.ndarray, refs: list[str]) -> np.ndarray:
    """Positions in time order, equal times (and unknown ones, last) by ref."""
    order = np.argsort(ts, kind="stable")
    stamps = ts[order]
    if np.isnat(stamps).sum() > 1 or (stamps[1:] == stamps[:-1]).any():
        # Ties are rare; sorting by the refs as well costs ~75 us for a pool of 400.
        return np.lexsort((np.array(refs), ts))
    return order


def _feedback(source, query: str, pool: pools.Pool, weighted: np.ndarray, config, expanded: dict):
    """Pseudo-relevance feedback: the words the best candidates share, scored by BM25 among the
    candidates (no second full-text search); the scores go into `expanded` by ref."""
    best = np.argsort(-weighted, kind="stable")[: config.prf_docs]
    words = feedback.expansion_terms(query, source.term_counts(pool.take(best)), config.prf_terms)
    if words:
        scores = primitives.bm25_scores(*source.term_frequencies(words, pool), len(pool))
        expanded.update(zip(pool.refs, scores.tolist(), strict=True))


def _rescored(
    source, query: str, pool: pools.Pool, keep: np.ndarray, final: np.ndarray, config
) -> np.ndarray:
    """The final scores with `rescore_weight` x `rerank.local_bm25` added to the `rescore_top` best
    (`final` scores the pool's candidates at `keep`)."""
    top = np.argsort(-final, kind="stable")[: config.rescore_top]
    found = source.term_frequencies(primitives.query_terms(query), pool.take(keep[top]))
    local = rerank.local_bm25(*found)
    final = final.copy()
    final[top] += config.rescore_weight * local * (final[top].max() if len(top) else 0.0)
    return final


def _reordered(
    source, query: str, pool: pools.Pool, chosen: list[int], scores: np.ndarray, config: RecallConfig
) -> tuple[list[int], np.ndarray]:
    """`chosen` (pool positions, MMR's order) sorted by their final `scores` plus `reorder_weight` x
    `rerank.local_bm25` of each one's words together with its neighbours' (the
    `reorder_window` memories before and after it among the pool's, with no pause over
    `context_gap_minutes`), x the best of `scores`. Returns them and what each position gained.

    A question's words are often split between an answer and the turn it answers ("How long has
    Nate had his turtles?" - "Turtles!" - "I've had them for 3 years now"): the context lift finds
    such answers, and this puts them before the memories that only share the question's words.
    """
    gained = np.zeros(len(pool))
    words = primitives.query_terms(query)
    if not words or len(chosen) < 2:
        return chosen, gained
    beside = _neighbours(pool.ts, pool.refs, chosen, config.reorder_window, 60.0 * config.context_gap_minutes)
    texts = np.array(sorted({*chosen, *(n for near in beside for n in near)}), dtype=np.int64)
    tf, lengths = source.term_frequencies(words, pool.take(texts))
    column = {int(p): c for c, p in enumerate(texts)}
    own = [[column[i], *(column[n] for n in near)] for i, near in zip(chosen, beside, strict=True)]
    local = rerank.local_bm25(
        np.stack([tf[:, cols].sum(axis=1) for cols in own], axis=1),
        np.array([lengths[cols].sum() for cols in own]),
    )
    # Scaled by the best score so the weight means the same at any scale; never a penalty.
    bonus = config.reorder_weight * local * max(float(scores.max()), 0.0)
    order = np.argsort(-(scores + bonus), kind="stable")
    gained[chosen] = bonus
    return [chosen[o] for o in order], gained


def _neighbours(ts: np.ndarray, refs: list[str], positions: list[int], window: int, gap_seconds: float):
    """For each of `positions`, the positions of the `window` memories before and after it in time
    among all of `ts`, with no pause over `gap_seconds` between them."""
    order = _time_order(ts, refs)
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    stamps = ts[order]
    seconds = np.where(np.isnat(stamps), 0, stamps.astype("datetime64[us]").astype(np.int64)) / 1e6
    # A run of memories with no pause over the gap between them; an unknown time is a run of its own.
    run = np.cumsum(np.concatenate([[True], (np.diff(seconds) > gap_seconds) | np.isnat(stamps[1:])]))
    out = []
    for p in positions:
        r = int(rank[p])
        span = range(max(0, r - window), min(len(order), r + window + 1))
        out.append([int(order[s]) for s in span if s != r and run[s] == run[r]])
    return out


def _of_refs(rows: pa.Table | None, refs: list[str]) -> pa.Table | None:
    """The rows of `rows` whose memory_ref is one of `refs`, without the vector."""
    if rows is None or not refs:
        return None
    chosen = pc.is_in(rows.column("memory_ref"), value_set=pa.array(refs, pa.string()))
    return rows.filter(chosen).drop_columns(["vector"])


SEARCHED_COLUMNS = (
    "text",
    "feeling",
    "array_to_string(themes, ' ')",
    "array_to_string(when_dates, ' ')",
    "array_to_string(when_actions, ' ')",
)


def search_memory(
    table,
    being_id: str,
    query: str,
    *,
    mode: str = "or",
    k: int = 10,
    fresh: Iterable[Memory] = (),
    statuses: tuple[str, ...] = SEARCHABLE,
) -> list[Memory]:
    """Keyword search over action, feeling, themes and the `when` history; dormant memories included.

    `fresh` are the being's fresh-tail memories, matched the same way (a published memory
    with the same ref stands for its fresh one). `statuses` widens it for a forget's find
    (`primitives.FORGETTABLE`); every agent-facing search keeps the default."""
    if mode not in ("or", "and"):
        raise ValueError("mode must be 'or' or 'and'")
    where = primitives.memory_filter(being_id, statuses=statuses)
    words = primitives.keywords(query)
    fresh = list(fresh)
    if not words or k <= 0:
        return []
    if table is None:
        return _keyword_ranked({}, fresh, words, mode, k)
    # Full-text over the action (tokens), plus substring matches over the action, feeling,
    # themes and the whole `when` history: its dates, and the actions of the memories a
    # merge absorbed into this one ("Hashi" finds the survivor of "met Hashi at the station").
    matches = [
        "("
        + " OR ".join(f"lower({column}) LIKE {lance.literal('%' + w + '%')}" for column in SEARCHED_COLUMNS)
        + ")"
        for w in words
    ]
    columns = [*primitives.ALL_COLUMNS, "when_actions"]
    side = primitives.filtered_rows(table, lance.all_of(where, " OR ".join(matches)), 10 * k, columns)
    by_text = primitives.text_candidates(table, query, where, 10 * k, columns)
    rows = {r["memory_ref"]: r for r in _rows(side) + _rows(by_text)}
    return _keyword_ranked(rows, fresh, words, mode, k)


def _keyword_ranked(rows: dict[str, dict], fresh: list[Memory], words: list[str], mode: str, k: int):
    """The rows (and fresh memories) holding the words, most words first, then newest."""
    for memory in fresh:
        rows.setdefault(memory.memory_ref, dataclasses.asdict(memory))
    scored = []
    for row in rows.values():
        haystack = " ".join(
            [
                row["text"] or "",
                row["feeling"] or "",
                *(row["themes"] or []),
                *(row["when_dates"] or []),
                *(a for a in row.get("when_actions") or [] if a),
            ]
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
