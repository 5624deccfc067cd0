"""Who a query names: memories whose speaker (the `actors` column) the query names by name.

"What did Caroline say about the adoption agency?" is most often answered by one of Caroline's
own turns, and a turn rarely says its speaker's name; the name in the query matches the column
instead. Recall's speaker lever (`RecallConfig.speaker_weight`) lifts those memories.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mindflow.recall.analysis import fts_tokens

# Words no name is. A name is matched as it is spelt (tokens, lower case, ASCII-folded), not by
# its stem, and not against the full-text index's longer stop list.
_NOT_NAMES = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then "
    "there these they this to was will with".split()
)


def _words(text: str) -> list[str]:
    return [w for w in fts_tokens(text) if w not in _NOT_NAMES]


def named(query: str, actors: pa.Array | pa.ChunkedArray | list[list[str] | None]) -> np.ndarray:
    """1.0 for each memory one of whose actors the query names (any word of the actor's name,
    split as the full-text index splits words, lower case and ASCII-folded, `_NOT_NAMES` left
    out), else 0.0."""
    if not isinstance(actors, (pa.Array, pa.ChunkedArray)):
        actors = pa.array(actors, pa.list_(pa.string()))
    out = np.zeros(len(actors), dtype=np.float64)
    words = set(_words(query))
    if not words or len(actors) == 0:
        return out
    if isinstance(actors, pa.ChunkedArray):
        actors = actors.combine_chunks()
    # A recall's candidates share a few names: each distinct name is analysed once, and the
    # rows holding a named one are found by Arrow, not by a Python loop over the rows.
    flat = pc.list_flatten(actors)
    said = [name for name in pc.unique(flat).to_pylist() if name and words.intersection(_words(name))]
    if said:
        hit = pc.is_in(flat, value_set=pa.array(said, flat.type)).to_numpy(zero_copy_only=False)
        out[pc.list_parent_indices(actors).to_numpy()[hit]] = 1.0
    return out
