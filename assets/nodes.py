"""Assets `scene_notes` and `nodes`: each being's scenes and the memory nodes formed from them."""

import dagster as dg

from assets.partitions import beings
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


@dg.asset(deps=[ALL_EPISODES], **(PATROL | {"code_version": "2"}))
def scene_notes(context: dg.AssetExecutionContext, duckdb: DuckDBResource) -> dg.MaterializeResult:
    """Scenes extracted from a being's episodes: by the extraction model in batches when one is
    configured (with entities, facts and relations), else one scene per episode."""
    from mindflow import extraction

    per_being = {}
    llm, llm_meta = resolve_llm(context, duckdb.settings(), "extraction")
    with duckdb.connect() as con:
        # Critical files are verified at the start of every run (the first asset of extraction and patrol).
        integrity = audit.verify_critical(duckdb.settings(), con, run_id=context.run_id)
        for being_id in context.partition_keys:
            if llm is not None:
                report = extraction.extract(
                    con, being_id, llm, utcnow(),
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
            "relations",
            "aliases",
        ):
            metadata[key] = total(key)
    return dg.MaterializeResult(metadata=llm_metadata(llm, {**metadata, **llm_meta, **integrity.metadata()}))


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
    **(PATROL | {"code_version": "3"}),
)
def nodes(
    context: dg.AssetExecutionContext, duckdb: DuckDBResource, embeddings: EmbeddingResource
) -> dg.MaterializeResult:
    """Memory nodes of a being: scene, feeling, importance, cluster, session count and status."""
    params = patrol.PatrolParams()
    embedder = embeddings.embedder()
    embedder.progress = lambda done, total: context.log.info(f"embedded {done}/{total} new node texts")
    llm, llm_meta = resolve_llm(context, duckdb.settings(), "patrol")
    if llm is None:
        context.log.info(patrol.BYOK_SKIP_MESSAGE)
    per_being: dict[str, dict[str, int]] = {}
    misplaced = 0
    events_dir = duckdb.settings().events
    run_started = utcnow()
    with duckdb.connect() as con:
        # Critical files are verified at the start of every run; changes are logged as ALERT.
        integrity = audit.verify_critical(duckdb.settings(), con, run_id=context.run_id)
        patrol.embed_new_scenes(con, list(context.partition_keys), embedder)
        for being_id in context.partition_keys:
            now = utcnow()
            folded = patrol.step_fold_events(con, being_id, events_dir, now)
            steps = [
                folded,
                patrol.ensure_roots(con, being_id, now),
                patrol.step_nodes(con, being_id, embedder, params, now, llm=llm),
                patrol.step_session_counts(con, being_id, now),
                patrol.step_dying(con, being_id, params, now),
            ]
            # ❹ sits between ❸ and ❺ in the seed; ❻ after ❺. Both need the patrol model.
            consolidated = patrol.step_consolidate(con, being_id, llm, now) if llm is not None else None
            steps.append(patrol.step_revive(con, being_id, params, now))
            split = patrol.step_split(con, being_id, llm, params, now) if llm is not None else None
            done = [step for step in [*steps, consolidated, split] if step is not None]
            # One line per being: each log line is an event Dagster writes to its SQLite log.
            context.log.info(f"{being_id}: " + "; ".join(f"{step.step} {step.counts}" for step in done))
            for step in done:
                for error in step.errors:  # why an LLM answer was rejected (never a key)
                    context.log.warning(f"{being_id} {step.step}: {error}")
            statuses = dict(
                con.execute(
                    "SELECT status, count(*) FROM nodes WHERE being_id = ? GROUP BY 1", [being_id]
                ).fetchall()
            )
            misplaced += con.execute(
                "SELECT count(*) FROM nodes n LEFT JOIN clusters c ON c.cluster_id = n.cluster_id "
                "WHERE n.being_id = ? AND (c.cluster_id IS NULL OR c.being_id <> n.being_id)",
                [being_id],
            ).fetchall()[0][0]
            per_being[being_id] = {
                "nodes": sum(statuses.values()),
                "recall_events": folded.counts["events"],
                "reinforced": folded.counts["reinforced"],
                **steps[2].counts,
                "sessions_advanced": steps[3].counts["advanced"],
                "dying": steps[4].counts["dying"],
                "revived": steps[5].counts["revived"],
                "active_total": statuses.get("active", 0),
                "dying_total": statuses.get("dying", 0),
                "dead_total": statuses.get("dead", 0),
                "merged": consolidated.counts["merged"] if consolidated else 0,
                "made_dead": consolidated.counts["made_dead"] if consolidated else 0,
                "new_subclusters": split.counts["new_subclusters"] if split else 0,
                "rejected_llm_answers": (
                    steps[2].counts["root_rejected"]
                    + consolidated.counts["rejected"]
                    + split.counts["rejected"]
                )
                if llm is not None
                else 0,
            }
        # Dying and revived nodes (the history rows of this run) as table-level audit rows.
        log_history(con, duckdb.settings(), since=run_started, run_id=context.run_id, actor="patrol")

    def total(key: str) -> int:
        return sum(counts[key] for counts in per_being.values())

    if llm is not None:
        llm_meta |= {
            "llm_steps": "root classification, ❹ consolidation, ❻ split",
            "merged": total("merged"),
            "made_dead": total("made_dead"),
            "new_subclusters": total("new_subclusters"),
            "root_by_llm": total("root_by_llm"),
            "rejected_llm_answers": total("rejected_llm_answers"),
        }
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": total("nodes"),
            "recall_events": total("recall_events"),
            "reinforced": total("reinforced"),
            "new": total("new"),
            "to_subcluster": total("to_subcluster"),
            "to_root": total("to_root"),
            "sessions_advanced": total("sessions_advanced"),
            "dying": total("dying"),
            "revived": total("revived"),
            "active": total("active_total"),
            "dying_total": total("dying_total"),
            "dead_total": total("dead_total"),
            "embedded": embedder.stats["embedded"],
            "embeddings_from_cache": embedder.stats["cached"],
            "llm_steps": "skipped: no model configured (mechanical processing only)",
            "per_being": per_being_table(per_being),
            **integrity.metadata(),
            **llm_metadata(llm, llm_meta),
        },
        check_results=[
            dg.AssetCheckResult(
                check_name="nodes_in_own_beings_clusters",
                passed=misplaced == 0,
                metadata={"misplaced_nodes": misplaced},
            )
        ],
    )
