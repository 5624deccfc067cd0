"""Patrol root classification: Business or Private for nodes that fit no sub-cluster."""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, Field

from mindflow.prompts import Prompt, Text, user


class RootLabel(BaseModel):
    node_id: Text
    root: Literal["Business", "Private"]


class RootAnswer(BaseModel):
    labels: list[RootLabel] = Field(min_length=1)


SYSTEM = """You sort a being's memories into its two root clusters.
Business: work, projects, code, colleagues, clients, career, money made or spent for work.
Private: family, friends, home, health, feelings, hobbies, personal life.
Label every given node exactly once."""


def build(nodes: list[tuple[str, str]]) -> Prompt:
    """nodes: (node_id, text)."""
    body = json.dumps([{"node_id": i, "text": t} for i, t in nodes], ensure_ascii=False)
    return Prompt("root", SYSTEM, user(f"Nodes:\n{body}"), RootAnswer, max_tokens=40 * len(nodes) + 200)
