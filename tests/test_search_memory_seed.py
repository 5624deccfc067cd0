"""search_memory (seed 002) reaches the whole `when` history of a memory, by substring too.

Episodes ingested into real DuckDB, a real ❹ merge answered by the loopback model server,
published to LanceDB and searched over HTTP on 127.0.0.1.
"""

from __future__ import annotations

import json
from datetime import date, datetime

import httpx
import pytest

from mindflow import lance, patrol, store
from mindflow.api import create_app
from mindflow.api.server import BackgroundServer
from mindflow.config import Settings, load_settings
from mindflow.inbox import ingest
from mindflow.llm import resolve
from mindflow.memories import publish

NOW = datetime(2025, 3, 20, 3, 0, 0)
TOKEN = "tok-search-0001"
TURNS = [
    ("e1", "2025-03-14T09:00:00Z", "Met Hashi at the railway-station after the long trip."),
    ("e2", "2025-03-15T18:00:00Z", "Dinner with an old friend from university, we talked for hours."),
    ("e3", "2025-03-16T10:00:00Z", "Bought new running shoes in the city."),
]


@pytest.fixture
def served(tmp_path, embedder, llm_server, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("MINDFLOW_HOME", str(home))
    settings = Settings(home=home, _env_file=None)
    path = settings.inbox / "ada" / "log.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text(
        "\n".join(json.dumps({"id": i, "ts": ts, "speaker": "Lena", "text": t}) for i, ts, t in TURNS) + "\n"
    )
    llm_server.configure("openai:gpt-4o")
    with store.connect(settings.duckdb_path) as con:
        ingest(con, settings.inbox, date(2025, 1, 1), date(2025, 12, 31))
        patrol.run_patrol(con, "ada", embedder, now=NOW)
        ref = dict(con.execute("SELECT source_episode_ids[1], node_id FROM nodes").fetchall())
        # The dinner memory absorbs the station one: its action no longer names Hashi, the
        # survivor's `when` history keeps the absorbed action and date.
        llm_server.script([{"merges": [{"survivor": ref["e2"], "absorbed": [ref["e1"]]}], "make_dead": []}])
        con.execute(
            "UPDATE nodes SET cluster_id = ? WHERE being_id = 'ada'",
            [patrol.root_cluster_id("ada", "Private")],
        )
        patrol.step_consolidate(con, "ada", resolve(load_settings(), "patrol"), NOW)
        publish(con, lance.connect(settings.lance_path), now=NOW)
    app = create_app(settings, tokens={TOKEN: "*"})
    with (
        BackgroundServer(app) as server,
        httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as client,
    ):
        yield client, ref


def _searched(client, query):
    response = client.post("/v1/beings/ada/search_memory", json={"query": query, "k": 10})
    assert response.status_code == 200, response.text
    return [m["memory_ref"] for m in response.json()["memories"]]


def test_an_absorbed_action_and_its_date_find_the_survivor(served):
    client, ref = served
    assert ref["e2"] in _searched(client, "Hashi")  # the seed's example
    assert ref["e2"] in _searched(client, "2025-03-14")  # the absorbed memory's date
    assert ref["e3"] not in _searched(client, "Hashi")


def test_the_action_matches_by_substring_as_well_as_by_tokens(served):
    client, ref = served
    assert _searched(client, "shoes") == [ref["e3"]]  # a token
    assert _searched(client, "runn") == [ref["e3"]]  # part of a word
    assert ref["e2"] in _searched(client, "station")  # inside railway-station, in the history
