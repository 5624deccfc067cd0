"""Request and response models of the read API, shared by the server and `mindflow.client`."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr

MAX_K = 50
MAX_RESONANCE = 5


def _naive_utc(value: datetime | None) -> datetime | None:
    """Stored timestamps are naive UTC; an aware value is converted, a naive one taken as UTC."""
    if value is None:
        return None
    if value.tzinfo is not None:
        try:
            value = value.astimezone(UTC).replace(tzinfo=None)
        except OverflowError as exc:
            raise ValueError("timestamp out of range") from exc
    if not 1970 <= value.year <= 2100:
        raise ValueError(f"year {value.year} outside 1970..2100")
    return value


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


UtcDatetime = Annotated[datetime, AfterValidator(_naive_utc)]
Ref = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_no_nul)]


class _Request(BaseModel):
    # An unknown field is a typo ("limit" for "k"): say so instead of ignoring it.
    model_config = ConfigDict(extra="forbid")


class MemoryOut(BaseModel):
    """One memory as recall serves it: the scene's action as `text`, with the parts of its score."""

    memory_ref: str
    being_id: str
    text: str = Field(description="The scene's action.")
    kind: str = "message"
    feeling: str | None = None
    themes: list[str] = []
    when_dates: list[str] = Field(default=[], description="The scene's `when` history (dates).")
    ts: datetime | None = Field(default=None, description="When it happened (UTC).")
    cluster_id: str | None = None
    status: str = "active"
    importance: float = 0.5
    pinned: bool = False
    trigger: str | None = None
    source_episode_ids: list[str] = []
    decay_score: float = 1.0
    score: float = 0.0
    parts: dict[str, float] = Field(default={}, description="The factors of `score`.")


class RecallRequest(_Request):
    query: str = Field(min_length=1, description="What to remember; plain words work best.")
    k: int = Field(default=5, ge=1, le=MAX_K)
    exclude_refs: list[Ref] = Field(
        default=[], max_length=5_000, description="Memories already in the agent's context window."
    )
    since: UtcDatetime | None = Field(default=None, description="Only memories from this moment on.")
    until: UtcDatetime | None = Field(default=None, description="Only memories up to this moment.")
    session: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="Echo filter: memories shown to this session in its last 25 recalls are left out.",
    )
    mode: Literal["list", "fragments"] = Field(
        default="list", description="`fragments`: also the actions and feelings, shuffled, joined by ' / '."
    )


class RecallResponse(BaseModel):
    being_id: str
    mode: Literal["list", "fragments"]
    memories: list[MemoryOut]
    fragments: str | None = None


class ResonanceRequest(_Request):
    query: str = Field(min_length=1)
    k: int = Field(default=MAX_RESONANCE, ge=1, le=MAX_RESONANCE)
    exclude_refs: list[Ref] = Field(default=[], max_length=5_000)
    since: UtcDatetime | None = None
    until: UtcDatetime | None = None
    session: str | None = Field(default=None, min_length=1, max_length=200)
    now: UtcDatetime | None = Field(
        default=None, description="The moment relative times are computed against (default: now)."
    )


class ResonanceItem(BaseModel):
    label: str = Field(description="`a few days ago — Jan 9`")
    relative: str = Field(description="`a few days ago`")
    date: str = Field(description="`Jan 9` (with the year when it is not the year of `now`)")
    memory: MemoryOut


class ResonanceResponse(BaseModel):
    being_id: str
    now: datetime
    text: str = Field(description="The [SUBCONSCIOUS RESONANCE] block; empty when nothing resonates.")
    items: list[ResonanceItem]


class SearchRequest(_Request):
    query: str = Field(min_length=1, description="Keywords, searched in action, feeling, themes and when.")
    mode: Literal["or", "and"] = "or"
    k: int = Field(default=10, ge=1, le=MAX_K)


class SearchResponse(BaseModel):
    being_id: str
    mode: Literal["or", "and"]
    memories: list[MemoryOut]


class ClusterResponse(BaseModel):
    being_id: str
    cluster_id: str
    memories: list[MemoryOut]


class FactsResponse(BaseModel):
    being_id: str
    entity: str = Field(description="The entity as the graph names it (aliases resolved).")
    depth: int
    facts: list[dict[str, Any]]
    relations: list[dict[str, Any]]
    neighbours: list[str] = Field(default=[], description="Entities the relations reach, nearest first.")


class EpisodeIn(_Request):
    """One episode, with the fields and rules of an inbox JSONL line."""

    ts: StrictStr | StrictInt | StrictFloat = Field(description="ISO 8601 (UTC unless offset) or epoch.")
    text: StrictStr
    speaker: StrictStr | None = None
    role: StrictStr | None = None
    id: StrictStr | StrictInt | None = Field(
        default=None, description="Your id, unique within the being; default: a hash of ts, speaker, text."
    )
    session_id: StrictStr | StrictInt | None = None
    kind: StrictStr | None = Field(
        default=None,
        description="message, event, decision, fact, preference, task, emotion or correction.",
    )
    tags: list[StrictStr] | None = None
    importance: StrictFloat | StrictInt | None = Field(default=None, description="0..1")
    confidence: StrictFloat | StrictInt | None = Field(default=None, description="0..1")
    source: StrictStr | None = None


class EpisodesRequest(_Request):
    episodes: list[EpisodeIn] = Field(min_length=1)


class EpisodesResponse(BaseModel):
    being_id: str
    ids: list[str] = Field(description="The stored episode ids, in request order (heartbeats left out).")
    heartbeats: int = Field(description="Heartbeat or probe messages: written, counted, never episodes.")
    file: str = Field(description="The inbox file the episodes were appended to.")


class Health(BaseModel):
    status: str


class Ready(BaseModel):
    status: str
    model: str
    lance_path: str


class ErrorResponse(BaseModel):
    error: str
    details: list[Any] | None = None
