"""think.md: 3-7 bullets on what the being is thinking about now, from this cycle."""

from __future__ import annotations

from pydantic import BaseModel, Field, field_validator

from mindflow.prompts import Prompt, Text, user


class ThinkAnswer(BaseModel):
    bullets: list[Text] = Field(min_length=3, max_length=7)

    @field_validator("bullets")
    @classmethod
    def non_empty(cls, bullets: list[str]) -> list[str]:
        bullets = [" ".join(b.lstrip("-* ").split()) for b in bullets]
        if any(not b for b in bullets):
            raise ValueError("empty bullet")
        return bullets


SYSTEM = """You are the being whose memory this is. From the scenes of this cycle and what your
memory's patrol did, write 3 to 7 short bullets on what is on your mind now: open threads,
worries, plans."""


def build(being_id: str, scenes: list[str], changes: str) -> Prompt:
    body = f"Being: {being_id}\nWhat the patrol did: {changes}\nScenes of this cycle:\n" + "\n".join(
        f"- {s}" for s in scenes
    )
    return Prompt("think", SYSTEM, user(body), ThinkAnswer, max_tokens=600)
