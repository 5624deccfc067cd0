"""`POST /v1/ebooks/search`: hybrid search of the ebook index (its models live in `mindflow.api.models`).

The ebook index belongs to no being: any known token may search it; without tokens the
server is loopback-only, as for every other route.
"""

from __future__ import annotations

import math
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from starlette.exceptions import HTTPException

from mindflow.api.auth import Bearer, TokenScopes
from mindflow.api.models import EbookHitOut, EbookSearchRequest, EbookSearchResponse


async def authorized_token(request: Request, _: Bearer = None) -> None:
    """401 without a known bearer token when the server has tokens; any token's scope will do."""
    scopes: TokenScopes = request.app.state.tokens
    if scopes.enabled:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or scopes.beings_for(token.strip()) is None:
            raise HTTPException(
                401, "missing or unknown bearer token", headers={"WWW-Authenticate": "Bearer"}
            )


def ebooks_router(errors: dict) -> APIRouter:
    router = APIRouter(prefix="/v1/ebooks", responses=errors)

    @router.post("/search", response_model=EbookSearchResponse, tags=["ebooks"])
    def search(
        request: Request,
        body: EbookSearchRequest,
        _: Annotated[None, Depends(authorized_token)],
    ) -> EbookSearchResponse:
        """Passages of the indexed ebooks: vector and full-text candidates fused by reciprocal rank."""
        from mindflow.rag.hybrid import open_chunks, search_chunks

        service = request.app.state.service
        query = service.check_query(body.query)
        table = open_chunks(service.settings.lance_path)
        hits = search_chunks(table, query, service.vectors.get(query), body.k) if table is not None else []
        return EbookSearchResponse(
            query=query,
            hits=[
                EbookHitOut(
                    doc_id=h.doc_id,
                    title=h.title,
                    author=h.author,
                    chapter=h.chapter,
                    ordinal=h.ordinal,
                    char_start=h.char_start,
                    char_end=h.char_end,
                    text=h.text,
                    score=h.score,
                    parts={name: v for name, v in h.parts.items() if math.isfinite(v)},
                )
                for h in hits
            ],
        )

    return router
