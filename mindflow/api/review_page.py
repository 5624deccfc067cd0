"""The /review page: a person decides pending proposals in a browser, server-rendered, no script.

It only reads and writes proposal files (mindflow.reflection.decide); the `approvals` run applies
what was approved. A token logs in once; the browser then holds a random session id in a cookie
(HttpOnly, SameSite=Strict, Path=/review) and every form carries an HMAC of that id, so another
site can neither read the page nor post a decision in the person's name.
"""

from __future__ import annotations

import hashlib
import hmac
import html
import secrets
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from urllib.parse import parse_qsl, urlencode, urlsplit

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from mindflow.api.auth import ALL_BEINGS, TokenScopes, is_loopback
from mindflow.config import Settings
from mindflow.errors import Conflict, MindflowError, NotFound
from mindflow.inbox import validate_being_id
from mindflow.loop.proposals import Proposal, ProposalStore
from mindflow.reflection.decide import DECISIONS, EDITABLE, Edit, decide_many, edited_payload
from mindflow.reflection.items import Item, describe, pending_items

COOKIE = "mindflow_review"
PATH = "/review"
# A session outlives a long review, not a forgotten browser tab.
SESSION_TTL_S = 8 * 3600
# Only known tokens open sessions (any visitor on an open, loopback-only server): a bound keeps
# a login loop from growing the process without end.
MAX_SESSIONS = 10_000
RECENT = 20
LEAVE = "leave"
HEADERS = {
    # No script at all, and nobody may frame the page (clickjacking a decision).
    "Content-Security-Policy": "default-src 'self'; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    # The page shows memories: no cache, shared or private, keeps it.
    "Cache-Control": "no-store",
}
esc = html.escape


@dataclass
class ReviewSession:
    beings: frozenset[str]
    expires: float


@dataclass
class ReviewSessions:
    """The page's sessions in this process's memory (a restart logs everyone out), and its CSRF tokens."""

    ttl: float = SESSION_TTL_S
    limit: int = MAX_SESSIONS
    _secret: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    _sessions: dict[str, ReviewSession] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def open(self, beings: frozenset[str]) -> str:
        session_id = secrets.token_urlsafe(32)
        now = time.monotonic()
        with self._lock:
            for key in [k for k, s in self._sessions.items() if s.expires <= now]:
                del self._sessions[key]
            while len(self._sessions) >= self.limit:
                del self._sessions[min(self._sessions, key=lambda k: self._sessions[k].expires)]
            self._sessions[session_id] = ReviewSession(beings, now + self.ttl)
        return session_id

    def get(self, session_id: str | None) -> ReviewSession | None:
        if not session_id:
            return None
        with self._lock:
            found = self._sessions.get(session_id)
            if found is not None and found.expires <= time.monotonic():
                del self._sessions[session_id]
                return None
        return found

    def close(self, session_id: str | None) -> None:
        with self._lock:
            self._sessions.pop(session_id or "", None)

    def csrf(self, session_id: str) -> str:
        return hmac.new(self._secret, session_id.encode("utf-8"), hashlib.sha256).hexdigest()

    def csrf_ok(self, session_id: str, given: str) -> bool:
        return hmac.compare_digest(self.csrf(session_id).encode(), given.encode("utf-8", "replace"))


def reviewer_beings(scopes: TokenScopes, token: str) -> frozenset[str] | None:
    """The beings a token may decide for; None for an unknown token.

    A token with a role (`being@subagent:name` in MINDFLOW_API_TOKENS) is a sub-agent's: it
    proposes and never decides, so it covers no being here."""
    beings = scopes.beings_for(token)
    if beings is None:
        return None
    if scopes.role_for(token) is not None:
        return frozenset()
    return beings


def _same_origin(request: Request) -> bool:
    """Origin (else Referer), when the browser sends one, names this very host."""
    host = request.headers.get("host", "").lower()
    for header in ("origin", "referer"):
        value = request.headers.get(header)
        if value is not None:
            return bool(host) and urlsplit(value.strip()).netloc.lower() == host
    return True


def _loopback_host(request: Request) -> bool:
    """The Host the browser asked for is a loopback address or localhost.

    A server without tokens trusts whoever reaches it; a page of another site whose name was made
    to resolve to 127.0.0.1 (DNS rebinding) reaches it too, but under its own name in Host."""
    host = urlsplit("//" + request.headers.get("host", "")).hostname
    return bool(host) and is_loopback(host)


async def _form(request: Request) -> dict[str, str]:
    """A urlencoded form body (the last value of a repeated field); anything else is no form."""
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/x-www-form-urlencoded":
        return {}
    body = (await request.body()).decode("utf-8", "replace")
    try:
        return dict(parse_qsl(body, keep_blank_values=True, max_num_fields=2_000))
    except ValueError:
        return {}


# ---------------------------------------------------------------- HTML

STYLE = """
body{font:15px/1.45 system-ui,sans-serif;margin:0 auto;max-width:60rem;padding:1rem;color:#1c1c1c}
h1{font-size:1.4rem} h2{font-size:1.15rem;margin-top:2rem}
nav a{margin-right:.8rem} nav .current{font-weight:bold}
.note{background:#eef6ee;border:1px solid #9c9;padding:.5rem .8rem}
.error{background:#fdecec;border:1px solid #d88;padding:.5rem .8rem}
fieldset.item{border:1px solid #bbb;margin:1rem 0;padding:.6rem .9rem}
fieldset.conflict{border:2px solid #c60;background:#fff7ee}
legend{font-weight:bold} .tag{font-family:monospace;padding:0 .3rem;background:#eee}
.conflict .tag{background:#c60;color:#fff}
ul.evidence{margin:.3rem 0 .6rem;padding-left:1.3rem;font-size:.92rem}
pre.diff{background:#f6f6f6;padding:.5rem;overflow-x:auto;font-size:.85rem}
pre.diff .add{background:#dfd;color:#060;display:block}
pre.diff .del{background:#fdd;color:#900;display:block}
pre.diff .hunk{color:#66c;display:block}
.choices label{margin-right:1rem} textarea{width:100%;font-family:monospace}
table{border-collapse:collapse;width:100%;font-size:.9rem} td,th{border-bottom:1px solid #ddd;
padding:.25rem .4rem;text-align:left;vertical-align:top}
.id{font-family:monospace;font-size:.8rem;color:#666}
button{font-size:1rem;padding:.35rem 1rem}
"""


def _page(title: str, body: str, status: int = 200) -> HTMLResponse:
    document = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>{body}</body></html>"
    )
    return HTMLResponse(document, status_code=status, headers=HEADERS)


def _redirect(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303, headers=HEADERS)


def _login_page(message: str | None = None, status: int = 200) -> HTMLResponse:
    error = f'<p class="error" role="alert">{esc(message)}</p>' if message else ""
    return _page(
        "mindflow review: log in",
        f"<h1>mindflow review</h1>{error}"
        f'<form method="post" action="{PATH}/login">'
        "<p><label>API token (one of MINDFLOW_API_TOKENS) "
        '<input type="password" name="token" autocomplete="off" required autofocus></label> '
        '<button type="submit">Log in</button></p></form>',
        status,
    )


def _diff(diff: str) -> str:
    lines = []
    for line in diff.splitlines():
        kind = (
            "hunk"
            if line.startswith("@@")
            else "add"
            if line.startswith("+") and not line.startswith("+++")
            else "del"
            if line.startswith("-") and not line.startswith("---")
            else None
        )
        lines.append(f'<span class="{kind}">{esc(line)}</span>' if kind else esc(line) + "\n")
    return f'<pre class="diff" aria-label="MEMORY.md diff">{"".join(lines)}</pre>'


def _original_text(proposal: Proposal) -> str | None:
    field_name = EDITABLE.get(proposal.kind, {}).get("text")
    if field_name is None:
        return None
    value = proposal.payload.get(field_name)
    return "\n".join(str(s) for s in value) if isinstance(value, list) else str(value or "")


def _targets(proposal: Proposal) -> tuple[list[tuple[str, str]], str] | None:
    """(choices as (value, label), current) for a kind whose target is one of a few; None otherwise."""
    p = proposal.payload
    if proposal.kind == "merge":
        members = [p.get("survivor"), *p.get("absorbed", [])]
        memories = p.get("memories", {})
        return [(str(m), f"{m}: {str(memories.get(m, ''))[:80]}") for m in members], str(p.get("survivor"))
    if proposal.kind == "contradiction":
        sides = p.get("sides", [])
        return [(str(s.get("fact_id")), f"{s.get('value')!s} ({s.get('fact_id')})") for s in sides], str(
            p.get("keep")
        )
    return None


def _item_form(item: Item, chosen: dict[str, str]) -> str:
    proposal, pid = item.proposal, item.proposal_id
    evidence = "".join(f"<li>{esc(line)}</li>" for line in item.evidence)
    parts = [
        f'<fieldset class="item{" conflict" if item.conflict else ""}" id="item-{item.number}" '
        f'data-kind="{esc(proposal.kind)}">',
        f'<legend>{item.number}. <span class="tag">[{esc(item.tag)}]</span> {esc(item.title)}</legend>',
        f'<div class="id">{esc(pid)}{" (deferred)" if proposal.status == "deferred" else ""}</div>',
        f'<ul class="evidence">{evidence}</ul>' if evidence else "",
        _diff(item.diff) if item.diff is not None else "",
        '<div class="choices">',
    ]
    current = chosen.get(f"d:{pid}", LEAVE)
    for value in (*DECISIONS, LEAVE):
        checked = " checked" if value == current else ""
        parts.append(
            f'<label><input type="radio" name="d:{esc(pid)}" value="{value}"{checked}> {value}</label>'
        )
    parts.append("</div>")
    editable = EDITABLE.get(proposal.kind, {})
    if "text" in editable:
        text = chosen.get(f"text:{pid}", _original_text(proposal) or "")
        rows = min(30, max(3, text.count("\n") + 2))
        # The parser drops one newline right after <textarea>: this one, never the text's own.
        parts.append(
            f"<p><label>Edit the {esc(editable['text'])} (taken when approved)<br>"
            f'<textarea name="text:{esc(pid)}" rows="{rows}">\n{esc(text)}</textarea></label></p>'
        )
    if "target" in editable:
        options = _targets(proposal)
        label = {"survivor": "Memory that survives", "keep": "Value to keep", "refs": "Memories to archive"}
        name = esc(editable["target"])
        if options is not None:
            choices, default = options
            current_target = chosen.get(f"target:{pid}", default)
            opts = "".join(
                f'<option value="{esc(v)}"{" selected" if v == current_target else ""}>{esc(text)}</option>'
                for v, text in choices
            )
            parts.append(
                f"<p><label>{label.get(editable['target'], name)} "
                f'<select name="target:{esc(pid)}">{opts}</select></label></p>'
            )
        else:
            default = ", ".join(str(r) for r in proposal.payload.get("refs", []))
            value = chosen.get(f"target:{pid}", default)
            parts.append(
                f"<p><label>{label.get(editable['target'], name)} (comma-separated) "
                f'<input type="text" size="60" name="target:{esc(pid)}" value="{esc(value)}"></label></p>'
            )
    parts.append("</fieldset>")
    return "".join(parts)


def _when(value: datetime | None) -> str:
    return f"{value:%Y-%m-%d %H:%M} UTC" if value is not None else ""


def _applied(proposal: Proposal) -> str:
    """Whether the decision took effect yet, and which run carries it out if not."""
    if proposal.applied_at is not None:
        return f"applied {_when(proposal.applied_at)}"
    if proposal.status != "approved":
        return "-"
    if proposal.kind == "forget":
        # A soft forget is applied at its confirm; one decided before that was recorded still
        # took effect then (its mark).
        if not proposal.payload.get("permanent"):
            return f"applied {_when(proposal.decided_at)}"
        return "not yet: the forget run erases it"
    return "not yet: the approvals run applies it"


def _recent_table(decided: list[Proposal]) -> str:
    if not decided:
        return "<p>Nothing decided yet.</p>"
    rows = []
    for proposal in decided:
        item = describe(proposal)
        applied = _applied(proposal)
        rows.append(
            f'<tr data-proposal="{esc(proposal.proposal_id)}"><td><span class="tag">[{esc(item.tag)}]</span> '
            f'{esc(item.title)}<div class="id">{esc(proposal.proposal_id)}</div></td>'
            f'<td class="status">{esc(proposal.status)}</td><td>{esc(proposal.decided_by or "")}<br>'
            f"{esc(_when(proposal.decided_at))}</td><td>{esc(applied)}</td></tr>"
        )
    return (
        "<table><thead><tr><th>Item</th><th>Status</th><th>Decided</th><th>Applied</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


@dataclass
class View:
    """What the page shows for one being: its pending items and what was decided lately."""

    beings: list[str]
    being: str | None
    items: list[Item]
    recent: list[Proposal]


def _view(settings: Settings, covered: frozenset[str], being: str | None) -> View:
    store = ProposalStore(settings.proposals)
    beings = store.beings() if ALL_BEINGS in covered else sorted(covered)
    if being is None:
        being = beings[0] if beings else None
    if being is None:
        return View(beings, None, [], [])
    decided = [p for p in store.list(being) if p.status in ("approved", "rejected")]
    decided.sort(key=lambda p: (p.decided_at or p.created_at, p.proposal_id), reverse=True)
    return View(beings, being, pending_items(store, being), decided[:RECENT])


def _review_page(
    view: View,
    csrf: str,
    *,
    logged_in: bool,
    notice: str | None = None,
    error: str | None = None,
    chosen: dict[str, str] | None = None,
    status: int = 200,
) -> HTMLResponse:
    chosen = chosen or {}
    nav = "".join(
        f'<a href="{PATH}?{esc(urlencode({"being": b}))}"'
        f"{' class=current' if b == view.being else ''}>{esc(b)}</a>"
        for b in view.beings
    )
    logout = (
        f'<form method="post" action="{PATH}/logout" style="float:right">'
        f'<input type="hidden" name="csrf" value="{esc(csrf)}"><button type="submit">Log out</button></form>'
        if logged_in
        else ""
    )
    parts = [logout, "<h1>mindflow review</h1>", f"<nav>{nav}</nav>" if nav else ""]
    if notice:
        parts.append(f'<p class="note" role="status">{esc(notice)}</p>')
    if error:
        parts.append(f'<p class="error" role="alert">{esc(error)}</p>')
    if view.being is None:
        parts.append("<p>No being has proposals yet.</p>")
        return _page("mindflow review", "".join(parts), status)
    parts.append(f"<h2>Pending for {esc(view.being)}: {len(view.items)}</h2>")
    if view.items:
        parts += [
            f'<form method="post" action="{PATH}/decide">',
            f'<input type="hidden" name="csrf" value="{esc(csrf)}">',
            f'<input type="hidden" name="being" value="{esc(view.being)}">',
            *(_item_form(item, chosen) for item in view.items),
            '<p><button type="submit" id="submit">Submit decisions</button> '
            "Items left on <em>leave</em> stay pending. Approved changes are applied by the next "
            "<code>approvals</code> run.</p></form>",
        ]
    else:
        parts.append("<p>Nothing waits for a decision.</p>")
    parts += [f"<h2>Recently decided (last {RECENT})</h2>", _recent_table(view.recent)]
    return _page(f"mindflow review: {view.being}", "".join(parts), status)


# ---------------------------------------------------------------- decisions from a form


def _decisions(form: dict[str, str], items: list[Item]) -> tuple[dict[str, str], dict[str, Edit]]:
    """The form's choices for the being's open items, and the edits of approved ones that changed."""
    by_id = {item.proposal_id: item for item in items}
    decisions: dict[str, str] = {}
    edits: dict[str, Edit] = {}
    for key, value in form.items():
        if not key.startswith("d:") or value == LEAVE:
            continue
        pid = key[2:]
        if value not in DECISIONS:
            raise MindflowError(f"a decision is one of {', '.join(DECISIONS)} or {LEAVE}; not {value!r}")
        if pid not in by_id:
            raise Conflict(
                f"proposal {pid} is no longer pending (decided elsewhere?); reload the page and decide again"
            )
        decisions[pid] = value
    for pid, decision in decisions.items():
        proposal = by_id[pid].proposal
        if decision != "approve":
            continue
        edit = Edit()
        text = form.get(f"text:{pid}")
        original = _original_text(proposal)
        if text is not None and original is not None:
            text = text.replace("\r\n", "\n")
            if text.strip() != original.strip():
                edit.text = text
        target = form.get(f"target:{pid}")
        if target is not None and "target" in EDITABLE.get(proposal.kind, {}):
            if proposal.kind == "archive":
                now = [r.strip() for r in target.split(",") if r.strip()]
                if now != [str(r) for r in proposal.payload.get("refs", [])]:
                    edit.target = target
            else:
                options = _targets(proposal)
                if options is not None and target.strip() != options[1]:
                    edit.target = target
        if edit.text is not None or edit.target is not None:
            edited_payload(proposal, edit)  # checked before anything is decided
            edits[pid] = edit
    return decisions, edits


# ---------------------------------------------------------------- routes


def review_router() -> APIRouter:
    """GET /review, POST /review/login, /review/decide and /review/logout; not in the OpenAPI schema."""
    router = APIRouter(include_in_schema=False)
    sessions = ReviewSessions()

    def settings_of(request: Request) -> Settings:
        return request.app.state.service.settings

    def open_server(request: Request) -> bool:
        return not request.app.state.tokens.enabled

    def rebound(request: Request) -> HTMLResponse | None:
        """The refusal of an open server's page asked for under a name that is not loopback."""
        if open_server(request) and not _loopback_host(request):
            return refused(
                "a server without API tokens shows /review only at 127.0.0.1, [::1] or localhost; "
                "open it there, or set MINDFLOW_API_TOKENS",
                403,
            )
        return None

    def with_cookie(response: Response, request: Request, session_id: str) -> Response:
        response.set_cookie(
            COOKIE,
            session_id,
            max_age=int(sessions.ttl),
            path=PATH,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return response

    def session_of(request: Request) -> tuple[str, ReviewSession] | None:
        session_id = request.cookies.get(COOKIE)
        found = sessions.get(session_id)
        return (session_id, found) if found is not None and session_id else None

    def refused(message: str, status: int) -> HTMLResponse:
        return _page(
            "mindflow review: refused", f'<h1>Refused</h1><p class="error">{esc(message)}</p>', status
        )

    @router.get(PATH)
    def review(request: Request, being: str | None = None, decided: str | None = None) -> Response:
        if (refusal := rebound(request)) is not None:
            return refusal
        current = session_of(request)
        fresh_id = None
        if current is None:
            if not open_server(request):
                return _login_page()
            # A server without tokens (loopback only) needs no login, but the forms still carry
            # a CSRF token bound to a session of their own.
            fresh_id = sessions.open(frozenset({ALL_BEINGS}))
            current = (fresh_id, sessions.get(fresh_id))
        session_id, session = current
        try:
            if being is not None:
                validate_being_id(being)
                if not TokenScopes.allows(session.beings, being):
                    return refused(f"this login does not cover being {being!r}", 403)
            view = _view(settings_of(request), session.beings, being)
        except MindflowError as exc:
            return refused(str(exc), 422)
        notice = (
            f"{decided} decision(s) recorded. Approved changes are applied by the next approvals run."
            if decided is not None and decided.isdigit()
            else None
        )
        response = _review_page(
            view, sessions.csrf(session_id), logged_in=not open_server(request), notice=notice
        )
        return with_cookie(response, request, fresh_id) if fresh_id else response

    @router.post(PATH + "/login")
    async def login(request: Request) -> Response:
        if (refusal := rebound(request)) is not None:
            return refusal
        if not _same_origin(request):
            return refused("this form was posted from another site", 403)
        if open_server(request):
            return _redirect(PATH)
        token = (await _form(request)).get("token", "").strip()
        beings = reviewer_beings(request.app.state.tokens, token) if token else None
        if beings is None:
            return _login_page("unknown token: give one of the server's MINDFLOW_API_TOKENS", 401)
        if not beings:
            return _login_page("a sub-agent's token proposes and cannot decide; log in with a person's", 403)
        sessions.close(request.cookies.get(COOKIE))  # a login never reuses an earlier session id
        return with_cookie(_redirect(PATH), request, sessions.open(beings))

    @router.post(PATH + "/decide")
    async def decide_route(request: Request) -> Response:
        if (refusal := rebound(request)) is not None:
            return refusal
        current = session_of(request)
        if current is None:
            return _login_page("your review session is missing or expired: log in again", 401)
        session_id, session = current
        form = await _form(request)
        if not sessions.csrf_ok(session_id, form.get("csrf", "")):
            return refused("the form's CSRF token is missing or wrong: reload the page and submit again", 403)
        if not _same_origin(request):
            return refused("this form was posted from another site", 403)
        being = form.get("being", "")
        settings = settings_of(request)
        try:
            validate_being_id(being)
            if not TokenScopes.allows(session.beings, being):
                return refused(f"this login does not cover being {being!r}", 403)
        except MindflowError as exc:
            return refused(str(exc), 422)

        def decide_form() -> int:
            items = pending_items(ProposalStore(settings.proposals), being)
            decisions, edits = _decisions(form, items)
            if decisions:
                decide_many(settings, being, decisions, decided_by="review", edits=edits)
            return len(decisions)

        try:
            count = await anyio.to_thread.run_sync(decide_form)
        except (Conflict, NotFound, MindflowError) as exc:
            # The person's choices come back with the message: nothing typed is lost.
            view = await anyio.to_thread.run_sync(_view, settings, session.beings, being)
            status = 409 if isinstance(exc, Conflict) else 404 if isinstance(exc, NotFound) else 422
            return _review_page(
                view,
                sessions.csrf(session_id),
                logged_in=not open_server(request),
                error=f"{exc} (the lists below show what is decided now)",
                chosen=form,
                status=status,
            )
        return _redirect(f"{PATH}?{urlencode({'being': being, 'decided': count})}")

    @router.post(PATH + "/logout")
    async def logout(request: Request) -> Response:
        if (refusal := rebound(request)) is not None:
            return refusal
        current = session_of(request)
        if current is not None:
            form = await _form(request)
            if not sessions.csrf_ok(current[0], form.get("csrf", "")) or not _same_origin(request):
                return refused("the form's CSRF token is missing or wrong, or it came from another site", 403)
            sessions.close(current[0])
        response = _redirect(PATH)
        response.delete_cookie(COOKIE, path=PATH, httponly=True, samesite="strict")
        return response

    return router
