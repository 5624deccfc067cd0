"""The FastAPI application: routes, authentication, size limits and JSON errors."""

from __future__ import annotations

import gc
import json
import logging
import time
from collections.abc import Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import PurePath
from typing import Annotated, Any

import anyio
import numpy as np
from fastapi import APIRouter, FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi_offline import FastAPIOffline
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mindflow import lance
from mindflow.api import models
from mindflow.api.auth import Being, TokenScopes, parse_tokens
from mindflow.api.ebooks import ebooks_router
from mindflow.api.episodes import InboxBusy, InvalidEpisodes, append_episodes
from mindflow.api.loop import loop_router, trigger_proposals
from mindflow.api.memories import memories_router
from mindflow.api.reflection import reflection_router
from mindflow.api.review_page import review_router
from mindflow.api.service import RecallService
from mindflow.api.workspace import workspace_router
from mindflow.config import Settings, load_settings
from mindflow.errors import Conflict, MindflowError, NotFound, OutsideWorkspace
from mindflow.graph import neighbourhood, search_facts
from mindflow.recall import RecallConfig

log = logging.getLogger(__name__)

ERRORS = {
    400: {
        "model": models.ErrorResponse,
        "description": "Malformed request: a body that is not UTF-8, or an invalid Content-Length.",
    },
    401: {"model": models.ErrorResponse, "description": "Missing or unknown bearer token."},
    403: {"model": models.ErrorResponse, "description": "The token does not cover this being."},
    413: {"model": models.ErrorResponse, "description": "Request body over MINDFLOW_API_MAX_BODY_BYTES."},
    422: {"model": models.ErrorResponse, "description": "Invalid being id or request."},
}
# What a route with a JSON body can answer besides its own: BodyLimit's 400 and 413.
BODY = (400, 413)
# How long a stopping server waits for the recall events still being written.
EVENTS_FLUSH_TIMEOUT = 10.0


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI `responses` of these error statuses, each with the error model."""
    return {code: ERRORS[code] for code in codes}


def _model_name(model: str) -> str:
    """A model given as a local path by its folder's name: the open routes show no paths."""
    if model.startswith(("/", ".", "~")) or "\\" in model:
        return PurePath(model.replace("\\", "/")).name or "local model"
    return model


def _error(status: int, message: str, details: list[Any] | None = None, headers=None) -> JSONResponse:
    body = {"error": message} if details is None else {"error": message, "details": details}
    return JSONResponse(body, status_code=status, headers=headers)


class BodyLimit:
    """413 for bodies over the limit, whether announced by Content-Length or streamed in chunks."""

    def __init__(self, app: ASGIApp, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS", "DELETE"):
            await self.app(scope, receive, send)
            return
        too_big = _error(413, f"request body over {self.max_bytes:,} bytes")
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None:
            try:
                if int(declared) > self.max_bytes:
                    await too_big(scope, receive, send)
                    return
            except ValueError:
                await _error(400, "invalid Content-Length header")(scope, receive, send)
                return
        # Read the whole (bounded) body first, then replay it to the app.
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await too_big(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def _row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A graph row for JSON, without its embedding."""
    return {str(k): _plain(v) for k, v in row.items() if k != "vector"}


def _plain(value: Any) -> Any:
    """Graph rows as JSON-ready values (numpy scalars and arrays included)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def create_app(
    settings: Settings | None = None,
    *,
    recall_config: RecallConfig | None = None,
    tokens: str | Mapping[str, Any] | TokenScopes | None = None,
    mcp: bool = True,
) -> FastAPI:
    """The read API over `settings`' LanceDB and workspace; `tokens` overrides MINDFLOW_API_TOKENS.

    With `mcp`, the MCP server is mounted at /mcp (streamable HTTP, the same tokens)."""
    settings = settings or load_settings()
    if tokens is None and settings.api_tokens is not None:
        tokens = settings.api_tokens.get_secret_value()
    scopes = parse_tokens(tokens)
    service = RecallService(settings, recall_config)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        lance.ensure(settings.lance_path)
        # The first recall should not pay for loading the model.
        await anyio.to_thread.run_sync(service.load_model)
        if service.rankers is not None:
            await anyio.to_thread.run_sync(service.rankers.start)
        # The objects alive once the server is up (its imports, the app, the model's session: over
        # 150,000) stay out of the garbage collector's full passes. Each pass walked them all and
        # held the GIL meanwhile, stalling every request: at 100,000 memories with 8 clients a pass
        # came every ~15 s and took 137-142 ms (the slowest recall 170-180 ms); frozen, 52-64 ms
        # (the slowest 98-117 ms), three alternating pairs of 4,000 requests.
        gc.freeze()
        try:
            async with AsyncExitStack() as stack:
                if mounted is not None:
                    await mounted.running(stack)
                yield
        finally:
            gc.unfreeze()  # an app of a longer process (a test, an agent) gives them back
        # The recall events submitted before the server stopped (a killed one loses the last few).
        if not service.events.flush(EVENTS_FLUSH_TIMEOUT):
            log.warning("recall events were still being written when the server stopped")
        service.hot.close()
        if service.rankers is not None:
            service.rankers.close()

    # FastAPIOffline is FastAPI with /docs and /redoc served from the files its package
    # ships: the default pages load Swagger UI and ReDoc from a CDN, blank without internet.
    app = FastAPIOffline(
        title="mindflow recall API",
        version="1",
        summary="Long-term memory for AI agents: recall, resonance, search, facts, story, episodes.",
        lifespan=lifespan,
    )
    app.state.service = service
    app.state.tokens = scopes
    app.add_middleware(BodyLimit, max_bytes=settings.api_max_body_bytes)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        details = [
            {"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
            for e in exc.errors()
        ]
        summary = (
            "; ".join(f"{'.'.join(str(p) for p in d['loc'])}: {d['msg']}" for d in details[:5])
            or "invalid request"
        )
        return _error(422, summary, json.loads(json.dumps(details, default=str)))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        return _error(exc.status_code, str(exc.detail), headers=exc.headers)

    @app.exception_handler(InvalidEpisodes)
    async def invalid_episodes(request: Request, exc: InvalidEpisodes) -> JSONResponse:
        return _error(422, str(exc), exc.problems)

    @app.exception_handler(NotFound)
    async def not_found(request: Request, exc: NotFound) -> JSONResponse:
        return _error(404, str(exc))

    @app.exception_handler(OutsideWorkspace)
    async def outside(request: Request, exc: OutsideWorkspace) -> JSONResponse:
        return _error(400, str(exc))

    @app.exception_handler(Conflict)
    async def conflict(request: Request, exc: Conflict) -> JSONResponse:
        return _error(409, str(exc))

    @app.exception_handler(MindflowError)
    async def user_error(request: Request, exc: MindflowError) -> JSONResponse:
        return _error(422, str(exc))

    @app.exception_handler(InboxBusy)
    async def busy(request: Request, exc: InboxBusy) -> JSONResponse:
        return _error(503, str(exc), headers={"Retry-After": "1"})

    @app.exception_handler(Exception)
    async def internal(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return _error(500, f"internal error ({exc.__class__.__name__}); see the server log")

    v1 = APIRouter(prefix="/v1/beings/{being_id}", responses=errors(401, 403, 422))

    @v1.post("/recall", response_model=models.RecallResponse, tags=["recall"], responses=errors(*BODY))
    def recall(being_id: Being, body: models.RecallRequest) -> Response:
        """Hybrid recall of active memories: vector + full text, decay, recency, MMR.

        The `X-Mindflow-Recall` header says where the candidates came from: `hot` (the
        being's in-memory index) or `lance` (read from LanceDB while that index is built);
        `Server-Timing` how long the recall took inside the server (`recall;dur=<ms>`).
        """
        started = time.perf_counter()
        answer = service.recall(being_id, body)
        headers = {
            "X-Mindflow-Recall": service.served_from(),
            "Server-Timing": f"recall;dur={(time.perf_counter() - started) * 1000:.1f}",
        }
        # Serialised here and sent as it is: `answer` is a RecallResponse already, which FastAPI
        # would validate again on a thread-pool thread of its own (a second hand-off per recall)
        # before serialising it. `response_model` still documents the answer.
        return Response(answer.model_dump_json(), media_type="application/json", headers=headers)

    @v1.post("/resonance", response_model=models.ResonanceResponse, tags=["recall"], responses=errors(*BODY))
    def resonance(being_id: Being, body: models.ResonanceRequest) -> models.ResonanceResponse:
        """Up to 5 memories with relative times, rendered as the [SUBCONSCIOUS RESONANCE] block."""
        return service.resonance(being_id, body)

    @v1.post("/search_memory", response_model=models.SearchResponse, tags=["recall"], responses=errors(*BODY))
    def search(being_id: Being, body: models.SearchRequest) -> models.SearchResponse:
        """Keyword search over action, feeling, themes and `when`; dormant memories included."""
        return service.search(being_id, body)

    @v1.get("/clusters/{cluster_id}/memories", response_model=models.ClusterResponse, tags=["recall"])
    def cluster(
        being_id: Being,
        cluster_id: Annotated[str, Path(min_length=1, max_length=200, pattern=r"^[^\x00]+$")],
        k: Annotated[int, Query(ge=1, le=200)] = 50,
    ) -> models.ClusterResponse:
        """A cluster's memories, newest first (the seed's recall_memory)."""
        return service.cluster(being_id, cluster_id, k)

    @v1.get("/facts", response_model=models.FactsResponse, tags=["graph"])
    def facts(
        being_id: Being,
        entity: Annotated[str | None, Query(min_length=1, max_length=200, pattern=r"^[^\x00]+$")] = None,
        depth: Annotated[int, Query(ge=1, le=2)] = 1,
        key: Annotated[
            str | None,
            Query(
                min_length=1, max_length=200, pattern=r"^[^\x00]+$", description="Only facts with this key."
            ),
        ] = None,
        q: Annotated[
            str | None,
            Query(
                min_length=1,
                max_length=1_000,
                pattern=r"^[^\x00]+$",
                description="Words searched in every fact's entity, key and value (full text).",
            ),
        ] = None,
        k: Annotated[int, Query(ge=1, le=200, description="Most facts a `q` search returns.")] = 20,
    ) -> models.FactsResponse:
        """Facts and relations around an entity (up to two hops), or the facts matching `q`.

        The entity may be loosely named: an alias, another case or spelling (`zoe` for `Zoë`),
        or some of its words (`Smith` for `Robert Smith`); `resolved_by` says how it was found.
        Each fact returned counts as an access (its activation rises at the next decay run).
        """
        if entity is None and q is None:
            raise MindflowError("give an entity, q (words to search facts for), or both")
        marks = service.marks.state(being_id)

        def kept(rows: list, key: str) -> list:
            return [r for r in rows if not marks.hides(r[key], list(r.get("source_episode_ids") or []))]

        if entity is not None:
            found = neighbourhood(settings.lance_path, being_id, entity, depth, key=key)
        else:
            found = {"entity": "", "facts": [], "relations": [], "neighbours": [], "resolved_by": None}
        if q is not None:
            matched = search_facts(settings.lance_path, being_id, q, k=k, key=key)
            if entity is not None:
                allowed = {f["fact_id"] for f in found["facts"]}
                matched = [f for f in matched if f["fact_id"] in allowed]
            found["facts"] = matched
        found["facts"] = kept(found.get("facts", []), "fact_id")
        found["relations"] = kept(found.get("relations", []), "relation_id")
        service.record_fact_access(being_id, [f["fact_id"] for f in found["facts"]])
        return models.FactsResponse(
            being_id=being_id,
            entity=found.get("entity") or entity or "",
            depth=depth,
            resolved_by=found.get("resolved_by"),
            facts=[_row(f) for f in found.get("facts", [])],
            relations=[_row(r) for r in found.get("relations", [])],
            neighbours=[str(n) for n in found.get("neighbours", [])],
        )

    @v1.get(
        "/story",
        tags=["story"],
        response_class=Response,
        responses={
            200: {"content": {"text/markdown": {"schema": {"type": "string"}}}, "description": "STORY.md"},
            404: {"model": models.ErrorResponse, "description": "No story yet."},
        },
    )
    def story(being_id: Being) -> Response:
        """The being's STORY.md, as the narrative job last wrote it."""
        path = settings.workspace / being_id / "STORY.md"
        if not path.is_file():
            raise HTTPException(
                404, f"no STORY.md for {being_id!r} yet: the narrative job writes it after the first patrol"
            )
        return Response(path.read_text(encoding="utf-8", errors="replace"), media_type="text/markdown")

    @v1.post(
        "/episodes",
        response_model=models.EpisodesResponse,
        tags=["episodes"],
        responses={
            **errors(*BODY),
            409: {"model": models.ErrorResponse, "description": "An episode was permanently forgotten."},
            503: {"model": models.ErrorResponse, "description": "Inbox busy; retry."},
        },
    )
    def episodes(being_id: Being, body: models.EpisodesRequest) -> models.EpisodesResponse:
        """Append episodes to the being's inbox, all or none; ingestion picks them up.

        422 when one is invalid, or reuses the id of an episode written before with other text
        (the inbox files pending or ingested within MINDFLOW_TAIL_DONE_WINDOW_HOURS); the same
        id with the same text is a retry, stored once.

        Recall, resonance and search_memory return them from the next request on (as `fresh`
        memories until the form run has published them)."""
        limit = settings.api_max_episodes
        if len(body.episodes) > limit:
            raise MindflowError(f"{len(body.episodes):,} episodes in one request; the limit is {limit:,}")
        records = [e.model_dump(exclude_none=True) for e in body.episodes]
        report = append_episodes(
            settings.inbox,
            being_id,
            records,
            max_chars=settings.max_episode_chars,
            deleted=service.deleted(being_id),
            known=lambda ids: service.tail.known(being_id, ids),
        )
        # Recalled from the very next request of this server (others find the file within a second).
        service.tail.add(being_id, report.episodes)
        proposals = trigger_proposals(service, being_id, report.episodes)
        return models.EpisodesResponse(
            being_id=being_id,
            ids=report.ids,
            heartbeats=report.heartbeats,
            file=report.path.name,
            forget_proposals=proposals,
        )

    app.include_router(v1)
    app.include_router(loop_router(errors(401, 403, 422), errors(*BODY)))
    app.include_router(reflection_router(errors(401, 403, 422), errors(*BODY)))
    app.include_router(memories_router(errors(401, 403, 422)))
    app.include_router(ebooks_router(errors(*BODY, 401, 422)))
    app.include_router(workspace_router(errors(401, 403, 422), errors(*BODY)))
    app.include_router(review_router())
    mounted = None
    if mcp:
        from mindflow.api.mcp_server import PATH, MountedMCP

        mounted = MountedMCP(app, scopes)
        app.add_route(PATH, mounted, methods=["GET", "POST", "DELETE"], include_in_schema=False)

    model = _model_name(settings.embedding_model)

    @app.get("/healthz", response_model=models.Health, tags=["health"])
    def healthz() -> models.Health:
        """The process is up."""
        return models.Health(status="ok")

    @app.get(
        "/readyz",
        response_model=models.Ready,
        tags=["health"],
        responses={503: {"model": models.ErrorResponse, "description": "Not ready."}},
    )
    def readyz() -> Any:
        """The model is loaded and the LanceDB folder is readable; open, so it names no paths."""
        if not service.model_ready:
            return _error(503, f"not ready: the embedding model {model!r} is still loading")
        if not service.lance_readable():
            return _error(
                503,
                "not ready: the LanceDB folder (lance/ in MINDFLOW_HOME) is missing or not readable; "
                "check the server's MINDFLOW_HOME and the folder's permissions",
            )
        rankers = service.rankers.alive() if service.rankers is not None else 0
        return models.Ready(status="ready", model=model, rankers=rankers)

    return app
