"""What every prompt is made of: `Prompt`, the one-message conversation, and the validated
types their answer schemas share (Text, OptionalText, Unit, IsoDate)."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Annotated

import pydantic
from pydantic import AfterValidator, BeforeValidator, Field, StringConstraints

# Every text a model's answer puts into a table or a file: surrounding whitespace is
# stripped and a blank value fails validation, so the answer is rejected (failover,
# [PARSE_FAILED]) like any other wrong shape, and no blank text is ever written.
Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]


def _blank_to_none(value: object) -> object:
    return None if isinstance(value, str) and not value.strip() else value


# An optional text: absent, null and blank all mean "none" (models send "" for a
# missing setting or dialogue); a given value is stripped like Text.
OptionalText = Annotated[Text | None, BeforeValidator(_blank_to_none)]

# A score in [0, 1]; NaN and infinities are refused (Python's json accepts NaN).
Unit = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]

_ISO_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")


def _iso_date(value: str) -> str:
    """YYYY-MM-DD; an ISO date-time is cut to its date. Anything else is refused."""
    text = value.strip()
    try:
        if _ISO_DAY.fullmatch(text):
            return date.fromisoformat(text).isoformat()
        if _ISO_DAY.match(text) and text[10:11] in ("T", " "):
            return datetime.fromisoformat(text).date().isoformat()
    except ValueError:
        pass
    raise ValueError(f"not an ISO date (YYYY-MM-DD): {text[:40]!r}")


IsoDate = Annotated[str, AfterValidator(_iso_date), Field(description="YYYY-MM-DD")]


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
