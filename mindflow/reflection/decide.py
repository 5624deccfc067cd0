"""The seed's four answers to pending proposals: approve all, approve with changes, reject, partial.

The CLI, the API and the /review page all decide through `decide`: it records the decision in
the proposals store (a forget goes through mindflow.loop.forget, which applies it at once).
Approved changes are applied by the next `approvals` run, each as one audit commit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mindflow.config import Settings
from mindflow.errors import MindflowError
from mindflow.loop import forget
from mindflow.loop.proposals import Proposal, ProposalStore

DECISIONS = ("approve", "reject", "defer")
STATUS_OF = {"approve": "approved", "reject": "rejected", "defer": "deferred"}
# What "edit" changes per kind: a text, or a target (which memory survives, which value stays).
EDITABLE = {
    "merge": {"target": "survivor"},
    "contradiction": {"target": "keep"},
    "archive": {"target": "refs"},
    "core": {"text": "text"},
    "memory": {"text": "content"},
    "procedure": {"text": "steps"},
}


@dataclass
class Edit:
    text: str | None = None
    target: str | None = None


@dataclass
class DecisionReport:
    decided: list[Proposal] = field(default_factory=list)
    approval: str = "user"

    def count(self, status: str) -> int:
        return sum(1 for p in self.decided if p.status == status)


def edited_payload(proposal: Proposal, edit: Edit) -> dict[str, Any]:
    """The proposal's payload with the person's change; an edit the kind does not take is an error."""
    payload = dict(proposal.payload)
    fields = EDITABLE.get(proposal.kind, {})
    if edit.text is not None:
        if "text" not in fields:
            raise MindflowError(f"a {proposal.kind} proposal has no text to edit; edit its target instead")
        text = edit.text.strip()
        if not text:
            raise MindflowError("an edited text cannot be empty")
        payload[fields["text"]] = (
            [s.strip() for s in text.splitlines() if s.strip()]
            if (fields["text"] == "steps")
            else text + ("\n" if proposal.kind == "core" and not text.endswith("\n") else "")
        )
    if edit.target is not None:
        if "target" not in fields:
            raise MindflowError(f"a {proposal.kind} proposal has no target to change; edit its text instead")
        payload.update(_retarget(proposal, edit.target.strip()))
    payload["edited"] = True
    return payload


def _retarget(proposal: Proposal, target: str) -> dict[str, Any]:
    p = proposal.payload
    if proposal.kind == "merge":
        members = [p["survivor"], *p.get("absorbed", [])]
        if target not in members:
            raise MindflowError(f"the survivor must be one of the merged memories: {', '.join(members)}")
        return {"survivor": target, "absorbed": [m for m in members if m != target]}
    if proposal.kind == "contradiction":
        sides = {s["fact_id"]: s for s in p.get("sides", [])}
        by_value = {str(s["value"]).lower(): s for s in p.get("sides", [])}
        side = sides.get(target) or by_value.get(target.lower())
        if side is None:
            raise MindflowError("keep one of the sides: give its fact id or its value")
        return {"keep": side["fact_id"], "keep_value": side["value"]}
    refs = [r.strip() for r in target.split(",") if r.strip()]
    unknown = [r for r in refs if r not in p.get("refs", [])]
    if not refs or unknown:
        raise MindflowError(f"archive only memories the proposal names; unknown: {', '.join(unknown) or '-'}")
    return {"refs": refs}


def decide(
    settings: Settings,
    being_id: str,
    proposal_id: str,
    decision: str,
    *,
    decided_by: str,
    edit: Edit | None = None,
    approval: str = "user",
) -> Proposal:
    """Approve (with an optional edit), reject or defer one open proposal."""
    if decision not in DECISIONS:
        raise MindflowError(f"a decision is one of {', '.join(DECISIONS)}; not {decision!r}")
    store = ProposalStore(settings.proposals)
    proposal = store.get(being_id, proposal_id)
    if proposal.kind == "forget":
        if edit is not None:
            raise MindflowError("a forget is confirmed as found; narrow it with refs through POST forget")
        if decision == "approve":
            return forget.confirm(settings, being_id, proposal_id, None).proposal
        if decision == "reject":
            return forget.reject(settings, being_id, proposal_id, decided_by=decided_by)
    payload = dict(proposal.payload)
    if edit is not None and decision == "approve":
        payload = edited_payload(proposal, edit)
    payload["approval"] = approval
    return store.decide(being_id, proposal_id, STATUS_OF[decision], decided_by, payload=payload)


def decide_many(
    settings: Settings,
    being_id: str,
    decisions: dict[str, str],
    *,
    decided_by: str,
    edits: dict[str, Edit] | None = None,
) -> DecisionReport:
    """Several decisions at once (proposal id -> approve | reject | defer).

    The approval recorded with each is `user` when every proposal decided together was
    approved, else `partial` (item by item), as the audit trail's Approval field has it.
    """
    edits = edits or {}
    unknown = [i for i in edits if i not in decisions]
    if unknown:
        raise MindflowError(f"an edit needs its item approved too: {', '.join(unknown)}")
    approval = "user" if all(d == "approve" for d in decisions.values()) else "partial"
    report = DecisionReport(approval=approval)
    for proposal_id, decision in decisions.items():
        report.decided.append(
            decide(
                settings,
                being_id,
                proposal_id,
                decision,
                decided_by=decided_by,
                edit=edits.get(proposal_id),
                approval=approval,
            )
        )
    return report
