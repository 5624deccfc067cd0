"""Sensor `stale_run_sensor`: runs whose process is gone are marked failed, their slots freed."""

from __future__ import annotations

import dagster as dg

from mindflow.pool import StorageLocked, reap_stale_runs


@dg.sensor(minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING)
def stale_run_sensor(context: dg.SensorEvaluationContext):
    """Free pool `duckdb` from runs killed mid-way (kill -9, a machine restart).

    Dagster's default run launcher cannot check a run worker's health, so a run whose
    process died stays "started", and with pool granularity `run` the queue waits behind it
    for ever. This checks each unfinished run's process on this machine every 30 s.
    """
    try:
        report = reap_stale_runs(context.instance, log=context.log.warning)
    except StorageLocked as locked:
        return dg.SkipReason(f"{locked}; checked again at the next tick")
    if not report.failed and not report.freed_slots:
        return dg.SkipReason("every unfinished run has a live process")
    return dg.SkipReason(
        f"marked {len(report.failed)} run(s) failed whose process was gone; "
        f"freed the slots of {len(report.freed_slots)} finished run(s)"
    )
