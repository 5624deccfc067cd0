"""Embeddings: the bundled model offline, the cache, and OpenAI's wire format on loopback."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from mindflow.embeddings import Embedder, text_sha256
from mindflow.errors import MindflowError


def test_bundled_model_gives_unit_vectors_that_rank_paraphrases_first(embedder):
    vectors = embedder.encode(
        ["The cat sleeps on the sofa.", "A kitten is napping on the couch.", "Quarterly tax report due"]
    )
    assert vectors.shape == (3, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.3


def test_rows_come_back_in_the_callers_order_across_progress_chunks(embedder):
    """Texts are encoded longest first in chunks; each row is still its own text's vector."""
    texts = [
        "short",
        "a much longer sentence about the billing service release that failed in production",
        "mid length text about tea",
        "x",
        "another fairly long sentence about a sister's wedding next weekend with family",
    ]
    chunked = Embedder(model=embedder.model, progress_every=2)
    seen = []
    chunked.progress = lambda done, total: seen.append((done, total))
    vectors = chunked.encode(texts)
    one_by_one = np.stack([embedder.encode([t])[0] for t in texts])
    assert np.allclose(vectors, one_by_one, atol=1e-5)
    assert seen == [(2, 5), (4, 5), (5, 5)]


def test_cache_embeds_each_text_once_across_runs(con, embedder):
    texts = ["alpha beta", "gamma delta", "alpha beta"]
    stats_before = dict(embedder.stats)
    first = embedder.encode_cached(con, texts)
    assert embedder.stats["embedded"] - stats_before["embedded"] == 2  # duplicate within the batch
    assert con.execute("SELECT count(*) FROM embedding_cache").fetchone()[0] == 2
    second = embedder.encode_cached(con, list(reversed(texts)))
    assert embedder.stats["embedded"] - stats_before["embedded"] == 2  # nothing new embedded
    assert np.allclose(second[::-1], first, atol=1e-6)
    stored = con.execute(
        "SELECT model, text_sha256 FROM embedding_cache ORDER BY text_sha256"
    ).fetchall()
    assert stored == sorted([("all-MiniLM-L6-v2", text_sha256("alpha beta")),
                             ("all-MiniLM-L6-v2", text_sha256("gamma delta"))], key=lambda r: r[1])


def test_unknown_local_model_is_a_clear_error():
    with pytest.raises(MindflowError, match="cannot load embedding model"):
        Embedder(model="/nonexistent/model/path").encode(["x"])


class _OpenAIEmbeddings(BaseHTTPRequestHandler):
    requests: list[dict] = []

    def do_POST(self):  # noqa: N802 - the http.server API
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})
        data = [
            {"object": "embedding", "index": i, "embedding": [float(len(t)), 1.0, 0.0]}
            for i, t in enumerate(body["input"])
        ]
        payload = json.dumps(
            {"object": "list", "data": data, "model": body["model"],
             "usage": {"prompt_tokens": 1, "total_tokens": 1}}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.fixture
def openai_server():
    _OpenAIEmbeddings.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _OpenAIEmbeddings)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


def test_openai_model_through_the_real_sdk_in_one_batch(openai_server, con):
    embedder = Embedder(
        model="openai:text-embedding-3-small", openai_api_key="sk-test", openai_base_url=openai_server
    )
    texts = [f"text number {i}" for i in range(10)]
    vectors = embedder.encode_cached(con, texts)
    assert len(_OpenAIEmbeddings.requests) == 1  # one call for the batch, never one per row
    request = _OpenAIEmbeddings.requests[0]
    assert request["path"] == "/v1/embeddings"
    assert request["model"] == "text-embedding-3-small"
    assert request["auth"] == "Bearer sk-test"
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    embedder.encode_cached(con, texts)
    assert len(_OpenAIEmbeddings.requests) == 1  # served from the cache


def test_openai_model_without_key_says_what_to_set():
    with pytest.raises(MindflowError, match="OPENAI_API_KEY"):
        Embedder(model="openai:text-embedding-3-small").encode(["x"])
