"""Rollback: restore a workspace file to its content at a commit or a date."""

from __future__ import annotations

from datetime import UTC, datetime

import duckdb

from mindflow.audit.trail import META, _relpath, open_repo, workspace_lock
from mindflow.audit.writes import write_file
from mindflow.config import Settings
from mindflow.errors import MindflowError


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
    if rel.split("/")[0] == META:
        raise MindflowError(
            f"{rel} is part of the audit trail and cannot be rolled back; `mindflow audit` shows the "
            f"trail, `git -C {settings.workspace} log -p -- {rel}` every earlier version"
        )
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
        if blob.type != "blob":
            raise MindflowError(
                f"{rel} is a folder, not a file; roll back one file of it, e.g. `mindflow rollback "
                f"{rel}/STORY.md --to {to}`"
            )
        try:
            text = blob.data_stream.read().decode()
        except UnicodeDecodeError as exc:
            raise MindflowError(
                f"{rel} at {commit.hexsha[:10]} is not a text file; mindflow restores text only"
            ) from exc
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
