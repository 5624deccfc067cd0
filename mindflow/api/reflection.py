"""Routes of reflection with human approval: sub-agents' proposals, decisions, and the procedural store.

Like the loop's routes they write proposal files only, never DuckDB: an approved change is
carried out by the next `approvals` run (one audit commit each), which also publishes procedures.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from starlette.exceptions import HTTPException

from mindflow import lance
from mindflow.api import models
from mindflow.api.auth import Being, Role, proposer, subagent_name
from mindflow.api.loop import RefPath, proposal_out
from mindflow.errors import Conflict
from mindflow.loop.proposals import OPEN, ProposalStore
from mindflow.reflection import procedures, subagent
from mindflow.reflection.decide import Edit, decide, decide_many

# Who the API records as deciding: the caller is the main agent or a person, never named by token.
DECIDED_BY = "api"


def _current_facts(service) -> subagent.FactsLookup:
    """Published facts as the API serves them: none a forget has hidden."""
    published = subagent.published_facts(service.settings.lance_path)

    def lookup(being_id: str, entity: str, key: str) -> list[dict]:
        marks = service.marks.state(being_id)
        return [
            f
            for f in published(being_id, entity, key)
            if not marks.hides(f["fact_id"], list(f.get("source_episode_ids") or []))
        ]

    return lookup


def _edit(text: str | None, target: str | None) -> Edit | None:
    return Edit(text, target) if text is not None or target is not None else None


def reflection_router(responses: dict, body: dict) -> APIRouter:
    """The routes; `responses` are every route's error answers, `body` those of a POST (400, 413)."""
    router = APIRouter(prefix="/v1/beings/{being_id}", tags=["reflection"], responses=responses)
    not_found = {404: {"model": models.ErrorResponse, "description": "Unknown proposal."}}
    conflict = {409: {"model": models.ErrorResponse, "description": "Already approved or rejected."}}

    @router.post("/proposals", status_code=201, response_model=models.ProposalOut, responses=body)
    def propose_route(
        being_id: Being, role: Role, ask: models.ProposeRequest, request: Request
    ) -> models.ProposalOut:
        """Propose a memory (what a sub-agent does instead of writing episodes).

        With `entity`, `key` and `value` it states a fact: another value than a pending proposal's
        or a current fact's for the same entity and key is flagged CONFLICT (`conflict: true`, both
        sides in `evidence`) and waits for a person whatever the mode. MINDFLOW_SUBAGENT_MODE:
        `auto` approves a proposal without conflict at once, `batch` (the default) leaves it pending
        for review, `manual` too, marked (`payload.review`) for a one-by-one decision. A sub-agent
        token (`token=being@subagent:<name>`) proposes under its name; another token may name the
        proposer in `agent` (`created_by` is then `subagent:<agent>`), else it is `api` (`mcp`
        through the MCP tools).
        """
        name = subagent_name(role)
        if name is not None and ask.agent not in (None, name):
            raise HTTPException(403, f"this token is sub-agent {name!r}: leave `agent` out")
        service = request.app.state.service
        agent = name or ask.agent
        by = proposer(role, request) if agent is None else f"subagent:{agent}"
        proposal = subagent.propose_memory(
            service.settings,
            being_id,
            agent or by,
            ask.content,
            ask.type,
            ask.confidence,
            ask.reason,
            entity=ask.entity,
            key=ask.key,
            value=ask.value,
            facts_lookup=_current_facts(service),
            created_by=by,
        )
        return proposal_out(proposal)

    @router.post(
        "/proposals/{proposal_id}/decision",
        response_model=models.ProposalOut,
        responses={**body, **not_found, **conflict},
    )
    def decision_route(
        being_id: Being, proposal_id: RefPath, ask: models.DecisionRequest, request: Request
    ) -> models.ProposalOut:
        """Approve (with an optional edit: `text` or `target`), reject or defer one open proposal.

        An approved change is applied by the next `approvals` run (a forget at once). 409 once
        approved or rejected; a deferred one can still be decided. Not for sub-agent tokens (403).
        """
        proposal = decide(
            request.app.state.service.settings,
            being_id,
            proposal_id,
            ask.decision,
            decided_by=DECIDED_BY,
            edit=_edit(ask.text, ask.target),
        )
        return proposal_out(proposal)

    @router.post(
        "/proposals/decisions",
        response_model=models.DecisionsResponse,
        responses={**body, **not_found, **conflict},
    )
    def decisions_route(
        being_id: Being, ask: models.DecisionsRequest, request: Request
    ) -> models.DecisionsResponse:
        """Several decisions at once (`approve all`, or item by item with edits).

        Recorded as approval `user` when every one approves, else `partial`. Every proposal is
        checked first: one unknown (404) or already decided (409) and none is decided.
        Not for sub-agent tokens (403).
        """
        settings = request.app.state.service.settings
        store = ProposalStore(settings.proposals)
        decided = [p for p in (store.get(being_id, i) for i in ask.decisions) if p.status not in OPEN]
        if decided:
            raise Conflict(
                "already decided, nothing changed: "
                + ", ".join(f"{p.proposal_id} ({p.status})" for p in decided)
            )
        report = decide_many(
            settings,
            being_id,
            dict(ask.decisions),
            decided_by=DECIDED_BY,
            edits={i: Edit(e.text, e.target) for i, e in ask.edits.items()},
        )
        return models.DecisionsResponse(
            being_id=being_id,
            approval=report.approval,
            proposals=[proposal_out(p) for p in report.decided],
        )

    @router.get("/procedures", response_model=models.ProceduresResponse)
    def procedures_route(
        being_id: Being,
        request: Request,
        query: Annotated[
            str | None,
            Query(
                min_length=1,
                max_length=4_000,
                pattern=r"^[^\x00]+$",
                description="What the being is about to do; without it, every procedure by name.",
            ),
        ] = None,
        k: Annotated[int, Query(ge=1, le=models.MAX_K, description="How many procedures.")] = 5,
    ) -> models.ProceduresResponse:
        """The being's current procedures nearest `query` (meaning), as the last approvals run
        published them; a new version replaces the old one here, which stays in the history."""
        service = request.app.state.service
        vector = service.vectors.get(service.check_query(query)) if query is not None else None
        table = lance.open_table(lance.reader(service.settings.lance_path), procedures.TABLE)
        found = procedures.search(table, being_id, vector, k)
        return models.ProceduresResponse(
            being_id=being_id,
            query=query,
            procedures=[models.ProcedureOut.model_validate(r) for r in found],
        )

    @router.post("/procedures", status_code=202, response_model=models.ProcedureAccepted, responses=body)
    def add_procedure_route(
        being_id: Being, role: Role, ask: models.ProcedureRequest, request: Request
    ) -> models.ProcedureAccepted:
        """Add a procedure, or a new version of one with the same name (never overwritten).

        Recorded as an approved `procedure` proposal: the next `approvals` run saves and publishes
        it, and `GET procedures` finds it from then on. A sub-agent token's procedure is a pending
        proposal instead, for the main agent or a person to decide.
        """
        name = subagent_name(role)
        proposal = procedures.propose_procedure(
            request.app.state.service.settings,
            being_id,
            ask.model_dump(exclude_none=True),
            created_by=proposer(role, request),
            approved=name is None,
        )
        return models.ProcedureAccepted(
            being_id=being_id, proposal_id=proposal.proposal_id, status=proposal.status
        )

    return router
