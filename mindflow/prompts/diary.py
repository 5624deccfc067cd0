"""The being's diary entry for the day: 3-5 lines in its own voice."""

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
lines in the first person, about what happened and how it felt. No headings."""


def build(being_id: str, day: str, memories: list[str], changes: str) -> Prompt:
    body = f"Being: {being_id}\nDay: {day}\nWhat the patrol did: {changes}\nToday's memories:\n" + "\n".join(
        f"- {m}" for m in memories
    )
    return Prompt("diary", SYSTEM, user(body), DiaryAnswer, max_tokens=600)
