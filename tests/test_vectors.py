"""Vectors between numpy and Arrow: the one conversion DuckDB, LanceDB and recall share."""

import numpy as np
import pyarrow as pa
import pytest

from mindflow.vectors import to_column, to_matrix


def test_a_matrix_round_trips_through_list_and_fixed_size_list_columns():
    matrix = np.arange(12, dtype=np.float32).reshape(4, 3) / 7
    fixed = to_column(matrix)
    assert fixed.type == pa.list_(pa.float32(), 3)
    assert np.array_equal(to_matrix(fixed), matrix)
    as_lists = pa.chunked_array([pa.array(matrix[:1].tolist()), pa.array(matrix[1:].tolist())])
    assert as_lists.type == pa.list_(pa.float64())
    np.testing.assert_array_equal(to_matrix(as_lists), matrix)
    # a slice keeps its own rows, not the rows before it
    np.testing.assert_array_equal(to_matrix(pa.array(matrix.tolist()).slice(2)), matrix[2:])
    assert to_matrix(pa.array([], type=pa.list_(pa.float32()))).shape == (0, 0)


def test_ragged_or_missing_vectors_are_refused():
    with pytest.raises(ValueError, match="unequal length"):
        to_matrix(pa.array([[1.0, 2.0], [3.0]]))
    with pytest.raises(ValueError, match="missing"):
        to_matrix(pa.array([[1.0, 2.0], None]))
