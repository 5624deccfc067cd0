"""The patrol job through Dagster with a model configured: a working one, and a dead one."""

from __future__ import annotations

import shutil

import dagster as dg
from conftest import SAMPLES
from llm_server import fake_model

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
