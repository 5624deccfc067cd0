"""Bearer tokens scoped to beings, and the rule that an open server binds only to loopback."""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
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
    description="A token of MINDFLOW_API_TOKENS (`token=beings`); ignored by a server without tokens.",
)
Bearer = Annotated[HTTPAuthorizationCredentials | None, Security(bearer)]
_EXAMPLE = "MINDFLOW_API_TOKENS='tokA=ada,bram;tokB=*'"


@dataclass(frozen=True)
class TokenScopes:
    """Which beings each token may read and write; empty means no authentication at all."""

    scopes: Mapping[str, frozenset[str]]

    @property
    def enabled(self) -> bool:
        return bool(self.scopes)

    def beings_for(self, token: str) -> frozenset[str] | None:
        """The token's beings (`*` for all), or None for an unknown token; constant time per token."""
        found = None
        given = token.encode("utf-8")
        for known, beings in self.scopes.items():
            if hmac.compare_digest(known.encode("utf-8"), given):
                found = beings
        return found

    @staticmethod
    def allows(beings: frozenset[str], being_id: str) -> bool:
        return ALL_BEINGS in beings or being_id in beings


def parse_tokens(spec: str | Mapping[str, str | Iterable[str]] | TokenScopes | None) -> TokenScopes:
    """`tokA=ada,bram;tokB=*` (or a mapping token -> beings) as scopes; None or '' means no tokens.

    A spec that is set but names no token (`;`) or names a token twice is a mistake that
    would open the API or silently drop a scope: both are refused.
    """
    if isinstance(spec, TokenScopes):
        return spec
    if spec is None or (isinstance(spec, str) and not spec.strip()):
        return TokenScopes({})
    if isinstance(spec, Mapping):
        items = [(t, [b] if isinstance(b, str) else list(b)) for t, b in spec.items()]
    else:
        items = []
        for entry in (e.strip() for e in spec.split(";")):
            if not entry:
                continue
            token, sep, beings = entry.partition("=")
            if not sep:
                raise MindflowError(f"API token entry without '=' (token=beings); e.g. {_EXAMPLE}")
            items.append((token.strip(), [b.strip() for b in beings.split(",") if b.strip()]))
        if not items:
            raise MindflowError(
                f"MINDFLOW_API_TOKENS is set but names no token ({spec.strip()!r}): "
                f"set token=beings entries, e.g. {_EXAMPLE}, or unset it to serve without tokens on loopback"
            )
    scopes: dict[str, frozenset[str]] = {}
    for token, beings in items:
        if not token or any(c.isspace() for c in token):
            raise MindflowError(f"an API token is empty or contains spaces; e.g. {_EXAMPLE}")
        if not beings:
            raise MindflowError(f"API token '{token[:4]}...' names no being; use '*' for all; {_EXAMPLE}")
        for being in beings:
            if being != ALL_BEINGS:
                validate_being_id(being)
        if token in scopes:
            raise MindflowError(
                f"API token '{token[:4]}...' is listed twice; list each token once with all its beings, "
                "e.g. MINDFLOW_API_TOKENS='tokA=ada,bram'"
            )
        scopes[token] = frozenset(beings)
    return TokenScopes(scopes)


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
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        beings = scopes.beings_for(token.strip()) if scheme.lower() == "bearer" else None
        if beings is None:
            raise HTTPException(
                401, "missing or unknown bearer token", headers={"WWW-Authenticate": "Bearer"}
            )
        validate_being_id(being_id)
        if not scopes.allows(beings, being_id):
            raise HTTPException(403, f"this token does not cover being {being_id!r}")
    return validate_being_id(being_id)


Being = Annotated[str, Depends(authorized_being)]
