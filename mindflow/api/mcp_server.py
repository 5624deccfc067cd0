"""The MCP server: mindflow's memory tools for agents, over the Model Context Protocol (official SDK).

Every tool calls the read API in process (`AsyncMindflowClient` over an ASGI transport, no
socket), so a tool validates, scopes and fails exactly as the HTTP route does: an API error
comes back as an MCP tool error carrying the API's message, never as a crash of the server.

- `mindflow mcp` serves it over stdio for one local agent: the API runs inside that process,
  without tokens (the agent already has the files), and `--being` may fix the being.
- `mindflow serve` mounts it as streamable HTTP at `/mcp`: the caller's bearer token is
  checked at the door (401 without a known one) and passed through to the API, so a token
  reaches the beings it covers and no others (403 as a tool error).
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from contextlib import AsyncExitStack, redirect_stdout
from typing import Annotated, Any, Literal, TypeVar

import httpx
from fastapi import FastAPI
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import BaseModel, Field
from pydantic.fields import FieldInfo
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from mindflow.api import models
from mindflow.api.auth import MCP_HOST, TokenScopes
from mindflow.client import AsyncMindflowClient, MindflowClientError
from mindflow.errors import MindflowError
from mindflow.inbox import validate_being_id

PATH = "/mcp"
INTERNAL_URL = f"http://{MCP_HOST}"
INSTRUCTIONS = """\
mindflow is this agent's long-term memory. Each tool takes `being`, the id of the being whose
memory it is (lower-case, e.g. "ada"); a server started with --being needs none.
At the start of a conversation call get_context and tell the user about any alerts. Before
answering, recall (or resonance for a ready-to-inject block) what is relevant. Call remember
when the user asks you to remember something, or for a fact worth keeping. forget works in two
steps: call it with a query to see what would be forgotten, show the user, then call it again
with the proposal_id and confirm=true only after the user agrees; restore undoes it unless it
was permanent.
A sub-agent (a token with the role subagent:<name>) cannot remember directly: it calls propose,
and the main agent or the user approves, rejects or defers with proposals and decide. Before a
recurring task, look for a learned procedure with procedures; add_procedure records a new one."""

Being = Annotated[
    str | None,
    Field(
        description="The being whose memory this is (a lower-case id such as 'ada'). May be left "
        "out when the server was started with --being.",
    ),
]
ClientFor = Callable[[Context], AsyncMindflowClient]
Tool = TypeVar("Tool", bound=Callable[..., Any])


def _argument(field: FieldInfo, description: str | None = None) -> Any:
    """A request model's field as a tool argument: its type, bounds, validators and description
    (or `description`), without its default (the parameter's) or aliases (MCP takes one name)."""
    return Annotated[(field.annotation, *field.metadata, Field(description=description or field.description))]


def like(model: type[BaseModel], name: str, description: str) -> Any:
    """The type and bounds of `model`'s field `name`, described for a tool that splits the body."""
    return _argument(model.model_fields[name], description)


def takes(model: type[BaseModel]) -> Callable[[Tool], Tool]:
    """The tool takes the fields of `model`, the route's request body, as its arguments (into its
    `**body`), with their types, bounds, defaults and descriptions: the tool and the route cannot
    drift apart. The tool's own parameters (the context, `being`) stay; required fields come
    first, then `being`, then the optional ones."""

    def signed(tool: Tool) -> Tool:
        own = inspect.signature(tool, eval_str=True)
        kept = [p for p in own.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        fields = [
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                default=inspect.Parameter.empty if field.is_required() else field.get_default(),
                annotation=_argument(field),
            )
            for name, field in model.model_fields.items()
        ]
        required = [f for f in fields if f.default is inspect.Parameter.empty]
        optional = [f for f in fields if f.default is not inspect.Parameter.empty]
        context = [p for p in kept if p.kind is not inspect.Parameter.KEYWORD_ONLY]
        keywords = [p for p in kept if p.kind is inspect.Parameter.KEYWORD_ONLY]
        # The SDK builds a tool's input schema from inspect.signature, which honours __signature__.
        tool.__signature__ = own.replace(parameters=[*context, *required, *keywords, *optional])
        return tool

    return signed


class _Tools:
    """The tool functions, bound to how a call reaches the API and to the fixed being, if any."""

    def __init__(self, client_for: ClientFor, fixed_being: str | None):
        self.client_for = client_for
        self.fixed_being = fixed_being

    def being(self, being: str | None) -> str:
        if self.fixed_being is not None:
            if being not in (None, "", self.fixed_being):
                raise ToolError(f"this MCP server serves being {self.fixed_being!r} only, not {being!r}")
            return self.fixed_being
        if not being:
            raise ToolError("give `being`: the id of the being whose memory this is, e.g. 'ada'")
        try:
            # Checked here too: an id with "/" would reach no route at all, a bare 404.
            return validate_being_id(being)
        except MindflowError as exc:
            raise ToolError(f"422: {exc}") from None

    async def call(self, ctx: Context, method: str, *args: Any, **kwargs: Any) -> Any:
        """One API call; its error (401, 403, 404, 422, ...) becomes a tool error with its message."""
        client = self.client_for(ctx)
        try:
            return await getattr(client, method)(*args, **kwargs)
        except MindflowClientError as exc:
            raise ToolError(str(exc)) from None  # "403: this token does not cover being 'bram'"
        finally:
            await client.aclose()


def build_server(client_for: ClientFor, fixed_being: str | None = None) -> MCPServer:
    """The MCP server with every tool; `client_for(ctx)` gives a client for the call's caller."""
    tools = _Tools(client_for, fixed_being)
    # WARNING: the SDK configures the root logger when none is, and at INFO every in-process
    # API call would be logged twice (the SDK's request line and httpx's).
    server = MCPServer(name="mindflow", instructions=INSTRUCTIONS, version="1", log_level="WARNING")

    @server.tool()
    @takes(models.RecallRequest)
    async def recall(ctx: Context, *, being: Being = None, **body: Any) -> models.RecallResponse:
        """Recall the memories most relevant to a query (meaning and words, decay, recency).

        Use it before answering anything that may depend on the past: people, decisions,
        preferences, earlier events. Each memory has a `memory_ref` usable with pin and forget."""
        return await tools.call(ctx, "recall", tools.being(being), **body)

    @server.tool()
    @takes(models.ResonanceRequest)
    async def resonance(ctx: Context, *, being: Being = None, **body: Any) -> models.ResonanceResponse:
        """The [SUBCONSCIOUS RESONANCE] block for a message: up to 5 memories and facts with
        relative times ("a few days ago"), ready to put in front of the model as context."""
        return await tools.call(ctx, "resonance", tools.being(being), **body)

    @server.tool()
    @takes(models.SearchRequest)
    async def search_memory(ctx: Context, *, being: Being = None, **body: Any) -> models.SearchResponse:
        """Keyword search over memories (action, feeling, themes, dates), dormant ones included:
        for an exact name, word or date that recall may rank low."""
        return await tools.call(ctx, "search_memory", tools.being(being), **body)

    @server.tool()
    async def recall_memory(
        ctx: Context,
        cluster_id: Annotated[
            str, Field(min_length=1, description="A `cluster_id` from a memory recall returned.")
        ],
        being: Being = None,
        k: Annotated[int, Field(ge=1, le=200)] = 50,
    ) -> models.ClusterResponse:
        """Every memory of one cluster (one thread of the being's life), newest first: to follow up
        on a memory recall returned."""
        return await tools.call(ctx, "recall_memory", tools.being(being), cluster_id, k)

    @server.tool()
    async def facts(
        ctx: Context,
        being: Being = None,
        entity: Annotated[
            str | None,
            Field(description="A person, place or thing, loosely named ('Smith' finds 'Robert Smith')."),
        ] = None,
        q: Annotated[str | None, Field(description="Words searched in every fact.")] = None,
        key: Annotated[str | None, Field(description="Only facts with this key, e.g. 'lives_in'.")] = None,
        depth: Annotated[
            int, Field(ge=1, le=2, description="1: the entity's facts; 2: its neighbours'.")
        ] = 1,
    ) -> models.FactsResponse:
        """Facts of the being's knowledge graph (entity, key, value) and relations around an entity,
        or the facts matching words `q`. Give `entity`, `q`, or both."""
        if entity is None and q is None:
            raise ToolError("give `entity` (who or what), `q` (words to search facts for), or both")
        return await tools.call(ctx, "facts", tools.being(being), entity, depth, key=key, q=q)

    @server.tool()
    async def story(ctx: Context, being: Being = None) -> str:
        """The being's STORY.md: its life told in the first person, chapter by chapter (Markdown)."""
        return await tools.call(ctx, "story", tools.being(being))

    @server.tool()
    async def remember(
        ctx: Context,
        text: Annotated[
            str, Field(min_length=1, description="What to remember, as one self-contained sentence or two.")
        ],
        being: Being = None,
        importance: Annotated[float | None, Field(ge=0, le=1, description="0..1; default 0.5.")] = None,
        session_id: Annotated[str | None, Field(description="The current session id.")] = None,
    ) -> models.EpisodesResponse:
        """Store something to remember for the long term. It is recallable at once, kept with the
        remember instruction (never decays away unnoticed, listed among MEMORY.md's critical facts)."""
        return await tools.call(
            ctx, "remember", tools.being(being), text, importance=importance, session_id=session_id
        )

    @server.tool()
    async def forget(
        ctx: Context,
        being: Being = None,
        query: like(
            models.ForgetRequest, "query", "Step 1: what to forget, in words (finds the candidates)."
        ) = None,
        refs: like(
            models.ForgetRequest,
            "refs",
            "Step 1: these memory refs; step 2: only these candidates (default all).",
        ) = None,
        proposal_id: like(
            models.ForgetRequest, "proposal_id", "Step 2: the proposal step 1 returned."
        ) = None,
        confirm: like(
            models.ForgetRequest, "confirm", "Step 2: true forgets, false drops the proposal."
        ) = None,
        permanent: like(
            models.ForgetRequest, "permanent", "Step 2: delete for good everywhere (cannot be restored)."
        ) = False,
    ) -> models.ForgetResponse:
        """Forget, in two steps. 1: call with `query` (and/or `refs`): nothing changes; you get a
        pending proposal with every candidate (memories, facts, MEMORY.md lines, STORY.md chapters).
        Show them to the user. 2: only when the user agrees, call with `proposal_id` and
        `confirm: true`: they are gone from recall at once (restore brings one back, unless
        `permanent`). Nothing found: `candidates` is empty, `proposal_id` null, and there is
        nothing to confirm."""
        being_id = tools.being(being)
        if proposal_id is None:
            if confirm is not None or permanent:
                raise ToolError("confirm and permanent need the proposal_id of step 1")
            if not query and not refs:
                raise ToolError("step 1 needs `query` or `refs`: what to forget")
            return await tools.call(ctx, "forget", being_id, query, refs=refs)
        if confirm is None:
            raise ToolError("step 2 needs `confirm`: true to forget, false to drop the proposal")
        if confirm:
            return await tools.call(ctx, "confirm_forget", being_id, proposal_id, refs, permanent=permanent)
        return await tools.call(ctx, "reject_forget", being_id, proposal_id)

    @server.tool()
    async def restore(
        ctx: Context,
        ref: Annotated[
            models.Ref, Field(description="The `ref` of a memory or fact a confirmed forget hid.")
        ],
        being: Being = None,
    ) -> models.RestoreResponse:
        """Undo a forget that was not permanent: the memory (or fact) is recallable again at once.
        A tool error says 409 once it was deleted for good, 404 when nothing forgot it."""
        return await tools.call(ctx, "restore", tools.being(being), ref)

    @server.tool()
    async def pin(
        ctx: Context,
        ref: Annotated[str, Field(min_length=1, description="The memory's `memory_ref`.")],
        being: Being = None,
        pinned: Annotated[bool, Field(description="true pins, false unpins.")] = True,
    ) -> models.PinResponse:
        """Pin a memory: it never decays, always has a place among MEMORY.md's critical facts and
        comes first in resonance. `pinned: false` unpins it."""
        return await tools.call(ctx, "pin" if pinned else "unpin", tools.being(being), ref)

    @server.tool()
    async def get_context(
        ctx: Context,
        being: Being = None,
        blocks: Annotated[
            list[Literal["1-A", "1-B", "2-B", "story"]] | None,
            Field(
                description="Which blocks (default all): 1-A identity, 1-B recent life, "
                "2-B recently activated memories, story."
            ),
        ] = None,
    ) -> models.ContextResponse:
        """The being's context for this turn in one call: 1-A SOUL.md and think.md, 1-B the diary
        of the last 7 days and MEMORY.md, 2-B the 5 most recently activated memories, and STORY.md,
        each with its token estimate. If `alerts` is not empty, tell the user first."""
        return await tools.call(ctx, "get_context", tools.being(being), blocks)

    @server.tool()
    @takes(models.JournalSearchRequest)
    async def journal_memory_search(
        ctx: Context, *, being: Being = None, **body: Any
    ) -> models.JournalSearchResponse:
        """Search the being's memory files (MEMORY.md, STORY.md, think.md, diary, daily logs) by
        meaning and words. Each hit names its file and lines: read around it with journal_memory_get."""
        return await tools.call(ctx, "journal_memory_search", tools.being(being), **body)

    @server.tool()
    async def journal_memory_get(
        ctx: Context,
        path: Annotated[
            str,
            Field(
                min_length=1,
                description="MEMORY.md, STORY.md, think.md, diary/<date>.md or memory/<date>.md.",
            ),
        ],
        being: Being = None,
        start: Annotated[int | None, Field(ge=1, description="First line (1-based).")] = None,
        end: Annotated[int | None, Field(ge=1, description="Last line (inclusive).")] = None,
    ) -> models.JournalFileOut:
        """Read one of the being's memory files, whole or lines start..end."""
        return await tools.call(ctx, "journal_memory_get", tools.being(being), path, start, end)

    @server.tool()
    @takes(models.ProposeRequest)
    async def propose(ctx: Context, *, being: Being = None, **body: Any) -> models.ProposalOut:
        """Propose a memory for review, as a sub-agent does instead of remembering directly. Give
        `entity`, `key` and `value` when it states a fact: if another value is pending or already
        known for them, the answer has `conflict: true` with both sides in `evidence`, and the
        main agent or the user decides. The answer's `status` is `approved` when the server commits
        proposals without conflict automatically, else `pending`."""
        return await tools.call(ctx, "propose", tools.being(being), **body)

    @server.tool()
    async def proposals(
        ctx: Context,
        being: Being = None,
        status: Annotated[
            models.ProposalStatus | None,
            Field(description="Only these; `pending` for what waits for a decision."),
        ] = "pending",
        kind: Annotated[
            models.ProposalKind | None,
            Field(description="Only this kind; `memory` for sub-agents' proposals."),
        ] = None,
    ) -> models.ProposalsResponse:
        """The being's proposals, oldest first: changes waiting for a decision (sub-agents' memories,
        reflection's merges, archivals, contradictions, procedures, MEMORY.md rewrites, forgets).
        Show them to the user and decide each with decide."""
        return await tools.call(ctx, "proposals", tools.being(being), status, kind)

    @server.tool()
    async def decide(
        ctx: Context,
        proposal_id: Annotated[str, Field(min_length=1, description="The proposal's `proposal_id`.")],
        decision: like(
            models.DecisionRequest,
            "decision",
            "approve commits it, reject drops it, defer keeps it for later.",
        ),
        being: Being = None,
        text: like(
            models.DecisionRequest,
            "text",
            "With approve: a corrected text (a memory's content, a procedure's steps).",
        ) = None,
        target: like(
            models.DecisionRequest,
            "target",
            "With approve: another target (a merge's survivor, the fact value to keep).",
        ) = None,
    ) -> models.ProposalOut:
        """Approve, reject or defer one pending proposal, as the user decided. Approve only what the
        user agreed to, above all a proposal with `conflict: true`. Approved changes are applied by
        the next approvals run. Sub-agents cannot decide."""
        if decision != "approve" and (text is not None or target is not None):
            raise ToolError("text and target edit an approval; leave them out to reject or defer")
        return await tools.call(ctx, "decide", tools.being(being), proposal_id, decision, text, target)

    @server.tool()
    async def procedures(
        ctx: Context,
        being: Being = None,
        query: Annotated[
            str | None,
            Field(min_length=1, description="The task at hand, in words; leave out to list them all."),
        ] = None,
        k: Annotated[int, Field(ge=1, le=models.MAX_K, description="How many procedures.")] = 5,
    ) -> models.ProceduresResponse:
        """How the being does things: its learned procedures (name, when it applies, steps) nearest
        the task at hand. Look one up before a recurring task and follow its steps."""
        return await tools.call(ctx, "procedures", tools.being(being), query, k)

    @server.tool()
    @takes(models.ProcedureRequest)
    async def add_procedure(ctx: Context, *, being: Being = None, **body: Any) -> models.ProcedureAccepted:
        """Record how to do something the user taught or you worked out, as a procedure. The same
        name adds a new version (the old one is kept in the history). It is searchable with
        procedures after the next approvals run; a sub-agent's waits for approval."""
        return await tools.call(ctx, "add_procedure", tools.being(being), **body)

    @server.tool()
    @takes(models.EbookSearchRequest)
    async def search_ebooks(ctx: Context, **body: Any) -> models.EbookSearchResponse:
        """Passages of the indexed ebooks (shared by all beings), with title, chapter and score."""
        return await tools.call(ctx, "search_ebooks", **body)

    return server


def _in_process(app: FastAPI, token: str | None) -> AsyncMindflowClient:
    # No retries of 503: the caller's MCP client decides whether to try again.
    return AsyncMindflowClient(
        INTERNAL_URL, token=token, timeout=60.0, retries=0, transport=httpx.ASGITransport(app=app)
    )


def _bearer(headers) -> str | None:
    scheme, _, token = (headers.get("authorization") or "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


class MountedMCP:
    """`/mcp` on the API: the bearer token checked at the door, the SDK's streamable HTTP app inside.

    The SDK's session manager runs once per lifespan, so the inner app is built when the
    API starts (`running`), and a request before that is answered 503.
    """

    def __init__(self, app: FastAPI, scopes: TokenScopes):
        self.scopes = scopes
        self.server = build_server(lambda ctx: _in_process(app, _bearer(ctx.headers or {})))
        self._inner = None

    async def running(self, stack: AsyncExitStack) -> None:
        # Without tokens the API binds loopback only, and the SDK's DNS rebinding protection
        # (Host and Origin must be loopback) holds; with tokens, the token is the protection
        # and the server may answer under any host name.
        security = (
            None
            if not self.scopes.enabled
            else TransportSecuritySettings(enable_dns_rebinding_protection=False)
        )
        inner = self.server.streamable_http_app(
            streamable_http_path=PATH, stateless_http=True, json_response=True, transport_security=security
        )
        await stack.enter_async_context(self.server.session_manager.run())
        self._inner = inner
        stack.callback(setattr, self, "_inner", None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._inner is None:
            starting = JSONResponse(
                {"error": "the MCP endpoint is starting; retry"}, 503, headers={"Retry-After": "1"}
            )
            await starting(scope, receive, send)
            return
        if self.scopes.enabled:
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
            token = _bearer(headers)
            if token is None or self.scopes.beings_for(token) is None:
                refused = JSONResponse(
                    {"error": "missing or unknown bearer token"}, 401, headers={"WWW-Authenticate": "Bearer"}
                )
                await refused(scope, receive, send)
                return
        await self._inner(scope, receive, send)


async def serve_stdio(app: FastAPI, being: str | None = None) -> None:
    """Serve the MCP tools over stdin/stdout, with `app` (an API without tokens) in process."""
    server = build_server(lambda ctx: _in_process(app, None), fixed_being=being)
    async with AsyncExitStack() as stack:
        # stdout is the protocol's channel: whatever loading the model prints goes to stderr.
        with redirect_stdout(sys.stderr):
            await stack.enter_async_context(app.router.lifespan_context(app))
        await server.run_stdio_async()
