"""Job `audit_digest`: the monthly digest of audit entries older than 90 days."""

import dagster as dg

# Monthly partitions come from the asset (`assets.audit.monthly`): Dagster infers them from the
# selection, and deprecates naming them again here.
audit_digest_job = dg.define_asset_job(
    "audit_digest",
    selection=["audit_archive"],
    description="Summarise audit entries older than 90 days into meta/audit-archive.md and prune them.",
    executor_def=dg.in_process_executor,
)

# On the 1st of every month at 04:00, for the month that just ended.
monthly_audit_digest = dg.build_schedule_from_partitioned_job(
    audit_digest_job, hour_of_day=4, default_status=dg.DefaultScheduleStatus.RUNNING
)
