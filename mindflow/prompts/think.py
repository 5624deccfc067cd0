"""think.md: 3-7 bullets on what the being is thinking about now."""

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


SYSTEM = """You are the being whose memory this is. From its clusters and most important recent
memories, write 3 to 7 short bullets on what is on its mind now: open threads, worries, plans."""


def build(being_id: str, clusters: list[str], memories: list[str]) -> Prompt:
    body = f"Being: {being_id}\nClusters: {', '.join(clusters)}\nImportant memories:\n" + "\n".join(
        f"- {m}" for m in memories
    )
    return Prompt("think", SYSTEM, user(body), ThinkAnswer, max_tokens=600)
