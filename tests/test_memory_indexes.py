"""The recall table's indexes: built once by publish, and exact results for a small being."""

from __future__ import annotations

from datetime import datetime, timedelta

import lancedb
import numpy as np
import pyarrow as pa

from mindflow.memories import SCALAR_INDEXES, ensure_indexes
from mindflow.recall import primitives

DIM = 16


def rows(being: str, n: int, rng: np.random.Generator) -> pa.Table:
    vectors = rng.normal(size=(n, DIM)).astype(np.float32)
    return pa.table(
        {
            "memory_ref": [f"{being}-{i}" for i in range(n)],
            "being_id": [being] * n,
            "status": ["active"] * n,
            "text": [f"memory {i} of {being}" for i in range(n)],
            "ts": pa.array(
                [datetime(2026, 1, 1) + timedelta(minutes=i) for i in range(n)], pa.timestamp("us")
            ),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), DIM),
        }
    )


def test_indexes_are_built_once_and_a_small_being_still_gets_its_nearest(tmp_path):
    rng = np.random.default_rng(3)
    table = lancedb.connect(str(tmp_path)).create_table("memories", data=rows("big", 3_000, rng))
    table.add(rows("small", 12, rng))

    built = ensure_indexes(table, vector_min_rows=1_000)
    assert set(built) == {"text", "vector", *SCALAR_INDEXES}
    assert ensure_indexes(table, vector_min_rows=1_000) == []  # nothing left to build

    query = rng.normal(size=DIM).astype(np.float32)
    found = primitives.vector_candidates(table, query, primitives.memory_filter("small"), 10, ["memory_ref"])
    # LanceDB's prefilter keeps a being with few memories exact however the partitions fall:
    # the 10 nearest of its 12, as a flat scan finds them
    mine = table.search().where("being_id = 'small'").select(["memory_ref", "vector"]).to_arrow()
    unit = primitives.vectors_of(mine)
    unit = unit / np.linalg.norm(unit, axis=1, keepdims=True)
    order = np.argsort(-(unit @ (query / np.linalg.norm(query))))[:10]
    assert found.column("memory_ref").to_pylist() == [
        mine.column("memory_ref")[int(i)].as_py() for i in order
    ]


def test_below_the_threshold_no_vector_index(tmp_path):
    table = lancedb.connect(str(tmp_path)).create_table(
        "memories", data=rows("a", 50, np.random.default_rng(1))
    )
    assert "vector" not in ensure_indexes(table, vector_min_rows=1_000)
