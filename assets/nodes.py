"""Assets `scene_notes` and `nodes`: each being's scenes and the memory nodes formed from them."""

import dagster as dg

from assets.partitions import beings
from mindflow import patrol
from mindflow.models import utcnow
from mindflow.resources import DuckDBResource, EmbeddingResource

ALL_EPISODES = dg.AssetDep("episodes", partition_mapping=dg.AllPartitionMapping())


@dg.asset(
    partitions_def=beings,
    deps=[ALL_EPISODES],
    pool="duckdb",
    group_name="patrol",
    kinds={"duckdb"},
    code_version="1",
)
def scene_notes(context: dg.AssetExecutionContext, duckdb: DuckDBResource) -> dg.MaterializeResult:
    """Scenes extracted from a being's episodes (mechanically: one scene per episode)."""
    being_id = context.partition_key
    with duckdb.connect() as con:
        report = patrol.step_scenes(con, being_id, utcnow())
        total, failed = con.execute(
            "SELECT count(*), count(*) FILTER (WHERE note_status <> 'ok') FROM scene_notes "
            "WHERE being_id = ?",
            [being_id],
        ).fetchone()
    return dg.MaterializeResult(
        metadata={"dagster/row_count": total, "new": report.counts["new"], "parse_failed": failed}
    )


@dg.asset(
    partitions_def=beings,
    deps=[scene_notes],
    pool="duckdb",
    group_name="patrol",
    kinds={"duckdb"},
    code_version="1",
    check_specs=[
        dg.AssetCheckSpec(
            "nodes_in_own_beings_clusters",
            asset="nodes",
            blocking=True,
            description="No node sits in another being's cluster, or in no cluster at all.",
        )
    ],
)
def nodes(
    context: dg.AssetExecutionContext, duckdb: DuckDBResource, embeddings: EmbeddingResource
) -> dg.MaterializeResult:
    """Memory nodes of a being: scene, feeling, importance, cluster, session count and status."""
    being_id = context.partition_key
    now = utcnow()
    params = patrol.PatrolParams()
    embedder = embeddings.embedder()
    embedder.progress = lambda done, total: context.log.info(f"embedded {done}/{total} new node texts")
    with duckdb.connect() as con:
        steps = [
            patrol.ensure_roots(con, being_id, now),
            patrol.step_nodes(con, being_id, embedder, params, now),
            patrol.step_session_counts(con, being_id, now),
            patrol.step_dying(con, being_id, params, now),
        ]
        context.log.info(patrol.BYOK_SKIP_MESSAGE)
        steps.append(patrol.step_revive(con, being_id, params, now))
        for step in steps:
            context.log.info(f"{step.step}: {step.counts}")
        statuses = dict(
            con.execute(
                "SELECT status, count(*) FROM nodes WHERE being_id = ? GROUP BY 1", [being_id]
            ).fetchall()
        )
        misplaced = con.execute(
            "SELECT count(*) FROM nodes n LEFT JOIN clusters c ON c.cluster_id = n.cluster_id "
            "WHERE n.being_id = ? AND (c.cluster_id IS NULL OR c.being_id <> n.being_id)",
            [being_id],
        ).fetchone()[0]
    created = steps[1].counts
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": sum(statuses.values()),
            "new": created["new"],
            "to_subcluster": created["to_subcluster"],
            "to_root": created["to_root"],
            "sessions_advanced": steps[2].counts["advanced"],
            "dying": steps[3].counts["dying"],
            "revived": steps[4].counts["revived"],
            "active": statuses.get("active", 0),
            "dying_total": statuses.get("dying", 0),
            "dead_total": statuses.get("dead", 0),
            "embedded": embedder.stats["embedded"],
            "embeddings_from_cache": embedder.stats["cached"],
            "llm_steps": "skipped: no model configured (mechanical processing only)",
        },
        check_results=[
            dg.AssetCheckResult(
                check_name="nodes_in_own_beings_clusters",
                passed=misplaced == 0,
                metadata={"misplaced_nodes": misplaced},
            )
        ],
    )
