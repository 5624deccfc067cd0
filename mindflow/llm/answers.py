"""Reading a model's answer: the one JSON object in it, validated against the prompt's schema."""

from __future__ import annotations

import json
import re

import pydantic

from mindflow.llm.providers import Unusable

_FENCE = re.compile(r"^```[a-zA-Z0-9_-]*\s*|\s*```$")


def parse_structured(text: str, schema: type[pydantic.BaseModel]) -> pydantic.BaseModel:
    """The one JSON object in a model's answer, validated; Unusable otherwise."""
    body = _FENCE.sub("", text.strip()).strip()
    if not body.startswith("{"):
        start, end = body.find("{"), body.rfind("}")
        if start < 0 or end <= start:
            raise Unusable("no JSON object in the answer")
        body = body[start : end + 1]
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        raise Unusable(f"malformed JSON ({exc.msg} at {exc.pos})") from None
    except RecursionError:
        # Python's parser recurses per level: a hostile answer must not take the run down.
        raise Unusable("JSON nested too deeply") from None
    except ValueError as exc:  # e.g. an integer past Python's 4,300-digit parsing limit
        raise Unusable(f"unreadable JSON ({str(exc)[:80]})") from None
    if not isinstance(data, dict):
        raise Unusable("the answer is not a JSON object")
    try:
        # pydantic-core bounds its own depth: too deep a value is a ValidationError (wrong shape).
        return schema.model_validate(data)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first.get("loc", ())) or "(root)"
        raise Unusable(f"wrong shape: {loc}: {first.get('msg')}") from None
