"""Resonance's model calls (MindBot's subconscious agent), bounded by one time budget per request.

Phase 1 asks for the entities a message names and 2-3 clean queries; phase 5 rewrites the
fragments in the user's language. Either may fail in any way (no answer, a wrong shape, a
hang): the caller then serves the mechanical result, so a model can slow resonance by at most
`MINDFLOW_RESONANCE_BUDGET_S` and never break it.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path

from mindflow.config import Settings
from mindflow.errors import MindflowError
from mindflow.llm import chain_for, resolve
from mindflow.prompts import resonance as prompts

log = logging.getLogger(__name__)
PURPOSE = "resonance"
# Reading is cheap but unbounded files are not: the prompt keeps only their latest part anyway.
MAX_FILE_BYTES = 256 * 1024


class Fallback(Exception):
    """The model path gave up; the message says why (for the response and the log)."""


class Subconscious:
    """The `resonance` model of one server process, if one is configured."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.budget_s = settings.resonance_budget_s
        try:
            self.configured = bool(chain_for(settings, PURPOSE))
        except MindflowError as exc:
            log.warning("resonance serves the mechanical block: %s", exc)
            self.configured = False
        # Calls outlive a request that stopped waiting for them, never the budget: each
        # client times out at the budget and does not retry.
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="resonance-model")

    def deadline(self) -> float:
        return time.monotonic() + self.budget_s

    def _ask(self, prompt, deadline: float):
        left = deadline - time.monotonic()
        if left <= 0.05:
            raise Fallback(f"{prompt.name}: the {self.budget_s:g} s budget was spent")
        bounded = self.settings.model_copy(update={"llm_timeout_s": left, "llm_max_retries": 0})
        try:
            llm = resolve(bounded, PURPOSE)
        except MindflowError as exc:
            raise Fallback(str(exc)) from exc
        if llm is None:
            raise Fallback("no resonance model configured")
        future = self._pool.submit(llm.complete, prompt)
        try:
            return future.result(timeout=left)
        except FutureTimeout:
            raise Fallback(f"{prompt.name}: no answer within the {self.budget_s:g} s budget") from None
        except MindflowError as exc:
            raise Fallback(str(exc)) from exc
        except Exception as exc:  # a model must never break resonance
            log.exception("resonance model call failed")
            raise Fallback(f"{prompt.name}: {type(exc).__name__}") from exc

    def seeds(self, message: str, recent: list[str], deadline: float) -> prompts.Seeds:
        """Phase 1: the entities the message names and 2-3 clean queries, in one call."""
        return self._ask(prompts.seeds(message, recent), deadline)

    def rewrite(self, being_id: str, message: str, fragments: list[str], deadline: float) -> list[str]:
        """Phase 5: one rewritten line per fragment, with SOUL.md and STORY.md as context."""
        folder = self.settings.workspace / being_id
        answer = self._ask(
            prompts.rewrite(message, fragments, _read(folder / "SOUL.md"), _read(folder / "STORY.md")),
            deadline,
        )
        return answer.lines

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _read(path: Path) -> str:
    try:
        with path.open("rb") as handle:
            size = path.stat().st_size
            handle.seek(max(0, size - MAX_FILE_BYTES))
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
