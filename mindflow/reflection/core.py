"""Phase 4, rewrite core: a proposed MEMORY.md with its diff against the current one.

In review mode the narrative job's MEMORY.md rewrites take the same way. A being has at most
one pending `core` proposal: a newer one replaces it (the older is rejected as superseded).
"""

from __future__ import annotations

import difflib
import re

from mindflow.config import Settings
from mindflow.loop.proposals import ProposalStore

_ITEM = re.compile(r"^- (.+)$", re.MULTILINE)


def core_diff(current: str, proposed: str, being_id: str) -> tuple[str, int, int]:
    """(unified diff, lines added, lines removed) of MEMORY.md."""
    lines = list(
        difflib.unified_diff(
            current.splitlines(keepends=True),
            proposed.splitlines(keepends=True),
            fromfile=f"{being_id}/MEMORY.md (current)",
            tofile=f"{being_id}/MEMORY.md (proposed)",
        )
    )
    added = sum(1 for line in lines if line.startswith("+") and not line.startswith("+++"))
    removed = sum(1 for line in lines if line.startswith("-") and not line.startswith("---"))
    return "".join(lines), added, removed


def propose_core(
    settings: Settings,
    being_id: str,
    text: str,
    report,
    *,
    created_by: str,
    reflection_id: str | None = None,
) -> str | None:
    """A pending `core` proposal for `text` (None when MEMORY.md already says it)."""
    path = settings.workspace / being_id / "MEMORY.md"
    current = path.read_text(encoding="utf-8") if path.is_file() else ""
    store = ProposalStore(settings.proposals)
    waiting = store.list(being_id, status="pending", kind="core")
    if text == current or any(p.payload.get("text") == text for p in waiting):
        return next((p.proposal_id for p in waiting if p.payload.get("text") == text), None)
    # A rewrite a person rejected is not asked again until the stores call for a different one.
    if any(
        p.payload.get("text") == text and not p.payload.get("superseded_by")
        for p in store.list(being_id, status="rejected", kind="core")
    ):
        return None
    diff, added, removed = core_diff(current, text, being_id)
    # A block's placeholder line is not an item to promote or demote.
    now_items = set(_ITEM.findall(current)) - {"(nothing yet)"}
    new_items = set(_ITEM.findall(text)) - {"(nothing yet)"}
    proposal = store.create(
        being_id,
        "core",
        {
            "text": text,
            "diff": diff,
            "added": added,
            "removed": removed,
            "tokens": report.tokens,
            "mode": report.mode,
            "promoted": sorted(new_items - now_items),
            "demoted": sorted(now_items - new_items),
            "reflection_id": reflection_id,
            "finding": "core:" + being_id,
        },
        created_by=created_by,
    )
    for older in waiting:
        store.decide(
            being_id,
            older.proposal_id,
            "rejected",
            created_by,
            payload={**older.payload, "superseded_by": proposal.proposal_id},
        )
    return proposal.proposal_id
