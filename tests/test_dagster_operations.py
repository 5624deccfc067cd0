"""Dagster operations as a Dagster user reads them: partition health, resources, retries, freshness.

Through Dagster's Python API on the home's instance, and through the GraphQL API the UI uses
(the code location loaded from workspace.yaml in its own process, as `dagster dev` loads it).
"""

from __future__ import annotations

import importlib
import time
from contextlib import ExitStack, contextmanager
from datetime import date, timedelta

import dagster as dg
import pytest
from conftest import REPO

from mindflow import store
from mindflow.resources import EmbeddingResource
from mindflow.runner import run_job

EPISODES = dg.AssetKey("episodes")
FIRST, LATER = date(2026, 3, 2), date(2026, 3, 5)  # three days apart


def definitions():
    import sys

    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    import definitions as module

    return module


def write_log(inbox, day: date, facts: list[str]) -> None:
    path = inbox / "ada" / f"{day.isoformat()}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"- [fact] {fact}\n" for fact in facts))


@contextmanager
def graphql(instance):
    """The UI's GraphQL API over the code location, loaded from workspace.yaml in a subprocess."""
    from dagster_graphql.test.utils import define_out_of_process_context, execute_dagster_graphql

    with define_out_of_process_context(str(REPO / "workspace.yaml"), None, instance) as context:
        yield lambda query: execute_dagster_graphql(context, query).data


# --------------------------------------------------------------------------- partitions


def test_days_without_episodes_are_no_partitions_and_each_day_counts_its_own_rows(settings):
    write_log(settings.inbox, FIRST, ["Ada likes tea", "Ada lives in Lyon", "Ada has a cat"])
    write_log(settings.inbox, LATER, ["Ada starts a new job"])
    (ingest,) = run_job(settings, "ingest")
    assert ingest.success and ingest.partition == f"{FIRST}...{LATER}"

    instance = dg.DagsterInstance.get()
    episodes = definitions().defs.resolve_assets_def("episodes")
    keys = episodes.partitions_def.get_partition_keys(dynamic_partitions_store=instance)
    # The partitions page: the two days, both materialized, nothing missing in between.
    assert keys == [FIRST.isoformat(), LATER.isoformat()]
    assert instance.get_materialized_partitions(EPISODES) == set(keys)
    with store.connect(settings.duckdb_path, read_only=True) as con:
        per_day = dict(con.execute("SELECT day::VARCHAR, count(*) FROM episodes GROUP BY 1").fetchall())
    assert per_day == {FIRST.isoformat(): 3, LATER.isoformat(): 1}
    for day, rows in per_day.items():
        (record,) = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=EPISODES, asset_partitions=[day]), limit=1
        ).records
        metadata = record.asset_materialization.metadata
        assert metadata["dagster/row_count"].value == rows, day
        assert metadata["new_on_day"].value == rows, day

    # A backfill of a date range re-derives its days from the done files: same counts, nothing new.
    (backfill,) = run_job(settings, "ingest", partition=f"{FIRST - timedelta(days=5)}...{LATER}")
    assert backfill.success
    assert episodes.partitions_def.get_partition_keys(dynamic_partitions_store=instance) == keys
    (latest,) = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=EPISODES, asset_partitions=[FIRST.isoformat()]), limit=1
    ).records
    assert latest.run_id == backfill.run_id
    assert latest.asset_materialization.metadata["dagster/row_count"].value == 3
    assert latest.asset_materialization.metadata["new_on_day"].value == 0

    # Decay scores are one current score per memory: not partitioned, a run's rows are every memory.
    assert definitions().defs.resolve_assets_def("decay_scores").partitions_def is None


# --------------------------------------------------------------------------- resources


@dg.asset
def batch_size_probe(embeddings: EmbeddingResource) -> dg.MaterializeResult:
    return dg.MaterializeResult(metadata={"batch_size": embeddings.embedder().batch_size})


def test_the_embedding_batch_size_comes_from_the_environment_and_the_ui_names_it(home, monkeypatch):
    module = definitions()
    monkeypatch.setenv("MINDFLOW_EMBEDDING_BATCH_SIZE", "8")
    stack = ExitStack()
    try:
        defs = importlib.reload(module).defs
        instance = stack.enter_context(dg.instance_for_test())
        result = dg.materialize(
            [batch_size_probe], resources={"embeddings": defs.resources["embeddings"]}, instance=instance
        )
        (event,) = result.get_asset_materialization_events()
        assert event.materialization.metadata["batch_size"].value == 8

        query = """{ topLevelResourceDetailsOrError(resourceSelector: {
              repositoryLocationName: "mindflow", repositoryName: "__repository__", resourceName: "%s"}) {
              ... on ResourceDetails { configuredValues { key value type } } } }"""
        with graphql(instance) as ask:
            embeddings = ask(query % "embeddings")["topLevelResourceDetailsOrError"]["configuredValues"]
            duckdb = ask(query % "duckdb")["topLevelResourceDetailsOrError"]["configuredValues"]
        assert {
            "key": "batch_size",
            "value": "MINDFLOW_EMBEDDING_BATCH_SIZE",
            "type": "ENV_VAR",
        } in embeddings
        assert {"key": "home", "value": "MINDFLOW_HOME", "type": "ENV_VAR"} in duckdb
    finally:
        stack.close()
        monkeypatch.delenv("MINDFLOW_EMBEDDING_BATCH_SIZE")
        importlib.reload(module)


def test_an_unset_batch_size_takes_the_setting(home, monkeypatch):
    monkeypatch.delenv("MINDFLOW_EMBEDDING_BATCH_SIZE", raising=False)
    assert EmbeddingResource.from_environment().embedder().batch_size == 64


# --------------------------------------------------------------------------- retries

CALLING_OUT = [
    "scene_notes", "nodes", "journal", "story", "core_memory", "reflections",  # a model
    "memories", "facts_graph", "ebook_chunks", "journal_chunks", "applied_proposals",  # LanceDB
]  # fmt: skip


def test_assets_that_call_a_model_or_object_storage_retry_with_backoff(home):
    defs = definitions().defs
    for name in CALLING_OUT:
        policy = defs.resolve_assets_def(name).op.retry_policy
        assert policy is not None and policy.max_retries >= 2, name
        assert policy.backoff == dg.Backoff.EXPONENTIAL and policy.delay, name
    assert defs.resolve_assets_def("episodes").op.retry_policy is None  # local files only


def test_a_transient_failure_is_retried_and_the_run_succeeds(tmp_path):
    from assets.policies import EXTERNAL_CALLS

    attempts = tmp_path / "attempts"

    @dg.asset(retry_policy=EXTERNAL_CALLS)
    def flaky() -> None:
        attempts.write_text(attempts.read_text() + "x" if attempts.exists() else "x")
        if len(attempts.read_text()) == 1:
            raise ConnectionError("object storage reset the connection")

    result = dg.materialize([flaky], instance=dg.DagsterInstance.ephemeral())
    assert result.success and attempts.read_text() == "xx"
    retried = [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_UP_FOR_RETRY]
    assert len(retried) == 1


# --------------------------------------------------------------------------- freshness


@pytest.mark.parametrize("asset", ["memories", "decay_scores"])
def test_nightly_assets_declare_a_days_freshness(home, asset):
    spec = next(iter(definitions().defs.resolve_assets_def(asset).specs))
    assert spec.freshness_policy == dg.FreshnessPolicy.time_window(fail_window=timedelta(days=1, hours=1))


def test_a_missed_night_fails_freshness_in_the_ui(home):
    """The daemon's freshness evaluation (Dagster has no public evaluator), then the assets'
    freshness status as the UI reads it over GraphQL."""
    with ExitStack() as stack:
        _missed_night(stack)


def _missed_night(stack: ExitStack) -> None:
    from dagster._core.test_utils import freeze_time
    from dagster._daemon.freshness import FreshnessDaemon
    from dagster_graphql.test.utils import define_out_of_process_workspace, execute_dagster_graphql

    instance = stack.enter_context(dg.instance_for_test())
    for name in ("memories", "decay_scores"):
        instance.report_runless_asset_event(dg.AssetMaterialization(name))
    query = """{ assetNodes(assetKeys: [{path: ["memories"]}, {path: ["decay_scores"]}]) {
        assetKey { path } freshnessStatusInfo { freshnessStatus } } }"""

    def status(process_context) -> dict:
        context = process_context.create_request_context()
        nodes = execute_dagster_graphql(context, query).data["assetNodes"]
        return {n["assetKey"]["path"][0]: n["freshnessStatusInfo"]["freshnessStatus"] for n in nodes}

    with define_out_of_process_workspace(str(REPO / "workspace.yaml"), None, instance) as workspace:
        list(FreshnessDaemon().run_iteration(workspace))
        assert status(workspace) == {"memories": "HEALTHY", "decay_scores": "HEALTHY"}
        with freeze_time(time.time() + timedelta(days=1, hours=2).total_seconds()):
            list(FreshnessDaemon().run_iteration(workspace))
        assert status(workspace) == {"memories": "DEGRADED", "decay_scores": "DEGRADED"}
