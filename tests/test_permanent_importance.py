"""i >= 0.8 is permanent (Gandalf): score decay never archives such a memory.

A real pipeline (ingest, patrol, decay, publish) and search_memory over HTTP on 127.0.0.1.
"""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta

import httpx

from mindflow import lance, store
from mindflow.api import create_app
from mindflow.api.server import BackgroundServer
from mindflow.config import Settings
from mindflow.decay import run_decay
from mindflow.inbox import ingest
from mindflow.loop.fold import fold_marks
from mindflow.memories import publish
from mindflow.patrol import run_patrol

NOW = datetime(2026, 1, 6, 3, 0, 0)
TOKEN = "tok-permanent-0001"
TURNS = [
    ("p1", 0.9, "My sister Vera was born on the ninth of April."),
    ("p2", 0.5, "The bakery on Vogel street sells rye bread on Tuesdays."),
    ("p3", 0.8, "Vera is allergic to penicillin."),
]


def test_an_important_memory_stays_dormant_and_searchable(tmp_path, embedder, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("MINDFLOW_HOME", str(home))
    settings = Settings(home=home, _env_file=None)
    path = settings.inbox / "ada" / "log.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text(
        "\n".join(
            json.dumps(
                {"id": i, "ts": "2026-01-05T09:00:00Z", "speaker": "Lena", "text": t, "importance": imp}
            )
            for i, imp, t in TURNS
        )
        + "\n"
    )
    with store.connect(settings.duckdb_path) as con:
        ingest(con, settings.inbox, date(2026, 1, 1), date(2026, 12, 31))
        run_patrol(con, "ada", embedder, now=NOW)
        run_decay(con, NOW)
        # 200 days untouched: 0.9 * exp(-0.03 * 200) is far under every threshold.
        report = run_decay(con, NOW + timedelta(days=200))
        statuses = dict(
            con.execute(
                "SELECT n.source_episode_ids[1], d.status FROM decay_scores d "
                "JOIN nodes n ON n.node_id = d.memory_ref"
            ).fetchall()
        )
        publish(con, lance.connect(settings.lance_path), now=NOW + timedelta(days=200))
    assert statuses == {"p1": "dormant", "p2": "archived", "p3": "dormant"}
    assert report.statuses["archived"] == 1

    app = create_app(settings, tokens={TOKEN: "*"})
    with (
        BackgroundServer(app) as server,
        httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as client,
    ):
        found = client.post("/v1/beings/ada/search_memory", json={"query": "Vera", "k": 10})
        bread = client.post("/v1/beings/ada/search_memory", json={"query": "bakery rye bread", "k": 10})
        # A forget still archives a permanent memory.
        (allergy,) = [m["memory_ref"] for m in found.json()["memories"] if m["text"] == TURNS[2][2]]
        proposal = client.post("/v1/beings/ada/forget", json={"refs": [allergy]}).json()["proposal_id"]
        confirmed = client.post("/v1/beings/ada/forget", json={"proposal_id": proposal, "confirm": True})
    assert found.status_code == 200, found.text
    texts = {m["text"] for m in found.json()["memories"]}
    assert texts == {TURNS[0][2], TURNS[2][2]}
    assert {m["status"] for m in found.json()["memories"]} == {"dormant"}
    assert bread.json()["memories"] == []  # archived: out of every recall path

    assert confirmed.json()["forgotten"] == [allergy]
    with store.connect(settings.duckdb_path) as con:
        fold_marks(con, settings, "ada", NOW + timedelta(days=201))
        run_decay(con, NOW + timedelta(days=201))
        after = dict(con.execute("SELECT memory_ref, status FROM decay_scores").fetchall())
    assert after[allergy] == "archived"
    assert sorted(after.values()) == ["archived", "archived", "dormant"]
