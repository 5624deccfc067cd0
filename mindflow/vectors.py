"""Embedding vectors between numpy and Arrow, without a Python float per dimension.

DuckDB, LanceDB and the recall code all hand vectors over as Arrow list columns; a
`to_pylist()` of 2,760 MiniLM vectors alone takes half a second.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def to_matrix(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A column of equal-length float lists (list or fixed-size list) as a float32 matrix."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if len(column) == 0:
        return np.zeros((0, 0), dtype=np.float32)
    if column.null_count:
        raise ValueError(f"{column.null_count} of {len(column)} vectors are missing")
    if pa.types.is_fixed_size_list(column.type):
        dim = column.type.list_size
    else:
        lengths = pc.min_max(pc.list_value_length(column))
        if lengths["min"] != lengths["max"]:
            raise ValueError(f"vectors of unequal length ({lengths['min']} to {lengths['max']})")
        dim = lengths["min"].as_py()
    flat = column.flatten().to_numpy(zero_copy_only=False).astype(np.float32, copy=False)
    return flat.reshape(len(column), dim)


def to_column(matrix: np.ndarray) -> pa.FixedSizeListArray:
    """The rows of a matrix as a fixed-size list<float32> column (DuckDB casts it to FLOAT[])."""
    rows, dim = matrix.shape
    flat = np.ascontiguousarray(matrix, dtype=np.float32).reshape(-1)
    return pa.FixedSizeListArray.from_arrays(pa.array(flat, type=pa.float32()), dim)
