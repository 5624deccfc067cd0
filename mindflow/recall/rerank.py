"""Fusion and re-ranking: each idea is one function over candidate arrays."""

from __future__ import annotations

from datetime import datetime

import numpy as np

from mindflow.recall.config import RecallConfig


def rrf(ranks: list[np.ndarray], weights: list[float], k: int) -> np.ndarray:
    """Reciprocal rank fusion; a rank of -1 means the retriever did not return the item."""
    score = np.zeros(len(ranks[0]), dtype=np.float64)
    for rank, weight in zip(ranks, weights, strict=True):
        present = rank >= 0
        score[present] += weight / (k + rank[present] + 1)
    return score


def weighted(scores: list[np.ndarray], weights: list[float]) -> np.ndarray:
    """Weighted sum of min-max normalised scores (missing = 0)."""
    total = np.zeros(len(scores[0]), dtype=np.float64)
    for s, weight in zip(scores, weights, strict=True):
        s = np.nan_to_num(s.astype(np.float64), nan=0.0)
        span = s.max() - s.min() if len(s) else 0.0
        total += weight * ((s - s.min()) / span if span > 0 else (s > 0).astype(np.float64))
    return total


def recency_factor(ts: list[datetime | None], now: datetime, config: RecallConfig) -> np.ndarray:
    """0.5 ** (age / half-life), mapped onto [floor, 1]; unknown times count as new."""
    age_days = np.array([max((now - t).total_seconds() / 86400.0, 0.0) if t is not None else 0.0 for t in ts])
    half = np.power(0.5, age_days / config.half_life_days)
    return config.recency_floor + (1.0 - config.recency_floor) * half


def decay_factor(decay_scores: np.ndarray, config: RecallConfig) -> np.ndarray:
    return np.power(np.clip(decay_scores, 1e-6, 1.0), config.decay_exponent)


def mmr(relevance: np.ndarray, vectors: np.ndarray, k: int, lam: float) -> list[int]:
    """Maximal marginal relevance: trade relevance against similarity to what is already chosen."""
    if len(relevance) == 0:
        return []
    rel = relevance / relevance.max() if relevance.max() > 0 else relevance
    sims = vectors @ vectors.T
    chosen: list[int] = []
    best_sim = np.full(len(rel), -np.inf)
    for _ in range(min(k, len(rel))):
        penalty = np.where(np.isfinite(best_sim), best_sim, 0.0)
        value = lam * rel - (1 - lam) * penalty
        value[chosen] = -np.inf
        pick = int(np.argmax(value))
        chosen.append(pick)
        best_sim = np.maximum(best_sim, sims[pick])
    return chosen
