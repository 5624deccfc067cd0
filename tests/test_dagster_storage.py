"""The local instance's event log storage: same records as Dagster's own, written in batches."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage

from mindflow import runner
from mindflow.config import load_settings
from mindflow.dagster_storage import MAX_ENGINES, MindflowSqliteEventLogStorage
from mindflow.runner import run_job

SAMPLES = Path(__file__).resolve().parent.parent / "data" / "samples"
RANGE = "2026-10-12...2026-10-14"
DAYS = ["2026-10-12", "2026-10-13", "2026-10-14"]
EPISODES = dg.AssetKey("episodes")


def _records(storage, asset_key=EPISODES):
    return storage.get_event_records(
        dg.EventRecordsFilter(event_type=dg.DagsterEventType.ASSET_MATERIALIZATION, asset_key=asset_key),
        ascending=True,
    )


def _what_dagster_sees(dagster_home) -> dict:
    """What a plain Dagster SqliteEventLogStorage (the UI's default) reads from a home."""
    plain = SqliteEventLogStorage(str(dagster_home / "history" / "runs"))
    try:
        records = _records(plain)
        entry = plain.get_asset_records([EPISODES])[0].asset_entry
        return {
            "partitions": [r.partition_key for r in records],
            "run_ids": {r.run_id for r in records},
            "latest_partition": entry.last_materialization_record.partition_key,
            # the asset row points at the last record stored, by its id in the index
            "latest_is_last_record": entry.last_materialization_record.storage_id == records[-1].storage_id,
            "latest_run": entry.last_run_id,
            "materialized": plain.get_materialized_partitions(EPISODES),
            "asset_keys": set(plain.all_asset_keys()),
        }
    finally:
        plain.dispose()


def test_a_range_run_is_stored_as_plain_dagster_would_store_it(tmp_path, monkeypatch, sample_inbox, settings):
    monkeypatch.setenv("DAGSTER_EVENT_BATCH_SIZE", "1000")
    batches = []
    store_batch = MindflowSqliteEventLogStorage.store_event_batch

    def counted(self, events):
        batches.append(len(events))
        store_batch(self, events)

    monkeypatch.setattr(MindflowSqliteEventLogStorage, "store_event_batch", counted)
    # This home: mindflow's storage, batched.
    ours = run_job(settings, "ingest", partition=RANGE)
    instance = dg.DagsterInstance.get()
    assert isinstance(instance.event_log_storage, MindflowSqliteEventLogStorage)
    seen = _what_dagster_sees(settings.dagster_home)
    assert batches == [3]  # the three days' materializations, in one batch
    assert seen["partitions"] == DAYS
    assert seen["run_ids"] == {ours[0].run_id}
    assert seen["latest_partition"] == "2026-10-14"
    assert seen["latest_is_last_record"]
    assert seen["latest_run"] == ours[0].run_id
    assert seen["materialized"] == set(DAYS)
    # The same run on a home whose dagster.yaml someone edited: left alone, so Dagster's
    # own storage writes one event at a time. Both read back the same.
    other = tmp_path / "other"
    (other / "dagster").mkdir(parents=True)
    edited = runner._EARLIER_YAML[0] + "# edited by an operator\n"
    (other / "dagster" / "dagster.yaml").write_text(edited)
    shutil.copytree(SAMPLES / "inbox", other / "inbox")
    monkeypatch.setenv("MINDFLOW_HOME", str(other))
    monkeypatch.setenv("DAGSTER_HOME", str(other / "dagster"))
    other_settings = load_settings()
    theirs = run_job(other_settings, "ingest", partition=RANGE)
    assert (other / "dagster" / "dagster.yaml").read_text() == edited
    assert type(dg.DagsterInstance.get().event_log_storage) is SqliteEventLogStorage
    plain = _what_dagster_sees(other / "dagster")
    assert {k: v for k, v in plain.items() if k not in ("run_ids", "latest_run")} == {
        k: v for k, v in seen.items() if k not in ("run_ids", "latest_run")
    }
    assert plain["latest_run"] == theirs[0].run_id


def test_a_dagster_yaml_written_by_an_earlier_mindflow_is_upgraded(settings):
    config = settings.dagster_home / "dagster.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(runner._EARLIER_YAML[0])
    runner.prepare_instance(settings)
    assert config.read_text() == runner.DAGSTER_YAML
    assert "MindflowSqliteEventLogStorage" in config.read_text()


def test_the_storage_keeps_few_engines_and_lets_a_wipe_delete_run_databases(tmp_path):
    storage = MindflowSqliteEventLogStorage(str(tmp_path / "runs"))
    try:
        for i in range(10):
            with storage.run_connection(f"run{i}") as conn:
                conn.exec_driver_sql("SELECT 1")
        assert len(storage._engines) == MAX_ENGINES  # kept, but no more than these
        storage.wipe()
        assert set(storage._engines) <= {"index"}  # the index is emptied, not deleted
        assert [p.name for p in (tmp_path / "runs").iterdir() if p.name.startswith("run")] == []
    finally:
        storage.dispose()


def test_without_a_base_dir_it_needs_dagster_home(monkeypatch, tmp_path):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    with pytest.raises(Exception, match="DAGSTER_HOME"):
        MindflowSqliteEventLogStorage()
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    storage = MindflowSqliteEventLogStorage()
    try:
        assert os.path.isdir(tmp_path / "history" / "runs")
    finally:
        storage.dispose()


def test_a_mixed_batch_leaves_the_asset_row_as_events_one_by_one_would(tmp_path, sample_inbox, settings):
    run_job(settings, "ingest", partition=RANGE)
    instance = dg.DagsterInstance.get()
    run_id = instance.get_runs(limit=1)[0].run_id
    events = [
        record.event_log_entry
        for record in instance.get_records_for_run(run_id).records
        if record.event_log_entry.dagster_event is not None
        and record.event_log_entry.dagster_event.asset_key == EPISODES
    ]
    kinds = [e.dagster_event.event_type for e in events]
    assert kinds.count(dg.DagsterEventType.ASSET_MATERIALIZATION) == 3
    assert dg.DagsterEventType.ASSET_MATERIALIZATION_PLANNED in kinds
    # materializations, then the planned event again: two kinds interleaved
    batch = [*events, *[e for e in events if e.dagster_event.event_type.value.endswith("PLANNED")]]
    ours = MindflowSqliteEventLogStorage(str(tmp_path / "ours"))
    plain = SqliteEventLogStorage(str(tmp_path / "plain"))
    try:
        ours.store_event_batch(batch)
        for event in batch:
            plain.store_event(event)
        rows = []
        for storage in (ours, plain):
            entry = storage.get_asset_records([EPISODES])[0].asset_entry
            rows.append(
                (
                    entry.last_run_id,
                    entry.last_materialization_record.partition_key,
                    entry.last_materialization_record.timestamp,
                    storage.get_materialized_partitions(EPISODES),
                    len(_records(storage)),
                )
            )
        assert rows[0] == rows[1]
        assert rows[0][1] == "2026-10-14" and rows[0][4] == 3
    finally:
        ours.dispose()
        plain.dispose()


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


def test_a_new_run_database_is_created_as_dagster_creates_it(tmp_path):
    """Same tables, indexes, journal mode and alembic revision as Dagster's own storage writes."""
    import sqlite3

    def created_by(storage_class, folder):
        storage = storage_class(str(folder))
        try:
            with storage.run_connection("a-run") as conn:
                conn.exec_driver_sql("SELECT 1")
        finally:
            storage.dispose()
        with sqlite3.connect(folder / "a-run.db") as db:
            return {
                "schema": db.execute(
                    "SELECT type, name, sql FROM sqlite_master ORDER BY type, name"
                ).fetchall(),
                "revision": db.execute("SELECT version_num FROM alembic_version").fetchall(),
                "journal": db.execute("PRAGMA journal_mode").fetchall(),
            }

    ours = created_by(MindflowSqliteEventLogStorage, tmp_path / "ours")
    theirs = created_by(SqliteEventLogStorage, tmp_path / "theirs")
    assert ours == theirs
    assert ours["journal"] == [("wal",)] and len(ours["revision"]) == 1 and ours["schema"]
