"""Resonance with a model (MindBot phases 1 and 5) against the loopback model server.

A real pipeline (inbox, DuckDB, mechanical patrol, LanceDB) serves resonance over HTTP on
127.0.0.1; the `resonance` model is the scripted server. Valid answers are used; a broken
answer or a hung model gives the mechanical block within the time budget.
"""

from __future__ import annotations

import json
import re
import time
from datetime import date, datetime

import httpx
import pytest
from llm_server import NEVER

from mindflow import lance, store
from mindflow.api import create_app
from mindflow.api.server import BackgroundServer
from mindflow.config import load_settings
from mindflow.inbox import ingest
from mindflow.memories import publish
from mindflow.patrol import run_patrol

TOKEN = "tok-resonance-0001"
NOW = datetime(2026, 3, 20, 12, 0)
ORCHIDS = "Watered the orchids on the balcony before the storm."
TURNS = [ORCHIDS] + [
    f"Reviewed invoice batch {n} for the reconciliation reports with Lena." for n in range(1, 20)
]
# A raw message a mechanical search cannot use (ids and handles): only the model's queries can.
RAW = "re msg 88123 @lena_tg 17:02"
SOUL = "I speak warmly and briefly. SOUL-MARKER"
STORY = "# My story\n\nLena and I have worked together since winter. STORY-MARKER"


@pytest.fixture
def world(settings, embedder):
    path = settings.inbox / "ada" / "log.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text(
        "".join(
            json.dumps(
                {"id": f"t{n}", "ts": f"2026-03-{1 + n % 18:02d}T09:00:00Z", "speaker": "ada", "text": t}
            )
            + "\n"
            for n, t in enumerate(TURNS)
        )
    )
    with store.connect(settings.duckdb_path) as con:
        ingest(con, settings.inbox, date(2026, 1, 1), date(2026, 12, 31))
        run_patrol(con, "ada", embedder, now=NOW)
        publish(con, lance.connect(settings.lance_path), now=NOW)
    (settings.workspace / "ada").mkdir(parents=True, exist_ok=True)
    (settings.workspace / "ada" / "SOUL.md").write_text(SOUL)
    (settings.workspace / "ada" / "STORY.md").write_text(STORY)
    return settings


def serve(llm_server, **env):
    llm_server.configure("openai:gpt-4o", **env)
    app = create_app(load_settings(), tokens={TOKEN: "*"})
    server = BackgroundServer(app)
    return server


def resonate(server, query: str, k: int = 3) -> dict:
    with httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60
    ) as client:
        response = client.post(
            "/v1/beings/ada/resonance",
            json={"query": query, "k": k, "now": NOW.isoformat(), "recent": ["we talked about the plants"]},
        )
    assert response.status_code == 200, response.text
    return response.json()


def translate(received) -> dict:
    """A model that rewrites each fragment: `Recuerdo: ...`, one line per fragment."""
    fragments = re.findall(r"^\d+\. (.+)$", received.prompt_text.split("Fragments:\n", 1)[1], re.M)
    return {"lines": [f"Recuerdo: {f}" for f in fragments]}


def mechanical(body: dict) -> str:
    return "\n".join(["---", "[SUBCONSCIOUS RESONANCE]", *(i["line"] for i in body["items"]), "---"])


def test_phase_1_queries_are_fused_and_phase_5_rewrites_the_block(world, llm_server):
    llm_server.script([{"entities": ["Lena"], "queries": ["orchids on the balcony", "watering plants"]}])
    llm_server.responder = translate
    with serve(llm_server) as server:
        body = resonate(server, RAW, k=1)
    assert body["queries"] == [RAW, "orchids on the balcony", "watering plants"]
    # The memory only the model's queries point at comes first.
    assert body["items"][0]["memory"]["text"] == ORCHIDS
    assert (body["rewritten"], body["fallback"]) == (True, None)
    lines = body["text"].splitlines()
    assert lines[:2] == ["---", "[SUBCONSCIOUS RESONANCE]"] and lines[-1] == "---"
    assert lines[2] == "- Recuerdo: " + body["items"][0]["line"].removeprefix("- ")

    seeds, rewrite = llm_server.requests[0], llm_server.requests[1]
    assert RAW in seeds.prompt_text and "we talked about the plants" in seeds.prompt_text
    assert "2 to 3 short, clean search phrases" in seeds.prompt_text
    # Phase 5 gets the user's message (its language), SOUL.md, STORY.md and the four rules.
    for needed in (RAW, "SOUL-MARKER", "STORY-MARKER", "in the language of the user's message",
                   "1. Do not invent facts", "2. Do not add sensory details",
                   "3. Only rephrase style and point of view", "4. When uncertain, stay closer"):  # fmt: skip
        assert needed in rewrite.prompt_text


@pytest.mark.parametrize(
    "answers, why",
    [
        (["this is not JSON"], "resonance_seeds"),  # phase 1 broken: nothing of the model is used
        ([{"entities": [], "queries": []}], "resonance_seeds"),  # the wrong shape
        ([{"entities": [], "queries": ["orchids"]}, {"lines": ["one", "two", "three", "four"]}], "lines for"),
        ([{"entities": [], "queries": ["orchids"]}, 500], "resonance"),  # phase 5 fails
    ],
)
def test_a_broken_answer_gives_the_mechanical_block(world, llm_server, answers, why):
    llm_server.script(answers)
    with serve(llm_server) as server:
        body = resonate(server, "the orchids on the balcony")
    assert body["rewritten"] is False
    assert why in body["fallback"]
    assert body["items"] and body["text"] == mechanical(body)


def test_a_hung_model_gives_the_mechanical_block_within_the_budget(world, llm_server):
    llm_server.script([NEVER])
    with serve(llm_server, RESONANCE_BUDGET_S="1") as server:
        started = time.monotonic()
        body = resonate(server, "the orchids on the balcony")
        took = time.monotonic() - started
    assert "budget" in body["fallback"]
    assert body["text"] == mechanical(body) and body["items"][0]["memory"]["text"] == ORCHIDS
    assert took < 1 + 2.5  # the budget, and the mechanical path's own few hundred ms


def test_without_a_model_resonance_is_mechanical_and_asks_nothing(world, llm_server):
    llm_server.configure(None)
    with BackgroundServer(create_app(load_settings(), tokens={TOKEN: "*"})) as server:
        body = resonate(server, "the orchids on the balcony")
    assert (body["queries"], body["rewritten"], body["fallback"]) == (
        ["the orchids on the balcony"],
        False,
        None,
    )
    assert body["text"] == mechanical(body)
    assert llm_server.requests == []
