"""Asset `erasures`: the permanent forgets carried out, everywhere under MINDFLOW_HOME."""

import dagster as dg

from mindflow.resources import DuckDBResource


@dg.asset(pool="duckdb", group_name="loop", kinds={"duckdb", "lancedb"}, code_version="1")
def erasures(context: dg.AssetExecutionContext, duckdb: DuckDBResource) -> dg.MaterializeResult:
    """Approved permanent forgets, erased from DuckDB, LanceDB, the inbox, events, the workspace and its
    git history; what remains is an audit row and a tombstone per ref, with hashes, never the text."""
    from mindflow.loop.erase import erase_all

    # The library opens (and closes) DuckDB itself: the file is swapped once nothing holds it.
    report = erase_all(duckdb.settings(), run_id=context.run_id)
    # Counts and sizes only: Dagster's event log cannot be edited afterwards.
    return dg.MaterializeResult(
        metadata={
            **report.counts(),
            "steps": ", ".join(report.steps) or "nothing approved",
        }
    )
