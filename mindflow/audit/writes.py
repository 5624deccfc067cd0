"""Workspace writes as crash-safe transactions: a file, its audit.log line, its commit, its audit_log row.

Every transaction is first written to a journal (`$MINDFLOW_HOME/workspace-journal/`), then
carried out: the file write, the log line, the checksum record, the commit (which names its rows
in `Audit-Id:` lines), the DuckDB rows. A process killed at any instant leaves its entry behind;
the next holder of the workspace lock finishes it (`recover`) before doing anything else: a file
that was written is committed in its own commit with its own row, a file that was not is
forgotten. So every commit and every audit_log row match, whatever was killed when.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

import duckdb

from mindflow.audit import record
from mindflow.audit.trail import (
    AUDIT_LOG,
    INTEGRITY,
    META,
    AuditRow,
    _append_log,
    _check_action,
    _commit,
    _insert_rows,
    _relpath,
    _sha256,
    commit_message,
    content_sha,
    is_critical,
    open_repo,
    workspace_lock,
)
from mindflow.config import Settings
from mindflow.errors import MindflowError
from mindflow.files import atomic_write

JOURNAL = "workspace-journal"


@dataclass
class Transaction:
    """What one audited change does; its journal entry until it is done."""

    rows: list[AuditRow]
    paths: list[str] = field(default_factory=list)  # committed together; none: table-level rows only
    message: str = ""
    committer: str = "mindflow"
    content: dict[str, str] = field(default_factory=dict)  # file -> sha256 it holds once written
    checksums: dict[str, record.Recorded] = field(default_factory=dict)  # integrity table updates
    record_files: dict[str, str] | None = None  # meta/integrity.json afterwards (None: untouched)
    log_written: bool = False  # the writes already hold the log lines (the digest rewrites the log)
    committed: bool = False

    def to_json(self) -> bytes:
        data = asdict(self)
        for r in data["rows"]:
            r["ts"] = r["ts"].isoformat()
        return json.dumps(data).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> Transaction:
        data = json.loads(raw)
        data["rows"] = [AuditRow(**{**r, "ts": datetime.fromisoformat(r["ts"])}) for r in data["rows"]]
        data["checksums"] = {k: record.Recorded(**v) for k, v in data["checksums"].items()}
        return cls(**data)


def _journal(settings: Settings) -> Path:
    return settings.resolved_home / JOURNAL


def run(
    settings: Settings,
    repo,
    tx: Transaction,
    con: duckdb.DuckDBPyConnection | None,
    writes: dict[str, bytes] | None = None,
) -> None:
    """Carry out `tx` (the caller holds the workspace lock and has called `recover`)."""
    folder = _journal(settings)
    folder.mkdir(parents=True, exist_ok=True)
    entry = folder / f"{time.time_ns():020d}-{tx.rows[0].audit_id}.json"
    atomic_write(entry, tx.to_json())
    for rel, data in (writes or {}).items():
        atomic_write(settings.workspace / rel, data)
    if not tx.log_written:
        _append_log(settings, tx.rows)
    _commit_tx(settings, repo, tx)
    _finish(settings, tx, con, entry)


def _commit_tx(settings: Settings, repo, tx: Transaction) -> None:
    if tx.record_files is not None:
        record.write_workspace_record(settings, tx.record_files)
    if tx.paths:
        _commit(repo, tx.paths, tx.message, tx.committer)
    tx.committed = True


def _finish(settings: Settings, tx: Transaction, con, entry: Path) -> None:
    """The DuckDB part; without a connection the entry waits (committed) for the next one."""
    if con is None:
        atomic_write(entry, tx.to_json())
        return
    _insert_rows(con, tx.rows)
    record.apply(con, tx.checksums, audit_id=tx.rows[0].audit_id)
    entry.unlink(missing_ok=True)


def recover(settings: Settings, repo, con: duckdb.DuckDBPyConnection | None) -> int:
    """Finish what killed writers left, oldest first; returns the number of entries handled.

    A transaction whose files hold their new content is committed as it was meant to be (its own
    commit, message and rows); one whose files do not was killed before it changed anything
    that counts, and any file it did write is restored from HEAD.
    """
    folder = _journal(settings)
    if not folder.is_dir():
        return 0
    handled = 0
    for entry in sorted(folder.glob("*.json")):
        try:
            tx = Transaction.from_json(entry.read_bytes())
        except (ValueError, TypeError, KeyError):
            # Entries are written atomically, so this is a damaged disk or a hand edit: keep it aside.
            entry.rename(entry.with_suffix(".damaged"))
            continue
        handled += 1
        if tx.committed and con is None:
            continue  # only its DuckDB rows wait, for a call with a connection
        if not tx.committed and not (tx.paths and _in_history(repo, tx.rows[0].audit_id)):
            if not _all_written(settings, tx):
                _undo(settings, repo, tx)
                entry.unlink()
                continue
            if not tx.log_written:
                log = settings.workspace / AUDIT_LOG
                text = log.read_text(errors="replace") if log.is_file() else ""
                _append_log(settings, [r for r in tx.rows if r.line() not in text])
            _commit_tx(settings, repo, tx)
        tx.committed = True
        _finish(settings, tx, con, entry)
    for tmp in folder.glob(".tmp-*"):  # a journal entry killed while being written: nothing was done
        tmp.unlink(missing_ok=True)
    return handled


def _in_history(repo, audit_id: str, depth: int = 20) -> bool:
    return any(f"Audit-Id: {audit_id}" in c.message for c in repo.iter_commits(max_count=depth))


def _all_written(settings: Settings, tx: Transaction) -> bool:
    return all(_sha256(settings.workspace / rel) == sha for rel, sha in tx.content.items())


def _undo(settings: Settings, repo, tx: Transaction) -> None:
    """Restore from HEAD the files of a transaction that wrote some of its files and not others."""
    for rel, sha in tx.content.items():
        path = settings.workspace / rel
        if _sha256(path) != sha:
            continue
        try:
            blob = repo.head.commit.tree / rel
        except KeyError:
            path.unlink()
            continue
        atomic_write(path, blob.data_stream.read())


def recorded_files(settings: Settings, repo, con: duckdb.DuckDBPyConnection | None) -> dict[str, str]:
    """The approved checksums now: the DuckDB baseline, or the committed record without DuckDB."""
    if con is None:
        return record.committed_record(repo)
    return record.files_of(record.baseline(settings, repo, con, write=True))


def write_file(
    settings: Settings,
    relpath: str,
    text: str,
    *,
    action: str,
    summary: str,
    actor: str,
    trigger: str,
    run_id: str | None,
    approval: str = "auto",
    con: duckdb.DuckDBPyConnection | None = None,
) -> bool:
    """Write workspace/<relpath> atomically, commit it, log it; False (nothing written) when unchanged.

    The commit holds the file, the audit.log line and, for a critical file, its new
    checksum, so that a change made here is never mistaken for tampering. Without `con` the
    audit_log row (and a critical file's checksum) reach DuckDB with the next call that has one.
    """
    _check_action(action)
    if not isinstance(text, str) or not text.strip():
        raise MindflowError(f"refusing to write an empty {relpath}: the text must be a non-empty string")
    rel = _relpath(relpath)
    if rel.split("/")[0] == META:
        raise MindflowError(f"{rel}: the meta/ folder holds the audit trail and is written by it alone")
    data = text.encode()
    with workspace_lock(settings):
        repo = open_repo(settings)
        recover(settings, repo, con)
        path = settings.workspace / rel
        if path.is_file() and path.read_bytes() == data:
            return False
        if path.is_dir():
            raise MindflowError(f"{rel} is a folder in the workspace; name a file inside it")
        row = AuditRow(action, rel, actor, summary, approval, run_id)
        sha = content_sha(data)
        tx = Transaction(
            rows=[row],
            paths=[rel, AUDIT_LOG],
            message=commit_message(
                action,
                rel,
                summary,
                actor=actor,
                approval=approval,
                trigger=trigger,
                run_id=run_id,
                audit_ids=[row.audit_id],
            ),
            committer=actor,
            content={rel: sha},
        )
        if is_critical(rel):
            tx.checksums = {rel: record.Recorded(sha)}
            tx.record_files = {**recorded_files(settings, repo, con), rel: sha}
            tx.paths.append(INTEGRITY)
        run(settings, repo, tx, con, {rel: data})
    return True


def log_table_mutations(
    con: duckdb.DuckDBPyConnection | None, rows: list[AuditRow], settings: Settings | None = None
) -> None:
    """Table-level rows (MERGE, DECAY, ARCHIVE, DELETE ...) into audit_log and meta/audit.log.

    The log lines are committed with the next file mutation (or the monthly digest);
    git is the record of files, the log and the table the record of everything.
    """
    if not rows:
        return
    for r in rows:
        _check_action(r.action)
    if settings is None:
        from mindflow.config import load_settings

        settings = load_settings()
    with workspace_lock(settings):
        repo = open_repo(settings)
        recover(settings, repo, con)
        run(settings, repo, Transaction(rows=list(rows)), con)


def commit_table_mutations(
    con: duckdb.DuckDBPyConnection | None, rows: list[AuditRow], settings: Settings, *, trigger: str
) -> None:
    """Table-level rows a person decided (forget, restore, pin): logged like `log_table_mutations`
    and committed at once, so the workspace history shows the decision with its actor and approval."""
    if not rows:
        return
    for r in rows:
        _check_action(r.action)
    first = rows[0]
    summary = "; ".join(r.summary for r in rows)
    with workspace_lock(settings):
        repo = open_repo(settings)
        recover(settings, repo, con)
        tx = Transaction(
            rows=list(rows),
            paths=[AUDIT_LOG],
            message=commit_message(
                first.action,
                first.target,
                summary,
                actor=first.actor,
                approval=first.approval,
                trigger=trigger,
                run_id=first.run_id,
                audit_ids=[r.audit_id for r in rows],
            ),
            committer=first.actor,
        )
        run(settings, repo, tx, con)


def pending(settings: Settings) -> int:
    """Journal entries not finished yet (a killed writer's, or rows waiting for a DuckDB connection)."""
    folder = _journal(settings)
    return len(list(folder.glob("*.json"))) if folder.is_dir() else 0
