"""Assets `scene_notes` and `nodes`: each being's scenes and the memory nodes formed from them."""

import dagster as dg

from assets.partitions import beings
from mindflow import patrol
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


@dg.asset(deps=[ALL_EPISODES], **PATROL)
def scene_notes(context: dg.AssetExecutionContext, duckdb: DuckDBResource) -> dg.MaterializeResult:
    """Scenes extracted from a being's episodes (mechanically: one scene per episode)."""
    per_being = {}
    with duckdb.connect() as con:
        for being_id in context.partition_keys:
            report = patrol.step_scenes(con, being_id, utcnow())
            total, failed = con.execute(
                "SELECT count(*), count(*) FILTER (WHERE note_status <> 'ok') FROM scene_notes "
                "WHERE being_id = ?",
                [being_id],
            ).fetchall()[0]
            per_being[being_id] = {"scenes": total, "new": report.counts["new"], "parse_failed": failed}
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": sum(c["scenes"] for c in per_being.values()),
            "new": sum(c["new"] for c in per_being.values()),
            "parse_failed": sum(c["parse_failed"] for c in per_being.values()),
            "per_being": per_being_table(per_being),
        }
    )


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
    **(PATROL | {"code_version": "2"}),
)
def nodes(
    context: dg.AssetExecutionContext, duckdb: DuckDBResource, embeddings: EmbeddingResource
) -> dg.MaterializeResult:
    """Memory nodes of a being: scene, feeling, importance, cluster, session count and status."""
    params = patrol.PatrolParams()
    embedder = embeddings.embedder()
    embedder.progress = lambda done, total: context.log.info(f"embedded {done}/{total} new node texts")
    context.log.info(patrol.BYOK_SKIP_MESSAGE)
    per_being: dict[str, dict[str, int]] = {}
    misplaced = 0
    events_dir = duckdb.settings().events
    with duckdb.connect() as con:
        for being_id in context.partition_keys:
            now = utcnow()
            folded = patrol.step_fold_events(con, being_id, events_dir, now)
            steps = [
                folded,
                patrol.ensure_roots(con, being_id, now),
                patrol.step_nodes(con, being_id, embedder, params, now),
                patrol.step_session_counts(con, being_id, now),
                patrol.step_dying(con, being_id, params, now),
                patrol.step_revive(con, being_id, params, now),
            ]
            for step in steps:
                context.log.info(f"{being_id} {step.step}: {step.counts}")
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
            }

    def total(key: str) -> int:
        return sum(counts[key] for counts in per_being.values())

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
        },
        check_results=[
            dg.AssetCheckResult(
                check_name="nodes_in_own_beings_clusters",
                passed=misplaced == 0,
                metadata={"misplaced_nodes": misplaced},
            )
        ],
    )
