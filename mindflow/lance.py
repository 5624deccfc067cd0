"""LanceDB access: the one place that builds `where` filters, and table helpers."""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa

from mindflow.config import ObjectStore

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def literal(value: str | int | float | bool | datetime) -> str:
    """A SQL literal for a LanceDB filter; strings are quoted with embedded quotes doubled."""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, datetime):
        # Stored timestamps are naive UTC.
        if value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        return f"TIMESTAMP '{value.isoformat(sep=' ', timespec='microseconds')}'"
    if isinstance(value, (int, float)):
        return repr(value)
    if not isinstance(value, str):
        raise TypeError(f"unsupported filter value {value!r}")
    if "\x00" in value:
        raise ValueError("filter values cannot contain NUL")
    return "'" + value.replace("'", "''") + "'"


def identifier(name: str) -> str:
    if not _IDENTIFIER.fullmatch(name):
        raise ValueError(f"invalid column name {name!r}")
    return name


def where(**conditions: str | int | float | bool | Iterable[str]) -> str:
    """`col = 'v' AND col2 IN ('a', 'b')`: every filter goes through here."""
    parts = []
    for column, value in conditions.items():
        if isinstance(value, (str, int, float, bool)):
            parts.append(f"{identifier(column)} = {literal(value)}")
        else:
            values = list(value)
            if not values:
                parts.append("FALSE")
            else:
                parts.append(f"{identifier(column)} IN ({', '.join(literal(v) for v in values)})")
    return " AND ".join(parts) if parts else "TRUE"


def not_in(column: str, values: Iterable[str]) -> str:
    values = list(values)
    if not values:
        return "TRUE"
    return f"{identifier(column)} NOT IN ({', '.join(literal(v) for v in values)})"


def has_any(column: str, values: Iterable[str]) -> str:
    """A list column holding at least one of `values`."""
    values = list(values)
    if not values:
        return "FALSE"
    return f"array_has_any({identifier(column)}, [{', '.join(literal(v) for v in values)}])"


def compare(column: str, op: str, value: str | int | float | datetime) -> str:
    if op not in ("<", "<=", ">", ">=", "=", "<>"):
        raise ValueError(f"invalid operator {op!r}")
    return f"{identifier(column)} {op} {literal(value)}"


def all_of(*conditions: str) -> str:
    """Conjunction of conditions built by the helpers above."""
    return " AND ".join(f"({c})" for c in conditions if c and c != "TRUE") or "TRUE"


_IMPORT_LOCK = threading.Lock()
_LANCEDB: list = []  # the module, once fully imported


def lancedb_module():
    """The `lancedb` module, imported on first use: definitions.py must load fast.

    Its import takes a second or more (the namespace REST client builds a pydantic validator
    for each of its methods); only processes that open LanceDB pay it.
    """
    if _LANCEDB:
        return _LANCEDB[0]
    with _IMPORT_LOCK:  # another thread importing it: wait for the whole module
        if not _LANCEDB:
            import lancedb

            _LANCEDB.append(lancedb)
    return _LANCEDB[0]


# Where the tables live: a local folder, or object storage (Settings.lance_path).
Location = Path | ObjectStore


def _options(where: Location) -> dict:
    return {} if isinstance(where, Path) else {"storage_options": where.storage_options}


def ensure(where: Location) -> None:
    """Create the local folder; on object storage a table's first write creates its prefix."""
    if isinstance(where, Path):
        where.mkdir(parents=True, exist_ok=True)


def exists(where: Location) -> bool:
    """Whether anything may have been published there: a folder that exists, or any object store
    (a missing table there is found missing when opened)."""
    return where.is_dir() if isinstance(where, Path) else True


def connect(where: Location):
    lancedb = lancedb_module()
    ensure(where)
    return lancedb.connect(str(where), **_options(where))


_READERS: dict[str, object] = {}
_READERS_LOCK = threading.Lock()


def reader(path: Location):
    """One connection per folder (or object store prefix) for a long-lived reader (the read
    API): it checks for a newer table version on every read, so it sees what the last job
    published without a restart."""
    key = str(path)
    with _READERS_LOCK:
        db = _READERS.get(key)
        if db is None:
            lancedb = lancedb_module()
            ensure(path)
            db = lancedb.connect(
                key, read_consistency_interval=timedelta(0), session=_session(key), **_options(path)
            )
            _READERS[key] = db
    return db


_SESSIONS: dict[str, object] = {}


def _session(key: str):
    """One LanceDB session (index and metadata caches) per folder for the reader and its snapshots."""
    lancedb = lancedb_module()
    session = _SESSIONS.get(key)
    if session is None:
        session = _SESSIONS[key] = lancedb.Session()
    return session


def snapshot(path: Location, name: str):
    """The table as it is now, never re-reading its version (None before it exists), through
    LanceDB's async API; it shares the reader's caches, so holding one costs no second copy
    of the indexes. A query on it is one call into LanceDB's event loop (`run_async`); the
    sync builder makes several (schema, index checks), ~2 ms more per full-text search.
    """
    lancedb = lancedb_module()
    key = str(path)
    with _READERS_LOCK:
        session = _session(key)

    async def opened():
        try:
            db = await lancedb.connect_async(key, session=session, **_options(path))
            return await db.open_table(name)
        except (FileNotFoundError, ValueError):
            return None

    return run_async(opened())


def is_async(table) -> bool:
    return isinstance(table, lancedb_module().table.AsyncTable)


def run_async(awaitable):
    """Run a LanceDB coroutine on LanceDB's own event loop and return its result."""
    return lancedb_module().background_loop.LOOP.run(awaitable)


class LatestTable:
    """A long-lived reader's table and its version, checked only when the table changed.

    Opening the table and asking its version costs a reader ~2 ms (up to 5) of
    directory listing per request. Every commit adds a manifest to the table's
    `_versions` folder, which changes the folder's mtime, so while that mtime is what it
    was the version is too. File times come from a coarse clock, so a commit in the same
    tick as the one before could leave the mtime as it was: an mtime younger than
    SETTLE_NS is never trusted and the version is read again. On object storage there is no
    folder to stat: the version is read on every call (one small request).
    """

    SETTLE_NS = 2_000_000_000

    def __init__(self, path: Location, name: str):
        self.path = path
        self.name = name
        self._lock = threading.Lock()
        self._seen: tuple[int, object, int] | None = None  # (mtime_ns, table, version)

    def get(self) -> tuple[object | None, int | None]:
        """(table, version), or (None, None) before the table exists."""
        try:
            mtime = os.stat(self.path / f"{self.name}.lance" / "_versions").st_mtime_ns
        except (OSError, TypeError):  # TypeError: an object store, no folder to stat
            mtime = None
        with self._lock:
            seen = self._seen
        if seen is not None and seen[0] == mtime:
            return seen[1], seen[2]
        now = time.time_ns()
        # Read after the stat: a commit after the stat changes the mtime again.
        table = open_table(reader(self.path), self.name)
        version = table.version if table is not None else None
        with self._lock:
            settled = mtime is not None and table is not None and now - mtime > self.SETTLE_NS
            self._seen = (mtime, table, version) if settled else None
        return table, version


def open_table(db, name: str):
    """The table, or None while it does not exist yet."""
    try:
        return db.open_table(name)
    except (FileNotFoundError, ValueError):
        return None


# Keys per `delete` filter: a longer IN list makes LanceDB's filter parser slow.
DELETE_CHUNK = 500


def upsert(db, name: str, table, rows: pa.Table, key: str):
    """Write `rows` by `key`: the table is created by its first rows, later ones replace the rows
    with the same key or are added. Returns the table."""
    if table is None:
        return db.create_table(name, data=rows)
    table.merge_insert(key).when_matched_update_all().when_not_matched_insert_all().execute(rows)
    return table


def delete_keys(table, key: str, values: list[str]) -> int:
    """Delete the rows whose `key` is one of `values`; returns how many keys were given."""
    for start in range(0, len(values), DELETE_CHUNK):
        table.delete(where(**{key: values[start : start + DELETE_CHUNK]}))
    return len(values)


def ensure_scalar_indexes(table, kinds: dict[str, str]) -> list[str]:
    """Build the indexes (`{column: "BITMAP" | "BTREE" | "FTS"}`) the table lacks; returns their columns.

    `optimize()` folds rows added later into them."""
    from lancedb.index import FTS, Bitmap, BTree

    configs = {"BITMAP": Bitmap, "BTREE": BTree, "FTS": FTS}
    have = {column for index in table.list_indices() for column in index.columns}
    built = []
    for column, kind in kinds.items():
        if column not in have:
            table.create_index(column, config=configs[kind](), replace=True)
            built.append(column)
    return built


def count_by(table, column: str, values: Iterable[str]) -> dict[str, int]:
    """How many rows each value of `column` has (for invariant checks)."""
    values = list(values)
    counts: dict[str, int] = {}
    for start in range(0, len(values), 500):
        chunk = values[start : start + 500]
        rows = table.search().where(where(**{column: chunk})).select([column]).limit(None).to_arrow()
        for v in rows.column(column).to_pylist():
            counts[v] = counts.get(v, 0) + 1
    return counts


def vector_type(dim: int) -> pa.DataType:
    return pa.list_(pa.float32(), dim)
