"""One call for several threads: the work of calls that arrive together, done once for all.

Some work costs about the same for several items as for one: an int8 scan of 100,000 codes
streams the codes once for every query in it (`recall.hot.Int8Scan`). `Together` gives each
caller its own answer while the callers that arrive during a run wait and go out together in
the next one (group commit):

- the first caller runs `run([its item])` at once: alone, nothing waits for company;
- callers arriving meanwhile queue; when the run ends, the first of them runs the next one for
  up to `most` queued items, its own first;
- a failed run raises its error in each caller it held; the next run is unaffected.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

Item = TypeVar("Item")
Answer = TypeVar("Answer")


class _Call(Generic[Item, Answer]):
    """One caller waiting: its item, then its answer (or the error of its run)."""

    __slots__ = ("item", "answer", "error", "lead", "done")

    def __init__(self, item: Item):
        self.item = item
        self.answer: Answer | None = None
        self.error: BaseException | None = None
        self.lead = False  # this caller runs the next batch, for itself and those waiting
        self.done = threading.Event()


class Together(Generic[Item, Answer]):
    """`together(item)` is `run([item])[0]`, with concurrent callers sharing runs of up to `most`."""

    def __init__(self, run: Callable[[list[Item]], Sequence[Answer]], most: int):
        if most < 1:
            raise ValueError(f"a batch holds at least one item, not {most}")
        self.run = run
        self.most = most
        self._lock = threading.Lock()
        self._waiting: list[_Call[Item, Answer]] = []
        self._running = False
        self.runs = 0  # batches run so far (tests and benchmarks read it)

    def __call__(self, item: Item) -> Answer:
        call: _Call[Item, Answer] = _Call(item)
        with self._lock:
            self._waiting.append(call)
            if not self._running:
                self._running = call.lead = True
        if not call.lead:
            call.done.wait()  # answered by another caller's run, or made the next to run
        if call.lead:
            self._run_batch()
        if call.error is not None:
            raise call.error
        return call.answer  # type: ignore[return-value] - set by the run that held it

    def _run_batch(self) -> None:
        """One run of the calls waiting (the leading caller's first), then the lead passed on."""
        with self._lock:
            batch, self._waiting = self._waiting[: self.most], self._waiting[self.most :]
            self.runs += 1
        try:
            answers = self.run([call.item for call in batch])
            if len(answers) != len(batch):
                raise RuntimeError(f"a run answered {len(answers)} of {len(batch)} items")
            for call, answer in zip(batch, answers, strict=True):
                call.answer = answer
        except BaseException as error:  # noqa: BLE001 - each caller it held raises it
            for call in batch:
                call.error = error
        with self._lock:
            following = self._waiting[0] if self._waiting else None
            if following is None:
                self._running = False
            else:
                following.lead = True
        for call in batch:
            call.lead = False
            call.done.set()
        if following is not None:
            following.done.set()
