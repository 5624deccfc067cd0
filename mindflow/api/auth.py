"""Bearer tokens scoped to beings (with an optional sub-agent role), and the rule that an open
server binds only to loopback."""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Path, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException

from mindflow.errors import MindflowError
from mindflow.inbox import BEING_ID_PATTERN, validate_being_id

ALL_BEINGS = "*"
# Declares the bearer scheme in the OpenAPI document, so /docs offers a field for the token.
# The routes check the header themselves (auto_error=False): the same 401 message everywhere,
# and a server without tokens (loopback only) ignores it.
bearer = HTTPBearer(
    auto_error=False,
    scheme_name="bearer",
    description="A token of MINDFLOW_API_TOKENS (`token=beings`, or `token=being@subagent:<name>` for a "
    "sub-agent, which reads and proposes); ignored by a server without tokens.",
)
Bearer = Annotated[HTTPAuthorizationCredentials | None, Security(bearer)]
_EXAMPLE = "MINDFLOW_API_TOKENS='tokA=ada,bram;tokB=*'"
SUBAGENT = "subagent:"
# The host the MCP server's in-process API calls name (mcp_server.INTERNAL_URL): no socket has it.
MCP_HOST = "mindflow.internal"
_ROLE_EXAMPLE = "MINDFLOW_API_TOKENS='tokS=ada@subagent:scout'"
# What a sub-agent token may POST besides reading (GET): the routes that only read, and proposing
# (a procedure it posts becomes a pending proposal). Every other write is refused, so a write
# route added later is closed to sub-agents until it is listed here.
SUBAGENT_POSTS = frozenset(
    {"recall", "resonance", "search_memory", "journal/search", "proposals", "procedures"}
)
# Why a write is refused, by route (after /v1/beings/{being_id}/); {proposals} is the being's route.
_REFUSED = {
    "episodes": "write episodes; propose them: POST {proposals}",
    "forget": "forget; the main agent or a person does (a sub-agent proposes: POST {proposals})",
    "memories/{ref}/pin": "pin memories; the main agent or a person does",
    "memories/{ref}/unpin": "unpin memories; the main agent or a person does",
    "memories/{ref}/restore": "restore memories; the main agent or a person does",
    "proposals/{proposal_id}/decision": "decide proposals; the main agent or a person does",
    "proposals/decisions": "decide proposals; the main agent or a person does",
}


@dataclass(frozen=True)
class TokenScopes:
    """Which beings each token may read and write; empty means no authentication at all.

    `roles` holds the tokens that carry a role (`subagent:<name>`): such a token reads its beings
    and proposes memories, but writes nothing directly. A token without a role is not in it."""

    scopes: Mapping[str, frozenset[str]]
    roles: Mapping[str, str] = field(default_factory=dict)

    @property
    def enabled(self) -> bool:
        return bool(self.scopes)

    def _known(self, token: str) -> str | None:
        """The known token equal to `token`, compared in constant time against each."""
        found = None
        given = token.encode("utf-8")
        for known in self.scopes:
            if hmac.compare_digest(known.encode("utf-8"), given):
                found = known
        return found

    def beings_for(self, token: str) -> frozenset[str] | None:
        """The token's beings (`*` for all), or None for an unknown token."""
        known = self._known(token)
        return None if known is None else self.scopes[known]

    def role_for(self, token: str) -> str | None:
        """The token's role (`subagent:<name>`), or None for a token without one or an unknown token."""
        known = self._known(token)
        return None if known is None else self.roles.get(known)

    @staticmethod
    def allows(beings: frozenset[str], being_id: str) -> bool:
        return ALL_BEINGS in beings or being_id in beings


def _role_entry(token: str, entry: str) -> tuple[str, str | None]:
    """`ada` as (ada, None); `ada@subagent:scout` as (ada, 'subagent:scout')."""
    being, sep, role = (p.strip() for p in entry.partition("@"))
    if not sep:
        return being, None
    name = role.removeprefix(SUBAGENT)
    if not role.startswith(SUBAGENT) or not BEING_ID_PATTERN.fullmatch(name):
        raise MindflowError(
            f"API token '{token[:4]}...' has the role {role!r}: the one role is subagent:<name>, "
            f"the name a lower-case slug like a being id; e.g. {_ROLE_EXAMPLE}"
        )
    return being, SUBAGENT + name


def parse_tokens(spec: str | Mapping[str, str | Iterable[str]] | TokenScopes | None) -> TokenScopes:
    """`tokA=ada,bram;tokB=*;tokS=ada@subagent:scout` (or a mapping token -> beings) as scopes;
    None or '' means no tokens.

    A spec that is set but names no token (`;`) or names a token twice is a mistake that
    would open the API or silently drop a scope: both are refused. So is a token whose
    entries carry different roles (`ada@subagent:scout,bram`): a token is one caller.
    """
    if isinstance(spec, TokenScopes):
        return spec
    if spec is None or (isinstance(spec, str) and not spec.strip()):
        return TokenScopes({})
    if isinstance(spec, Mapping):
        items = [(t, [b] if isinstance(b, str) else list(b)) for t, b in spec.items()]
    else:
        items = []
        # One trailing ';' is tolerated (a list built by appending 'token=beings;'); an empty entry
        # elsewhere (';;', a leading ';') is a mistake, most likely a token lost in editing.
        entries = [e.strip() for e in spec.strip().split(";")]
        empty = [i for i, e in enumerate(entries[:-1]) if not e]
        if any(entries) and empty:
            raise MindflowError(
                f"MINDFLOW_API_TOKENS has an empty entry (entry {empty[0] + 1} of {len(entries)}: "
                f"';;' or a leading ';'): write token=beings entries separated by one ';', e.g. {_EXAMPLE}"
            )
        for entry in entries:
            if not entry:
                continue
            token, sep, beings = entry.partition("=")
            if not sep:
                raise MindflowError(
                    f"MINDFLOW_API_TOKENS: an entry without '=' (token=beings); e.g. {_EXAMPLE}"
                )
            items.append((token.strip(), [b.strip() for b in beings.split(",") if b.strip()]))
        if not items:
            raise MindflowError(
                f"MINDFLOW_API_TOKENS is set but names no token ({spec.strip()!r}): "
                f"set token=beings entries, e.g. {_EXAMPLE}, or unset it to serve without tokens on loopback"
            )
    scopes: dict[str, frozenset[str]] = {}
    roles: dict[str, str] = {}
    for token, entries in items:
        if not token or any(c.isspace() for c in token):
            raise MindflowError(f"an API token is empty or contains spaces; e.g. {_EXAMPLE}")
        if not entries:
            raise MindflowError(f"API token '{token[:4]}...' names no being; use '*' for all; {_EXAMPLE}")
        parsed = [_role_entry(token, entry) for entry in entries]
        beings = [being for being, _ in parsed]
        for being in beings:
            if being != ALL_BEINGS:
                validate_being_id(being)
        if token in scopes:
            raise MindflowError(
                f"API token '{token[:4]}...' is listed twice; list each token once with all its beings, "
                "e.g. MINDFLOW_API_TOKENS='tokA=ada,bram'"
            )
        token_roles = {role for _, role in parsed}
        if len(token_roles) > 1:
            shown = ", ".join(sorted(r or "no role" for r in token_roles))
            raise MindflowError(
                f"API token '{token[:4]}...' carries different roles ({shown}): a token has one role "
                f"on all its beings; give each sub-agent its own token, e.g. {_ROLE_EXAMPLE}"
            )
        scopes[token] = frozenset(beings)
        (role,) = token_roles
        if role is not None:
            roles[token] = role
    return TokenScopes(scopes, roles)


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 and localhost; a hostname that might resolve elsewhere is not loopback."""
    host = host.strip().strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, tokens: TokenScopes) -> None:
    """Refuse to expose memories beyond this machine without a token."""
    if not tokens.enabled and not is_loopback(host):
        raise MindflowError(f"refusing to bind {host} without API tokens: set {_EXAMPLE} or bind 127.0.0.1")


async def authorized_being(
    request: Request,
    being_id: Annotated[
        str,
        Path(
            description="A lower-case slug: 1-64 of a-z, 0-9, '-', '_', starting with a letter or digit.",
            # Declared for clients, checked by validate_being_id after the token: a caller
            # without a token learns nothing, not even whether an id is well formed.
            json_schema_extra={"pattern": BEING_ID_PATTERN.pattern, "minLength": 1, "maxLength": 64},
            openapi_examples={"ada": {"summary": "A being", "value": "ada"}},
        ),
    ],
    _: Bearer = None,
) -> str:
    """401 without a known token, 422 for an invalid being id, 403 outside the token's beings.

    Async, though it never waits: a sync dependency costs each request a hop to the threadpool.
    """
    scopes: TokenScopes = request.app.state.tokens
    if scopes.enabled:
        token = _bearer_token(request)
        beings = scopes.beings_for(token) if token is not None else None
        if beings is None:
            raise HTTPException(
                401, "missing or unknown bearer token", headers={"WWW-Authenticate": "Bearer"}
            )
        validate_being_id(being_id)
        if not scopes.allows(beings, being_id):
            raise HTTPException(403, f"this token does not cover being {being_id!r}")
        role = scopes.role_for(token)
        if role is not None:
            _check_subagent(request, role, being_id)
    return validate_being_id(being_id)


def _bearer_token(request: Request) -> str | None:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


def _check_subagent(request: Request, role: str, being_id: str) -> None:
    """403 for a sub-agent token on any write but the ones SUBAGENT_POSTS lists."""
    if request.method in ("GET", "HEAD"):
        return
    route = getattr(request.scope.get("route"), "path", "")
    tail = route.removeprefix("/v1/beings/{being_id}/")
    if tail in SUBAGENT_POSTS:
        return
    what = _REFUSED.get(tail, f"{request.method} {tail}; a sub-agent reads and proposes: POST {{proposals}}")
    what = what.replace("{proposals}", f"/v1/beings/{being_id}/proposals")
    raise HTTPException(403, f"a sub-agent token ({role}) cannot {what}")


async def caller_role(request: Request, _: Bearer = None) -> str | None:
    """The calling token's role (`subagent:<name>`), None for a token without one or no tokens.

    Declare it after `Being`: that one answers 401 for a missing or unknown token first."""
    scopes: TokenScopes = request.app.state.tokens
    token = _bearer_token(request) if scopes.enabled else None
    return scopes.role_for(token) if token else None


def proposer(role: str | None, request: Request) -> str:
    """Who a proposal made through this request is by: `subagent:<name>` for a sub-agent token,
    `mcp` for a call of the MCP server's tools (stdio or /mcp, in process), else `api`.

    A token without a role names no one: it is the main agent or a person, as for decisions."""
    name = subagent_name(role)
    if name is not None:
        return f"{SUBAGENT}{name}"
    return "mcp" if request.url.hostname == MCP_HOST else "api"


def subagent_name(role: str | None) -> str | None:
    """`scout` for the role `subagent:scout`; None for no role."""
    return role.removeprefix(SUBAGENT) if role is not None and role.startswith(SUBAGENT) else None


Being = Annotated[str, Depends(authorized_being)]
Role = Annotated[str | None, Depends(caller_role)]
