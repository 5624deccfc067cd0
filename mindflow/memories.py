"""Publishing memories: every memory from DuckDB to LanceDB `memories`, and its history to `memory_history`.

Recall serves active and dying memories; search_memory and recall_memory reach into
dormant and dead ones too (reaching a dead memory reinforces it twice as much).
Archived memories (archived by decay, or forgotten) are published as well, with status
`archived`, so that reading a memory, listing a being's memories and their history see
them; every recall path filters by an explicit list of statuses that leaves them out
(`mindflow.recall.primitives.RECALLABLE` / `SEARCHABLE`).

Only rows whose content changed are written: a LanceDB update un-indexes the rows it
touches, so rewriting every memory nightly would keep the indexes cold. That is why no
column changes every night for every row (no session count, no updated_at, the decay
score rounded to 0.1): `row_hash` stays what it was while nothing a reader sees changed.
History rows are appended once each (`published_history` lists them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import duckdb
import numpy as np
import pyarrow as pa

from mindflow import lance, memory_history, store
from mindflow.models import utcnow
from mindflow.vectors import to_column, to_matrix

TABLE = "memories"
# Scalar indexes turn the being/status prefilter of every recall, its context windows
# (`ts`) and its reads by ref into index lookups instead of scans: recall at 10,000
# memories takes about half the time with them (bench/bench_latency.py).
SCALAR_INDEXES = {"being_id": "BITMAP", "status": "BITMAP", "memory_ref": "BTREE", "ts": "BTREE"}
# Below this many rows a flat scan of the vectors is fast and exact; above it an
# IVF_FLAT index reads the nearest partitions instead of every vector. IVF_FLAT keeps
# the exact vectors: at 100,000 memories it finds 83% of the exact 30 nearest in about
# the time IVF_HNSW_SQ finds 62% (bench/bench_latency.py data).
VECTOR_INDEX_MIN_ROWS = 50_000

# Every memory, with what reading it shows: the scene, statuses, times. `status` is what
# recall filters on (archived, else dead, else dormant by decay, else the patrol's status);
# `decay_status` is decay's own (active, fading, dormant, archived). The decay score is
# rounded so that its daily drift does not rewrite every row; the hash covers everything
# published except the vector (which follows from the text).
_DESIRED_SQL = """
    WITH memory_keys AS ({memory_keys}), m AS (
        SELECT n.node_id AS memory_ref, n.being_id, n.kind,
               n.scene.action AS text, {search_text} AS search_text, n.feeling, n.themes,
               CASE WHEN n.status = 'archived' OR d.status = 'archived' THEN 'archived'
                    WHEN n.status = 'dead' THEN 'dead' WHEN d.status = 'dormant' THEN 'dormant'
                    ELSE n.status END AS status,
               n.importance, n.episode_ts AS ts, n.cluster_id, n.source_episode_ids,
               e.session_id, n.pinned, n.trigger,
               [w.date for w in n.scene."when"] AS when_dates,
               [w.action for w in n.scene."when"] AS when_actions,
               n.scene.actors AS actors, n.scene.setting AS setting, n.scene.dialogue AS dialogue,
               n.scene.sensory AS sensory,
               round(coalesce(d.score, 1.0), 1) AS decay_score,
               coalesce(d.status, 'active') AS decay_status,
               n.created_at, n.last_activated, n.reactivation_count
        FROM nodes n LEFT JOIN decay_scores d ON d.memory_ref = n.node_id
        LEFT JOIN memory_keys k ON k.node_id = n.node_id
        LEFT JOIN episodes e ON e.being_id = n.being_id AND e.episode_id = n.source_episode_ids[1]
    )
    SELECT *, md5(to_json(m)::VARCHAR) AS row_hash FROM m
"""
# What `_to_lance` writes; a table with other columns was written by an earlier version.
COLUMNS = (
    "memory_ref", "being_id", "kind", "text", "search_text", "feeling", "themes", "status", "importance",
    "ts", "cluster_id", "source_episode_ids", "session_id", "pinned", "trigger", "when_dates", "when_actions",
    "actors", "setting", "dialogue", "sensory", "decay_score", "decay_status", "created_at", "last_activated",
    "reactivation_count", "vector",
)  # fmt: skip
# The column the full-text index covers: the text, then the memory's keys (mindflow/recall/keys.py).
FULLTEXT_COLUMN = "search_text"


def desired_sql(fact_keys: bool = True, keyphrase_keys: bool = True) -> str:
    """Every memory as it should be published, with its row hash."""
    from mindflow.recall import keys

    return _DESIRED_SQL.format(
        memory_keys=keys.keys_sql(facts=fact_keys, keyphrases=keyphrase_keys),
        search_text=keys.search_text_sql("n.scene.action", "k.keys"),
    )


@dataclass
class PublishReport:
    upserted: int = 0
    deleted: int = 0
    rows: int = 0
    version: int | None = None
    indexes_built: list[str] = field(default_factory=list)
    # The table had an earlier version's columns: it was written again from DuckDB.
    rebuilt: bool = False
    history: memory_history.HistoryReport = field(default_factory=lambda: memory_history.HistoryReport())


def ensure_indexes(table, vector_min_rows: int = VECTOR_INDEX_MIN_ROWS) -> list[str]:
    """Build the indexes recall needs that the table lacks; returns the columns indexed.

    Rows written later are folded into existing indexes by `optimize()`.
    """
    from lancedb.index import FTS, IvfFlat

    have = {column for index in table.list_indices() for column in index.columns}
    built = []
    # A table without `search_text` (written by hand, or before facts were keys) indexes its text.
    document = FULLTEXT_COLUMN if FULLTEXT_COLUMN in table.schema.names else "text"
    if document not in have:
        table.create_index(document, config=FTS(), replace=True)
        built.append(document)
    built += lance.ensure_scalar_indexes(table, SCALAR_INDEXES)
    rows = table.count_rows()
    if "vector" not in have and rows >= vector_min_rows:
        partitions = max(1, int(np.sqrt(rows) / 6))
        table.create_index(
            "vector", config=IvfFlat(distance_type="cosine", num_partitions=partitions), replace=True
        )
        built.append("vector")
    return built


def desired_refs_sql() -> str:
    """(memory_ref, being_id) of every memory `publish` writes: one per node, without building
    the rows (their hash and fact keys)."""
    return "SELECT node_id AS memory_ref, being_id FROM nodes"


def open_current(con: duckdb.DuckDBPyConnection, db):
    """The `memories` table, or None; a table with an earlier version's columns is dropped and
    `published_memories` cleared, so the publish that follows writes every memory again."""
    table = lance.open_table(db, TABLE)
    if table is None:
        # Without a table nothing is published, whatever `published_memories` says (a process
        # killed between the drop below and its clearing, or a table removed by hand).
        con.execute("DELETE FROM published_memories")
        return None, False
    # Before migration 9, dialogue and sensory were one string each.
    if tuple(table.schema.names) == COLUMNS and pa.types.is_list(table.schema.field("dialogue").type):
        return table, False
    con.execute("DELETE FROM published_memories")
    db.drop_table(TABLE)
    return None, True


def publish(
    con: duckdb.DuckDBPyConnection,
    db,
    now: datetime | None = None,
    fact_keys: bool = True,
    keyphrase_keys: bool = True,
) -> PublishReport:
    """Bring LanceDB `memories` and `memory_history` in line with DuckDB, writing only what changed;
    with `fact_keys` and `keyphrase_keys`, each memory's facts and its scenes' keyphrases are
    full-text keys of it (mindflow/recall/keys.py)."""
    now = now or utcnow()
    report = PublishReport()
    table, report.rebuilt = open_current(con, db)
    con.execute(f"CREATE OR REPLACE TEMP TABLE desired_memories AS {desired_sql(fact_keys, keyphrase_keys)}")
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
        if changed.num_rows:
            table = lance.upsert(db, TABLE, table, _to_lance(changed), "memory_ref")
            report.upserted = changed.num_rows
        if table is not None and removed:
            report.deleted = lance.delete_keys(table, "memory_ref", removed)
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
    report.history = memory_history.publish(con, db, now)
    return report


def _to_lance(changed: pa.Table) -> pa.Table:
    vector = to_column(to_matrix(changed.column("vector")))
    strings, stamp = pa.list_(pa.string()), pa.timestamp("us")
    types = {
        "themes": strings, "source_episode_ids": strings, "when_dates": strings, "when_actions": strings,
        "actors": strings, "dialogue": strings, "sensory": strings, "importance": pa.float32(),
        "decay_score": pa.float32(), "ts": stamp,
        "created_at": stamp, "last_activated": stamp, "pinned": pa.bool_(), "reactivation_count": pa.int32(),
    }  # fmt: skip
    columns = {name: changed.column(name).cast(types.get(name, pa.string())) for name in COLUMNS[:-1]}
    return pa.table({**columns, "vector": vector})
