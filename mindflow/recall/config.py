"""How recall ranks: one config object, so a new ranking idea is one field and one function."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

# Cosine floors per embedding model: a candidate less similar than this is noise.
# The seed's 0.35 was set for text-embedding-3-small; MiniLM's cosines run lower.
# MiniLM's 0.2 is calibrated on LoCoMo: it loses no question's evidence from the top
# 10 and silences questions no chat answers ("kubernetes pod eviction policy"),
# while 0.3 starts losing answers (bench/bench_recall.py prints the table).
MIN_SIMILARITY = {
    "all-MiniLM-L6-v2": 0.2,
    "sentence-transformers/all-MiniLM-L6-v2": 0.2,
    "openai:text-embedding-3-small": 0.35,
}
DEFAULT_MIN_SIMILARITY = 0.2


@dataclass(frozen=True)
class RecallConfig:
    """Every knob of the ranking pipeline: candidates -> fusion -> context -> weighting -> MMR.

    The defaults are measured on LoCoMo by bench/bench_recall.py (README: Recall quality).
    """

    # `scaled`: cosine as is + BM25 / the query's best BM25. RRF throws away how much
    # better the first hit is than the tenth, and its scores are so flat (1/61 vs 1/70)
    # that any multiplicative factor (recency, decay) outweighs relevance.
    fusion: Literal["rrf", "weighted", "scaled"] = "scaled"
    vector_weight: float = 0.5  # a retriever weighted 0 is not queried at all
    text_weight: float = 0.5
    rrf_k: int = 60
    # Candidates per retriever, before fusion. Full text needs depth (50 loses 0.4
    # point of hit@5); the vector side does not (20 to 100 score the same on LoCoMo),
    # and an ANN search costs by its limit (100 -> 30 saves ~8 ms at 100,000 memories).
    candidates: int = 100
    vector_candidates: int = 30
    # Context: a memory also scores by its neighbours, the `context_window` memories
    # before and after it with no pause over `context_gap_minutes` between them
    # (bonus = context_weight x the best neighbour's fused score); the memory returned
    # stays the real one. An answer rarely repeats the words of the question it
    # answers, which sits a turn or two earlier. Neighbours are read around the
    # `context_top` best candidates. 0 turns it off.
    context_window: int = 2
    context_weight: float = 0.65
    context_gap_minutes: float = 10.0
    context_top: int = 10
    half_life_days: float = 30.0  # recency factor: 0.5 ** (age / half_life) ...
    # ... mapped onto [floor, 1]: a fresh memory wins a tie, but a memory of last
    # year that is clearly more relevant still wins (0.5 halved old evidence).
    recency_floor: float = 0.9
    decay_exponent: float = 0.5  # factor = min(decay_score, 1) ** exponent
    # MMR's trade of relevance (1.0) against novelty to what was chosen before it. Chosen by
    # leave-one-out: every fold picked 0.8 among 0.6/0.8/1.0 (0.7 before).
    mmr_lambda: float = 0.8
    # Pseudo-relevance feedback (`feedback.expansion_terms`): the `prf_terms` words most
    # shared by the `prf_docs` best candidates are searched again in full text, and that
    # BM25 (over its best) adds `prf_weight` to the fused score. 0 terms turns it off.
    prf_terms: int = 0
    prf_docs: int = 5
    prf_weight: float = 0.3
    # Session score (`rerank.session_score`): memories with no pause over
    # `session_gap_minutes` between them form a session; each memory adds `session_weight`
    # x its session's summed fused score (over the best session's). 0 turns it off.
    session_weight: float = 0.0
    session_gap_minutes: float = 60.0
    # Session document (`sessions.document_scores`): each memory adds `session_doc_weight` x
    # the BM25 of its session read as one document (its episodes' `session_id`; without one,
    # the run with no pause over `session_gap_minutes`), over the best session's. From a hot
    # index only (recall without one scores it 0). 0 turns it off.
    session_doc_weight: float = 0.0
    # The time a query names (`timeframe.named_window`: "in May 2022", "on October 6", "last
    # week"): memories written within it, widened by `time_slack_days` each side, add
    # `time_weight` to their fused score. A query naming no time is unchanged. 0 turns it off.
    # Chosen by leave-one-out: every fold picked 0.2 and 3 days among 0.1-0.3 and 3/7 days.
    time_weight: float = 0.2
    time_slack_days: float = 3.0
    # Who the query names (`speakers.named`): memories one of whose actors (the episode's
    # speaker) the query names add `speaker_weight` to their score, after the context lift.
    # Chosen by leave-one-out: every fold picked 0.2 among 0.1/0.2/0.3/0.5. 0 turns it off.
    speaker_weight: float = 0.2
    # A second opinion on the `rescore_top` best: BM25 over their own texts, with the
    # statistics of those texts only (`rerank.local_bm25`), adds `rescore_weight` x it
    # (over its best). 0 turns it off.
    rescore_top: int = 30
    rescore_weight: float = 0.0
    # The order of the first `reorder_top` (MMR's): each adds `reorder_weight` x the BM25 of its
    # words together with its `reorder_window` neighbours' each side (no pause over
    # `context_gap_minutes`), with the statistics of those texts only (`search._reordered`), x
    # the best final score. Which memories they are does not change, only their order. Chosen by
    # leave-one-out: 0.05 and one neighbour each side in every fold. 0 turns it off.
    reorder_top: int = 10
    reorder_window: int = 1
    reorder_weight: float = 0.05
    # Where a hot index's full-text side comes from: its own postings (`fulltext`: the same
    # analysis, stemmer and BM25, statistics of the being's memories, no LanceDB query) or
    # LanceDB's full-text index (`lance`). Recall without a hot index always asks LanceDB.
    hot_fulltext: Literal["index", "lance"] = "index"
    min_similarity: float | None = None  # None: MIN_SIMILARITY of the model

    @classmethod
    def for_model(cls, model: str, **overrides) -> RecallConfig:
        floor = MIN_SIMILARITY.get(model, DEFAULT_MIN_SIMILARITY)
        return replace(cls(min_similarity=floor), **overrides)

    @property
    def floor(self) -> float:
        return DEFAULT_MIN_SIMILARITY if self.min_similarity is None else self.min_similarity
