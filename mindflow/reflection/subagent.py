"""Sub-agents' memory proposals: checked, flagged on a conflict, then committed or queued as the mode says.

A sub-agent never writes episodes. It proposes a memory (the seed's content, type, confidence,
reason); optionally the fact it states (entity, key, value). A proposal whose fact gives
another value than a pending proposal or a current fact of the same entity and key is flagged
CONFLICT with both sides, and never committed without a person. Modes (MINDFLOW_SUBAGENT_MODE):
auto approves the others at once (the approvals run appends them to the inbox), batch (the
default) leaves them pending for the next review, manual too, marked for one-by-one decisions.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from mindflow import graph
from mindflow.config import Settings
from mindflow.errors import MindflowError
from mindflow.inbox import BEING_ID_PATTERN
from mindflow.loop.proposals import OPEN, Proposal, ProposalStore, new_proposal_id
from mindflow.models import EPISODE_KINDS
from mindflow.reflection.decide import decide

AUTO_DECIDER = "subagent_mode:auto"
MAX_REASON_CHARS = 2_000
MAX_NAME_CHARS = 200  # an entity or a key
MAX_VALUE_CHARS = 1_000
# (being, entity, key) -> the being's current facts of that entity and key (dicts with at least
# fact_id, entity, key, value). The read API cannot open DuckDB: it reads the published facts.
FactsLookup = Callable[[str, str, str], list[dict[str, Any]]]


def published_facts(lance_path: Path) -> FactsLookup:
    """Current facts as the last graph publish left them in LanceDB (entity names resolved loosely)."""

    def lookup(being_id: str, entity: str, key: str) -> list[dict[str, Any]]:
        return graph.neighbourhood(lance_path, being_id, entity, depth=1, key=key)["facts"]

    return lookup


def _same(a: object, b: object) -> bool:
    """Entities, keys and values compare without case and extra spaces."""
    return " ".join(str(a).split()).casefold() == " ".join(str(b).split()).casefold()


def _checked(
    settings: Settings,
    agent: str,
    content: str,
    type: str,
    confidence: float,
    reason: str,
    fact: tuple[str | None, str | None, str | None],
) -> None:
    if not BEING_ID_PATTERN.fullmatch(agent or ""):
        raise MindflowError(
            f"invalid sub-agent name {agent!r}: a lower-case slug like a being id, e.g. 'scout'"
        )
    if not content or not content.strip():
        raise MindflowError("a proposed memory needs its content: what to remember, in a sentence or two")
    if len(content) > settings.max_episode_chars:
        raise MindflowError(
            f"content has {len(content):,} characters; the limit is {settings.max_episode_chars:,} "
            "(MINDFLOW_MAX_EPISODE_CHARS): propose one memory per proposal"
        )
    if type not in EPISODE_KINDS:
        raise MindflowError(f"unknown memory type {type!r}; use one of {', '.join(sorted(EPISODE_KINDS))}")
    if isinstance(confidence, bool) or not 0.0 <= float(confidence) <= 1.0:
        raise MindflowError(f"confidence is a number in [0, 1], not {confidence!r}")
    if len(reason or "") > MAX_REASON_CHARS:
        raise MindflowError(f"reason has {len(reason):,} characters; the limit is {MAX_REASON_CHARS:,}")
    given = [f for f in fact if f is not None and str(f).strip()]
    if given and len(given) < 3:
        raise MindflowError(
            "entity, key and value go together: the fact the memory states, e.g. "
            "entity 'Lena', key 'lives_in', value 'Berlin'; give all three or none"
        )
    entity, key, value = fact
    if given and (len(entity) > MAX_NAME_CHARS or len(key) > MAX_NAME_CHARS or len(value) > MAX_VALUE_CHARS):
        raise MindflowError(
            f"entity and key have at most {MAX_NAME_CHARS} characters, value at most {MAX_VALUE_CHARS}"
        )


def _side(what: str, ref: str, text: str, value: str) -> dict[str, str]:
    """One side of a conflict, as the person deciding sees it."""
    return {"what": what, "ref": ref, "text": text, "value": value}


def conflicting_proposals(
    store: ProposalStore, being_id: str, entity: str, key: str, value: str
) -> list[Proposal]:
    """The being's open memory proposals stating another value for the same entity and key."""
    return [
        p
        for status in OPEN
        for p in store.list(being_id, status=status, kind="memory")
        if p.payload.get("entity") is not None
        and _same(p.payload["entity"], entity)
        and _same(p.payload.get("key"), key)
        and not _same(p.payload.get("value"), value)
    ]


def conflicting_facts(
    facts_lookup: FactsLookup, being_id: str, entity: str, key: str, value: str
) -> list[dict[str, Any]]:
    """The being's current facts of the same entity and key with another value."""
    return [f for f in facts_lookup(being_id, entity, key) if not _same(f.get("value"), value)]


def propose_memory(
    settings: Settings,
    being_id: str,
    agent: str,
    content: str,
    type: str = "fact",
    confidence: float = 0.7,
    reason: str = "",
    entity: str | None = None,
    key: str | None = None,
    value: str | None = None,
    facts_lookup: FactsLookup | None = None,
    created_by: str | None = None,
) -> Proposal:
    """A sub-agent's memory proposal (kind `memory`), its conflicts flagged, decided as the mode says.

    `agent` is the proposer's name; `created_by` who made it (default `subagent:<agent>`; the
    main agent proposing unnamed is `api` or `mcp`). `facts_lookup` defaults to the facts
    published in LanceDB (settings.lance_path)."""
    _checked(settings, agent, content, type, confidence, reason, (entity, key, value))
    store = ProposalStore(settings.proposals)
    proposal_id = new_proposal_id()
    content = content.strip()
    fact = entity is not None and bool(str(entity).strip())
    entity, key, value = (" ".join(str(v).split()) if fact else None for v in (entity, key, value))
    others: list[Proposal] = []
    conflict: list[dict[str, str]] = []
    if fact:
        others = conflicting_proposals(store, being_id, entity, key, value)
        conflict += [
            _side(
                f"proposal {p.proposal_id}", p.proposal_id, p.payload.get("content", ""), p.payload["value"]
            )
            for p in others
        ]
        lookup = facts_lookup or published_facts(settings.lance_path)
        conflict += [
            _side(
                f"fact {f['fact_id']}",
                f["fact_id"],
                f"{f.get('entity', entity)} / {f.get('key', key)}: {f.get('value')}",
                str(f.get("value")),
            )
            for f in conflicting_facts(lookup, being_id, entity, key, value)
        ]
    mode = settings.subagent_mode
    payload = {
        "content": content,
        "type": type,
        "confidence": float(confidence),
        "reason": (reason or "").strip(),
        "agent": agent,
        "entity": entity,
        "key": key,
        "value": value,
        "conflict": conflict,
        "review": mode,
    }
    by = created_by or f"subagent:{agent}"
    proposal = store.create(being_id, "memory", payload, by, proposal_id=proposal_id)
    # Both sides of a conflict show it: whoever reviews either one sees the other.
    mine = _side(f"proposal {proposal_id}", proposal_id, content, value or "")
    for other in others:
        current = store.get(being_id, other.proposal_id)
        if current.status in OPEN:
            store.rewrite(
                being_id,
                other.proposal_id,
                {**current.payload, "conflict": [*current.payload.get("conflict", []), mine]},
            )
    if mode == "auto" and not conflict:
        proposal = decide(
            settings, being_id, proposal_id, "approve", decided_by=AUTO_DECIDER, approval="auto"
        )
    return proposal
