"""Sensor `ebook_folder_sensor`: reindexes ebooks when documents are added, changed or removed."""

from __future__ import annotations

import hashlib
import json

import dagster as dg

from jobs.ebooks import ebook_reindex_job
from mindflow.config import load_settings
from mindflow.rag.folder import fingerprints, folder_changes, indexed_fingerprints


def ebook_run_request(cursor: str | None) -> tuple[dg.RunRequest | None, str | None, dict[str, list[str]]]:
    """A run request when the folder differs from the cursor's fingerprints, and the new cursor.

    A file only touched (same size and content) is not a change; its new time goes into the cursor.
    Without a cursor (the first tick) the folder is compared with what the index was built from
    (`ebook_documents`), so a folder already indexed by the CLI or an earlier run starts no run.
    While a job holds DuckDB that first comparison waits for a later tick (cursor left unset).
    """
    settings = load_settings()
    if cursor:
        previous = json.loads(cursor)
    else:
        indexed = indexed_fingerprints(settings)
        if indexed is None:
            return None, None, {}
        previous = indexed
    current = fingerprints(settings.ebooks, previous)
    changes = folder_changes(previous, current)
    new_cursor = json.dumps(current, sort_keys=True)
    if not any(changes.values()):
        return None, new_cursor, changes
    digest = hashlib.sha256(new_cursor.encode()).hexdigest()[:16]
    request = dg.RunRequest(
        run_key=f"ebooks-{digest}",
        tags={f"mindflow/{kind}": str(len(ids)) for kind, ids in changes.items()},
    )
    return request, new_cursor, changes


@dg.sensor(job=ebook_reindex_job, minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING)
def ebook_folder_sensor(context: dg.SensorEvaluationContext):
    """Watch the ebook folder ($MINDFLOW_HOME/ebooks) and reindex what changed."""
    request, cursor, changes = ebook_run_request(context.cursor)
    if cursor is None:
        return dg.SensorResult(skip_reason="DuckDB is held by a running job: compared on a later tick")
    if request is None:
        return dg.SensorResult(skip_reason="no document added, changed or removed", cursor=cursor)
    context.log.info(", ".join(f"{kind}: {len(ids)}" for kind, ids in changes.items()))
    return dg.SensorResult(run_requests=[request], cursor=cursor)
