"""Workspace writes: every file mutation one git commit, one audit.log line, one audit_log row."""

from __future__ import annotations

from pathlib import PurePosixPath

import duckdb

from mindflow.audit.record import _record_checksums
from mindflow.audit.trail import (
    AUDIT_LOG,
    CRITICAL_NAMES,
    INTEGRITY,
    AuditRow,
    _append_log,
    _check_action,
    _commit,
    _insert_rows,
    _relpath,
    _sha256,
    commit_message,
    open_repo,
    workspace_lock,
)
from mindflow.config import Settings
from mindflow.errors import MindflowError
from mindflow.files import atomic_write


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
    checksum, so that a change made here is never mistaken for tampering.
    """
    _check_action(action)
    if not isinstance(text, str) or not text.strip():
        raise MindflowError(f"refusing to write an empty {relpath}: the text must be a non-empty string")
    rel = _relpath(relpath)
    with workspace_lock(settings):
        repo = open_repo(settings)
        path = settings.workspace / rel
        data = text.encode()
        if path.is_file() and path.read_bytes() == data:
            return False
        atomic_write(path, data)
        row = AuditRow(action, rel, actor, summary, approval, run_id)
        _append_log(settings, [row])
        paths = [rel, AUDIT_LOG]
        if PurePosixPath(rel).name in CRITICAL_NAMES:
            _record_checksums(settings, {rel: _sha256(path)})
            paths.append(INTEGRITY)
        _commit(
            repo,
            paths,
            commit_message(
                action, rel, summary, actor=actor, approval=approval, trigger=trigger, run_id=run_id
            ),
            actor,
        )
    if con is not None:
        _insert_rows(con, [row])
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
        open_repo(settings)
        _append_log(settings, rows)
    if con is not None:
        _insert_rows(con, rows)
