"""Asset `audit_archive`: monthly digests of audit entries older than 90 days, pruned from the active log."""

import dagster as dg

from mindflow.resources import DuckDBResource

# end_offset=0: the newest partition is the last month that has ended, so the schedule on the
# 1st (jobs/audit.py) runs for the month that just ended, never for the month just begun.
monthly = dg.MonthlyPartitionsDefinition(start_date="2020-01-01", end_offset=0)


@dg.asset(
    partitions_def=monthly,
    pool="duckdb",
    group_name="audit",
    kinds={"duckdb", "markdown"},
    code_version="1",
)
def audit_archive(context: dg.AssetExecutionContext, duckdb: DuckDBResource) -> dg.MaterializeResult:
    """meta/audit-archive.md: per month, totals per action and file, reflections, critical changes."""
    from mindflow import audit
    from mindflow.audit.digest import ARCHIVE, run_digest
    from mindflow.models import utcnow

    settings = duckdb.settings()
    # A partition digests the whole months that had ended more than 90 days before its own
    # month ended (mindflow/audit/digest.py: month_cutoff).
    end = context.partition_time_window.end.replace(tzinfo=None)
    with duckdb.connect() as con:
        integrity = audit.verify_critical(settings, con, run_id=context.run_id)
        report = run_digest(settings, con, now=min(utcnow(), end), run_id=context.run_id)
    path = settings.workspace / ARCHIVE
    return dg.MaterializeResult(
        metadata={
            "cutoff": report.cutoff.isoformat(timespec="seconds"),
            "digested": report.entries,
            "months": ", ".join(report.months) or "none",
            "pruned_table_rows": report.table_rows,
            "active_entries": report.kept,
            "preview": dg.MetadataValue.md(path.read_text()[-2000:] if path.exists() else "(no archive yet)"),
            **integrity.metadata(),
        }
    )
