"""Routes reading a being's memories as records: one memory, pages of them, one memory's history.

Read from LanceDB (`memories`, `memory_history`) through `mindflow.records`, with the
being's marks applied at once: a forgotten memory reads as archived, pins show, a memory
deleted for good is gone (its history keeps the content-free rows).
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query, Request

from mindflow import lance, memory_history, records
from mindflow.api import models
from mindflow.api.auth import Being
from mindflow.api.params import invalid_query
from mindflow.errors import NotFound
from mindflow.loop.marks import read_marks, unfolded

RefPath = Annotated[str, Path(min_length=1, max_length=records.MAX_REF_CHARS, pattern=r"^[^\x00/]+$")]
Status = Literal["active", "dying", "dormant", "dead", "archived"]


def record_out(record: records.MemoryRecord) -> models.MemoryRecord:
    return models.MemoryRecord.model_validate(dataclasses.asdict(record))


def _fresh(service, being_id: str, ref: str):
    """The fresh-tail memory `ref` of this server (accepted, not published yet), or None."""
    # Forgotten ones too: a forgotten memory reads `archived` at once, like a published one.
    return next((m for m in service.fresh_memories(being_id, forgotten=True) if m.memory_ref == ref), None)


def memories_router(responses: dict) -> APIRouter:
    router = APIRouter(prefix="/v1/beings/{being_id}/memories", tags=["memories"], responses=responses)
    not_found = {404: {"model": models.ErrorResponse, "description": "No such memory for this being."}}
    history_tables: dict[str, lance.LatestTable] = {}

    def tables(request: Request):
        service = request.app.state.service
        path = service.settings.lance_path
        latest = history_tables.get(str(path))
        if latest is None:
            latest = history_tables[str(path)] = lance.LatestTable(path, memory_history.TABLE)
        return service, service.latest.get()[0], latest

    @router.get("", response_model=models.MemoryPage)
    def list_route(
        being_id: Being,
        request: Request,
        status: Annotated[list[Status] | None, Query(description="Only these statuses (repeatable).")] = None,
        cluster: Annotated[str | None, Query(min_length=1, max_length=200, pattern=r"^[^\x00]+$")] = None,
        since: Annotated[
            models.UtcDatetime | None, Query(description="Happened at or after (ISO 8601).")
        ] = None,
        until: Annotated[
            models.UtcUntil | None,
            Query(description="Happened at or before (ISO 8601; a date alone: through its end)."),
        ] = None,
        limit: Annotated[int, Query(ge=1, le=records.MAX_PAGE)] = records.DEFAULT_PAGE,
        cursor: Annotated[str | None, Query(min_length=1, max_length=2_000)] = None,
    ) -> models.MemoryPage:
        """A page of the being's memories, oldest first (by when they happened, then ref).

        Pass `next_cursor` back as `cursor` for the next page; it is null on the last. Paging
        through returns each memory once. Archived memories (forgotten, or archived by
        decay) are listed too, with status `archived`: filter with `status`.
        """
        problem = models.out_of_order(since, until)
        if problem is not None:
            raise invalid_query("since", problem)
        service, table, _ = tables(request)
        page = records.list_memories(
            table,
            being_id,
            service.marks.state(being_id),
            status=status,
            cluster_id=cluster,
            since=since,
            until=until,
            limit=limit,
            cursor=cursor,
        )
        return models.MemoryPage(
            being_id=being_id,
            memories=[record_out(m) for m in page.memories],
            next_cursor=page.next_cursor,
        )

    @router.get("/{ref}", response_model=models.MemoryRecord, responses=not_found)
    def get_route(being_id: Being, ref: RefPath, request: Request) -> models.MemoryRecord:
        """One memory: status, decay, pin, cluster, scene, feeling, sources and times."""
        service, table, _ = tables(request)
        state = service.marks.state(being_id)
        try:
            return record_out(records.get_memory(table, being_id, ref, state))
        except NotFound:
            fresh = _fresh(service, being_id, ref)
            if fresh is None:
                raise
            return record_out(records.fresh_record(fresh, state))

    @router.get("/{ref}/history", response_model=models.MemoryHistory, responses=not_found)
    def history_route(being_id: Being, ref: RefPath, request: Request) -> models.MemoryHistory:
        """Every change of the memory, oldest first: time, actor, run id, the fields before and after."""
        service, table, latest_history = tables(request)
        state = service.marks.state(being_id)
        marks = read_marks(service.settings.loop, being_id)
        pending = unfolded(service.settings.loop, being_id, marks)
        try:
            found = records.get_history(latest_history.get()[0], table, being_id, ref, state, marks, pending)
        except NotFound:
            fresh = _fresh(service, being_id, ref)
            if fresh is None:
                raise
            accepted = service.tail.accepted_at(being_id, fresh.source_episode_ids[0])
            found = records.fresh_history(fresh, marks, accepted)
        return models.MemoryHistory.model_validate(dataclasses.asdict(found))

    return router
