"""`POST /v1/ebooks/search` over a real uvicorn server on 127.0.0.1, and the client's search_ebooks."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import httpx
import pytest
from test_rag import write_library

from mindflow import lance, store
from mindflow.api import create_app
from mindflow.api.server import BackgroundServer
from mindflow.client import AsyncMindflowClient, MindflowClient, MindflowClientError
from mindflow.config import Settings
from mindflow.rag.index import ReindexParams, reindex

TOKEN = "token-for-ada-only"


@pytest.fixture(scope="module")
def server(tmp_path_factory, embedder):
    settings = Settings(home=tmp_path_factory.mktemp("ebooks-api") / "home", _env_file=None)
    write_library(settings.ebooks)
    with store.connect(settings.duckdb_path) as con:
        report = reindex(
            con,
            lance.connect(settings.lance_path),
            settings.ebooks,
            embedder,
            ReindexParams(chunk_tokens=48, chunk_overlap=8, keep_versions=timedelta(days=1)),
        )
    assert report.documents == 5
    app = create_app(settings, tokens={TOKEN: ["ada"]})
    with BackgroundServer(app) as running:
        yield settings, running


def test_search_endpoint_returns_passages_with_title_and_chapter(server):
    _, running = server
    with httpx.Client(base_url=running.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as http:
        response = http.post("/v1/ebooks/search", json={"query": "camels crossing the dunes", "k": 3})
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["query"] == "camels crossing the dunes" and len(body["hits"]) == 3
        best = body["hits"][0]
        assert (best["title"], best["chapter"], best["doc_id"]) == (
            "Voyages",
            "The Desert Crossing",
            "voyages.epub",
        )
        assert best["author"] == "Dora Explorer" and "camels" in best["text"]
        assert best["char_end"] > best["char_start"] >= 0 and best["score"] > 0
        assert {"cosine", "bm25", "vector_rank", "text_rank"} <= set(best["parts"])
        assert [h["score"] for h in body["hits"]] == sorted((h["score"] for h in body["hits"]), reverse=True)
        assert "/v1/ebooks/search" in http.get("/openapi.json").json()["paths"]


def test_search_endpoint_auth_and_limits(server):
    settings, running = server
    with httpx.Client(base_url=running.url, timeout=30) as http:
        anonymous = http.post("/v1/ebooks/search", json={"query": "honey"})
        assert anonymous.status_code == 401 and anonymous.headers["www-authenticate"] == "Bearer"
        wrong = http.post(
            "/v1/ebooks/search", json={"query": "honey"}, headers={"Authorization": "Bearer nope"}
        )
        assert wrong.status_code == 401
        auth = {"Authorization": f"Bearer {TOKEN}"}
        for body in ({"query": ""}, {"query": "honey", "k": 51}, {"query": "honey", "limit": 3}, {}):
            response = http.post("/v1/ebooks/search", json=body, headers=auth)
            assert response.status_code == 422, (body, response.text)
            assert response.json()["error"]
        long = http.post(
            "/v1/ebooks/search", json={"query": "x" * (settings.api_max_query_chars + 1)}, headers=auth
        )
        assert long.status_code == 422 and "limit" in long.json()["error"]
        huge = http.post(
            "/v1/ebooks/search",
            content=b'{"query": "' + b"y" * (settings.api_max_body_bytes + 10) + b'"}',
            headers={**auth, "Content-Type": "application/json"},
        )
        assert huge.status_code == 413


def test_clients_sync_and_async(server):
    _, running = server
    with MindflowClient(running.url, token=TOKEN) as client:
        found = client.search_ebooks("melting white sugar until it browns", k=2)
        assert found.hits[0].title == "Kitchen Chemistry" and found.hits[0].chapter == "Caramel"
        with pytest.raises(MindflowClientError) as error:
            client.search_ebooks("honey", k=0)
        assert error.value.status == 422
    with MindflowClient(running.url, token="nope", retries=0) as client:
        with pytest.raises(MindflowClientError) as error:
            client.search_ebooks("honey")
        assert error.value.status == 401

    async def main():
        async with AsyncMindflowClient(running.url, token=TOKEN) as client:
            return await asyncio.gather(
                client.search_ebooks("a swarm of bees hanging from a bough", k=1),
                client.search_ebooks("the keeper lights the lamp and polishes the lens", k=1),
            )

    bees, keeper = asyncio.run(main())
    assert (bees.hits[0].title, bees.hits[0].chapter) == ("Field Notes on Bees", "Swarming")
    assert (keeper.hits[0].title, keeper.hits[0].chapter) == ("The Lighthouse Keeper", "Chapter 1")


def test_search_before_any_reindex_is_empty(tmp_path, embedder):
    settings = Settings(home=tmp_path / "home", _env_file=None)
    with BackgroundServer(create_app(settings)) as running:
        response = httpx.post(f"{running.url}/v1/ebooks/search", json={"query": "anything"}, timeout=30)
        assert response.status_code == 200 and response.json()["hits"] == []
        assert not settings.duckdb_path.exists()  # the API never opens DuckDB
