"""Recall's hybrid weights and recency floor are settings (MINDFLOW_RECALL_*), not constants.

A real pipeline (ingest, patrol, publish), a served API on 127.0.0.1 per setting, and the
CLI's start-up check.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import date, datetime

import httpx
import pytest

from mindflow import lance, store
from mindflow.api import create_app
from mindflow.api.server import BackgroundServer
from mindflow.config import Settings
from mindflow.inbox import ingest
from mindflow.memories import publish
from mindflow.patrol import run_patrol

NOW = datetime(2026, 1, 6, 3, 0, 0)
TOKEN = "tok-weights-0001"
KEYWORD = "Kvothe paid the invoice."
MEANING = "Strong showers are expected on the day after today."  # no word of the query
QUERY = "is heavy rain forecast for tomorrow? asks Kvothe"


@pytest.fixture(scope="module")
def home(tmp_path_factory, embedder):
    home = tmp_path_factory.mktemp("weights") / "home"
    settings = Settings(home=home, _env_file=None)
    path = settings.inbox / "ada" / "log.jsonl"
    path.parent.mkdir(parents=True)
    rows = [("w1", KEYWORD), ("w2", MEANING)]
    path.write_text(
        "\n".join(
            json.dumps({"id": i, "ts": "2026-01-05T09:00:00Z", "speaker": "Lena", "text": t}) for i, t in rows
        )
        + "\n"
    )
    with store.connect(settings.duckdb_path) as con:
        ingest(con, settings.inbox, date(2026, 1, 1), date(2026, 12, 31))
        run_patrol(con, "ada", embedder, now=NOW)
        publish(con, lance.connect(settings.lance_path), now=NOW)
    return home


def _served(home, query: str, **weights) -> list[dict]:
    settings = Settings(home=home, _env_file=None, **weights)
    with (
        BackgroundServer(create_app(settings, tokens={TOKEN: "*"})) as server,
        httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as client,
    ):
        response = client.post("/v1/beings/ada/recall", json={"query": query, "k": 5})
    assert response.status_code == 200, response.text
    return response.json()["memories"]


def _recalled(home, **weights) -> list[str]:
    return [m["text"] for m in _served(home, QUERY, **weights)]


def test_the_speaker_and_time_levers_come_from_the_settings(home):
    query = "what did Lena pay on January 5"  # both memories: Lena's, on 2026-01-05

    def parts(**weights) -> dict[str, dict]:
        return {m["text"]: m["parts"] for m in _served(home, query, **weights)}

    default = parts()
    assert default[KEYWORD]["speaker"] == pytest.approx(0.2)  # the speaker lever's default
    unnamed = parts(recall_speaker_weight=0)
    assert unnamed[KEYWORD]["speaker"] == 0
    assert default[KEYWORD]["fused"] == pytest.approx(unnamed[KEYWORD]["fused"] + 0.2)
    # The time lever is on by default (0.2): without it, the fused score of a memory of that day
    # is lower by 0.2 at least (its neighbour's lift fell too).
    untimed = parts(recall_time_weight=0)
    assert untimed[KEYWORD]["speaker"] == pytest.approx(0.2)
    assert default[KEYWORD]["fused"] - untimed[KEYWORD]["fused"] >= 0.2 - 1e-6
    assert Settings(_env_file=None, recall_time_slack_days=1).recall_overrides() == {"time_slack_days": 1}


def test_the_reorder_comes_from_the_settings(home, monkeypatch):
    def reorder(**weights) -> list[float]:
        return [m["parts"]["reorder"] for m in _served(home, QUERY, **weights)]

    assert any(r > 0 for r in reorder())  # on by default (0.05)
    assert reorder(recall_reorder_weight=0) == [0.0] * len(reorder())
    monkeypatch.setenv("MINDFLOW_RECALL_REORDER_WEIGHT", "0.1")
    assert Settings(_env_file=None).recall_overrides() == {"reorder_weight": 0.1}
    monkeypatch.setenv("MINDFLOW_RECALL_REORDER_WEIGHT", "-1")
    with pytest.raises(ValueError, match="recall_reorder_weight"):
        Settings(_env_file=None)


def test_the_session_document_lever_comes_from_its_variable(monkeypatch):
    monkeypatch.setenv("MINDFLOW_RECALL_SESSION_DOC_WEIGHT", "0.2")
    assert Settings(_env_file=None).recall_overrides() == {"session_doc_weight": 0.2}
    monkeypatch.setenv("MINDFLOW_RECALL_SESSION_DOC_WEIGHT", "-1")
    with pytest.raises(ValueError, match="recall_session_doc_weight"):
        Settings(_env_file=None)


def test_the_mmr_lambda_comes_from_its_variable(monkeypatch):
    from mindflow.recall import RecallConfig

    assert RecallConfig().mmr_lambda == 0.8  # chosen by leave-one-out (README: Recall quality)
    monkeypatch.setenv("MINDFLOW_RECALL_MMR_LAMBDA", "1")
    overrides = Settings(_env_file=None).recall_overrides()
    assert overrides == {"mmr_lambda": 1.0}
    assert RecallConfig.for_model("all-MiniLM-L6-v2", **overrides).mmr_lambda == 1.0
    monkeypatch.setenv("MINDFLOW_RECALL_MMR_LAMBDA", "1.5")
    with pytest.raises(ValueError, match="recall_mmr_lambda"):
        Settings(_env_file=None)


def test_the_weights_come_from_the_settings(home):
    both = _recalled(home)
    vector_only = _recalled(home, recall_text_weight=0)
    text_only = _recalled(home, recall_vector_weight=0)
    assert set(both) == {KEYWORD, MEANING}
    # The words alone put the rare name first, the vectors alone the paraphrase.
    assert text_only[0] == KEYWORD
    assert vector_only[0] == MEANING


@pytest.mark.parametrize(
    "env, message",
    [
        ({"MINDFLOW_RECALL_TEXT_WEIGHT": "-1"}, "MINDFLOW_RECALL_TEXT_WEIGHT"),
        ({"MINDFLOW_RECALL_RECENCY_FLOOR": "1.5"}, "MINDFLOW_RECALL_RECENCY_FLOOR"),
        ({"MINDFLOW_RECALL_TEXT_WEIGHT": "0", "MINDFLOW_RECALL_VECTOR_WEIGHT": "0"}, "are both 0"),
    ],
)
def test_an_invalid_setting_stops_the_server_at_start_with_its_name(tmp_path, env, message):
    run = subprocess.run(
        [sys.executable, "-m", "mindflow.cli", "serve", "--port", "1"],
        env={**os.environ, "MINDFLOW_HOME": str(tmp_path), "HF_HUB_OFFLINE": "1", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2, run.stderr
    assert message in run.stderr and "Traceback" not in run.stderr
