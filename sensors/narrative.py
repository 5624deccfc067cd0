"""Sensor `narrative_sensor`: starts the narrative job for a being whose unnarrated episodes pile up."""

import dagster as dg

from assets.partitions import beings
from jobs.narrative import narrative_job


@dg.sensor(job=narrative_job, minimum_interval_seconds=300, default_status=dg.DefaultSensorStatus.RUNNING)
def narrative_sensor(context: dg.SensorEvaluationContext):
    """A run for each being with more than MINDFLOW_NARRATIVE_PENDING_TOKENS unnarrated (default 5,000)."""
    from mindflow import narrative, store
    from mindflow.config import load_settings
    from mindflow.errors import MindflowError

    settings = load_settings()
    known = context.instance.get_dynamic_partitions(beings.name)
    if not known or not settings.duckdb_path.exists():
        return dg.SkipReason("no being has episodes yet")
    requests, below = [], []
    try:
        # Read-only: a job holding the file makes this evaluation skip, not wait.
        with store.connect(settings.duckdb_path, read_only=True) as con:
            for being in known:
                tokens, items, anchor = narrative.pending_tokens(con, settings, being)
                if tokens > settings.narrative_pending_tokens:
                    requests.append(
                        dg.RunRequest(
                            run_key=f"narrative-{being}-{anchor.isoformat() if anchor else 'none'}-{items}",
                            partition_key=being,
                            tags={"mindflow/pending_tokens": str(tokens)},
                        )
                    )
                else:
                    below.append(f"{being}={tokens}")
    except MindflowError as exc:
        return dg.SkipReason(f"DuckDB busy: {exc}")
    if not requests:
        return dg.SkipReason(f"pending tokens below {settings.narrative_pending_tokens}: {', '.join(below)}")
    return requests
