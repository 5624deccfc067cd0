"""The audit trail's primitives: the row, the log file, the workspace repository and its lock, queries."""

from __future__ import annotations

import hashlib
import os
import time
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
META = "meta"  # the audit trail's own files: written by this package only, never rolled back
AUDIT_LOG = "meta/audit.log"
INTEGRITY = "meta/integrity.json"
LOG_HEADER = "# TIMESTAMP | ACTION | FILE | ACTOR | APPROVAL | SUMMARY\n"
GITIGNORE = "*.lock\n.tmp-*\n"
HOLDER = "workspace.lock.holder"  # beside workspace.lock while a process holds it
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
    # The audit_log key, also the `Audit-Id:` line of the row's commit: the two always match.
    audit_id: str = field(default_factory=lambda: f"a-{uuid.uuid4()}")

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


def is_critical(rel: str) -> bool:
    """A being's SOUL.md or IDENTITY.md (`ada/SOUL.md`)."""
    parts = rel.split("/")
    return len(parts) == 2 and parts[1] in CRITICAL_NAMES


def _relpath(relpath: str) -> str:
    """A normalised path inside the workspace; refuses absolute paths and `..`."""
    p = PurePosixPath(str(relpath).replace("\\", "/"))
    if p.is_absolute() or ".." in p.parts or not p.parts or p.parts[0] == ".git":
        raise MindflowError(f"{relpath!r} is not a file path inside the workspace (e.g. ada/STORY.md)")
    return p.as_posix()


@contextmanager
def workspace_lock(settings: Settings, timeout_s: float = 120.0) -> Iterator[None]:
    """One writer of the workspace repository at a time, across processes.

    The holder leaves a marker beside the lock while it holds it. Finding the marker on taking
    the lock means the last holder was killed: the git lock files it may have left
    (`.git/index.lock`, a ref's `.lock`) are stale then, and are removed, so they never block
    the next run; what it staged is unstaged, so it never lands in another file's commit.
    """
    home = settings.resolved_home
    home.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(home / "workspace.lock"))
    try:
        lock.acquire(timeout=timeout_s)
    except Timeout as exc:
        raise MindflowError(
            f"the workspace {settings.workspace} is held by another mindflow process for more than "
            f"{timeout_s:.0f} s; wait for it to finish and try again"
        ) from exc
    marker = home / HOLDER
    try:
        if marker.exists():
            _after_a_killed_holder(settings.workspace)
        _write_marker(marker)
        yield
    finally:
        marker.unlink(missing_ok=True)
        lock.release()


def _write_marker(marker: Path) -> None:
    fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, f"{os.getpid()}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def _after_a_killed_holder(root: Path) -> None:
    """Remove the git lock files a killed holder may have left, and unstage what it staged: its
    journal entry (mindflow/audit/writes.py: recover) stages and commits it again, alone."""
    gitdir = root / ".git"
    if not gitdir.is_dir():
        return
    # Every `*.lock` under .git is a git lock file: not only the index's and the refs', but also
    # ORIG_HEAD.lock, config.lock and the reflogs' a history rewrite (git-filter-repo, reset) takes.
    for path in gitdir.rglob("*.lock"):
        path.unlink(missing_ok=True)
    import git

    repo = git.Repo(root)
    if repo.head.is_valid():
        repo.git.reset("--quiet")


def _wait_for_git(root: Path, timeout_s: float = 10.0) -> None:
    """A `.git/index.lock` that no killed mindflow writer left is another git command's: wait for it."""
    lock = root / ".git" / "index.lock"
    deadline = time.monotonic() + timeout_s
    while lock.exists():
        if time.monotonic() >= deadline:
            raise MindflowError(
                f"{lock} exists: a git command is using the workspace. Wait for it to finish; if none "
                "is running (it was killed), delete that file and try again"
            )
        time.sleep(0.1)


def open_repo(settings: Settings):
    """The workspace git repository, created (with a first commit) when missing."""
    import git

    root = settings.workspace
    root.mkdir(parents=True, exist_ok=True)
    if (root / ".git").exists():
        repo = git.Repo(root)
        if repo.head.is_valid():
            return repo
        # Killed before its first commit: make that commit now.
    else:
        repo = git.Repo.init(root)
    _wait_for_git(root)
    if not (root / ".gitignore").exists():
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
    action: str,
    relpath: str,
    summary: str,
    *,
    actor: str,
    approval: str,
    trigger: str,
    run_id: str | None,
    audit_ids: list[str] | tuple[str, ...] = (),
) -> str:
    """`[ACTION] FILE — SUMMARY`, a blank line, then Actor:, Approval:, Trigger:, Run: and one
    Audit-Id: line per audit_log row the commit records."""
    return (
        f"[{action}] {relpath} — {_clean(summary)}\n\n"
        f"Actor: {_clean(actor)}\nApproval: {_clean(approval)}\nTrigger: {_clean(trigger)}\n"
        f"Run: {run_id or 'none'}\n" + "".join(f"Audit-Id: {i}\n" for i in audit_ids)
    )


def _insert_rows(con: duckdb.DuckDBPyConnection, rows: list[AuditRow]) -> None:
    if not rows:
        return
    # OR IGNORE: recovering an interrupted write inserts its rows again.
    con.executemany(
        "INSERT OR IGNORE INTO audit_log (audit_id, ts, action, target, actor, approval, summary, run_id) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [[r.audit_id, r.ts, r.action, r.target, r.actor, r.approval, r.summary, r.run_id] for r in rows],
    )


def _append_log(settings: Settings, rows: list[AuditRow]) -> None:
    path = settings.workspace / AUDIT_LOG
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        atomic_write(path, LOG_HEADER.encode())
    append_lines(path, "".join(r.line() + "\n" for r in rows).encode())


def _sha256(path: Path) -> str | None:
    return content_sha(path.read_bytes()) if path.is_file() else None


def content_sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _commit(repo, paths: list[str], message: str, actor: str) -> str:
    """Commit `paths` (what a killed writer staged was unstaged when the lock was taken)."""
    import git

    _wait_for_git(Path(repo.working_tree_dir))
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
    con: duckdb.DuckDBPyConnection | None = None,
) -> list[AuditRow]:
    """Rows matching every given filter, oldest first: from the DuckDB `audit_log` table with `con`
    (what `mindflow audit` shows: no workspace edit changes it), else from `meta/audit.log`.

    `file` matches a path exactly or as a suffix (`STORY.md` matches every being's story).
    """
    if con is not None:
        return _query_table(con, since=since, file=file, actor=actor, action=action)
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


def _query_table(con, *, since, file, actor, action) -> list[AuditRow]:
    where, params = [], []
    if since is not None:
        where.append("ts >= ?")
        params.append(since)
    if file is not None:
        where.append("(target = ? OR suffix(target, ?))")
        params += [file, "/" + file.lstrip("/")]
    if actor is not None:
        where.append("lower(actor) = lower(?)")
        params.append(actor)
    if action is not None:
        where.append("action = ?")
        params.append(action.upper())
    rows = con.execute(
        "SELECT action, target, actor, summary, approval, run_id, ts, audit_id FROM audit_log"
        + (" WHERE " + " AND ".join(where) if where else "")
        + " ORDER BY ts, rowid",
        params,
    ).fetchall()
    return [AuditRow(*r[:3], r[3] or "", r[4] or "", *r[5:]) for r in rows]
