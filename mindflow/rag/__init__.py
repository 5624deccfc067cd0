"""Ebook RAG: parse a document folder, chunk it, index it in LanceDB `ebook_chunks`, search it.

Heavy modules (lxml, pypdf, lancedb, the model) load on first use: the folder sensor
imports `mindflow.rag.folder` while Dagster loads its definitions.
"""

from mindflow.rag.ebooks import TABLE, reindex, search

__all__ = ["TABLE", "reindex", "search"]
