"""Assets `story` and `core_memory`: each being's STORY.md narrative and MEMORY.md core memory."""

import dagster as dg

from assets.nodes import llm_metadata, resolve_llm
from assets.partitions import beings
from assets.policies import EXTERNAL_CALLS
from mindflow.resources import DuckDBResource

NARRATIVE = dict(
    partitions_def=beings,
    backfill_policy=dg.BackfillPolicy.single_run(),
    pool="duckdb",
    group_name="narrative",
    kinds={"duckdb", "markdown"},
)


def run_trigger(context: dg.AssetExecutionContext) -> str:
    """What started the run, for the commit's Trigger: line."""
    tags = context.run.tags
    for key, label in (
        ("dagster/schedule_name", "schedule"),
        ("dagster/sensor_name", "sensor"),
        ("dagster/backfill", "backfill"),
    ):
        if key in tags:
            return f"{label} {tags[key]}"
    return "manual run"


def integrity_check(report) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        check_name="critical_files_unchanged",
        passed=report.ok,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={
            "changed": report.changed and ", ".join(report.changed) or "none",
            "checked": report.checked,
            "what_to_do": "inspect with `mindflow audit --action ALERT`, then `mindflow audit --accept FILE` "
            "or `mindflow rollback FILE --to COMMIT` (a new file nobody approved: delete it)",
        },
    )


@dg.asset(
    deps=[dg.AssetDep("episodes", partition_mapping=dg.AllPartitionMapping()), "nodes"],
    check_specs=[
        dg.AssetCheckSpec(
            "critical_files_unchanged",
            asset="story",
            blocking=False,
            description="SOUL.md, IDENTITY.md and the configuration match the checksums recorded in DuckDB, "
            "no new one appeared, and meta/integrity.json agrees.",
        )
    ],
    code_version="1",
    retry_policy=EXTERNAL_CALLS,
    **NARRATIVE,
)
def story(context: dg.AssetExecutionContext, duckdb: DuckDBResource) -> dg.MaterializeResult:
    """A being's first-person STORY.md, narrated up to its LAST_PROCESSED anchor."""
    from mindflow import audit, narrative

    settings = duckdb.settings()
    # A broken model setting is logged and recorded (llm_config_error); the chronicle is still written.
    model, llm_meta = resolve_llm(context, settings, "narrative")
    if model is None:
        context.log.info("no usable narrative model (MINDFLOW_LLM): writing a mechanical chronicle")
    reports = []
    with duckdb.connect() as con:
        integrity = audit.verify_critical(settings, con, run_id=context.run_id)
    for key in integrity.new_alerts:
        context.log.warning(f"ALERT: critical file {key} changed outside mindflow")
    for group, con in duckdb.beings(context.partition_keys):
        for being_id in group:
            report = narrative.narrate(
                con,
                settings,
                being_id,
                llm=model,
                run_id=context.run_id,
                trigger=run_trigger(context),
                log=context.log.info,
            )
            # Counts only: Dagster's event log cannot be edited, so no memory content (a chapter
            # title, an episode's words) may reach it, or a permanent forget could not erase it.
            context.log.info(
                f"{being_id}: {report.mode}, {report.items} episodes narrated, "
                f"{report.chapters_added} chapters added, {report.failed_batches} failed batches"
            )
            reports.append(report)
    first = reports[0] if reports else None
    preview = narrative.outline(settings, first.being_id) if first is not None else ""
    rows = "\n".join(
        f"| {r.being_id} | {r.mode} | {r.items} | {r.chapters_added} | {r.failed_batches} | {r.words} | "
        f"{r.anchor_after.isoformat() if r.anchor_after else '-'} |"
        for r in reports
    )
    return dg.MaterializeResult(
        metadata={
            "narrated": sum(r.items for r in reports),
            "chapters_added": sum(r.chapters_added for r in reports),
            "batches": sum(r.batches for r in reports),
            "failed_batches": sum(r.failed_batches for r in reports),
            "skipped_technical": sum(r.skipped_technical for r in reports),
            "legacy_entries": sum(r.legacy_entries for r in reports),
            "mode": "llm" if model is not None else "mechanical",
            "errors": "; ".join(e for r in reports for e in r.errors) or "none",
            "per_being": dg.MetadataValue.md(
                "| being | mode | narrated | chapters | failed batches | words | anchor |\n"
                "|---|---|---|---|---|---|---|\n" + rows
            ),
            "outline": dg.MetadataValue.md(preview or "(no story)"),
            **integrity.metadata(),
            **llm_metadata(model, llm_meta),
        },
        check_results=[integrity_check(integrity)],
    )


@dg.asset(
    deps=["story", "nodes", "decay_scores"],
    code_version="1",
    retry_policy=EXTERNAL_CALLS,
    **NARRATIVE,
)
def core_memory(context: dg.AssetExecutionContext, duckdb: DuckDBResource) -> dg.MaterializeResult:
    """A being's MEMORY.md: Identity, Active Context, Persona, Critical Facts, under 3,000 tokens."""
    from mindflow.core_memory import MAX_TOKENS, build_core_memory

    settings = duckdb.settings()
    model, llm_meta = resolve_llm(context, settings, "narrative")
    reports = []
    for group, con in duckdb.beings(context.partition_keys):
        for being_id in group:
            report = build_core_memory(
                con, settings, being_id, llm=model, run_id=context.run_id, trigger=run_trigger(context)
            )
            if report.error:
                context.log.warning(
                    f"{being_id}: model rewrite failed, kept the mechanical version: {report.error}"
                )
            reports.append(report)
    # Sizes only, never the text (see `story`).
    preview = ""
    if reports:
        path = settings.workspace / reports[0].being_id / "MEMORY.md"
        if path.exists():
            text = path.read_text()
            lines, size = len(text.splitlines()), len(text.encode())
            preview = f"{reports[0].being_id}/MEMORY.md: {lines} lines, {size} bytes"
    return dg.MaterializeResult(
        metadata={
            "max_tokens": max((r.tokens for r in reports), default=0),
            "cap": MAX_TOKENS,
            "pinned": sum(r.pinned for r in reports),
            "dropped_lines": sum(r.dropped for r in reports),
            "changed": sum(r.changed for r in reports),
            "modes": ", ".join(sorted({r.mode for r in reports})) or "none",
            "per_being": dg.MetadataValue.md(
                "| being | mode | tokens | "
                + " | ".join(("identity", "active", "persona", "critical"))
                + " |\n|---|---|---|---|---|---|---|\n"
                + "\n".join(
                    f"| {r.being_id} | {r.mode} | {r.tokens} | "
                    + " | ".join(str(v) for v in r.counts.values())
                    + " |"
                    for r in reports
                )
            ),
            "size": preview or "(none)",
            **llm_metadata(model, llm_meta),
        },
    )
