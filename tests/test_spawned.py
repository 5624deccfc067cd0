"""`mindflow.spawned.call`: one call in a process started for it, which ends with it."""

from __future__ import annotations

import os

import pytest

from mindflow import spawned
from mindflow.errors import MindflowError


def _pid_and_sum(a: int, b: int) -> tuple[int, int]:
    return os.getpid(), a + b


def _refuse(message: str) -> None:
    raise MindflowError(message)


def _die() -> None:
    os._exit(3)


def test_the_answer_comes_from_another_process():
    pid, total = spawned.call(_pid_and_sum, 2, 3)
    assert total == 5 and pid != os.getpid()


def test_the_callers_error_is_raised_here_with_its_type():
    with pytest.raises(MindflowError, match="no such model"):
        spawned.call(_refuse, "no such model")


def test_a_process_that_dies_without_an_answer_is_an_oserror():
    with pytest.raises(OSError, match=r"_die died \(exit code 3\)"):
        spawned.call(_die)
