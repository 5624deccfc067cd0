"""One call in a process of its own, started for it and ended by it.

Used where the work must not stay in the caller's memory (building a hot index leaves ~0.9 GB
per 100,000 memories in the allocators of the process that did it) or must not load into a
process that outlives it (the model in `mindflow serve --workers N`'s supervisor).

Not `concurrent.futures.ProcessPoolExecutor`: its worker waits for more work until the pool is
shut down, on a queue whose write end it holds itself, so when the process that made the pool is
killed mid-call the worker waits forever, an orphan holding its memory. A process started for
one call finishes it and exits, whether or not its parent is still there to read the answer.
"""

from __future__ import annotations

import multiprocessing
import pickle
from collections.abc import Callable
from typing import Any


def _run(conn, fn: Callable[..., Any], args: tuple) -> None:
    try:
        answer = (True, fn(*args))
    except BaseException as exc:  # noqa: BLE001 - raised again in the caller
        answer = (False, _portable(exc))
    try:
        conn.send(answer)
    except OSError:  # the caller is gone: nobody to tell
        pass
    finally:
        conn.close()


def _portable(exc: BaseException) -> BaseException:
    """`exc` if it survives pickling, else a RuntimeError naming it."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:  # noqa: BLE001 - any failure to round-trip
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc


def call(fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)` in a fresh (spawned) process; its return value, or its exception raised here.

    `fn` and its arguments must be importable and picklable; a process that dies without an
    answer raises OSError with its exit code."""
    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    process = context.Process(target=_run, args=(send, fn, args), name=f"mindflow-{fn.__name__}")
    process.start()
    send.close()  # ours closed, the child's end is its only one: its death reads as EOF
    try:
        ok, value = receive.recv()
    except EOFError:
        process.join()
        raise OSError(f"the process running {fn.__name__} died (exit code {process.exitcode})") from None
    finally:
        receive.close()
    process.join()
    if not ok:
        raise value
    return value
