"""Dagster resources: the DuckDB file, the LanceDB folder and the embedding model.

The only module of the library that imports Dagster. Settings are resolved when a
run opens a resource, never when definitions load.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import dagster as dg
import duckdb

from mindflow import lance, store
from mindflow.config import DEFAULT_MODEL, Settings, load_settings
from mindflow.embeddings import Embedder


class MindflowHome(dg.ConfigurableResource):
    """Where state lives: MINDFLOW_HOME unless `home` is set."""

    home: str | None = None

    def settings(self) -> Settings:
        return load_settings(home=self.home)


class DuckDBResource(MindflowHome):
    """The relational stores in `$MINDFLOW_HOME/mindflow.duckdb`, migrated on open."""

    @contextlib.contextmanager
    def connect(self) -> Iterator[duckdb.DuckDBPyConnection]:
        settings = self.settings()
        with store.connect(settings.duckdb_path, lock_timeout_s=settings.duckdb_lock_timeout_s) as con:
            yield con


class LanceDBResource(MindflowHome):
    """The recall tables in `$MINDFLOW_HOME/lance`."""

    def connect(self):
        return lance.connect(self.settings().lance_path)


class EmbeddingResource(dg.ConfigurableResource):
    """The embedding model; OpenAI models read their key from OPENAI_API_KEY at run time."""

    model: str | None = None
    batch_size: int = 64
    openai_base_url: str | None = None

    def embedder(self) -> Embedder:
        settings = load_settings()
        return Embedder(
            model=self.model or settings.embedding_model or DEFAULT_MODEL,
            batch_size=self.batch_size,
            openai_api_key=os.environ.get("OPENAI_API_KEY"),
            openai_base_url=self.openai_base_url,
        )
