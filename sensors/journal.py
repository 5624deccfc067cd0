"""Sensor `journal_files_sensor`: reindexes a being's memory files when they change."""

from __future__ import annotations

import hashlib
import json

import dagster as dg

from assets.partitions import beings
from jobs.journal import journal_reindex_job


def journal_run_requests(known: list[str]) -> tuple[list[dg.RunRequest], list[str]]:
    """A run per known being whose memory files differ from what `journal_chunks` was built from.

    Compared with DuckDB's `journal_files` (read-only) at every tick, so a file the narrative
    job already indexed starts no run. The run key is the being's file fingerprints: the same
    change is requested once. MindflowError when a job holds the DuckDB file.
    """
    from mindflow import journal_index, store
    from mindflow.config import load_settings

    settings = load_settings()
    if not settings.duckdb_path.exists():
        return [], []
    with store.connect(settings.duckdb_path, read_only=True) as con:
        indexed = journal_index.indexed_fingerprints(con)
    requests, unchanged = [], []
    for being in known:
        now = journal_index.file_fingerprints(settings.workspace, being)
        if now == indexed.get(being, {}):
            unchanged.append(being)
            continue
        digest = hashlib.sha256(json.dumps(now, sort_keys=True).encode()).hexdigest()[:16]
        requests.append(dg.RunRequest(run_key=f"journal-{being}-{digest}", partition_key=being))
    return requests, unchanged


@dg.sensor(
    job=journal_reindex_job, minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING
)
def journal_files_sensor(context: dg.SensorEvaluationContext):
    """Watch each being's MEMORY.md, STORY.md, think.md, diary/ and memory/ and reindex what changed."""
    from mindflow.errors import MindflowError

    known = context.instance.get_dynamic_partitions(beings.name)
    if not known:
        return dg.SkipReason("no being has episodes yet")
    try:
        requests, unchanged = journal_run_requests(known)
    except MindflowError as exc:
        return dg.SkipReason(f"DuckDB busy: {exc}")
    if not requests:
        return dg.SkipReason(f"memory files unchanged since indexed: {', '.join(unchanged) or 'none'}")
    return requests
