"""Runs the CLI starts are runs of the code location: listed under their job and re-executed from the
UI (through Dagster's GraphQL API, against `dagster dev` as `make dev` starts it); CLI commands that
change an asset outside a run report its materialization."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import dagster as dg
import httpx
import pytest

from tests.test_cli import REPO, SAMPLES, env_for, mindflow

LABEL = "__repository__@mindflow"  # the repository of the code location workspace.yaml declares
DONE = ("SUCCESS", "FAILURE", "CANCELED")
# What the UI asks for a job's Runs tab: the job's runs of this code location.
JOB_RUNS = """query($job: String!, $label: String!) {
  runsOrError(filter: {pipelineName: $job, tags: [{key: ".dagster/repository", value: $label}]}) {
    ... on Runs { results { runId status parentRunId repositoryOrigin { repositoryLocationName repositoryName } } }
  } }"""
REEXECUTE = """mutation($parent: String!) {
  launchRunReexecution(reexecutionParams: {parentRunId: $parent, strategy: ALL_STEPS}) {
    __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message } ... on Error { message }
  } }"""
RUN_STATUS = "query($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }"


def _instance(home: Path) -> dg.DagsterInstance:
    (home / "dagster").mkdir(parents=True, exist_ok=True)  # what the UI opens, run or not
    return dg.DagsterInstance.from_config(str(home / "dagster"))


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class DagsterDev:
    """`dagster dev -w workspace.yaml` (webserver and daemon) on a free port of 127.0.0.1."""

    def __init__(self, home: Path):
        port = _free_port()
        self.url = f"http://127.0.0.1:{port}/graphql"
        self.log = (home / "dagster-dev.log").open("w")
        self.proc = subprocess.Popen(
            [str(REPO / ".venv/bin/dagster"), "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
            cwd=REPO,
            env={**env_for(home), "PATH": f"{REPO / '.venv/bin'}:{os.environ['PATH']}"},
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip

    def query(self, query: str, **variables) -> dict:
        answer = httpx.post(self.url, json={"query": query, "variables": variables}, timeout=60).json()
        assert "errors" not in answer, answer
        return answer["data"]

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, "dagster dev ended: see dagster-dev.log"
            try:
                data = self.query("{ workspaceOrError { ... on Workspace { locationEntries { "
                                  "locationOrLoadError { __typename } } } } }")  # fmt: skip
                entries = data["workspaceOrError"]["locationEntries"]
                if entries and entries[0]["locationOrLoadError"]["__typename"] == "RepositoryLocation":
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1)
        raise AssertionError(f"the code location did not load within {timeout} s")

    def stop(self) -> None:
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.log.close()


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


def test_a_cli_run_is_listed_under_its_job_and_re_executes_from_the_ui(patrolled):
    home, run_id = patrolled
    with _instance(home) as instance:
        run = instance.get_run_by_id(run_id)
        assert run.tags["dagster/asset_partition_range_start"] == "bram"  # every known being
        assert run.tags["dagster/code_location"] == "mindflow"
        listed = instance.get_runs(dg.RunsFilter(job_name="patrol", tags={".dagster/repository": LABEL}))
        assert [r.run_id for r in listed] == [run_id]

    dev = DagsterDev(home)
    try:
        dev.wait_ready()
        (shown,) = dev.query(JOB_RUNS, job="patrol", label=LABEL)["runsOrError"]["results"]
        assert shown["runId"] == run_id and shown["status"] == "SUCCESS"
        assert shown["repositoryOrigin"] == {
            "repositoryLocationName": "mindflow",
            "repositoryName": "__repository__",
        }

        # Before: `CheckError: Expected non-None value` (the run had no origin to find its job by).
        launched = dev.query(REEXECUTE, parent=run_id)["launchRunReexecution"]
        assert launched["__typename"] == "LaunchRunSuccess", launched
        again = launched["run"]["runId"]
        deadline, reaped = time.monotonic() + 240, False
        while (status := dev.query(RUN_STATUS, id=again)["runOrError"]["status"]) not in DONE:
            assert time.monotonic() < deadline, f"re-execution {again} still {status}"
            if status in ("STARTING", "STARTED") and not reaped:
                # It inherits the CLI run's pid tags; that process is gone, the run worker is not.
                from mindflow import pool

                with _instance(home) as instance:
                    assert again not in pool.reap_stale_runs(instance).failed
                reaped = True
            time.sleep(0.5)
        assert status == "SUCCESS" and reaped, (home / "dagster-dev.log").read_text()[-3000:]
        runs = dev.query(JOB_RUNS, job="patrol", label=LABEL)["runsOrError"]["results"]
        assert {(r["runId"], r["parentRunId"]) for r in runs} == {(run_id, None), (again, run_id)}
    finally:
        dev.stop()


def test_run_job_records_a_run_of_the_code_location(sample_inbox, settings):
    """In process too (what `mindflow demo` does): the run carries the origin the UI loads."""
    from mindflow.runner import run_job

    (ingest,) = run_job(settings, "ingest", partition="2026-10-20")
    instance = dg.DagsterInstance.get()
    run = instance.get_run_by_id(ingest.run_id)
    assert run.tags["dagster/asset_partition_range_start"] == "2026-10-20"
    assert run.tags["dagster/code_location"] == "mindflow"
    listed = instance.get_runs(dg.RunsFilter(job_name="ingest", tags={".dagster/repository": LABEL}))
    assert [r.run_id for r in listed] == [ingest.run_id]
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
