"""Asset `erasures`: the permanent forgets carried out, everywhere under MINDFLOW_HOME."""

import dagster as dg

from mindflow.resources import DuckDBResource


@dg.asset(pool="duckdb", group_name="loop", kinds={"duckdb", "lancedb"}, code_version="1")
def erasures(context: dg.AssetExecutionContext, duckdb: DuckDBResource) -> dg.MaterializeResult:
    """Approved permanent forgets, erased from DuckDB, LanceDB, the inbox, events, the workspace and its
    git history; what remains is an audit row and a tombstone per ref, with hashes, never the text."""
    from assets.nodes import llm_metadata, resolve_llm
    from mindflow.loop.erase import erase_all

    settings = duckdb.settings()
    used: list = []

    def narrator():
        used.extend(resolve_llm(context, settings, "narrative"))
        return used[0]

    # The library opens (and closes) DuckDB itself: the file is swapped once nothing holds it.
    report = erase_all(settings, run_id=context.run_id, narrator=narrator)
    # Counts and sizes only: Dagster's event log cannot be edited afterwards.
    metadata = {**report.counts(), "steps": ", ".join(report.steps) or "nothing approved"}
    if used:
        # A model's failure messages may quote its answer: counts only here too.
        llm = llm_metadata(used[0], used[1])
        metadata.update({k: v for k, v in llm.items() if not k.endswith("/errors")})
    return dg.MaterializeResult(metadata=metadata)
