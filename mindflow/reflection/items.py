"""How a proposal is shown to the person deciding it: a tag, a title and its evidence.

One description serves pending-reflection.md, `mindflow review` and the /review page, so the
three always number and word the same items the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from mindflow.loop.proposals import Proposal, ProposalStore
from mindflow.models import utcnow

# Proposals older than this still wait, flagged in `mindflow status` and the context's alerts.
STALE_HOURS = 24

TAGS = {
    "forget": "FORGET",
    "merge": "MERGE",
    "archive": "ARCHIVE",
    "contradiction": "CONFLICT",
    "procedure": "PROCEDURE",
    "core": "CORE",
    "memory": "MEMORY",
}


@dataclass
class Item:
    number: int  # 1-based, in the being's pending list (oldest first)
    proposal: Proposal
    tag: str
    title: str
    evidence: list[str] = field(default_factory=list)
    diff: str | None = None  # MEMORY.md's proposed change, unified diff
    conflict: bool = False

    @property
    def proposal_id(self) -> str:
        return self.proposal.proposal_id


def _short(text: object, limit: int = 160) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe(proposal: Proposal, number: int = 0) -> Item:
    p = proposal.payload
    kind = proposal.kind
    item = Item(number, proposal, TAGS.get(kind, kind.upper()), kind)
    if kind == "forget":
        candidates = p.get("candidates", [])
        item.title = (
            f"Forget {len(candidates)} item(s) matching {_short(p.get('query') or 'the refs given', 80)!r}"
        )
        item.evidence = [f"{c.get('store')} {c.get('ref')}: {_short(c.get('text'))}" for c in candidates[:10]]
    elif kind == "merge":
        memories = p.get("memories", {})
        item.title = (
            f"Merge {len(p.get('absorbed', []))} memory(ies) into {p.get('survivor')}: "
            f"{_short(memories.get(p.get('survivor')), 100)!r}"
            + (f" (cosine {p['cosine']:.2f})" if p.get("cosine") is not None else "")
        )
        item.evidence = [f"{ref}: {_short(text)}" for ref, text in memories.items()]
        if p.get("reason"):
            item.evidence.append(f"why: {_short(p['reason'])}")
    elif kind == "archive":
        memories = p.get("memories", {})
        item.title = f"Archive {len(p.get('refs', []))} {p.get('decay_status', '')} memory(ies)".replace(
            "  ", " "
        )
        item.evidence = [f"{ref}: {_short(memories.get(ref))}" for ref in p.get("refs", [])[:15]]
    elif kind == "contradiction":
        sides = p.get("sides", [])
        values = " vs ".join(f"{s.get('value')!r}" for s in sides)
        item.title = f"{p.get('entity')} / {p.get('key')}: {values}; keep {p.get('keep_value')!r}"
        item.evidence = [
            f"{s.get('fact_id')}: {s.get('value')!r} since {s.get('valid_at', '?')}"
            + (f" (episodes {', '.join(s.get('sources', [])[:3])})" if s.get("sources") else "")
            for s in sides
        ]
        item.conflict = True
    elif kind == "procedure":
        item.title = f"Procedure {p.get('name')!r}: when {_short(p.get('trigger'), 80)}"
        item.evidence = [f"{i}. {_short(s)}" for i, s in enumerate(p.get("steps", []), 1)]
        if p.get("learned_from"):
            item.evidence.append(f"learned from: {', '.join(p['learned_from'][:8])}")
    elif kind == "core":
        item.title = (
            f"Rewrite MEMORY.md: +{p.get('added', 0)} −{p.get('removed', 0)} lines, "
            f"{p.get('tokens', 0)} tokens"
        )
        item.diff = p.get("diff") or ""
        item.evidence = [f"promote: {_short(x)}" for x in p.get("promoted", [])[:5]]
        item.evidence += [f"demote: {_short(x)}" for x in p.get("demoted", [])[:5]]
    elif kind == "memory":
        item.title = (
            f"{p.get('agent', 'sub-agent')} proposes a {p.get('type', 'fact')}: "
            f"{_short(p.get('content'), 120)!r} "
            f"(confidence {float(p.get('confidence', 0)):.2f})"
        )
        item.evidence = [f"why: {_short(p.get('reason'))}"] if p.get("reason") else []
        conflict = p.get("conflict")
        if conflict:
            item.conflict = True
            item.tag = "CONFLICT"
            item.evidence += [f"conflicts with {c.get('what')}: {_short(c.get('text'))}" for c in conflict]
    if proposal.created_by:
        item.evidence.append(f"proposed by {proposal.created_by}")
    return item


def pending_items(store: ProposalStore, being_id: str) -> list[Item]:
    """The being's pending and deferred proposals, numbered 1.. oldest first."""
    found = store.list(being_id, status="pending") + store.list(being_id, status="deferred")
    found.sort(key=lambda p: (p.created_at, p.proposal_id))
    return [describe(p, i) for i, p in enumerate(found, 1)]


def stale_proposals(store: ProposalStore, being_id: str, now: datetime | None = None) -> list[str]:
    """Ids of the being's proposals pending for more than STALE_HOURS."""
    now = now or utcnow()
    return [
        p.proposal_id
        for p in store.list(being_id, status="pending")
        if (now - p.created_at).total_seconds() > STALE_HOURS * 3600
    ]
