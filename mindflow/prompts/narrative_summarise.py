"""Prompt `narrative_summarise`: older chapters of STORY.md condensed when the story grows too long."""

from __future__ import annotations

import pydantic

from mindflow.prompts import Prompt, Text, user


class Summary(pydantic.BaseModel):
    title: Text = pydantic.Field(max_length=80)
    text: Text


def build(being_id: str, chapters: str, *, target_words: int, max_tokens: int = 4096) -> Prompt:
    """Condense `chapters` (markdown, oldest first) into one first-person chapter of ~target_words."""
    return Prompt(
        name="narrative_summarise",
        system=(
            f"You are {being_id}, condensing the older chapters of your memoir. Write in the first "
            f"person, at most {target_words} words, keeping names, decisions, outcomes and dates that "
            "later chapters rely on. No markdown headings in the text; the title is short and evocative."
        ),
        messages=user(f"The chapters to condense, oldest first:\n\n{chapters}"),
        schema=Summary,
        max_tokens=max_tokens,
    )
