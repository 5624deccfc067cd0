"""Sensor `inbox_sensor`: starts ingestion when new files land in a being's inbox."""

from __future__ import annotations

import hashlib
import json

import dagster as dg

from assets.partitions import beings, days
from jobs.ingest import ingest_job
from mindflow.config import load_settings
from mindflow.inbox import pending_days, pending_files, plan_key_ranges
from mindflow.models import utcnow


def inbox_run_requests(
    seen: frozenset[str] = frozenset(), known_days: list[str] | None = None
) -> tuple[list[dg.RunRequest], set[str], list[str], list[str]]:
    """Run requests for pending files not seen before, the new cursor set, the beings involved, and
    the days to add as `days` partitions (before the runs start).

    Each request covers a range of `days` partitions holding the days the pending files
    hold (see `plan_key_ranges`); its run key is derived from the files and the range, so
    the same files never start the same run twice.
    """
    known_days = list(known_days or [])
    settings = load_settings()
    files = pending_files(settings.inbox)
    # The modification time makes a file landed again after ingestion count as new.
    keys = {f"{f.being_id}/{f.sha256}/{f.path.stat().st_mtime_ns}" for f in files}
    new = sorted(keys - seen)
    if not new:
        return [], keys, [], []
    pending = pending_days(settings.inbox, max_chars=settings.max_episode_chars)
    wanted = sorted({d for ds in pending.values() for d in ds})
    if not wanted:
        # Files without a single episode (heartbeats only, unreadable): a run for today
        # moves them to .done or to quarantine (today is then a partition of 0 rows).
        wanted = [utcnow().date()]
    new_days = [d.isoformat() for d in wanted if d.isoformat() not in set(known_days)]
    ranges = plan_key_ranges(wanted, known_days + new_days, settings.ingest_max_gap_days)
    digest = hashlib.sha256("\n".join(sorted(keys)).encode()).hexdigest()[:16]
    requests = [
        dg.RunRequest(
            run_key=f"ingest-{digest}-{first}-{last}",
            tags={
                "dagster/asset_partition_range_start": first,
                "dagster/asset_partition_range_end": last,
                "mindflow/new_files": str(len(new)),
            },
        )
        for first, last in ranges
    ]
    return requests, keys, sorted(pending), new_days


@dg.sensor(job=ingest_job, minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING)
def inbox_sensor(context: dg.SensorEvaluationContext):
    """Watch `$MINDFLOW_HOME/inbox/<being_id>/` and ingest the days new files cover."""
    seen = frozenset(json.loads(context.cursor)) if context.cursor else frozenset()
    known_days = list(context.instance.get_dynamic_partitions(days.name))
    requests, keys, being_ids, new_days = inbox_run_requests(seen, known_days)
    known = set(context.instance.get_dynamic_partitions(beings.name))
    new_beings = [b for b in being_ids if b not in known]
    # Dagster adds the partitions before it starts the runs that name them.
    partition_requests = [days.build_add_request(new_days)] if new_days else []
    partition_requests += [beings.build_add_request(new_beings)] if new_beings else []
    cursor = json.dumps(sorted(keys))
    if not requests:
        return dg.SensorResult(
            skip_reason="no new inbox file", cursor=cursor, dynamic_partitions_requests=partition_requests
        )
    return dg.SensorResult(
        run_requests=requests, cursor=cursor, dynamic_partitions_requests=partition_requests
    )
