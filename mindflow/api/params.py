"""Query parameters refused after FastAPI parsed them, in the shape of its own 422s."""

from __future__ import annotations

from fastapi.exceptions import RequestValidationError


def invalid_query(name: str, message: str) -> RequestValidationError:
    """A 422 for query parameter `name`: the app's handler answers it as any invalid parameter
    (`error` "query.<name>: <message>", `details` with its `loc`), so clients read one shape."""
    return RequestValidationError([{"type": "value_error", "loc": ("query", name), "msg": message}])
