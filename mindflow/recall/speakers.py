"""Who a query names: memories whose speaker (the `actors` column) the query names by name.

"What did Caroline say about the adoption agency?" is most often answered by one of Caroline's
own turns, and a turn rarely says its speaker's name; the name in the query matches the column
instead. Recall's speaker lever (`RecallConfig.speaker_weight`) lifts those memories.
"""

from __future__ import annotations

import numpy as np

from mindflow.recall.primitives import fts_terms


def named(query: str, actors: list[list[str] | None]) -> np.ndarray:
    """1.0 for each memory one of whose actors the query names (any word of the actor's name,
    as full text analyses words: lower case, ASCII-folded, stop words left out), else 0.0."""
    words = set(fts_terms(query))
    out = np.zeros(len(actors), dtype=np.float64)
    if not words:
        return out
    said: dict[str, bool] = {}  # a being's memories share a few names: each is looked at once
    for i, names in enumerate(actors):
        for name in names or ():
            hit = said.get(name)
            if hit is None:
                hit = said[name] = any(w in words for w in fts_terms(name))
            if hit:
                out[i] = 1.0
                break
    return out
