"""The recall API over a real uvicorn server on 127.0.0.1: real LanceDB, real model, real HTTP.

The memories come from the real pipeline pieces (inbox ingest, patrol, publish).
"""

from __future__ import annotations

import json
import subprocess
import threading
import time as clock
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from pathlib import Path

import httpx
import pytest

from mindflow import lance, store
from mindflow.api import create_app
from mindflow.api.auth import check_bind, parse_tokens
from mindflow.api.resonance import HEADER
from mindflow.api.server import BackgroundServer
from mindflow.config import Settings
from mindflow.errors import MindflowError
from mindflow.events import read_events
from mindflow.inbox import ingest
from mindflow.ingest import parse_bytes
from mindflow.memories import publish
from mindflow.models import utcnow
from mindflow.patrol import run_patrol
from mindflow.recall import RecallConfig

REPO = Path(__file__).resolve().parent.parent
MINDFLOW = REPO / ".venv" / "bin" / "mindflow"
TOKEN_ALL = "token-for-every-being"
TOKEN_ADA = "token-for-ada-only"
PATROL_NOW = datetime(2026, 4, 10, 3, 0)

ADA = [
    (
        "a01",
        "2026-01-09T08:00:00Z",
        "Switched the ledgerline login from the hardcoded client secret to OAuth with PKCE against Keycloak.",
        "decision",
    ),
    (
        "a02",
        "2026-01-12T10:30:00Z",
        "Lena prefers tabs over spaces and wants ruff to enforce a line length of 110.",
        "preference",
    ),
    (
        "a03",
        "2026-02-02T14:00:00Z",
        "The flaky test_payout_rounding failed because of a timezone bug in the rounding helper.",
        "message",
    ),
    (
        "a04",
        "2026-02-15T18:00:00Z",
        "Deployed release 2.4 of the billing service to production on Friday evening.",
        "event",
    ),
    (
        "a05",
        "2026-03-01T19:00:00Z",
        "Lena's daughter started violin lessons and practices every evening after dinner.",
        "message",
    ),
    (
        "a06",
        "2026-03-03T09:00:00Z",
        "Remember that the staging database password rotates every Monday morning.",
        "message",
    ),
    (
        "a07",
        "2026-03-10T11:00:00Z",
        "Planned the migration of the reporting jobs from cron to Dagster schedules.",
        "task",
    ),
    (
        "a08",
        "2026-03-12T16:00:00Z",
        "Reviewed the pull request that adds retries to the payment webhook handler.",
        "message",
    ),
    (
        "a09",
        "2026-03-20T09:30:00Z",
        "Order id -100123:45 failed reconciliation twice in the nightly run.",
        "message",
    ),
    (
        "a10",
        "2026-04-02T13:00:00Z",
        "Lena went hiking in the Alps over the Easter weekend and loved the views.",
        "message",
    ),
]
BRAM = [
    ("b01", "2026-01-10T07:00:00Z", "Tomas signed up for the Porto half marathon in March.", "decision"),
    (
        "b02",
        "2026-01-20T07:00:00Z",
        "The vault password of Tomas is hunter2 and he keeps forgetting it.",
        "fact",
    ),
    ("b03", "2026-02-05T07:00:00Z", "Tomas prefers running in the early morning before work.", "preference"),
    (
        "b04",
        "2026-02-25T07:00:00Z",
        "Tomas switched the login of his running club website to OAuth with PKCE.",
        "message",
    ),
]
# One memory at a known moment for the relative-time table, one just before a midnight.
ORCHIDS_AT = datetime(2026, 1, 9, 8, 0)
REPOTTED_AT = datetime(2025, 6, 1, 23, 30)
CLEO = [
    ("c01", ORCHIDS_AT.isoformat() + "Z", "Watered the orchids on the balcony.", "message"),
    ("c02", REPOTTED_AT.isoformat() + "Z", "Repotted the orchids into fresh bark.", "message"),
]


def write_inbox(inbox: Path, being: str, rows, name: str = "episodes.jsonl") -> None:
    path = inbox / being / name
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"id": i, "ts": ts, "speaker": "Lena", "text": t, "kind": k}) for i, ts, t, k in rows]
    path.write_text("\n".join(lines) + "\n")


def run_pipeline(settings: Settings, embedder, beings: list[str]) -> None:
    """Ingest pending inbox files, patrol the beings, publish to LanceDB: the jobs' library calls."""
    with store.connect(settings.duckdb_path) as con:
        ingest(con, settings.inbox, date(2025, 1, 1), date(2026, 12, 31))
        for being in beings:
            run_patrol(con, being, embedder, now=PATROL_NOW)
        publish(con, lance.connect(settings.lance_path))


@dataclass
class World:
    settings: Settings
    url: str
    refs: dict[str, str]  # episode id -> memory ref


@pytest.fixture(scope="module")
def world(tmp_path_factory, embedder) -> World:
    home = tmp_path_factory.mktemp("api") / "home"
    settings = Settings(home=home, _env_file=None)
    for being, rows in (("ada", ADA), ("bram", BRAM), ("cleo", CLEO)):
        write_inbox(settings.inbox, being, rows)
    run_pipeline(settings, embedder, ["ada", "bram", "cleo"])
    table = lance.connect(settings.lance_path).open_table("memories")
    rows = table.search().select(["memory_ref", "source_episode_ids"]).limit(None).to_arrow().to_pylist()
    refs = {r["source_episode_ids"][0]: r["memory_ref"] for r in rows}
    # These tests exercise the API (filters, echo, modes) with a low floor that still drops
    # nonsense; the default floor is tested in test_recall.py and measured in bench_recall.py.
    config = RecallConfig.for_model(settings.embedding_model, min_similarity=0.1)
    app = create_app(settings, recall_config=config, tokens={TOKEN_ALL: "*", TOKEN_ADA: ["ada"]})
    with BackgroundServer(app) as server:
        yield World(settings, server.url, refs)


@pytest.fixture
def http(world):
    with httpx.Client(
        base_url=world.url, headers={"Authorization": f"Bearer {TOKEN_ALL}"}, timeout=30
    ) as client:
        yield client


def events_since(world, since: datetime) -> list:
    """Events of recalls made from `since` on (naive UTC), by the time each recall was made.

    An event is stamped while its request is served and written by the server's event thread
    beside the response, so an earlier test's event can still land after `since`: its stamp
    keeps it out.
    """
    return [e for e in read_events(world.settings.events) if e.ts >= since]


def recall(http, being, query, **body):
    response = http.post(f"/v1/beings/{being}/recall", json={"query": query, **body})
    assert response.status_code == 200, response.text
    return response.json()


def episode_ids(memories) -> list[str]:
    return [m["source_episode_ids"][0] for m in memories]


# --------------------------------------------------------------------------- service basics


def test_openapi_health_and_readiness(http):
    spec = http.get("/openapi.json").json()
    paths = set(spec["paths"])
    for path in (
        "recall",
        "resonance",
        "search_memory",
        "clusters/{cluster_id}/memories",
        "facts",
        "story",
        "episodes",
    ):
        assert f"/v1/beings/{{being_id}}/{path}" in paths
    assert {"/healthz", "/readyz"} <= paths
    assert "RecallRequest" in spec["components"]["schemas"]
    assert http.get("/healthz").json() == {"status": "ok"}
    ready = http.get("/readyz")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"


def test_paraphrased_query_finds_the_right_memory_first(http):
    found = recall(http, "ada", "How do users sign in to ledgerline now?", k=3)
    assert episode_ids(found["memories"])[0] == "a01"
    top = found["memories"][0]
    assert top["being_id"] == "ada" and top["kind"] == "decision" and top["ts"].startswith("2026-01-09")
    assert {"cosine", "fused", "decay", "recency"} <= set(top["parts"])
    found = recall(http, "ada", "when does the staging db secret change?", k=3)
    assert episode_ids(found["memories"])[0] == "a06"


def test_beings_never_see_each_other(http, world):
    # Both beings hold a memory about OAuth with PKCE; each sees only its own.
    ada = recall(http, "ada", "OAuth with PKCE login", k=10)["memories"]
    bram = recall(http, "bram", "OAuth with PKCE login", k=10)["memories"]
    assert "a01" in episode_ids(ada) and all(m["being_id"] == "ada" for m in ada)
    assert "b04" in episode_ids(bram) and all(m["being_id"] == "bram" for m in bram)
    assert "b02" not in episode_ids(recall(http, "ada", "vault password hunter2", k=50)["memories"])
    for hostile in (
        "ada' OR '1'='1",
        "ada%27%20OR%20being_id%3D%27bram",
        "ADA",
        "a" * 200,
        "ada%00",
        "%2E%2E",
    ):
        response = http.post(f"/v1/beings/{hostile}/recall", json={"query": "password"})
        assert response.status_code == 422, (hostile, response.text)
        assert "invalid being id" in response.json()["error"]
    # A path that climbs to another being is that being's path: ada's token cannot read it.
    ada_only = {"Authorization": f"Bearer {TOKEN_ADA}"}
    for climbing in ("../bram", "..%2Fbram", "ada/../bram", "ada%2F..%2Fbram"):
        response = http.post(
            f"/v1/beings/{climbing}/recall", json={"query": "vault password hunter2"}, headers=ada_only
        )
        assert response.status_code in (403, 404, 422), (climbing, response.text)
        assert "hunter2" not in response.text
    # Filters built from hostile values stay literal.
    assert recall(http, "ada", "login", exclude_refs=["x' OR being_id = 'bram"], k=50)["memories"]
    cluster = http.get(f"/v1/beings/ada/clusters/{world.refs['b01']}' OR '1'='1/memories").json()
    assert cluster["memories"] == []


@pytest.mark.parametrize(
    "query",
    [
        "-100123:45",
        '"unclosed',
        "AND OR NOT",
        "*",
        "\\",
        "(((",
        "'; DROP TABLE memories; --",
        "!?" * 1999,
        "\x00",
    ],
)
def test_hostile_queries_never_fail(http, query):
    found = recall(http, "ada", query, k=5)["memories"]
    assert all(m["being_id"] == "ada" for m in found)


def test_exact_identifier_and_over_long_query(http):
    assert episode_ids(recall(http, "ada", "-100123:45", k=3)["memories"])[0] == "a09"
    response = http.post("/v1/beings/ada/recall", json={"query": "!@#$%^&*()" * 1024})
    assert response.status_code == 422 and "limit is 4,000" in response.json()["error"]


def test_horizon_filters(http, world):
    query = "what happened at work"
    everything = recall(http, "ada", query, k=50)["memories"]
    assert len(everything) >= 4
    since = recall(http, "ada", query, k=50, since="2026-03-01T00:00:00Z")["memories"]
    assert since and all(m["ts"] >= "2026-03-01" for m in since)
    until = recall(http, "ada", query, k=50, until="2026-03-05T00:00:00+01:00")["memories"]
    assert until and all(m["ts"] < "2026-03-04T23" for m in until)
    assert len(since) + len(until) >= len(everything)
    first = everything[0]["memory_ref"]
    excluded = recall(http, "ada", query, k=50, exclude_refs=[first])["memories"]
    assert first not in {m["memory_ref"] for m in excluded} and excluded


def test_echo_filter_skips_what_a_session_was_shown(http, world):
    query = "Lena at work"
    first = {m["memory_ref"] for m in recall(http, "ada", query, k=3, session_id="echo-1")["memories"]}
    second = {m["memory_ref"] for m in recall(http, "ada", query, k=3, session_id="echo-1")["memories"]}
    assert len(first) == 3 and second and not first & second
    # Another session, or none, is not affected.
    assert {
        m["memory_ref"] for m in recall(http, "ada", query, k=3, session_id="echo-2")["memories"]
    } == first
    assert {m["memory_ref"] for m in recall(http, "ada", query, k=3)["memories"]} == first
    # The same session name of another being is another session.
    assert recall(http, "bram", "Tomas", k=3, session_id="echo-1")["memories"]
    # After 25 more recalls (that found nothing), the first ones may be shown again.
    for _ in range(25):
        assert (
            recall(http, "ada", "quantum chromodynamics of neutron stars", session_id="echo-1")["memories"]
            == []
        )
    assert {
        m["memory_ref"] for m in recall(http, "ada", query, k=3, session_id="echo-1")["memories"]
    } == first


def test_the_session_is_session_id_as_in_episodes_and_session_its_deprecated_name(http, world):
    """One word for the session: `session_id` in recall and resonance bodies, as in episodes and
    the MCP tools. `session`, its old name here, still works for callers already using it."""
    query = "Lena at work"
    spec = http.get("/openapi.json").json()["components"]["schemas"]
    for model in ("RecallRequest", "ResonanceRequest", "EpisodeIn"):
        assert "session_id" in spec[model]["properties"] and "session" not in spec[model]["properties"]
    first = {m["memory_ref"] for m in recall(http, "ada", query, k=3, session_id="one-word")["memories"]}
    # The old name reaches the same session: what it was shown is not shown again.
    second = {m["memory_ref"] for m in recall(http, "ada", query, k=3, session="one-word")["memories"]}
    assert len(first) == 3 and second and not first & second
    shown = first | second
    for name in ("session_id", "session"):
        answer = http.post("/v1/beings/ada/resonance", json={"query": query, name: "one-word"})
        assert answer.status_code == 200, answer.text
        assert not {i["memory"]["memory_ref"] for i in answer.json()["items"] if i["memory"]} & shown
    both = http.post("/v1/beings/ada/recall", json={"query": query, "session_id": "a", "session": "b"})
    assert both.status_code == 422 and "session" in both.text


def test_fragments_mode_is_the_blur_alone(http, world):
    listed = recall(http, "ada", "Lena's family and free time", k=4)["memories"]
    since = utcnow()
    found = recall(http, "ada", "Lena's family and free time", k=4, mode="fragments")
    assert found["mode"] == "fragments" and found["memories"] == []
    text = found["fragments"]
    assert text.startswith("<fragments>") and text.endswith("</fragments>")
    pieces = text.removeprefix("<fragments>").removesuffix("</fragments>").split(" / ")
    expected = [m["text"] for m in listed] + [m["feeling"] for m in listed if m["feeling"]]
    assert sorted(pieces) == sorted(expected)
    # The memories behind the blur are reinforced as in a listed recall.
    deadline = clock.monotonic() + 10
    while not events_since(world, since):
        assert clock.monotonic() < deadline
        clock.sleep(0.05)
    nothing = recall(http, "ada", "quantum chromodynamics of neutron stars", mode="fragments")
    assert (nothing["fragments"], nothing["memories"]) == ("", [])
    assert recall(http, "ada", "Lena", k=2)["fragments"] is None


# --------------------------------------------------------------------------- resonance


def _at(day: date, hour: int, minute: int = 0) -> datetime:
    return datetime.combine(day, time(hour, minute))


D0 = ORCHIDS_AT.date()
_M, _H, _D = timedelta(minutes=1), timedelta(hours=1), timedelta(days=1)
_S = timedelta(seconds=1)
# The seed's table by elapsed time, each edge from just below and at it.
EDGES = [
    (30 * _M, "a moment ago", "a while ago"),
    (2 * _H, "a while ago", "a few hours ago"),
    (6 * _H, "a few hours ago", "earlier today"),
    (18 * _H, "earlier today", "yesterday"),
    (30 * _H, "yesterday", "a few days ago"),
    (4 * _D, "a few days ago", "last week"),
    (10 * _D, "last week", "a few weeks ago"),
    (20 * _D, "a few weeks ago", "a month ago"),
    (45 * _D, "a month ago", "a couple of months ago"),
    (90 * _D, "a couple of months ago", "several months ago"),
    (180 * _D, "several months ago", "almost a year ago"),
    (335 * _D, "almost a year ago", "a year ago"),
    (395 * _D, "a year ago", "a year and something ago"),
    (640 * _D, "a year and something ago", "almost 2 years ago"),
    (700 * _D, "almost 2 years ago", "2 years ago"),
    (760 * _D, "2 years ago", "2 years and something ago"),
    (1005 * _D, "2 years and something ago", "almost 3 years ago"),
    (1065 * _D, "almost 3 years ago", "3 years ago"),
    (3925 * _D, "10 years and something ago", "almost 11 years ago"),
]
BOUNDARIES = [(ORCHIDS_AT, "a moment ago", "Jan 9")] + [
    (ORCHIDS_AT + edge - delta, label, "Jan 9" if (ORCHIDS_AT + edge - delta).year == 2026 else "Jan 9, 2026")
    for edge, below, above in EDGES
    for delta, label in ((_S, below), (timedelta(0), above))
]


@pytest.mark.parametrize(
    ("now", "relative", "day"), BOUNDARIES, ids=[f"{b[1]}@{b[0]:%Y-%m-%dT%H:%M}" for b in BOUNDARIES]
)
def test_resonance_labels_each_boundary(http, world, now, relative, day):
    response = http.post("/v1/beings/cleo/resonance", json={"query": "orchids", "now": now.isoformat()})
    assert response.status_code == 200, response.text
    item = next(i for i in response.json()["items"] if i["memory"]["memory_ref"] == world.refs["c01"])
    assert (item["relative"], item["date"], item["label"]) == (relative, day, f"{relative} — {day}")
    line = f"- {relative[:1].upper()}{relative[1:]} — {day}, Watered the orchids on the balcony."
    assert line in response.json()["text"].splitlines()


def test_resonance_counts_elapsed_time_across_midnight_and_hides_the_future(http, world):
    def labels(now: datetime) -> dict[str, str]:
        body = {"query": "orchids", "now": now.isoformat() + "Z"}
        items = http.post("/v1/beings/cleo/resonance", json=body).json()["items"]
        return {i["memory"]["memory_ref"]: i["relative"] for i in items}

    repotted = world.refs["c02"]
    # Elapsed time, not calendar days: 50 minutes across midnight is a while, not yesterday.
    assert labels(REPOTTED_AT + timedelta(minutes=50)) == {repotted: "a while ago"}
    assert labels(REPOTTED_AT + timedelta(hours=19)) == {repotted: "yesterday"}
    assert labels(REPOTTED_AT - timedelta(minutes=1)) == {}


@pytest.mark.parametrize("query", ["HEARTBEAT_OK", "NO_REPLY", "ping", "[probe] orchids"])
def test_heartbeat_and_probe_turns_get_no_resonance_and_reinforce_nothing(http, world, query):
    since = utcnow()
    body = {"query": query, "now": "2026-01-10T12:00:00Z"}
    response = http.post("/v1/beings/cleo/resonance", json=body)
    assert response.status_code == 200, response.text
    assert (response.json()["text"], response.json()["items"]) == ("", [])
    # The same request with a real turn resonates (the memory is there to be found).
    assert http.post("/v1/beings/cleo/resonance", json={**body, "query": "orchids"}).json()["items"]
    # Events are written by the server's event thread, beside the responses.
    deadline = clock.monotonic() + 10
    while True:
        events = events_since(world, since)
        if events or clock.monotonic() > deadline:
            break
        clock.sleep(0.05)
    clock.sleep(0.3)  # time for a late event of the heartbeat turn to show, were there one
    events = events_since(world, since)
    assert [e.tool for e in events] == ["resonance"]  # only the real turn reinforced anything


def test_resonance_block_orders_boosted_then_facts_then_time(http, world):
    body = {"query": "Lena's passwords, preferences and plans", "now": "2026-04-10T12:00:00Z"}
    result = http.post("/v1/beings/ada/resonance", json=body).json()
    items = result["items"]
    assert 1 <= len(items) <= 5
    groups = [
        0
        if i["memory"]["trigger"] == "remember" or i["memory"]["pinned"]
        else 1
        if i["memory"]["kind"] in ("fact", "preference")
        else 2
        for i in items
    ]
    assert groups == sorted(groups) and groups[0] == 0
    assert items[0]["memory"]["memory_ref"] == world.refs["a06"]
    rest = [i["memory"]["ts"] for i, g in zip(items, groups, strict=True) if g == 2]
    assert rest == sorted(rest, reverse=True)
    lines = result["text"].splitlines()
    # The seed's block: ---, the header, one line per item, ---.
    assert lines[:2] == ["---", HEADER] and lines[-1] == "---" and len(lines) == len(items) + 3
    label = items[0]["label"]
    assert lines[2].startswith(
        f"- {label[:1].upper()}{label[1:]}, Remember that the staging database password"
    )
    assert http.post("/v1/beings/ada/resonance", json={**body, "k": 6}).status_code == 422


# --------------------------------------------------------------------------- other tools


def test_search_memory_or_and(http):
    def search(query, mode):
        response = http.post("/v1/beings/ada/search_memory", json={"query": query, "mode": mode})
        assert response.status_code == 200, response.text
        return set(episode_ids(response.json()["memories"]))

    assert search("violin evening", "and") == {"a05"}
    assert {"a04", "a05"} <= search("violin evening", "or")
    assert search("hunter2", "or") == set()
    assert search("2026-03-20", "or") == {"a09"}  # the `when` history
    assert http.post("/v1/beings/ada/search_memory", json={"query": "x", "mode": "xor"}).status_code == 422


def test_cluster_memories(http, world):
    top = recall(http, "ada", "billing service release", k=1)["memories"][0]
    cluster = http.get(f"/v1/beings/ada/clusters/{top['cluster_id']}/memories").json()
    assert top["memory_ref"] in {m["memory_ref"] for m in cluster["memories"]}
    assert all(m["cluster_id"] == top["cluster_id"] and m["being_id"] == "ada" for m in cluster["memories"])
    ts = [m["ts"] for m in cluster["memories"]]
    assert ts == sorted(ts, reverse=True)
    # Another being asking for ada's cluster gets nothing.
    assert http.get(f"/v1/beings/bram/clusters/{top['cluster_id']}/memories").json()["memories"] == []


def test_facts_empty_before_any_fact_and_depth_checked(http):
    response = http.get("/v1/beings/ada/facts", params={"entity": "Lena", "depth": 2})
    assert response.status_code == 200, response.text
    assert response.json()["facts"] == [] and response.json()["relations"] == []
    for depth in (0, 3, "two"):
        response = http.get("/v1/beings/ada/facts", params={"entity": "Lena", "depth": depth})
        assert response.status_code == 422 and "depth" in response.json()["error"]
    assert http.get("/v1/beings/ada/facts").status_code == 422
    assert http.get("/v1/beings/ada/facts", params={"entity": "x' OR '1'='1"}).status_code == 200


def test_story_404_until_written(http, world):
    response = http.get("/v1/beings/bram/story")
    assert response.status_code == 404 and "no STORY.md" in response.json()["error"]
    story = world.settings.workspace / "bram" / "STORY.md"
    story.parent.mkdir(parents=True, exist_ok=True)
    story.write_text("# Bram\n\nTomas is training for Porto.\n", encoding="utf-8")
    response = http.get("/v1/beings/bram/story")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/markdown")
    assert "training for Porto" in response.text


# --------------------------------------------------------------------------- the write path


def api_file(world, being) -> Path:
    return world.settings.inbox / being / f"api-{utcnow().date().isoformat()}.jsonl"


def test_post_episodes_returns_ids_and_writes_valid_lines(http, world):
    episodes = [
        {
            "ts": "2026-04-11T09:00:00Z",
            "speaker": "Lena",
            "text": "We moved standup to 9:30.",
            "kind": "decision",
            "id": "e-1",
        },
        {
            "ts": 1775898000,
            "speaker": "Lena",
            "role": "user",
            "text": "Ship the CSV importer on Friday.\nThen rest.",
            "tags": ["csv"],
        },
        {"ts": "2026-04-11T09:05:00Z", "text": "HEARTBEAT_OK"},
    ]
    response = http.post("/v1/beings/erin/episodes", json={"episodes": episodes})
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["ids"][0] == "e-1" and result["ids"][1].startswith("h-") and len(result["ids"]) == 2
    assert result["heartbeats"] == 1
    path = api_file(world, "erin")
    parsed = parse_bytes(path.read_bytes(), path.name, "erin", "jsonl")
    assert [e.episode_id for e in parsed.episodes] == result["ids"] and not parsed.quarantined
    assert parsed.episodes[1].text == "Ship the CSV importer on Friday.\nThen rest."
    assert parsed.heartbeats == 1


def test_invalid_episode_rejects_the_request_and_writes_nothing(http, world):
    path = api_file(world, "fenna")
    good = {"ts": "2026-04-11T09:00:00Z", "text": "fine"}
    bad = [
        {"ts": "yesterday-ish", "text": "bad time"},
        {"ts": "2026-04-11T09:00:00Z", "text": "   "},
        {"ts": "2026-04-11T09:00:00Z", "text": "x", "kind": "gossip"},
        {"ts": "2026-04-11T09:00:00Z", "text": "x", "importance": 7},
    ]
    response = http.post("/v1/beings/fenna/episodes", json={"episodes": [good, *bad]})
    assert response.status_code == 422
    body = response.json()
    assert [d["index"] for d in body["details"]] == [1, 2, 3, 4]
    assert "invalid timestamp" in body["details"][0]["reason"]
    assert "none was written" in body["error"]
    assert not path.exists()
    # Wrong types and unknown fields are 422 too, naming the item.
    for item in (
        {"ts": "2026-04-11", "text": 5},
        {"ts": True, "text": "x"},
        {"ts": "2026-04-11", "text": "x", "txt": "y"},
    ):
        response = http.post("/v1/beings/fenna/episodes", json={"episodes": [good, item]})
        assert response.status_code == 422 and "episodes.1" in response.json()["error"], response.text
    assert http.post("/v1/beings/fenna/episodes", json={"episodes": []}).status_code == 422
    assert not path.exists()


def test_concurrent_writers_never_corrupt_the_inbox_file(world):
    threads, per_thread, errors = 20, 10, []
    filler = "lorem ipsum " * 400  # ~5 KB per episode: larger than a pipe buffer's atomic write

    def post(n: int) -> None:
        with httpx.Client(
            base_url=world.url, headers={"Authorization": f"Bearer {TOKEN_ALL}"}, timeout=60
        ) as client:
            episodes = [
                {
                    "ts": "2026-04-11T10:00:00Z",
                    "id": f"w{n}-{i}",
                    "speaker": f"writer {n}",
                    "text": f"{n}/{i} {filler}",
                }
                for i in range(per_thread)
            ]
            response = client.post("/v1/beings/gus/episodes", json={"episodes": episodes})
            if response.status_code != 200:
                errors.append(response.text)

    workers = [threading.Thread(target=post, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors
    path = api_file(world, "gus")
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b"" and len(lines) - 1 == threads * per_thread
    parsed = parse_bytes(path.read_bytes(), path.name, "gus", "jsonl")
    assert not parsed.quarantined
    assert sorted(e.episode_id for e in parsed.episodes) == sorted(
        f"w{n}-{i}" for n in range(threads) for i in range(per_thread)
    )


# --------------------------------------------------------------------------- reinforcement


def test_each_tool_appends_a_reinforcement_event(http, world):
    since = utcnow()
    recalled = recall(http, "bram", "half marathon", k=2)["memories"]
    http.post("/v1/beings/bram/search_memory", json={"query": "Tomas"})
    http.get(f"/v1/beings/bram/clusters/{recalled[0]['cluster_id']}/memories")
    http.post("/v1/beings/bram/resonance", json={"query": "running"})
    recall(http, "bram", "quantum chromodynamics of neutron stars", k=2)  # nothing found, no event
    # Events are written by the server's event thread, beside the responses.
    deadline = clock.monotonic() + 10
    while True:
        new = events_since(world, since)
        if len(new) >= 4 or clock.monotonic() > deadline:
            break
        clock.sleep(0.05)
    assert sorted(e.tool for e in new) == ["recall", "recall_memory", "resonance", "search_memory"]
    assert all(e.being_id == "bram" and len(e.increments) == len(e.memory_refs) for e in new)
    first = next(e for e in new if e.tool == "recall")
    assert list(first.memory_refs) == [m["memory_ref"] for m in recalled] and set(first.increments) == {1}


# --------------------------------------------------------------------------- auth and limits


def test_auth_401_403_200(world):
    body = {"query": "login"}
    with httpx.Client(base_url=world.url, timeout=30) as anonymous:
        response = anonymous.post("/v1/beings/ada/recall", json=body)
        assert response.status_code == 401 and response.headers["www-authenticate"] == "Bearer"
        assert "bearer token" in response.json()["error"]
        assert (
            anonymous.post(
                "/v1/beings/ada/recall", json=body, headers={"Authorization": "Bearer nope"}
            ).status_code
            == 401
        )
        assert (
            anonymous.post(
                "/v1/beings/ada/recall", json=body, headers={"Authorization": TOKEN_ADA}
            ).status_code
            == 401
        )
        ada_only = {"Authorization": f"Bearer {TOKEN_ADA}"}
        assert anonymous.post("/v1/beings/ada/recall", json=body, headers=ada_only).status_code == 200
        response = anonymous.post("/v1/beings/bram/recall", json=body, headers=ada_only)
        assert response.status_code == 403 and "bram" in response.json()["error"]
        assert anonymous.get("/v1/beings/bram/story", headers=ada_only).status_code == 403
        assert (
            anonymous.post(
                "/v1/beings/bram/episodes", json={"episodes": [{"ts": 1, "text": "x"}]}, headers=ada_only
            ).status_code
            == 403
        )
        # Liveness, readiness and the schema need no token.
        assert (
            anonymous.get("/healthz").status_code == 200 and anonymous.get("/openapi.json").status_code == 200
        )


def test_serve_refuses_a_public_bind_without_tokens(tmp_path):
    assert check_bind("127.0.0.1", parse_tokens(None)) is None
    for host in ("127.0.0.2", "::1", "[::1]", "localhost"):
        check_bind(host, parse_tokens(""))
    for host in ("0.0.0.0", "::", "10.1.2.3", "example.com"):
        with pytest.raises(MindflowError, match="refusing to bind"):
            check_bind(host, parse_tokens(None))
    check_bind("0.0.0.0", parse_tokens("tokA=ada,bram;tokB=*"))
    with pytest.raises(MindflowError):
        parse_tokens("tokA=Ada")
    env = {"PATH": "/usr/bin:/bin", "MINDFLOW_HOME": str(tmp_path / "home"), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [str(MINDFLOW), "serve", "--host", "0.0.0.0"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.startswith("error: refusing to bind 0.0.0.0") and done.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "status"),
    [
        ("post", "recall", {"content": b"{not json", "headers": {"content-type": "application/json"}}, 422),
        ("post", "recall", {"content": b"\xff\xfe", "headers": {"content-type": "application/json"}}, 422),
        ("post", "recall", {"content": b"query=x", "headers": {"content-type": "text/plain"}}, 422),
        ("post", "recall", {"json": []}, 422),
        ("post", "recall", {"json": {"query": 123}}, 422),
        ("post", "recall", {"json": {"query": "x", "k": "five"}}, 422),
        ("post", "recall", {"json": {"query": "x", "k": 51}}, 422),
        ("post", "recall", {"json": {"query": "x", "k": 0}}, 422),
        ("post", "recall", {"json": {"query": "x", "limit": 3}}, 422),
        ("post", "recall", {"json": {"query": "x", "exclude_refs": "m-1"}}, 422),
        ("post", "recall", {"json": {"query": "x", "exclude_refs": ["a\x00b"]}}, 422),
        ("post", "recall", {"json": {"query": "x", "since": "not a date"}}, 422),
        ("post", "recall", {"json": {"query": "x", "since": "0001-01-01T00:00:00+05:00"}}, 422),
        ("post", "recall", {"json": {"query": "x", "until": "9999-12-31T23:59:59"}}, 422),
        ("post", "recall", {"json": {"query": "x", "mode": "poem"}}, 422),
        ("post", "recall", {"json": {"query": "   "}}, 422),
        ("post", "recall", {"json": {"query": "x" * 2_000_000}}, 413),
        ("post", "resonance", {"json": {"query": "x", "now": 1e30}}, 422),
        ("post", "episodes", {"json": {"episodes": [{"ts": "2026-01-01", "text": "x" * 1_100_000}]}}, 413),
        ("post", "episodes", {"json": {"episodes": "none"}}, 422),
        ("get", "clusters/a%00b/memories", {}, 422),
        ("get", "clusters/c-1/memories?k=-1", {}, 422),
        ("get", "nothing-here", {}, 404),
        ("put", "recall", {"json": {"query": "x"}}, 405),
    ],
)
def test_bad_input_gets_a_clear_4xx_never_a_500(http, method, path, kwargs, status):
    response = http.request(method, f"/v1/beings/ada/{path}", **kwargs)
    assert response.status_code == status, response.text
    assert response.json()["error"]


def test_streamed_body_over_the_limit_is_413(http):
    def chunks():
        for _ in range(40):
            yield b"x" * 65_536

    response = http.post(
        "/v1/beings/ada/recall", content=chunks(), headers={"content-type": "application/json"}
    )
    assert response.status_code == 413 and "1,048,576" in response.json()["error"]


# --------------------------------------------------------------------------- live table versions


def test_newly_published_memories_are_seen_without_restart(http, world, embedder):
    query = "sourdough starter"
    assert recall(http, "dora", query)["memories"] == []
    write_inbox(
        world.settings.inbox,
        "dora",
        [("d01", "2026-04-01T08:00:00Z", "Fed the sourdough starter and baked a rye loaf.", "event")],
    )
    run_pipeline(world.settings, embedder, ["dora"])
    found = recall(http, "dora", query)["memories"]
    assert episode_ids(found) == ["d01"]
