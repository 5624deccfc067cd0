"""Typed data shapes shared by ingestion, patrol and decay."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import UTC, date, datetime

EPISODE_KINDS = frozenset(
    {"message", "event", "decision", "fact", "preference", "task", "emotion", "correction"}
)
TRIGGERS = frozenset({"remember", "forget", "reflect"})


@dataclass(frozen=True)
class Episode:
    """One thing that happened to a being, as stored in the `episodes` table."""

    episode_id: str
    being_id: str
    ts: datetime  # naive UTC
    speaker: str
    role: str
    text: str
    session_id: str | None = None
    kind: str = "message"
    confidence: float | None = None
    tags: tuple[str, ...] = ()
    importance: float | None = None
    source: str | None = None
    source_ref: str | None = None  # "<file name>:<line number>"
    format: str = "jsonl"  # jsonl | openclaw | daily-md
    trigger: str | None = None

    @property
    def day(self) -> date:
        return self.ts.date()


@dataclass(frozen=True)
class QuarantinedLine:
    """A line that could not become an episode, kept with where it came from and why."""

    file: str
    line: int
    reason: str
    raw: str


@dataclass
class ParseResult:
    """What parsing one landed file produced."""

    episodes: list[Episode] = field(default_factory=list)
    quarantined: list[QuarantinedLine] = field(default_factory=list)
    heartbeats: int = 0


def episode_hash_id(being_id: str, ts: datetime, speaker: str, text: str) -> str:
    """Deterministic id for an episode that came without a client id."""
    key = "\x1f".join([being_id, ts.isoformat(), speaker, text])
    return "h-" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:24]


def utcnow() -> datetime:
    """Now, as the naive UTC timestamp every table stores."""
    return datetime.now(UTC).replace(tzinfo=None)
