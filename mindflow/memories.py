"""Publishing the recall table: every memory not archived, from DuckDB to LanceDB `memories`.

Active, dying and dormant memories are what recall serves; dead ones are published
too (status `dead`) because the seed's recall_memory and search_memory reach into
them, and reaching a dead memory reinforces it twice as much.

Only rows whose content changed are written: a LanceDB update un-indexes the rows
it touches, so rewriting every memory nightly would keep the indexes cold.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import duckdb
import numpy as np
import pyarrow as pa

from mindflow import lance, store
from mindflow.models import utcnow
from mindflow.vectors import to_column, to_matrix

TABLE = "memories"
DELETE_CHUNK = 500
# Scalar indexes turn the being/status prefilter of every recall, its context windows
# (`ts`) and its reads by ref into index lookups instead of scans: recall at 10,000
# memories takes about half the time with them (bench/bench_latency.py).
SCALAR_INDEXES = {"being_id": "BITMAP", "status": "BITMAP", "memory_ref": "BTREE", "ts": "BTREE"}
# Below this many rows a flat scan of the vectors is fast and exact; above it an
# IVF_FLAT index reads the nearest partitions instead of every vector. IVF_FLAT keeps
# the exact vectors: at 100,000 memories it finds 83% of the exact 30 nearest in about
# the time IVF_HNSW_SQ finds 62% (bench/bench_latency.py data).
VECTOR_INDEX_MIN_ROWS = 50_000

# The rows recall may serve, with a hash of everything recall reads except the
# vector (which follows from the text). The decay score is rounded so that
# its daily drift does not rewrite every row.
_DESIRED_SQL = """
    SELECT n.node_id AS memory_ref, n.being_id, n.kind,
           n.scene.action AS text, n.feeling, n.themes,
           CASE WHEN n.status = 'dead' THEN 'dead' WHEN d.status = 'dormant' THEN 'dormant'
                ELSE n.status END AS status,
           n.importance, n.episode_ts AS ts, n.cluster_id, n.source_episode_ids, n.pinned,
           n.trigger,
           [w.date for w in n.scene."when"] AS when_dates,
           round(coalesce(d.score, 1.0), 1) AS decay_score,
           md5(concat_ws('|', n.being_id, n.kind, n.scene.action, n.feeling,
               array_to_string(n.themes, ','), n.status, d.status, n.importance, n.episode_ts,
               n.cluster_id, array_to_string(n.source_episode_ids, ','), n.pinned, n.trigger,
               array_to_string([w.date for w in n.scene."when"], ','),
               round(coalesce(d.score, 1.0), 1))) AS row_hash
    FROM nodes n LEFT JOIN decay_scores d ON d.memory_ref = n.node_id
    WHERE n.status IN ('active', 'dying', 'dead') AND coalesce(d.status, 'active') <> 'archived'
"""


@dataclass
class PublishReport:
    upserted: int = 0
    deleted: int = 0
    rows: int = 0
    version: int | None = None
    indexes_built: list[str] = field(default_factory=list)


def ensure_indexes(table, vector_min_rows: int = VECTOR_INDEX_MIN_ROWS) -> list[str]:
    """Build the indexes recall needs that the table lacks; returns the columns indexed.

    Rows written later are folded into existing indexes by `optimize()`.
    """
    from lancedb.index import FTS, Bitmap, BTree, IvfFlat

    have = {column for index in table.list_indices() for column in index.columns}
    built = []
    if "text" not in have:
        table.create_index("text", config=FTS(), replace=True)
        built.append("text")
    for column, kind in SCALAR_INDEXES.items():
        if column not in have:
            table.create_index(column, config=Bitmap() if kind == "BITMAP" else BTree(), replace=True)
            built.append(column)
    rows = table.count_rows()
    if "vector" not in have and rows >= vector_min_rows:
        partitions = max(1, int(np.sqrt(rows) / 6))
        table.create_index(
            "vector", config=IvfFlat(distance_type="cosine", num_partitions=partitions), replace=True
        )
        built.append("vector")
    return built


def desired_refs_sql() -> str:
    return f"SELECT memory_ref, being_id FROM ({_DESIRED_SQL})"


def publish(con: duckdb.DuckDBPyConnection, db, now: datetime | None = None) -> PublishReport:
    """Bring LanceDB `memories` in line with DuckDB, writing only what changed."""
    now = now or utcnow()
    report = PublishReport()
    con.execute(f"CREATE OR REPLACE TEMP TABLE desired_memories AS {_DESIRED_SQL}")
    try:
        changed = con.sql(
            """
            SELECT d.* EXCLUDE (row_hash), n.vector, d.row_hash
            FROM desired_memories d JOIN nodes n ON n.node_id = d.memory_ref
            LEFT JOIN published_memories p ON p.memory_ref = d.memory_ref
            WHERE p.row_hash IS DISTINCT FROM d.row_hash
            ORDER BY d.memory_ref
            """
        ).to_arrow_table()
        removed = [
            r[0]
            for r in con.execute(
                "SELECT p.memory_ref FROM published_memories p "
                "WHERE NOT EXISTS (SELECT 1 FROM desired_memories d WHERE d.memory_ref = p.memory_ref)"
            ).fetchall()
        ]
        table = lance.open_table(db, TABLE)
        if changed.num_rows:
            batch = _to_lance(changed)
            if table is None:
                table = db.create_table(TABLE, data=batch)
            else:
                (
                    table.merge_insert("memory_ref")
                    .when_matched_update_all()
                    .when_not_matched_insert_all()
                    .execute(batch)
                )
            report.upserted = changed.num_rows
        if table is not None and removed:
            for start in range(0, len(removed), DELETE_CHUNK):
                table.delete(lance.where(memory_ref=removed[start : start + DELETE_CHUNK]))
            report.deleted = len(removed)
        if table is not None and (report.upserted or report.deleted):
            report.indexes_built = ensure_indexes(table)
            # Folds new rows into the indexes and compacts small fragments.
            table.optimize()
        # LanceDB holds the rows now; record what was published, so a failure before
        # this point simply republishes the same rows next time.
        with store.registered(con, "changed_hashes", changed.select(["memory_ref", "being_id", "row_hash"])):
            con.execute(
                "INSERT OR REPLACE INTO published_memories "
                "SELECT memory_ref, being_id, row_hash, ?::TIMESTAMP FROM changed_hashes",
                [now],
            )
        if removed:
            con.execute("DELETE FROM published_memories WHERE list_contains(?, memory_ref)", [removed])
        if table is not None:
            report.rows = table.count_rows()
            report.version = table.version
    finally:
        con.execute("DROP TABLE IF EXISTS desired_memories")
    return report


def _to_lance(changed: pa.Table) -> pa.Table:
    vector = to_column(to_matrix(changed.column("vector")))
    return pa.table(
        {
            "memory_ref": changed.column("memory_ref").cast(pa.string()),
            "being_id": changed.column("being_id").cast(pa.string()),
            "kind": changed.column("kind").cast(pa.string()),
            "text": changed.column("text").cast(pa.string()),
            "feeling": changed.column("feeling").cast(pa.string()),
            "themes": changed.column("themes").cast(pa.list_(pa.string())),
            "status": changed.column("status").cast(pa.string()),
            "importance": changed.column("importance").cast(pa.float32()),
            "ts": changed.column("ts").cast(pa.timestamp("us")),
            "cluster_id": changed.column("cluster_id").cast(pa.string()),
            "source_episode_ids": changed.column("source_episode_ids").cast(pa.list_(pa.string())),
            "pinned": changed.column("pinned").cast(pa.bool_()),
            "trigger": changed.column("trigger").cast(pa.string()),
            "when_dates": changed.column("when_dates").cast(pa.list_(pa.string())),
            "decay_score": changed.column("decay_score").cast(pa.float32()),
            "vector": vector,
        }
    )
