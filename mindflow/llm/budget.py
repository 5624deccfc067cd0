"""What model calls cost: the token estimate and one purpose's usage in one run."""

from __future__ import annotations

import math
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
        }
        if self.errors:
            out[f"{prefix}/errors"] = "\n".join(self.errors[-20:])
        return out
