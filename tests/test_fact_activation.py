"""Gandalf's fact activation (seed 003) and the facts lookup, end to end.

Episodes in real DuckDB, facts extracted through the loopback model server, the graph
published to LanceDB, `GET facts` over HTTP on 127.0.0.1 (whose answers count as accesses),
and the decay job through Dagster:

    Robert Smith (alias Bob) --works-with--> Zoë          (their facts share episode r1)
    Robert Smith             --works-on-->   Ledger        (no shared episode)
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta

import httpx
import pytest

from mindflow import events, extraction, graph, lance, patrol, store
from mindflow.api import create_app
from mindflow.api.server import BackgroundServer
from mindflow.client import MindflowClient
from mindflow.config import load_settings
from mindflow.fact_activation import TOOL, ActivationParams, access_event, activation, run_activation, tier
from mindflow.inbox import ingest
from mindflow.llm import resolve
from mindflow.memories import publish
from mindflow.models import utcnow
from mindflow.runner import run_job

TOKEN = "tok-facts-000001"
BASE = utcnow().replace(microsecond=0)  # the API stamps accesses with the real clock
DAY = BASE.date()
TURNS = [
    ("r1", "Bob moved to Lisbon; he works with Zoë on the design now."),
    ("r2", "Robert still works for Acme Corp."),
    ("r3", "Robert is on the Ledger project this quarter."),
]


def answer(facts=None, episodes=None):
    """The model's answer for TURNS, or for `episodes` with only `facts` (drawn from them)."""
    if episodes is not None:
        facts = [{**f, "episode_ids": episodes} for f in facts]
    scene = {
        "episode_ids": episodes or [i for i, _ in TURNS], "action": "Caught up on Robert's news", "actors": ["Robert"],
        "when": [{"date": DAY.isoformat(), "action": "caught up"}], "importance": 0.7,
    }  # fmt: skip
    return {
        "scenes": [scene],
        "entities": [{"name": "Robert Smith", "aliases": ["Bob", "Robert"]}, {"name": "Zoë", "aliases": []}],
        "facts": facts
        if facts is not None
        else [
            {
                "entity": "Robert Smith",
                "key": "city",
                "value": "Lisbon",
                "importance": 0.9,
                "episode_ids": ["r1"],
            },
            {"entity": "Zoë", "key": "role", "value": "designer", "importance": 0.2, "episode_ids": ["r1"]},
            # No importance of its own: the scene's 0.7.
            {"entity": "Robert", "key": "employer", "value": "Acme Corp", "episode_ids": ["r2"]},
        ],
        "relations": []
        if episodes
        else [
            {"subject": "Robert Smith", "predicate": "works-with", "object": "Zoë", "episode_ids": ["r1"]},
            {"subject": "Robert Smith", "predicate": "works-on", "object": "Ledger", "episode_ids": ["r3"]},
        ],
    }


@pytest.fixture
def world(settings, llm_server):
    path = settings.inbox / "ada" / "log.jsonl"
    path.parent.mkdir(parents=True)
    start = BASE - timedelta(days=1)
    path.write_text(
        "\n".join(
            json.dumps({"id": i, "ts": (start + timedelta(minutes=n)).isoformat() + "Z", "speaker": "ada",
                        "text": text})
            for n, (i, text) in enumerate(TURNS)
        ) + "\n"
    )  # fmt: skip
    llm_server.configure("openai:gpt-4o")
    llm_server.script([answer()])
    with store.connect(settings.duckdb_path) as con:
        ingest(con, settings.inbox, DAY - timedelta(days=2), DAY)
        extraction.extract(con, "ada", resolve(load_settings(), "extraction"), start + timedelta(hours=1))
        graph.publish_graph(con, lance.connect(settings.lance_path), now=BASE)
    return settings


@pytest.fixture
def db(world):
    """The world's DuckDB, open for one test (a job run by the test waits for it: close it first)."""
    with store.connect(world.duckdb_path) as con:
        yield con


def fact(con, entity_key_like: str, key: str) -> dict:
    row = con.execute(
        "SELECT fact_id, importance, activation, access_count, last_accessed FROM facts "
        "WHERE lower(entity) LIKE ? AND key = ?",
        [entity_key_like, key],
    ).fetchone()
    return dict(
        zip(("fact_id", "importance", "activation", "access_count", "last_accessed"), row, strict=True)
    )


@pytest.fixture
def api(world):
    app = create_app(world, tokens={TOKEN: "*"})
    with (
        BackgroundServer(app) as server,
        httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as client,
    ):
        yield server, client


def access_events(settings, expected: int) -> list[dict]:
    """The fact_access events appended so far, once `expected` are there (the API writes them after
    sending its answer)."""
    deadline = time.monotonic() + 10
    while True:
        files = sorted(settings.events.glob("*/*.jsonl"))
        found = [e for p in files for x in p.read_text().splitlines() if (e := json.loads(x))["tool"] == TOOL]
        if len(found) >= expected or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def get_facts(client, **params) -> dict:
    response = client.get("/v1/beings/ada/facts", params=params)
    assert response.status_code == 200, response.text
    return response.json()


def test_importance_comes_from_extraction_and_a_new_fact_starts_warm(db):
    con = db
    city, role, employer = (
        fact(con, "robert%", "city"),
        fact(con, "zo%", "role"),
        fact(con, "robert%", "employer"),
    )
    assert (city["importance"], role["importance"], employer["importance"]) == (0.9, 0.2, 0.7)
    # 1 + importance, at the moment it was seen.
    assert city["activation"] == pytest.approx(1.9)
    assert role["activation"] == pytest.approx(1.2)
    assert {tier(f["activation"]) for f in (city, role, employer)} == {"warm"}


def test_tiers_and_the_formula():
    params = ActivationParams()
    assert [tier(v) for v in (2.01, 2.0, 1.5, 1.0, 0.99, 0.0)] == [
        "hot",
        "warm",
        "warm",
        "warm",
        "cool",
        "cool",
    ]
    assert activation(0.5, 1, 0, params) == pytest.approx(1.5)
    assert activation(0.5, 3, 0, params) == pytest.approx(2.5)  # each access after the first: +0.5
    assert activation(0.5, 3, 10, params) == pytest.approx(2.5 * 0.6065306597)  # exp(-0.05 * 10)
    assert activation(1.0, 100, 0, params) == pytest.approx(5.0)  # capped


def test_accesses_through_the_api_raise_activation_and_the_decay_job_folds_them_once(api, world):
    server, client = api
    settings = world
    for _ in range(3):
        got = get_facts(client, entity="Bob")  # the alias
        assert got["entity"] == "Robert Smith" and got["resolved_by"] == "alias"
        assert {f["key"] for f in got["facts"]} == {"city", "employer"}
    accesses = access_events(settings, 3)
    assert len(accesses) == 3 and all(len(e["memory_refs"]) == 2 for e in accesses)

    with store.connect(settings.duckdb_path) as con:
        report = run_activation(con, utcnow(), settings.events)
        assert (report.events, report.accessed, report.unknown) == (3, 2, 0)
        city = fact(con, "robert%", "city")
        assert city["access_count"] == 4
        assert city["activation"] == pytest.approx(1 + 0.9 + 0.5 * 3, abs=0.01)
        assert tier(city["activation"]) == "hot"
        assert tier(fact(con, "zo%", "role")["activation"]) == "warm"  # never returned
        # A second run folds nothing again.
        again = run_activation(con, utcnow(), settings.events)
        assert again.events == 0 and fact(con, "robert%", "city")["access_count"] == 4
        # Each events file is noted as read, so the next night reads only new ones.
        assert events.unread_files(con, events.event_files(settings.events), TOOL, "") == []
        get_facts(client, entity="Bob")
        assert len(access_events(settings, 4)) == 4
        assert len(events.unread_files(con, events.event_files(settings.events), TOOL, "")) == 1
        assert run_activation(con, utcnow(), settings.events).events == 1
        assert fact(con, "robert%", "city")["access_count"] == 5

    # The nightly decay job folds, scores and publishes: the published row says Hot.
    run_job(settings, "decay")
    table = lance.connect(settings.lance_path).open_table(graph.FACTS)
    rows = {r["key"]: r for r in table.search().limit(None).to_arrow().to_pylist()}
    assert rows["city"]["tier"] == "hot" and rows["role"]["tier"] == "warm"


def said_again(con, settings, llm_server, episode_id: str, ts: datetime, text: str, seen: dict) -> None:
    """A new episode at `ts` from which extraction draws `seen` again."""
    path = settings.inbox / "ada" / f"{episode_id}.jsonl"
    path.write_text(
        json.dumps({"id": episode_id, "ts": ts.isoformat() + "Z", "speaker": "ada", "text": text}) + "\n"
    )
    ingest(con, settings.inbox, ts.date(), ts.date())
    llm_server.script([answer(facts=[seen], episodes=[episode_id])])
    extraction.extract(con, "ada", resolve(load_settings(), "extraction"), ts)


def test_activation_decays_daily_and_cool_facts_leave_the_published_graph_but_not_duckdb(
    world, db, llm_server
):
    con = db
    db = lance.connect(world.lance_path)
    params = ActivationParams(cool_days=30)
    later = BASE + timedelta(days=20)
    # Extraction sees Robert's city again 20 days on: an access.
    said_again(con, world, llm_server, "r4", later, "Bob says Lisbon is still great.", answer()["facts"][0])

    nine = run_activation(con, BASE + timedelta(days=9), params=params)
    role = fact(con, "zo%", "role")
    assert role["activation"] == pytest.approx(1.2 * 2.718281828 ** (-0.05 * 10), rel=0.01)
    assert tier(role["activation"]) == "cool" and nine.pruned == 0

    month = BASE + timedelta(days=35)
    report = run_activation(con, month, params=params)
    assert tier(fact(con, "robert%", "city")["activation"]) == "warm"  # accessed 15 days ago
    assert report.pruned == 2  # Zoë's role and Robert's employer: Cool and unused for 36 days
    graph.publish_graph(con, db, now=month, params=params)
    published = {r["key"] for r in db.open_table(graph.FACTS).search().limit(None).to_arrow().to_pylist()}
    assert published == {"city"}
    assert con.execute("SELECT count(*) FROM facts").fetchone()[0] == 3  # never deleted

    # Seen again: back in the graph.
    said_again(con, world, llm_server, "r5", month, "Zoë is still our designer.", answer()["facts"][1])
    graph.publish_graph(con, db, now=month, params=params)
    published = {r["key"] for r in db.open_table(graph.FACTS).search().limit(None).to_arrow().to_pylist()}
    assert published == {"city", "role"}


def test_co_occurrence_ranks_the_neighbours(world):
    got = graph.neighbourhood(world.lance_path, "ada", "Robert Smith")
    # Both relations weigh 1; Zoë's facts were drawn from the same episode as Robert's.
    assert got["neighbours"] == ["Zoë", "Ledger"]
    relations = {r["predicate"]: r for r in got["relations"]}
    assert relations["works-with"]["co_occurrence"] > 0 and relations["works-on"]["co_occurrence"] == 0


def test_facts_lookup_needs_no_exact_name(api):
    server, client = api
    assert get_facts(client, entity="zoe")["entity"] == "Zoë"  # accents
    assert get_facts(client, entity="zoe")["resolved_by"] == "normalised"
    assert get_facts(client, entity="ZOË'S")["resolved_by"] == "normalised"  # possessive, case
    smith = get_facts(client, entity="smith")
    assert (smith["entity"], smith["resolved_by"]) == ("Robert Smith", "words")
    assert {f["value"] for f in smith["facts"]} == {"Lisbon", "Acme Corp"}
    nobody = get_facts(client, entity="Margaret Thatcher")
    assert (nobody["facts"], nobody["resolved_by"]) == ([], None)

    # The exact entity + key lookup.
    city = get_facts(client, entity="Robert Smith", key="CITY")
    assert [(f["key"], f["value"]) for f in city["facts"]] == [("city", "Lisbon")]
    # Full text over every fact's entity, key and value.
    assert [f["value"] for f in get_facts(client, q="lisbon")["facts"]] == ["Lisbon"]
    assert [f["entity"] for f in get_facts(client, q="designer")["facts"]] == ["Zoë"]
    assert get_facts(client, q="acme", key="city")["facts"] == []
    assert get_facts(client, q="nothing matches this")["facts"] == []
    missing = client.get("/v1/beings/ada/facts")
    assert missing.status_code in (400, 422) and "entity" in missing.text

    with MindflowClient(server.url, token=TOKEN) as memory:
        assert [f["value"] for f in memory.facts("ada", q="Acme").facts] == ["Acme Corp"]
        assert memory.facts("ada", "bob", key="employer").facts[0]["value"] == "Acme Corp"


def test_resonance_offers_the_facts_of_the_entities_a_query_names(api, world, embedder):
    """Phase 2: entities named in the query (an alias here) bring their facts, Hot first, between
    pinned memories and the other memories; a query naming none brings no facts."""
    server, client = api
    with store.connect(world.duckdb_path) as con:
        patrol.run_patrol(con, "ada", embedder, now=BASE)
        publish(con, lance.connect(world.lance_path), now=BASE)
        # Zoë's role accessed often: Hot; Robert's facts stay Warm.
        for _ in range(3):
            events.append_events(world.events, [access_event("ada", [fact(con, "zo%", "role")["fact_id"]])])
        run_activation(con, utcnow(), world.events)
        graph.publish_graph(con, lance.connect(world.lance_path), now=utcnow())

    response = client.post("/v1/beings/ada/resonance", json={"query": "How is Bob getting on?", "k": 5})
    assert response.status_code == 200, response.text
    items = response.json()["items"]
    kinds = [i["kind"] for i in items]
    assert kinds[: kinds.count("fact")] == ["fact"] * kinds.count("fact")  # facts before memories
    assert "memory" in kinds
    facts = [i["fact"] for i in items if i["kind"] == "fact"]
    # Zoë is Robert's neighbour (depth 2), and her Hot fact comes first.
    assert (facts[0]["entity"], facts[0]["key"], facts[0]["tier"]) == ("Zoë", "role", "hot")
    assert {(f["entity"], f["key"]) for f in facts[1:]} <= {
        ("Robert Smith", "city"),
        ("Robert Smith", "employer"),
    }
    text = response.json()["text"]
    assert "Zoë role: designer" in text.splitlines()[2]
    assert text.splitlines()[2].startswith("- Yesterday — ") or text.splitlines()[2].startswith(
        "- Earlier today"
    )

    # A query that names no entity of the being: memories only.
    plain = client.post("/v1/beings/ada/resonance", json={"query": "what happened with the project", "k": 5})
    assert {i["kind"] for i in plain.json()["items"]} <= {"memory"}

    # The facts resonance offered count as accesses.
    offered = access_events(world, 4)[-1]
    assert {f["fact_id"] for f in facts} == set(offered["memory_refs"])
