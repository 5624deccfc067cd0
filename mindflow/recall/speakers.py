"""Who a query names: memories whose speaker (the `actors` column) the query names by name.

"What did Caroline say about the adoption agency?" is most often answered by one of Caroline's
own turns, and a turn rarely says its speaker's name; the name in the query matches the column
instead. Recall's speaker lever (`RecallConfig.speaker_weight`) lifts those memories.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mindflow.recall.primitives import fts_terms


def named(query: str, actors: pa.Array | pa.ChunkedArray | list[list[str] | None]) -> np.ndarray:
    """1.0 for each memory one of whose actors the query names (any word of the actor's name,
    as full text analyses words: lower case, ASCII-folded, stop words left out), else 0.0."""
    if not isinstance(actors, (pa.Array, pa.ChunkedArray)):
        actors = pa.array(actors, pa.list_(pa.string()))
    out = np.zeros(len(actors), dtype=np.float64)
    words = set(fts_terms(query))
    if not words or len(actors) == 0:
        return out
    if isinstance(actors, pa.ChunkedArray):
        actors = actors.combine_chunks()
    # A recall's candidates share a few names: each distinct name is analysed once, and the
    # rows holding a named one are found by Arrow, not by a Python loop over the rows.
    flat = pc.list_flatten(actors)
    said = [name for name in pc.unique(flat).to_pylist() if name and words.intersection(fts_terms(name))]
    if said:
        hit = pc.is_in(flat, value_set=pa.array(said, flat.type)).to_numpy(zero_copy_only=False)
        out[pc.list_parent_indices(actors).to_numpy()[hit]] = 1.0
    return out
