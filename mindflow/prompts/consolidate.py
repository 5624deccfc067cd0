"""Patrol ❹ consolidation: which nodes of a cluster merge, and which may die."""

from __future__ import annotations

import json

from pydantic import BaseModel, Field

from mindflow.prompts import Prompt, Text, user


class Merge(BaseModel):
    survivor: Text
    absorbed: list[Text] = Field(min_length=1)


class ConsolidateAnswer(BaseModel):
    merges: list[Merge] = Field(default_factory=list)
    make_dead: list[Text] = Field(default_factory=list)


SYSTEM = """You consolidate one cluster of a being's memory nodes.
Merge nodes that describe the same moment or the same lasting fact: name the survivor (the
richest node) and the nodes it absorbs. List in make_dead the dying nodes that are no longer
worth keeping. Leave everything else alone; an empty answer is fine. Use only given node ids,
each at most once."""


def build(cluster_label: str, nodes: list[dict]) -> Prompt:
    """nodes: dicts with node_id, text, status, fresh, importance."""
    body = json.dumps(nodes, ensure_ascii=False)
    return Prompt(
        "consolidate", SYSTEM, user(f"Cluster: {cluster_label}\nNodes:\n{body}"), ConsolidateAnswer,
        max_tokens=30 * len(nodes) + 300,
    )  # fmt: skip
