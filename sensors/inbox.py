"""Sensor `inbox_sensor`: starts ingestion when new files land in a being's inbox."""

from __future__ import annotations

import hashlib
import json

import dagster as dg

from assets.partitions import beings
from jobs.ingest import ingest_job
from mindflow.config import load_settings
from mindflow.inbox import pending_days, pending_files


def inbox_run_request(settings_home: str | None = None, seen: frozenset[str] = frozenset()):
    """The run request covering every pending file not yet requested, and the new cursor set."""
    settings = load_settings(home=settings_home)
    files = pending_files(settings.inbox)
    keys = {f"{f.being_id}/{f.sha256}" for f in files}
    new = sorted(keys - seen)
    if not new:
        return None, keys, []
    days = pending_days(settings.inbox)
    all_days = sorted({d for ds in days.values() for d in ds})
    run_key = "ingest-" + hashlib.sha256("\n".join(sorted(keys)).encode()).hexdigest()[:16]
    if not all_days:
        return None, keys, sorted(days)
    request = dg.RunRequest(
        run_key=run_key,
        tags={
            "dagster/asset_partition_range_start": all_days[0].isoformat(),
            "dagster/asset_partition_range_end": all_days[-1].isoformat(),
            "mindflow/files": str(len(new)),
        },
    )
    return request, keys, sorted(days)


@dg.sensor(job=ingest_job, minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING)
def inbox_sensor(context: dg.SensorEvaluationContext):
    """Watch `$MINDFLOW_HOME/inbox/<being_id>/` and ingest the days new files cover."""
    seen = frozenset(json.loads(context.cursor)) if context.cursor else frozenset()
    request, keys, being_ids = inbox_run_request(seen=seen)
    known = set(context.instance.get_dynamic_partitions(beings.name))
    new_beings = [b for b in being_ids if b not in known]
    partition_requests = [beings.build_add_request(new_beings)] if new_beings else []
    cursor = json.dumps(sorted(keys))
    if request is None:
        return dg.SensorResult(
            skip_reason="no new inbox file", cursor=cursor, dynamic_partitions_requests=partition_requests
        )
    return dg.SensorResult(
        run_requests=[request], cursor=cursor, dynamic_partitions_requests=partition_requests
    )
