"""Routes reading the being's workspace: its context in one call, and its memory files.

`GET context` assembles the blocks seed 002 injects at every turn; `POST journal/search`
(`journal_memory_search`) searches the chunks of MEMORY.md, STORY.md, think.md, the diary and
the daily logs; `GET journal/{path}` (`journal_memory_get`) reads one of those files. Every
path is resolved inside the being's folder (`mindflow.journal_files`): one that leaves it is a 400.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request

from mindflow import context, journal_files, journal_index, records
from mindflow.api import models
from mindflow.api.auth import Being
from mindflow.api.params import invalid_query
from mindflow.errors import MindflowError
from mindflow.models import utcnow


def workspace_router(responses: dict, body: dict) -> APIRouter:
    """`responses` are every route's error answers, `body` those of a POST (400, 413)."""
    router = APIRouter(prefix="/v1/beings/{being_id}", responses=responses)
    bad_path = {
        400: {"model": models.ErrorResponse, "description": "A path outside the being's memory files."},
        404: {"model": models.ErrorResponse, "description": "No such memory file yet."},
    }

    @router.get("/context", response_model=models.ContextResponse, tags=["context"])
    def context_route(
        being_id: Being,
        request: Request,
        blocks: Annotated[
            str | None,
            Query(
                max_length=100,
                pattern=r"^[A-Za-z0-9_,\- ]*$",
                description="Comma-separated blocks to return (`1-A,1-B,2-B,story`); all by default.",
            ),
        ] = None,
    ) -> models.ContextResponse:
        """What the being needs at the start of a turn, in one call.

        Block 1-A is SOUL.md and think.md, 1-B the diary entries of the last 7 days and
        MEMORY.md, 2-B the 5 memories a recall reached most recently, `story` STORY.md; each
        with its estimated tokens. `alerts` lists critical files (SOUL.md, IDENTITY.md) changed
        outside mindflow and not accepted: tell the user at the start of the conversation.
        """
        service = request.app.state.service
        try:
            chosen = context.parse_blocks(blocks)
        except MindflowError as exc:
            raise invalid_query("blocks", str(exc)) from None
        state = service.marks.state(being_id)
        fresh = [records.fresh_record(m, state) for m in service.fresh_memories(being_id)]
        found = context.assemble(
            service.settings, being_id, service.latest.get()[0], state, utcnow(), chosen, fresh
        )
        return models.ContextResponse(
            being_id=being_id,
            now=found.now,
            blocks=[models.ContextBlockOut.model_validate(dataclasses.asdict(b)) for b in found.blocks],
            memories=[models.MemoryRecord.model_validate(dataclasses.asdict(m)) for m in found.memories],
            alerts=[models.ContextAlertOut.model_validate(dataclasses.asdict(a)) for a in found.alerts],
            tokens=found.tokens,
        )

    @router.post(
        "/journal/search", response_model=models.JournalSearchResponse, tags=["journal"], responses=body
    )
    def journal_search(
        being_id: Being, ask: models.JournalSearchRequest, request: Request
    ) -> models.JournalSearchResponse:
        """journal_memory_search: hybrid search of the being's memory files, chunk by chunk.

        MEMORY.md, STORY.md, think.md, `diary/*.md` and the `memory/*.md` daily logs, as the
        `journal_chunks` asset last indexed them. Each hit names its file and lines: read more
        around it with `GET journal/{path}?start=&end=`.
        """
        service = request.app.state.service
        query = service.check_query(ask.query)
        table = journal_index.open_chunks(service.settings.lance_path)
        hits = journal_index.search(table, being_id, query, service.vectors.get(query), ask.k)
        return models.JournalSearchResponse(
            being_id=being_id,
            query=query,
            hits=[models.JournalHitOut.model_validate(dataclasses.asdict(h)) for h in hits],
        )

    @router.get(
        "/journal/{path:path}", response_model=models.JournalFileOut, tags=["journal"], responses=bad_path
    )
    def journal_get(
        being_id: Being,
        path: Annotated[str, Path(max_length=journal_files.MAX_PATH_CHARS, description="e.g. `MEMORY.md`")],
        request: Request,
        start: Annotated[int | None, Query(ge=1, le=10_000_000, description="First line (1-based).")] = None,
        end: Annotated[int | None, Query(ge=1, le=10_000_000, description="Last line (inclusive).")] = None,
    ) -> models.JournalFileOut:
        """journal_memory_get: one memory file of the being, or lines `start`..`end` of it.

        MEMORY.md, STORY.md, think.md, `diary/<date>.md` or `memory/<date>.md`. A path that
        leaves the being's folder (`..`, an absolute path, a link leading out) is a 400.
        """
        service = request.app.state.service
        found = journal_files.resolve(service.settings.workspace, being_id, path)
        lines = journal_files.read_lines(found, start, end)
        return models.JournalFileOut(being_id=being_id, **dataclasses.asdict(lines))

    return router
