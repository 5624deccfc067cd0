"""Routes of the agent's loop: forget (find, then confirm), restore, pin, unpin, and proposals.

They write marks and proposals (append-only and atomically replaced files), never DuckDB;
every server applies a mark from the next request on, and the next run folds it in.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request

from mindflow.api import models
from mindflow.api.auth import Being
from mindflow.loop import forget
from mindflow.loop.proposals import Proposal, ProposalStore

log = logging.getLogger(__name__)
RefPath = Annotated[str, Path(min_length=1, max_length=200, pattern=r"^[^\x00/]+$")]


def _fresh(request: Request, being_id: str) -> list:
    """The being's fresh-tail memories of this server (what it accepted and has not published)."""
    return request.app.state.service.fresh_memories(being_id)


def _table(request: Request):
    return request.app.state.service.latest.get()[0]


def proposal_out(proposal: Proposal) -> models.ProposalOut:
    """The proposal with what a review shows of it: tag, title, evidence, diff, conflict."""
    from mindflow.reflection.items import describe

    item = describe(proposal)
    shown = {"tag": item.tag, "title": item.title, "evidence": item.evidence, "diff": item.diff}
    out = models.ProposalOut.model_validate(proposal, from_attributes=True)
    return out.model_copy(update={**shown, "conflict": item.conflict})


def _forget_response(proposal: Proposal) -> models.ForgetResponse:
    payload: dict[str, Any] = proposal.payload
    return models.ForgetResponse(
        being_id=proposal.being_id,
        proposal_id=proposal.proposal_id,
        status=proposal.status,
        candidates=[models.ForgetCandidate.model_validate(c) for c in payload.get("candidates", [])],
        forgotten=list(payload.get("confirmed_refs", [])) if proposal.status == "approved" else [],
        permanent=bool(payload.get("permanent")) and proposal.status == "approved",
    )


def trigger_proposals(service, being_id: str, episodes: list) -> list[str]:
    """Pending forget proposals for the forget instructions among episodes just accepted.

    The episodes are written already: a failure to search for candidates is logged and
    leaves the instruction to the ingestion, which proposes it again (same proposal id).
    """
    records = [
        {"id": e.episode_id, "text": e.text, "trigger": e.trigger, "session_id": e.session_id}
        for e in episodes
    ]
    if not any(r["trigger"] == "forget" for r in records):
        return []
    try:
        found = forget.proposals_for_triggers(
            service.settings,
            being_id,
            records,
            table=service.latest.get()[0],
            fresh=service.fresh_memories(being_id, forgotten=True),
        )
    except Exception:  # noqa: BLE001 - the episodes are kept; ingestion proposes again
        log.exception("could not open forget proposals for %s", being_id)
        return []
    return [p.proposal_id for p in found]


def loop_router(responses: dict, body: dict) -> APIRouter:
    """The routes; `responses` are every route's error answers, `body` those of a POST (400, 413)."""
    router = APIRouter(prefix="/v1/beings/{being_id}", tags=["loop"], responses=responses)
    not_found = {404: {"model": models.ErrorResponse, "description": "Unknown ref or proposal."}}
    conflict = {409: {"model": models.ErrorResponse, "description": "Already decided, or deleted for good."}}

    @router.post("/forget", response_model=models.ForgetResponse, responses={**body, **not_found, **conflict})
    def forget_route(being_id: Being, ask: models.ForgetRequest, request: Request) -> models.ForgetResponse:
        """Forget in two steps, as the Moltbot design asks.

        1. `{"query": ...}` and/or `{"refs": [...]}`: finds every candidate (memories, dormant,
           dead and archived ones included, facts, relations, the MEMORY.md lines and STORY.md chapters
           citing them) and returns them in a pending proposal. Nothing changes. Nothing found:
           no proposal is opened (`proposal_id` and `status` null, `candidates` empty).
        2. `{"proposal_id": ..., "refs": [...], "confirm": true}`: forgets those candidates (all
           when `refs` is left out). They are gone from recall, search, resonance and facts at once,
           on every server; `restore` brings them back. With `"permanent": true` the `forget` job
           deletes them everywhere, for good. `"confirm": false` rejects the proposal.
        """
        settings = request.app.state.service.settings
        if ask.proposal_id is None:
            found = forget.propose(
                settings,
                being_id,
                ask.query,
                ask.refs or [],
                created_by="user",
                table=_table(request),
                # Forgotten ones too: "no, delete it for good" confirms them permanently.
                fresh=request.app.state.service.fresh_memories(being_id, forgotten=True),
            )
            if found is None:
                return models.ForgetResponse(being_id=being_id, proposal_id=None, status=None, candidates=[])
            proposal = found
        elif ask.confirm:
            proposal = forget.confirm(
                settings, being_id, ask.proposal_id, ask.refs, permanent=ask.permanent
            ).proposal
        else:
            proposal = forget.reject(settings, being_id, ask.proposal_id)
        return _forget_response(proposal)

    @router.post(
        "/memories/{ref}/restore",
        response_model=models.RestoreResponse,
        responses={**body, **not_found, **conflict},
    )
    def restore_route(being_id: Being, ref: RefPath, request: Request) -> models.RestoreResponse:
        """Undo a soft forget: the memory is recallable again at once (409 once deleted for good)."""
        forget.restore(request.app.state.service.settings, being_id, ref)
        return models.RestoreResponse(being_id=being_id, ref=ref, restored=True)

    def _pin(being_id: str, ref: str, request: Request, value: bool) -> models.PinResponse:
        fresh_refs = [m.memory_ref for m in _fresh(request, being_id)]
        forget.pin(
            request.app.state.service.settings,
            being_id,
            ref,
            value,
            fresh_refs=fresh_refs,
            table=_table(request),
        )
        return models.PinResponse(being_id=being_id, ref=ref, pinned=value)

    @router.post(
        "/memories/{ref}/pin", response_model=models.PinResponse, responses={**body, **not_found, **conflict}
    )
    def pin_route(being_id: Being, ref: RefPath, request: Request) -> models.PinResponse:
        """Pin a memory: it never decays, always has a place among MEMORY.md's Critical Facts and
        comes first in resonance. Shown pinned at once; the next run folds it in."""
        return _pin(being_id, ref, request, True)

    @router.post(
        "/memories/{ref}/unpin",
        response_model=models.PinResponse,
        responses={**body, **not_found, **conflict},
    )
    def unpin_route(being_id: Being, ref: RefPath, request: Request) -> models.PinResponse:
        """Unpin a memory: it decays like any other from the next run on."""
        return _pin(being_id, ref, request, False)

    @router.get("/proposals", response_model=models.ProposalsResponse)
    def proposals_route(
        being_id: Being,
        request: Request,
        status: Annotated[models.ProposalStatus | None, Query(description="Only proposals with it.")] = None,
        kind: Annotated[models.ProposalKind | None, Query(description="Only proposals of this kind.")] = None,
    ) -> models.ProposalsResponse:
        """The being's proposals (forget confirmations waiting for a person, decided ones), oldest first."""
        store = ProposalStore(request.app.state.service.settings.proposals)
        found = store.list(being_id, status=status, kind=kind)
        return models.ProposalsResponse(being_id=being_id, proposals=[proposal_out(p) for p in found])

    @router.get("/proposals/{proposal_id}", response_model=models.ProposalOut, responses=not_found)
    def proposal_route(being_id: Being, proposal_id: RefPath, request: Request) -> models.ProposalOut:
        """One proposal with its payload (a forget's candidates) and its decision."""
        store = ProposalStore(request.app.state.service.settings.proposals)
        return proposal_out(store.get(being_id, proposal_id))

    return router
