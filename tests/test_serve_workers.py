"""`mindflow serve --workers 2`: several processes answer recall as one, from one copy of the hot index.

A real `mindflow serve` on 127.0.0.1 over a published world (DuckDB, LanceDB, the model). The
workers must answer exactly what the single-process path answers, map the same index files
(not private copies), ignore what a killed writer left behind, and see new writes.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest
import test_recall_hot
from test_recall import _write
from test_recall_hot import _pipeline

from mindflow.api import models
from mindflow.api.service import RecallService
from mindflow.recall import HotIndexes, RecallConfig, open_memories
from mindflow.recall.hot_files import HotFiles

MINDFLOW = Path(sys.executable).with_name("mindflow")
published = test_recall_hot.published  # the same fixture: ada and bram ingested, patrolled, published
QUERIES = ["which database for the reports?", "deploy window", "CSV importer bug", "running with the cat"]


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except FileNotFoundError:  # a thread that ended since the listing
            continue
    return out


def _mapped(pid: int, name: str) -> set[str]:
    """The `device inode` of each file called `name` that process `pid` maps (none once it exited)."""
    found = set()
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except (FileNotFoundError, ProcessLookupError):  # exited since it was listed
        return found
    for line in maps.splitlines():
        fields = line.split()
        if len(fields) >= 6 and fields[5].endswith(f"/{name}"):
            found.add(f"{fields[3]} {fields[4]}")
    return found


class Served:
    """`mindflow serve --workers N` as a subprocess on a free loopback port."""

    def __init__(self, settings, workers: int):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "MINDFLOW_HOME": str(settings.resolved_home), "HF_HUB_OFFLINE": "1"}
        env.pop("MINDFLOW_API_TOKENS", None)
        self.process = subprocess.Popen(
            [
                str(MINDFLOW),
                "serve",
                "--port",
                str(self.port),
                "--log-level",
                "warning",
                "--workers",
                str(workers),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 120
        while True:
            try:
                if (
                    httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200
                    and len(self.workers()) == workers
                ):
                    break
            except httpx.TransportError:
                pass
            if self.process.poll() is not None:
                raise RuntimeError(f"mindflow serve exited: {self.process.stderr.read()[-3000:]}")
            assert time.monotonic() < deadline, "mindflow serve did not start in 120 s"
            time.sleep(0.2)

    def workers(self) -> list[int]:
        """The worker processes (uvicorn's supervisor also starts a resource tracker: no app)."""
        return [
            p
            for p in _children(self.process.pid)
            if "multiprocessing.spawn" in Path(f"/proc/{p}/cmdline").read_text()
        ]

    def recall(self, being: str, query: str, k: int = 5) -> tuple[list[str], str]:
        """The refs a recall returns and where they came from, over a new connection each time
        (connections are what the workers share out)."""
        with httpx.Client(base_url=self.url, timeout=60) as client:
            answer = client.post(f"/v1/beings/{being}/recall", json={"query": query, "k": k})
        answer.raise_for_status()
        return [m["memory_ref"] for m in answer.json()["memories"]], answer.headers["x-mindflow-recall"]

    def until_every_worker_maps(self, being: str, timeout: float = 90.0) -> list[int]:
        """Recall until each worker maps the being's index files; returns the workers."""
        deadline = time.monotonic() + timeout
        while True:
            workers = self.workers()
            if all(_mapped(p, "vectors.npy") for p in workers):
                return workers
            assert time.monotonic() < deadline, "not every worker mapped the hot index"
            self.recall(being, QUERIES[0])
            time.sleep(0.05)

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def two_workers(published):
    server = Served(published, workers=2)
    try:
        yield published, server
    finally:
        server.close()


def _expected(settings, being: str, queries: list[str]) -> list[list[str]]:
    """The refs the single-process path answers (RecallService in this process, from LanceDB)."""
    service = RecallService(settings, RecallConfig.for_model(settings.embedding_model))
    try:
        return [
            [m.memory_ref for m in service.recall(being, models.RecallRequest(query=q, k=5)).memories]
            for q in queries
        ]
    finally:
        service.hot.close()


def test_two_workers_answer_as_one_process_from_one_shared_copy_of_the_index(two_workers):
    settings, server = two_workers
    expected = _expected(settings, "ada", QUERIES)
    workers = server.until_every_worker_maps("ada")
    assert len(workers) == 2
    # Both map the very same file (device and inode), written once: no private copy.
    shared = [_mapped(p, "vectors.npy") for p in workers]
    assert shared[0] == shared[1] and len(shared[0]) == 1
    folders = list((settings.hot_index / "ada").iterdir())
    assert len(folders) == 1 and (folders[0] / "manifest.json").is_file()
    for _ in range(3):  # new connections: each worker answers some of them
        for query, refs in zip(QUERIES, expected, strict=True):
            got, source = server.recall("ada", query)
            assert got == refs
            assert source == "hot"


def test_a_publish_and_a_posted_episode_reach_every_worker(two_workers, embedder):
    settings, server = two_workers
    server.until_every_worker_maps("ada")
    posted = httpx.post(
        f"{server.url}/v1/beings/ada/episodes",
        json={"episodes": [{"id": "kayak", "ts": "2026-11-20T18:00:00Z", "text": "Ada bought a red kayak."}]},
        timeout=60,
    )
    assert posted.status_code in (200, 201, 202), posted.text
    # The worker that took the post recalls it at once; the others find the inbox file within
    # a second or so: soon every answer, whichever worker gives it, holds the episode.
    deadline, streak = time.monotonic() + 10, 0
    while streak < 8:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            found = client.post("/v1/beings/ada/recall", json={"query": "red kayak", "k": 3}).json()[
                "memories"
            ]
        streak = streak + 1 if any(m["source_episode_ids"] == ["kayak"] for m in found) else 0
        assert time.monotonic() < deadline, "not every worker recalled the posted episode in 10 s"
    # A publish: every worker answers from the new version (and maps its new files).
    before = open_memories(settings.lance_path).version
    _write(settings.inbox, "ada", [("a9", "Fed the sourdough starter and baked a rye loaf.", 45)])
    _pipeline(settings, embedder, ["ada"])
    assert open_memories(settings.lance_path).version > before
    for _ in range(8):
        with httpx.Client(base_url=server.url, timeout=60) as client:
            found = client.post("/v1/beings/ada/recall", json={"query": "sourdough rye loaf", "k": 3}).json()
        assert found["memories"][0]["source_episode_ids"] == ["a9"]
    deadline = time.monotonic() + 90
    version = open_memories(settings.lance_path).version
    while not all(
        any(f"/v{version}-" in line for line in Path(f"/proc/{p}/maps").read_text().splitlines())
        for p in server.workers()
    ):
        assert time.monotonic() < deadline, "a worker did not map the index of the new version"
        server.recall("ada", "sourdough")
        time.sleep(0.05)


def test_what_a_killed_writer_left_is_ignored_and_rebuilt(published):
    table = open_memories(published.lance_path)
    files = HotFiles(published.hot_index)
    first = HotIndexes(published.lance_path, 1_000, files)
    try:
        first.get(table, "ada")
        assert first.wait("ada")
        good = first.get(table, "ada")
        assert good is not None and isinstance(good.vectors, np.memmap)
        expected = good.nearest(good.vectors[3], np.ones(len(good), bool), 5)
    finally:
        first.close()
    (folder,) = (published.hot_index / "ada").iterdir()
    # A writer killed mid-write: a half-written partial folder, never renamed into place ...
    partial = folder.with_name(".partial-999999-0123")
    partial.mkdir()
    (partial / "vectors.npy").write_bytes(b"\x93NUMPY half")
    # ... and the final folder losing the tail of a file (a crash before the data hit the disk).
    vectors = folder / "vectors.npy"
    with vectors.open("r+b") as f:
        f.truncate(vectors.stat().st_size // 2)
    second = HotIndexes(published.lance_path, 1_000, files)
    try:
        second.get(table, "ada")
        assert second.wait("ada")
        rebuilt = second.get(table, "ada")
        assert rebuilt is not None
        assert [p.name for p in (published.hot_index / "ada").iterdir()] == [folder.name]
        assert vectors.stat().st_size == len(rebuilt) * rebuilt.dim * 4 + 128
        got = rebuilt.nearest(rebuilt.vectors[3], np.ones(len(rebuilt), bool), 5)
        assert np.array_equal(got[0], expected[0]) and np.allclose(got[1], expected[1])
    finally:
        second.close()
    # A server started over the damaged files answers as the single-process path does.
    with vectors.open("r+b") as f:
        f.truncate(100)
    expected_refs = _expected(published, "ada", QUERIES[:2])
    server = Served(published, workers=2)
    try:
        server.until_every_worker_maps("ada")
        assert [server.recall("ada", q)[0] for q in QUERIES[:2]] == expected_refs
    finally:
        server.close()


def test_a_small_being_is_built_here_and_waited_for_a_larger_one_elsewhere_meanwhile(published, monkeypatch):
    """A being of at most `small` memories has its index files written by this process and its
    recall waits for them (its first answer comes from the index, not LanceDB); a larger one's
    are written by a process of their own while its first recall reads LanceDB."""
    from mindflow import spawned

    table = open_memories(published.lance_path)
    rows = len(test_recall_hot.ADA)
    elsewhere = []
    real = spawned.call
    monkeypatch.setattr(spawned, "call", lambda fn, *args: elsewhere.append(fn.__name__) or real(fn, *args))
    small = HotIndexes(published.lance_path, 1_000, HotFiles(published.hot_index), small=rows)
    try:
        index = small.get(table, "ada")
        assert index is not None and len(index) == rows and isinstance(index.vectors, np.memmap)
        assert elsewhere == []
    finally:
        small.close()
    for folder in (published.hot_index / "ada").iterdir():  # a new server's first build
        for f in folder.iterdir():
            f.unlink()
        folder.rmdir()
    large = HotIndexes(published.lance_path, 1_000, HotFiles(published.hot_index), small=rows - 1)
    try:
        assert large.get(table, "ada") is None
        assert large.wait("ada")
        assert len(large.get(table, "ada")) == rows
        assert elsewhere == ["write_index"]
    finally:
        large.close()


def test_a_being_over_the_budget_gets_no_files_and_reads_lancedb(published):
    table = open_memories(published.lance_path)
    rows = len(test_recall_hot.ADA)
    hot = HotIndexes(published.lance_path, rows - 1, HotFiles(published.hot_index))
    try:
        assert hot.get(table, "ada") is None
        assert hot.wait("ada")
        assert hot.get(table, "ada") is None  # served from LanceDB, not rebuilt on every request
        assert not (published.hot_index / "ada").exists() or not list((published.hot_index / "ada").iterdir())
    finally:
        hot.close()
    roomy = HotIndexes(published.lance_path, rows, HotFiles(published.hot_index))
    try:
        roomy.get(table, "ada")
        assert roomy.wait("ada")
        assert len(roomy.get(table, "ada")) == rows
    finally:
        roomy.close()


def test_concurrent_recalls_wait_their_turn_and_answer_as_one_at_a_time(two_workers):
    # Each worker ranks one recall at a time (MINDFLOW_API_RECALL_THREADS=1): eight clients at
    # once get what one client alone gets, and resonance, which ranks several queries in a row,
    # takes its turns without holding one inside another.
    settings, server = two_workers
    expected = _expected(settings, "ada", QUERIES)
    server.until_every_worker_maps("ada")
    jobs = list(zip(QUERIES, expected, strict=True)) * 6

    def resonate(query: str) -> int:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            answer = client.post("/v1/beings/ada/resonance", json={"query": query})
        answer.raise_for_status()
        return len(answer.json()["items"])

    with ThreadPoolExecutor(8) as pool:
        resonances = [pool.submit(resonate, q) for q in QUERIES]
        got = list(pool.map(lambda job: server.recall("ada", job[0])[0], jobs))
        assert all(r.result(timeout=120) >= 0 for r in resonances)
    assert got == [refs for _, refs in jobs]
