"""Prompt `narrative_bootstrap`: the first chapters of a being's STORY.md, from its earliest episodes."""

from __future__ import annotations

import pydantic

from mindflow.prompts import Prompt, Text, user

RULES = """\
Write in the first person, as the being itself, in plain prose.
Keep concrete facts, names, numbers, places, decisions and outcomes; do not invent any.
Each chapter covers one stretch of time (usually a day or a session): give it a short evocative
title (at most eight words) and the date and time (YYYY-MM-DD HH:MM, UTC) of its first event.
Never repeat an event the story already tells. Never copy the identity description (SOUL.md),
its headings or its wording into the story: it is context, not content.
No markdown headings inside a chapter's text."""


class Chapter(pydantic.BaseModel):
    when: str = pydantic.Field(pattern=r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}$", description="YYYY-MM-DD HH:MM")
    title: Text = pydantic.Field(max_length=80)
    text: Text


class Chapters(pydantic.BaseModel):
    chapters: list[Chapter] = pydantic.Field(min_length=1)


def build(being_id: str, soul: str, episodes: str, *, max_tokens: int = 4096) -> Prompt:
    """The bootstrap prompt: no story yet; `episodes` is the rendered batch, oldest first."""
    system = (
        f"You are {being_id}, writing your own memoir: STORY.md, the story of what you lived "
        "through with the people you work with.\n"
        f"{RULES}\n\nWho you are (identity context only, never to be copied):\n{soul or '(no SOUL.md)'}"
    )
    return Prompt(
        name="narrative_bootstrap",
        system=system,
        messages=user(
            "There is no story yet. Here is everything that happened so far, oldest first, one "
            "line per message or event as `[YYYY-MM-DD HH:MM] speaker (kind): text`:\n\n"
            f"{episodes}\n\nWrite the opening chapters of the story."
        ),
        schema=Chapters,
        max_tokens=max_tokens,
    )
