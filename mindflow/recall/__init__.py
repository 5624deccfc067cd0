"""Recall over the LanceDB `memories` table: retrieval primitives, fusion, re-ranking, tools."""

from mindflow.recall.config import RecallConfig
from mindflow.recall.hot import BeingIndex, HotIndexes
from mindflow.recall.models import Memory
from mindflow.recall.primitives import open_memories, sanitize_fts_query
from mindflow.recall.search import cluster_memories, recall, search_memory

__all__ = [
    "BeingIndex",
    "HotIndexes",
    "Memory",
    "RecallConfig",
    "cluster_memories",
    "open_memories",
    "recall",
    "sanitize_fts_query",
    "search_memory",
]
