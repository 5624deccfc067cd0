"""Critical files (SOUL.md, IDENTITY.md, configuration): verified against the checksums recorded in DuckDB."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from mindflow.audit.record import UNREADABLE, Recorded, apply, baseline, files_of, read_workspace_record
from mindflow.audit.trail import (
    AUDIT_LOG,
    CRITICAL_NAMES,
    INTEGRITY,
    META,
    AuditRow,
    _sha256,
    commit_message,
    is_critical,
    open_repo,
    workspace_lock,
)
from mindflow.audit.writes import Transaction, recorded_files, recover, run
from mindflow.config import Settings
from mindflow.errors import MindflowError


def critical_files(settings: Settings) -> dict[str, Path]:
    """Key -> path: every being's SOUL.md and IDENTITY.md, and the configuration files.

    Workspace files are keyed by their relative path; configuration files outside
    the workspace by `config:<name or absolute path>`.
    """
    out: dict[str, Path] = {}
    root = settings.workspace
    if root.is_dir():
        for being in sorted(
            p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".") and p.name != META
        ):
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


def _existing_repo(settings: Settings):
    import git

    if not (settings.workspace / ".git").exists():
        return None
    repo = git.Repo(settings.workspace)
    return repo if repo.head.is_valid() else None


def verify_critical(
    settings: Settings,
    con: duckdb.DuckDBPyConnection | None = None,
    *,
    run_id: str | None = None,
    actor: str = "integrity",
    record: bool = True,
) -> IntegrityReport:
    """Compare every critical file with its recorded checksum; log a change no run made as ALERT.

    The baseline is the DuckDB `integrity` table (taken from git history the first time).
    A critical file with no recorded checksum is new: an ALERT, unless it is configuration, which is
    recorded when first seen. A changed, deleted or new file is reported on every call until it is
    accepted (`mindflow audit --accept FILE`) or undone, but logged as ALERT once per distinct
    content. `meta/integrity.json`, the workspace copy of the baseline, missing, unreadable or
    different from it is an ALERT too, and is rewritten from it.

    With `record=False` (`mindflow status`) or without `con` nothing is written: the report
    only compares (with the committed record when there is no connection).
    """
    write = record and con is not None
    with workspace_lock(settings):
        repo = open_repo(settings) if write else _existing_repo(settings)
        if write:
            recover(settings, repo, con)
        if repo is None and con is None:
            return IntegrityReport()  # nothing ever ran here: nothing recorded to compare with
        known = baseline(settings, repo, con, write=write)
        found = _compare(settings, known, actor=actor, run_id=run_id)
        if not write:
            found.report.new_alerts = []
            return found.report
        _record_findings(settings, repo, con, known, found, actor=actor, run_id=run_id)
    return found.report


@dataclass
class _Findings:
    report: IntegrityReport = field(default_factory=IntegrityReport)
    updates: dict[str, Recorded] = field(default_factory=dict)  # rows of the integrity table
    alerts: list[AuditRow] = field(default_factory=list)
    firsts: list[AuditRow] = field(default_factory=list)  # configuration seen for the first time


def _compare(settings: Settings, known: dict[str, Recorded], *, actor: str, run_id: str | None) -> _Findings:
    found = _Findings()
    report = found.report

    def alert(key: str, summary: str) -> None:
        report.changed.append(key)
        report.new_alerts.append(key)
        found.alerts.append(AuditRow("ALERT", key, actor, summary, "none", run_id))

    problem = _record_problem(settings, files_of(known))
    if problem:
        alert(INTEGRITY, f"integrity record {problem}; rewritten from the DuckDB baseline")
    paths = critical_files(settings)
    for key in sorted(filter(is_critical, known)):
        paths.setdefault(key, settings.workspace / key)  # a being's folder removed whole
    for key, path in paths.items():
        sha = _sha256(path)
        was = known.get(key, Recorded(None))
        if sha is None and was.sha256 is None:
            if was.alerted:
                found.updates[key] = Recorded(None)
            continue
        report.checked += 1
        if was.sha256 is None and key.startswith("config:"):
            found.updates[key] = Recorded(sha)
            report.baselined.append(key)
            summary = f"checksum {sha[:12]} recorded (first seen)"
            found.firsts.append(AuditRow("CREATE", key, actor, summary, "auto", run_id))
        elif sha == was.sha256:
            if was.alerted:
                found.updates[key] = Recorded(sha)
        elif was.alerted == (sha or "missing"):
            report.changed.append(key)  # still changed, already logged for this content
        else:
            found.updates[key] = Recorded(was.sha256, sha or "missing")
            if was.sha256 is None:
                alert(key, "new critical file not written by mindflow")
            elif sha is None:
                alert(key, "critical file changed outside mindflow: deleted")
            else:
                alert(
                    key, f"critical file changed outside mindflow: checksum {was.sha256[:12]} -> {sha[:12]}"
                )
    return found


def _record_findings(settings, repo, con, known, found: _Findings, *, actor: str, run_id) -> None:
    """ALERT and first-seen rows, the table and the record, in one transaction (one commit)."""
    rows = found.alerts + found.firsts
    if not rows:
        apply(con, found.updates, audit_id=None)  # only alert states cleared
        return
    keys = [a.target for a in found.alerts]
    if len(keys) == 1:
        subject, summary = keys[0], found.alerts[0].summary
    elif keys:
        subject, summary = INTEGRITY, f"critical files changed outside mindflow: {', '.join(keys)}"
    else:
        subject, summary = INTEGRITY, f"checksums recorded of {', '.join(r.target for r in found.firsts)}"
    tx = Transaction(
        rows=rows,
        paths=[AUDIT_LOG, INTEGRITY],
        # The ALERT lines and the record are committed now; a changed file is not, so
        # `mindflow rollback FILE --to HEAD` still restores the last approved version.
        message=commit_message(
            "ALERT" if keys else "CREATE",
            subject,
            summary,
            actor=actor,
            approval="none" if keys else "auto",
            trigger="critical-file check at the start of a run",
            run_id=run_id,
            audit_ids=[r.audit_id for r in rows],
        ),
        committer=actor,
        checksums=found.updates,
        record_files={**files_of(known), **{k: r.sha256 for k, r in found.updates.items() if r.sha256}},
    )
    run(settings, repo, tx, con)


def _record_problem(settings: Settings, approved: dict[str, str]) -> str | None:
    """What is wrong with the workspace copy of the baseline, if anything."""
    files = read_workspace_record(settings)
    if files is None:
        return "missing" if approved else None
    if files == UNREADABLE:
        return "unreadable"
    if files != approved:
        differ = sorted(k for k in set(files) | set(approved) if files.get(k) != approved.get(k))
        return f"differs from the DuckDB baseline ({', '.join(differ)})"
    return None


def accept_critical(
    settings: Settings, key: str, *, actor: str = "user", con: duckdb.DuckDBPyConnection | None = None
) -> None:
    """Take a critical file's current content as intended: commit it and record its checksum."""
    files = critical_files(settings)
    if key not in files:
        raise MindflowError(f"{key!r} is not a critical file; critical files: {', '.join(files)}")
    path = files[key]
    config = key.startswith("config:")
    sha = _sha256(path)
    if not config and sha is None:
        raise MindflowError(f"{key} does not exist; restore it with `mindflow rollback {key} --to COMMIT`")
    row = AuditRow("EDIT", key, actor, "change accepted as intended", "human")
    with workspace_lock(settings):
        repo = open_repo(settings)
        recover(settings, repo, con)
        approved = recorded_files(settings, repo, con)
        if sha is None:
            approved.pop(key, None)
        else:
            approved[key] = sha
        # The file already holds the content to accept: it is committed as it is.
        tx = Transaction(
            rows=[row],
            paths=([] if config else [key]) + [AUDIT_LOG, INTEGRITY],
            message=commit_message(
                "EDIT",
                key,
                row.summary,
                actor=actor,
                approval="human",
                trigger="cli audit --accept",
                run_id=None,
                audit_ids=[row.audit_id],
            ),
            committer=actor,
            content={} if config else {key: sha},
            checksums={key: Recorded(sha)},
            record_files=approved,
        )
        run(settings, repo, tx, con)
