"""Asset `clusters`: each being's Business and Private roots and their sub-clusters."""

import dagster as dg

from assets.nodes import PATROL, nodes, per_being_table
from mindflow import patrol
from mindflow.audit.tables import log_cluster_changes
from mindflow.models import utcnow
from mindflow.resources import DuckDBResource


@dg.asset(
    deps=[nodes],
    check_specs=[
        dg.AssetCheckSpec(
            "two_roots",
            asset="clusters",
            blocking=True,
            description="Each being has exactly its two roots, Business and Private.",
        )
    ],
    **PATROL,
)
def clusters(context: dg.AssetExecutionContext, duckdb: DuckDBResource) -> dg.MaterializeResult:
    """Clusters of a being's nodes, with vectors = mean of their active nodes (patrol step ❼)."""
    per_being: dict[str, dict[str, int]] = {}
    wrong_roots: dict[str, str] = {}
    for group, con in duckdb.beings(context.partition_keys):
        for being_id in group:
            now = utcnow()
            patrol.ensure_roots(con, being_id, now)
            report = patrol.step_merge_small_clusters(con, being_id, patrol.PatrolParams(), now)
            context.log.info(f"{being_id} {report.step}: {report.counts}")
            roots = sorted(
                r[0]
                for r in con.execute(
                    "SELECT label FROM clusters WHERE being_id = ? AND parent_id IS NULL", [being_id]
                ).fetchall()
            )
            if roots != sorted(patrol.ROOT_LABELS):
                wrong_roots[being_id] = ", ".join(roots) or "none"
            clusters_now = con.execute(
                "SELECT count(*) FROM clusters WHERE being_id = ?", [being_id]
            ).fetchall()[0][0]
            per_being[being_id] = {"clusters": clusters_now, **report.counts}
        log_cluster_changes(con, duckdb.settings(), {b: per_being[b] for b in group}, run_id=context.run_id)

    def total(key: str) -> int:
        return sum(counts[key] for counts in per_being.values())

    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": total("clusters"),
            "deleted": total("deleted"),
            "merged_to_sibling": total("merged_to_sibling"),
            "merged_to_root": total("merged_to_root"),
            "moved": total("moved"),
            "per_being": per_being_table(per_being),
        },
        check_results=[
            dg.AssetCheckResult(
                check_name="two_roots",
                passed=not wrong_roots,
                metadata={"beings_with_wrong_roots": dg.MetadataValue.json(wrong_roots)},
            )
        ],
    )
