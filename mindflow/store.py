"""The DuckDB stores: schema, idempotent migrations and a lock-aware connection."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
from filelock import FileLock, Timeout

from mindflow.config import DEFAULT_PRECISION, PRECISION_PIN
from mindflow.errors import MindflowError

# Each migration is applied once, in order, inside a transaction; the applied
# version is recorded in schema_version, so running migrate() again is a no-op.
# VADSNT, the Being design's emotion (mindflow.prompts.extraction.EMOTION_KEYS).
_EMOTION = (
    "STRUCT(valence DOUBLE, arousal DOUBLE, dominance DOUBLE, safety DOUBLE, novelty DOUBLE, trust DOUBLE)"
)
_OLD_EMOTION = (
    "CASE WHEN emotion IS NULL OR len(emotion) <> 6 THEN NULL ELSE {'valence': emotion[1], "
    "'arousal': emotion[2], 'dominance': emotion[3], 'safety': NULL::DOUBLE, 'novelty': emotion[5], "
    "'trust': NULL::DOUBLE} END"
)
# A node's scene as the design writes it (since migration 9).
SCENE_TYPE = (
    'STRUCT(action VARCHAR, actors VARCHAR[], "when" STRUCT(date VARCHAR, action VARCHAR)[], '
    "setting VARCHAR, dialogue VARCHAR[], sensory VARCHAR[])"
)

MIGRATIONS: list[tuple[int, str, list[str]]] = [
    (
        1,
        "initial stores",
        [
            """
            CREATE TABLE IF NOT EXISTS episodes (
                being_id VARCHAR NOT NULL,
                episode_id VARCHAR NOT NULL,
                session_id VARCHAR,
                ts TIMESTAMP NOT NULL,
                day DATE NOT NULL,
                speaker VARCHAR,
                role VARCHAR,
                text VARCHAR NOT NULL,
                kind VARCHAR NOT NULL DEFAULT 'message',
                confidence DOUBLE,
                tags VARCHAR[],
                importance DOUBLE,
                source VARCHAR,
                source_ref VARCHAR,
                format VARCHAR,
                trigger VARCHAR,
                ingested_at TIMESTAMP NOT NULL,
                PRIMARY KEY (being_id, episode_id)
            )
            """,
            """
            CREATE TABLE IF NOT EXISTS scene_notes (
                scene_id VARCHAR PRIMARY KEY,
                being_id VARCHAR NOT NULL,
                episode_ids VARCHAR[] NOT NULL,
                action VARCHAR,
                actors VARCHAR[],
                "when" STRUCT(date VARCHAR, action VARCHAR)[],
                setting VARCHAR,
                dialogue VARCHAR,
                sensory VARCHAR,
                feeling VARCHAR,
                importance DOUBLE,
                themes VARCHAR[],
                emotion DOUBLE[],
                note_status VARCHAR NOT NULL DEFAULT 'ok',
                raw VARCHAR,
                extractor VARCHAR NOT NULL DEFAULT 'mechanical',
                created_at TIMESTAMP NOT NULL
            )
            """,
            """
            CREATE TABLE IF NOT EXISTS nodes (
                node_id VARCHAR PRIMARY KEY,
                being_id VARCHAR NOT NULL,
                scene_id VARCHAR,
                scene STRUCT(
                    action VARCHAR, actors VARCHAR[], "when" STRUCT(date VARCHAR, action VARCHAR)[],
                    setting VARCHAR, dialogue VARCHAR, sensory VARCHAR
                ),
                feeling VARCHAR,
                importance DOUBLE NOT NULL,
                cluster_id VARCHAR,
                themes VARCHAR[],
                emotion DOUBLE[],
                kind VARCHAR NOT NULL DEFAULT 'message',
                trigger VARCHAR,
                session_count INTEGER NOT NULL DEFAULT 0,
                status VARCHAR NOT NULL DEFAULT 'active',
                fresh BOOLEAN NOT NULL DEFAULT TRUE,
                pinned BOOLEAN NOT NULL DEFAULT FALSE,
                reactivation_count INTEGER NOT NULL DEFAULT 0,
                last_activated TIMESTAMP,
                source_episode_ids VARCHAR[] NOT NULL,
                episode_ts TIMESTAMP,
                vector FLOAT[],
                created_at TIMESTAMP NOT NULL,
                updated_at TIMESTAMP NOT NULL
            )
            """,
            """
            CREATE TABLE IF NOT EXISTS clusters (
                cluster_id VARCHAR PRIMARY KEY,
                being_id VARCHAR NOT NULL,
                label VARCHAR NOT NULL,
                parent_id VARCHAR,
                is_parent BOOLEAN NOT NULL DEFAULT FALSE,
                vector FLOAT[],
                created_at TIMESTAMP NOT NULL,
                updated_at TIMESTAMP NOT NULL
            )
            """,
            """
            CREATE TABLE IF NOT EXISTS facts (
                fact_id VARCHAR PRIMARY KEY,
                being_id VARCHAR NOT NULL,
                entity VARCHAR NOT NULL,
                key VARCHAR NOT NULL,
                value VARCHAR NOT NULL,
                category VARCHAR,
                confidence DOUBLE,
                activation DOUBLE NOT NULL DEFAULT 1.0,
                importance DOUBLE NOT NULL DEFAULT 0.5,
                access_count INTEGER NOT NULL DEFAULT 1,
                source_episode_ids VARCHAR[],
                valid_at TIMESTAMP,
                invalid_at TIMESTAMP,
                created_at TIMESTAMP NOT NULL
            )
            """,
            """
            CREATE TABLE IF NOT EXISTS relations (
                relation_id VARCHAR PRIMARY KEY,
                being_id VARCHAR NOT NULL,
                subject VARCHAR NOT NULL,
                predicate VARCHAR NOT NULL,
                object VARCHAR NOT NULL,
                weight DOUBLE NOT NULL DEFAULT 1.0,
                source_episode_ids VARCHAR[],
                valid_at TIMESTAMP,
                invalid_at TIMESTAMP,
                created_at TIMESTAMP NOT NULL
            )
            """,
            """
            CREATE TABLE IF NOT EXISTS aliases (
                being_id VARCHAR NOT NULL,
                alias VARCHAR NOT NULL,
                entity VARCHAR NOT NULL,
                created_at TIMESTAMP NOT NULL,
                PRIMARY KEY (being_id, alias)
            )
            """,
            """
            CREATE TABLE IF NOT EXISTS co_occurrences (
                being_id VARCHAR NOT NULL,
                fact_a VARCHAR NOT NULL,
                fact_b VARCHAR NOT NULL,
                weight DOUBLE NOT NULL DEFAULT 1.0,
                PRIMARY KEY (being_id, fact_a, fact_b)
            )
            """,
            """
            CREATE TABLE IF NOT EXISTS decay_scores (
                memory_ref VARCHAR PRIMARY KEY,
                being_id VARCHAR NOT NULL,
                store VARCHAR NOT NULL,
                kind VARCHAR,
                base_relevance DOUBLE NOT NULL,
                created_at TIMESTAMP NOT NULL,
                last_accessed TIMESTAMP NOT NULL,
                access_count INTEGER NOT NULL DEFAULT 1,
                type_weight DOUBLE NOT NULL,
                score DOUBLE,
                status VARCHAR NOT NULL DEFAULT 'active',
                pinned BOOLEAN NOT NULL DEFAULT FALSE,
                retention_from TIMESTAMP,
                retention_days INTEGER,
                as_of TIMESTAMP
            )
            """,
            """
            CREATE TABLE IF NOT EXISTS embedding_cache (
                model VARCHAR NOT NULL,
                text_sha256 VARCHAR NOT NULL,
                vector FLOAT[] NOT NULL,
                created_at TIMESTAMP NOT NULL,
                PRIMARY KEY (model, text_sha256)
            )
            """,
            """
            CREATE TABLE IF NOT EXISTS audit_log (
                audit_id VARCHAR PRIMARY KEY,
                ts TIMESTAMP NOT NULL,
                action VARCHAR NOT NULL,
                target VARCHAR NOT NULL,
                actor VARCHAR NOT NULL,
                approval VARCHAR,
                summary VARCHAR,
                run_id VARCHAR
            )
            """,
            """
            CREATE TABLE IF NOT EXISTS history (
                history_id VARCHAR PRIMARY KEY,
                ts TIMESTAMP NOT NULL,
                memory_ref VARCHAR NOT NULL,
                being_id VARCHAR NOT NULL,
                operation VARCHAR NOT NULL,
                before JSON,
                after JSON,
                run_id VARCHAR
            )
            """,
            """
            CREATE TABLE IF NOT EXISTS inbox_files (
                being_id VARCHAR NOT NULL,
                file_name VARCHAR NOT NULL,
                sha256 VARCHAR NOT NULL,
                format VARCHAR NOT NULL,
                first_day DATE,
                last_day DATE,
                episodes INTEGER NOT NULL,
                quarantined INTEGER NOT NULL,
                heartbeats INTEGER NOT NULL,
                ingested_at TIMESTAMP NOT NULL,
                PRIMARY KEY (being_id, sha256)
            )
            """,
            """
            CREATE TABLE IF NOT EXISTS published_memories (
                memory_ref VARCHAR PRIMARY KEY,
                being_id VARCHAR NOT NULL,
                row_hash VARCHAR NOT NULL,
                published_at TIMESTAMP NOT NULL
            )
            """,
            "CREATE INDEX IF NOT EXISTS nodes_being ON nodes (being_id)",
            "CREATE INDEX IF NOT EXISTS clusters_being ON clusters (being_id)",
            "CREATE INDEX IF NOT EXISTS episodes_day ON episodes (day)",
        ],
    ),
    (
        2,
        "recall events",
        [
            # The recall events already applied, so a retried patrol folds each one once.
            """
            CREATE TABLE IF NOT EXISTS folded_events (
                event_id VARCHAR PRIMARY KEY,
                being_id VARCHAR NOT NULL,
                folded_at TIMESTAMP NOT NULL
            )
            """,
        ],
    ),
    (
        3,
        "published graph",
        [
            # A hash of each fact, relation and alias row published to LanceDB, so
            # publishing the graph writes only what changed.
            """
            CREATE TABLE IF NOT EXISTS published_graph (
                kind VARCHAR NOT NULL,
                ref VARCHAR NOT NULL,
                being_id VARCHAR NOT NULL,
                row_hash VARCHAR NOT NULL,
                published_at TIMESTAMP NOT NULL,
                PRIMARY KEY (kind, ref)
            )
            """,
        ],
    ),
    (
        4,
        "ebook documents",
        [
            # One row per document of the ebook folder: the content hash and the chunking
            # that indexed it, so a reindex skips unchanged documents without reading them.
            """
            CREATE TABLE IF NOT EXISTS ebook_documents (
                doc_id VARCHAR PRIMARY KEY,
                size BIGINT NOT NULL,
                mtime_ns BIGINT NOT NULL,
                sha256 VARCHAR NOT NULL,
                index_key VARCHAR NOT NULL,
                format VARCHAR,
                title VARCHAR,
                author VARCHAR,
                chapters INTEGER NOT NULL DEFAULT 0,
                chunks INTEGER NOT NULL DEFAULT 0,
                status VARCHAR NOT NULL,
                reason VARCHAR,
                indexed_at TIMESTAMP NOT NULL
            )
            """,
        ],
    ),
    (
        5,
        "critical file checksums",
        [
            # The approved checksum of each critical file (SOUL.md, IDENTITY.md, configuration)
            # and the content an ALERT was last logged for, where no workspace edit reaches them;
            # workspace/meta/integrity.json is a copy (mindflow/audit/record.py).
            """
            CREATE TABLE IF NOT EXISTS integrity (
                key VARCHAR PRIMARY KEY,
                sha256 VARCHAR,
                alerted VARCHAR,
                recorded_at TIMESTAMP NOT NULL,
                audit_id VARCHAR
            )
            """,
        ],
    ),
    (
        6,
        "marks: forget and pin",
        [
            # The marks (loop/<being>/marks.jsonl) already applied, so a retried run folds each once.
            """
            CREATE TABLE IF NOT EXISTS folded_marks (
                mark_id VARCHAR PRIMARY KEY,
                being_id VARCHAR NOT NULL,
                op VARCHAR NOT NULL,
                folded_at TIMESTAMP NOT NULL
            )
            """,
            # When a person forgot it: archived, and kept archived by decay and the patrol
            # until restored.
            "ALTER TABLE nodes ADD COLUMN IF NOT EXISTS forgotten_at TIMESTAMP",
            "ALTER TABLE decay_scores ADD COLUMN IF NOT EXISTS forgotten_at TIMESTAMP",
            "ALTER TABLE facts ADD COLUMN IF NOT EXISTS forgotten_at TIMESTAMP",
            "ALTER TABLE relations ADD COLUMN IF NOT EXISTS forgotten_at TIMESTAMP",
        ],
    ),
    (
        7,
        "memory history: actor, formed rows, published history",
        [
            # Who made the change: form, patrol, decay, recall (reinforcement), extraction, user or agent.
            # Writers name their columns (INSERT INTO history (...) ...): a positional insert
            # of the eight earlier columns fails from here on.
            "ALTER TABLE history ADD COLUMN IF NOT EXISTS actor VARCHAR",
            """
            UPDATE history SET actor = CASE
                WHEN operation IN ('dying', 'revived', 'dead', 'merged', 'absorbed', 'moved') THEN 'patrol'
                WHEN operation = 'superseded' THEN 'extraction'
                WHEN operation = 'reinforced' THEN 'recall'
                WHEN operation = 'decay_status' THEN 'decay'
                ELSE 'user' END
            WHERE actor IS NULL
            """,
            # Memories formed before history had a `formed` row get one, at their creation.
            """
            INSERT INTO history
                (history_id, ts, memory_ref, being_id, operation, before, after, run_id, actor)
            SELECT 'h-' || uuid()::VARCHAR, n.created_at, n.node_id, n.being_id, 'formed', NULL,
                   to_json({'status': 'active', 'cluster_id': n.cluster_id, 'importance': n.importance}),
                   NULL, 'patrol'
            FROM nodes n
            WHERE NOT EXISTS (
                SELECT 1 FROM history h WHERE h.memory_ref = n.node_id AND h.operation = 'formed')
            """,
            # The history rows already in LanceDB `memory_history`, each with its place in the order
            # rows were written (rows of one run share a time); deleting a row here makes the next
            # publish write it again (after a rewrite of the row).
            """
            CREATE TABLE IF NOT EXISTS published_history (
                history_id VARCHAR PRIMARY KEY,
                being_id VARCHAR NOT NULL,
                seq BIGINT NOT NULL,
                published_at TIMESTAMP NOT NULL
            )
            """,
        ],
    ),
    (
        8,
        "patrol revival by recall: absorbed_into, died_reactivations",
        [
            # The survivor a ❹ merge folded this node into: an absorbed node never revives on
            # its own, and a recall of it reinforces the survivor.
            "ALTER TABLE nodes ADD COLUMN IF NOT EXISTS absorbed_into VARCHAR",
            # reactivation_count when the node died: ❺ revives a dead node only once recalls
            # raised the count past it (the seed's revival is driven by recall).
            "ALTER TABLE nodes ADD COLUMN IF NOT EXISTS died_reactivations INTEGER",
            """
            UPDATE nodes SET absorbed_into = h.after->>'into'
            FROM (SELECT memory_ref, arg_max(after, ts) AS after FROM history
                  WHERE operation = 'merged' GROUP BY memory_ref) h
            WHERE nodes.node_id = h.memory_ref AND nodes.status = 'dead' AND nodes.absorbed_into IS NULL
            """,
            "UPDATE nodes SET died_reactivations = reactivation_count "
            "WHERE status = 'dead' AND died_reactivations IS NULL",
        ],
    ),
    (
        9,
        "scene shape: dialogue and sensory lists, VADSNT emotion with named keys",
        [
            # The Being design's scene: dialogue and sensory are lists of strings; the emotion is
            # VADSNT (valence, arousal, dominance, safety, novelty, trust). Lists stored before
            # held surprise and tension in places 4 and 6: those two are not safety and trust.
            """
            ALTER TABLE scene_notes ALTER dialogue TYPE VARCHAR[]
            USING CASE WHEN dialogue IS NULL THEN NULL ELSE [dialogue] END
            """,
            """
            ALTER TABLE scene_notes ALTER sensory TYPE VARCHAR[]
            USING CASE WHEN sensory IS NULL THEN NULL ELSE [sensory] END
            """,
            f"ALTER TABLE scene_notes ALTER emotion TYPE {_EMOTION} USING {_OLD_EMOTION}",
            # DuckDB alters no column of a table with an index: nodes_being is built again after.
            "DROP INDEX IF EXISTS nodes_being",
            f"ALTER TABLE nodes ALTER emotion TYPE {_EMOTION} USING {_OLD_EMOTION}",
            f"""
            ALTER TABLE nodes ALTER scene TYPE {SCENE_TYPE}
            USING CASE WHEN scene IS NULL THEN NULL ELSE {{
                'action': scene.action, 'actors': scene.actors, 'when': scene."when",
                'setting': scene.setting,
                'dialogue': CASE WHEN scene.dialogue IS NULL THEN NULL ELSE [scene.dialogue] END,
                'sensory': CASE WHEN scene.sensory IS NULL THEN NULL ELSE [scene.sensory] END}} END
            """,
            "CREATE INDEX IF NOT EXISTS nodes_being ON nodes (being_id)",
        ],
    ),
    (
        10,
        "fact activation: last_accessed",
        [
            # When the fact was last returned by the read API or seen again by extraction:
            # activation decays from it (mindflow.fact_activation).
            "ALTER TABLE facts ADD COLUMN IF NOT EXISTS last_accessed TIMESTAMP",
            "UPDATE facts SET last_accessed = created_at WHERE last_accessed IS NULL",
        ],
    ),
    (
        11,
        "journal cycles",
        [
            # When each being's diary and think.md last took in a cycle: the next journal reads
            # the scenes formed and the patrol's changes since then.
            """
            CREATE TABLE IF NOT EXISTS journal_cycles (
                being_id VARCHAR PRIMARY KEY,
                journaled_at TIMESTAMP NOT NULL
            )
            """,
        ],
    ),
    (
        12,
        "memory file index",
        [
            # What the LanceDB table `journal_chunks` was built from, per being and file: an
            # unchanged file is skipped without being read (mindflow.journal_index).
            """
            CREATE TABLE IF NOT EXISTS journal_files (
                being_id VARCHAR NOT NULL,
                path VARCHAR NOT NULL,
                size BIGINT NOT NULL,
                mtime_ns BIGINT NOT NULL,
                sha256 VARCHAR NOT NULL,
                index_key VARCHAR NOT NULL,
                chunks INTEGER NOT NULL,
                indexed_at TIMESTAMP NOT NULL,
                PRIMARY KEY (being_id, path)
            )
            """,
        ],
    ),
    (
        13,
        "reflection cycles and the procedural store",
        [
            # One row per reflection cycle: the survey of the next one starts where it ended.
            """
            CREATE TABLE IF NOT EXISTS reflections (
                reflection_id VARCHAR PRIMARY KEY,
                being_id VARCHAR NOT NULL,
                number INTEGER NOT NULL,
                mode VARCHAR NOT NULL,
                trigger VARCHAR NOT NULL,
                started_at TIMESTAMP NOT NULL,
                finished_at TIMESTAMP,
                proposals INTEGER NOT NULL DEFAULT 0,
                applied INTEGER NOT NULL DEFAULT 0,
                output_tokens INTEGER NOT NULL DEFAULT 0,
                run_id VARCHAR
            )
            """,
            # Procedures: one row per version; a new version closes the one before (superseded_at),
            # never overwrites it. procedure_ref names the procedure across its versions.
            """
            CREATE TABLE IF NOT EXISTS procedures (
                procedure_id VARCHAR PRIMARY KEY,
                procedure_ref VARCHAR NOT NULL,
                being_id VARCHAR NOT NULL,
                name VARCHAR NOT NULL,
                trigger VARCHAR NOT NULL,
                steps VARCHAR[] NOT NULL,
                notes VARCHAR,
                learned_from VARCHAR[],
                confidence DOUBLE NOT NULL,
                version INTEGER NOT NULL,
                source VARCHAR NOT NULL,
                created_at TIMESTAMP NOT NULL,
                updated_at TIMESTAMP NOT NULL,
                superseded_at TIMESTAMP
            )
            """,
        ],
    ),
    (
        14,
        "embedding cache keys name the precision",
        [
            # A local model's vectors were all sentence-transformers float32 until now; the key
            # names that (Embedder.cache_key), so a quantised encoder would get
            # its own key instead of reading these. OpenAI models keep their name.
            """
            UPDATE embedding_cache SET model = model || '@fp32'
            WHERE NOT starts_with(model, 'openai:') AND NOT contains(model, '@')
            """,
        ],
    ),
    (
        15,
        "new homes embed with int8 weights; older homes are pinned to fp32",
        # The pin is a file (store._pin_precision, written before this commits), not a row:
        # the read API embeds queries and never opens DuckDB.
        [],
    ),
    (
        16,
        "scene keyphrases",
        [
            # An extraction model's phrases for a scene, published as full-text keys of its
            # memories (mindflow/recall/keys.py); mechanical scenes have none.
            "ALTER TABLE scene_notes ADD COLUMN IF NOT EXISTS keyphrases VARCHAR[]",
        ],
    ),
    (
        17,
        "history without a primary key",
        [
            # Its ids are fresh uuids, so the key checked nothing, but its index on random
            # strings grew with every change a memory ever had: at 3 million rows ~500 MB of the
            # file, each checkpoint ~5x slower and a 3,000-row insert ~17x (measured on such a
            # table alone, not by bench_decay.py; the README tells both).
            # DuckDB has no ALTER TABLE DROP CONSTRAINT: the table is copied, in this transaction.
            """
            CREATE TABLE history_unkeyed (
                history_id VARCHAR NOT NULL,
                ts TIMESTAMP NOT NULL,
                memory_ref VARCHAR NOT NULL,
                being_id VARCHAR NOT NULL,
                operation VARCHAR NOT NULL,
                before JSON,
                after JSON,
                run_id VARCHAR,
                actor VARCHAR
            )
            """,
            "INSERT INTO history_unkeyed BY NAME SELECT * FROM history ORDER BY rowid",
            "DROP TABLE history",
            "ALTER TABLE history_unkeyed RENAME TO history",
        ],
    ),
    (
        18,
        "published history without a primary key",
        [
            # One row per history row published, keyed the same way and grown as fast, for the
            # same nothing: a publish inserts only ids it has just found missing here.
            """
            CREATE TABLE published_history_unkeyed (
                history_id VARCHAR NOT NULL,
                being_id VARCHAR NOT NULL,
                seq BIGINT NOT NULL,
                published_at TIMESTAMP NOT NULL
            )
            """,
            "INSERT INTO published_history_unkeyed BY NAME SELECT * FROM published_history ORDER BY rowid",
            "DROP TABLE published_history",
            "ALTER TABLE published_history_unkeyed RENAME TO published_history",
        ],
    ),
    (
        19,
        "events files each fold has read",
        [
            # The events files a fold has read, as they were (inode, size, mtime): the next reads
            # only new and changed ones. `fold` is the events' kind ('recall' for the patrol's fold of
            # one being, 'fact_access' for decay's of every being, under being_id '').
            """
            CREATE TABLE IF NOT EXISTS folded_event_files (
                fold VARCHAR NOT NULL,
                being_id VARCHAR NOT NULL,
                file VARCHAR NOT NULL,
                inode BIGINT NOT NULL,
                size BIGINT NOT NULL,
                modified_ns BIGINT NOT NULL,
                PRIMARY KEY (fold, being_id, file)
            )
            """,
        ],
    ),
    (
        20,
        "folded events without a primary key",
        [
            # One row per recall event ever folded (a million a year for ten beings recalling
            # ~270 times a day each). A fold inserts only the ids its anti-join against this
            # table found missing, in the same transaction, so the key checked nothing; its index
            # on random ids cost, at 3 million rows, 211 MB of the file (267 against 56 MB) and
            # each night's insert of 2,740 ids 110 against 2.4 ms, its checkpoint 113 against
            # 2.7 ms (measured on such a table alone; the README tells it).
            """
            CREATE TABLE folded_events_unkeyed (
                event_id VARCHAR NOT NULL,
                being_id VARCHAR NOT NULL,
                folded_at TIMESTAMP NOT NULL
            )
            """,
            "INSERT INTO folded_events_unkeyed BY NAME SELECT * FROM folded_events ORDER BY rowid",
            "DROP TABLE folded_events",
            "ALTER TABLE folded_events_unkeyed RENAME TO folded_events",
        ],
    ),
    (
        21,
        "patrol sessions",
        [
            # The patrol sessions each being's session counts (❷) have advanced by, one row per
            # being and run (a re-execution's root run): a retried step or a re-executed run of
            # the same session finds its row and advances nothing again.
            """
            CREATE TABLE IF NOT EXISTS patrol_sessions (
                being_id VARCHAR NOT NULL,
                run_id VARCHAR NOT NULL,
                advanced BIGINT NOT NULL,
                counted_at TIMESTAMP NOT NULL,
                PRIMARY KEY (being_id, run_id)
            )
            """,
        ],
    ),
    (
        22,
        "ingested inbox files keyed by name",
        [
            # A row stands for one file in `.done`, so its name is its key. Keyed by the content's
            # sha256, two files a permanent forget blanked to the same bytes (each the only line
            # of its file, as an agent posting one episode at a time writes them) collided, and
            # every later forget run failed on the second. Landing the same content twice is
            # caught by `_free_name`, which leaves the copy out of `.done` and out of this table.
            """
            CREATE TABLE inbox_files_by_name (
                being_id VARCHAR NOT NULL,
                file_name VARCHAR NOT NULL,
                sha256 VARCHAR NOT NULL,
                format VARCHAR NOT NULL,
                first_day DATE,
                last_day DATE,
                episodes INTEGER NOT NULL,
                quarantined INTEGER NOT NULL,
                heartbeats INTEGER NOT NULL,
                ingested_at TIMESTAMP NOT NULL,
                PRIMARY KEY (being_id, file_name)
            )
            """,
            # A name recorded twice (a `.done` file removed by hand and its name taken again)
            # keeps its latest row: the file under that name is the one ingested last.
            "INSERT INTO inbox_files_by_name BY NAME SELECT * FROM inbox_files "
            "QUALIFY row_number() OVER (PARTITION BY being_id, file_name ORDER BY ingested_at DESC) = 1",
            "DROP TABLE inbox_files",
            "ALTER TABLE inbox_files_by_name RENAME TO inbox_files",
        ],
    ),
]

SCHEMA_VERSION = MIGRATIONS[-1][0]
PIN_VERSION = 15


def _pin_precision(con: duckdb.DuckDBPyConnection, precision: str) -> None:
    """Pin the home's embedding precision (config.PRECISION_PIN): the default for a new home,
    fp32 for one from before int8 became the default (its memories' vectors are float32, and
    int8 queries against them would score other neighbours). A pin already there stays;
    MINDFLOW_EMBEDDING_PRECISION overrides any pin.
    """
    from mindflow.files import atomic_write

    row = con.execute(
        "SELECT path FROM duckdb_databases() WHERE database_name = current_database()"
    ).fetchone()
    if not row or not row[0]:  # in memory: no home
        return
    pin = Path(row[0]).resolve().parent / PRECISION_PIN
    if not pin.exists():
        atomic_write(pin, f"{precision}\n".encode())


# An episode (alias `e`) that no usable scene note covers yet: none, or only [PARSE_FAILED]
# ones. The patrol gives such episodes mechanical scenes, extraction sends them to a model.
WITHOUT_SCENE = """NOT EXISTS (
    SELECT 1 FROM scene_notes s
    WHERE s.being_id = e.being_id AND s.note_status = 'ok' AND list_contains(s.episode_ids, e.episode_id))"""

TABLES = (
    "episodes",
    "scene_notes",
    "nodes",
    "clusters",
    "facts",
    "relations",
    "aliases",
    "co_occurrences",
    "decay_scores",
    "embedding_cache",
    "audit_log",
    "history",
    "reflections",
    "procedures",
)


def migrate(con: duckdb.DuckDBPyConnection, *, pin: bool = True) -> int:
    """Bring the schema to SCHEMA_VERSION; returns the number of migrations applied.

    `pin=False` for a file that is not a home's store (a being's checkout): no precision pin
    is written beside it."""
    con.execute(
        "CREATE TABLE IF NOT EXISTS schema_version ("
        " version INTEGER PRIMARY KEY, description VARCHAR, applied_at TIMESTAMP)"
    )
    done = {row[0] for row in con.execute("SELECT version FROM schema_version").fetchall()}
    if PIN_VERSION not in done and pin:
        # Before any migration commits: a kill in between leaves the pin, and the rerun keeps it.
        _pin_precision(con, "fp32" if done else DEFAULT_PRECISION)
    applied = 0
    for version, description, statements in MIGRATIONS:
        if version in done:
            continue
        with transaction(con):
            for statement in statements:
                con.execute(statement)
            con.execute("INSERT INTO schema_version VALUES (?, ?, now()::TIMESTAMP)", [version, description])
        applied += 1
    return applied


@contextlib.contextmanager
def connect(
    path: Path, *, read_only: bool = False, lock_timeout_s: float = 600.0
) -> Iterator[duckdb.DuckDBPyConnection]:
    """Open the DuckDB file, waiting for another mindflow process that holds it.

    DuckDB lets one process write a file and refuses a second process outright,
    so writers take an exclusive file lock first: a second job waits its turn
    instead of failing. The Dagster pool `duckdb` queues steps the same way
    inside one instance; the lock also covers the CLI and tests.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(path) + ".lock")
    if not read_only:
        try:
            lock.acquire(timeout=lock_timeout_s)
        except Timeout as exc:
            raise MindflowError(
                f"{path} is held by another mindflow job for more than {lock_timeout_s:.0f} s; "
                "wait for it to finish (see the Dagster UI) and try again"
            ) from exc
    try:
        con = _open(path, read_only=read_only, timeout_s=0 if not read_only else 10.0)
        try:
            if not read_only:
                migrate(con)
            yield con
        finally:
            con.close()
    finally:
        if not read_only:
            lock.release()


def _open(path: Path, *, read_only: bool, timeout_s: float) -> duckdb.DuckDBPyConnection:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only)
        except duckdb.IOException as exc:
            if "lock" not in str(exc).lower() or time.monotonic() >= deadline:
                if read_only and "lock" in str(exc).lower():
                    raise MindflowError(
                        f"{path} is being written by a running job; try again when it finishes"
                    ) from exc
                raise
            time.sleep(0.2)


def table_counts(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    return {t: con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0] for t in TABLES}


@contextlib.contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """The block's statements commit together, or none does: rolled back on any exception
    (a KeyboardInterrupt included), which then propagates."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield
    except BaseException:
        con.execute("ROLLBACK")
        raise
    # Outside the try: a COMMIT that fails (a key another transaction committed first) has
    # already ended the transaction, and a ROLLBACK after it would raise "no transaction is
    # active" in place of the commit's own error.
    con.execute("COMMIT")


@contextlib.contextmanager
def registered(con: duckdb.DuckDBPyConnection, name: str, table) -> Iterator[None]:
    """Expose an Arrow table to SQL as `name` for the duration of the block."""
    # DuckDB refuses to register while an earlier result on the connection is only
    # partly fetched (a caller's fetchone()); a new statement completes that result.
    con.execute("SELECT 1").fetchall()
    con.register(name, table)
    try:
        yield
    finally:
        con.unregister(name)
