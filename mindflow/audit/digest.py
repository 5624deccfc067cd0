"""The monthly audit digest: entries older than 90 days summarised into meta/audit-archive.md and pruned.

The active log (meta/audit.log and the DuckDB audit_log) keeps at least the last 90 days.
Only whole months are digested: the cut is the first day of the month that contains
`now - 90 days`, so every digested month ended more than 90 days ago and becomes exactly one
section of meta/audit-archive.md. Entries that still arrive for a month already in the
archive (a back-dated import) are merged into that month's section, whose totals are
recomputed. Git history keeps every line.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import duckdb

from mindflow import audit
from mindflow.audit import AUDIT_LOG, LOG_HEADER, AuditRow
from mindflow.audit.trail import _commit, content_sha
from mindflow.audit.writes import Transaction, run
from mindflow.config import Settings
from mindflow.models import utcnow

ARCHIVE = "meta/audit-archive.md"
RETENTION_DAYS = 90
ARCHIVE_HEADER = (
    "# Audit archive\n\nMonthly digests of audit entries older than 90 days, pruned from "
    "meta/audit.log and the audit_log table. `git log` in the workspace keeps every entry.\n"
)
CRITICAL_ACTIONS = ("ALERT", "REVERT")


@dataclass
class DigestReport:
    cutoff: datetime
    months: list[str] = field(default_factory=list)
    entries: int = 0  # digested and pruned from the log file
    table_rows: int = 0  # pruned from the DuckDB table
    kept: int = 0


def month_cutoff(now: datetime, retention_days: int = RETENTION_DAYS) -> datetime:
    """The first instant of the month containing `now - retention_days`: earlier months ended
    more than `retention_days` ago and are digested whole."""
    edge = now - timedelta(days=retention_days)
    return datetime(edge.year, edge.month, 1)


def _split_sections(archive: str) -> tuple[str, dict[str, str]]:
    """(header, {month: section text}) of an archive file."""
    parts = re.split(r"(?m)^## (\d{4}-\d{2})\n", archive)
    header, sections = parts[0], {}
    for month, body in zip(parts[1::2], parts[2::2], strict=True):
        sections[month] = body
    return header, sections


def _section_rows(body: str) -> list[AuditRow]:
    """The rows a section was built from, kept in its hidden `<!-- rows -->` block."""
    m = re.search(r"<!-- rows\n(.*?)\n-->", body, re.S)
    if not m:
        return []
    return [r for r in (audit.parse_line(x) for x in m.group(1).splitlines()) if r is not None]


def month_digest(month: str, rows: list[AuditRow]) -> str:
    """One markdown section: totals per action and file, reflections, critical changes, notable events."""
    actions = Counter(r.action for r in rows)
    files = Counter(r.target for r in rows)
    actors = Counter(r.actor for r in rows)
    lines = [f"\n## {month}\n", f"{len(rows)} entries, {rows[0].ts:%Y-%m-%d} .. {rows[-1].ts:%Y-%m-%d}.\n"]
    lines.append("| action | entries |\n|---|---|")
    lines += [f"| {a} | {n} |" for a, n in sorted(actions.items())]
    lines.append("\n| file | entries |\n|---|---|")
    lines += [f"| {f} | {n} |" for f, n in files.most_common(15)]
    if len(files) > 15:
        lines.append(f"| ({len(files) - 15} more files) | {sum(n for _, n in files.most_common()[15:])} |")
    lines.append("\nActors: " + ", ".join(f"{a} ({n})" for a, n in actors.most_common()) + ".")
    # The reflection folder's files, and the changes approved proposals applied.
    reflections = [
        r
        for r in rows
        if "reflection/" in r.target or r.actor.startswith(("reflection:", "bot:commit-from:"))
    ]
    lines.append("\n### Reflections\n")
    lines += [
        f"- {r.ts:%Y-%m-%d} {r.action} {r.target} ({r.approval}): {r.summary}" for r in reflections
    ] or ["- none"]
    critical = [
        r
        for r in rows
        if r.action in CRITICAL_ACTIONS
        or r.target.split("/")[-1] in audit.CRITICAL_NAMES
        or r.target.startswith("config:")
    ]
    lines.append("\n### Critical changes\n")
    lines += [
        f"- {r.ts:%Y-%m-%d %H:%M} {r.action} {r.target} by {r.actor} ({r.approval}): {r.summary}"
        for r in critical
    ] or ["- none"]
    notable = [r for r in rows if r.action in ("MERGE", "DELETE", "ARCHIVE", "RENAME")]
    lines.append("\n### Notable events\n")
    by_kind = Counter((r.action, r.target) for r in notable)
    lines += [f"- {a} {t}: {n} entries" for (a, t), n in sorted(by_kind.items())] or ["- none"]
    # The source lines, hidden in the rendered markdown, so late entries of this month can be merged.
    lines.append("\n<!-- rows\n" + "\n".join(r.line().replace("-->", "- ->") for r in rows) + "\n-->")
    return "\n".join(lines) + "\n"


def run_digest(
    settings: Settings,
    con: duckdb.DuckDBPyConnection | None = None,
    *,
    now: datetime | None = None,
    retention_days: int = RETENTION_DAYS,
    run_id: str | None = None,
) -> DigestReport:
    """Digest and prune every entry of the months that ended more than `retention_days` ago.

    Each month gets one archive section; a month already in the archive is merged (its totals
    recomputed). A second run finds nothing to do.
    """
    now = now or utcnow()
    cutoff = month_cutoff(now, retention_days)
    report = DigestReport(cutoff)
    with audit.workspace_lock(settings):
        repo = audit.open_repo(settings)
        audit.recover(settings, repo, con)
        log_path = settings.workspace / AUDIT_LOG
        raw = log_path.read_text(errors="replace").splitlines() if log_path.exists() else []
        old: list[AuditRow] = []
        keep_lines: list[str] = []
        for line in raw:
            row = audit.parse_line(line)
            if row is not None and row.ts < cutoff:
                old.append(row)
            elif not line.startswith("# TIMESTAMP") and line.strip():
                keep_lines.append(line)
        report.kept = sum(1 for line in keep_lines if audit.parse_line(line) is not None)
        if old and repo.is_dirty(path=AUDIT_LOG):
            # Table-level lines not yet committed: commit them first, so git keeps every pruned line.
            _commit(
                repo,
                [AUDIT_LOG],
                audit.commit_message(
                    "APPEND",
                    AUDIT_LOG,
                    "table-level entries committed before the digest",
                    actor="audit_digest",
                    approval="auto",
                    trigger="monthly audit_digest",
                    run_id=run_id,
                ),
                "audit_digest",
            )
        if old:
            by_month: dict[str, list[AuditRow]] = {}
            for r in sorted(old, key=lambda r: r.ts):
                by_month.setdefault(f"{r.ts:%Y-%m}", []).append(r)
            archive_path = settings.workspace / ARCHIVE
            header, sections = _split_sections(
                archive_path.read_text() if archive_path.exists() else ARCHIVE_HEADER
            )
            for month, rows in by_month.items():
                merged = sorted(_section_rows(sections.get(month, "")) + rows, key=lambda r: r.ts)
                sections[month] = month_digest(month, merged).split(f"## {month}\n", 1)[1]
            archive = (
                header.rstrip("\n")
                + "\n"
                + "".join(f"\n## {m}\n\n{body.strip(chr(10))}\n" for m, body in sorted(sections.items()))
            )
            report.months = sorted(by_month)
            report.entries = len(old)
            summary = f"{len(old)} entries of {', '.join(report.months)} digested and pruned"
            row = AuditRow("ARCHIVE", AUDIT_LOG, "audit_digest", summary, run_id=run_id, ts=now)
            new_log = LOG_HEADER + "".join(x + "\n" for x in keep_lines) + row.line() + "\n"
            # One transaction: killed half-way, the archive is restored from HEAD, the log kept,
            # and the next run digests the same months again.
            tx = Transaction(
                rows=[row],
                paths=[ARCHIVE, AUDIT_LOG],
                message=audit.commit_message(
                    "ARCHIVE",
                    AUDIT_LOG,
                    summary,
                    actor="audit_digest",
                    approval="auto",
                    trigger="monthly audit_digest",
                    run_id=run_id,
                    audit_ids=[row.audit_id],
                ),
                committer="audit_digest",
                content={ARCHIVE: content_sha(archive.encode()), AUDIT_LOG: content_sha(new_log.encode())},
                log_written=True,
            )
            run(settings, repo, tx, con, {ARCHIVE: archive.encode(), AUDIT_LOG: new_log.encode()})
    if con is not None:
        report.table_rows = len(
            con.execute("DELETE FROM audit_log WHERE ts < ? RETURNING audit_id", [cutoff]).fetchall()
        )
    return report
