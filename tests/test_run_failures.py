"""A failed run of a mindflow job: the run-failure sensor records it in the audit log and in
`mindflow status`, and posts it to the configured webhook (a loopback HTTP server here)."""

from __future__ import annotations

import json
import shutil
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import dagster as dg
import pytest
from filelock import FileLock

from mindflow import audit, failures, store
from mindflow.config import load_settings
from mindflow.errors import MindflowError
from mindflow.models import utcnow
from mindflow.runner import run_job
from tests.conftest import SAMPLES
from tests.test_cli import mindflow


class Webhook:
    """An HTTP server on 127.0.0.1 that keeps every JSON body POSTed to it."""

    def __init__(self, status: int = 204) -> None:
        received = self.received = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                received.append((self.path, self.headers["Content-Type"], json.loads(body)))
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hooks/mindflow"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def webhook(monkeypatch):
    hook = Webhook()
    monkeypatch.setenv("MINDFLOW_FAILURE_WEBHOOK_URL", hook.url)
    yield hook
    hook.close()


def _evaluate(sensor, instance: dg.DagsterInstance, run_id: str, event_type: dg.DagsterEventType):
    """Evaluate a run status sensor on one finished run, as the daemon does on its next tick."""
    run = instance.get_run_by_id(run_id)
    (record,) = instance.get_records_for_run(run_id, of_type=event_type).records
    context = dg.build_run_status_sensor_context(
        sensor_name=sensor.name,
        dagster_instance=instance,
        dagster_run=run,
        dagster_event=record.event_log_entry.dagster_event,
    )
    if event_type == dg.DagsterEventType.RUN_FAILURE:
        context = context.for_run_failure()
    return sensor(context)


def test_an_ingest_failing_on_a_held_duckdb_file_is_audited_shown_and_posted(home, webhook, monkeypatch):
    from definitions import defs

    monkeypatch.setenv("MINDFLOW_DUCKDB_LOCK_TIMEOUT_S", "0.5")
    settings = load_settings()
    shutil.copytree(SAMPLES / "inbox", settings.inbox)
    sensor = defs.resolve_sensor_def("run_failure_alert")
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING

    # Another process holds the DuckDB file (a long job, a DuckDB shell): the ingest run fails,
    # and the sensor's tick, which finds the file still held, must not wait for it either.
    other_writer = FileLock(str(settings.duckdb_path) + ".lock")
    other_writer.acquire()
    try:
        with pytest.raises(MindflowError, match="failed"):
            run_job(settings, "ingest")
        instance = dg.DagsterInstance.get()
        (failed,) = instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE]))
        assert failed.job_name == "ingest"
        _evaluate(sensor, instance, failed.run_id, dg.DagsterEventType.RUN_FAILURE)
    finally:
        other_writer.release()

    # The webhook got one JSON POST with the job, the run, the days and the first error line.
    ((path, content_type, body),) = webhook.received
    assert path == "/hooks/mindflow" and content_type == "application/json"
    assert body["event"] == "run_failed" and body["job"] == "ingest" and body["run_id"] == failed.run_id
    assert body["partition"] == "2026-10-12...2026-10-31"
    assert body["steps"] == ["episodes"]
    assert "is held by another mindflow job" in body["error"] and "\n" not in body["error"]
    assert body["ended_at"].endswith("Z") and body["started_at"] <= body["ended_at"]

    # The audit row: its log line now, its audit_log row with the next write that opens DuckDB.
    (line,) = [r for r in audit.read_log(settings) if r.action == "ALERT" and r.target == "job:ingest"]
    assert line.run_id == failed.run_id and "run failed [2026-10-12...2026-10-31]" in line.summary
    assert audit.pending(settings) == 1

    status = mindflow(home, "status")
    assert status.returncode == 0, status.stderr
    assert "ALERT 1 failed run(s)" in status.stdout
    assert f"ingest [2026-10-12...2026-10-31]  run {failed.run_id}" in status.stdout
    assert "is held by another mindflow job" in status.stdout

    # A tick evaluated again for the same run (the daemon killed mid-tick) records nothing twice.
    _evaluate(sensor, instance, failed.run_id, dg.DagsterEventType.RUN_FAILURE)
    assert len(webhook.received) == 1
    assert len([r for r in audit.read_log(settings) if r.target == "job:ingest"]) == 1

    # The file is free again: the next ingest succeeds, and its first audited write files the row.
    (ok,) = run_job(settings, "ingest", partition="2026-10-12...2026-10-31")
    assert ok.success
    with store.connect(settings.duckdb_path, read_only=True) as con:
        (row,) = audit.query(settings, action="ALERT", file="job:ingest", con=con)
    assert row.run_id == failed.run_id and row.actor == "run_failure_sensor"
    assert audit.pending(settings) == 0

    # Within 24 hours the failure stays listed; after that only until the job succeeded again.
    recovery = defs.resolve_sensor_def("run_recovery")
    _evaluate(recovery, instance, ok.run_id, dg.DagsterEventType.RUN_SUCCESS)
    assert [f.run_id for f in failures.recent(settings)] == [failed.run_id]
    assert failures.recent(settings, now=utcnow() + timedelta(hours=25)) == []


def test_a_failure_is_recorded_when_the_webhook_is_unreachable_and_without_one(home, monkeypatch):
    with store.connect(load_settings().duckdb_path):
        pass  # a migrated, free DuckDB file: the row goes straight into audit_log
    closed = Webhook()
    closed.close()
    monkeypatch.setenv("MINDFLOW_FAILURE_WEBHOOK_URL", closed.url)
    monkeypatch.setenv("MINDFLOW_FAILURE_WEBHOOK_TIMEOUT_S", "1")
    settings = load_settings()
    quoted = "ValueError: rejected answer 'Ada told me her mother's maiden name is Byron' (not JSON)"
    first = failures.RunFailure(
        "patrol", "run-1", "ada", failures.first_line(quoted + "\nTraceback"), utcnow()
    )

    done = failures.record(settings, first)
    assert done.audit == "duckdb" and done.posted is False
    with store.connect(settings.duckdb_path, read_only=True) as con:
        (row,) = audit.query(settings, action="ALERT", con=con)
    assert row.target == "job:patrol" and row.run_id == "run-1"
    # The error's first line only, with what it quoted left out: memory text stays in DuckDB.
    assert "maiden" not in row.summary and "ValueError: rejected answer '…' (not JSON)" in row.summary

    # An older failure stays listed while its job has not succeeded since.
    old = failures.RunFailure("decay", "run-0", "2026-11-01", "boom", utcnow() - timedelta(days=3))
    monkeypatch.delenv("MINDFLOW_FAILURE_WEBHOOK_URL")
    assert failures.record(load_settings(), old).posted is None
    assert [f.run_id for f in failures.recent(settings)] == ["run-1", "run-0"]  # newest first
    assert failures.resolve(settings, "decay", "run-2", utcnow()) is True
    assert failures.resolve(settings, "decay", "run-3", utcnow()) is False  # nothing open any more
    assert [f.run_id for f in failures.recent(settings)] == ["run-1"]
