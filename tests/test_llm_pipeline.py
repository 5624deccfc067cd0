"""The patrol and narrative jobs through Dagster with a model configured: working, dead, hung, hostile."""

from __future__ import annotations

import logging
import shutil

import dagster as dg
import pytest
from conftest import SAMPLES
from llm_server import NEVER, fake_model, nested_json

from mindflow import store
from mindflow.config import load_settings
from mindflow.runner import run_job

SECRETS = ("sk-ant-test-SECRET", "sk-test-SECRET")


def materializations(instance, asset: str) -> list[dict]:
    records = instance.fetch_materializations(dg.AssetKey(asset), limit=100, ascending=True).records
    return [{k: v.value for k, v in r.asset_materialization.metadata.items()} for r in records]


def everything_logged(instance) -> str:
    out = []
    for run in instance.get_runs():
        for entry in instance.all_logs(run.run_id):
            out.append(entry.user_message or "")
            if entry.dagster_event is not None:
                out.append(repr(entry.dagster_event.event_specific_data))
    return "\n".join(out)


def test_patrol_with_a_model_extracts_and_writes_the_journal(home, llm_server):
    llm_server.configure("anthropic:claude-sonnet-4-5", fallback="openai:gpt-4o")
    llm_server.responder = fake_model
    settings = load_settings()
    shutil.copytree(SAMPLES / "inbox", settings.inbox)
    run_job(settings, "ingest")
    # Extraction on its own right after ingestion, then the patrol (nothing left to extract).
    assert run_job(settings, "extraction")[0].success
    assert run_job(settings, "patrol")[0].success
    with store.connect(settings.duckdb_path, read_only=True) as con:
        episodes, llm_scenes, other = con.execute(
            "SELECT (SELECT count(*) FROM episodes), count(*) FILTER (WHERE extractor LIKE 'anthropic:%'), "
            "count(*) FILTER (WHERE extractor NOT LIKE 'anthropic:%') FROM scene_notes"
        ).fetchall()[0]
        facts, superseded = con.execute(
            "SELECT count(*), count(*) FILTER (WHERE invalid_at IS NOT NULL) FROM facts"
        ).fetchall()[0]
        merged = con.execute("SELECT count(*) FROM history WHERE operation = 'merged'").fetchall()[0][0]
    extraction_calls = [r for r in llm_server.requests if "raw episodes" in r.prompt_text]
    # Two episodes per scene (a batch with an odd count leaves one alone).
    assert episodes // 2 <= llm_scenes <= episodes // 2 + len(extraction_calls)
    assert other == 0 and facts > 0 and superseded > 0 and merged > 0
    assert 1 <= len(extraction_calls) <= 4  # ~390 episodes: batches, not one call per episode
    for being in ("ada", "bram"):
        assert (settings.workspace / being / "think.md").read_text().startswith("# think\n\n- keep going")
        assert list((settings.workspace / being / "diary").glob("*.md"))
    instance = dg.DagsterInstance.get()
    # One materialization per being partition and run: the extraction run's first, the patrol's last.
    metas = materializations(instance, "scene_notes")
    scenes_meta, in_patrol = metas[0], metas[-1]
    assert scenes_meta["extractor"] == "anthropic:claude-sonnet-4-5"
    assert scenes_meta["llm/calls"] == len(extraction_calls) and in_patrol["llm/calls"] == 0
    assert scenes_meta["llm/input_tokens"] == 11 * len(extraction_calls)
    nodes_meta = materializations(instance, "nodes")[-1]
    assert nodes_meta["merged"] > 0 and nodes_meta["llm/failed_calls"] == 0
    assert materializations(instance, "journal")[-1]["written"] == 4
    seen = everything_logged(instance)
    assert not any(secret in seen for secret in SECRETS)


def test_patrol_with_a_dead_model_still_runs_mechanically(home, llm_server):
    # Extraction: every answer HTTP 500. Patrol: a malformed setting (no provider).
    llm_server.configure("openai:gpt-4o", LLM_MAX_RETRIES="0", LLM_PATROL="gpt-4o")
    settings = load_settings()
    shutil.copytree(SAMPLES / "inbox", settings.inbox)
    run_job(settings, "ingest")
    assert run_job(settings, "patrol")[0].success
    instance = dg.DagsterInstance.get()
    scenes_meta = materializations(instance, "scene_notes")[-1]
    assert scenes_meta["llm/failed_calls"] >= 1 and "HTTP 500" in scenes_meta["llm/errors"]
    assert scenes_meta["pending"] > 0 and scenes_meta["new"] == 0
    with store.connect(settings.duckdb_path, read_only=True) as con:
        assert con.execute("SELECT count(*) FROM scene_notes").fetchall()[0][0] == 0
        assert con.execute("SELECT count(*) FROM facts").fetchall()[0][0] == 0
        roots = con.execute("SELECT count(*) FROM clusters WHERE parent_id IS NULL").fetchall()[0][0]
    assert roots == 4  # the mechanical steps ran for both beings
    nodes_meta = materializations(instance, "nodes")[-1]
    assert "provider:model" in nodes_meta["llm_config_error"]
    assert nodes_meta["llm_steps"].startswith("skipped")
    assert not (settings.workspace / "ada" / "think.md").exists()


def nodes_per_being(settings) -> dict[str, int]:
    with store.connect(settings.duckdb_path, read_only=True) as con:
        return dict(con.execute("SELECT being_id, count(*) FROM nodes GROUP BY 1").fetchall())


def test_answers_nested_past_the_parsers_limit_fail_no_run(home, llm_server):
    # Only the patrol and narrative models answer (nested JSON); extraction is mechanical.
    llm_server.configure(
        None, LLM_PATROL="openai:gpt-4o", LLM_NARRATIVE="openai:gpt-4o", LLM_MAX_RETRIES="0",
        LLM_BREAKER_FAILURES="1000",
    )  # fmt: skip
    llm_server.responder = lambda request: nested_json()
    settings = load_settings()
    shutil.copytree(SAMPLES / "inbox", settings.inbox)
    run_job(settings, "ingest")
    assert run_job(settings, "patrol")[0].success
    nodes = nodes_per_being(settings)
    assert set(nodes) == {"ada", "bram"} and min(nodes.values()) > 0
    instance = dg.DagsterInstance.get()
    nodes_meta = materializations(instance, "nodes")[-1]
    assert nodes_meta["rejected_llm_answers"] == nodes_meta["llm/failed_calls"] > 0
    assert "JSON nested too deeply" in nodes_meta["llm/errors"]
    assert materializations(instance, "journal")[-1]["written"] == 0
    assert run_job(settings, "narrative")[0].success
    story_meta = materializations(instance, "story")[-1]
    assert story_meta["failed_batches"] == 2 and "JSON nested too deeply" in story_meta["errors"]
    assert materializations(instance, "core_memory")[-1]["modes"] == "mechanical (llm failed)"
    for being in ("ada", "bram"):  # STORY.md waits for the next run; MEMORY.md is written mechanically
        assert not (settings.workspace / being / "STORY.md").exists()
        assert "## Critical Facts" in (settings.workspace / being / "MEMORY.md").read_text()


@pytest.mark.timeout(120)  # before the breaker: 40 requests of 0.5 s; with defaults, 40 x 2 minutes
def test_a_hung_model_costs_a_patrol_a_bounded_time(home, llm_server):
    llm_server.configure(
        None, LLM_PATROL="openai:gpt-4o", LLM_TIMEOUT_S="0.5", LLM_MAX_RETRIES="1", LLM_BREAKER_FAILURES="3",
    )  # fmt: skip
    llm_server.responder = lambda request: NEVER
    settings = load_settings()
    shutil.copytree(SAMPLES / "inbox", settings.inbox)
    run_job(settings, "ingest")
    (summary,) = run_job(settings, "patrol")
    assert summary.success
    # Three requests in the whole run (both beings, roots, ❹, ❻, diary, think.md), then none.
    assert len(llm_server.requests) == 3
    instance = dg.DagsterInstance.get()
    nodes_meta = materializations(instance, "nodes")[-1]
    journal_meta = materializations(instance, "journal")[-1]
    assert nodes_meta["llm/calls"] == 3 and nodes_meta["llm/breaker_open"] is True
    assert nodes_meta["llm/skipped_calls"] > 0 and nodes_meta["llm/run_seconds"] < 3 * 0.5 + 1
    assert (journal_meta["llm/calls"], journal_meta["llm/skipped_calls"], journal_meta["written"]) == (
        0,
        4,
        0,
    )
    # Two completions were sent and failed (a timeout and its retry, then the third timeout that
    # opened the breaker); the skipped ones are not counted as rejected answers.
    assert (nodes_meta["rejected_llm_answers"], journal_meta["rejected_llm_answers"]) == (2, 0)
    nodes = nodes_per_being(settings)
    assert set(nodes) == {"ada", "bram"} and min(nodes.values()) > 0
    said = [
        e.user_message
        for e in instance.all_logs(summary.run_id)
        if e.level == logging.WARNING and "breaker open" in (e.user_message or "")
    ]
    assert len(said) == 1 and "openai:gpt-4o" in said[0]
