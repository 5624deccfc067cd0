"""Assets `scene_notes` and `nodes`: each being's scenes and the memory nodes formed from them."""

from typing import Literal

import dagster as dg

from assets.partitions import beings
from assets.policies import EXTERNAL_CALLS
from mindflow import audit, patrol
from mindflow.audit.tables import log_history
from mindflow.models import utcnow
from mindflow.resources import DuckDBResource, EmbeddingResource

ALL_EPISODES = dg.AssetDep("episodes", partition_mapping=dg.AllPartitionMapping())
# A run may cover several beings (a backfill, or `mindflow run patrol`): each asset
# handles every being of its partition range in one step.
PATROL = dict(
    partitions_def=beings,
    backfill_policy=dg.BackfillPolicy.single_run(),
    pool="duckdb",
    group_name="patrol",
    kinds={"duckdb"},
    code_version="1",
)


def per_being_table(rows: dict[str, dict[str, int]]) -> dg.MetadataValue:
    """A markdown table, one row per being, for the UI."""
    columns = sorted({k for counts in rows.values() for k in counts})
    lines = ["| being | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    lines += [
        f"| {being} | " + " | ".join(str(counts.get(c, 0)) for c in columns) + " |"
        for being, counts in sorted(rows.items())
    ]
    return dg.MetadataValue.md("\n".join(lines))


def resolve_llm(context: dg.AssetExecutionContext, settings, purpose: str):
    """(the purpose's LLM chain or None, metadata); a bad model setting is logged, not fatal.

    A run with a broken LLM configuration still does its mechanical work. Every asset of
    a run shares the run's model time budget and breakers (keyed by the run id), and the
    one line saying the run stops asking a model goes to the run's log.
    """
    from mindflow.errors import MindflowError
    from mindflow.llm import resolve

    try:
        llm = resolve(settings, purpose, run_id=context.run_id, notice=context.log.warning)
    except MindflowError as exc:
        context.log.error(f"LLM configuration: {exc}; running mechanically")
        return None, {"llm_config_error": str(exc)}
    if llm is None:
        return None, {}
    context.log.info(f"{purpose} model: {' -> '.join(str(s) for s in llm.specs)}")
    return llm, {"llm/model": llm.model}


def llm_metadata(llm, extra: dict) -> dict:
    """Calls, failures, failovers, tokens and cost of this run's LLM use (never keys)."""
    return {**extra, **(llm.metadata() if llm is not None else {})}


@dg.asset(deps=[ALL_EPISODES], retry_policy=EXTERNAL_CALLS, **(PATROL | {"code_version": "2"}))
def scene_notes(context: dg.AssetExecutionContext, duckdb: DuckDBResource) -> dg.MaterializeResult:
    """Scenes extracted from a being's episodes: by the extraction model in batches when one is
    configured (with entities, facts and relations), else one scene per episode."""
    from mindflow import extraction
    from mindflow.reflection.modes import in_review

    per_being = {}
    llm, llm_meta = resolve_llm(context, duckdb.settings(), "extraction")
    with duckdb.connect() as con:
        # Critical files are verified at the start of every run (the first asset of extraction and patrol).
        integrity = audit.verify_critical(duckdb.settings(), con, run_id=context.run_id)
    for group, con in duckdb.beings(context.partition_keys):
        for being_id in group:
            if llm is not None:
                report = extraction.extract(
                    con, being_id, llm, utcnow(), supersede=not in_review(duckdb.settings(), being_id),
                    progress=lambda done, total, b=being_id: context.log.info(
                        f"{b}: extracted batch {done}/{total}"
                    ),
                )  # fmt: skip
                counts = report.counts()
                for error in report.errors:
                    context.log.warning(f"{being_id} extraction: {error}")
                new = report.scenes
            else:
                counts = {}
                new = patrol.step_scenes(con, being_id, utcnow()).counts["new"]
            total, failed = con.execute(
                "SELECT count(*), count(*) FILTER (WHERE note_status <> 'ok') FROM scene_notes "
                "WHERE being_id = ?",
                [being_id],
            ).fetchall()[0]
            per_being[being_id] = {"scenes": total, **counts, "new": new, "parse_failed": failed}

    def total(key: str) -> int:
        return sum(c.get(key, 0) for c in per_being.values())

    metadata = {
        "dagster/row_count": total("scenes"),
        "new": total("new"),
        "parse_failed": total("parse_failed"),
        "extractor": llm.model if llm is not None else "mechanical",
        "per_being": per_being_table(per_being),
    }
    if llm is not None:
        for key in (
            "batches",
            "repaired",
            "pending",
            "facts_new",
            "facts_superseded",
            "facts_flagged",
            "relations",
            "aliases",
        ):
            metadata[key] = total(key)
    return dg.MaterializeResult(metadata=llm_metadata(llm, {**metadata, **llm_meta, **integrity.metadata()}))


class NodesConfig(dg.Config):
    """Which steps the `nodes` asset runs: the whole patrol (nightly), or ❶ only (the `form` job)."""

    steps: Literal["patrol", "form"] = "patrol"


@dg.asset(
    deps=[scene_notes],
    check_specs=[
        dg.AssetCheckSpec(
            "nodes_in_own_beings_clusters",
            asset="nodes",
            blocking=True,
            description="No node sits in another being's cluster, or in no cluster at all.",
        )
    ],
    retry_policy=EXTERNAL_CALLS,
    **(PATROL | {"code_version": "4"}),
)
def nodes(
    context: dg.AssetExecutionContext,
    config: NodesConfig,
    duckdb: DuckDBResource,
    embeddings: EmbeddingResource,
) -> dg.MaterializeResult:
    """Memory nodes of a being: scene, feeling, importance, cluster, session count and status."""
    settings = duckdb.settings()
    embedder = embeddings.embedder()
    embedder.progress = lambda done, total: context.log.info(f"embedded {done}/{total} new node texts")
    llm, llm_meta = resolve_llm(context, settings, "patrol")
    if llm is None and config.steps == "patrol":
        context.log.info(patrol.BYOK_SKIP_MESSAGE)
    step = patrol.form if config.steps == "form" else patrol.run
    # ❷ counts a patrol session once: a retry of this step runs in the same run, a re-execution
    # (after a crash, say) names the run it re-executes as its root.
    session = {} if config.steps == "form" else {"session_run": context.run.root_run_id or context.run_id}
    reports = {}
    run_started = utcnow()
    with duckdb.connect() as con:
        # Critical files are verified at the start of every run; changes are logged as ALERT.
        integrity = audit.verify_critical(settings, con, run_id=context.run_id)
    for group, con in duckdb.beings(context.partition_keys):
        patrol.embed_new_scenes(con, group, embedder)
        for being_id in group:
            report = step(
                con, being_id, embedder, patrol.PatrolParams(), utcnow(), events_dir=settings.events,
                llm=llm, settings=settings, run_id=context.run_id, **session,
            )  # fmt: skip
            _log(context, being_id, report)
            reports[being_id] = report
        # Formed, dying and revived nodes (the history rows of this run) as table-level audit rows,
        # by the job that ran: `form` (❶ only) or `patrol`.
        log_history(con, settings, since=run_started, run_id=context.run_id, actor=config.steps)
    return nodes_result(config.steps, reports, embedder, llm, llm_meta, integrity.metadata())


def _log(context: dg.AssetExecutionContext, being_id: str, report) -> None:
    # One line per being: each log line is an event Dagster writes to its SQLite log.
    steps = report.steps()
    context.log.info(f"{being_id}: " + "; ".join(f"{s.step} {s.counts}" for s in steps))
    for s in steps:
        for error in s.errors:  # why an LLM answer was rejected (never a key)
            context.log.warning(f"{being_id} {s.step}: {error}")


def nodes_result(
    mode: str, reports: dict, embedder, llm, llm_meta: dict, integrity: dict
) -> dg.MaterializeResult:
    """The reports of a patrol or a form run as the asset's metadata and check result."""
    if mode == "form":
        per_being = {b: r.counts() for b, r in reports.items()}
        misplaced = sum(r.misplaced for r in reports.values())
    else:
        per_being = {b: r.counts(llm is not None) for b, r in reports.items()}
        misplaced = sum(r.form.misplaced for r in reports.values())

    def total(key: str) -> int:
        return sum(counts.get(key, 0) for counts in per_being.values())

    if llm is not None and mode == "patrol":
        llm_meta |= {
            "llm_steps": "root classification, ❹ consolidation, ❻ split",
            "merged": total("merged"),
            "made_dead": total("made_dead"),
            "new_subclusters": total("new_subclusters"),
            "root_by_llm": total("root_by_llm"),
            "rejected_llm_answers": total("rejected_llm_answers"),
        }
    metadata = {
        "mode": mode,
        "dagster/row_count": total("nodes"),
        "recall_events": total("recall_events"),
        "reinforced": total("reinforced"),
        "new": total("new"),
        "to_subcluster": total("to_subcluster"),
        "to_root": total("to_root"),
        "forgotten": total("forgotten"),
    }
    if mode == "patrol":
        metadata |= {
            "sessions_advanced": total("sessions_advanced"),
            "sessions_already_counted": total("sessions_already_counted"),
            "dying": total("dying"),
            "revived": total("revived"),
        }
    metadata |= {
        "active": total("active_total"),
        "dying_total": total("dying_total"),
        "dead_total": total("dead_total"),
        "embedded": embedder.stats["embedded"],
        "embeddings_from_cache": embedder.stats["cached"],
        "llm_steps": "skipped: no model configured (mechanical processing only)"
        if mode == "patrol"
        else "❶ only (form run): root classification with a patrol model",
        "per_being": per_being_table(per_being),
        **integrity,
        **llm_metadata(llm, llm_meta),
    }
    return dg.MaterializeResult(
        metadata=metadata,
        check_results=[
            dg.AssetCheckResult(
                check_name="nodes_in_own_beings_clusters",
                passed=misplaced == 0,
                metadata={"misplaced_nodes": misplaced},
            )
        ],
    )
