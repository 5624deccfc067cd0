"""`store.transaction`, the one way mindflow's steps commit several statements together."""

from __future__ import annotations

import duckdb
import pytest

from mindflow import store


@pytest.fixture
def con(tmp_path):
    con = duckdb.connect(str(tmp_path / "mindflow.duckdb"))
    con.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v VARCHAR)")
    yield con
    con.close()


def _rows(con) -> list[tuple]:
    return con.execute("SELECT * FROM t ORDER BY k").fetchall()


def test_the_block_commits_together(con):
    with store.transaction(con):
        con.execute("INSERT INTO t VALUES (1, 'a')")
        con.execute("INSERT INTO t VALUES (2, 'b')")
    assert _rows(con) == [(1, "a"), (2, "b")]


@pytest.mark.parametrize("stop", [ValueError("bad answer"), KeyboardInterrupt()])
def test_an_exception_in_the_block_rolls_everything_back_and_propagates(con, stop):
    with pytest.raises(type(stop)):
        with store.transaction(con):
            con.execute("INSERT INTO t VALUES (1, 'a')")
            raise stop
    assert _rows(con) == []
    with store.transaction(con):  # the connection is usable again
        con.execute("INSERT INTO t VALUES (1, 'a')")
    assert _rows(con) == [(1, "a")]


def test_a_failed_commit_raises_its_own_error_and_leaves_nothing(con):
    """A key another transaction committed first fails the COMMIT itself: the caller sees that
    error (not a failed ROLLBACK's "no transaction is active") and none of the block's rows."""
    other = con.cursor()
    other.execute("BEGIN TRANSACTION")
    other.execute("INSERT INTO t VALUES (1, 'theirs')")
    with pytest.raises(duckdb.TransactionException, match="constraint violation"):
        with store.transaction(con):
            con.execute("INSERT INTO t VALUES (2, 'mine')")
            con.execute("INSERT INTO t VALUES (1, 'mine')")
            other.execute("COMMIT")
    assert _rows(con) == [(1, "theirs")]
    other.close()
