"""Prompts of the reflection cycle: meta-reflection (phase 2), merge judgement and procedures (phase 3)."""

from __future__ import annotations

import pydantic

from mindflow.prompts import Prompt, Text, Unit, user


class Meta(pydantic.BaseModel):
    insights: list[Text] = pydantic.Field(
        max_length=5, description="What earlier reflections show about how this memory is kept."
    )


class MergeVerdict(pydantic.BaseModel):
    group: int = pydantic.Field(ge=1, description="The group's number as shown.")
    same: bool = pydantic.Field(description="True when the memories tell one and the same thing.")
    reason: Text


class Merges(pydantic.BaseModel):
    verdicts: list[MergeVerdict]


class LearnedProcedure(pydantic.BaseModel):
    name: Text
    trigger: Text = pydantic.Field(description="When the procedure applies.")
    steps: list[Text] = pydantic.Field(min_length=1, max_length=20)
    notes: Text | None = None
    learned_from: list[Text] = pydantic.Field(min_length=2, description="Episode ids, at least two.")
    confidence: Unit


class Procedures(pydantic.BaseModel):
    procedures: list[LearnedProcedure] = pydantic.Field(max_length=5)


def meta(being_id: str, log_tail: str, evolution: str, *, max_tokens: int) -> Prompt:
    return Prompt(
        name="reflection_meta",
        system=(
            f"You review how {being_id}'s memory has been reflected on so far. From the reflection log "
            "and the milestones, name at most five short insights: patterns in what was proposed, "
            "approved and rejected, and what the next reflection should do differently. Use only what "
            "the texts say."
        ),
        messages=user(
            f"Reflection log (latest part):\n{log_tail or '(empty)'}\n\nMilestones:\n{evolution or '(none)'}"
        ),
        schema=Meta,
        max_tokens=max_tokens,
    )


def merges(being_id: str, groups: list[list[tuple[str, str]]], *, max_tokens: int) -> Prompt:
    shown = "\n\n".join(
        f"Group {i}:\n" + "\n".join(f"- {ref}: {text}" for ref, text in group)
        for i, group in enumerate(groups, 1)
    )
    return Prompt(
        name="reflection_merges",
        system=(
            f"You consolidate {being_id}'s memories. Each group holds memories that look alike. "
            "For each group say whether they tell one and the same thing (then they can be merged "
            "into one) and why. Different events on different days are not the same thing."
        ),
        messages=user(shown),
        schema=Merges,
        max_tokens=max_tokens,
    )


def procedures(being_id: str, episodes: list[tuple[str, str, str]], *, max_tokens: int) -> Prompt:
    shown = "\n".join(f"- {episode_id} [{kind}] {text}" for episode_id, kind, text in episodes)
    return Prompt(
        name="reflection_procedures",
        system=(
            f"You find the procedures {being_id} has learned: a sequence of decisions or tasks that "
            "was repeated at least twice. For each give a name, when it applies, its steps, and the "
            "ids of the episodes it was learned from (at least two, only ids shown). Propose nothing "
            "that was done only once."
        ),
        messages=user(f"Decisions and tasks:\n{shown}"),
        schema=Procedures,
        max_tokens=max_tokens,
    )
