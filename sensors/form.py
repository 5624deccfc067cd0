"""Sensor `form_sensor`: a `form` run for each being an ingest run brought new episodes."""

from __future__ import annotations

import json

import dagster as dg

from jobs.form import FORM_RUN_CONFIG, form_job

EPISODES = dg.AssetKey("episodes")
# Materializations read per tick; a range ingest writes one per day of its range.
BATCH = 1_000


def form_run_requests(
    instance: dg.DagsterInstance, cursor: str | None
) -> tuple[list[dg.RunRequest], str | None]:
    """Run requests for the beings with new episodes in `episodes` materializations after `cursor`.

    Every materialization of a range run carries the run's `new_per_being`; each being gets
    one run per tick, keyed by the newest materialization seen, so a tick evaluated twice
    asks for nothing twice.
    """
    after = int(cursor) if cursor else None
    found = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=EPISODES, after_storage_id=after), limit=BATCH, ascending=True
    )
    if not found.records:
        return [], cursor
    beings: dict[str, int] = {}
    runs: set[str] = set()
    for record in found.records:
        if record.run_id in runs:  # a range run's other days: the same run's counts again
            continue
        runs.add(record.run_id)
        materialization = record.asset_materialization
        entry = materialization.metadata.get("new_per_being") if materialization else None
        new = entry.value if entry is not None else {}
        if isinstance(new, str):
            new = json.loads(new)
        for being, count in (new or {}).items():
            if count:
                beings[being] = beings.get(being, 0) + int(count)
    last = max(record.storage_id for record in found.records)
    requests = [
        dg.RunRequest(
            run_key=f"form-{being}-{last}",
            partition_key=being,
            run_config=FORM_RUN_CONFIG,
            tags={"mindflow/new_episodes": str(count)},
        )
        for being, count in sorted(beings.items())
    ]
    return requests, str(last)


@dg.sensor(job=form_job, minimum_interval_seconds=10, default_status=dg.DefaultSensorStatus.RUNNING)
def form_sensor(context: dg.SensorEvaluationContext):
    """After each ingest run, form and publish the new episodes of the beings it touched."""
    requests, cursor = form_run_requests(context.instance, context.cursor)
    if not requests:
        return dg.SensorResult(skip_reason="no ingest run brought new episodes", cursor=cursor)
    context.log.info(", ".join(f"{r.partition_key}: {r.tags['mindflow/new_episodes']}" for r in requests))
    return dg.SensorResult(run_requests=requests, cursor=cursor)
