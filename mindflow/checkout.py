"""A being's rows in a DuckDB file of their own while the steps of one run work on them.

DuckDB admits one writing process per file, so with one store every run that writes waits
for the one before it (pool `duckdb`, limit 1). With MINDFLOW_DUCKDB_WRITERS above 1, the
steps that touch one being only (extraction, patrol, form, narrative) work on a checkout instead:

1. under the store's lock, for a moment: every row of the being (each table with a
   `being_id`) is copied into a new file under `checkouts/`, with the critical-file
   checksums the steps read, and the being's rows are fingerprinted (count and sum of
   row hashes per table);
2. the step runs against the checkout, with the same SQL, while runs of other beings
   check out and commit theirs;
3. under the store's lock again, in one transaction: if the being's rows in the store
   still have the fingerprint of step 1, the tables the step changed are replaced by the
   checkout's, and the checkout's new embedding-cache and audit rows are added (a step that
   changed none of the being's rows, such as a narration, only adds those). If anything changed them
   meanwhile (an ingest of the being's episodes, a forget, another run of the same being;
   not the publishers' own bookkeeping, `PUBLISHED`), nothing is written and `CommitConflict`
   is raised: the step runs again on a new checkout (the assets ask Dagster for a retry), so
   nothing is lost and nothing stale overwrites a newer row.

Files a step writes (the workspace, the audit log's lines) are not part of the checkout: an
attempt that conflicts leaves the audit lines of its run, and the retry writes its own.

This is optimistic concurrency as a lakehouse catalog does it (DuckLake could not carry
the stores here; README, "Running at scale"). A checkout left by a killed process is
removed by the next checkout: its file lock died with the process.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb
from filelock import FileLock, Timeout

from mindflow import store
from mindflow.errors import MindflowError
from mindflow.inbox import validate_being_id

PARTIAL = ".partial"
# Read by the steps, never written by them: copied whole, not merged back.
READ_ONLY = ("integrity",)
# What the publishing steps (`memories`, `facts_graph`, spanning every being) record of what they
# published: written by them on the store while checkouts are out, never by a step of one being,
# so a change there is no conflict (and a checkout that changed one is refused).
PUBLISHED = ("published_graph", "published_history", "published_memories")
# Rows of all beings that a step only ever adds.
ADDED = {"embedding_cache": ("model", "text_sha256"), "audit_log": ("audit_id",)}


class CommitConflict(MindflowError):
    """The being's rows in the store changed after the checkout: nothing was written."""


@dataclass
class CheckoutReport:
    """What one checkout moved: the being's rows out and back, and the seconds under the store's lock."""

    being_id: str
    rows_out: int = 0
    rows_in: int = 0
    added: int = 0
    locked_s: float = 0.0


def being_tables(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The store's tables that hold one row per being and thing (those with a `being_id`)."""
    rows = con.execute(
        "SELECT table_name FROM information_schema.columns "
        "WHERE column_name = 'being_id' AND table_catalog = current_database() AND table_schema = 'main' "
        "ORDER BY table_name"
    ).fetchall()
    return [r[0] for r in rows]


def fingerprint(
    con: duckdb.DuckDBPyConnection, tables: list[str], being_id: str, catalog: str | None = None
) -> dict[str, tuple]:
    """(rows, sum of row hashes) of the being in each table, of the connection's own database or
    of the attached `catalog`."""
    prefix = f"{catalog}." if catalog else ""
    out = {}
    for table in tables:
        out[table] = tuple(
            con.execute(
                f"SELECT count(*), coalesce(sum(hash(t)::HUGEINT), 0) FROM {prefix}{table} AS t "
                "WHERE being_id = ?",
                [being_id],
            ).fetchone()
        )
    return out


def _files(work: Path) -> list[Path]:
    """Every file of the checkout `work`: the copy being made, the checkout, their WALs."""
    partial = work.with_name(work.name + PARTIAL)
    return [f.with_name(f.name + wal) for f in (partial, work) for wal in ("", ".wal")]


def _literal(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def _sweep(folder: Path) -> None:
    """Remove checkouts whose process is gone (their lock is free)."""
    for lock_path in folder.glob("*.lock"):
        lock = FileLock(str(lock_path))
        try:
            lock.acquire(timeout=0)
        except Timeout:
            continue  # a live run's
        try:
            for leftover in _files(lock_path.with_suffix("")):
                leftover.unlink(missing_ok=True)
        finally:
            lock.release()
            lock_path.unlink(missing_ok=True)


@contextlib.contextmanager
def checkout(
    path: Path,
    folder: Path,
    being_id: str,
    *,
    lock_timeout_s: float = 600.0,
    report: CheckoutReport | None = None,
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection to a checkout of the being's rows of the store at `path`, merged back when the
    block ends without an exception (`CommitConflict` if the being changed meanwhile)."""
    validate_being_id(being_id)
    report = report if report is not None else CheckoutReport(being_id)
    folder.mkdir(parents=True, exist_ok=True)
    _sweep(folder)
    work = folder / f"{being_id}-{uuid.uuid4().hex[:12]}.duckdb"
    own = FileLock(str(work) + ".lock")
    own.acquire()
    try:
        # Made under another name and renamed once it holds the rows: a `<being>-*.duckdb` file in
        # the folder is a checkout in use.
        partial = work.with_name(work.name + PARTIAL)
        with duckdb.connect(str(partial)) as con:
            store.migrate(con, pin=False)
        began = time.monotonic()
        with store.connect(path, lock_timeout_s=lock_timeout_s) as con:
            tables = being_tables(con)
            con.execute(f"ATTACH {_literal(partial)} AS checkout")
            try:
                for table in tables:
                    report.rows_out += con.execute(
                        f"INSERT INTO checkout.{table} BY NAME SELECT * FROM {table} WHERE being_id = ?",
                        [being_id],
                    ).fetchone()[0]
                for table in READ_ONLY:
                    con.execute(f"INSERT INTO checkout.{table} BY NAME SELECT * FROM {table}")
                before = fingerprint(con, tables, being_id)
                # The rows in the file itself, not in a WAL beside it, before the file is renamed.
                con.execute("CHECKPOINT checkout")
            finally:
                con.execute("DETACH checkout")
        report.locked_s += time.monotonic() - began
        partial.rename(work)
        con = duckdb.connect(str(work))
        try:
            yield con
        finally:
            con.close()
        began = time.monotonic()
        with store.connect(path, lock_timeout_s=lock_timeout_s) as con:
            _commit(con, work, tables, being_id, before, report)
        report.locked_s += time.monotonic() - began
    finally:
        for leftover in _files(work):
            leftover.unlink(missing_ok=True)
        own.release()
        Path(own.lock_file).unlink(missing_ok=True)


def _commit(
    con: duckdb.DuckDBPyConnection, work: Path, tables: list[str], being_id: str, before: dict, report
) -> None:
    con.execute(f"ATTACH {_literal(work)} AS checkout (READ_ONLY)")
    try:
        with store.transaction(con):
            after = fingerprint(con, tables, being_id, catalog="checkout")
            wrote = [t for t in PUBLISHED if t in after and after[t] != before[t]]
            if wrote:
                raise MindflowError(f"a step working on being {being_id} changed {', '.join(wrote)}")
            watched = [t for t in tables if t not in PUBLISHED]
            # A step that changed none of the being's rows (it only read them, or added audit and
            # cache rows) overwrites nothing, so what changed in the store meanwhile is no conflict.
            now = fingerprint(con, watched, being_id) if after != before else {}
            changed = sorted(t for t in now if now[t] != before[t])
            if changed:
                raise CommitConflict(
                    f"the rows of being {being_id} changed in {', '.join(changed)} while this run worked "
                    "on them; nothing was written: run the step again on the new rows"
                )
            stray = sum(
                con.execute(
                    f"SELECT count(*) FROM checkout.{table} WHERE being_id IS DISTINCT FROM ?", [being_id]
                ).fetchone()[0]
                for table in tables
            )
            if stray:
                raise MindflowError(f"a step working on being {being_id} wrote {stray} rows of other beings")
            # Tables the step left as they were are not written again.
            for table in (t for t in tables if after[t] != before[t]):
                con.execute(f"DELETE FROM {table} WHERE being_id = ?", [being_id])
                report.rows_in += con.execute(
                    f"INSERT INTO {table} BY NAME SELECT * FROM checkout.{table}"
                ).fetchone()[0]
            for table, key in ADDED.items():
                match = " AND ".join(f"s.{k} = c.{k}" for k in key)
                report.added += con.execute(
                    f"INSERT INTO {table} BY NAME SELECT * FROM checkout.{table} c "
                    f"WHERE NOT EXISTS (SELECT 1 FROM {table} s WHERE {match})"
                ).fetchone()[0]
    finally:
        con.execute("DETACH checkout")
