"""Recall's candidates (its pool), as the ranking in `search.recall` reads them.

Two kinds answer the same questions: `RowPool`, rows read from LanceDB or the fresh tail as
an Arrow table, and `IndexPool`, positions in a being's hot index whose columns are the
index's own arrays at those positions. A recall over a hot index thus never builds an Arrow
table of its candidates only to read them back as arrays: taking, concatenating and
converting those tables, and looking ranks up by ref, cost ~0.5-0.8 ms of such a recall's
~4.5 at 100,000 memories.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mindflow.recall import primitives
from mindflow.recall.hot import BeingIndex
from mindflow.recall.models import COLUMNS

# A candidate's position in the being's hot index, as a column of rows: what the levers that
# count words from the index's postings read (`retrieval.HotRetrieval.lever_columns`).
POSITION = "_position"


class RowPool:
    """Candidates as rows of an Arrow table; `score` names the column of the retrieval's own
    score (`cosine` of a vector search, `_score` of a full-text one), when it has one."""

    def __init__(self, rows: pa.Table, score: str | None = None):
        self.rows = rows
        self.score = score

    def __len__(self) -> int:
        return self.rows.num_rows

    @cached_property
    def refs(self) -> list[str]:
        return self.rows.column("memory_ref").to_pylist()

    @cached_property
    def ts(self) -> np.ndarray:
        return self.rows.column("ts").to_numpy()

    @property
    def decay(self) -> np.ndarray:
        """Decay scores, NaN where a memory has none yet."""
        return self.rows.column("decay_score").to_numpy(zero_copy_only=False).astype(np.float64)

    @property
    def vectors(self) -> np.ndarray:
        """Unit vectors (the table holds them as the model gave them)."""
        vectors = primitives.vectors_of(self.rows)
        return vectors / np.clip(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12, None)

    @property
    def positions(self) -> np.ndarray:
        """The index positions the rows carry (-1 for a memory the index does not hold)."""
        if POSITION not in self.rows.column_names:
            return np.full(len(self), -1, dtype=np.int64)
        return self.rows.column(POSITION).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)

    @property
    def actors(self) -> pa.ChunkedArray:
        return self.rows.column("actors")

    @property
    def texts(self) -> list[str]:
        return [t or "" for t in self.rows.column("text").to_pylist()]

    @property
    def scores(self) -> np.ndarray:
        """The retrieval's score of each row, as float64."""
        return self.rows.column(self.score).to_numpy(zero_copy_only=False).astype(np.float64)

    @property
    def whole(self) -> pa.Table | None:
        """The rows with every column a `Memory` needs, when they were read whole."""
        return self.rows if set(COLUMNS) <= set(self.rows.column_names) else None

    def take(self, rows: np.ndarray) -> RowPool:
        return RowPool(self.rows.take(pa.array(rows, type=pa.int64())), self.score)

    def after(self, start: int) -> RowPool:
        """The rows from `start` on."""
        return RowPool(self.rows.slice(start), self.score)

    def rows_in(self, other: RowPool | IndexPool | None) -> np.ndarray:
        """Each row's row in `other` (by memory), -1 where `other` does not hold it."""
        if other is None:
            return np.full(len(self), -1, dtype=np.int64)
        at = {ref: i for i, ref in enumerate(other.refs)}
        return np.array([at.get(ref, -1) for ref in self.refs], dtype=np.int64)

    def not_in(self, other: RowPool) -> RowPool:
        """The rows whose memory `other` does not hold."""
        known = pc.is_in(self.rows.column("memory_ref"), value_set=other.rows.column("memory_ref"))
        return RowPool(self.rows.filter(pc.invert(known)), self.score)

    def table(self, columns: list[str]) -> pa.Table:
        return self.rows

    @staticmethod
    def joined(pools: list[RowPool], columns: list[str]) -> RowPool:
        """The pools' rows one after the other, each memory once (its first row): `columns` only."""
        rows = pa.concat_tables([p.rows.select(columns) for p in pools], promote_options="permissive")
        refs = rows.column("memory_ref").to_pylist()
        first = sorted({ref: i for i, ref in reversed(list(enumerate(refs)))}.values())
        if len(first) < len(refs):
            rows = rows.take(pa.array(first, type=pa.int64()))
        return RowPool(rows)


class IndexPool:
    """Candidates as positions in a being's hot index, with the retrieval's own `scores` (by
    position, as `score` names them in rows), when it has some."""

    def __init__(
        self,
        index: BeingIndex,
        positions: np.ndarray,
        scores: np.ndarray | None = None,
        score: str | None = None,
    ):
        self.index = index
        self.positions = np.asarray(positions, dtype=np.int64)
        self._scores = scores
        self.score = score

    def __len__(self) -> int:
        return len(self.positions)

    @cached_property
    def refs(self) -> list[str]:
        return self.index.refs[self.positions].tolist()

    @cached_property
    def ts(self) -> np.ndarray:
        return self.index.ts[self.positions]

    @property
    def decay(self) -> np.ndarray:
        return self.index.decay[self.positions]

    @property
    def vectors(self) -> np.ndarray:
        # The index holds unit vectors already: normalising 400 of them again cost ~0.1 ms.
        return self.index.vectors[self.positions]

    @property
    def actors(self) -> pa.ChunkedArray:
        return self.index.rows.column("actors").take(pa.array(self.positions, type=pa.int64()))

    @property
    def texts(self) -> list[str]:
        column = self.index.rows.column("text").take(pa.array(self.positions, type=pa.int64()))
        return [t or "" for t in column.to_pylist()]

    @property
    def scores(self) -> np.ndarray:
        return np.asarray(self._scores, dtype=np.float64)

    whole = None  # the chosen memories' rows are a cheap read by position (`HotRetrieval.by_ref`)

    def take(self, rows: np.ndarray) -> IndexPool:
        scores = self._scores[rows] if self._scores is not None else None
        return IndexPool(self.index, self.positions[rows], scores, self.score)

    def after(self, start: int) -> IndexPool:
        scores = self._scores[start:] if self._scores is not None else None
        return IndexPool(self.index, self.positions[start:], scores, self.score)

    def rows_in(self, other: IndexPool | None) -> np.ndarray:
        if other is None or len(other) == 0:
            return np.full(len(self), -1, dtype=np.int64)
        order = np.argsort(other.positions, kind="stable")
        sorted_positions = other.positions[order]
        at = np.searchsorted(sorted_positions, self.positions).clip(max=len(other) - 1)
        return np.where(sorted_positions[at] == self.positions, order[at], -1).astype(np.int64)

    def not_in(self, other: IndexPool) -> IndexPool:
        # A flag per memory of the index: 3 us at 100,000, where np.isin sorts both (~40 us).
        held = np.zeros(len(self.index), dtype=bool)
        held[other.positions] = True
        return self.take(np.flatnonzero(~held[self.positions]))

    def table(self, columns: list[str]) -> pa.Table:
        """The candidates as rows of `columns` (POSITION among them when asked), with the score
        column, as LanceDB would read them."""
        rows = self.index.rows_at(self.positions, [c for c in columns if c != POSITION])
        if POSITION in columns:
            rows = rows.append_column(POSITION, pa.array(self.positions, type=pa.int64()))
        if self.score is not None:
            # The scores' own type: float64 cosines and float32 BM25, as LanceDB returns them.
            rows = rows.append_column(self.score, pa.array(self._scores))
        return rows

    @staticmethod
    def joined(pools: list[IndexPool], columns: list[str]) -> IndexPool:
        positions = np.concatenate([p.positions for p in pools])
        _, first = np.unique(positions, return_index=True)
        if len(first) < len(positions):
            positions = positions[np.sort(first)]
        return IndexPool(pools[0].index, positions)


# Either kind: what the ranking and the sources' lever methods take.
Pool = RowPool | IndexPool


def joined(pools: list[Pool], columns: list[str]) -> Pool:
    """The pools (all of one kind) as one, each memory once, in order of first appearance."""
    return type(pools[0]).joined(pools, columns)
