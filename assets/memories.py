"""Asset `memories`: the LanceDB tables of memories (one row per memory, archived ones included) and
their history."""

from collections import Counter

import dagster as dg

from assets.policies import EXTERNAL_CALLS, NIGHTLY
from mindflow import lance
from mindflow.memories import TABLE, desired_refs_sql, publish
from mindflow.resources import DuckDBResource, LanceDBResource


@dg.asset(
    deps=[
        # Published from the nodes: in the `form` job (no clusters, no decay) this orders it after them.
        dg.AssetDep("nodes", partition_mapping=dg.AllPartitionMapping()),
        dg.AssetDep("clusters", partition_mapping=dg.AllPartitionMapping()),
        "decay_scores",
    ],
    pool="duckdb",
    group_name="recall",
    kinds={"lancedb"},
    code_version="2",
    retry_policy=EXTERNAL_CALLS,
    freshness_policy=NIGHTLY,
    check_specs=[
        dg.AssetCheckSpec(
            "one_row_per_memory",
            asset="memories",
            blocking=True,
            description="Every memory (archived ones too) has exactly one LanceDB row; nothing else has one.",
        )
    ],
)
def memories(
    context: dg.AssetExecutionContext, duckdb: DuckDBResource, lancedb: LanceDBResource
) -> dg.MaterializeResult:
    """Every memory with its scene, feeling, vector, status, decay, cluster, sources and times (recall
    filters out the archived), and `memory_history`: every change of every memory."""
    db = lancedb.connect()
    with duckdb.connect() as con:
        settings = duckdb.settings()
        report = publish(
            con, db, fact_keys=settings.recall_fact_keys, keyphrase_keys=settings.recall_keyphrase_keys
        )
        refs = con.execute(desired_refs_sql()).fetchall()
    wanted = {ref for ref, _ in refs}
    per_being = dict(sorted(Counter(being for _, being in refs).items()))
    table = lance.open_table(db, TABLE)
    counts = lance.count_by(table, "memory_ref", sorted(wanted)) if table is not None else {}
    missing = sum(1 for ref in wanted if counts.get(ref, 0) == 0)
    duplicated = sum(1 for n in counts.values() if n > 1)
    extra = (report.rows - sum(counts.values())) if table is not None else 0
    context.log.info(
        f"published {report.upserted} rows, removed {report.deleted}; "
        f"{report.history.appended} history rows appended"
    )
    if report.rebuilt or report.history.rebuilt:
        context.log.info("a table written by an earlier mindflow version was written again from DuckDB")
    if report.indexes_built:
        context.log.info(f"built indexes on {', '.join(report.indexes_built)}")
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": report.rows,
            "upserted": report.upserted,
            "deleted": report.deleted,
            "table_version": report.version if report.version is not None else -1,
            "indexes_built": ", ".join(report.indexes_built) or "none",
            "rebuilt": report.rebuilt,
            "history_appended": report.history.appended,
            "history_rows": report.history.rows,
            "per_being": dg.MetadataValue.json(per_being),
        },
        check_results=[
            dg.AssetCheckResult(
                check_name="one_row_per_memory",
                passed=missing == 0 and duplicated == 0 and extra == 0,
                metadata={"missing": missing, "duplicated": duplicated, "unexpected": extra},
            )
        ],
    )
