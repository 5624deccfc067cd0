"""The MCP server driven by the official SDK's own client: over stdio (`mindflow mcp`, a real
subprocess) and over streamable HTTP (`/mcp` on a real server on 127.0.0.1, with tokens)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from datetime import timedelta
from pathlib import Path

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from readme import between
from test_api import run_pipeline
from test_journal import write_beings_inbox, write_files
from test_rag import write_library

from mindflow import journal_index, lance, store
from mindflow.api import create_app, models
from mindflow.api.resonance import HEADER
from mindflow.api.server import BackgroundServer
from mindflow.config import Settings
from mindflow.models import utcnow
from mindflow.rag.index import ReindexParams
from mindflow.rag.index import reindex as reindex_ebooks

TOKEN_ADA = "mcp-token-ada"
TOKEN_ALL = "mcp-token-all"
TOOLS = {
    "recall", "resonance", "search_memory", "recall_memory", "facts", "story", "remember", "forget", "restore",
    "pin",
    "get_context", "journal_memory_search", "journal_memory_get", "search_ebooks", "propose", "proposals",
    "decide", "procedures", "add_procedure",
}  # fmt: skip
# The tools whose route takes a body: its request model, and the tool's arguments outside it
# (`being`, and decide's `proposal_id`, are in the route's path).
BODIES = {
    "recall": (models.RecallRequest, {"being"}),
    "resonance": (models.ResonanceRequest, {"being"}),
    "search_memory": (models.SearchRequest, {"being"}),
    "journal_memory_search": (models.JournalSearchRequest, {"being"}),
    "search_ebooks": (models.EbookSearchRequest, set()),
    "propose": (models.ProposeRequest, {"being"}),
    "add_procedure": (models.ProcedureRequest, {"being"}),
    "forget": (models.ForgetRequest, {"being"}),
    "decide": (models.DecisionRequest, {"being", "proposal_id"}),
}
# Query or path parameters only; and remember, one episode with the few fields an agent gives.
WITHOUT_BODY = {
    "recall_memory", "facts", "story", "remember", "restore", "pin", "get_context", "journal_memory_get",
    "proposals", "procedures",
}  # fmt: skip


@pytest.fixture(scope="module")
def world(tmp_path_factory, embedder):
    settings = Settings(home=tmp_path_factory.mktemp("mcp") / "home", _env_file=None)
    write_beings_inbox(
        settings,
        [
            (
                "a4",
                "2026-04-04T09:00:00Z",
                "Lena's old password hint was the name of her first dog.",
                "message",
            ),
            (
                "a5",
                "2026-04-05T09:00:00Z",
                "Lena told me the spare key hides under the blue flowerpot.",
                "message",
            ),
        ],
    )
    run_pipeline(settings, embedder, ["ada", "bram"])
    write_files(settings.workspace, "ada", utcnow().date())
    write_library(settings.ebooks)
    with store.connect(settings.duckdb_path) as con:
        journal_index.reindex(con, lance.connect(settings.lance_path), settings.workspace, ["ada"], embedder)
        reindex_ebooks(
            con,
            lance.connect(settings.lance_path),
            settings.ebooks,
            embedder,
            ReindexParams(chunk_tokens=48, chunk_overlap=8, keep_versions=timedelta(days=1)),
        )
    app = create_app(settings, tokens={TOKEN_ADA: ["ada"], TOKEN_ALL: "*"})
    with BackgroundServer(app) as server:
        yield settings, server


def http_client(url: str, token: str | None) -> Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return Client(
        streamable_http_client(f"{url}/mcp", http_client=httpx2.AsyncClient(headers=headers, timeout=60))
    )


def structured(result) -> dict:
    assert not result.is_error, result.content
    if result.structured_content is not None:
        return result.structured_content
    return json.loads(result.content[0].text)


def error_text(result) -> str:
    assert result.is_error, result
    return " ".join(c.text for c in result.content)


async def exercise_every_tool(client: Client, being: dict, remembered: str, forget_words: str) -> None:
    """List the tools, then call each one with valid input and check what it answers."""
    listed = (await client.list_tools()).tools
    assert {t.name for t in listed} == TOOLS
    for tool in listed:
        assert tool.description and len(tool.description) > 40, tool.name
        assert tool.input_schema["type"] == "object", tool.name
        if tool.name != "search_ebooks":
            assert "being" in tool.input_schema["properties"], tool.name
    by_name = {t.name: t for t in listed}
    assert by_name["recall"].input_schema["required"] == ["query"]
    for name in ("recall", "resonance", "remember"):  # one word for the session, as in episodes
        assert "session_id" in by_name[name].input_schema["properties"], name
        assert "session" not in by_name[name].input_schema["properties"], name
    assert by_name["forget"].input_schema["properties"]["confirm"]

    found = structured(await client.call_tool("recall", {**being, "query": "flaky login test", "k": 3}))
    assert "clock skew" in found["memories"][0]["text"]
    cluster = next(m["cluster_id"] for m in found["memories"] if m["cluster_id"])

    resonance = structured(await client.call_tool("resonance", {**being, "query": "how is the login test?"}))
    assert HEADER in resonance["text"] and "clock skew" in resonance["text"] and resonance["items"]

    keywords = structured(await client.call_tool("search_memory", {**being, "query": "basil tomatoes"}))
    assert any("basil" in m["text"] for m in keywords["memories"])

    clustered = structured(await client.call_tool("recall_memory", {**being, "cluster_id": cluster}))
    assert clustered["cluster_id"] == cluster and clustered["memories"]

    facts = structured(await client.call_tool("facts", {**being, "q": "Lena"}))
    assert facts["being_id"] == "ada" and isinstance(facts["facts"], list)
    assert "give `entity`" in error_text(await client.call_tool("facts", being))

    story = await client.call_tool("story", being)
    assert not story.is_error and "greenhouse" in story.content[0].text

    stored = structured(await client.call_tool("remember", {**being, "text": remembered, "importance": 0.9}))
    assert len(stored["ids"]) == 1
    recalled = structured(await client.call_tool("recall", {**being, "query": remembered, "k": 1}))
    fresh = recalled["memories"][0]
    assert fresh["text"] == remembered and fresh["trigger"] == "remember" and fresh["fresh"]

    ref = found["memories"][0]["memory_ref"]
    assert structured(await client.call_tool("pin", {**being, "ref": ref}))["pinned"] is True
    assert (
        structured(await client.call_tool("pin", {**being, "ref": ref, "pinned": False}))["pinned"] is False
    )
    assert "404" in error_text(await client.call_tool("pin", {**being, "ref": "n-no-such-memory"}))

    proposal = structured(await client.call_tool("forget", {**being, "query": forget_words}))
    assert proposal["status"] == "pending" and proposal["candidates"]
    target = next(c for c in proposal["candidates"] if c["store"] == "memory")
    done = structured(
        await client.call_tool(
            "forget",
            {**being, "proposal_id": proposal["proposal_id"], "refs": [target["ref"]], "confirm": True},
        )
    )
    assert done["status"] == "approved" and done["forgotten"] == [target["ref"]]
    after = structured(await client.call_tool("recall", {**being, "query": forget_words, "k": 10}))
    assert target["ref"] not in [m["memory_ref"] for m in after["memories"]]
    assert "step 2 needs `confirm`" in error_text(
        await client.call_tool("forget", {**being, "proposal_id": proposal["proposal_id"]})
    )
    # A soft forget made here is undone here, as `POST memories/{ref}/restore` does.
    restored = structured(await client.call_tool("restore", {**being, "ref": target["ref"]}))
    assert restored == {"being_id": "ada", "ref": target["ref"], "restored": True}
    again = structured(await client.call_tool("recall", {**being, "query": forget_words, "k": 10}))
    assert target["ref"] in [m["memory_ref"] for m in again["memories"]]
    nothing_forgot_it = error_text(await client.call_tool("restore", {**being, "ref": target["ref"]}))
    assert "404" in nothing_forgot_it and "no forgotten memory" in nothing_forgot_it

    # A proposal through the tools is the MCP caller's, not a sub-agent called "agent".
    proposed = structured(
        await client.call_tool("propose", {**being, "content": remembered, "reason": "the user said so"})
    )
    assert proposed["created_by"] == "mcp" and "proposed by mcp" in proposed["evidence"]

    context = structured(await client.call_tool("get_context", {**being, "blocks": ["1-A", "2-B"]}))
    assert [b["id"] for b in context["blocks"]] == ["1-A", "2-B"] and "I speak plainly" in context["blocks"][
        0
    ]["text"]

    hits = structured(
        await client.call_tool("journal_memory_search", {**being, "query": "PostgreSQL ledger"})
    )
    assert hits["hits"][0]["path"] == "memory/2026-03-02.md"
    read = structured(
        await client.call_tool("journal_memory_get", {**being, "path": "MEMORY.md", "start": 5, "end": 6})
    )
    assert read["line_start"] == 5 and "Critical Facts" in read["text"]

    # The arguments HTTP takes, MCP takes: what is in the context window, the horizon, k and now.
    lena = structured(await client.call_tool("recall", {**being, "query": "Lena", "k": 5}))["memories"]
    top = lena[0]["memory_ref"]
    unseen = structured(
        await client.call_tool("recall", {**being, "query": "Lena", "k": 5, "exclude_refs": [top]})
    )["memories"]
    assert len(lena) > 1 and unseen and top not in [m["memory_ref"] for m in unseen]
    before = {**being, "query": "flaky login test", "until": "2000-01-01"}
    assert structured(await client.call_tool("recall", before))["memories"] == []
    assert structured(await client.call_tool("resonance", before))["items"] == []
    backwards = {**being, "query": "flaky login test", "since": "2026-05-01", "until": "2026-04-01"}
    assert "422" in error_text(await client.call_tool("recall", backwards))
    one = structured(
        await client.call_tool(
            "resonance", {**being, "query": "how is the login test?", "k": 1, "now": "2026-06-01T12:00:00Z"}
        )
    )
    assert len(one["items"]) == 1 and one["now"] == "2026-06-01T12:00:00Z"
    taught = {"name": "Ship", "trigger": "a release is due", "steps": ["tag", "push"]}
    added = structured(
        await client.call_tool("add_procedure", {**being, **taught, "learned_from": [top], "confidence": 0.9})
    )
    recorded = structured(await client.call_tool("proposals", {**being, "status": None, "kind": "procedure"}))
    payload = next(p for p in recorded["proposals"] if p["proposal_id"] == added["proposal_id"])["payload"]
    assert payload["learned_from"] == [top] and payload["confidence"] == 0.9

    ebooks = structured(
        await client.call_tool("search_ebooks", {"query": "camels crossing the dunes", "k": 2})
    )
    assert ebooks["hits"][0]["title"] == "Voyages"


async def refuses_hostile_input(client: Client, being: dict) -> None:
    """Bad input is a tool error with the API's message; the server keeps serving."""
    for path in ("../bram/MEMORY.md", "/etc/passwd", "SOUL.md", "diary/../../../outside.md"):
        message = error_text(await client.call_tool("journal_memory_get", {**being, "path": path}))
        assert "400" in message, (path, message)
    invalid = await client.call_tool("recall", {**being, "query": "x", "k": 0})
    assert invalid.is_error  # refused by the tool's input schema
    assert not (await client.call_tool("story", being)).is_error  # still serving


def test_the_readme_names_every_tool():
    """The agent builder's list of tools (README, For agent builders) is the set the server lists
    (`TOOLS`, which `exercise_every_tool` checks against the server itself)."""
    sentence = between("The tools, each with a typed input schema:", "Each calls the API")
    named = set(re.findall(r"`([a-z_]+)`", sentence))
    assert sorted(TOOLS - named) == []
    assert sorted(named - TOOLS - {"proposal_id"}) == []  # `proposal_id`: forget's confirming argument


def test_each_tool_takes_the_arguments_of_its_http_body(world):
    """A tool whose route takes a body takes that body's fields, with the same types, bounds,
    defaults and required ones (the words may differ): a field added to a request model and not
    to its tool, or the reverse, fails here. A new tool must say whether it has a body."""
    _, server = world

    async def main():
        async with http_client(server.url, TOKEN_ADA) as client:
            return {t.name: t.input_schema for t in (await client.list_tools()).tools}

    listed = asyncio.run(main())
    assert set(BODIES) | WITHOUT_BODY == set(listed) == TOOLS

    def bare(schema: dict) -> dict:
        return {k: v for k, v in schema.items() if k not in ("title", "description")}

    for tool, (model, outside) in BODIES.items():
        body, arguments = model.model_json_schema(), listed[tool]
        assert sorted(set(arguments["properties"]) - outside) == sorted(body["properties"]), tool
        for name, schema in body["properties"].items():
            assert bare(arguments["properties"][name]) == bare(schema), (tool, name)
        assert sorted(set(arguments.get("required", [])) - outside) == sorted(body.get("required", [])), tool


def test_http_lists_and_calls_every_tool(world):
    settings, server = world

    async def main():
        async with http_client(server.url, TOKEN_ADA) as client:
            await exercise_every_tool(
                client, {"being": "ada"}, "Lena's cat is called Pixel.", "spare key flowerpot"
            )
            await refuses_hostile_input(client, {"being": "ada"})
            assert "give `being`" in error_text(await client.call_tool("recall", {"query": "x"}))

    asyncio.run(main())


def test_http_scopes_the_token_and_refuses_hostile_beings(world):
    _, server = world

    async def main():
        async with http_client(server.url, TOKEN_ADA) as client:
            other = error_text(await client.call_tool("recall", {"being": "bram", "query": "hives"}))
            assert "403" in other and "does not cover being 'bram'" in other
            for hostile in ("../bram", "ADA", "ada/../bram", "a" * 65, "ada\x00", ""):
                message = error_text(await client.call_tool("recall", {"being": hostile, "query": "hives"}))
                assert "hives" not in message.replace("'hives'", "") and "Bram inspected" not in message
            assert "invalid being id" in error_text(await client.call_tool("story", {"being": "../bram"}))
        async with http_client(server.url, TOKEN_ALL) as client:
            hives = structured(await client.call_tool("recall", {"being": "bram", "query": "hives"}))
            assert "hives" in hives["memories"][0]["text"]

    asyncio.run(main())


def test_http_without_a_known_token_is_refused(world):
    _, server = world
    for headers in ({}, {"Authorization": "Bearer not-a-token"}, {"Authorization": f"Basic {TOKEN_ADA}"}):
        answer = httpx.post(
            f"{server.url}/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={"Accept": "application/json, text/event-stream", **headers},
        )
        assert answer.status_code == 401 and answer.json()["error"] == "missing or unknown bearer token"

    async def main():
        async with http_client(server.url, None) as client:
            await client.list_tools()

    with pytest.raises(BaseException) as refused:
        asyncio.run(main())
    # The SDK's client reports the 401 as an error response; it never sees the tools.
    assert any(m.startswith("MCPError: ") for m in messages(refused.value)), messages(refused.value)


def messages(exc: BaseException) -> list[str]:
    """The messages of an exception, its causes and the members of exception groups."""
    found = [f"{type(exc).__name__}: {exc}"]
    for inner in getattr(exc, "exceptions", ()):
        found += messages(inner)
    if exc.__cause__ is not None:
        found += messages(exc.__cause__)
    return found


def test_stdio_lists_and_calls_every_tool(world):
    settings, _ = world
    env = {
        "MINDFLOW_HOME": str(settings.home),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "MINDFLOW_MODELS_DIR": str(settings.models),
        "PATH": os.environ.get("PATH", ""),
        # This checkout's code, whichever checkout the interpreter's environment was installed from.
        "PYTHONPATH": str(Path(__file__).resolve().parent.parent),
    }

    async def main():
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "mindflow.cli", "mcp"], env=env, cwd=str(settings.home)
        )
        async with Client(params) as client:
            await exercise_every_tool(
                client, {"being": "ada"}, "Lena's bike is a green Gazelle.", "password hint dog"
            )
            await refuses_hostile_input(client, {"being": "ada"})
        fixed = StdioServerParameters(
            command=sys.executable,
            args=["-m", "mindflow.cli", "mcp", "--being", "ada"],
            env=env,
            cwd=str(settings.home),
        )
        async with Client(fixed) as client:
            story = await client.call_tool("story", {})
            assert not story.is_error and "greenhouse" in story.content[0].text
            other = error_text(await client.call_tool("recall", {"being": "bram", "query": "hives"}))
            assert "serves being 'ada' only" in other
            hostile = error_text(await client.call_tool("journal_memory_get", {"path": "../bram/MEMORY.md"}))
            assert "400" in hostile

    asyncio.run(main())
