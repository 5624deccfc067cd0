"""The queue of recalls waiting for a ranking process: first come, first served.

The processes themselves are exercised by test_serve_rankers; here the rankers are stand-ins
that are always alive, so the order in which waiting recalls are handed one is what is tested.
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from mindflow.api.rankers import Rankers, _Turn


class _Ranker:
    """Stands in for a ranking process that stays alive."""

    def __init__(self, name: str):
        self.name = name
        self.process = SimpleNamespace(is_alive=lambda: True)

    def stop(self) -> None:
        pass


def _pool(*names: str, batch: int = 1) -> Rankers:
    rankers = Rankers(len(names), batch=batch)
    with rankers._lock:
        for name in names:
            ranker = _Ranker(name)
            rankers._alive.add(ranker)
            rankers._give(ranker)
    return rankers


def _waiting(rankers: Rankers, count: int) -> None:
    deadline = time.monotonic() + 10
    while len(rankers._waiting) < count:
        assert time.monotonic() < deadline, f"{count} recalls never queued"
        time.sleep(0.001)


def _take(rankers: Rankers, name: str = ""):
    """The ranker a recall is handed (None: it ranks itself)."""
    batch = rankers._take(_Turn((name,)))
    return batch.ranker if batch is not None else None


def _take_in_thread(rankers: Rankers, got: dict, key: str) -> threading.Thread:
    thread = threading.Thread(target=lambda: got.__setitem__(key, _take(rankers, key)), daemon=True)
    thread.start()
    return thread


def test_waiting_recalls_are_handed_rankers_in_the_order_they_came():
    rankers = _pool("a")
    busy = _take(rankers)
    assert busy.name == "a" and not rankers._free

    got: dict = {}
    first = _take_in_thread(rankers, got, "first")
    _waiting(rankers, 1)
    second = _take_in_thread(rankers, got, "second")
    _waiting(rankers, 2)

    with rankers._lock:
        rankers._give(busy)  # the ranker comes free: the oldest waiting recall gets it
    first.join(5)
    assert got["first"] is busy
    assert "second" not in got and not rankers._free

    # A recall arriving now does not take the ranker ahead of the one already waiting.
    third = _take_in_thread(rankers, got, "third")
    _waiting(rankers, 2)
    with rankers._lock:
        rankers._give(busy)
    second.join(5)
    assert got["second"] is busy and "third" not in got

    with rankers._lock:
        rankers._give(busy)
    third.join(5)
    assert got["third"] is busy


def test_a_free_ranker_is_taken_at_once_the_last_used_first():
    rankers = _pool("a", "b")
    taken = _take(rankers)
    assert taken.name == "b"  # given last, so taken first: its caches are the warm ones
    with rankers._lock:
        rankers._give(taken)
    assert _take(rankers) is taken
    assert not rankers._waiting


def test_closing_tells_every_waiting_recall_to_rank_it_itself():
    rankers = _pool("a")
    _take(rankers)
    got: dict = {}
    threads = [_take_in_thread(rankers, got, str(i)) for i in range(3)]
    _waiting(rankers, 3)
    rankers.close()
    for thread in threads:
        thread.join(5)
    assert got == {"0": None, "1": None, "2": None}
    assert _take(rankers) is None  # closed: every later recall ranks itself


class _Pipe(_Ranker):
    """A stand-in ranking process that answers each recall sent with its query, upper-cased,
    once the test lets it (`answer`), and fails on a query named "fail"."""

    def __init__(self, name: str):
        super().__init__(name)
        self.sent: list[list[tuple]] = []
        self._answers: list = []
        self._ready = threading.Semaphore(0)

    def send(self, batch: list[tuple]) -> None:
        self.sent.append(batch)
        self._answers.extend(args[2] for args in batch)

    def answer(self, count: int = 1) -> None:
        for _ in range(count):
            self._ready.release()

    def receive(self):
        assert self._ready.acquire(timeout=10), "the test never let the ranker answer"
        query = self._answers.pop(0)
        if query == "fail":
            raise EOFError("the ranking process died")
        return query.upper()


def _rank_in_thread(rankers: Rankers, got: dict, query: str) -> threading.Thread:
    thread = threading.Thread(
        target=lambda: got.__setitem__(query, rankers.rank("ada", 1, query)), daemon=True
    )
    thread.start()
    return thread


def _pipe_pool(batch: int) -> tuple[Rankers, _Pipe]:
    rankers = Rankers(1, batch=batch)
    pipe = _Pipe("a")
    rankers._noticed.add(("ada", 1))  # no notices to send to a stand-in
    with rankers._lock:
        rankers._alive.add(pipe)
        rankers._give(pipe)
    return rankers, pipe


def test_a_ranker_coming_free_takes_the_oldest_waiting_recalls_together_and_each_gets_its_own_answer():
    rankers, pipe = _pipe_pool(batch=3)
    got: dict = {}
    first = _rank_in_thread(rankers, got, "first")  # the ranker is free: sent alone
    deadline = time.monotonic() + 10
    while not pipe.sent:
        assert time.monotonic() < deadline
        time.sleep(0.001)
    later = []
    for count, query in enumerate(["b", "c", "d", "e"], start=1):
        later.append(_rank_in_thread(rankers, got, query))
        _waiting(rankers, count)

    pipe.answer()  # the first recall's answer: the ranker comes free
    first.join(5)
    assert got == {"first": "FIRST"}
    # The three oldest waiting recalls are sent together, in the order they came; "e" waits.
    deadline = time.monotonic() + 10
    while len(pipe.sent) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.001)
    assert [args[2] for args in pipe.sent[1]] == ["b", "c", "d"]
    assert [turn.args[2] for turn in rankers._waiting] == ["e"]

    pipe.answer()  # one answer read: "b" returns while "c" and "d" are still being ranked
    later[0].join(5)
    assert got.get("b") == "B" and "c" not in got and "d" not in got
    pipe.answer(2)
    for thread in later[1:3]:
        thread.join(5)
    assert got["c"] == "C" and got["d"] == "D"
    # The batch's last answer gave the ranker back: the recall left waiting is sent alone.
    pipe.answer()
    later[3].join(5)
    assert got["e"] == "E" and [args[2] for args in pipe.sent[2]] == ["e"]
    assert rankers._free == [pipe]


def test_a_ranker_failing_mid_batch_leaves_its_unanswered_recalls_to_the_server():
    rankers, pipe = _pipe_pool(batch=4)
    replaced: list = []
    rankers._replace = replaced.append  # no real process is started in its place here
    got: dict = {}
    first = _rank_in_thread(rankers, got, "first")
    deadline = time.monotonic() + 10
    while not pipe.sent:
        assert time.monotonic() < deadline
        time.sleep(0.001)
    later = []
    for count, query in enumerate(["b", "fail", "d"], start=1):
        later.append(_rank_in_thread(rankers, got, query))
        _waiting(rankers, count)
    pipe.answer()
    first.join(5)
    pipe.answer(3)
    for thread in later:
        thread.join(5)
    # "b" was answered; the ranker died on "fail": it and "d" are ranked by the server (None).
    assert got == {"first": "FIRST", "b": "B", "fail": None, "d": None}
    deadline = time.monotonic() + 10
    while not replaced:
        assert time.monotonic() < deadline
        time.sleep(0.001)
    assert replaced == [pipe] and pipe not in rankers._alive and not rankers._free


def test_a_ranker_ranks_a_batch_as_it_ranks_each_alone_with_one_scan():
    """`Ranker.rank_batch` over a hot index large enough for the int8 scan: the same memories as
    each recall alone, the batch's queries scanned once together, and None for a being whose
    index the process does not map."""
    from datetime import UTC, datetime

    import numpy as np
    import pyarrow as pa

    from mindflow.api.rankers import Ranker
    from mindflow.memories import COLUMNS, _to_lance
    from mindflow.recall.hot import INT8_SCAN_FROM, BeingIndex
    from tests.test_recall_hot import _SlowScans

    n, dim = INT8_SCAN_FROM + 5_000, 384
    rng = np.random.default_rng(3)
    topics = rng.normal(size=(50, dim))
    vectors = 0.6 * topics[rng.integers(0, 50, n)] + rng.normal(size=(n, dim))
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    words = [f"w{i}" for i in range(300)]
    rows = pa.table(
        {
            "memory_ref": [f"m{i:06d}" for i in range(n)],
            "being_id": ["ada"] * n,
            "kind": ["message"] * n,
            "text": [" ".join(rng.choice(words, 8)) for _ in range(n)],
            "status": ["active"] * n,
            "ts": pa.array(np.datetime64("2026-01-01", "us") + np.arange(n).astype("timedelta64[m]")),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), dim),
        }
    )
    for name in COLUMNS:
        if name not in rows.column_names:
            rows = rows.append_column(name, pa.nulls(n))
    index = BeingIndex("ada", 1, _to_lance(rows))
    assert index.scan is not None
    queries = {
        f"w{i} w{i + 1}": vectors[i] + 0.01 * rng.normal(size=dim).astype(np.float32) for i in range(4)
    }

    ranker = Ranker.__new__(Ranker)  # its model and files stood in for: this tests the batch alone
    table = object()  # a hot recall with the index's own full text never reads the table
    ranker.latest = SimpleNamespace(get=lambda: (table, 1))
    ranker.hot = SimpleNamespace(get=lambda _table, being, _version: index if being == "ada" else None)
    ranker.vectors = SimpleNamespace(get=queries.__getitem__)

    kwargs = {"k": 5, "now": datetime(2026, 3, 1, tzinfo=UTC)}  # the same recency for every recall
    alone = [answer for query in queries for answer in ranker.rank_batch([("ada", 1, query, kwargs)])]
    assert all(len(found) == 5 for found in alone)
    index.scan.session = scans = _SlowScans(index.scan.session)
    batch = [("ada", 1, query, kwargs) for query in queries] + [("bob", 1, "w0 w1", kwargs)]
    answers = list(ranker.rank_batch(batch))
    assert scans.batches == [4]  # one scan for the four recalls of ada's index
    assert [[m.memory_ref for m in found] for found in answers[:4]] == [
        [m.memory_ref for m in found] for found in alone
    ]
    assert [[m.score for m in found] for found in answers[:4]] == [
        [m.score for m in found] for found in alone
    ]
    assert answers[4] is None  # bob's index is not mapped here: the server ranks it
