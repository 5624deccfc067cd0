"""The local Dagster instance of a home: its dagster.yaml, range runs, one instance per home."""

from __future__ import annotations

import dagster as dg
import pytest

from mindflow import runner
from mindflow.config import load_settings
from mindflow.errors import MindflowError
from mindflow.runner import run_job

RANGE = "2026-10-12...2026-10-14"
DAYS = ["2026-10-12", "2026-10-13", "2026-10-14"]
EPISODES = dg.AssetKey("episodes")


def test_a_range_run_records_every_day_of_its_range(sample_inbox, settings):
    (ours,) = run_job(settings, "ingest", partition=RANGE)
    instance = dg.DagsterInstance.get()
    records = instance.fetch_materializations(EPISODES, limit=100, ascending=True).records
    # One materialization per day of the range; Dagster records a run's days in no set order.
    assert sorted(r.partition_key for r in records) == DAYS
    assert {r.run_id for r in records} == {ours.run_id}
    assert instance.get_materialized_partitions(EPISODES) == set(DAYS)
    latest = instance.get_latest_materialization_event(EPISODES)
    assert latest.run_id == ours.run_id and latest.dagster_event.partition in DAYS


@pytest.mark.parametrize("earlier", range(len(runner._EARLIER_YAML)))
def test_a_dagster_yaml_written_by_an_earlier_mindflow_is_upgraded(settings, earlier):
    config = settings.dagster_home / "dagster.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(runner._EARLIER_YAML[earlier])
    runner.prepare_instance(settings)
    assert config.read_text() == runner.DAGSTER_YAML
    assert "granularity: run" in config.read_text()
    assert "event_log_storage" not in config.read_text()  # Dagster's default storage


def test_an_edited_dagster_yaml_naming_the_old_storage_is_a_clear_error(settings):
    config = settings.dagster_home / "dagster.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    edited = runner._EARLIER_YAML[-1] + "# edited by an operator\n"
    assert "mindflow.dagster_storage" in edited
    config.write_text(edited)
    with pytest.raises(MindflowError, match="delete its `event_log_storage:` block"):
        runner.prepare_instance(settings)
    assert config.read_text() == edited  # an operator's file is never rewritten


def test_an_edited_dagster_yaml_is_left_as_it_is(settings):
    config = settings.dagster_home / "dagster.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    edited = runner.DAGSTER_YAML + "# edited by an operator\n"
    config.write_text(edited)
    run_job(settings, "decay", partition="2026-10-12")
    assert config.read_text() == edited


def test_jobs_in_one_process_share_their_homes_instance(tmp_path, monkeypatch, settings):
    """One instance per home and dagster.yaml for consecutive jobs; a new home opens (and records in) its own."""
    first_runs = run_job(settings, "ingest", partition="2026-10-12") + run_job(
        settings, "decay", partition="2026-10-12"
    )
    (key, instance), *rest = runner._INSTANCE
    assert not rest and key[0] == str(settings.dagster_home)
    assert {r.run_id for r in first_runs} <= {r.run_id for r in instance.get_runs()}

    other = tmp_path / "other"
    monkeypatch.setenv("MINDFLOW_HOME", str(other))
    monkeypatch.setenv("DAGSTER_HOME", str(other / "dagster"))
    (other_run,) = run_job(load_settings(), "decay", partition="2026-10-12")
    ((other_key, other_instance),) = runner._INSTANCE
    assert other_instance is not instance and other_key[0] == str(other / "dagster")
    assert [r.run_id for r in other_instance.get_runs()] == [other_run.run_id]
    # An operator's edit of dagster.yaml between two jobs is read by the next one.
    config = other / "dagster" / "dagster.yaml"
    config.write_text(config.read_text() + "# edited\n")
    run_job(load_settings(), "decay", partition="2026-10-13")
    assert runner._INSTANCE[0][1] is not other_instance


def test_the_pool_limit_follows_the_number_of_writers_and_back(home, monkeypatch):
    config = home / "dagster" / "dagster.yaml"
    monkeypatch.setenv("MINDFLOW_DUCKDB_WRITERS", "3")
    runner.prepare_instance(load_settings())
    assert "    default_limit: 3\n" in config.read_text()
    with dg.DagsterInstance.get() as instance:
        assert instance.get_concurrency_config().pool_config.default_pool_limit == 3
    monkeypatch.delenv("MINDFLOW_DUCKDB_WRITERS")
    runner.prepare_instance(load_settings())
    assert config.read_text() == runner.DAGSTER_YAML
