"""The queue of recalls waiting for a ranking process: first come, first served.

The processes themselves are exercised by test_serve_rankers; here the rankers are stand-ins
that are always alive, so the order in which waiting recalls are handed one is what is tested.
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from mindflow.api.rankers import Rankers


class _Ranker:
    """Stands in for a ranking process that stays alive."""

    def __init__(self, name: str):
        self.name = name
        self.process = SimpleNamespace(is_alive=lambda: True)

    def stop(self) -> None:
        pass


def _pool(*names: str) -> Rankers:
    rankers = Rankers(len(names))
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


def _take_in_thread(rankers: Rankers, got: dict, key: str) -> threading.Thread:
    thread = threading.Thread(target=lambda: got.__setitem__(key, rankers._take()), daemon=True)
    thread.start()
    return thread


def test_waiting_recalls_are_handed_rankers_in_the_order_they_came():
    rankers = _pool("a")
    busy = rankers._take()
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
    taken = rankers._take()
    assert taken.name == "b"  # given last, so taken first: its caches are the warm ones
    with rankers._lock:
        rankers._give(taken)
    assert rankers._take() is taken
    assert not rankers._waiting


def test_closing_tells_every_waiting_recall_to_rank_it_itself():
    rankers = _pool("a")
    rankers._take()
    got: dict = {}
    threads = [_take_in_thread(rankers, got, str(i)) for i in range(3)]
    _waiting(rankers, 3)
    rankers.close()
    for thread in threads:
        thread.join(5)
    assert got == {"0": None, "1": None, "2": None}
    assert rankers._take() is None  # closed: every later recall ranks itself
