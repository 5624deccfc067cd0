"""The read API: FastAPI app (`create_app`), its models (shared with `mindflow.client`) and auth."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mindflow.api.app import create_app

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    # The client imports mindflow.api.models; it should not pay for FastAPI, LanceDB and torch.
    if name == "create_app":
        from mindflow.api.app import create_app

        return create_app
    raise AttributeError(name)
