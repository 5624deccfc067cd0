"""A recalled memory, with the parts of its score."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

# Columns read from the LanceDB `memories` table for every result.
COLUMNS = [
    "memory_ref",
    "being_id",
    "kind",
    "text",
    "feeling",
    "themes",
    "when_dates",
    "status",
    "importance",
    "ts",
    "cluster_id",
    "source_episode_ids",
    "actors",  # who speaks: the speaker lever reads it (mindflow/recall/speakers.py)
    "pinned",
    "trigger",
    "decay_score",
]


@dataclass
class Memory:
    memory_ref: str
    being_id: str
    text: str
    kind: str = "message"
    feeling: str | None = None
    themes: list[str] = field(default_factory=list)
    when_dates: list[str] = field(default_factory=list)
    ts: datetime | None = None
    cluster_id: str | None = None
    status: str = "active"
    importance: float = 0.5
    pinned: bool = False
    trigger: str | None = None
    source_episode_ids: list[str] = field(default_factory=list)
    decay_score: float = 1.0
    # Accepted but not published yet: from the server's fresh tail, under the ref its node will get.
    fresh: bool = False
    score: float = 0.0
    parts: dict[str, float] = field(default_factory=dict)

    @classmethod
    def from_row(cls, row: dict) -> Memory:
        return cls(
            memory_ref=row["memory_ref"],
            being_id=row["being_id"],
            text=row["text"] or "",
            kind=row.get("kind") or "message",
            feeling=row.get("feeling"),
            themes=list(row.get("themes") or []),
            when_dates=list(row.get("when_dates") or []),
            ts=row.get("ts"),
            cluster_id=row.get("cluster_id"),
            status=row.get("status") or "active",
            importance=float(row.get("importance") if row.get("importance") is not None else 0.5),
            pinned=bool(row.get("pinned")),
            trigger=row.get("trigger"),
            source_episode_ids=list(row.get("source_episode_ids") or []),
            decay_score=float(row.get("decay_score") if row.get("decay_score") is not None else 1.0),
            fresh=bool(row.get("fresh")),
        )
