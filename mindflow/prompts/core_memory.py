"""Prompt `core_memory`: MEMORY.md rewritten in its four blocks from the mechanical draft."""

from __future__ import annotations

import pydantic

from mindflow.prompts import Prompt, Text, user


class CoreMemory(pydantic.BaseModel):
    identity: Text = pydantic.Field(description="Who I am, in two or three sentences.")
    active_context: list[Text] = pydantic.Field(description="What is going on now: open tasks, threads.")
    persona: list[Text] = pydantic.Field(description="How I work with my people: preferences, manner.")
    critical_facts: list[Text] = pydantic.Field(description="Facts that must never be forgotten.")


def build(being_id: str, soul: str, draft: str, *, max_words: int, max_tokens: int = 3000) -> Prompt:
    """Rewrite the draft tighter and clearer; pinned facts stay (they are re-added if dropped)."""
    return Prompt(
        name="core_memory",
        system=(
            f"You maintain {being_id}'s core memory, MEMORY.md, read at the start of every session. "
            "Rewrite the draft into four blocks: identity, active context, persona, critical facts. "
            f"Stay under {max_words} words in total. Keep every critical fact, merge duplicates, drop "
            "what is stale, keep names and numbers exact, write each item as one short line.\n\n"
            f"Identity context (SOUL.md):\n{soul or '(none)'}"
        ),
        messages=user(f"The draft:\n\n{draft}"),
        schema=CoreMemory,
        max_tokens=max_tokens,
    )
