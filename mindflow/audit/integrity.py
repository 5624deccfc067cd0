"""Critical files (SOUL.md, IDENTITY.md, configuration): verified against their recorded checksums."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from mindflow.audit.record import _load_integrity, _record_checksums, _save_integrity
from mindflow.audit.trail import (
    AUDIT_LOG,
    CRITICAL_NAMES,
    INTEGRITY,
    AuditRow,
    _append_log,
    _commit,
    _insert_rows,
    _sha256,
    commit_message,
    open_repo,
    workspace_lock,
)
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
