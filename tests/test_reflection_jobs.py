"""Reflection in Dagster: `mindflow run reflection`, `mindflow review`, the `approvals` job, the sensors,
the schedule, `mindflow status` and the context's alerts, through the real pipeline."""

from __future__ import annotations

import json
from datetime import timedelta

import dagster as dg
import pytest
from typer.testing import CliRunner

from mindflow import store
from mindflow.cli import app
from mindflow.config import load_settings
from mindflow.loop.proposals import ProposalStore
from mindflow.models import utcnow
from mindflow.reflection.items import pending_items
from mindflow.runner import run_job

MISO = "Remember this: Lena's cat Miso is allergic to chicken, never feed him chicken."


def _episodes(settings, being: str, rows: list[tuple[str, str]], name: str = "one.jsonl") -> None:
    folder = settings.inbox / being
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(
        "".join(json.dumps({"ts": ts, "text": text, "speaker": "Lena"}) + "\n" for ts, text in rows)
    )


@pytest.fixture
def reviewed(monkeypatch, settings):
    """Being ada in review mode, with a memory said twice and two values of one fact."""
    monkeypatch.setenv("MINDFLOW_APPROVAL_MODES", "ada=review")
    settings = load_settings()
    _episodes(
        settings,
        "ada",
        [
            ("2026-04-01T09:00:00Z", MISO),
            ("2026-04-01T09:05:00Z", "We booked the Porto flights for 11 March."),
            ("2026-04-02T18:00:00Z", MISO),
        ],
    )
    run_job(settings, "ingest")
    (patrol,) = run_job(settings, "patrol", being="ada")
    assert patrol.success
    with store.connect(settings.duckdb_path) as con:
        for fact_id, value, day in (("f-old", "Lisbon", 1), ("f-new", "Porto", 3)):
            con.execute(
                "INSERT INTO facts (fact_id, being_id, entity, key, value, source_episode_ids, valid_at, "
                "created_at) VALUES (?, 'ada', 'Lena', 'lives in', ?, [], ?, now()::TIMESTAMP)",
                [fact_id, value, f"2026-04-0{day}"],
            )
    return settings


def _state(settings):
    with store.connect(settings.duckdb_path, read_only=True) as con:
        nodes = con.execute("SELECT node_id, status, importance FROM nodes ORDER BY node_id").fetchall()
        facts = con.execute("SELECT fact_id, invalid_at FROM facts ORDER BY fact_id").fetchall()
    memory = settings.workspace / "ada" / "MEMORY.md"
    return nodes, facts, memory.read_text() if memory.exists() else None


def test_reflection_and_review_end_to_end_through_the_cli(reviewed):
    settings = reviewed
    cli = CliRunner()
    before = _state(settings)

    result = cli.invoke(app, ["run", "reflection", "--being", "ada"])
    assert result.exit_code == 0, result.output
    assert "reflections" in result.output and "modes=review" in result.output
    assert _state(settings) == before  # review mode: nothing applied
    items = pending_items(ProposalStore(settings.proposals), "ada")
    tags = [item.tag for item in items]
    assert "MERGE" in tags and "CONFLICT" in tags and "CORE" in tags, tags
    summary = (settings.workspace / "ada" / "reflection" / "pending-reflection.md").read_text()
    assert all(item.proposal_id in summary for item in items)

    status = cli.invoke(app, ["status"])
    assert f"ada: {len(items)} proposal(s) waiting" in status.output and "ALERT ada" not in status.output

    merge = next(i for i in items if i.tag == "MERGE")
    conflict = next(i for i in items if i.tag == "CONFLICT")
    listed = cli.invoke(app, ["review", "--being", "ada", "--no-apply"])
    assert listed.exit_code == 0 and f"{merge.number}. [MERGE]" in listed.output  # no decision without flags
    result = cli.invoke(
        app, ["review", "--being", "ada", "--approve", str(merge.number), "--reject", str(conflict.number)]
    )
    assert result.exit_code == 0, result.output
    assert "approved 1, rejected 1, deferred 0 (approval: partial)" in result.output
    assert "applied_proposals: applied=1" in result.output

    nodes, facts, memory = _state(settings)
    assert facts == before[1] and memory == before[2]  # the rejected and the undecided stay as they were
    dead = [n for n in nodes if n[1] == "dead"]
    assert len(dead) == 1 and dead[0][0] in merge.proposal.payload["absorbed"]
    with store.connect(settings.duckdb_path, read_only=True) as con:
        (actor, approval), *_ = con.execute(
            "SELECT actor, approval FROM audit_log WHERE summary LIKE ?", [f"%[{merge.proposal_id}]%"]
        ).fetchall()
    assert actor == f"reflection:{merge.proposal.payload['reflection_id']}" and approval == "partial"
    # The merge is published at once: recall no longer holds the absorbed memory as active.
    from mindflow import lance

    table = lance.open_table(lance.connect(settings.lance_path), "memories")
    rows = table.search().where(f"memory_ref = '{dead[0][0]}'").limit(1).to_arrow().to_pylist()
    assert rows and rows[0]["status"] == "dead"

    again = cli.invoke(app, ["review", "--being", "ada", "--approve", "99"])
    assert again.exit_code == 1 and "no pending item 99" in again.output


def test_the_sensors_ask_for_reflection_and_approvals_runs(reviewed, monkeypatch):
    from sensors.reflection import approvals_sensor, reflection_sensor

    settings = reviewed
    instance = dg.DagsterInstance.get()

    def tick(sensor):
        with dg.build_sensor_context(instance=instance) as context:
            result = sensor(context)
        if isinstance(result, dg.RunRequest):
            result = [result]
        return result if not isinstance(result, list) else dg.SensorResult(run_requests=result)

    # The episodes arrived just now: the session has not ended yet.
    assert isinstance(tick(reflection_sensor), dg.SkipReason)
    monkeypatch.setenv("MINDFLOW_REFLECTION_SESSION_GAP_MIN", "0.0001")
    (request,) = tick(reflection_sensor).run_requests
    assert request.partition_key == "ada" and request.tags["mindflow/reflection_reason"] == "session_ended"

    (run,) = run_job(load_settings(), "reflection", being="ada")
    assert run.success
    assert isinstance(tick(reflection_sensor), dg.SkipReason)  # nothing new since
    assert isinstance(tick(approvals_sensor), dg.SkipReason)

    # The reflect phrase starts one at once, whatever the gap.
    monkeypatch.setenv("MINDFLOW_REFLECTION_SESSION_GAP_MIN", "600")
    _episodes(settings, "ada", [("2026-04-03T10:00:00Z", "Let's reflect on this week.")], "two.jsonl")
    run_job(load_settings(), "ingest")
    (request,) = tick(reflection_sensor).run_requests
    assert request.tags["mindflow/reflection_reason"] == "reflect_trigger"

    # A decision waits: the approvals sensor asks for a run, once per set of proposals.
    item = pending_items(ProposalStore(settings.proposals), "ada")[0]
    result = CliRunner().invoke(app, ["review", "--being", "ada", "--approve", "1", "--no-apply"])
    assert result.exit_code == 0, result.output
    (first,) = tick(approvals_sensor).run_requests
    (same,) = tick(approvals_sensor).run_requests
    assert first.run_key == same.run_key
    (applied,) = run_job(load_settings(), "approvals")
    assert applied.success and "applied=1" in applied.changes
    assert ProposalStore(settings.proposals).get("ada", item.proposal_id).applied_at is not None
    assert isinstance(tick(approvals_sensor), dg.SkipReason)


def test_stale_proposals_are_flagged_in_status_and_the_context(reviewed, monkeypatch):
    from mindflow.context import alerts

    settings = reviewed
    (run,) = run_job(settings, "reflection", being="ada")
    assert run.success and alerts(settings, "ada") == []
    later = utcnow() + timedelta(hours=25)
    monkeypatch.setattr("mindflow.reflection.items.utcnow", lambda: later)
    (alert,) = alerts(settings, "ada")
    assert alert.change == "stale_proposals" and "mindflow review --being ada" in alert.message
    status = CliRunner().invoke(app, ["status"])
    assert "ALERT ada:" in status.output and "pending for more than 24 hours" in status.output


def test_auto_mode_and_procedures_cli(settings):
    _episodes(settings, "ada", [("2026-04-01T09:00:00Z", MISO), ("2026-04-02T09:00:00Z", MISO)])
    run_job(settings, "ingest")
    run_job(settings, "patrol", being="ada")
    (run,) = run_job(settings, "reflection", being="ada")
    assert run.success and "modes=auto" in run.changes and "pending=0" in run.changes
    with store.connect(settings.duckdb_path, read_only=True) as con:
        assert con.execute("SELECT count(*) FROM nodes WHERE status = 'dead'").fetchone()[0] == 1
        assert con.execute("SELECT count(*) FROM audit_log WHERE approval = 'auto'").fetchone()[0] >= 1

    cli = CliRunner()
    steps = ["--step", "Book the vet", "--step", "Pack chicken-free food"]
    result = cli.invoke(
        app, ["procedures", "add", "--being", "ada", "--name", "Vet visit", "--trigger", "a check-up", *steps]
    )
    assert result.exit_code == 0 and "published_procedures=1" in result.output, result.output
    result = cli.invoke(
        app, ["procedures", "add", "--being", "ada", "--name", "vet visit", "--trigger", "a check-up",
              *steps, "--step", "Log the weight"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    listed = cli.invoke(app, ["procedures", "list", "--being", "ada", "--name", "Vet visit"])
    assert "Vet visit v1, superseded" in listed.output and "v2 — when a check-up" in listed.output
    bad = cli.invoke(
        app, ["procedures", "add", "--being", "ada", "--name", "x", "--trigger", " ", "--step", "y"]
    )
    assert bad.exit_code == 1 and "needs a name, a trigger" in bad.output
