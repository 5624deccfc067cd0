"""Sub-agents' proposals, decisions and procedures over real HTTP, the client and MCP.

Real uvicorn servers on 127.0.0.1 over one MINDFLOW_HOME (a real pipeline: DuckDB, LanceDB, the
model, a published fact), one per sub-agent mode: batch (the default), auto and manual. The
approvals run is played by its library calls, on the test's own DuckDB connection.
"""

from __future__ import annotations

import asyncio
import json
import typing

import httpx
import pytest
from test_api import run_pipeline, write_inbox
from test_mcp import error_text, http_client, structured

from mindflow import lance, store
from mindflow.api import create_app, models
from mindflow.api.auth import parse_tokens
from mindflow.api.server import BackgroundServer
from mindflow.client import AsyncMindflowClient, MindflowClient, MindflowClientError
from mindflow.config import Settings
from mindflow.errors import MindflowError
from mindflow.graph import publish_graph
from mindflow.loop.proposals import ProposalStore
from mindflow.models import EPISODE_KINDS
from mindflow.reflection import procedures
from mindflow.reflection.apply import apply_approved

MAIN = "main-token"
SCOUT = "scout-token"
TOKENS = f"{MAIN}=*;{SCOUT}=ada@subagent:scout"
ADA = [
    ("a01", "2026-03-02T09:00:00Z", "Lena moved into a flat in Vienna near the Prater.", "event"),
    ("a02", "2026-03-05T09:00:00Z", "Lena adopted a grey cat called Pixel from the shelter.", "event"),
]
BRAM = [("b01", "2026-03-03T07:00:00Z", "Tomas keeps his bicycle in the cellar.", "fact")]


@pytest.fixture(scope="module")
def world(tmp_path_factory, embedder):
    home = tmp_path_factory.mktemp("reflection-api") / "home"
    settings = Settings(home=home, _env_file=None)
    write_inbox(settings.inbox, "ada", ADA)
    write_inbox(settings.inbox, "bram", BRAM)
    run_pipeline(settings, embedder, ["ada", "bram"])
    with store.connect(settings.duckdb_path) as con:
        # A current fact, as extraction with a model would store it.
        con.execute(
            "INSERT INTO facts (fact_id, being_id, entity, key, value, category, source_episode_ids, "
            "valid_at, created_at) VALUES ('f-lena-city', 'ada', 'Lena', 'lives_in', 'Vienna', 'home', "
            "['a01'], '2026-03-02 09:00:00', '2026-03-02 09:00:00')"
        )
        publish_graph(con, lance.connect(settings.lance_path))
    modes = ("batch", "auto", "manual")
    apps = [
        create_app(Settings(home=home, subagent_mode=mode, _env_file=None), tokens=TOKENS) for mode in modes
    ]
    with (
        BackgroundServer(apps[0]) as batch,
        BackgroundServer(apps[1]) as auto,
        BackgroundServer(apps[2]) as manual,
    ):
        servers = dict(zip(modes, (batch, auto, manual), strict=True))
        yield settings, servers


def client(server, token: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=60)


def propose(http: httpx.Client, **body) -> dict:
    answer = http.post("/v1/beings/ada/proposals", json={"reason": "said in the chat", **body})
    assert answer.status_code == 201, answer.text
    return answer.json()


def decide(http: httpx.Client, proposal_id: str, decision: str, being: str = "ada", **edit) -> httpx.Response:
    return http.post(
        f"/v1/beings/{being}/proposals/{proposal_id}/decision", json={"decision": decision, **edit}
    )


def proposal(settings: Settings, proposal_id: str):
    return ProposalStore(settings.proposals).get("ada", proposal_id)


def inbox_texts(settings: Settings, being: str = "ada") -> list[str]:
    return [
        json.loads(line)["text"]
        for path in (settings.inbox / being).glob("*.jsonl")
        for line in path.read_text().splitlines()
        if line.strip()
    ]


# --------------------------------------------------------------------------- tokens


def test_a_token_carries_one_role():
    scopes = parse_tokens("tokA=ada,bram;tokS=ada@subagent:scout,bram@subagent:scout;tokW=*@subagent:watch")
    assert (
        scopes.beings_for("tokS") == frozenset({"ada", "bram"})
        and scopes.role_for("tokS") == "subagent:scout"
    )
    assert scopes.role_for("tokA") is None and scopes.beings_for("tokA") == frozenset({"ada", "bram"})
    assert scopes.role_for("tokW") == "subagent:watch" and scopes.allows(scopes.beings_for("tokW"), "cleo")
    assert scopes.role_for("unknown") is None
    with pytest.raises(MindflowError, match="carries different roles"):
        parse_tokens("tokS=ada@subagent:scout,bram")
    with pytest.raises(MindflowError, match="carries different roles"):
        parse_tokens("tokS=ada@subagent:scout,bram@subagent:other")
    for bad in ("tokS=ada@admin", "tokS=ada@subagent:", "tokS=ada@subagent:Scout Two"):
        with pytest.raises(MindflowError, match="the one role is subagent:<name>"):
            parse_tokens(bad)


def test_a_subagent_token_reads_and_proposes_but_writes_nothing(world):
    settings, servers = world
    with client(servers["batch"], SCOUT) as scout:
        said = scout.post(
            "/v1/beings/ada/episodes",
            json={"episodes": [{"ts": "2026-03-09T10:00:00Z", "text": "Lena bought a cello."}]},
        )
        assert said.status_code == 403
        assert said.json()["error"] == (
            "a sub-agent token (subagent:scout) cannot write episodes; propose them: POST /v1/beings/ada/proposals"
        )
        assert "Lena bought a cello." not in inbox_texts(settings)
        forget = scout.post("/v1/beings/ada/forget", json={"query": "the cat"})
        assert forget.status_code == 403 and "cannot forget" in forget.json()["error"]
        assert scout.post("/v1/beings/ada/memories/n-any/pin").status_code == 403
        assert scout.post("/v1/beings/ada/memories/n-any/restore").status_code == 403
        recalled = scout.post("/v1/beings/ada/recall", json={"query": "grey cat from the shelter"})
        assert recalled.status_code == 200 and "Pixel" in recalled.json()["memories"][0]["text"]
        assert scout.get("/v1/beings/ada/proposals").status_code == 200
        other = scout.post("/v1/beings/bram/proposals", json={"content": "x", "reason": "y"})
        assert other.status_code == 403 and "does not cover being 'bram'" in other.json()["error"]

        found = propose(scout, content="Lena practises the cello on Sundays.", type="task", confidence=0.6)
        assert found["status"] == "pending" and found["created_by"] == "subagent:scout"
        assert found["payload"]["agent"] == "scout" and found["payload"]["review"] == "batch"
        assert found["payload"]["type"] == "task" and found["payload"]["confidence"] == 0.6
        assert found["tag"] == "MEMORY" and found["conflict"] is False
        assert "Lena practises the cello" in found["title"] and "why: said in the chat" in found["evidence"]
        posing = scout.post(
            "/v1/beings/ada/proposals", json={"content": "x", "reason": "y", "agent": "someone-else"}
        )
        assert posing.status_code == 403 and "sub-agent 'scout'" in posing.json()["error"]
    with client(servers["batch"], MAIN) as main:
        pending = main.get("/v1/beings/ada/proposals", params={"status": "pending", "kind": "memory"}).json()
        assert found["proposal_id"] in [p["proposal_id"] for p in pending["proposals"]]
        # The main agent may name the proposer; a name must be a slug.
        named = propose(main, content="Lena's cello teacher is called Ines.", agent="helper")
        assert named["created_by"] == "subagent:helper" and named["payload"]["agent"] == "helper"
        # Unnamed, the main agent's proposal is its own, not a sub-agent's.
        unnamed = propose(main, content="Lena tunes her cello every morning.")
        assert unnamed["created_by"] == "api" and "proposed by api" in unnamed["evidence"]
        bad = main.post(
            "/v1/beings/ada/proposals", json={"content": "x", "reason": "y", "agent": "Not A Slug"}
        )
        assert bad.status_code == 422 and "invalid sub-agent name" in bad.json()["error"]
        for body, says in (
            ({"content": "x", "reason": "y", "type": "gossip"}, "type"),
            ({"content": "x", "reason": "y", "confidence": 1.5}, "confidence"),
            ({"content": "x", "reason": "y", "entity": "Lena", "key": "age"}, "go together"),
            ({"content": "x" * (settings.max_episode_chars + 1), "reason": "y"}, "the limit is"),
        ):
            answer = main.post("/v1/beings/ada/proposals", json=body)
            assert answer.status_code == 422 and says in answer.json()["error"], (body, answer.text)


def test_conflicts_show_both_sides_and_are_never_committed_alone(world):
    settings, servers = world
    with client(servers["auto"], SCOUT) as scout:
        # Auto mode: what agrees with the facts, or states a new one, is approved at once.
        same = propose(scout, content="Lena lives in Vienna.", entity="lena", key="LIVES_IN", value="vienna")
        assert same["status"] == "approved" and same["conflict"] is False
        assert same["decided_by"] == "subagent_mode:auto" and same["payload"]["approval"] == "auto"
        new = propose(scout, content="Lena works at the opera.", entity="Lena", key="works_at", value="opera")
        assert new["status"] == "approved"

        graz = propose(scout, content="Lena moved to Graz.", entity="Lena", key="lives_in", value="Graz")
        assert graz["status"] == "pending" and graz["conflict"] is True and graz["tag"] == "CONFLICT"
        (side,) = graz["payload"]["conflict"]
        assert side == {
            "what": "fact f-lena-city",
            "ref": "f-lena-city",
            "text": "Lena / lives_in: Vienna",
            "value": "Vienna",
        }
        assert "conflicts with fact f-lena-city: Lena / lives_in: Vienna" in graz["evidence"]

        linz = propose(scout, content="Lena lives in Linz now.", entity="Lena", key="lives_in", value="Linz")
        assert linz["status"] == "pending" and linz["conflict"] is True
        assert {c["what"] for c in linz["payload"]["conflict"]} == {
            "fact f-lena-city",
            f"proposal {graz['proposal_id']}",
        }
        # The earlier proposal shows the new one too.
        again = proposal(settings, graz["proposal_id"])
        assert [c["ref"] for c in again.payload["conflict"]] == ["f-lena-city", linz["proposal_id"]]
        assert again.status == "pending"

    with client(servers["batch"], SCOUT) as scout:
        # Two pending proposals conflict without any fact behind them.
        grey = propose(scout, content="Pixel is grey.", entity="Pixel", key="colour", value="grey")
        assert grey["conflict"] is False and grey["status"] == "pending"
        black = propose(scout, content="Pixel is black.", entity="pixel", key="colour", value="Black")
        assert black["conflict"] is True
        assert black["payload"]["conflict"][0]["what"] == f"proposal {grey['proposal_id']}"
        assert black["payload"]["conflict"][0]["value"] == "grey"
        assert proposal(settings, grey["proposal_id"]).payload["conflict"][0]["value"] == "Black"

    with client(servers["auto"], MAIN) as main:
        listed = main.get("/v1/beings/ada/proposals", params={"status": "pending"}).json()["proposals"]
        ids = {p["proposal_id"] for p in listed}
        assert {graz["proposal_id"], linz["proposal_id"], black["proposal_id"]} <= ids
        assert same["proposal_id"] not in ids


def test_manual_mode_marks_each_for_a_one_by_one_decision(world):
    _, servers = world
    with client(servers["manual"], SCOUT) as scout:
        found = propose(scout, content="Lena prefers oat milk.", type="preference")
    assert found["status"] == "pending" and found["payload"]["review"] == "manual"


def test_decisions_one_by_one_and_together(world):
    settings, servers = world
    with client(servers["batch"], SCOUT) as scout:
        ids = [
            propose(scout, content=f"Lena's plan number {n} for the spring.", type="task")["proposal_id"]
            for n in range(6)
        ]
        refused = decide(scout, ids[0], "approve")
        assert refused.status_code == 403
        assert refused.json()["error"].startswith(
            "a sub-agent token (subagent:scout) cannot decide proposals"
        )
        together = scout.post("/v1/beings/ada/proposals/decisions", json={"decisions": {ids[0]: "approve"}})
        assert together.status_code == 403
    assert proposal(settings, ids[0]).status == "pending"

    with client(servers["batch"], MAIN) as main:
        approved = decide(main, ids[0], "approve", text="Lena plans to learn the cello this spring.")
        assert approved.status_code == 200, approved.text
        body = approved.json()
        assert body["status"] == "approved" and body["decided_by"] == "api"
        assert body["payload"]["content"] == "Lena plans to learn the cello this spring."
        assert body["payload"]["edited"] is True and body["payload"]["approval"] == "user"
        twice = decide(main, ids[0], "reject")
        assert twice.status_code == 409 and "already approved" in twice.json()["error"]

        assert decide(main, ids[1], "reject").json()["status"] == "rejected"
        assert decide(main, ids[2], "defer").json()["status"] == "deferred"
        assert decide(main, ids[2], "approve").json()["status"] == "approved"  # deferred stays open
        with_edit = decide(main, ids[3], "reject", text="something else")
        assert with_edit.status_code == 422 and "edit an approval" in with_edit.json()["error"]

        bram = main.post(
            "/v1/beings/bram/proposals", json={"content": "Tomas oils the chain.", "reason": "seen"}
        ).json()
        assert decide(main, bram["proposal_id"], "approve").status_code == 404  # another being's
        assert proposal(settings, ids[3]).status == "pending"
        assert decide(main, "p-0123456789abcdef", "approve").status_code == 404

        # One decided among them: nothing changes.
        stale = main.post(
            "/v1/beings/ada/proposals/decisions", json={"decisions": {ids[3]: "approve", ids[0]: "approve"}}
        )
        assert stale.status_code == 409 and ids[0] in stale.json()["error"]
        assert proposal(settings, ids[3]).status == "pending"

        partial = main.post(
            "/v1/beings/ada/proposals/decisions",
            json={
                "decisions": {ids[3]: "approve", ids[4]: "reject"},
                "edits": {ids[3]: {"text": "Lena plans a trip to Graz."}},
            },
        )
        assert partial.status_code == 200, partial.text
        report = partial.json()
        assert report["approval"] == "partial"
        assert [(p["proposal_id"], p["status"]) for p in report["proposals"]] == [
            (ids[3], "approved"),
            (ids[4], "rejected"),
        ]
        assert proposal(settings, ids[3]).payload["content"] == "Lena plans a trip to Graz."
        assert proposal(settings, ids[3]).payload["approval"] == "partial"
        everything = main.post("/v1/beings/ada/proposals/decisions", json={"decisions": {ids[5]: "approve"}})
        assert everything.json()["approval"] == "user"


def test_procedures_are_posted_applied_published_and_versioned(world, embedder):
    settings, servers = world
    body = {
        "name": "Release the app",
        "trigger": "a release of ledgerline is due",
        "steps": ["Tag the commit", "Build the wheel", "Announce it in the team channel"],
    }
    with client(servers["batch"], MAIN) as main, client(servers["batch"], SCOUT) as scout:
        assert main.get("/v1/beings/ada/procedures", params={"query": "shipping"}).json()["procedures"] == []
        posted = main.post("/v1/beings/ada/procedures", json=body)
        assert posted.status_code == 202, posted.text
        assert posted.json()["status"] == "approved"
        stored = proposal(settings, posted.json()["proposal_id"])
        assert stored.kind == "procedure" and stored.payload["approval"] == "user"
        assert stored.decided_by == "api" and stored.payload["steps"] == body["steps"]
        scouted = scout.post(
            "/v1/beings/ada/procedures",
            json={"name": "Feed Pixel", "trigger": "it is evening", "steps": ["Half a pouch"]},
        )
        assert scouted.status_code == 202 and scouted.json()["status"] == "pending"
        assert main.post("/v1/beings/ada/procedures", json={**body, "steps": []}).status_code == 422
        # Not applied yet: the API only recorded the decision.
        assert main.get("/v1/beings/ada/procedures").json()["procedures"] == []

        with store.connect(settings.duckdb_path) as con:
            report = apply_approved(con, settings, "ada", run_id="test-approvals")
            assert report.applied.get("procedure") == 1 and not report.failed, report
            procedures.publish(con, lance.connect(settings.lance_path), embedder, ["ada"])
        found = main.get("/v1/beings/ada/procedures", params={"query": "how do we ship a new version?"})
        assert found.status_code == 200, found.text
        (first,) = found.json()["procedures"]
        assert first["name"] == "Release the app" and first["version"] == 1
        assert first["steps"] == body["steps"] and first["score"] > 0.2
        assert scout.get("/v1/beings/ada/procedures").json()["procedures"][0]["name"] == "Release the app"
        assert main.get("/v1/beings/bram/procedures", params={"query": "release"}).json()["procedures"] == []

        changed = {**body, "steps": ["Tag the commit", "Run the smoke test", "Build the wheel"]}
        assert main.post("/v1/beings/ada/procedures", json=changed).status_code == 202
        with store.connect(settings.duckdb_path) as con:
            apply_approved(con, settings, "ada", run_id="test-approvals-2")
            procedures.publish(con, lance.connect(settings.lance_path), embedder, ["ada"])
            history = procedures.versions(con, "ada", "Release the app")
        assert [v["version"] for v in history] == [1, 2] and history[0]["steps"] == body["steps"]
        (second,) = main.get("/v1/beings/ada/procedures", params={"query": "release"}).json()["procedures"]
        assert second["version"] == 2 and "Run the smoke test" in second["steps"]


def test_auto_approved_memories_reach_the_inbox_through_the_approvals_run(world):
    settings, servers = world
    with client(servers["auto"], SCOUT) as scout:
        found = propose(scout, content="Lena's birthday is on the 9th of May.", type="fact")
    assert found["status"] == "approved"
    assert "Lena's birthday is on the 9th of May." not in inbox_texts(settings)
    with store.connect(settings.duckdb_path) as con:
        apply_approved(con, settings, "ada", run_id="test-auto")
    assert "Lena's birthday is on the 9th of May." in inbox_texts(settings)
    assert proposal(settings, found["proposal_id"]).applied_at is not None


def test_the_memory_types_are_the_episode_kinds():
    assert set(typing.get_args(models.MemoryType)) == EPISODE_KINDS


# --------------------------------------------------------------------------- client and MCP


def test_client_methods(world):
    settings, servers = world
    url = servers["batch"].url
    with MindflowClient(url, token=SCOUT) as scout, MindflowClient(url, token=MAIN) as main:
        first = scout.propose("ada", "Lena's neighbour is called Jonas.", "she mentioned him twice")
        assert first.status == "pending" and first.created_by == "subagent:scout" and not first.conflict
        clash = scout.propose(
            "ada", "Lena lives in Salzburg.", "a guess", entity="Lena", key="lives_in", value="Salzburg"
        )
        assert clash.conflict and clash.tag == "CONFLICT"
        with pytest.raises(MindflowClientError) as refused:
            scout.decide("ada", first.proposal_id, "approve")
        assert refused.value.status == 403
        listed = main.proposals("ada", status="pending", kind="memory").proposals
        assert {first.proposal_id, clash.proposal_id} <= {p.proposal_id for p in listed}
        assert all(p.kind == "memory" for p in listed)
        assert main.decide("ada", first.proposal_id, "defer").status == "deferred"
        report = main.decide_many(
            "ada",
            {first.proposal_id: "approve", clash.proposal_id: "reject"},
            edits={first.proposal_id: {"text": "Lena's neighbour Jonas plays the drums."}},
        )
        assert report.approval == "partial"
        assert [p.status for p in report.proposals] == ["approved", "rejected"]
        assert report.proposals[0].payload["content"] == "Lena's neighbour Jonas plays the drums."
        with pytest.raises(MindflowClientError) as again:
            main.decide("ada", first.proposal_id, "reject")
        assert again.value.status == 409
        accepted = main.add_procedure(
            "ada", "Water the orchids", "the bark is dry", ["Soak for ten minutes", "Drain well"]
        )
        assert accepted.status == "approved"
        assert proposal(settings, accepted.proposal_id).payload["steps"] == [
            "Soak for ten minutes",
            "Drain well",
        ]
        assert isinstance(main.procedures("ada", "orchids", k=3).procedures, list)

    async def run_async():
        async with (
            AsyncMindflowClient(url, token=SCOUT) as scout,
            AsyncMindflowClient(url, token=MAIN) as main,
        ):
            made = await scout.propose(
                "ada", "Lena drinks her coffee black.", "she said so", type="preference"
            )
            decided = await main.decide("ada", made.proposal_id, "approve")
            listed = await main.proposals("ada", status="approved", kind="memory")
            found = await main.procedures("ada")
            posted = await scout.add_procedure("ada", "Greet Lena", "she comes home", ["Say hello"])
            return made, decided, listed, found, posted

    made, decided, listed, found, posted = asyncio.run(run_async())
    assert made.payload["type"] == "preference" and decided.status == "approved"
    assert made.proposal_id in {p.proposal_id for p in listed.proposals}
    assert found.being_id == "ada" and posted.status == "pending"


def test_mcp_tools_propose_list_decide_and_find_procedures(world):
    settings, servers = world
    url = servers["batch"].url

    async def main():
        async with http_client(url, SCOUT) as scout:
            names = {t.name for t in (await scout.list_tools()).tools}
            assert {"propose", "proposals", "decide", "procedures", "add_procedure"} <= names
            made = structured(
                await scout.call_tool(
                    "propose",
                    {
                        "being": "ada",
                        "content": "Lena's favourite composer is Dvořák.",
                        "reason": "she hummed the New World symphony",
                        "type": "preference",
                        "confidence": 0.8,
                    },
                )
            )
            assert made["status"] == "pending" and made["created_by"] == "subagent:scout"
            refused = error_text(
                await scout.call_tool(
                    "decide", {"being": "ada", "proposal_id": made["proposal_id"], "decision": "approve"}
                )
            )
            assert "403" in refused and "cannot decide proposals" in refused
            episodes = error_text(await scout.call_tool("remember", {"being": "ada", "text": "Lena hums."}))
            assert "403" in episodes and "propose them" in episodes
        async with http_client(url, MAIN) as main_agent:
            pending = structured(await main_agent.call_tool("proposals", {"being": "ada", "kind": "memory"}))
            assert made["proposal_id"] in [p["proposal_id"] for p in pending["proposals"]]
            assert all(p["status"] == "pending" for p in pending["proposals"])
            done = structured(
                await main_agent.call_tool(
                    "decide", {"being": "ada", "proposal_id": made["proposal_id"], "decision": "approve"}
                )
            )
            assert done["status"] == "approved" and done["decided_by"] == "api"
            again = error_text(
                await main_agent.call_tool(
                    "decide", {"being": "ada", "proposal_id": made["proposal_id"], "decision": "reject"}
                )
            )
            assert "409" in again
            accepted = structured(
                await main_agent.call_tool(
                    "add_procedure",
                    {
                        "being": "ada",
                        "name": "Tune the cello",
                        "trigger": "before practice",
                        "steps": ["A first"],
                    },
                )
            )
            assert accepted["status"] == "approved"
            found = structured(await main_agent.call_tool("procedures", {"being": "ada", "query": "release"}))
            assert found["being_id"] == "ada" and isinstance(found["procedures"], list)
            return made["proposal_id"]

    made = asyncio.run(main())
    assert proposal(settings, made).status == "approved" and proposal(settings, made).decided_by == "api"
