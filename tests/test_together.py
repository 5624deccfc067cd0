"""Together: concurrent calls served by shared runs, each caller with its own answer or error."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from mindflow.together import Together


def test_calls_arriving_during_a_run_share_the_next_and_each_gets_its_own_answer():
    runs: list[list[int]] = []

    def square(items: list[int]) -> list[int]:
        runs.append(list(items))
        time.sleep(0.01)  # long enough for the other threads to arrive meanwhile
        return [i * i for i in items]

    together = Together(square, most=5)
    with ThreadPoolExecutor(8) as threads:
        answers = list(threads.map(together, range(60)))
    assert answers == [i * i for i in range(60)]
    assert sorted(i for run in runs for i in run) == list(range(60))  # each item run once
    assert max(len(run) for run in runs) <= 5 and len(runs) < 60 and together.runs == len(runs)


def test_a_lone_call_runs_at_once_and_alone():
    together = Together(lambda items: [len(items)] * len(items), most=8)
    assert [together(i) for i in range(3)] == [1, 1, 1]


def test_a_failed_run_fails_each_call_it_held_and_the_next_run_works():
    failing = threading.Event()
    failing.set()

    def run(items: list[int]) -> list[int]:
        time.sleep(0.01)
        if failing.is_set():
            raise RuntimeError("the run failed")
        return items

    together = Together(run, most=8)
    with ThreadPoolExecutor(4) as threads:
        calls = [threads.submit(together, i) for i in range(4)]
        assert all(isinstance(c.exception(), RuntimeError) for c in calls)
    failing.clear()
    assert together(7) == 7


def test_a_run_answering_the_wrong_number_of_items_is_an_error_not_a_wrong_answer():
    together = Together(lambda items: [], most=2)
    with pytest.raises(RuntimeError, match="answered 0 of 1"):
        together(1)


def test_a_batch_holds_at_least_one_item():
    with pytest.raises(ValueError):
        Together(lambda items: items, most=0)
