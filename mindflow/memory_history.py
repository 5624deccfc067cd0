"""Every change of every memory, from DuckDB `history` to LanceDB `memory_history`, for reading.

A history row is written once by the step that made the change (formed, reinforced,
dying, revived, dead, merged, absorbed, moved, decay_status, pinned, unpinned, forgotten,
restored, deleted) and never updated by them, so publishing appends: only rows not in
`published_history` are written. A row rewritten later (scrubbed after a permanent
forget) is written again once its `published_history` row is deleted; a row deleted from
DuckDB is deleted here too. Rows of memories hold no content: statuses, refs, cluster ids
and numbers only.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import duckdb
import pyarrow as pa

from mindflow import lance, store

TABLE = "memory_history"
# Fact changes (values, which are content) are not a memory's history.
FACT_OPERATIONS = ("superseded",)
# Rows written before `history.actor` existed, or by a writer that left it out.
_ACTOR = """coalesce(h.actor, CASE
    WHEN h.operation IN ('pinned', 'unpinned', 'forgotten', 'restored', 'deleted') THEN 'user'
    WHEN h.operation = 'decay_status' THEN 'decay'
    WHEN h.operation = 'reinforced' THEN 'recall'
    ELSE 'patrol' END)"""
SCHEMA = pa.schema(
    [
        ("history_id", pa.string()),
        ("being_id", pa.string()),
        ("memory_ref", pa.string()),
        ("ts", pa.timestamp("us")),
        ("operation", pa.string()),
        ("actor", pa.string()),
        ("run_id", pa.string()),
        ("before", pa.string()),  # JSON of the fields that changed, as they were
        ("after", pa.string()),  # and as they are
        ("seq", pa.int64()),  # the order rows were written in: the steps of one run share a time
    ]
)
# Reads are by being and memory ref.
SCALAR_INDEXES = {"being_id": "BITMAP", "memory_ref": "BTREE"}


@dataclass
class HistoryReport:
    appended: int = 0
    deleted: int = 0
    rows: int = 0
    rebuilt: bool = False


def open_current(con: duckdb.DuckDBPyConnection, db):
    """The table, or None; one with other columns is dropped and `published_history` cleared."""
    table = lance.open_table(db, TABLE)
    if table is None:
        # Without a table nothing is published, whatever `published_history` says (a process
        # killed between the drop below and its clearing, or a table removed by hand).
        con.execute("DELETE FROM published_history")
        return None, False
    if table.schema.names == SCHEMA.names:
        return table, False
    con.execute("DELETE FROM published_history")
    db.drop_table(TABLE)
    return None, True


def publish(con: duckdb.DuckDBPyConnection, db, now: datetime) -> HistoryReport:
    """Append the history rows not published yet; delete those gone from DuckDB."""
    report = HistoryReport()
    table, report.rebuilt = open_current(con, db)
    new = con.sql(
        f"""
        SELECT h.history_id, h.being_id, h.memory_ref, h.ts, h.operation, {_ACTOR} AS actor, h.run_id,
               h.before::VARCHAR AS before, h.after::VARCHAR AS after,
               (SELECT coalesce(max(seq), 0) FROM published_history)
                   + row_number() OVER (ORDER BY h.rowid) AS seq
        FROM history h
        WHERE NOT list_contains(?, h.operation)
          AND NOT EXISTS (SELECT 1 FROM published_history p WHERE p.history_id = h.history_id)
        ORDER BY seq
        """,
        params=[list(FACT_OPERATIONS)],
    ).to_arrow_table()
    removed = [
        r[0]
        for r in con.execute(
            "SELECT p.history_id FROM published_history p "
            "WHERE NOT EXISTS (SELECT 1 FROM history h WHERE h.history_id = p.history_id)"
        ).fetchall()
    ]
    if new.num_rows:
        # An upsert: a rewritten (scrubbed) row comes back under its id.
        table = lance.upsert(db, TABLE, table, new.cast(SCHEMA), "history_id")
        report.appended = new.num_rows
    if table is not None and removed:
        report.deleted = lance.delete_keys(table, "history_id", removed)
    if table is not None and (report.appended or report.deleted):
        lance.ensure_scalar_indexes(table, SCALAR_INDEXES)
        table.optimize()
    # Recorded after LanceDB holds the rows: a failure in between writes them again next time.
    # `new` holds only ids missing here (and the store's lock keeps it so), so a plain insert.
    with store.registered(con, "history_appended", new.select(["history_id", "being_id", "seq"])):
        con.execute(
            "INSERT INTO published_history SELECT history_id, being_id, seq, ?::TIMESTAMP "
            "FROM history_appended",
            [now],
        )
    if removed:
        con.execute("DELETE FROM published_history WHERE list_contains(?, history_id)", [removed])
    if table is not None:
        report.rows = table.count_rows()
    return report


def rows_of(table, being_id: str, memory_ref: str) -> list[dict]:
    """The history of one memory of one being, oldest first (a being never sees another's rows)."""
    if table is None:
        return []
    rows = (
        table.search()
        .where(lance.where(being_id=being_id, memory_ref=memory_ref))
        .select(SCHEMA.names)
        .limit(None)
        .to_arrow()
        .to_pylist()
    )
    return sorted(rows, key=lambda r: (r["ts"], r["seq"]))
