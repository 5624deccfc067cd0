"""Patrol ❻ split: new sub-clusters carved out of a cluster with more than 10 active nodes."""

from __future__ import annotations

import json

from pydantic import BaseModel, Field

from mindflow.prompts import Prompt, Text, user


class Group(BaseModel):
    label: Text = Field(max_length=80)
    node_ids: list[Text] = Field(min_length=2)


class SplitAnswer(BaseModel):
    groups: list[Group] = Field(default_factory=list)


SYSTEM = """You organise a being's memory. A cluster has grown large: propose coherent topics
inside it as new groups, each with a short label and at least 2 node ids. Nodes that fit no
group stay where they are, and at least 2 nodes must stay. Use only given ids, each at most
once. Propose no group when the cluster is already coherent."""


def build(cluster_label: str, nodes: list[tuple[str, str]]) -> Prompt:
    body = json.dumps([{"node_id": i, "text": t} for i, t in nodes], ensure_ascii=False)
    return Prompt(
        "split", SYSTEM, user(f"Cluster: {cluster_label}\nNodes:\n{body}"), SplitAnswer,
        max_tokens=20 * len(nodes) + 300,
    )  # fmt: skip
