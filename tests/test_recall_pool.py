"""Recall's two kinds of pool, positions in a hot index and rows, answer every question alike.

The ranking reads a pool without knowing its kind (`mindflow.recall.pool`): a recall over a hot
index must rank exactly as one over the same memories read as rows.
"""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pyarrow as pa
import test_recall_levers
from test_recall_levers import T0, _session_index

from mindflow.recall import RecallConfig, primitives, recall
from mindflow.recall.pool import POSITION, IndexPool, RowPool, joined

# The memories of the lever tests: ada's sessions of turns 30 s apart.
table = test_recall_levers.table


def _both(index, positions) -> tuple[IndexPool, RowPool]:
    """The memories at `positions` as positions and as rows (every column, and each position)."""
    positions = np.asarray(positions, dtype=np.int64)
    rows = index.rows_at(positions, primitives.ALL_COLUMNS)
    rows = rows.append_column(POSITION, pa.array(positions, type=pa.int64()))
    return IndexPool(index, positions), RowPool(rows)


def test_positions_and_rows_answer_alike(table):
    index = _session_index(table)
    assert len(index) >= 6
    by_position, by_row = _both(index, [5, 0, 3, 1])
    assert len(by_position) == len(by_row) == 4
    assert by_position.refs == by_row.refs == [str(index.refs[p]) for p in (5, 0, 3, 1)]
    assert by_position.ts.tolist() == by_row.ts.tolist()
    assert np.array_equal(by_position.decay, by_row.decay, equal_nan=True)
    # Unit vectors either way (rows hold them as the model gave them, and are normalised).
    assert np.allclose(by_position.vectors, by_row.vectors, atol=1e-6)
    assert np.allclose(np.linalg.norm(by_position.vectors, axis=1), 1.0, atol=1e-6)
    assert by_position.actors.to_pylist() == by_row.actors.to_pylist()
    assert by_position.texts == by_row.texts and all(by_position.texts)
    assert by_position.positions.tolist() == by_row.positions.tolist() == [5, 0, 3, 1]
    # A row from elsewhere (the fresh tail) holds no position.
    assert RowPool(by_row.rows.drop_columns([POSITION])).positions.tolist() == [-1] * 4
    # Taking and slicing keep the kinds alike.
    for a, b in ((by_position.take(np.array([2, 0])), by_row.take(np.array([2, 0]))), (by_position.after(1), by_row.after(1))):  # fmt: skip
        assert a.refs == b.refs and a.positions.tolist() == b.positions.tolist()


def test_ranks_new_rows_and_joins_are_by_memory(table):
    index = _session_index(table)
    found_p, found_r = _both(index, [4, 2, 0])
    pool_p, pool_r = _both(index, [0, 1, 2, 3])
    # Each candidate's row in what a retrieval found (its rank there), -1 where it was not found.
    assert pool_p.rows_in(found_p).tolist() == pool_r.rows_in(found_r).tolist() == [2, -1, 1, -1]
    assert pool_p.rows_in(None).tolist() == pool_r.rows_in(None).tolist() == [-1] * 4
    assert pool_p.rows_in(IndexPool(index, [])).tolist() == [-1] * 4
    # The candidates a context read adds: those the pool does not hold yet, in their order.
    around_p, around_r = _both(index, [5, 3, 4, 1])
    assert around_p.not_in(pool_p).positions.tolist() == around_r.not_in(pool_r).positions.tolist() == [5, 4]
    # Joined: each memory once, at its first place; a pool of rows keeps only `columns`.
    columns = ["memory_ref", "ts", "decay_score", "vector", POSITION]
    one_p = joined([found_p, pool_p], columns)
    one_r = joined([found_r, pool_r], columns)
    assert one_p.positions.tolist() == one_r.positions.tolist() == [4, 2, 0, 1, 3]
    assert one_p.refs == one_r.refs
    assert one_r.rows.column_names == columns


def test_scores_travel_with_the_candidates(table):
    index = _session_index(table)
    scores = np.array([0.9, 0.5, 0.25], dtype=np.float32)
    found = IndexPool(index, [4, 2, 0], scores, "_score")
    assert found.scores.tolist() == [float(np.float32(0.9)), 0.5, 0.25]  # float32's values, as rows read them
    assert found.take(np.array([2, 1])).scores.tolist() == [0.25, 0.5]
    assert found.after(1).scores.tolist() == [0.5, 0.25]
    # As rows (what a recall with a fresh tail merges): the same scores under the same name.
    rows = RowPool(found.table(["memory_ref", "ts", POSITION]), "_score")
    assert rows.rows.column_names == ["memory_ref", "ts", POSITION, "_score"]
    assert rows.scores.tolist() == found.scores.tolist() and rows.positions.tolist() == [4, 2, 0]


def test_a_recall_over_positions_ranks_as_one_over_rows(table, embedder):
    # The same memories, once from the hot index (a pool of positions) and once from LanceDB (a
    # pool of rows): the same memories in the same order with the same scores, with the defaults
    # and with the levers that count the candidates' words on. (The session document is left
    # off: only a hot index reads a session whole.)
    index = _session_index(table)
    counting = RecallConfig(prf_terms=3, prf_docs=2, prf_weight=0.5, rescore_weight=0.1)
    for config in (RecallConfig(), counting):
        for query in ("puppy chewing cushions", "the budget review", "what did Lena say about the vet"):
            vector = embedder.encode([query])[0]
            answers = [
                recall(
                    table,
                    "ada",
                    query,
                    vector,
                    k=4,
                    config=config,
                    now=T0 + timedelta(days=10),
                    index=index if hot else None,
                )  # fmt: skip
                for hot in (True, False)
            ]
            assert answers[0], query
            assert [m.memory_ref for m in answers[0]] == [m.memory_ref for m in answers[1]], query
            assert np.allclose([m.score for m in answers[0]], [m.score for m in answers[1]], rtol=1e-5)
