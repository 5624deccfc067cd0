"""Fusion and re-ranking: each idea is one function over candidate arrays."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np

from mindflow.recall.config import RecallConfig


def rrf(ranks: list[np.ndarray], weights: list[float], k: int) -> np.ndarray:
    """Reciprocal rank fusion; a rank of -1 means the retriever did not return the item."""
    score = np.zeros(len(ranks[0]), dtype=np.float64)
    for rank, weight in zip(ranks, weights, strict=True):
        present = rank >= 0
        score[present] += weight / (k + rank[present] + 1)
    return score


@dataclass(frozen=True)
class Fused:
    key: Hashable
    score: float
    ranks: tuple[int, ...]  # the key's rank in each list, -1 where it is absent


def fuse_ranked(rankings: Sequence[Sequence[Hashable]], weights: Sequence[float], k: int) -> list[Fused]:
    """The keys of several ranked lists, best first by `rrf`; ties keep the order first seen."""
    ranks: list[dict[Hashable, int]] = []
    for ranking in rankings:
        first: dict[Hashable, int] = {}
        for rank, key in enumerate(ranking):
            first.setdefault(key, rank)
        ranks.append(first)
    keys = list(dict.fromkeys(key for ranking in rankings for key in ranking))
    if not keys:
        return []
    score = rrf([np.array([r.get(key, -1) for key in keys]) for r in ranks], list(weights), k)
    return [
        Fused(keys[i], float(score[i]), tuple(r.get(keys[i], -1) for r in ranks))
        for i in np.argsort(-score, kind="stable")
    ]


def nan_to(values: np.ndarray, fill: float) -> np.ndarray:
    """A float64 copy of `values`, NaN (a missing score) replaced by `fill`.

    `np.nan_to_num` does the same and also clamps infinities, which no score here holds: its
    further passes cost ~12 us a call for a pool of 400 against ~2.5 us, with 8 calls a recall."""
    out = np.array(values, dtype=np.float64)
    out[np.isnan(out)] = fill
    return out


def weighted(scores: list[np.ndarray], weights: list[float]) -> np.ndarray:
    """Weighted sum of min-max normalised scores (missing = 0)."""
    total = np.zeros(len(scores[0]), dtype=np.float64)
    for s, weight in zip(scores, weights, strict=True):
        s = nan_to(s, 0.0)
        span = s.max() - s.min() if len(s) else 0.0
        total += weight * ((s - s.min()) / span if span > 0 else (s > 0).astype(np.float64))
    return total


def scaled(cosine: np.ndarray, bm25: np.ndarray, weights: list[float]) -> np.ndarray:
    """Weighted sum on each retriever's own scale: cosine as is, BM25 over the query's best BM25.

    Unlike min-max, a memory's score does not depend on which other candidates came
    back, so memories added to the pool later (context neighbours) score alike.
    """
    cosine = np.clip(nan_to(cosine, 0.0), 0.0, 1.0)
    bm25 = nan_to(bm25, 0.0)
    best = bm25.max() if len(bm25) else 0.0
    return weights[0] * cosine + weights[1] * (bm25 / best if best > 0 else np.zeros_like(bm25))


def neighbourhood(score: np.ndarray, ts: np.ndarray, window: int, gap_seconds: float) -> np.ndarray:
    """For memories in time order, the best score among the `window` before and after each one.

    A pause longer than `gap_seconds` ends a conversation: nothing across it is a neighbour.
    An answer ("Adoption agencies.") rarely repeats the words of the question it
    answers, which sits one turn earlier: the neighbourhood lends it that context.
    """
    n = len(score)
    best = np.zeros(n, dtype=np.float64)
    if n < 2 or window <= 0:
        return best
    seconds = ts.astype("datetime64[us]").astype(np.int64) / 1e6
    run = np.concatenate([[0], np.cumsum(np.diff(seconds) > gap_seconds)])
    for step in range(1, min(window, n - 1) + 1):
        same = run[step:] == run[:-step]
        # item i+step's earlier neighbour is i, and item i's later neighbour is i+step
        best[step:] = np.maximum(best[step:], np.where(same, score[:-step], 0.0))
        best[:-step] = np.maximum(best[:-step], np.where(same, score[step:], 0.0))
    return best


def recency_factor(ts, now: datetime, config: RecallConfig) -> np.ndarray:
    """0.5 ** (age / half-life), mapped onto [floor, 1]; unknown times count as new.

    `ts` is a list of datetimes or a datetime64 array (NaT for unknown).
    """
    if now.tzinfo is not None:
        now = now.astimezone(UTC).replace(tzinfo=None)  # stored times are naive UTC
    if isinstance(ts, np.ndarray) and ts.dtype.kind == "M":
        stamps = ts.astype("datetime64[us]")  # an Arrow column as numpy: NaT already, no Python loop
    else:
        stamps = np.array([np.datetime64("NaT") if t is None else t for t in ts], dtype="datetime64[us]")
    age_days = (np.datetime64(now, "us") - stamps) / np.timedelta64(86400, "s")
    age_days = np.clip(nan_to(age_days, 0.0), 0.0, None)
    half = np.power(0.5, age_days / config.half_life_days)
    return config.recency_floor + (1.0 - config.recency_floor) * half


def decay_factor(decay_scores: np.ndarray, config: RecallConfig) -> np.ndarray:
    return np.power(np.clip(decay_scores, 1e-6, 1.0), config.decay_exponent)


def mmr(relevance: np.ndarray, vectors: np.ndarray, k: int, lam: float) -> list[int]:
    """Maximal marginal relevance: trade relevance against similarity to what is already chosen."""
    if len(relevance) == 0:
        return []
    rel = relevance / relevance.max() if relevance.max() > 0 else relevance
    chosen: list[int] = []
    best_sim = np.full(len(rel), -np.inf)
    for _ in range(min(k, len(rel))):
        penalty = np.where(np.isfinite(best_sim), best_sim, 0.0)
        value = lam * rel - (1 - lam) * penalty
        value[chosen] = -np.inf
        pick = int(np.argmax(value))
        chosen.append(pick)
        # one row of similarities per pick (k x n), not the n x n matrix
        best_sim = np.maximum(best_sim, vectors @ vectors[pick])
    return chosen


def session_score(fused: np.ndarray, ts: np.ndarray, gap_seconds: float) -> np.ndarray:
    """Each memory's session total: the summed fused score of the candidates of its session,
    over the best session's (0 to 1). A session is a run of memories without a pause over
    `gap_seconds`; a memory without a time is a session of its own.

    A question about one conversation finds several of its turns; a turn of that session
    that matched weakly is more likely the answer than an equally weak turn elsewhere.
    """
    n = len(fused)
    out = np.zeros(n, dtype=np.float64)
    if n == 0:
        return out
    stamps = ts.astype("datetime64[us]")
    known = ~np.isnat(stamps)
    order = np.argsort(np.where(known, stamps.astype(np.int64), np.iinfo(np.int64).max), kind="stable")
    seconds = stamps[order].astype(np.int64) / 1e6
    breaks = np.concatenate([[True], (np.diff(seconds) > gap_seconds) | ~known[order][1:]])
    run = np.cumsum(breaks) - 1
    totals = np.bincount(run, weights=np.clip(fused[order], 0.0, None))
    best = totals.max()
    out[order] = totals[run] / best if best > 0 else 0.0
    return out


def local_bm25(tf: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """BM25 of a query's words over a few texts with their own statistics (over its best; 0 to 1),
    from how often each word is in each text (words x texts) and the texts' lengths.

    Among a query's best candidates, a word they all share (a name the question repeats)
    counts for little and the word only a few hold counts for much: a different opinion
    from the full-text index's, whose statistics are those of every memory.
    """
    from mindflow.recall import primitives

    scores = primitives.bm25_scores(tf, lengths, tf.shape[1])
    best = scores.max() if len(scores) else 0.0
    return scores / best if best > 0 else scores


def within(ts: np.ndarray, start: datetime, end: datetime) -> np.ndarray:
    """1.0 for each time in [start, end), else 0.0 (unknown times too); `ts` is datetime64 (NaT)."""
    stamps = np.asarray(ts, dtype="datetime64[us]")
    inside = (stamps >= np.datetime64(start, "us")) & (stamps < np.datetime64(end, "us"))
    return inside.astype(np.float64)
