"""Where recall's candidates come from: the LanceDB table, or a being's hot index.

Both answer the same four questions with Arrow tables of the same columns, so the
ranking in `search.recall` does not know which one it talks to.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from mindflow.recall import primitives
from mindflow.recall.hot import BeingIndex
from mindflow.recall.models import COLUMNS


class LanceRetrieval:
    """Every candidate read from the table, within the `where` of the request."""

    def __init__(self, table, where: str):
        self.table = table
        self.where = where

    def vector(self, vector: np.ndarray, limit: int, columns: list[str]) -> pa.Table:
        return primitives.vector_candidates(self.table, vector, self.where, limit, columns)

    def text(self, query: str, limit: int, columns: list[str]) -> pa.Table | None:
        return primitives.text_candidates(self.table, query, self.where, limit, columns)

    def around(self, spans, limit: int, also: list[str]) -> pa.Table | None:
        return primitives.rows_around(self.table, self.where, spans, limit, also)

    def by_ref(self, refs: list[str]) -> pa.Table:
        return primitives.rows_by_ref(self.table, self.where, refs)


class HotRetrieval(LanceRetrieval):
    """Vectors, context windows and rows from the being's index; full text from the table."""

    def __init__(self, table, where: str, index: BeingIndex, keep: np.ndarray):
        super().__init__(table, where)
        self.index = index
        self.keep = keep

    def vector(self, vector: np.ndarray, limit: int, columns: list[str]) -> pa.Table:
        positions, cosine = self.index.nearest(vector, self.keep, limit)
        found = self.index.rows_at(positions, columns)
        return found.append_column("cosine", pa.array(cosine.astype(np.float64)))

    def text(self, query: str, limit: int, columns: list[str]) -> pa.Table | None:
        table = self.index.snapshot if self.index.snapshot is not None else self.table
        found = primitives.text_candidates(table, query, self.where, limit, ["memory_ref"])
        if found is None:
            return None
        # Without a snapshot, a publish since the index's version may bring refs the index
        # does not hold yet; the next request uses the rebuilt index.
        refs = found.column("memory_ref").to_pylist()
        scores = dict(zip(refs, found.column("_score").to_pylist(), strict=True))
        positions = self.index.positions(scores)
        positions = positions[self.keep[positions]]
        rows = self.index.rows_at(positions, columns)
        ordered = [scores[str(self.index.refs[p])] for p in positions]
        return rows.append_column("_score", pa.array(ordered, type=pa.float32()))

    def around(self, spans, limit: int, also: list[str]) -> pa.Table | None:
        if not spans and not also:
            return None
        return self.index.rows_at(self.index.around(spans, self.keep, limit, also), [*COLUMNS, "vector"])

    def by_ref(self, refs: list[str]) -> pa.Table:
        positions = self.index.positions(refs)
        return self.index.rows_at(positions[self.keep[positions]], COLUMNS)
