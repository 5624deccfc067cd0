"""Asset `facts_graph`: the semantic graph (current facts, relations, aliases) in LanceDB for recall."""

import dagster as dg

from assets.policies import EXTERNAL_CALLS
from mindflow import graph
from mindflow.resources import DuckDBResource, LanceDBResource


@dg.asset(
    deps=[
        dg.AssetDep("clusters", partition_mapping=dg.AllPartitionMapping()),
        # Activation (and with it the Cool facts left out) comes from the decay job.
        "decay_scores",
    ],
    pool="duckdb",
    group_name="recall",
    kinds={"lancedb"},
    code_version="1",
    retry_policy=EXTERNAL_CALLS,
)
def facts_graph(
    context: dg.AssetExecutionContext, duckdb: DuckDBResource, lancedb: LanceDBResource
) -> dg.MaterializeResult:
    """Current facts and relations of every being, with aliases folded into entity keys, for graph recall;
    Cool facts unused for MINDFLOW_FACT_COOL_DAYS are left out."""
    db = lancedb.connect()
    with duckdb.connect() as con:
        report = graph.publish_graph(con, db, params=duckdb.settings().activation_params())
    context.log.info(f"published {report.upserted} graph rows, removed {report.deleted}")
    metadata: dict = {
        "dagster/row_count": report.rows,
        "upserted": report.upserted,
        "deleted": report.deleted,
        "per_being": dg.MetadataValue.json(report.per_being),
    }
    for name, table in report.tables.items():
        metadata[f"{name}_rows"] = table.rows
        metadata[f"{name}_upserted"] = table.upserted
        metadata[f"{name}_deleted"] = table.deleted
    return dg.MaterializeResult(metadata=metadata)
