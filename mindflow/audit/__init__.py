"""The workspace audit trail: every file mutation one git commit, one audit.log line, one audit_log row.

`$MINDFLOW_HOME/workspace` is a git repository (GitPython). `write_file` is the one way
mindflow changes a workspace file: it writes atomically, commits with the structured
message of the Moltbot design and appends `meta/audit.log`; `log_table_mutations` records
table-level changes (patrol merges and deaths, decay transitions, archivals) in the same
log and the DuckDB `audit_log`.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
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


def _commit(repo, paths: list[str], message: str, actor: str) -> str:
    import git

    repo.index.add(paths)
    who = git.Actor(_clean(actor) or "mindflow", "mindflow@localhost")
    return repo.index.commit(message, author=who, committer=who).hexsha


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


# ---- critical files --------------------------------------------------------------------


def _load_integrity(settings: Settings) -> dict:
    path = settings.workspace / INTEGRITY
    if path.is_file():
        try:
            state = json.loads(path.read_text())
            if isinstance(state, dict):
                return {"files": dict(state.get("files", {})), "alerted": dict(state.get("alerted", {}))}
        except json.JSONDecodeError:
            pass
    return {"files": {}, "alerted": {}}


def _save_integrity(settings: Settings, state: dict) -> None:
    atomic_write(
        settings.workspace / INTEGRITY, (json.dumps(state, indent=1, sort_keys=True) + "\n").encode()
    )


def _record_checksums(settings: Settings, checksums: dict[str, str | None]) -> None:
    state = _load_integrity(settings)
    for key, sha in checksums.items():
        if sha is None:
            state["files"].pop(key, None)
        else:
            state["files"][key] = sha
        state["alerted"].pop(key, None)
    _save_integrity(settings, state)


def critical_files(settings: Settings) -> dict[str, Path]:
    """Key -> path: every being's SOUL.md and IDENTITY.md, and the configuration files.

    Workspace files are keyed by their relative path; configuration files outside
    the workspace by `config:<name or absolute path>`.
    """
    out: dict[str, Path] = {}
    root = settings.workspace
    if root.is_dir():
        for being in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
            for name in CRITICAL_NAMES:
                out[f"{being.name}/{name}"] = being / name
    out["config:dagster.yaml"] = settings.dagster_home / "dagster.yaml"
    # Settings read `.env` from the working directory: keyed by its absolute path, so runs
    # started from another directory never mistake a different file for a deleted one.
    env = Path(".env").resolve()
    out[f"config:{env}"] = env
    return out


@dataclass
class IntegrityReport:
    checked: int = 0
    baselined: list[str] = field(default_factory=list)  # first seen: checksum recorded, no alert
    changed: list[str] = field(default_factory=list)  # differs from the recorded checksum (still)
    new_alerts: list[str] = field(default_factory=list)  # changed and logged as ALERT by this call

    @property
    def ok(self) -> bool:
        return not self.changed

    def metadata(self) -> dict:
        return {
            "critical_files_checked": self.checked,
            "critical_alerts": len(self.changed),
            "critical_changed": ", ".join(self.changed) or "none",
        }


def verify_critical(
    settings: Settings,
    con: duckdb.DuckDBPyConnection | None = None,
    *,
    run_id: str | None = None,
    actor: str = "integrity",
    record: bool = True,
) -> IntegrityReport:
    """Compare every critical file with its recorded checksum; log a change no run made as ALERT.

    A file seen for the first time is baselined. A changed file is reported on every
    call until it is accepted (`mindflow audit --accept FILE`) or rolled back, but
    logged as ALERT only once per distinct content. With `record=False` (`mindflow status`)
    nothing is written: the report only compares.
    """
    report = IntegrityReport()
    with workspace_lock(settings):
        state = _load_integrity(settings)
        dirty = False
        alerts: list[AuditRow] = []
        for key, path in critical_files(settings).items():
            sha = _sha256(path)
            recorded = state["files"].get(key)
            if sha is None and recorded is None:
                continue
            report.checked += 1
            if recorded is None:
                state["files"][key] = sha
                report.baselined.append(key)
                dirty = True
                continue
            if sha == recorded:
                if key in state["alerted"]:
                    state["alerted"].pop(key)
                    dirty = True
                continue
            report.changed.append(key)
            seen = sha or "missing"
            if state["alerted"].get(key) != seen:
                state["alerted"][key] = seen
                dirty = True
                report.new_alerts.append(key)
                what = "deleted" if sha is None else f"checksum {recorded[:12]} -> {sha[:12]}"
                alerts.append(
                    AuditRow(
                        "ALERT", key, actor, f"critical file changed outside mindflow: {what}", "none", run_id
                    )
                )
        if not record:
            report.new_alerts, alerts, dirty = [], [], False
        if dirty or alerts:
            (settings.workspace / "meta").mkdir(parents=True, exist_ok=True)
            _save_integrity(settings, state)
        if alerts:
            _append_log(settings, alerts)
            # The ALERT lines (and the alert state) are committed now; the changed file is not,
            # so `mindflow rollback FILE --to HEAD` still restores the last approved version.
            keys = [a.target for a in alerts]
            _commit(
                open_repo(settings),
                [AUDIT_LOG, INTEGRITY],
                commit_message(
                    "ALERT",
                    keys[0] if len(keys) == 1 else "meta/integrity.json",
                    alerts[0].summary
                    if len(keys) == 1
                    else f"critical files changed outside mindflow: {', '.join(keys)}",
                    actor=actor,
                    approval="none",
                    trigger="critical-file check at the start of a run",
                    run_id=run_id,
                ),
                actor,
            )
    if con is not None:
        _insert_rows(con, alerts)
    return report


def accept_critical(
    settings: Settings, key: str, *, actor: str = "user", con: duckdb.DuckDBPyConnection | None = None
) -> None:
    """Take a critical file's current content as intended: commit it and record its checksum."""
    files = critical_files(settings)
    if key not in files:
        raise MindflowError(f"{key!r} is not a critical file; critical files: {', '.join(files)}")
    path = files[key]
    if key.startswith("config:"):
        with workspace_lock(settings):
            open_repo(settings)
            _record_checksums(settings, {key: _sha256(path)})
            row = AuditRow("EDIT", key, actor, "change accepted as intended", "human")
            _append_log(settings, [row])
        if con is not None:
            _insert_rows(con, [row])
        return
    if not path.is_file():
        raise MindflowError(f"{key} does not exist; restore it with `mindflow rollback {key} --to COMMIT`")
    # The file already holds the content to accept: commit it as it is (write_file would see no change).
    row = AuditRow("EDIT", key, actor, "change accepted as intended", "human")
    with workspace_lock(settings):
        repo = open_repo(settings)
        _append_log(settings, [row])
        _record_checksums(settings, {key: _sha256(path)})
        _commit(
            repo,
            [key, AUDIT_LOG, INTEGRITY],
            commit_message(
                "EDIT",
                key,
                row.summary,
                actor=actor,
                approval="human",
                trigger="cli audit --accept",
                run_id=None,
            ),
            actor,
        )
    if con is not None:
        _insert_rows(con, [row])


# ---- rollback ------------------------------------------------------------------------------


def _utc(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC).replace(tzinfo=None)


def _parse_when(value: str) -> datetime | None:
    for fmt in ("%Y-%m-%d", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M"):
        try:
            when = datetime.strptime(value.rstrip("Z"), fmt)
        except ValueError:
            continue
        # A bare date means "as of the end of that day".
        return when.replace(hour=23, minute=59, second=59) if fmt == "%Y-%m-%d" else when
    return None


def rollback(
    settings: Settings,
    relpath: str,
    to: str,
    *,
    actor: str = "user",
    con: duckdb.DuckDBPyConnection | None = None,
) -> tuple[str, bool]:
    """Restore a workspace file to its content at a commit (sha or prefix) or a date (UTC).

    Logs REVERT and commits; returns (the commit restored from, whether the file changed).
    """
    import git

    rel = _relpath(relpath)
    with workspace_lock(settings):
        repo = open_repo(settings)
        when = _parse_when(to)
        if when is not None:
            commits = [c for c in repo.iter_commits(paths=rel) if _utc(c.committed_date) <= when]
            if not commits:
                raise MindflowError(f"{rel} has no committed version at or before {to}")
            commit = commits[0]
        else:
            try:
                commit = repo.commit(to)
            except (git.BadName, ValueError) as exc:
                raise MindflowError(
                    f"{to!r} is neither a commit of the workspace nor a date (YYYY-MM-DD)"
                ) from exc
        try:
            blob = commit.tree / rel
        except KeyError as exc:
            raise MindflowError(f"{rel} does not exist in commit {commit.hexsha[:10]}") from exc
        text = blob.data_stream.read().decode()
    changed = write_file(
        settings,
        rel,
        text,
        action="REVERT",
        summary=f"restored to {commit.hexsha[:10]} of {_utc(commit.committed_date):%Y-%m-%d %H:%M}",
        actor=actor,
        trigger="cli rollback",
        run_id=None,
        approval="human",
        con=con,
    )
    return commit.hexsha, changed


def file_history(settings: Settings, relpath: str, limit: int = 20) -> list[tuple[str, datetime, str]]:
    """(sha, committed at, first message line) of a file's commits, newest first."""
    rel = _relpath(relpath)
    repo = open_repo(settings)
    return [
        (c.hexsha, _utc(c.committed_date), c.message.splitlines()[0])
        for c in repo.iter_commits(paths=rel, max_count=limit)
    ]
