"""The being's diary entry for the day: 3-5 lines in its own voice, about this cycle."""

from __future__ import annotations

from pydantic import BaseModel, Field, field_validator

from mindflow.prompts import Prompt, Text, user


class DiaryAnswer(BaseModel):
    lines: list[Text] = Field(min_length=3, max_length=5)

    @field_validator("lines")
    @classmethod
    def non_empty(cls, lines: list[str]) -> list[str]:
        lines = [" ".join(line.split()) for line in lines]
        if any(not line for line in lines):
            raise ValueError("empty diary line")
        return lines


SYSTEM = """You are the being whose memory this is. Write today's diary entry: 3 to 5 short
lines in the first person, about what happened and how it felt. No headings. When today's entry
already has lines, write the day's entry again: keep what they say and add what is new."""


def build(
    being_id: str, day: str, scenes: list[str], changes: str, so_far: list[str] | None = None
) -> Prompt:
    body = f"Being: {being_id}\nDay: {day}\nWhat the patrol did: {changes}\n"
    if so_far:
        body += "Today's entry so far:\n" + "\n".join(f"- {line}" for line in so_far) + "\n"
    body += "Scenes since the last entry:\n" + "\n".join(f"- {s}" for s in scenes)
    return Prompt("diary", SYSTEM, user(body), DiaryAnswer, max_tokens=600)
