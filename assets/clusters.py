"""Asset `clusters`: each being's Business and Private roots and their sub-clusters."""

import dagster as dg

from assets.nodes import nodes
from assets.partitions import beings
from mindflow import patrol
from mindflow.models import utcnow
from mindflow.resources import DuckDBResource


@dg.asset(
    partitions_def=beings,
    deps=[nodes],
    pool="duckdb",
    group_name="patrol",
    kinds={"duckdb"},
    code_version="1",
    check_specs=[
        dg.AssetCheckSpec(
            "two_roots",
            asset="clusters",
            blocking=True,
            description="The being has exactly its two roots, Business and Private.",
        )
    ],
)
def clusters(context: dg.AssetExecutionContext, duckdb: DuckDBResource) -> dg.MaterializeResult:
    """Clusters of a being's nodes, with vectors = mean of their active nodes (patrol step ❼)."""
    being_id = context.partition_key
    now = utcnow()
    with duckdb.connect() as con:
        patrol.ensure_roots(con, being_id, now)
        report = patrol.step_merge_small_clusters(con, being_id, patrol.PatrolParams(), now)
        context.log.info(f"{report.step}: {report.counts}")
        rows = con.execute(
            "SELECT c.label, c.parent_id IS NULL AS root, "
            "count(n.node_id) FILTER (WHERE n.status = 'active') "
            "FROM clusters c LEFT JOIN nodes n ON n.cluster_id = c.cluster_id "
            "WHERE c.being_id = ? GROUP BY ALL ORDER BY 2 DESC, 1",
            [being_id],
        ).fetchall()
        roots = sorted(
            r[0]
            for r in con.execute(
                "SELECT label FROM clusters WHERE being_id = ? AND parent_id IS NULL", [being_id]
            ).fetchall()
        )
    preview = "\n".join(
        ["| cluster | root | active nodes |", "|---|---|---|"]
        + [f"| {label} | {'yes' if root else ''} | {n} |" for label, root, n in rows]
    )
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": len(rows),
            "deleted": report.counts["deleted"],
            "merged_to_sibling": report.counts["merged_to_sibling"],
            "merged_to_root": report.counts["merged_to_root"],
            "moved": report.counts["moved"],
            "clusters": dg.MetadataValue.md(preview),
        },
        check_results=[
            dg.AssetCheckResult(
                check_name="two_roots",
                passed=roots == sorted(patrol.ROOT_LABELS),
                metadata={"roots": ", ".join(roots) or "none"},
            )
        ],
    )
