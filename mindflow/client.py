"""Client of the recall API for agents: typed results, a timeout, retries on connection errors and 503.

from mindflow.client import MindflowClient

with MindflowClient("http://127.0.0.1:8765", token="tokA") as memory:
    for m in memory.recall("ada", "what did Lena decide about the login?").memories:
        print(m.ts, m.text)
"""

from __future__ import annotations

import functools
import ssl
import warnings
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel
from pydantic_core import to_jsonable_python
from tenacity import (
    AsyncRetrying,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from mindflow.api.models import (
    ClusterResponse,
    ContextResponse,
    DecisionsResponse,
    EbookSearchResponse,
    EpisodeIn,
    EpisodesResponse,
    FactsResponse,
    ForgetResponse,
    JournalFileOut,
    JournalSearchResponse,
    MemoryHistory,
    MemoryPage,
    MemoryRecord,
    PinResponse,
    ProcedureAccepted,
    ProceduresResponse,
    ProposalOut,
    ProposalsResponse,
    RecallResponse,
    ResonanceResponse,
    RestoreResponse,
    SearchResponse,
)

__all__ = [
    "AsyncMindflowClient",
    "MindflowClient",
    "MindflowClientError",
    "MindflowUnavailable",
]

T = TypeVar("T", bound=BaseModel)
# Failures where the request never reached a working server: safe to send again.
_RETRY_ON = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.RemoteProtocolError,
    httpx.ReadError,
    httpx.WriteError,
    httpx.PoolTimeout,
)


class MindflowClientError(Exception):
    """The server said no (4xx, 5xx) or could not be reached; `status` is None for the latter."""

    def __init__(self, status: int | None, message: str, details: list[Any] | None = None):
        super().__init__(f"{status}: {message}" if status else message)
        self.status = status
        self.message = message
        self.details = details


class MindflowUnavailable(MindflowClientError):
    """Still unreachable or 503 after every retry."""


class _Busy(Exception):
    def __init__(self, response: httpx.Response):
        self.response = response


def _error_from(response: httpx.Response) -> MindflowClientError:
    try:
        body = response.json()
        message, details = body.get("error") or response.text, body.get("details")
    except ValueError:
        message, details = response.text or response.reason_phrase, None
    kind = MindflowUnavailable if response.status_code == 503 else MindflowClientError
    return kind(response.status_code, message, details)


def _segment(value: str) -> str:
    # "/" and ".." must stay inside the segment, never climb to another being's path.
    return quote(value, safe="")


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context (httpx's default: certifi's CA bundle, SSL_CERT_FILE / SSL_CERT_DIR
    honoured, read when the process makes its first client) for every client of this process.
    Left to httpx, each client loads the CA bundle into a context of its own: ~18 ms of CPU a
    client, paid on every call by an agent that makes a client per call (0.1 ms shared)."""
    return httpx.create_ssl_context()


def _recall_body(query: str, k: int, **fields: Any) -> dict[str, Any]:
    body = {"query": query, "k": k, **{name: v for name, v in fields.items() if v is not None}}
    return to_jsonable_python(body)


def _session_id(session_id: str | None, session: str | None) -> str | None:
    """`session`, the old name of `session_id` in recall and resonance, still works (deprecated)."""
    if session is None:
        return session_id
    warnings.warn("`session` is deprecated: pass `session_id`", DeprecationWarning, stacklevel=3)
    if session_id not in (None, session):
        raise TypeError("give session_id, or session (its deprecated name), not both")
    return session


def _forget_body(**fields: Any) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


def _facts_params(entity: str | None, depth: int, key: str | None, q: str | None, k: int) -> dict[str, Any]:
    given = {"entity": entity, "key": key, "q": q}
    return {**{name: v for name, v in given.items() if v is not None}, "depth": depth, "k": k}


def _episodes_body(episodes: Iterable[EpisodeIn | Mapping[str, Any]]) -> dict[str, Any]:
    items = [e.model_dump(exclude_none=True) if isinstance(e, EpisodeIn) else dict(e) for e in episodes]
    return {"episodes": to_jsonable_python(items)}


def _remember_body(
    text: str,
    ts: datetime | None,
    importance: float | None,
    session_id: str | None,
    speaker: str | None,
) -> dict[str, Any]:
    """One episode with the explicit remember instruction, said by the agent unless told otherwise."""
    episode = {
        "ts": to_jsonable_python(ts or datetime.now(UTC)),
        "text": text,
        "speaker": speaker or "agent",
        "role": "assistant",
        "trigger": "remember",
        "importance": importance,
        "session_id": session_id,
    }
    return {"episodes": [{k: v for k, v in episode.items() if v is not None}]}


def _given(**fields: Any) -> dict[str, Any]:
    """The fields set, for a JSON body or query parameters: None means "leave it out"."""
    return {name: v for name, v in fields.items() if v is not None}


def _decisions_body(
    decisions: Mapping[str, str], edits: Mapping[str, Mapping[str, str | None]] | None
) -> dict[str, Any]:
    body: dict[str, Any] = {"decisions": dict(decisions)}
    if edits:
        body["edits"] = {i: _given(**dict(e)) for i, e in edits.items()}
    return body


def _context_params(blocks: Iterable[str] | None) -> dict[str, str]:
    return {"blocks": ",".join(blocks)} if blocks is not None else {}


def _lines_params(start: int | None, end: int | None) -> dict[str, int]:
    return {name: v for name, v in (("start", start), ("end", end)) if v is not None}


def _list_params(
    status: str | Iterable[str] | None,
    cluster: str | None,
    since: datetime | None,
    until: datetime | None,
    page_size: int,
) -> list[tuple[str, Any]]:
    """Query parameters of GET memories; `status` may repeat."""
    statuses = [status] if isinstance(status, str) else list(status or [])
    params: list[tuple[str, Any]] = [("status", s) for s in statuses] + [("limit", page_size)]
    for name, value in (("cluster", cluster), ("since", since), ("until", until)):
        if value is not None:
            params.append((name, to_jsonable_python(value)))
    return params


class _Base:
    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        timeout: float = 10.0,
        retries: int = 3,
        backoff: float = 0.25,
        max_backoff: float = 4.0,
    ):
        self.base_url = base_url.rstrip("/")
        self.retries = retries
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._timeout = httpx.Timeout(timeout)
        self._retry = {
            "stop": stop_after_attempt(retries + 1),
            "wait": wait_exponential(multiplier=backoff, min=backoff, max=max_backoff),
            "retry": retry_if_exception_type((*_RETRY_ON, _Busy)),
            "reraise": True,
        }

    @staticmethod
    def _being(being: str, *parts: str) -> str:
        return "/v1/beings/" + "/".join(_segment(p) for p in (being, *parts))

    def _checked(self, response: httpx.Response) -> httpx.Response:
        if response.status_code == 503:
            raise _Busy(response)
        if response.status_code >= 400:
            raise _error_from(response)
        return response

    def _give_up(self, exc: Exception) -> MindflowClientError:
        if isinstance(exc, _Busy):
            return _error_from(exc.response)
        if isinstance(exc, httpx.TimeoutException):
            return MindflowClientError(None, f"{self.base_url} did not answer in time ({exc!r})")
        return MindflowUnavailable(None, f"cannot reach {self.base_url} ({exc.__class__.__name__}: {exc})")


class MindflowClient(_Base):
    """Blocking client; use as a context manager or call `close()`."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        timeout: float = 10.0,
        retries: int = 3,
        *,
        transport: httpx.BaseTransport | None = None,
        **kw,
    ):
        super().__init__(base_url, token, timeout, retries, **kw)
        self._http = httpx.Client(
            base_url=self.base_url,
            headers=self._headers,
            timeout=self._timeout,
            transport=transport,
            verify=_tls(),
        )

    def __enter__(self) -> MindflowClient:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _request(self, method: str, path: str, **kwargs) -> httpx.Response:
        try:
            for attempt in Retrying(**self._retry):
                with attempt:
                    return self._checked(self._http.request(method, path, **kwargs))
        except (_Busy, httpx.HTTPError) as exc:
            raise self._give_up(exc) from exc
        raise AssertionError("unreachable")

    def _typed(self, model: type[T], method: str, path: str, **kwargs) -> T:
        return model.model_validate(self._request(method, path, **kwargs).json())

    def recall(
        self,
        being: str,
        query: str,
        k: int = 5,
        *,
        exclude_refs: Iterable[str] | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        session_id: str | None = None,
        mode: Literal["list", "fragments"] = "list",
        session: str | None = None,
    ) -> RecallResponse:
        body = _recall_body(
            query,
            k,
            exclude_refs=list(exclude_refs or []),
            since=since,
            until=until,
            session_id=_session_id(session_id, session),
            mode=mode,
        )
        return self._typed(RecallResponse, "POST", self._being(being, "recall"), json=body)

    def resonance(
        self,
        being: str,
        query: str,
        k: int = 5,
        *,
        now: datetime | None = None,
        exclude_refs: Iterable[str] | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        session_id: str | None = None,
        recent: Iterable[str] | None = None,
        session: str | None = None,
    ) -> ResonanceResponse:
        body = _recall_body(
            query,
            k,
            now=now,
            exclude_refs=list(exclude_refs or []),
            since=since,
            until=until,
            session_id=_session_id(session_id, session),
            recent=list(recent) if recent is not None else None,
        )
        return self._typed(ResonanceResponse, "POST", self._being(being, "resonance"), json=body)

    def search_memory(
        self, being: str, query: str, mode: Literal["or", "and"] = "or", k: int = 10
    ) -> SearchResponse:
        body = {"query": query, "mode": mode, "k": k}
        return self._typed(SearchResponse, "POST", self._being(being, "search_memory"), json=body)

    def recall_memory(self, being: str, cluster_id: str, k: int = 50) -> ClusterResponse:
        path = self._being(being, "clusters", cluster_id, "memories")
        return self._typed(ClusterResponse, "GET", path, params={"k": k})

    def facts(
        self,
        being: str,
        entity: str | None = None,
        depth: int = 1,
        *,
        key: str | None = None,
        q: str | None = None,
        k: int = 20,
    ) -> FactsResponse:
        """Facts around a (loosely named) entity, only those with `key`, or those matching the words `q`."""
        params = _facts_params(entity, depth, key, q, k)
        return self._typed(FactsResponse, "GET", self._being(being, "facts"), params=params)

    def story(self, being: str) -> str:
        return self._request("GET", self._being(being, "story")).text

    def add_episodes(self, being: str, episodes: Iterable[EpisodeIn | Mapping[str, Any]]) -> EpisodesResponse:
        body = _episodes_body(episodes)
        return self._typed(EpisodesResponse, "POST", self._being(being, "episodes"), json=body)

    def forget(
        self, being: str, query: str | None = None, *, refs: Iterable[str] | None = None
    ) -> ForgetResponse:
        """Find what a forget would remove: a pending proposal with its candidates; nothing changes.

        Nothing found: `candidates` is empty and `proposal_id` None (no proposal is opened)."""
        body = _forget_body(query=query, refs=list(refs) if refs is not None else None)
        return self._typed(ForgetResponse, "POST", self._being(being, "forget"), json=body)

    def confirm_forget(
        self, being: str, proposal_id: str, refs: Iterable[str] | None = None, *, permanent: bool = False
    ) -> ForgetResponse:
        """Forget the proposal's candidates (all when `refs` is None); `permanent` deletes them for good."""
        body = _forget_body(
            proposal_id=proposal_id,
            refs=list(refs) if refs is not None else None,
            confirm=True,
            permanent=permanent,
        )
        return self._typed(ForgetResponse, "POST", self._being(being, "forget"), json=body)

    def reject_forget(self, being: str, proposal_id: str) -> ForgetResponse:
        body = _forget_body(proposal_id=proposal_id, confirm=False)
        return self._typed(ForgetResponse, "POST", self._being(being, "forget"), json=body)

    def restore(self, being: str, ref: str) -> RestoreResponse:
        """Undo a soft forget of one memory."""
        return self._typed(RestoreResponse, "POST", self._being(being, "memories", ref, "restore"))

    def pin(self, being: str, ref: str) -> PinResponse:
        """Pin a memory: it never decays and always has a place in MEMORY.md."""
        return self._typed(PinResponse, "POST", self._being(being, "memories", ref, "pin"))

    def unpin(self, being: str, ref: str) -> PinResponse:
        return self._typed(PinResponse, "POST", self._being(being, "memories", ref, "unpin"))

    def proposals(self, being: str, status: str | None = None, kind: str | None = None) -> ProposalsResponse:
        """The being's proposals, oldest first; `status`: pending, approved, rejected or deferred."""
        params = _given(status=status, kind=kind)
        return self._typed(ProposalsResponse, "GET", self._being(being, "proposals"), params=params)

    def propose(
        self,
        being: str,
        content: str,
        reason: str,
        *,
        type: str = "fact",
        confidence: float = 0.7,
        entity: str | None = None,
        key: str | None = None,
        value: str | None = None,
        agent: str | None = None,
    ) -> ProposalOut:
        """Propose a memory (what a sub-agent does instead of writing episodes); `conflict` says whether
        its fact (entity, key, value) contradicts a pending proposal or a current fact."""
        body = _given(
            content=content, reason=reason, type=type, confidence=confidence, entity=entity, key=key,
            value=value, agent=agent,
        )  # fmt: skip
        return self._typed(ProposalOut, "POST", self._being(being, "proposals"), json=body)

    def decide(
        self,
        being: str,
        proposal_id: str,
        decision: Literal["approve", "reject", "defer"],
        text: str | None = None,
        target: str | None = None,
    ) -> ProposalOut:
        """Approve (optionally editing its `text` or `target`), reject or defer one open proposal."""
        body = _given(decision=decision, text=text, target=target)
        path = self._being(being, "proposals", proposal_id, "decision")
        return self._typed(ProposalOut, "POST", path, json=body)

    def decide_many(
        self,
        being: str,
        decisions: Mapping[str, Literal["approve", "reject", "defer"]],
        edits: Mapping[str, Mapping[str, str | None]] | None = None,
    ) -> DecisionsResponse:
        """Several decisions at once (proposal id -> approve|reject|defer), edits as id -> {text, target}."""
        body = _decisions_body(decisions, edits)
        path = self._being(being, "proposals", "decisions")
        return self._typed(DecisionsResponse, "POST", path, json=body)

    def procedures(self, being: str, query: str | None = None, k: int = 5) -> ProceduresResponse:
        """The being's current procedures nearest `query` (all by name without one)."""
        params = _given(query=query, k=k)
        return self._typed(ProceduresResponse, "GET", self._being(being, "procedures"), params=params)

    def add_procedure(
        self,
        being: str,
        name: str,
        trigger: str,
        steps: Iterable[str],
        *,
        notes: str | None = None,
        learned_from: Iterable[str] | None = None,
        confidence: float | None = None,
    ) -> ProcedureAccepted:
        """Add a procedure (a new version for a known name), applied by the next approvals run; a sub-agent
        token's waits as a pending proposal."""
        body = _given(
            name=name, trigger=trigger, steps=list(steps), notes=notes,
            learned_from=list(learned_from) if learned_from is not None else None, confidence=confidence,
        )  # fmt: skip
        return self._typed(ProcedureAccepted, "POST", self._being(being, "procedures"), json=body)

    def get_memory(self, being: str, ref: str) -> MemoryRecord:
        """One memory with its statuses, decay, pin, cluster, scene, sources and times (404: unknown)."""
        return self._typed(MemoryRecord, "GET", self._being(being, "memories", ref))

    def list_memories(
        self,
        being: str,
        status: str | Iterable[str] | None = None,
        cluster: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        page_size: int = 100,
    ) -> Iterator[MemoryRecord]:
        """Every memory of the being matching the filters, oldest first, fetched page by page."""
        params = _list_params(status, cluster, since, until, page_size)
        while True:
            page = self._typed(MemoryPage, "GET", self._being(being, "memories"), params=params)
            yield from page.memories
            if page.next_cursor is None:
                return
            params = [*[p for p in params if p[0] != "cursor"], ("cursor", page.next_cursor)]

    def memory_history(self, being: str, ref: str) -> MemoryHistory:
        """Every change of the memory, oldest first: time, actor, run id, fields before and after."""
        return self._typed(MemoryHistory, "GET", self._being(being, "memories", ref, "history"))

    def remember(
        self,
        being: str,
        text: str,
        *,
        ts: datetime | None = None,
        importance: float | None = None,
        session_id: str | None = None,
        speaker: str | None = None,
    ) -> EpisodesResponse:
        """Store one thing to remember (an episode with the remember trigger); recallable at once."""
        body = _remember_body(text, ts, importance, session_id, speaker)
        return self._typed(EpisodesResponse, "POST", self._being(being, "episodes"), json=body)

    def get_context(self, being: str, blocks: Iterable[str] | None = None) -> ContextResponse:
        """The being's context blocks (1-A, 1-B, 2-B, story) with their tokens, and any alerts."""
        params = _context_params(blocks)
        return self._typed(ContextResponse, "GET", self._being(being, "context"), params=params)

    def journal_memory_search(self, being: str, query: str, k: int = 5) -> JournalSearchResponse:
        """Chunks of MEMORY.md, STORY.md, think.md, the diary and the daily logs, best first."""
        body = {"query": query, "k": k}
        return self._typed(JournalSearchResponse, "POST", self._being(being, "journal", "search"), json=body)

    def journal_memory_get(
        self, being: str, path: str, start: int | None = None, end: int | None = None
    ) -> JournalFileOut:
        """One memory file (e.g. `MEMORY.md`, `diary/2026-05-01.md`), or lines start..end of it."""
        route = self._being(being, "journal", path)
        return self._typed(JournalFileOut, "GET", route, params=_lines_params(start, end))

    def search_ebooks(self, query: str, k: int = 5) -> EbookSearchResponse:
        """Passages of the indexed ebooks (text, title, chapter, score), best first."""
        return self._typed(EbookSearchResponse, "POST", "/v1/ebooks/search", json={"query": query, "k": k})

    def ready(self) -> bool:
        try:
            return self._http.get("/readyz").status_code == 200
        except httpx.HTTPError:
            return False


class AsyncMindflowClient(_Base):
    """The same calls for asyncio agents: `async with AsyncMindflowClient(...) as memory:`."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        timeout: float = 10.0,
        retries: int = 3,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        **kw,
    ):
        super().__init__(base_url, token, timeout, retries, **kw)
        # `transport` lets a process call an app it hosts without a socket (the MCP server does).
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=self._headers,
            timeout=self._timeout,
            transport=transport,
            verify=_tls(),
        )

    async def __aenter__(self) -> AsyncMindflowClient:
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _request(self, method: str, path: str, **kwargs) -> httpx.Response:
        try:
            async for attempt in AsyncRetrying(**self._retry):
                with attempt:
                    return self._checked(await self._http.request(method, path, **kwargs))
        except (_Busy, httpx.HTTPError) as exc:
            raise self._give_up(exc) from exc
        raise AssertionError("unreachable")

    async def _typed(self, model: type[T], method: str, path: str, **kwargs) -> T:
        return model.model_validate((await self._request(method, path, **kwargs)).json())

    async def recall(
        self,
        being: str,
        query: str,
        k: int = 5,
        *,
        exclude_refs: Iterable[str] | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        session_id: str | None = None,
        mode: Literal["list", "fragments"] = "list",
        session: str | None = None,
    ) -> RecallResponse:
        body = _recall_body(
            query,
            k,
            exclude_refs=list(exclude_refs or []),
            since=since,
            until=until,
            session_id=_session_id(session_id, session),
            mode=mode,
        )
        return await self._typed(RecallResponse, "POST", self._being(being, "recall"), json=body)

    async def resonance(
        self,
        being: str,
        query: str,
        k: int = 5,
        *,
        now: datetime | None = None,
        exclude_refs: Iterable[str] | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        session_id: str | None = None,
        recent: Iterable[str] | None = None,
        session: str | None = None,
    ) -> ResonanceResponse:
        body = _recall_body(
            query,
            k,
            now=now,
            exclude_refs=list(exclude_refs or []),
            since=since,
            until=until,
            session_id=_session_id(session_id, session),
            recent=list(recent) if recent is not None else None,
        )
        return await self._typed(ResonanceResponse, "POST", self._being(being, "resonance"), json=body)

    async def search_memory(
        self, being: str, query: str, mode: Literal["or", "and"] = "or", k: int = 10
    ) -> SearchResponse:
        body = {"query": query, "mode": mode, "k": k}
        return await self._typed(SearchResponse, "POST", self._being(being, "search_memory"), json=body)

    async def recall_memory(self, being: str, cluster_id: str, k: int = 50) -> ClusterResponse:
        path = self._being(being, "clusters", cluster_id, "memories")
        return await self._typed(ClusterResponse, "GET", path, params={"k": k})

    async def facts(
        self,
        being: str,
        entity: str | None = None,
        depth: int = 1,
        *,
        key: str | None = None,
        q: str | None = None,
        k: int = 20,
    ) -> FactsResponse:
        params = _facts_params(entity, depth, key, q, k)
        return await self._typed(FactsResponse, "GET", self._being(being, "facts"), params=params)

    async def story(self, being: str) -> str:
        return (await self._request("GET", self._being(being, "story"))).text

    async def add_episodes(
        self, being: str, episodes: Iterable[EpisodeIn | Mapping[str, Any]]
    ) -> EpisodesResponse:
        body = _episodes_body(episodes)
        return await self._typed(EpisodesResponse, "POST", self._being(being, "episodes"), json=body)

    async def forget(
        self, being: str, query: str | None = None, *, refs: Iterable[str] | None = None
    ) -> ForgetResponse:
        body = _forget_body(query=query, refs=list(refs) if refs is not None else None)
        return await self._typed(ForgetResponse, "POST", self._being(being, "forget"), json=body)

    async def confirm_forget(
        self, being: str, proposal_id: str, refs: Iterable[str] | None = None, *, permanent: bool = False
    ) -> ForgetResponse:
        body = _forget_body(
            proposal_id=proposal_id,
            refs=list(refs) if refs is not None else None,
            confirm=True,
            permanent=permanent,
        )
        return await self._typed(ForgetResponse, "POST", self._being(being, "forget"), json=body)

    async def reject_forget(self, being: str, proposal_id: str) -> ForgetResponse:
        body = _forget_body(proposal_id=proposal_id, confirm=False)
        return await self._typed(ForgetResponse, "POST", self._being(being, "forget"), json=body)

    async def restore(self, being: str, ref: str) -> RestoreResponse:
        return await self._typed(RestoreResponse, "POST", self._being(being, "memories", ref, "restore"))

    async def pin(self, being: str, ref: str) -> PinResponse:
        return await self._typed(PinResponse, "POST", self._being(being, "memories", ref, "pin"))

    async def unpin(self, being: str, ref: str) -> PinResponse:
        return await self._typed(PinResponse, "POST", self._being(being, "memories", ref, "unpin"))

    async def proposals(
        self, being: str, status: str | None = None, kind: str | None = None
    ) -> ProposalsResponse:
        """The being's proposals, oldest first; `status`: pending, approved, rejected or deferred."""
        params = _given(status=status, kind=kind)
        return await self._typed(ProposalsResponse, "GET", self._being(being, "proposals"), params=params)

    async def propose(
        self,
        being: str,
        content: str,
        reason: str,
        *,
        type: str = "fact",
        confidence: float = 0.7,
        entity: str | None = None,
        key: str | None = None,
        value: str | None = None,
        agent: str | None = None,
    ) -> ProposalOut:
        """Propose a memory (what a sub-agent does instead of writing episodes); `conflict` says whether
        its fact (entity, key, value) contradicts a pending proposal or a current fact."""
        body = _given(
            content=content, reason=reason, type=type, confidence=confidence, entity=entity, key=key,
            value=value, agent=agent,
        )  # fmt: skip
        return await self._typed(ProposalOut, "POST", self._being(being, "proposals"), json=body)

    async def decide(
        self,
        being: str,
        proposal_id: str,
        decision: Literal["approve", "reject", "defer"],
        text: str | None = None,
        target: str | None = None,
    ) -> ProposalOut:
        """Approve (optionally editing its `text` or `target`), reject or defer one open proposal."""
        body = _given(decision=decision, text=text, target=target)
        path = self._being(being, "proposals", proposal_id, "decision")
        return await self._typed(ProposalOut, "POST", path, json=body)

    async def decide_many(
        self,
        being: str,
        decisions: Mapping[str, Literal["approve", "reject", "defer"]],
        edits: Mapping[str, Mapping[str, str | None]] | None = None,
    ) -> DecisionsResponse:
        """Several decisions at once (proposal id -> approve|reject|defer), edits as id -> {text, target}."""
        body = _decisions_body(decisions, edits)
        path = self._being(being, "proposals", "decisions")
        return await self._typed(DecisionsResponse, "POST", path, json=body)

    async def procedures(self, being: str, query: str | None = None, k: int = 5) -> ProceduresResponse:
        """The being's current procedures nearest `query` (all by name without one)."""
        params = _given(query=query, k=k)
        return await self._typed(ProceduresResponse, "GET", self._being(being, "procedures"), params=params)

    async def add_procedure(
        self,
        being: str,
        name: str,
        trigger: str,
        steps: Iterable[str],
        *,
        notes: str | None = None,
        learned_from: Iterable[str] | None = None,
        confidence: float | None = None,
    ) -> ProcedureAccepted:
        """Add a procedure (a new version for a known name), applied by the next approvals run; a sub-agent
        token's waits as a pending proposal."""
        body = _given(
            name=name, trigger=trigger, steps=list(steps), notes=notes,
            learned_from=list(learned_from) if learned_from is not None else None, confidence=confidence,
        )  # fmt: skip
        return await self._typed(ProcedureAccepted, "POST", self._being(being, "procedures"), json=body)

    async def get_memory(self, being: str, ref: str) -> MemoryRecord:
        """One memory with its statuses, decay, pin, cluster, scene, sources and times (404: unknown)."""
        return await self._typed(MemoryRecord, "GET", self._being(being, "memories", ref))

    async def list_memories(
        self,
        being: str,
        status: str | Iterable[str] | None = None,
        cluster: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        page_size: int = 100,
    ) -> AsyncIterator[MemoryRecord]:
        """Every memory of the being matching the filters, oldest first: `async for m in ...`."""
        params = _list_params(status, cluster, since, until, page_size)
        while True:
            page = await self._typed(MemoryPage, "GET", self._being(being, "memories"), params=params)
            for memory in page.memories:
                yield memory
            if page.next_cursor is None:
                return
            params = [*[p for p in params if p[0] != "cursor"], ("cursor", page.next_cursor)]

    async def memory_history(self, being: str, ref: str) -> MemoryHistory:
        """Every change of the memory, oldest first: time, actor, run id, fields before and after."""
        return await self._typed(MemoryHistory, "GET", self._being(being, "memories", ref, "history"))

    async def remember(
        self,
        being: str,
        text: str,
        *,
        ts: datetime | None = None,
        importance: float | None = None,
        session_id: str | None = None,
        speaker: str | None = None,
    ) -> EpisodesResponse:
        """Store one thing to remember (an episode with the remember trigger); recallable at once."""
        body = _remember_body(text, ts, importance, session_id, speaker)
        return await self._typed(EpisodesResponse, "POST", self._being(being, "episodes"), json=body)

    async def get_context(self, being: str, blocks: Iterable[str] | None = None) -> ContextResponse:
        """The being's context blocks (1-A, 1-B, 2-B, story) with their tokens, and any alerts."""
        params = _context_params(blocks)
        return await self._typed(ContextResponse, "GET", self._being(being, "context"), params=params)

    async def journal_memory_search(self, being: str, query: str, k: int = 5) -> JournalSearchResponse:
        """Chunks of MEMORY.md, STORY.md, think.md, the diary and the daily logs, best first."""
        body = {"query": query, "k": k}
        return await self._typed(
            JournalSearchResponse, "POST", self._being(being, "journal", "search"), json=body
        )

    async def journal_memory_get(
        self, being: str, path: str, start: int | None = None, end: int | None = None
    ) -> JournalFileOut:
        """One memory file (e.g. `MEMORY.md`, `diary/2026-05-01.md`), or lines start..end of it."""
        route = self._being(being, "journal", path)
        return await self._typed(JournalFileOut, "GET", route, params=_lines_params(start, end))

    async def search_ebooks(self, query: str, k: int = 5) -> EbookSearchResponse:
        """Passages of the indexed ebooks (text, title, chapter, score), best first."""
        body = {"query": query, "k": k}
        return await self._typed(EbookSearchResponse, "POST", "/v1/ebooks/search", json=body)

    async def ready(self) -> bool:
        try:
            return (await self._http.get("/readyz")).status_code == 200
        except httpx.HTTPError:
            return False
