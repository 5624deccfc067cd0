"""Prompts: one module per prompt, each with `build(...) -> Prompt` and the schema it expects."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field

import pydantic


@dataclass(frozen=True)
class Prompt:
    """What one LLM call asks: the system text, the messages and the shape of the answer.

    `schema` None means a plain text answer; otherwise the answer must be one JSON object
    that validates against the pydantic model, or it is rejected.
    """

    name: str
    system: str
    messages: list[dict[str, str]] = field(default_factory=list)
    schema: type[pydantic.BaseModel] | None = None
    max_tokens: int = 4096
    # Checks a validated answer against the request (e.g. only known episode ids);
    # raising ValueError rejects the answer like a wrong shape would.
    check: Callable[[pydantic.BaseModel], None] | None = None

    def full_system(self) -> str:
        """The system text plus, for structured prompts, the JSON schema the answer must follow."""
        if self.schema is None:
            return self.system
        schema = _schema_text(self.schema)
        return (
            f"{self.system}\n\nAnswer with exactly one JSON object and nothing else (no prose, "
            f"no code fence). It must validate against this JSON schema:\n{schema}"
        )


@functools.lru_cache(maxsize=64)
def _schema_text(schema: type[pydantic.BaseModel]) -> str:
    return json.dumps(schema.model_json_schema(), ensure_ascii=False, separators=(",", ":"))


def user(content: str) -> list[dict[str, str]]:
    """A one-message conversation."""
    return [{"role": "user", "content": content}]
