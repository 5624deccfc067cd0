"""The workspace audit trail: every file mutation one git commit, one audit.log line, one audit_log row.

`$MINDFLOW_HOME/workspace` is a git repository (GitPython). `write_file` is the one way
mindflow changes a workspace file: it writes atomically, commits with the structured
message of the Moltbot design and appends `meta/audit.log`; `log_table_mutations` records
table-level changes (patrol merges and deaths, decay transitions, archivals) in the same
log and the DuckDB `audit_log`.

The modules: `trail` (rows, log, repository, lock, queries), `writes` (write_file and
log_table_mutations as crash-safe transactions, their journal and recovery), `record` (critical
files' checksums in DuckDB, copied to meta/integrity.json), `integrity` (verify, accept),
`rollback`, `digest`, `tables`.
"""

from mindflow.audit.integrity import IntegrityReport, accept_critical, critical_files, verify_critical
from mindflow.audit.rollback import file_history, rollback
from mindflow.audit.trail import (
    ACTIONS,
    AUDIT_LOG,
    CRITICAL_NAMES,
    GITIGNORE,
    INTEGRITY,
    LOG_HEADER,
    AuditRow,
    commit_message,
    is_critical,
    open_repo,
    parse_line,
    query,
    read_log,
    workspace_lock,
)
from mindflow.audit.writes import log_table_mutations, pending, recover, write_file

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
    "is_critical",
    "log_table_mutations",
    "open_repo",
    "parse_line",
    "pending",
    "query",
    "read_log",
    "recover",
    "rollback",
    "verify_critical",
    "workspace_lock",
    "write_file",
]
