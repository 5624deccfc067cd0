"""The local Dagster instance's event log: Dagster's SQLite storage, without its per-event setup.

Dagster's `SqliteEventLogStorage` builds a new SQLAlchemy engine, and so a new connection
and a cold statement cache, for every event it records, and asks SQLite whether a table
exists for every asset event. An ingest over two years of daily partitions records ~720
materializations in one step: ~17 ms each that way. This subclass keeps one engine per
database (a few run databases, least recently used first, and the index), remembers
which tables exist, and stores a batch of partition materializations (Dagster hands
batches over when `DAGSTER_EVENT_BATCH_SIZE` is set, as `mindflow run` does) in one
transaction per database. The files, tables and rows are Dagster's own: the UI, the
daemon and a plain `SqliteEventLogStorage` read them unchanged.

`mindflow run` writes it into `$MINDFLOW_HOME/dagster/dagster.yaml`:

    event_log_storage:
      module: mindflow.dagster_storage
      class: MindflowSqliteEventLogStorage
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from dagster._config import Field, StringSource
from dagster._core.events import ASSET_EVENTS
from dagster._core.events.log import EventLogEntry
from dagster._core.storage.event_log.schema import SqlEventLogStorageMetadata, SqlEventLogStorageTable
from dagster._core.storage.event_log.sqlite import sqlite_event_log
from dagster._core.storage.event_log.sqlite.sqlite_event_log import (
    SQLITE_BUSY_TIMEOUT_SECONDS,
    SqliteEventLogStorage,
)
from dagster._core.storage.sql import get_alembic_config
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DatabaseError

from mindflow.errors import MindflowError

# Engines kept open: the index and the few runs being written or watched at a time.
MAX_ENGINES = 6

_SCRIPTS: list[ScriptDirectory] = []
_SCRIPTS_LOCK = threading.Lock()


def _migration_scripts() -> ScriptDirectory:
    """Dagster's alembic scripts for the SQLite event log, read once per process."""
    with _SCRIPTS_LOCK:
        if not _SCRIPTS:
            _SCRIPTS.append(ScriptDirectory.from_config(get_alembic_config(sqlite_event_log.__file__)))
        return _SCRIPTS[0]


class MindflowSqliteEventLogStorage(SqliteEventLogStorage):
    """Dagster's SQLite event log with engines kept per database and batched partition events."""

    def __init__(self, base_dir: str | None = None, inst_data=None):
        self._engines: OrderedDict[str, Engine] = OrderedDict()
        self._tables: dict[str, bool] = {}
        self._tables_lock = threading.Lock()
        if base_dir is None:
            home = os.environ.get("DAGSTER_HOME")
            if not home:
                raise MindflowError(
                    "DAGSTER_HOME is not set: the event log lives in $DAGSTER_HOME/history/runs"
                )
            base_dir = os.path.join(home, "history", "runs")  # where Dagster's default puts it
        super().__init__(base_dir, inst_data)

    @classmethod
    def config_type(cls):
        return {"base_dir": Field(StringSource, is_required=False)}

    @classmethod
    def from_config_value(cls, inst_data, config_value) -> MindflowSqliteEventLogStorage:
        return cls(inst_data=inst_data, **config_value)

    @contextmanager
    def _connect(self, shard: str) -> Iterator[Connection]:
        # The parent's contract: one connection at a time per storage, in a transaction.
        with self._db_lock:
            engine = self._engines.get(shard)
            if engine is None:
                engine = create_engine(
                    self.conn_string_for_shard(shard),
                    connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS},
                    pool_size=1,
                    max_overflow=2,
                )
                if shard not in self._initialized_dbs:
                    self._initdb(engine)
                    self._initialized_dbs.add(shard)
                self._engines[shard] = engine
                while len(self._engines) > MAX_ENGINES:
                    self._engines.popitem(last=False)[1].dispose()
            else:
                self._engines.move_to_end(shard)
            with engine.connect() as conn, conn.begin():
                yield conn

    def _initdb(self, engine: Engine, for_index_shard: bool = False) -> None:
        """A new run's database, as Dagster creates it (its tables, WAL, stamped at the head
        revision), with the migration scripts read once per process: Dagster reads all of
        them again for every run, ~0.15 s each. The index, and a database another process
        is creating at the same moment, take Dagster's own path (which retries)."""
        if for_index_shard:
            super()._initdb(engine, for_index_shard=True)
            return
        scripts = _migration_scripts()
        try:
            with engine.connect() as connection:
                context = MigrationContext.configure(connection)
                if context.get_current_revision() is None:
                    SqlEventLogStorageMetadata.create_all(engine)
                    connection.execute(text("PRAGMA journal_mode=WAL;"))
                    context.stamp(scripts, "head")
                connection.commit()
        except (DatabaseError, sqlite3.DatabaseError):
            super()._initdb(engine)

    def has_table(self, table_name: str) -> bool:
        # Dagster's tables are created by migrations, never dropped while a process runs.
        with self._tables_lock:
            known = self._tables.get(table_name)
        if known is None:
            known = super().has_table(table_name)
            if known:
                with self._tables_lock:
                    self._tables[table_name] = True
        return known

    def store_event_batch(self, events: Sequence[EventLogEntry]) -> None:
        """A run's partition materializations: one insert into the run's database, then one
        transaction in the index for the copies, their tags and each asset's latest event."""
        plain = all(
            event.is_dagster_event
            and event.dagster_event_type in ASSET_EVENTS
            and event.get_dagster_event().asset_key is not None
            for event in events
        )
        if not events or not plain or len({event.run_id for event in events}) != 1:
            super().store_event_batch(events)
            return
        rows = [self._event_to_row(event) for event in events]
        with self.run_connection(events[0].run_id) as conn:
            conn.execute(SqlEventLogStorageTable.insert(), rows)
        with self.index_transaction() as conn:
            inserted = conn.execute(
                SqlEventLogStorageTable.insert().returning(
                    SqlEventLogStorageTable.c.id, sort_by_parameter_order=True
                ),
                rows,
            )
            ids = [row[0] for row in inserted]
            self._store_asset_event_tags(conn, events, ids)
            # An event's only effect on its asset's row is to overwrite the columns of its
            # kind (materialization, planned, observation) with its own values, so the
            # last event of each kind per asset, applied in their order, leaves the row
            # as all of them in sequence would.
            last: dict[tuple, int] = {}
            for position, event in enumerate(events):
                dagster_event = event.get_dagster_event()
                last[(dagster_event.asset_key, dagster_event.event_type_value)] = position
            for position in sorted(last.values()):
                self._store_asset_event(conn, events[position], ids[position])

    def _dispose_engines(self) -> None:
        with self._db_lock:
            while self._engines:
                self._engines.popitem()[1].dispose()

    def wipe(self) -> None:
        self._dispose_engines()  # the run databases are deleted: no connection may keep them
        super().wipe()

    def upgrade(self) -> None:
        self._dispose_engines()
        super().upgrade()

    def dispose(self) -> None:
        self._dispose_engines()
        super().dispose()
