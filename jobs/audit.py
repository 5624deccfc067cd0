"""Job `audit_digest`: the monthly digest of audit entries older than 90 days."""

import dagster as dg

from assets.audit import monthly

audit_digest_job = dg.define_asset_job(
    "audit_digest",
    selection=["audit_archive"],
    partitions_def=monthly,
    description="Summarise audit entries older than 90 days into meta/audit-archive.md and prune them.",
    executor_def=dg.in_process_executor,
)

# On the 1st of every month at 04:00, for the month that just ended.
monthly_audit_digest = dg.build_schedule_from_partitioned_job(
    audit_digest_job, hour_of_day=4, default_status=dg.DefaultScheduleStatus.RUNNING
)
