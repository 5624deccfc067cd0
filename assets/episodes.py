"""Asset `episodes`: what happened to each being, landed from the inbox, one row per episode."""

from datetime import timedelta

import dagster as dg

from assets.partitions import beings, daily
from mindflow import audit
from mindflow.inbox import ingest
from mindflow.loop.forget import propose_ingested
from mindflow.models import utcnow
from mindflow.resources import DuckDBResource, MindflowHome


@dg.asset(
    partitions_def=daily,
    backfill_policy=dg.BackfillPolicy.single_run(),
    pool="duckdb",
    group_name="ingest",
    kinds={"duckdb"},
    code_version="1",
)
def episodes(
    context: dg.AssetExecutionContext, duckdb: DuckDBResource, mindflow_home: MindflowHome
) -> dg.MaterializeResult:
    """Episodes per being and day, parsed from inbox JSONL, OpenClaw transcripts and daily logs."""
    window = context.partition_time_window
    start, end = window.start.date(), (window.end - timedelta(days=1)).date()
    settings = mindflow_home.settings()
    with duckdb.connect() as con:
        # Critical files are verified at the start of every run; changes are logged as ALERT.
        integrity = audit.verify_critical(settings, con, run_id=context.run_id)
        started = utcnow()
        report = ingest(con, settings.inbox, start, end, max_chars=settings.max_episode_chars)
        # "Forget about ..." in a dropped file waits for a person like one sent to the API.
        proposals = propose_ingested(con, settings, started)
        total = con.execute("SELECT count(*) FROM episodes").fetchone()[0]
        in_range = con.execute(
            "SELECT count(*) FROM episodes WHERE day BETWEEN ? AND ?", [start, end]
        ).fetchone()[0]
        all_beings = [
            r[0] for r in con.execute("SELECT DISTINCT being_id FROM episodes ORDER BY 1").fetchall()
        ]
    known = set(context.instance.get_dynamic_partitions(beings.name))
    new_beings = [b for b in all_beings if b not in known]
    if new_beings:
        context.instance.add_dynamic_partitions(beings.name, new_beings)
        context.log.info(f"new beings: {', '.join(new_beings)}")
    if report.quarantined:
        context.log.warning(
            f"{report.quarantined} malformed lines quarantined: {', '.join(report.quarantine_files)}"
        )
    preview = "\n".join(
        ["| being | new episodes |", "|---|---|"]
        + [f"| {b} | {n} |" for b, n in sorted(report.new_per_being.items())]
    )
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": dg.MetadataValue.int(total),
            "episodes_in_partitions": in_range,
            "days": f"{start} .. {end}",
            "new": report.new,
            "duplicates": report.duplicates,
            "quarantined": report.quarantined,
            "heartbeats_skipped": report.heartbeats,
            **integrity.metadata(),
            "files_parsed": report.files,
            "files_done": report.moved_to_done,
            "outside_partitions": report.out_of_range,
            "new_beings": ", ".join(new_beings) or "none",
            "forget_proposals": len(proposals),
            "per_being": dg.MetadataValue.md(preview),
            # Read by `form_sensor`: which beings' new episodes a form run should publish.
            "new_per_being": dg.MetadataValue.json(report.new_per_being),
            "quarantine_files": dg.MetadataValue.json(report.quarantine_files),
        }
    )
