"""What model calls cost: the token estimate, one purpose's usage, and the run's guard.

The guard (`RunGuard`) is what a whole run may still spend on models: a total time
budget and a breaker per model. One guard serves every purpose and being of a run, so a
hung or broken model costs a run a bounded time, not a timeout per cluster and being.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any


def estimate_tokens(text: str) -> int:
    """The documented estimate: ASCII characters / 4 plus one token per other character.

    BPE tokenizers average about four English characters per token; CJK and other
    non-ASCII characters are mostly one token each, so they are counted one to one.
    It errs high, which is the safe side for batching.
    """
    if not text:
        return 0
    if text.isascii():
        return math.ceil(len(text) / 4)
    ascii_chars = sum(1 for ch in text if ord(ch) < 128)
    return math.ceil(ascii_chars / 4) + (len(text) - ascii_chars)


@dataclass
class Usage:
    """What one purpose's calls cost in one run."""

    calls: int = 0
    failed_calls: int = 0
    failovers: int = 0
    retries: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    errors: list[str] = field(default_factory=list)
    # Completions answered without asking any model: the run had stopped asking them.
    skipped_calls: int = 0

    def metadata(self, prefix: str = "llm") -> dict[str, Any]:
        """Flat metadata for a MaterializeResult (no keys, short error reasons only)."""
        out: dict[str, Any] = {
            f"{prefix}/calls": self.calls,
            f"{prefix}/failed_calls": self.failed_calls,
            f"{prefix}/failovers": self.failovers,
            f"{prefix}/retries": self.retries,
            f"{prefix}/input_tokens": self.input_tokens,
            f"{prefix}/output_tokens": self.output_tokens,
            f"{prefix}/cost_usd": round(self.cost_usd, 6),
            f"{prefix}/skipped_calls": self.skipped_calls,
        }
        if self.errors:
            out[f"{prefix}/errors"] = "\n".join(self.errors[-20:])
        return out


class RunGuard:
    """What one run may still spend on models: seconds of model time, and each model's breaker.

    Time counts from a request's start to its end (a hang costs its whole timeout) plus
    the waits before retries. A model's breaker opens after `max_failures` requests in a
    row that gave no usable answer (timeout, connection, HTTP error, an answer rejected);
    one usable answer closes the count again. Once open it stays open for the run: the
    chain skips that model, and with every model skipped or the time spent, the caller's
    mechanical fallback does the work.
    """

    def __init__(self, budget_s: float, max_failures: int):
        self.budget_s = float(budget_s)
        self.max_failures = int(max_failures)
        self.spent_s = 0.0
        self.in_a_row: dict[str, int] = {}
        self.open: dict[str, str] = {}  # model -> why its breaker opened
        self._lock = threading.Lock()

    def remaining(self) -> float:
        return self.budget_s - self.spent_s

    @property
    def exhausted(self) -> bool:
        return self.remaining() <= 0

    def spend(self, seconds: float) -> str | None:
        """Count model time; the reason to log, the one time the budget runs out."""
        with self._lock:
            was = self.exhausted
            self.spent_s += max(0.0, seconds)
            if was or not self.exhausted:
                return None
        return (
            f"run time budget for model calls spent ({self.spent_s:.1f} of {self.budget_s:g} s, "
            "MINDFLOW_LLM_RUN_BUDGET_S): the rest of this run goes on without models"
        )

    def succeeded(self, model: str) -> None:
        with self._lock:
            self.in_a_row[model] = 0

    def failed(self, model: str, reason: str) -> str | None:
        """Count a failed request; the reason to log, the one time the model's breaker opens."""
        with self._lock:
            self.in_a_row[model] = count = self.in_a_row.get(model, 0) + 1
            if model in self.open or count < self.max_failures:
                return None
            self.open[model] = f"{count} failed requests in a row, the last: {reason}"
        return (
            f"breaker open for {model} ({self.open[model]}; MINDFLOW_LLM_BREAKER_FAILURES): "
            "the rest of this run does not ask it"
        )

    def is_open(self, model: str) -> bool:
        return model in self.open

    def metadata(self, prefix: str = "llm") -> dict[str, Any]:
        out: dict[str, Any] = {
            f"{prefix}/breaker_open": bool(self.open),
            f"{prefix}/run_budget_spent": self.exhausted,
            f"{prefix}/run_seconds": round(self.spent_s, 2),
        }
        if self.open:
            out[f"{prefix}/breaker"] = "\n".join(f"{m}: {why}" for m, why in self.open.items())[:2000]
        return out


# Guards of recent runs by run id: the assets of one Dagster run (in-process executor)
# each resolve their own chain, and must find the same guard. Nothing says when a run
# ends, so old guards are dropped by age: a run launched by the daemon or the UI has a
# process of its own (one guard), while the CLI and a test session run many in one
# process, one at a time, so the bound only has to outlast the runs in flight.
_RUNS: OrderedDict[str, RunGuard] = OrderedDict()
_RUNS_KEPT = 64
_RUNS_LOCK = threading.Lock()


def run_guard(budget_s: float, max_failures: int, run_id: str | None = None) -> RunGuard:
    """The guard of run `run_id` (made on first use); without a run id, a guard of its own."""
    if run_id is None:
        return RunGuard(budget_s, max_failures)
    with _RUNS_LOCK:
        guard = _RUNS.get(run_id)
        if guard is None:
            guard = _RUNS[run_id] = RunGuard(budget_s, max_failures)
            while len(_RUNS) > _RUNS_KEPT:
                _RUNS.popitem(last=False)
        _RUNS.move_to_end(run_id)
        return guard
