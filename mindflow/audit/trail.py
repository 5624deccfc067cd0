"""The audit trail's primitives: the row, the log file, the workspace repository and its lock, queries."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path, PurePosixPath

import duckdb
from filelock import FileLock, Timeout

from mindflow.config import Settings
from mindflow.errors import MindflowError
from mindflow.files import append_lines, atomic_write
from mindflow.models import utcnow

ACTIONS = ("CREATE", "EDIT", "APPEND", "DELETE", "ARCHIVE", "MERGE", "REVERT", "DECAY", "RENAME", "ALERT")
AUDIT_LOG = "meta/audit.log"
INTEGRITY = "meta/integrity.json"
LOG_HEADER = "# TIMESTAMP | ACTION | FILE | ACTOR | APPROVAL | SUMMARY\n"
GITIGNORE = "*.lock\n.tmp-*\n"
# Critical files inside the workspace, per being; the configuration files live outside it.
CRITICAL_NAMES = ("SOUL.md", "IDENTITY.md")


@dataclass(frozen=True)
class AuditRow:
    """One mutation: a file (relative to the workspace) or a table-level change (`table:nodes`)."""

    action: str
    target: str
    actor: str
    summary: str
    approval: str = "auto"
    run_id: str | None = None
    ts: datetime = field(default_factory=utcnow)

    def line(self) -> str:
        return " | ".join(
            [
                self.ts.strftime("%Y-%m-%dT%H:%M:%SZ"),
                self.action,
                _clean(self.target),
                _clean(self.actor),
                _clean(self.approval),
                _clean(self.summary) + (f" (run {self.run_id})" if self.run_id else ""),
            ]
        )


def _clean(value: str) -> str:
    """One line, no column separator: the log stays parseable whatever a summary says."""
    return " ".join(str(value).replace("|", "/").split())


def _check_action(action: str) -> None:
    if action not in ACTIONS:
        raise MindflowError(f"unknown audit action {action!r}; use one of: {', '.join(ACTIONS)}")


def _relpath(relpath: str) -> str:
    """A normalised path inside the workspace; refuses absolute paths and `..`."""
    p = PurePosixPath(str(relpath).replace("\\", "/"))
    if p.is_absolute() or ".." in p.parts or not p.parts or p.parts[0] == ".git":
        raise MindflowError(f"{relpath!r} is not a file path inside the workspace (e.g. ada/STORY.md)")
    return p.as_posix()


@contextmanager
def workspace_lock(settings: Settings, timeout_s: float = 120.0) -> Iterator[None]:
    """One writer of the workspace repository at a time, across processes."""
    settings.resolved_home.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(settings.resolved_home / "workspace.lock"))
    try:
        lock.acquire(timeout=timeout_s)
    except Timeout as exc:
        raise MindflowError(
            f"the workspace {settings.workspace} is held by another mindflow process for more than "
            f"{timeout_s:.0f} s; wait for it to finish and try again"
        ) from exc
    try:
        yield
    finally:
        lock.release()


def open_repo(settings: Settings):
    """The workspace git repository, created (with a first commit) when missing."""
    import git

    root = settings.workspace
    root.mkdir(parents=True, exist_ok=True)
    if (root / ".git").exists():
        return git.Repo(root)
    repo = git.Repo.init(root)
    (root / ".gitignore").write_text(GITIGNORE)
    (root / "meta").mkdir(exist_ok=True)
    log = root / AUDIT_LOG
    if not log.exists():
        log.write_text(LOG_HEADER)
    # Files already in the workspace (a SOUL.md written by hand) become the first version.
    repo.git.add("--all")
    existing = len(repo.git.diff("--cached", "--name-only").splitlines()) - 2
    who = git.Actor("mindflow", "mindflow@localhost")
    repo.index.commit(
        f"[CREATE] meta/audit.log — workspace repository initialised ({existing} existing files)\n\n"
        "Actor: mindflow\nApproval: auto\nTrigger: first write",
        author=who,
        committer=who,
    )
    return repo


def commit_message(
    action: str, relpath: str, summary: str, *, actor: str, approval: str, trigger: str, run_id: str | None
) -> str:
    """`[ACTION] FILE — SUMMARY`, a blank line, then Actor:, Approval:, Trigger: and Run: lines."""
    return (
        f"[{action}] {relpath} — {_clean(summary)}\n\n"
        f"Actor: {_clean(actor)}\nApproval: {_clean(approval)}\nTrigger: {_clean(trigger)}\n"
        f"Run: {run_id or 'none'}\n"
    )


def _insert_rows(con: duckdb.DuckDBPyConnection, rows: list[AuditRow]) -> None:
    if not rows:
        return
    con.executemany(
        "INSERT INTO audit_log (audit_id, ts, action, target, actor, approval, summary, run_id) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [
            [f"a-{uuid.uuid4()}", r.ts, r.action, r.target, r.actor, r.approval, r.summary, r.run_id]
            for r in rows
        ],
    )


def _append_log(settings: Settings, rows: list[AuditRow]) -> None:
    path = settings.workspace / AUDIT_LOG
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        atomic_write(path, LOG_HEADER.encode())
    append_lines(path, "".join(r.line() + "\n" for r in rows).encode())


def _sha256(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def _commit(repo, paths: list[str], message: str, actor: str) -> str:
    import git

    repo.index.add(paths)
    who = git.Actor(_clean(actor) or "mindflow", "mindflow@localhost")
    return repo.index.commit(message, author=who, committer=who).hexsha


# ---- reading the log ------------------------------------------------------------------


def parse_line(line: str) -> AuditRow | None:
    """The row of one audit.log line; None for comments and lines that are not rows."""
    if not line.strip() or line.startswith("#"):
        return None
    parts = [p.strip() for p in line.rstrip("\n").split(" | ")]
    if len(parts) != 6:
        return None
    ts_s, action, target, actor, approval, summary = parts
    try:
        ts = datetime.strptime(ts_s, "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        return None
    run_id = None
    if summary.endswith(")") and " (run " in summary:
        summary, _, rest = summary.rpartition(" (run ")
        run_id = rest[:-1]
    return AuditRow(action, target, actor, summary, approval, run_id, ts)


def read_log(settings: Settings) -> list[AuditRow]:
    path = settings.workspace / AUDIT_LOG
    if not path.is_file():
        return []
    rows = (parse_line(line) for line in path.read_text(errors="replace").splitlines())
    return [r for r in rows if r is not None]


def query(
    settings: Settings,
    *,
    since: datetime | None = None,
    file: str | None = None,
    actor: str | None = None,
    action: str | None = None,
) -> list[AuditRow]:
    """Rows of the active log matching every given filter, oldest first.

    `file` matches a path exactly or as a suffix (`STORY.md` matches every being's story).
    """
    out = []
    for r in read_log(settings):
        if since is not None and r.ts < since:
            continue
        if file is not None and not (r.target == file or r.target.endswith("/" + file.lstrip("/"))):
            continue
        if actor is not None and r.actor.lower() != actor.lower():
            continue
        if action is not None and r.action != action.upper():
            continue
        out.append(r)
    return out
