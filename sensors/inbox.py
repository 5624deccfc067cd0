"""Sensor `inbox_sensor`: starts ingestion when new files land in a being's inbox."""

from __future__ import annotations

import hashlib
import json

import dagster as dg

from assets.partitions import beings
from jobs.ingest import ingest_job
from mindflow.config import load_settings
from mindflow.inbox import pending_days, pending_files, plan_ranges
from mindflow.models import utcnow


def inbox_run_requests(seen: frozenset[str] = frozenset()) -> tuple[list[dg.RunRequest], set[str], list[str]]:
    """Run requests for pending files not seen before, the new cursor set, and the beings involved.

    Each request covers a contiguous range of the days the pending files hold (see
    `plan_ranges`); its run key is derived from the files and the range, so the same
    files never start the same run twice.
    """
    settings = load_settings()
    files = pending_files(settings.inbox)
    # The modification time makes a file landed again after ingestion count as new.
    keys = {f"{f.being_id}/{f.sha256}/{f.path.stat().st_mtime_ns}" for f in files}
    new = sorted(keys - seen)
    if not new:
        return [], keys, []
    days = pending_days(settings.inbox, max_chars=settings.max_episode_chars)
    ranges = plan_ranges([d for ds in days.values() for d in ds], settings.ingest_max_gap_days)
    if not ranges:
        # Files without a single episode (heartbeats only, unreadable): a run for today
        # moves them to .done or to quarantine.
        today = utcnow().date()
        ranges = [(today, today)]
    digest = hashlib.sha256("\n".join(sorted(keys)).encode()).hexdigest()[:16]
    requests = [
        dg.RunRequest(
            run_key=f"ingest-{digest}-{first}-{last}",
            tags={
                "dagster/asset_partition_range_start": first.isoformat(),
                "dagster/asset_partition_range_end": last.isoformat(),
                "mindflow/new_files": str(len(new)),
            },
        )
        for first, last in ranges
    ]
    return requests, keys, sorted(days)


@dg.sensor(job=ingest_job, minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING)
def inbox_sensor(context: dg.SensorEvaluationContext):
    """Watch `$MINDFLOW_HOME/inbox/<being_id>/` and ingest the days new files cover."""
    seen = frozenset(json.loads(context.cursor)) if context.cursor else frozenset()
    requests, keys, being_ids = inbox_run_requests(seen)
    known = set(context.instance.get_dynamic_partitions(beings.name))
    new_beings = [b for b in being_ids if b not in known]
    partition_requests = [beings.build_add_request(new_beings)] if new_beings else []
    cursor = json.dumps(sorted(keys))
    if not requests:
        return dg.SensorResult(
            skip_reason="no new inbox file", cursor=cursor, dynamic_partitions_requests=partition_requests
        )
    return dg.SensorResult(
        run_requests=requests, cursor=cursor, dynamic_partitions_requests=partition_requests
    )
