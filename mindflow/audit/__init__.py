"""The workspace audit trail: every file mutation one git commit, one audit.log line, one audit_log row.

`$MINDFLOW_HOME/workspace` is a git repository (GitPython). `write_file` is the one way
mindflow changes a workspace file: it writes atomically, commits with the structured
message of the Moltbot design and appends `meta/audit.log`; `log_table_mutations` records
table-level changes (patrol merges and deaths, decay transitions, archivals) in the same
log and the DuckDB `audit_log`.

The modules: `trail` (rows, log, repository, lock, queries), `record` (the checksum record),
`writes` (write_file, log_table_mutations), `integrity` (critical files), `rollback`, `digest`.
"""

from mindflow.audit.integrity import IntegrityReport, accept_critical, critical_files, verify_critical
from mindflow.audit.record import _load_integrity, _record_checksums, _save_integrity
from mindflow.audit.rollback import _parse_when, _utc, file_history, rollback
from mindflow.audit.trail import (
    ACTIONS,
    AUDIT_LOG,
    CRITICAL_NAMES,
    GITIGNORE,
    INTEGRITY,
    LOG_HEADER,
    AuditRow,
    _append_log,
    _check_action,
    _clean,
    _commit,
    _insert_rows,
    _relpath,
    _sha256,
    commit_message,
    open_repo,
    parse_line,
    query,
    read_log,
    workspace_lock,
)
from mindflow.audit.writes import log_table_mutations, write_file

__all__ = [
    "ACTIONS",
    "AUDIT_LOG",
    "CRITICAL_NAMES",
    "GITIGNORE",
    "INTEGRITY",
    "LOG_HEADER",
    "AuditRow",
    "IntegrityReport",
    "accept_critical",
    "commit_message",
    "critical_files",
    "file_history",
    "log_table_mutations",
    "open_repo",
    "parse_line",
    "query",
    "read_log",
    "rollback",
    "verify_critical",
    "workspace_lock",
    "write_file",
    "_append_log",
    "_check_action",
    "_clean",
    "_commit",
    "_insert_rows",
    "_load_integrity",
    "_parse_when",
    "_record_checksums",
    "_relpath",
    "_save_integrity",
    "_sha256",
    "_utc",
]
