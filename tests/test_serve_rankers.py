"""`mindflow serve --rankers 2`: ranking processes answer hot-index recalls for the server.

A real `mindflow serve` on 127.0.0.1 over a published world (DuckDB, LanceDB, the model), its
recalls handed to two ranking processes that map the same index files. They must answer
exactly what the single-process path answers, under concurrent clients too, and a ranker
killed with SIGKILL must cost no answer: the server ranks until its pool is back.
"""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import test_recall_hot
from test_serve_workers import QUERIES, Served, _children, _expected, _mapped

from mindflow.api import models
from mindflow.api.service import RecallService
from mindflow.recall import RecallConfig

published = test_recall_hot.published  # the same fixture: ada and bram ingested, patrolled, published


class WithRankers(Served):
    """One server process and its ranking processes."""

    def workers(self) -> list[int]:
        return [self.process.pid]  # uvicorn in the process itself

    def ready(self) -> dict:
        return httpx.get(f"{self.url}/readyz", timeout=10).json()

    def rankers(self) -> list[int]:
        """The spawned children: the rankers (and, while it writes a new index, its writer)."""
        return [p for p in _children(self.process.pid) if _spawned_alive(p)]


@pytest.fixture
def with_rankers(published, monkeypatch, request):
    # Settings of a test's own, by indirect parametrisation: {variable: value}.
    for name, value in getattr(request, "param", {}).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MINDFLOW_API_RANKERS", "2")
    # What the rankers answer is tested here: every recall goes to them, a lone one too.
    monkeypatch.setenv("MINDFLOW_API_LONE_RECALLS_HERE", "false")
    server = WithRankers(published, workers=1)
    try:
        yield published, server
    finally:
        server.close()


def _until_ranked(server: WithRankers, being: str, timeout: float = 90.0) -> list[int]:
    """Recall until a ranking process maps the being's index files (it ranks from them)."""
    deadline = time.monotonic() + timeout
    while True:
        mapping = [p for p in server.rankers() if _mapped(p, "vectors.npy")]
        if mapping:
            return mapping
        assert time.monotonic() < deadline, "no ranking process mapped the hot index"
        server.recall(being, QUERIES[0])
        time.sleep(0.05)


class _Recorded:
    """Stands in for the server's rankers: records what the service asks of them, and answers
    nothing (so the service ranks every recall itself, as when no ranker is alive)."""

    def __init__(self):
        self.noticed: list[tuple[str, int]] = []
        self.ranked: list[str] = []

    def notice(self, being_id: str, version: int) -> None:
        self.noticed.append((being_id, version))

    def rank(self, being_id: str, version: int, query: str, **kwargs):
        self.ranked.append(query)
        return None


@pytest.mark.parametrize("lone_here", [True, False])
def test_a_lone_recall_is_ranked_by_the_worker_the_others_by_the_rankers(published, lone_here):
    """A recall that comes while no other runs in the worker (and none came among others just
    before) is ranked there, and the rankers are told of its index; one that comes while another
    runs goes to a ranker. With MINDFLOW_API_LONE_RECALLS_HERE=false every recall goes to a ranker."""
    # The first recall is answered without an index (the being counts as large), as it was built.
    settings = published.model_copy(update={"api_lone_recalls_here": lone_here, "api_hot_index_small": 0})
    service = RecallService(settings, RecallConfig.for_model("all-MiniLM-L6-v2"))
    recorded = service.rankers = _Recorded()
    try:
        expected = [
            m.memory_ref for m in service.recall("ada", models.RecallRequest(query=QUERIES[0])).memories
        ]
        assert service.hot.wait("ada")
        _, version = service.latest.get()
        alone = service.recall("ada", models.RecallRequest(query=QUERIES[0]))
        assert [m.memory_ref for m in alone.memories] == expected
        if lone_here:
            assert recorded.ranked == [] and recorded.noticed[-1] == ("ada", version)
        else:
            assert recorded.ranked == [QUERIES[0]]
        with service.in_flight.one():  # another recall is running
            among = service.recall("ada", models.RecallRequest(query=QUERIES[1]))
        assert recorded.ranked[-1] == QUERIES[1] and among.memories
        # One that comes alone right after a recall came among others still goes to a ranker;
        # once none has come among others for `quiet` seconds, a lone one is ranked here again.
        service.in_flight.quiet = 2.0
        service.recall("ada", models.RecallRequest(query=QUERIES[2]))
        assert recorded.ranked[-1] == QUERIES[2]
        time.sleep(2.1)
        service.recall("ada", models.RecallRequest(query=QUERIES[3]))
        assert (recorded.ranked[-1] == QUERIES[3]) is not lone_here
    finally:
        service.hot.close()


def test_serve_starts_one_ranker_per_cpu_by_default(published, monkeypatch):
    """Unset, `mindflow serve` with one worker starts one ranker per CPU it may use (none on one
    CPU), and they answer what one process answers."""
    monkeypatch.delenv("MINDFLOW_API_RANKERS", raising=False)
    expected = _expected(published, "ada", QUERIES)
    server = WithRankers(published, workers=1)
    cpus = len(os.sched_getaffinity(0))
    try:
        assert len(server.rankers()) == server.ready()["rankers"] == (cpus if cpus > 1 else 0)
        if cpus > 1:
            _until_ranked(server, "ada")
        for query, refs in zip(QUERIES, expected, strict=True):
            assert server.recall("ada", query) == (refs, "hot")
    finally:
        server.close()


def test_rankers_answer_what_one_process_answers_under_concurrent_clients(with_rankers):
    settings, server = with_rankers
    expected = _expected(settings, "ada", QUERIES)
    _until_ranked(server, "ada")
    assert len(server.rankers()) == 2
    with ThreadPoolExecutor(8) as clients:
        answers = list(clients.map(lambda q: server.recall("ada", q), QUERIES * 10))
    assert [refs for refs, _ in answers] == expected * 10
    assert {source for _, source in answers} == {"hot"}
    # Both rankers map the one copy the server wrote (device and inode): no private copies.
    mapped = {m for p in server.rankers() for m in _mapped(p, "vectors.npy")}
    assert mapped == _mapped(server.process.pid, "vectors.npy") and len(mapped) == 1


def test_a_fresh_memory_is_ranked_by_a_ranker_as_one_process_ranks_it(with_rankers):
    """An episode posted to the server is recalled at once from its fresh tail, ranked by a ranker
    (which counts the fresh texts' words itself) with the published memories, as one process does."""
    from mindflow.api import models
    from mindflow.api.service import RecallService
    from mindflow.recall import RecallConfig

    settings, server = with_rankers
    _until_ranked(server, "ada")
    episode = {"ts": "2026-10-20T18:00:00Z", "text": "Lena bought a red kayak and paddled across the lake."}
    posted = httpx.post(f"{server.url}/v1/beings/ada/episodes", json={"episodes": [episode]}, timeout=30)
    assert posted.status_code == 200, posted.text
    query = {"query": "red kayak on the lake", "k": 5}
    answer = httpx.post(f"{server.url}/v1/beings/ada/recall", json=query, timeout=30)
    assert answer.status_code == 200 and answer.headers["x-mindflow-recall"] == "hot"
    memories = answer.json()["memories"]
    assert memories[0]["fresh"] and "red kayak" in memories[0]["text"]
    service = RecallService(settings, RecallConfig.for_model(settings.embedding_model))
    try:
        alone = service.recall("ada", models.RecallRequest(**query)).memories
    finally:
        service.hot.close()
    assert [m["memory_ref"] for m in memories] == [m.memory_ref for m in alone]
    assert [m["score"] for m in memories] == pytest.approx([m.score for m in alone], rel=1e-4)
    assert [m["parts"]["bm25"] for m in memories] == pytest.approx([m.parts["bm25"] for m in alone], rel=1e-4)


def test_every_ranker_maps_a_new_index_without_a_recall_of_its_own(with_rankers):
    """A lone client's recalls all go to the ranker used last; the other is told of the index at
    the first hot recall and maps it then, not under the load that would first reach it."""
    _, server = with_rankers
    deadline = time.monotonic() + 90
    while server.recall("ada", QUERIES[0])[1] != "hot":
        assert time.monotonic() < deadline, "the server never answered from its hot index"
        time.sleep(0.05)
    deadline = time.monotonic() + 60
    while not all(_mapped(p, "vectors.npy") for p in server.rankers()):
        assert time.monotonic() < deadline, "a ranking process did not map the index it was told of"
        time.sleep(0.1)
    assert len(server.rankers()) == 2


def _until_replaced(server: WithRankers, killed: int, timeout: float = 90.0) -> None:
    """Recall until the killed ranker is replaced: a recall finds it dead (its zombie is no
    ranker any more, but the server counts it alive until then) and its replacement starts.

    The same two processes must be seen on both sides of a recall: `rankers()` also lists an
    index writer while it runs, so one listing can show two processes that are not two rankers.
    (A run of `make test` on 2026-11-27 saw two here, then one alone for 60 s; the cause was not
    established.)"""
    deadline = time.monotonic() + timeout
    before: list[int] = []
    while True:
        server.recall("ada", QUERIES[0])
        now = sorted(server.rankers())  # listed by thread, in no fixed order
        if len(now) == 2 and killed not in now and now == before and server.ready()["rankers"] == 2:
            return
        assert time.monotonic() < deadline, "the killed ranking process was not replaced"
        before = now
        time.sleep(0.2)


def _pinned(server: WithRankers) -> list[set[int]]:
    """The CPUs each ranking process may run on, once there are two (the index writer, started at
    the first recall of a new version, exits when its files are written). Recalls go on while
    waiting: a ranker that died unnoticed is found dead by one and replaced."""
    deadline = time.monotonic() + 60
    while len(pids := server.rankers()) != 2:
        assert time.monotonic() < deadline, f"not two ranking processes: {pids}"
        server.recall("ada", QUERIES[0])
        time.sleep(0.1)
    return sorted((os.sched_getaffinity(p) for p in pids), key=min)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU: two rankers are not pinned")
def test_each_ranker_runs_on_a_cpu_of_its_own(with_rankers):
    """With no more rankers than CPUs each is pinned to one of the server's CPUs, in turn; the
    server's own process is not; a replacement takes over the CPU of the ranker it replaces."""
    _, server = with_rankers
    cpus = sorted(os.sched_getaffinity(0))
    _until_ranked(server, "ada")
    assert _pinned(server) == [{cpus[0]}, {cpus[1]}]
    assert os.sched_getaffinity(server.process.pid) == set(cpus)

    killed = next(p for p in server.rankers() if os.sched_getaffinity(p) == {cpus[0]})
    os.kill(killed, signal.SIGKILL)
    _until_replaced(server, killed)
    assert _pinned(server) == [{cpus[0]}, {cpus[1]}]


def test_rankers_left_to_the_scheduler_are_not_pinned(published, monkeypatch):
    monkeypatch.setenv("MINDFLOW_API_RANKERS", "2")
    monkeypatch.setenv("MINDFLOW_API_PIN_RANKERS", "false")
    server = WithRankers(published, workers=1)
    try:
        _until_ranked(server, "ada")
        assert _pinned(server) == [set(os.sched_getaffinity(0))] * 2
    finally:
        server.close()


def test_a_killed_ranker_costs_no_answer(with_rankers):
    settings, server = with_rankers
    expected = _expected(settings, "ada", QUERIES)
    _until_ranked(server, "ada")
    killed = server.rankers()[0]
    os.kill(killed, signal.SIGKILL)
    for _ in range(3):  # the recall that finds it dead is ranked by the server, the others by the rest
        for query, refs in zip(QUERIES, expected, strict=True):
            assert server.recall("ada", query) == (refs, "hot")
    _until_replaced(server, killed)
    _until_ranked(server, "ada")
    for query, refs in zip(QUERIES, expected, strict=True):
        assert server.recall("ada", query) == (refs, "hot")


def _spawned_alive(pid: int) -> bool:
    """A process started by multiprocessing's spawn, still running (a child listed a moment ago
    may have exited since: the index writer ends with its build)."""
    try:
        return "multiprocessing.spawn" in Path(f"/proc/{pid}/cmdline").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_rankers_exit_with_a_killed_server(with_rankers):
    _, server = with_rankers
    _until_ranked(server, "ada")
    rankers = server.rankers()
    assert len(rankers) == 2
    server.process.kill()  # SIGKILL: no shutdown of its own
    server.process.wait(10)
    deadline = time.monotonic() + 20
    while any(_spawned_alive(p) for p in rankers):
        assert time.monotonic() < deadline, "a ranking process outlived its server"
        time.sleep(0.1)


# Every being counted as large: its index files are written by a process of their own (a small
# being's by the server itself).
@pytest.mark.parametrize("with_rankers", [{"MINDFLOW_API_HOT_INDEX_SMALL": "0"}], indirect=True)
def test_a_server_killed_while_its_index_is_written_leaves_no_process(with_rankers):
    """The process writing a being's index files (started at the first recall of a new version)
    finishes and exits when its server is killed meanwhile; a process pool's worker waited forever
    for its next task, an orphan holding its memory."""
    _, server = with_rankers
    rankers = set(server.rankers())
    assert len(rankers) == 2
    server.recall("ada", QUERIES[0])  # answered from LanceDB; the index is written meanwhile
    deadline = time.monotonic() + 60
    while not (writers := set(server.rankers()) - rankers):
        assert time.monotonic() < deadline, "no process was started to write the index"
        time.sleep(0.01)
    server.process.kill()
    server.process.wait(10)
    deadline = time.monotonic() + 60
    while alive := [p for p in rankers | writers if _spawned_alive(p)]:
        assert time.monotonic() < deadline, f"processes outlived their server: {alive}"
        time.sleep(0.1)
