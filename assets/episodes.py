"""Asset `episodes`: what happened to each being, landed from the inbox, one row per episode."""

from datetime import date

import dagster as dg

from assets.partitions import beings, days
from mindflow import audit
from mindflow.inbox import ingest
from mindflow.loop import erase
from mindflow.loop.forget import propose_ingested
from mindflow.models import utcnow
from mindflow.resources import DuckDBResource, MindflowHome


@dg.asset(
    partitions_def=days,
    backfill_policy=dg.BackfillPolicy.single_run(),
    pool="duckdb",
    group_name="ingest",
    kinds={"duckdb"},
    code_version="3",
)
def episodes(
    context: dg.AssetExecutionContext, duckdb: DuckDBResource, mindflow_home: MindflowHome
) -> dg.MaterializeResult:
    """Episodes per being and day, parsed from inbox JSONL, OpenClaw transcripts and daily logs.

    Partitioned by the days that hold episodes. A run covers the days of its partition keys
    (a range of them, in a backfill) and records one materialization per day, with that day's
    own `dagster/row_count` and `new_on_day`; the rest (new, duplicates, quarantined, files) is the
    run's, the same on each of its days.
    """
    run_days = sorted(date.fromisoformat(key) for key in context.partition_keys)
    start, end = run_days[0], run_days[-1]
    settings = mindflow_home.settings()
    with duckdb.connect() as con:
        # Critical files are verified at the start of every run; changes are logged as ALERT.
        integrity = audit.verify_critical(settings, con, run_id=context.run_id)
        started = utcnow()
        before = _rows_per_day(con, start, end)
        new_beings: list[str] = []

        def register(beings_in_run: set[str]) -> None:
            # Before their episodes are stored: a run killed after the INSERT leaves no stored
            # being outside the partitions that patrol and its schedules run over.
            known = set(context.instance.get_dynamic_partitions(beings.name))
            if new := sorted(beings_in_run - known):
                context.instance.add_dynamic_partitions(beings.name, new)
                context.log.info(f"new beings: {', '.join(new)}")
                new_beings.extend(new)

        report = ingest(
            con,
            settings.inbox,
            start,
            end,
            days=set(run_days),
            max_chars=settings.max_episode_chars,
            before_storing=register,
            # A permanent forget is final: its episodes are never stored again, nor their lines kept.
            deleted=lambda being_id: erase.deleted(con, settings.loop, being_id),
        )
        # "Forget about ..." in a dropped file waits for a person like one sent to the API.
        proposals = propose_ingested(con, settings, started)
        after = _rows_per_day(con, start, end)
        total = con.execute("SELECT count(*) FROM episodes").fetchone()[0]
        stored_days = [r[0].isoformat() for r in con.execute("SELECT DISTINCT day FROM episodes").fetchall()]
        all_beings = [
            r[0] for r in con.execute("SELECT DISTINCT being_id FROM episodes ORDER BY 1").fetchall()
        ]
    for day in run_days:
        rows = after.get(day, 0)
        context.add_asset_metadata(
            {"dagster/row_count": dg.MetadataValue.int(rows), "new_on_day": rows - before.get(day, 0)},
            partition_key=day.isoformat(),
        )
    # Days stored before they were partitions (a home from before `days`) become partitions too.
    known_days = set(context.instance.get_dynamic_partitions(days.name))
    if unknown_days := sorted(set(stored_days) - known_days):
        context.instance.add_dynamic_partitions(days.name, unknown_days)
    # Beings stored before they were partitions (a run of an earlier version killed after storing).
    register(set(all_beings))
    if report.quarantined:
        context.log.warning(
            f"{report.quarantined} malformed lines quarantined: {', '.join(report.quarantine_files)}"
        )
    if report.deleted:
        context.log.info(
            f"{report.deleted} episodes not stored: they were permanently forgotten "
            "(their lines left out of the files moved to inbox/.done)"
        )
    preview = "\n".join(
        ["| being | new episodes |", "|---|---|"]
        + [f"| {b} | {n} |" for b, n in sorted(report.new_per_being.items())]
    )
    return dg.MaterializeResult(
        metadata={
            "episodes_in_table": total,
            "episodes_in_run": sum(after.get(day, 0) for day in run_days),
            "days": f"{start} .. {end}" if len(run_days) > 1 else str(start),
            "new": report.new,
            "duplicates": report.duplicates,
            "quarantined": report.quarantined,
            "heartbeats_skipped": report.heartbeats,
            # Only when some were refused: `mindflow run` prints it then (deleted=1).
            **({"deleted": report.deleted} if report.deleted else {}),
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


def _rows_per_day(con, start: date, end: date) -> dict[date, int]:
    rows = con.execute(
        "SELECT day, count(*) FROM episodes WHERE day BETWEEN ? AND ? GROUP BY day", [start, end]
    ).fetchall()
    return dict(rows)
