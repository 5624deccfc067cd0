"""How recall ranks: one config object, so a new ranking idea is one field and one function."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

# Cosine floors per embedding model: a candidate less similar than this is noise.
# The seed's 0.35 was set for text-embedding-3-small; MiniLM's cosines run lower,
# so its floor is calibrated on LoCoMo (bench/bench_recall.py prints the effect).
MIN_SIMILARITY = {
    "all-MiniLM-L6-v2": 0.2,
    "sentence-transformers/all-MiniLM-L6-v2": 0.2,
    "openai:text-embedding-3-small": 0.35,
}
DEFAULT_MIN_SIMILARITY = 0.2


@dataclass(frozen=True)
class RecallConfig:
    """Every knob of the ranking pipeline: candidates -> fusion -> weighting -> MMR."""

    fusion: Literal["rrf", "weighted", "scaled"] = "scaled"
    vector_weight: float = 0.5  # a retriever weighted 0 is not queried at all
    text_weight: float = 0.5
    rrf_k: int = 60
    candidates: int = 100  # per retriever, before fusion
    # Context: a memory also scores by its neighbours, the `context_window` memories
    # before and after it with no pause over `context_gap_minutes` between them.
    # Neighbours are read around the `context_top` best candidates. 0 turns it off.
    context_window: int = 2
    context_weight: float = 0.5  # bonus = weight x the best neighbour's fused score
    context_gap_minutes: float = 10.0
    context_top: int = 10
    half_life_days: float = 30.0  # recency factor: 0.5 ** (age / half_life) ...
    recency_floor: float = 0.9  # ... mapped onto [floor, 1] so old memories stay findable
    decay_exponent: float = 0.5  # factor = min(decay_score, 1) ** exponent
    mmr_lambda: float = 0.7
    min_similarity: float | None = None  # None: MIN_SIMILARITY of the model

    @classmethod
    def for_model(cls, model: str, **overrides) -> RecallConfig:
        floor = MIN_SIMILARITY.get(model, DEFAULT_MIN_SIMILARITY)
        return replace(cls(min_similarity=floor), **overrides)

    @property
    def floor(self) -> float:
        return DEFAULT_MIN_SIMILARITY if self.min_similarity is None else self.min_similarity
