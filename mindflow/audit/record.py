"""The recorded checksums of critical files: the DuckDB `integrity` table, copied to meta/integrity.json.

The table is the baseline: a workspace edit cannot reach it. `meta/integrity.json` is a copy kept
in the workspace (and committed, so git history holds every version) for people and for a home
whose DuckDB file is not there yet; a copy that is missing, unreadable or disagrees with the
table is itself an ALERT (mindflow/audit/integrity.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import duckdb

from mindflow.audit.trail import INTEGRITY, content_sha, is_critical
from mindflow.config import Settings
from mindflow.files import atomic_write
from mindflow.models import utcnow

# The row that says the table's baseline was taken (from git, once per DuckDB file).
BASELINE_TAKEN = INTEGRITY
UNREADABLE = "unreadable"


@dataclass(frozen=True)
class Recorded:
    """A critical file's approved checksum (None: no approved content) and the content last alerted on."""

    sha256: str | None
    alerted: str | None = None


def files_of(baseline: dict[str, Recorded]) -> dict[str, str]:
    """key -> approved checksum, as meta/integrity.json holds it."""
    return {k: r.sha256 for k, r in sorted(baseline.items()) if r.sha256 and k != BASELINE_TAKEN}


def render(files: dict[str, str]) -> bytes:
    return (json.dumps({"files": dict(sorted(files.items()))}, indent=1, sort_keys=True) + "\n").encode()


def parse(data: bytes) -> dict[str, str] | None:
    """The files of a record; None when it is not one."""
    try:
        state = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    files = state.get("files") if isinstance(state, dict) else None
    if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
        return None
    return {str(k): v for k, v in files.items()}


def read_workspace_record(settings: Settings) -> dict[str, str] | str | None:
    """The workspace copy: its files, None when missing, UNREADABLE when it is not a record."""
    path = settings.workspace / INTEGRITY
    if not path.is_file():
        return None
    files = parse(path.read_bytes())
    return UNREADABLE if files is None else files


def write_workspace_record(settings: Settings, files: dict[str, str]) -> None:
    atomic_write(settings.workspace / INTEGRITY, render(files))


def committed_record(repo) -> dict[str, str]:
    """The record as committed at HEAD (empty when none is)."""
    if repo is None or not repo.head.is_valid():
        return {}
    try:
        blob = repo.head.commit.tree / INTEGRITY
    except KeyError:
        return {}
    return parse(blob.data_stream.read()) or {}


def _first_version(repo) -> dict[str, str]:
    """Critical files already in the workspace when mindflow created its repository (its first commit)."""
    if repo is None or not repo.head.is_valid():
        return {}
    root = next(repo.iter_commits(max_parents=0), None)
    if root is None or "workspace repository initialised" not in root.message.splitlines()[0]:
        return {}
    out = {}
    for blob in root.tree.traverse():
        if blob.type == "blob" and is_critical(blob.path):
            out[blob.path] = content_sha(blob.data_stream.read())
    return out


def from_git(repo) -> dict[str, Recorded]:
    """The baseline git history holds: the committed record, and the files of the first commit."""
    files = {**_first_version(repo), **committed_record(repo)}
    return {k: Recorded(v) for k, v in files.items()}


def _first_baseline(settings: Settings, repo) -> dict[str, Recorded]:
    """What git history holds, plus the configuration checksums of the workspace copy (configuration
    is recorded when first seen anyway, so the copy can claim nothing more for it)."""
    copy = read_workspace_record(settings)
    config = (
        {k: Recorded(v) for k, v in copy.items() if k.startswith("config:")} if isinstance(copy, dict) else {}
    )
    return {**config, **from_git(repo)}


def baseline(
    settings: Settings, repo, con: duckdb.DuckDBPyConnection | None, *, write: bool
) -> dict[str, Recorded]:
    """key -> Recorded, from the DuckDB table; from git while the table has no baseline yet.

    With `write`, the first call on a DuckDB file takes the baseline from git into the table (once:
    later edits of the workspace or its history never reach the table again).
    """
    if con is None:
        return _first_baseline(settings, repo)
    try:
        rows = con.execute("SELECT key, sha256, alerted FROM integrity").fetchall()
    except duckdb.CatalogException:  # a read-only connection on a file not migrated yet
        return _first_baseline(settings, repo)
    table = {k: Recorded(s, a) for k, s, a in rows}
    if BASELINE_TAKEN in table:
        table.pop(BASELINE_TAKEN)
        return table
    taken = {**_first_baseline(settings, repo), **table}
    if write:
        apply(con, {**taken, BASELINE_TAKEN: Recorded(None)}, audit_id=None)
    return taken


def apply(con: duckdb.DuckDBPyConnection, updates: dict[str, Recorded], *, audit_id: str | None) -> None:
    """Upsert rows of the table (idempotent: recovery applies a transaction's updates again)."""
    if not updates:
        return
    now = utcnow()
    con.executemany(
        "INSERT INTO integrity (key, sha256, alerted, recorded_at, audit_id) VALUES (?, ?, ?, ?, ?) "
        "ON CONFLICT (key) DO UPDATE SET sha256 = excluded.sha256, alerted = excluded.alerted, "
        "recorded_at = excluded.recorded_at, audit_id = excluded.audit_id",
        [[k, r.sha256, r.alerted, now, audit_id] for k, r in updates.items()],
    )
