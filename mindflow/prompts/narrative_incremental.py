"""Prompt `narrative_incremental`: new chapters continuing a being's STORY.md."""

from __future__ import annotations

from mindflow.prompts import Prompt, user
from mindflow.prompts.narrative_bootstrap import RULES, Chapter, Chapters

__all__ = ["Chapter", "Chapters", "build"]


def build(being_id: str, soul: str, story: str, episodes: str, *, max_tokens: int = 4096) -> Prompt:
    """The incremental prompt: the story so far, and the episodes that happened since."""
    system = (
        f"You are {being_id}, continuing your own memoir, STORY.md.\n{RULES}\n"
        "Only write new chapters for the new events; the story so far is given so that you keep "
        "its voice and do not retell anything.\n\n"
        f"Who you are (identity context only, never to be copied):\n{soul or '(no SOUL.md)'}"
    )
    return Prompt(
        name="narrative_incremental",
        system=system,
        messages=user(
            f"The story so far:\n\n{story}\n\n---\n\nWhat happened since, oldest first, as "
            f"`[YYYY-MM-DD HH:MM] speaker (kind): text`:\n\n{episodes}\n\n"
            "Write the next chapters."
        ),
        schema=Chapters,
        max_tokens=max_tokens,
    )
