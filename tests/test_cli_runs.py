"""Runs the CLI starts are runs of the job rebuilt from the code location: listed under their job and
re-executed through Dagster's public API; CLI commands that change an asset outside a run report its
materialization."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from tests.test_cli import SAMPLES, mindflow


def _instance(home: Path) -> dg.DagsterInstance:
    (home / "dagster").mkdir(parents=True, exist_ok=True)  # what the UI opens, run or not
    return dg.DagsterInstance.from_config(str(home / "dagster"))


@pytest.fixture
def patrolled(tmp_path) -> tuple[Path, str]:
    """A home where `mindflow run patrol` ran once (a finished process): its run id."""
    home = tmp_path / "home"
    landed = mindflow(home, "ingest", str(SAMPLES / "bram" / "2026-10-20.md"), "--being", "bram")
    assert landed.returncode == 0, landed.stderr
    for job in ("ingest", "patrol"):
        ran = mindflow(home, "run", job)
        assert ran.returncode == 0, ran.stderr
    (line,) = [line for line in ran.stdout.splitlines() if line.startswith("patrol [bram] run ")]
    return home, line.split()[3].rstrip(":")


def test_a_cli_run_is_listed_under_its_job_and_re_executes(patrolled, monkeypatch):
    """A finished `mindflow run patrol` is a run of its job on the instance, rebuilt from the code
    location: another process re-executes it through Dagster's public API."""
    from mindflow import launch

    home, run_id = patrolled
    monkeypatch.setenv("MINDFLOW_HOME", str(home))
    monkeypatch.setenv("DAGSTER_HOME", str(home / "dagster"))
    with _instance(home) as instance:
        run = instance.get_run_by_id(run_id)
        assert run.tags["dagster/asset_partition_range_start"] == "bram"  # every known being
        assert run.job_code_origin is not None  # what a re-execution rebuilds the job from
        assert [r.run_id for r in instance.get_runs(dg.RunsFilter(job_name="patrol"))] == [run_id]
        again = launch.execute(instance, "patrol", run_config={}, tags={}, parent_run_id=run_id)
        assert again.success
        runs = instance.get_runs(dg.RunsFilter(job_name="patrol"))
        assert {(r.run_id, r.parent_run_id) for r in runs} == {(run_id, None), (again.run_id, run_id)}
        assert instance.get_run_by_id(again.run_id).tags["dagster/asset_partition_range_end"] == "bram"


def test_run_job_records_a_run_of_the_code_location(sample_inbox, settings):
    """In process too (what `mindflow demo` does): the run carries the job's code origin."""
    from mindflow.runner import run_job

    (ingest,) = run_job(settings, "ingest", partition="2026-10-20")
    instance = dg.DagsterInstance.get()
    run = instance.get_run_by_id(ingest.run_id)
    assert run.tags["dagster/asset_partition_range_start"] == "2026-10-20"
    assert run.job_code_origin is not None
    assert [r.run_id for r in instance.get_runs(dg.RunsFilter(job_name="ingest"))] == [ingest.run_id]
    assert "episodes: new=" in ingest.changes


def test_ebooks_reindex_reports_ebook_chunks_materialized(home, settings):
    from mindflow.runner import run_job

    settings.ebooks.mkdir(parents=True)
    (settings.ebooks / "bees.md").write_text("# Bees\n\nBees keep the hive warm in winter by shivering.\n")
    ran = mindflow(home, "ebooks", "reindex", "--no-progress")
    assert ran.returncode == 0, ran.stderr
    with _instance(home) as instance:
        latest = instance.get_latest_materialization_event(dg.AssetKey("ebook_chunks"))
        assert latest is not None and latest.run_id == ""  # before: "Never materialized"
        reported = latest.asset_materialization.metadata
        assert reported["documents"].value == 1 and reported["new"].value == 1
        assert reported["dagster/row_count"].value == reported["chunks"].value > 0

    # The same keys as a run of the asset reports, but the run's check of the critical files.
    (summary,) = run_job(settings, "ebook_reindex")
    by_run = dg.DagsterInstance.get().get_latest_materialization_event(dg.AssetKey("ebook_chunks"))
    assert by_run.run_id == summary.run_id
    assert set(reported) <= set(by_run.asset_materialization.metadata)
    assert by_run.asset_materialization.metadata["unchanged"].value == 1


def test_rollback_of_story_reports_its_materialization(home, settings):
    from mindflow import audit, store

    with store.connect(settings.duckdb_path) as con:
        for n in range(2):
            audit.write_file(
                settings, "ada/STORY.md", f"version {n}\n", action="EDIT", summary=f"v{n}",
                actor="narrative", trigger="t", run_id=f"r{n}", con=con,
            )  # fmt: skip
    first = audit.file_history(settings, "ada/STORY.md")[-1][0]
    ran = mindflow(home, "rollback", "ada/STORY.md", "--to", first[:10])
    assert ran.returncode == 0, ran.stderr
    with _instance(home) as instance:
        latest = instance.get_latest_materialization_event(dg.AssetKey("story"))
        assert latest is not None and latest.dagster_event.partition == "ada"
        meta = latest.asset_materialization.metadata
        assert meta["restored_from"].value == first and meta["mode"].value == "rollback"
        # A file no asset writes (a persona) reports nothing.
        assert instance.get_latest_materialization_event(dg.AssetKey("core_memory")) is None
