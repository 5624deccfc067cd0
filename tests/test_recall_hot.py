"""The server's fast path: the ONNX query encoder and the per-being hot indexes.

Both must change nothing but speed: the same vectors as sentence-transformers, the same
memories as a recall read from LanceDB, and never a memory of a version the table left.
"""

from __future__ import annotations

import json
import shutil
import time
from datetime import UTC, date, datetime, timedelta

import numpy as np
import pyarrow as pa
import pytest

# The memories of the ranking tests: ada's work and family life, bram's runs and cat.
from test_recall import ADA, BRAM, T0, _write

from mindflow import lance, onnx_encoder, store
from mindflow.api import models
from mindflow.api.service import RecallService
from mindflow.embeddings import Embedder, model_dir
from mindflow.errors import MindflowError
from mindflow.inbox import ingest
from mindflow.memories import publish
from mindflow.patrol import run_patrol
from mindflow.recall import BeingIndex, HotIndexes, RecallConfig, hot, open_memories, recall
from mindflow.recall.hot import INT8_SCAN_FROM
from mindflow.recall.models import COLUMNS

NOW = T0 + timedelta(days=50)
TEXTS = [
    "I went camping with my kids last summer near the lake.",
    "what did Caroline research?",
    "Order id -100123:45 failed reconciliation twice",
    "Zürich, 14:30 — Entscheidung: wir nehmen DuckDB 🦆",
    "x",
    " ".join(["the long meeting about the ledgerline deploy window went on and on"] * 40),  # > 256 tokens
]


def test_query_encoder_gives_the_vectors_of_sentence_transformers(models_dir, embedder):
    fast = Embedder(graph_dir=models_dir)
    assert fast.onnx_encoder() is not None
    expected = embedder.encode(TEXTS)
    got = np.stack([fast.encode_query(t) for t in TEXTS])
    assert got.dtype == np.float32 and got.shape == expected.shape
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    assert (got * expected).sum(axis=1).min() > 0.9999


def test_the_graph_is_exported_once_and_reused(tmp_path, embedder):
    first = Embedder(graph_dir=tmp_path)
    first.encode_query("warm up")
    graphs = list(tmp_path.glob("*.onnx"))
    assert len(graphs) == 1 and graphs[0].name.startswith("all-MiniLM-L6-v2-")
    stamp = graphs[0].stat().st_mtime_ns
    again = Embedder(graph_dir=tmp_path)
    vector = again.encode_query("warm up")
    assert [g.stat().st_mtime_ns for g in tmp_path.glob("*.onnx")] == [stamp]
    assert float(vector @ embedder.encode(["warm up"])[0]) > 0.9999
    assert not list(tmp_path.glob("*.partial"))


def test_models_the_encoder_cannot_reproduce_stay_on_sentence_transformers(tmp_path, embedder):
    source = model_dir("all-MiniLM-L6-v2")
    copy = tmp_path / "cls-model"
    shutil.copytree(source, copy, ignore=shutil.ignore_patterns("*.safetensors"))
    pooling = json.loads((copy / "1_Pooling" / "config.json").read_text())
    assert onnx_encoder._modules(copy) is not None
    pooling.update(pooling_mode_mean_tokens=False, pooling_mode_cls_token=True)
    (copy / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    assert onnx_encoder._modules(copy) is None
    assert onnx_encoder.load(copy, tmp_path / "graphs", lambda: pytest.fail("must not load"), "cls") is None
    assert onnx_encoder.load(None, tmp_path / "graphs", lambda: pytest.fail("must not load"), "hub") is None
    # without a graph directory, and for remote models, encode_query is encode([text])[0]
    plain = Embedder()
    assert plain.onnx_encoder() is None
    assert np.array_equal(plain.encode_query("hello"), embedder.encode(["hello"])[0])


def _pipeline(settings, embedder, beings):
    with store.connect(settings.duckdb_path) as con:
        ingest(con, settings.inbox, date(2026, 9, 1), date(2026, 12, 31))
        for being in beings:
            run_patrol(con, being, embedder, now=NOW)
        publish(con, lance.connect(settings.lance_path))


@pytest.fixture
def published(settings, embedder):
    _write(settings.inbox, "ada", ADA)
    _write(settings.inbox, "bram", BRAM)
    _pipeline(settings, embedder, ["ada", "bram"])
    return settings


def test_an_index_serves_only_the_version_it_was_built_from(published, embedder):
    table = open_memories(published.lance_path)
    hot = HotIndexes(published.lance_path, max_rows=1_000)
    try:
        assert hot.get(table, "ada") is None  # first sight: built in the background
        assert hot.wait("ada")
        index = hot.get(table, "ada")
        assert index is not None and len(index) == len(ADA) and index.version == table.version
        assert index.being_id == "ada" and set(index.rows.column("being_id").to_pylist()) == {"ada"}
        # a publish moves the table on: the old index is not handed out again
        _write(published.inbox, "ada", [("a9", "Fed the sourdough starter and baked a rye loaf.", 45)])
        _pipeline(published, embedder, ["ada"])
        assert table.version != index.version
        assert hot.get(table, "ada") is None
        assert hot.wait("ada")
        rebuilt = hot.get(table, "ada")
        assert rebuilt is not None and len(rebuilt) == len(ADA) + 1
        query = "sourdough rye"
        found = recall(table, "ada", query, embedder.encode([query])[0], k=1, now=NOW, index=rebuilt)
        assert found[0].source_episode_ids == ["a9"]
    finally:
        hot.close()


def test_the_budget_evicts_the_least_recently_used_being(published):
    table = open_memories(published.lance_path)
    hot = HotIndexes(published.lance_path, max_rows=len(ADA) + 1)
    try:
        hot.get(table, "ada")
        hot.wait("ada")
        assert hot.get(table, "ada") is not None
        hot.get(table, "bram")
        hot.wait("bram")
        assert hot.get(table, "bram") is not None and hot.rows == len(BRAM)
        assert hot.get(table, "ada") is None  # evicted for bram; rebuilt in the background
        hot.wait("ada")
        # a being larger than the whole budget is served from LanceDB, and not rebuilt on every request
        small = HotIndexes(published.lance_path, max_rows=len(ADA) - 1)
        assert small.get(table, "ada") is None
        small.wait("ada")
        assert small.get(table, "ada") is None and small.rows == 0
        assert "ada" not in small._building
        small.close()
        assert HotIndexes(published.lance_path, max_rows=0).get(table, "ada") is None
    finally:
        hot.close()


def test_a_hostile_being_id_reaches_no_index(published):
    table = open_memories(published.lance_path)
    hot = HotIndexes(published.lance_path, max_rows=1_000)
    try:
        for hostile in ["ada' OR '1'='1", "ada/../bram", ""]:
            with pytest.raises(MindflowError):
                hot.get(table, hostile)
        assert hot.rows == 0 and not hot._building
    finally:
        hot.close()


def test_the_index_of_a_being_without_memories_answers_nothing(published, embedder):
    table = open_memories(published.lance_path)
    hot = HotIndexes(published.lance_path, max_rows=1_000)
    try:
        hot.get(table, "nobody")
        assert hot.wait("nobody")
        index = hot.get(table, "nobody")
        assert index is not None and len(index) == 0  # built, and held: no rebuild per request
        assert hot.get(table, "nobody") is index
        assert index.dim == table.schema.field("vector").type.list_size
        keep = index.mask()
        positions, cosine = index.nearest(embedder.encode(["violin"])[0], keep, 10)
        assert len(positions) == len(cosine) == 0
        rows = index.rows_at(positions, [*COLUMNS, "vector"])
        assert rows.num_rows == 0 and rows.schema.field("vector").type == table.schema.field("vector").type
        assert index.around([(NOW - timedelta(days=90), NOW)], keep, 10, ["m-unknown"]).size == 0
        for ask in ("violin lessons", "the CSV importer", "x"):
            assert recall(table, "nobody", ask, embedder.encode([ask])[0], k=5, now=NOW, index=index) == []
        # through the service, as the server answers it: recall and resonance, cold and hot
        service = RecallService(published, RecallConfig.for_model("all-MiniLM-L6-v2"))
        try:
            for _ in range(3):
                assert service.recall("nobody", models.RecallRequest(query="violin")).memories == []
                assert service.resonance("nobody", models.ResonanceRequest(query="violin")).items == []
                assert service.hot.wait("nobody")
        finally:
            service.hot.close()
    finally:
        hot.close()


def test_the_service_answers_the_same_from_its_index(published, embedder):
    service = RecallService(published, RecallConfig.for_model("all-MiniLM-L6-v2"))
    try:
        asks = [
            models.RecallRequest(query="which database for the reports?", k=3),
            models.RecallRequest(query="deploy window", k=5, exclude_refs=[]),
            models.RecallRequest(
                query="CSV importer bug",
                k=5,
                since=datetime(2026, 11, 1, tzinfo=UTC),
                until=NOW.replace(tzinfo=UTC),
            ),
        ]
        cold = [service.recall("ada", a) for a in asks]
        assert service.hot.wait("ada")
        table = open_memories(published.lance_path)
        assert service.hot.get(table, "ada") is not None
        warm = [service.recall("ada", a) for a in asks]
        for before, after in zip(cold, warm, strict=True):
            assert [m.memory_ref for m in after.memories] == [m.memory_ref for m in before.memories]
            assert [m.score for m in after.memories] == pytest.approx(
                [m.score for m in before.memories], rel=1e-5
            )
        assert cold[0].memories and cold[0].memories[0].source_episode_ids == ["a3"]
        assert all(m.ts >= datetime(2026, 11, 1) for m in cold[2].memories)
        # the exclusions of a request reach the index path too
        first = warm[1].memories[0].memory_ref
        again = service.recall("ada", models.RecallRequest(query="deploy window", k=5, exclude_refs=[first]))
        assert first not in [m.memory_ref for m in again.memories]
    finally:
        service.hot.close()


def _synthetic_index(n: int, dim: int = 384, seed: int = 3) -> tuple[BeingIndex, np.ndarray]:
    """n memories whose vectors cluster like sentence embeddings do (a shared direction plus topics)."""
    rows, vectors = _synthetic_rows(n, dim, seed)
    return BeingIndex("ada", 1, rows), vectors


def _synthetic_rows(n: int, dim: int = 384, seed: int = 3) -> tuple[pa.Table, np.ndarray]:
    rng = np.random.default_rng(seed)
    topics = rng.normal(size=(50, dim))
    vectors = 0.6 * topics[rng.integers(0, 50, n)] + rng.normal(size=(n, dim)) + 2.0 * rng.normal(size=dim)
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    ts = np.datetime64("2026-01-01T00:00:00", "us") + np.arange(n).astype("timedelta64[m]")
    rows = pa.table(
        {
            **{c: pa.nulls(n, pa.string()) for c in COLUMNS},
            "memory_ref": [f"m{i:06d}" for i in range(n)],
            "being_id": ["ada"] * n,
            "ts": pa.array(ts, pa.timestamp("us")),
            "themes": pa.nulls(n, pa.list_(pa.string())),
            "when_dates": pa.nulls(n, pa.list_(pa.string())),
            "source_episode_ids": pa.nulls(n, pa.list_(pa.string())),
            "importance": pa.nulls(n, pa.float32()),
            "decay_score": pa.nulls(n, pa.float32()),
            "pinned": pa.nulls(n, pa.bool_()),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), dim),
        }
    )
    return rows, vectors


def test_the_int8_scan_returns_the_exact_nearest(embedder):
    index, vectors = _synthetic_index(INT8_SCAN_FROM + 5_000)
    assert index.scan is not None
    rng = np.random.default_rng(11)
    keep = np.ones(len(index), dtype=bool)
    horizon = index.mask(since=datetime(2026, 1, 10), until=datetime(2026, 1, 20))
    assert 0 < horizon.sum() < len(index)
    for probe in range(40):
        q = vectors[rng.integers(len(vectors))] + 0.3 * rng.normal(size=vectors.shape[1]).astype(np.float32)
        for visible, limit in ((keep, 30), (keep, 100), (horizon, 30)):
            positions, cosine = index.nearest(q, visible, limit)
            exact = (vectors @ (q / np.linalg.norm(q))).astype(np.float64)
            exact[~visible] = -np.inf
            expected = np.argsort(-exact, kind="stable")[:limit]
            assert list(positions) == list(expected), probe
            assert cosine == pytest.approx(exact[expected], abs=1e-5)
            # Scanned beforehand (as the server does before a recall's ranking turn): the same.
            scanned = index.scanned(q, visible, limit)
            assert scanned is not None and len(scanned) == max(hot.COARSE, 8 * limit)
            again, _ = index.nearest(q, visible, limit, scanned)
            assert list(again) == list(positions)
    # a small index scans float32 directly and agrees too
    small, small_vectors = _synthetic_index(500)
    assert small.scan is None and small.scanned(small_vectors[7], np.ones(500, dtype=bool), 5) is None
    positions, _ = small.nearest(small_vectors[7], np.ones(500, dtype=bool), 5)
    assert positions[0] == 7


@pytest.mark.parametrize("small", [0, 5_000])
def test_the_server_says_which_path_answered(published, small):
    """Past `api_hot_index_small` memories (0: every being), a being's first recall after a publish
    is answered from LanceDB while its index is built; a small being's waits for the index, so
    even the first answer comes from it."""
    import httpx

    from mindflow.api import create_app
    from mindflow.api.server import BackgroundServer

    app = create_app(published.model_copy(update={"api_hot_index_small": small}))
    with BackgroundServer(app) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        body = {"query": "which database for the reports?", "k": 3}
        cold = http.post("/v1/beings/ada/recall", json=body)
        assert cold.status_code == 200 and cold.headers["x-mindflow-recall"] == ("hot" if small else "lance")
        assert app.state.service.hot.wait("ada")
        warm = http.post("/v1/beings/ada/recall", json=body)
        assert warm.status_code == 200 and warm.headers["x-mindflow-recall"] == "hot"
        name, _, duration = warm.headers["server-timing"].partition(";dur=")
        assert name == "recall" and 0 < float(duration) < 30_000
        assert [m["memory_ref"] for m in warm.json()["memories"]] == [
            m["memory_ref"] for m in cold.json()["memories"]
        ]
        assert warm.json()["memories"][0]["source_episode_ids"] == ["a3"]


def test_a_failed_build_is_not_retried_until_the_table_moves_on(published, embedder, monkeypatch):
    from mindflow.recall import hot as hot_module

    table = open_memories(published.lance_path)
    hot = HotIndexes(published.lance_path, max_rows=1_000)
    calls = []

    def broken(*args, **kwargs):
        calls.append(args)
        raise OSError("disk read failed")

    try:
        with monkeypatch.context() as patch:
            patch.setattr(hot_module.lance, "snapshot", broken)
            assert hot.get(table, "ada") is None
            assert hot.wait("ada")
            for _ in range(3):  # answered from LanceDB, without a rebuild per request
                assert hot.get(table, "ada") is None
                assert hot.wait("ada")
            assert len(calls) == 1
        _write(published.inbox, "ada", [("a9", "Fed the sourdough starter and baked a rye loaf.", 45)])
        _pipeline(published, embedder, ["ada"])
        assert hot.get(table, "ada") is None  # a new version: built again, and it works now
        assert hot.wait("ada")
        assert hot.get(table, "ada") is not None
    finally:
        hot.close()


def test_the_latest_table_is_read_again_only_when_its_versions_folder_changes(tmp_path, monkeypatch):
    import os
    import time

    import lancedb

    table = lancedb.connect(str(tmp_path)).create_table("memories", pa.table({"x": [1]}))
    latest = lance.LatestTable(tmp_path, "memories")
    opened = []
    real_open = lance.open_table
    monkeypatch.setattr(lance, "open_table", lambda db, name: opened.append(name) or real_open(db, name))
    _, first = latest.get()
    assert first == table.version
    latest.get()
    assert len(opened) == 2  # a folder changed within SETTLE_NS is not trusted: read again
    versions = tmp_path / "memories.lance" / "_versions"
    settled = time.time() - 10
    os.utime(versions, (settled, settled))
    for _ in range(3):
        assert latest.get()[1] == first
    assert len(opened) == 3  # read once more, then trusted while the folder stays as it was
    table.add(pa.table({"x": [2]}))
    found, second = latest.get()
    assert second == first + 1 and found.count_rows() == 2
    assert len(opened) == 4


class _SlowScans:
    """An Int8Scan's session that records each scan's number of queries and takes 20 ms more, so
    the queries of other threads come while it runs."""

    def __init__(self, session, fail: bool = False):
        self.session = session
        self.fail = fail
        self.batches: list[int] = []

    def run(self, names, feed):
        self.batches.append(len(feed["query"]))
        time.sleep(0.02)
        if self.fail:
            raise RuntimeError("the scan failed")
        return self.session.run(names, feed)


def test_queries_scanned_at_once_share_scans_and_each_gets_its_own_scores():
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((30_000, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    scan = hot.Int8Scan.build(hot.scan_codes(vectors))
    queries = list(vectors[:40] + 0.1 * rng.standard_normal((40, 384)).astype(np.float32))
    alone = [scan.scores(q) for q in queries]
    scan.session = slow = _SlowScans(scan.session)
    with ThreadPoolExecutor(8) as threads:
        together = list(threads.map(scan.scores, queries))
    assert all(np.array_equal(a, b) for a, b in zip(alone, together, strict=True))
    assert sum(slow.batches) == len(queries) and max(slow.batches) <= hot.SCAN_BATCH
    assert len(slow.batches) < len(queries)  # some scans were shared
    # A failed scan fails each query it held, and the next scan runs as before.
    scan.session = _SlowScans(slow.session, fail=True)
    with ThreadPoolExecutor(4) as threads:
        failed = [threads.submit(scan.scores, q) for q in queries[:4]]
        assert all(isinstance(f.exception(), RuntimeError) for f in failed)
    scan.session = slow.session
    assert np.array_equal(scan.scores(queries[0]), alone[0])


def test_the_scan_codes_are_written_with_the_files_and_mapped(tmp_path):
    """The int8 codes are computed where the index is built and mapped from its files: a process
    mapping them scans exactly as one holding the index in memory, and quantises nothing."""
    from mindflow.recall.hot_files import HotFiles

    rows, vectors = _synthetic_rows(INT8_SCAN_FROM + 5_000)
    arrays = hot.index_arrays(rows)
    # The codes of one scale for every vector, a row per dimension, as a whole-matrix
    # quantisation gives them (computed by blocks).
    scale = 127.0 / float(np.abs(arrays.vectors).max())
    whole = np.clip(np.rint(arrays.vectors * scale), -127, 127).astype(np.int8).T
    assert arrays.codes.shape == (vectors.shape[1], len(vectors)) and np.array_equal(arrays.codes, whole)
    files = HotFiles(tmp_path)
    files.write("ada", 1, 7, arrays)
    mapped = files.open("ada", 1, 7)
    assert isinstance(mapped.codes, np.memmap) and np.array_equal(mapped.codes, whole)
    in_memory = BeingIndex.of_arrays("ada", 1, arrays)
    from_files = BeingIndex.of_arrays("ada", 1, mapped)
    keep = np.ones(len(in_memory), dtype=bool)
    rng = np.random.default_rng(2)
    for i in rng.integers(0, len(vectors), 10):
        q = vectors[i] + 0.3 * rng.normal(size=vectors.shape[1]).astype(np.float32)
        assert np.array_equal(from_files.scan.scores(q), in_memory.scan.scores(q))
        want, got = in_memory.nearest(q, keep, 30), from_files.nearest(q, keep, 30)
        assert np.array_equal(want[0], got[0]) and np.array_equal(want[1], got[1])
    # Codes of another length than the rows (a file from elsewhere): the folder is rebuilt.
    folder = files.folder("ada", 1, 7)
    np.save(folder / "codes.npy", whole[:, :-1])
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"]["codes.npy"] = (folder / "codes.npy").stat().st_size
    (folder / "manifest.json").write_text(json.dumps(manifest))
    assert files.open("ada", 1, 7) is None and not folder.exists()
    # A small index has no codes, and no scan: nearest compares its float32 vectors.
    small = hot.index_arrays(_synthetic_rows(1_000)[0])
    assert small.codes.shape == (vectors.shape[1], 0) and BeingIndex.of_arrays("ada", 1, small).scan is None


def test_queries_known_ahead_share_one_scan_and_rank_as_alone():
    index, vectors = _synthetic_index(INT8_SCAN_FROM + 5_000)
    rng = np.random.default_rng(5)
    queries = [vectors[i] + 0.3 * rng.normal(size=vectors.shape[1]).astype(np.float32) for i in (1, 2, 3)]
    keep = np.ones(len(index), dtype=bool)
    horizon = index.mask(since=datetime(2026, 1, 10), until=datetime(2026, 1, 20))
    alone = [index.nearest(q, visible, 30) for q, visible in zip(queries, (keep, horizon, keep), strict=True)]

    index.scan.session = slow = _SlowScans(index.scan.session)
    # The same query twice: one scan row serves the first, the second scans alone.
    with index.scans_shared([*queries, queries[0]]):
        assert slow.batches == [3]  # one scan for the three distinct queries
        shared = [
            index.nearest(q, visible, 30) for q, visible in zip(queries, (keep, horizon, keep), strict=True)
        ]
        assert slow.batches == [3]  # each read its scores from it
        again = index.nearest(queries[0], keep, 30)
        assert slow.batches == [3, 1]
    for (positions, cosine), (want, want_cosine) in zip([*shared, again], [*alone, alone[0]], strict=True):
        assert list(positions) == list(want) and np.array_equal(cosine, want_cosine)
    # What no recall read is dropped on leaving: a later scan of that query runs.
    with index.scans_shared(queries[:2]):
        pass
    assert slow.batches == [3, 1, 2] and not index.scan._ahead
    index.nearest(queries[0], keep, 30)
    assert slow.batches == [3, 1, 2, 1]
    # A lone query or an index without an int8 scan has nothing to share.
    with index.scans_shared(queries[:1]):
        assert slow.batches == [3, 1, 2, 1]
    small, small_vectors = _synthetic_index(500)
    with small.scans_shared([small_vectors[1], small_vectors[2]]):
        assert small.nearest(small_vectors[1], np.ones(500, dtype=bool), 1)[0][0] == 1
