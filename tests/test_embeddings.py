"""Embeddings: the bundled model offline, the cache, and OpenAI's wire format on loopback."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
from conftest import SHARED_DATASETS

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
    stored = con.execute("SELECT model, text_sha256 FROM embedding_cache ORDER BY text_sha256").fetchall()
    assert stored == sorted(
        [
            ("all-MiniLM-L6-v2@fp32", text_sha256("alpha beta")),
            ("all-MiniLM-L6-v2@fp32", text_sha256("gamma delta")),
        ],
        key=lambda r: r[1],
    )


def _locomo_texts(limit: int) -> list[str]:
    folder = SHARED_DATASETS / "locomo-dev"
    texts = []
    for path in sorted(folder.glob("conv-*.json")):
        data = json.loads(path.read_text())
        data = data.get("conversation", data)
        for key, turns in data.items():
            if key.startswith("session_") and isinstance(turns, list):
                texts.extend(turn["text"] for turn in turns)
    return texts[:limit]


def test_onnx_batches_give_the_vectors_of_sentence_transformers(models_dir, embedder):
    """Either runtime may fill the cache the other reads: their vectors must be the same."""
    texts = _locomo_texts(300)
    if len(texts) < 300:
        pytest.skip("the LoCoMo dev set is not in ../shared/datasets")
    texts += ["x", " ".join(["the long meeting about the deploy window went on"] * 60)]  # > 256 tokens
    onnx = Embedder(graph_dir=models_dir, batch_size=32)
    assert onnx.onnx_encoder() is not None and embedder.onnx_encoder() is None
    got, expected = onnx.encode(texts), embedder.encode(texts)
    assert got.dtype == np.float32 and got.shape == expected.shape == (len(texts), 384)
    assert float(np.abs(got - expected).max()) < 1e-4
    assert float((got * expected).sum(axis=1).min()) > 0.99999
    assert onnx.dimension == 384


def test_both_runtimes_share_one_cache_key_and_reuse_each_others_vectors(con, models_dir):
    onnx = Embedder(graph_dir=models_dir, runtime="onnx")
    torch = Embedder(graph_dir=models_dir, runtime="torch")
    assert onnx.cache_key == torch.cache_key == "all-MiniLM-L6-v2@fp32"
    assert Embedder(model="openai:text-embedding-3-small").cache_key == "openai:text-embedding-3-small"
    first = onnx.encode_cached(con, ["a text embedded once", "and another"])
    again = torch.encode_cached(con, ["and another", "a text embedded once"])
    assert torch.stats == {"embedded": 0, "cached": 2}
    assert np.array_equal(again[::-1], first)


def test_unknown_runtime_says_what_to_set():
    with pytest.raises(MindflowError, match="MINDFLOW_EMBEDDING_RUNTIME"):
        Embedder(runtime="tensorflow")


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_batch_ingestion_and_the_query_encoder_give_one_text_the_same_vector(con, models_dir, precision):
    """A node embedded by the patrol and the same words asked as a query meet at cosine 1.

    Bit for bit: the batch path runs each text alone, as the query encoder does, so even
    int8 (whose dynamic quantisation would scale a padded batch by all its texts) agrees.
    """
    texts = _locomo_texts(120) or ["I went camping with my kids", "What did Caroline research?"]
    texts += ["x", " ".join(["the long meeting about the deploy window went on"] * 60)]  # > 256 tokens
    ingest = Embedder(graph_dir=models_dir, precision=precision)
    server = Embedder(graph_dir=models_dir, precision=precision)
    assert ingest.cache_key == server.cache_key == f"all-MiniLM-L6-v2@{precision}"
    batch = ingest.encode_cached(con, texts)
    queries = np.stack([server.encode_query(t) for t in texts])
    assert batch.dtype == queries.dtype == np.float32
    assert float(np.abs(batch - queries).max()) <= 1e-6  # measured: 0.0
    cached = server.encode_cached(con, list(reversed(texts)))
    assert server.stats["embedded"] == len(texts)  # the queries; the cache served the rest
    assert np.array_equal(cached[::-1], batch)


def test_precision_comes_from_the_settings_and_keeps_its_own_cache(con, models_dir, monkeypatch):
    from mindflow.config import load_settings

    monkeypatch.setenv("MINDFLOW_EMBEDDING_PRECISION", "int8")
    int8 = Embedder.for_settings(load_settings())
    monkeypatch.setenv("MINDFLOW_EMBEDDING_PRECISION", "fp32")
    fp32 = Embedder.for_settings(load_settings())
    assert (int8.precision, fp32.precision) == ("int8", "fp32")
    texts = ["Caroline researched adoption agencies", "Melanie painted a sunrise by the lake"]
    quantised = int8.encode_cached(con, texts)
    full = fp32.encode_cached(con, texts)
    # Neither read the other's vectors: each embedded both texts under its own key.
    assert int8.stats["embedded"] == fp32.stats["embedded"] == 2
    keys = con.execute("SELECT model, count(*) FROM embedding_cache GROUP BY model ORDER BY model").fetchall()
    assert keys == [("all-MiniLM-L6-v2@fp32", 2), ("all-MiniLM-L6-v2@int8", 2)]
    cosine = (quantised * full).sum(axis=1)
    # Other vectors, close ones: per-channel int8 kept a mean cosine of 0.992 on LoCoMo's turns.
    assert not np.array_equal(quantised, full) and float(cosine.min()) > 0.95
    assert sorted("-int8-" in p.name for p in models_dir.glob("*.onnx")) == [False, True]


def test_int8_without_its_graph_says_what_to_set():
    with pytest.raises(MindflowError, match="MINDFLOW_EMBEDDING_PRECISION"):
        Embedder(precision="int4")
    with pytest.raises(MindflowError, match="MINDFLOW_EMBEDDING_PRECISION=fp32"):
        Embedder(precision="int8", runtime="torch")
    with pytest.raises(MindflowError, match="MINDFLOW_EMBEDDING_PRECISION=fp32"):
        Embedder(precision="int8").encode(["no models folder, no int8 graph"])


def test_an_existing_home_keeps_its_float32_cache_and_vectors_after_the_migrations(con, monkeypatch):
    """A home from before keys named the precision, and before int8 became the default.

    Its cache keys get their precision (all float32), the home is pinned to fp32 (its memories'
    vectors are float32, so its queries must be too), and its cached vectors keep serving the
    encoder its settings give, without embedding anything again.
    """
    from mindflow import store
    from mindflow.config import PRECISION_PIN, load_settings

    monkeypatch.delenv("MINDFLOW_EMBEDDING_PRECISION")  # the home decides
    settings = load_settings()
    pin = settings.resolved_home / PRECISION_PIN
    assert pin.read_text() == "int8\n" and settings.encoder_precision == "int8"  # a new home
    rows = [
        ("all-MiniLM-L6-v2", text_sha256("written before the rename")),
        ("/models/my-minilm", "h2"),
        ("openai:text-embedding-3-small", "h3"),
    ]
    for model, digest in rows:
        con.execute(
            "INSERT INTO embedding_cache VALUES (?, ?, [0.6, 0.8]::FLOAT[], now()::TIMESTAMP)",
            [model, digest],
        )
    con.execute("DELETE FROM schema_version WHERE version >= 14")  # as a home of schema 13 left it
    pin.unlink()
    # A server started on the upgraded home before any job migrated it already embeds in fp32.
    assert load_settings().encoder_precision == "fp32"
    assert store.migrate(con) == store.SCHEMA_VERSION - 13  # 14, 15 and any later
    keys = {row[0] for row in con.execute("SELECT model FROM embedding_cache").fetchall()}
    assert keys == {"all-MiniLM-L6-v2@fp32", "/models/my-minilm@fp32", "openai:text-embedding-3-small"}
    assert pin.read_text() == "fp32\n"
    upgraded = load_settings()
    assert upgraded.encoder_precision == "fp32"
    reader = Embedder.for_settings(upgraded)
    assert reader.cache_key == "all-MiniLM-L6-v2@fp32"
    vectors = reader.encode_cached(con, ["written before the rename"])
    assert reader.stats == {"embedded": 0, "cached": 1}
    assert np.allclose(vectors, [[0.6, 0.8]])
    # Migrating again (every connect does) leaves the pin as it is.
    assert store.migrate(con) == 0 and load_settings().encoder_precision == "fp32"


def test_a_new_home_embeds_in_int8_and_a_setting_overrides_the_pin(home, monkeypatch):
    from mindflow import store
    from mindflow.config import PRECISION_PIN, load_settings

    monkeypatch.delenv("MINDFLOW_EMBEDDING_PRECISION")  # the home decides
    settings = load_settings()
    assert settings.encoder_precision == "int8"  # no stores yet
    with store.connect(settings.duckdb_path):
        pass
    assert (home / PRECISION_PIN).read_text() == "int8\n"
    assert Embedder.for_settings(load_settings()).cache_key == "all-MiniLM-L6-v2@int8"
    monkeypatch.setenv("MINDFLOW_EMBEDDING_PRECISION", "fp32")
    assert Embedder.for_settings(load_settings()).cache_key == "all-MiniLM-L6-v2@fp32"


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
            {
                "object": "list",
                "data": data,
                "model": body["model"],
                "usage": {"prompt_tokens": 1, "total_tokens": 1},
            }
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
