"""Request and response models of the read API, shared by the server and `mindflow.client`."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    StrictFloat,
    StrictInt,
    StrictStr,
    WithJsonSchema,
    model_validator,
)

MAX_K = 50
MAX_RESONANCE = 5


_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def _iso_text(value: Any) -> Any:
    """JSON has no time type: a moment is an ISO 8601 string. A number is refused, not
    guessed at: epoch seconds or milliseconds, or a client's 0 for "not set" (which as
    `until` would hide every memory)."""
    if isinstance(value, datetime) or (isinstance(value, str) and _ISO_DATE.match(value)):
        return value
    raise ValueError(
        "use an ISO 8601 timestamp such as '2026-04-01T09:30:00Z' (UTC unless it has an offset), "
        "or leave the field out; numbers and epoch values are not accepted"
    )


def _as_naive_utc(value: datetime) -> datetime:
    return value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo is not None else value


def _naive_utc(value: datetime | None) -> datetime | None:
    """Stored timestamps are naive UTC; an aware value is converted, a naive one taken as UTC."""
    if value is None:
        return None
    try:
        value = _as_naive_utc(value)
    except OverflowError as exc:
        raise ValueError("timestamp out of range") from exc
    if not 1970 <= value.year <= 2100:
        raise ValueError(f"year {value.year} outside 1970..2100")
    return value


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


def _rfc3339(value: datetime) -> str:
    """A stored (naive UTC) time with its `Z`: without an offset it is no RFC 3339 date-time."""
    return _as_naive_utc(value).isoformat() + "Z"


def _json_integer(value: Any) -> Any:
    """A count is a JSON number (5, or 5.0 as JSON Schema allows); "5" or true is a client's bug."""
    if isinstance(value, (str, bool)):
        raise ValueError(f"must be a JSON integer such as 5, not {value!r}")
    return value


def _until_text(value: Any) -> Any:
    """An upper bound: a date alone ("2026-10-23") means through the end of that day, as "at or
    before 2026-10-23" reads; as midnight it would leave the whole day out."""
    value = _iso_text(value)
    if isinstance(value, str) and _ISO_DATE.fullmatch(value):
        return value + "T23:59:59.999999"
    return value


UtcDatetime = Annotated[datetime, BeforeValidator(_iso_text), AfterValidator(_naive_utc)]
UtcUntil = Annotated[datetime, BeforeValidator(_until_text), AfterValidator(_naive_utc)]
Count = Annotated[int, BeforeValidator(_json_integer)]
# A time in an answer: `...Z` on the wire, naive UTC again in `mindflow.client`, as stored.
UtcOut = Annotated[
    datetime,
    AfterValidator(_as_naive_utc),
    PlainSerializer(_rfc3339, when_used="json"),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]
Ref = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_no_nul)]
# As mindflow.loop.proposals has them (STATUSES, KINDS): an unknown one is a 422, not an empty list.
ProposalStatus = Literal["pending", "approved", "rejected", "deferred"]
ProposalKind = Literal["forget", "merge", "archive", "contradiction", "procedure", "core", "memory"]


class _Request(BaseModel):
    # An unknown field is a typo ("limit" for "k"): say so instead of ignoring it.
    model_config = ConfigDict(extra="forbid")


def out_of_order(since: datetime | None, until: datetime | None) -> str | None:
    """Why `since` and `until` cannot both hold, or None when they can."""
    if since is not None and until is not None and since > until:
        return f"since ({since.isoformat()}) is after until ({until.isoformat()}): no memory can match"
    return None


class _Horizon(_Request):
    """`since` and `until` bound the memories a request may see, both ends included."""

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        problem = out_of_order(getattr(self, "since", None), getattr(self, "until", None))
        if problem is not None:
            raise ValueError(problem)
        return self


class MemoryOut(BaseModel):
    """One memory as recall serves it: the scene's action as `text`, with the parts of its score."""

    memory_ref: str
    being_id: str
    text: str = Field(description="The scene's action.")
    kind: str = "message"
    feeling: str | None = None
    themes: list[str] = []
    when_dates: list[str] = Field(default=[], description="The scene's `when` history (dates).")
    ts: UtcOut | None = Field(default=None, description="When it happened (UTC).")
    cluster_id: str | None = None
    status: str = "active"
    importance: float = 0.5
    pinned: bool = False
    trigger: str | None = None
    source_episode_ids: list[str] = []
    decay_score: float = 1.0
    fresh: bool = Field(
        default=False,
        description="Accepted but not published yet (the fresh tail): `memory_ref` is the ref its memory "
        "keeps once the form run has published it.",
    )
    score: float = 0.0
    parts: dict[str, float] = Field(default={}, description="The factors of `score`.")


# `session` was the name of `session_id` in recall and resonance; still accepted there, deprecated.
_SESSION_ALIASES = AliasChoices("session_id", "session")


_EXCLUDE = "Memory refs already in the agent's context window: left out."
_SINCE = "Only memories from this moment on (ISO 8601; UTC unless an offset)."
_UNTIL = "Only memories up to this moment (ISO 8601; UTC unless an offset; a date alone: through its end)."


class RecallRequest(_Horizon):
    """A recall. `session`, the old name of `session_id`, is still accepted (deprecated)."""

    query: str = Field(min_length=1, description="What to remember; plain words work best.")
    k: Count = Field(default=5, ge=1, le=MAX_K, description="How many memories.")
    exclude_refs: list[Ref] = Field(default=[], max_length=5_000, description=_EXCLUDE)
    since: UtcDatetime | None = Field(default=None, description=_SINCE)
    until: UtcUntil | None = Field(default=None, description=_UNTIL)
    session_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        validation_alias=_SESSION_ALIASES,
        description="The current session, as episodes name it (the echo filter): memories shown to "
        "this session in its last 25 recalls or resonances are left out.",
    )
    mode: Literal["list", "fragments"] = Field(
        default="list",
        description="`fragments`: only the actions and feelings, shuffled, joined by ' / ' inside "
        "`<fragments>...</fragments>`, and an empty `memories` list; nothing found: `fragments` is ''.",
    )


class RecallResponse(BaseModel):
    being_id: str
    mode: Literal["list", "fragments"]
    memories: list[MemoryOut] = Field(description="Empty in `fragments` mode.")
    fragments: str | None = Field(default=None, description="Only in `fragments` mode.")


class ResonanceRequest(_Horizon):
    """A resonance. `session`, the old name of `session_id`, is still accepted (deprecated)."""

    query: str = Field(min_length=1, description="The user's message.")
    k: Count = Field(default=MAX_RESONANCE, ge=1, le=MAX_RESONANCE, description="How many items, at most 5.")
    exclude_refs: list[Ref] = Field(default=[], max_length=5_000, description=_EXCLUDE)
    since: UtcDatetime | None = Field(default=None, description=_SINCE)
    until: UtcUntil | None = Field(default=None, description=_UNTIL)
    session_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        validation_alias=_SESSION_ALIASES,
        description="The current session, as episodes name it (the echo filter): memories and facts "
        "shown to this session in its last 25 recalls or resonances are left out.",
    )
    now: UtcDatetime | None = Field(
        default=None, description="The moment relative times are computed against (default: now)."
    )
    recent: list[Annotated[str, Field(max_length=4_000)]] = Field(
        default=[],
        max_length=20,
        description="The last few messages of the conversation, oldest first: context for a resonance "
        "model's queries (phase 1); unused without one.",
    )


class FactOut(BaseModel):
    """A fact of an entity the query names, as resonance offers it (phase 2)."""

    fact_id: str
    entity: str
    key: str
    value: str
    tier: Literal["hot", "warm", "cool"] = Field(description="Hot above activation 2, Cool below 1.")
    activation: float
    importance: float
    valid_at: UtcOut | None = Field(default=None, description="Since when it holds (UTC).")
    source_episode_ids: list[str] = []


class ResonanceItem(BaseModel):
    kind: Literal["memory", "fact"] = Field(
        default="memory", description="A recalled memory, or a fact of an entity the query names."
    )
    label: str = Field(description="`a few days ago — Jan 9`")
    relative: str = Field(description="`a few days ago`")
    date: str = Field(description="`Jan 9` (with the year when it is not the year of `now`)")
    line: str = Field(default="", description="The item's line in `text`, before any rewriting by a model.")
    memory: MemoryOut | None = Field(default=None, description="With kind `memory`.")
    fact: FactOut | None = Field(default=None, description="With kind `fact`.")


class ResonanceResponse(BaseModel):
    being_id: str
    now: UtcOut
    text: str = Field(description="The [SUBCONSCIOUS RESONANCE] block; empty when nothing resonates.")
    items: list[ResonanceItem]
    queries: list[str] = Field(
        default=[], description="What memories were searched for: the query, and a model's queries."
    )
    rewritten: bool = Field(
        default=False, description="The block's lines were rewritten by the resonance model (phase 5)."
    )
    fallback: str | None = Field(
        default=None,
        description="Why a configured resonance model was not (fully) used: the mechanical result "
        "was served.",
    )


class SearchRequest(_Request):
    query: str = Field(min_length=1, description="Keywords, searched in action, feeling, themes and when.")
    mode: Literal["or", "and"] = Field(default="or", description="Any keyword (`or`) or all of them (`and`).")
    k: Count = Field(default=10, ge=1, le=MAX_K, description="How many memories.")


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
    entity: str = Field(
        description="The entity as the graph names it (aliases resolved); empty for `q` alone."
    )
    depth: int
    resolved_by: Literal["alias", "name", "normalised", "words"] | None = Field(
        default=None,
        description="How the entity was found: through an alias, by its name, its normalised form "
        "(accents, punctuation) or its words; null when it was not found or not asked for.",
    )
    facts: list[dict[str, Any]]
    relations: list[dict[str, Any]]
    neighbours: list[str] = Field(default=[], description="Entities the relations reach, nearest first.")


class EpisodeIn(_Request):
    """One episode, with the fields and rules of an inbox JSONL line."""

    ts: StrictStr | StrictInt | StrictFloat = Field(description="ISO 8601 (UTC unless offset) or epoch.")
    text: StrictStr
    speaker: StrictStr | None = None
    role: StrictStr | None = Field(
        default=None,
        description="user (the default) or assistant: only a user's turn gives a memory instruction "
        '("remember ...", "forget ...", "review your memory").',
    )
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
    trigger: Literal["remember", "forget", "reflect"] | None = Field(
        default=None,
        description="An explicit memory instruction, whoever the speaker (the `remember` tool sets "
        "`remember`); without it, a user's text is searched for one.",
    )


class EpisodesRequest(_Request):
    episodes: list[EpisodeIn] = Field(min_length=1)


class EpisodesResponse(BaseModel):
    being_id: str
    ids: list[str] = Field(description="The stored episode ids, in request order (heartbeats left out).")
    heartbeats: int = Field(description="Heartbeat or probe messages: written, counted, never episodes.")
    file: str = Field(description="The inbox file the episodes were appended to.")
    forget_proposals: list[str] = Field(
        default=[],
        description="Pending forget proposals opened by a forget instruction among the episodes "
        '("forget about ...", "scratch that"); applied only when confirmed through `forget`.',
    )


class Health(BaseModel):
    status: str


class Ready(BaseModel):
    """Ready to answer: the model is loaded and the LanceDB folder readable (no paths: it needs no token)."""

    status: Literal["ready"]
    model: str = Field(description="The model queries are embedded with (a local one by its folder's name).")
    rankers: int = Field(
        default=0,
        description="Ranking processes alive in the process that answered (0: it ranks every recall itself; "
        "a dead one is replaced in the background).",
    )


class ErrorResponse(BaseModel):
    error: str
    details: list[Any] | None = None


# ---- the agent's loop: forget, restore, pin, proposals ------------------------------------


class ForgetRequest(_Request):
    """Find (query and/or refs, no confirm), then confirm (proposal_id, refs, confirm: true) or
    reject (proposal_id, confirm: false)."""

    query: str | None = Field(
        default=None, min_length=1, max_length=4_000, description="What to forget, in plain words."
    )
    refs: list[Ref] | None = Field(
        default=None,
        max_length=500,
        description="Without proposal_id: memories or facts to forget. With it: the candidates to confirm "
        "(all of them when left out).",
    )
    proposal_id: Ref | None = Field(default=None, description="The proposal a find returned.")
    confirm: bool | None = Field(
        default=None, description="true applies the proposal, false rejects it; left out: find only."
    )
    permanent: bool = Field(
        default=False,
        description="With confirm: delete everywhere, for good (the `forget` job), instead of archiving.",
    )

    @model_validator(mode="after")
    def _one_step(self) -> Self:
        if self.proposal_id is None:
            if self.confirm is not None:
                raise ValueError("confirm needs the proposal_id a find returned; find first (query or refs)")
            if self.query is None and not self.refs:
                raise ValueError("say what to forget: query, refs, or both")
        else:
            if self.confirm is None:
                raise ValueError("with proposal_id, say confirm: true (apply) or confirm: false (reject)")
            if self.query is not None:
                raise ValueError("a confirm names refs of the proposal, not a query")
        return self


class ForgetCandidate(BaseModel):
    ref: str = Field(
        description="A memory ref, a fact or relation id, `MEMORY.md:<line>` or `STORY.md:<chapter>`."
    )
    store: Literal["memory", "fresh", "fact", "relation", "memory_md", "story"]
    text: str
    status: str | None = None
    source_episode_ids: list[str] = []
    score: float | None = None


class ForgetResponse(BaseModel):
    being_id: str
    proposal_id: str | None = Field(
        description="The proposal to confirm or reject; null when a find had no candidate (none opened)."
    )
    status: ProposalStatus | None = Field(description="The proposal's status; null when none was opened.")
    candidates: list[ForgetCandidate] = Field(description="What the forget reaches; shown before a confirm.")
    forgotten: list[str] = Field(default=[], description="The refs confirmed (hidden from now on).")
    permanent: bool = False


class PinResponse(BaseModel):
    being_id: str
    ref: str
    pinned: bool


class RestoreResponse(BaseModel):
    being_id: str
    ref: str
    restored: bool


class ProposalOut(BaseModel):
    """A change waiting for a decision, or decided: what it is (`tag`, `title`, `evidence`) and who
    proposed and decided it. `conflict` is true when it contradicts a pending proposal or a current
    fact; both sides are in `evidence` (and `payload.conflict`), and it is never committed unasked."""

    proposal_id: str
    being_id: str
    kind: str = Field(description="forget, merge, archive, contradiction, procedure, core or memory.")
    status: ProposalStatus
    payload: dict[str, Any]
    created_at: UtcOut
    created_by: str = Field(
        description="user, api (a token without a role), mcp (the MCP tools), reflection, or subagent:<name>."
    )
    decided_by: str | None = None
    decided_at: UtcOut | None = None
    applied_at: UtcOut | None = Field(
        default=None,
        description="When it took effect: at its confirm for a soft forget, when the forget run erased "
        "it for a permanent forget, when the approvals run applied it for the rest.",
    )
    tag: str | None = Field(
        default=None,
        description="How a review shows it: FORGET, MERGE, ARCHIVE, CONFLICT, PROCEDURE, CORE or MEMORY.",
    )
    title: str | None = Field(default=None, description="One line on what approving it changes.")
    evidence: list[str] = Field(default=[], description="Why, and what it touches: one line each.")
    diff: str | None = Field(default=None, description="MEMORY.md's proposed change (unified diff).")
    conflict: bool = Field(
        default=False, description="It contradicts a pending proposal or a current fact (CONFLICT)."
    )


class ProposalsResponse(BaseModel):
    being_id: str
    proposals: list[ProposalOut]


class WhenOut(BaseModel):
    date: str | None = None
    action: str | None = Field(default=None, description="What happened that day (merged memories).")


class SceneOut(BaseModel):
    """The scene a memory was formed from."""

    action: str | None = None
    actors: list[str] = []
    when: list[WhenOut] = Field(default=[], description="Its dates, with what happened when merged.")
    setting: str | None = None
    dialogue: list[str] = Field(default=[], description="What was said, one line each.")
    sensory: list[str] = Field(default=[], description="Sensory details, one each.")


class MemoryRecord(BaseModel):
    """One memory as stored: statuses, decay, pin, cluster, scene, feeling, sources and times.

    `status`: active, dying, dormant, dead or archived (forgotten, or archived by decay; never
    recalled). `decay_status`: active, fading, dormant or archived."""

    memory_ref: str
    being_id: str
    text: str = Field(description="The scene's action.")
    status: Literal["active", "dying", "dormant", "dead", "archived"]
    kind: str = "message"
    feeling: str | None = None
    themes: list[str] = []
    importance: float = 0.5
    pinned: bool = False
    trigger: str | None = None
    cluster_id: str | None = None
    decay_score: float | None = Field(default=None, description="Relevance at the last decay run.")
    decay_status: str | None = None
    scene: SceneOut
    source_episode_ids: list[str] = []
    ts: UtcOut | None = Field(default=None, description="When it happened (UTC).")
    created_at: UtcOut | None = Field(default=None, description="When the patrol formed it.")
    last_activated: UtcOut | None = Field(default=None, description="The last recall that reached it.")
    reactivation_count: int = 0


class MemoryPage(BaseModel):
    being_id: str
    memories: list[MemoryRecord]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null on the last.")


class HistoryEntry(BaseModel):
    """One change: formed, reinforced, dying, revived, dead, merged, absorbed, moved, decay_status,
    pinned, unpinned, forgotten, restored or deleted."""

    history_id: str | None = None
    ts: UtcOut
    operation: str
    actor: str = Field(description="form, patrol, decay, recall, extraction, reflection:<id>, user or agent.")
    run_id: str | None = None
    before: dict[str, Any] | None = Field(default=None, description="The fields that changed, before.")
    after: dict[str, Any] | None = None
    pending: bool = Field(default=False, description="Decided by a mark that no run has folded in yet.")


class MemoryHistory(BaseModel):
    being_id: str
    memory_ref: str
    deleted: bool = Field(description="Deleted for good: only content-free rows remain.")
    entries: list[HistoryEntry]


MAX_EBOOK_K = 50


class EbookSearchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, description="What to look for in the ebooks; plain words work best.")
    k: Count = Field(default=5, ge=1, le=MAX_EBOOK_K, description="How many passages.")


class EbookHitOut(BaseModel):
    """One passage: a chunk of a document, where it sits, and its fused score."""

    doc_id: str = Field(description="The document's path inside the ebook folder.")
    title: str
    author: str | None = None
    chapter: str = Field(description="The chapter heading; empty for text before the first chapter.")
    ordinal: int = Field(description="The chunk's position in its document, from 0.")
    char_start: int = Field(description="Offset of the passage in the document's extracted text.")
    char_end: int
    text: str
    score: float = Field(description="Reciprocal-rank fusion of the vector and full-text ranks.")
    parts: dict[str, float] = Field(default={}, description="cosine, bm25 and each retriever's rank.")


class EbookSearchResponse(BaseModel):
    query: str
    hits: list[EbookHitOut]


class ContextBlockOut(BaseModel):
    """One block of the being's context, ready to inject."""

    id: Literal["1-A", "1-B", "2-B", "story"] = Field(
        description="1-A: SOUL.md and think.md; 1-B: the last 7 days of diary and MEMORY.md; "
        "2-B: the 5 most recently activated memories; story: STORY.md."
    )
    title: str
    text: str = Field(description="Markdown; empty when the being has none of the block's files yet.")
    tokens: int = Field(description="Estimated tokens of `text` (ASCII characters / 4, others one each).")
    sources: list[str] = Field(default=[], description="The workspace files (or memory refs) it came from.")


class ContextAlertOut(BaseModel):
    file: str = Field(
        description="The critical file, e.g. `ada/SOUL.md`; for waiting proposals "
        "`ada/reflection/pending-reflection.md`."
    )
    change: Literal["changed", "new", "deleted", "stale_proposals"] = Field(
        description="How a critical file changed, or `stale_proposals`: proposals pending for over 24 hours."
    )
    message: str = Field(description="What to tell the user, and how to keep or undo the change.")


class ContextResponse(BaseModel):
    being_id: str
    now: UtcOut
    blocks: list[ContextBlockOut]
    memories: list[MemoryRecord] = Field(default=[], description="Block 2-B's memories, most recent first.")
    alerts: list[ContextAlertOut] = Field(
        default=[],
        description="Critical files changed outside mindflow and not accepted: tell the user at the "
        "start of the conversation.",
    )
    tokens: int = Field(description="Estimated tokens of all blocks returned.")


class JournalSearchRequest(_Request):
    query: str = Field(min_length=1, description="What to look for in the being's memory files.")
    k: Count = Field(default=5, ge=1, le=MAX_K, description="How many chunks.")


class JournalHitOut(BaseModel):
    """A chunk of a memory file: read it whole with `GET journal/{path}?start=&end=`."""

    path: str = Field(description="Inside the being's folder: MEMORY.md, STORY.md, diary/<date>.md, ...")
    kind: Literal["memory", "story", "think", "diary", "daily_log"]
    heading: str = Field(description="The nearest Markdown heading above the chunk.")
    line_start: int = Field(description="First line of the chunk (1-based).")
    line_end: int = Field(description="Last line of the chunk (inclusive).")
    text: str
    score: float = Field(description="Reciprocal-rank fusion of the vector and full-text ranks.")
    parts: dict[str, float] = Field(default={}, description="cosine, bm25 and each retriever's rank.")


class JournalSearchResponse(BaseModel):
    being_id: str
    query: str
    hits: list[JournalHitOut]


class JournalFileOut(BaseModel):
    being_id: str
    path: str
    kind: Literal["memory", "story", "think", "diary", "daily_log"]
    text: str = Field(description="The lines asked for, joined by newlines.")
    line_start: int = Field(description="First line returned (1-based).")
    line_end: int = Field(description="Last line returned; line_start - 1 when none is.")
    total_lines: int


# ---- reflection with human approval: sub-agents' proposals, decisions, procedures -----------

MemoryType = Literal["message", "event", "decision", "fact", "preference", "task", "emotion", "correction"]
ProposalId = Annotated[str, Field(pattern=r"^p-[0-9a-f]{8,64}$", description="A proposal's id.")]
Decision = Literal["approve", "reject", "defer"]
Line = Annotated[str, AfterValidator(_no_nul)]


class ProposeRequest(_Request):
    """A memory a sub-agent proposes (the seed's fields), and optionally the fact it states."""

    content: Line = Field(min_length=1, description="What to remember, in a self-contained sentence or two.")
    type: MemoryType = Field(default="fact", description="The kind of memory, as an episode's `kind`.")
    confidence: float = Field(default=0.7, ge=0, le=1, description="How sure the sub-agent is, 0..1.")
    reason: Line = Field(
        min_length=1, max_length=2_000, description="Why it is worth remembering: what the reviewer reads."
    )
    entity: Line | None = Field(
        default=None, min_length=1, max_length=200, description="The fact's entity (with key and value)."
    )
    key: Line | None = Field(default=None, min_length=1, max_length=200, description="e.g. `lives_in`.")
    value: Line | None = Field(
        default=None,
        min_length=1,
        max_length=1_000,
        description="The fact's value: another value than a pending proposal's or a current fact's "
        "for the same entity and key is a CONFLICT.",
    )
    agent: Line | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="Who proposes (a lower-case name), for a token without a sub-agent role; a sub-agent "
        "token's name is its role's.",
    )


class EditIn(_Request):
    """A person's change to what they approve: a new text (a memory's content, a procedure's steps one
    per line, MEMORY.md) or a new target (a merge's survivor, a contradiction's kept fact id or value,
    the refs to archive, comma-separated)."""

    text: Line | None = Field(default=None, min_length=1, max_length=100_000)
    target: Line | None = Field(default=None, min_length=1, max_length=10_000)


class DecisionRequest(EditIn):
    """Approve (optionally with an edit), reject or defer one open proposal."""

    decision: Decision

    @model_validator(mode="after")
    def _edit_only_approved(self) -> Self:
        if self.decision != "approve" and (self.text is not None or self.target is not None):
            raise ValueError("text and target edit an approval; leave them out to reject or defer")
        return self


class DecisionsRequest(_Request):
    """Several decisions at once: recorded as `user` approval when all approve, else `partial`."""

    decisions: dict[ProposalId, Decision] = Field(
        min_length=1, max_length=500, description="Proposal id -> approve, reject or defer."
    )
    edits: dict[ProposalId, EditIn] = Field(
        default={}, max_length=500, description="Proposal id -> its edit; the id must be approved too."
    )


class DecisionsResponse(BaseModel):
    being_id: str
    approval: Literal["user", "partial"] = Field(
        description="user: every proposal decided together was approved; partial: item by item."
    )
    proposals: list[ProposalOut]


class ProcedureRequest(_Request):
    """A procedure: how the being does something, when it applies, its steps."""

    name: Line = Field(
        min_length=1,
        max_length=200,
        description="Its name, e.g. 'Release the app'; the same name adds a version.",
    )
    trigger: Line = Field(
        min_length=1, max_length=1_000, description="When it applies, e.g. 'a release is due'."
    )
    steps: list[Annotated[Line, Field(min_length=1, max_length=2_000)]] = Field(
        min_length=1, max_length=50, description="What to do, in order, one step each."
    )
    notes: Line | None = Field(default=None, max_length=4_000, description="Anything else worth knowing.")
    learned_from: list[Annotated[Line, Field(min_length=1, max_length=200)]] = Field(
        default=[], max_length=100, description="Episode or memory ids it was learned from."
    )
    confidence: float = Field(default=0.7, ge=0, le=1, description="How sure, 0..1.")


class ProcedureAccepted(BaseModel):
    being_id: str
    proposal_id: str
    status: Literal["pending", "approved"] = Field(
        description="approved: the next approvals run saves and publishes it; pending (a sub-agent's): "
        "it waits for a decision."
    )


class ProcedureOut(BaseModel):
    """A procedure's current version, as published to LanceDB."""

    procedure_ref: str = Field(description="Stable per being and name, across versions.")
    procedure_id: str = Field(description="This version: `<procedure_ref>-v<version>`.")
    name: str
    trigger: str
    steps: list[str]
    notes: str | None = None
    learned_from: list[str] = []
    confidence: float
    version: int = Field(description="1 for the first; a new version supersedes, never overwrites.")
    status: str = Field(description="Its decay status: active, fading or dormant.")
    created_at: UtcOut
    updated_at: UtcOut
    text: str = Field(description="Name, when it applies and its steps, as embedded.")
    score: float | None = Field(default=None, description="Cosine similarity to the query; none without one.")


class ProceduresResponse(BaseModel):
    being_id: str
    query: str | None = None
    procedures: list[ProcedureOut]
