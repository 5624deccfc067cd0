"""Dagster resources: the DuckDB file, the LanceDB folder and the embedding model.

The only module of the library that imports Dagster. Settings are resolved when a
run opens a resource; when definitions load, only which variables are set is read.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import dagster as dg
import duckdb
from pydantic import Field

from mindflow import checkout, lance, store
from mindflow.config import DEFAULT_MODEL, Settings, load_settings
from mindflow.embeddings import Embedder


def _declared(fields: dict[str, str]) -> dict:
    """`dg.EnvVar`s for the fields whose variables are set in this process's environment.

    Only the names are read when the code location loads; Dagster resolves the values in
    the run, and shows the names in the UI. Run workers inherit the code location's environment.
    """
    declared = {}
    for name, variable in fields.items():
        if variable in os.environ:
            declared[name] = dg.EnvVar.int(variable) if name == "batch_size" else dg.EnvVar(variable)
    return declared


class MindflowHome(dg.ConfigurableResource):
    """Where state lives: MINDFLOW_HOME unless `home` is set."""

    home: str | None = Field(
        default=None,
        description="The folder holding all state; the code location sets it as EnvVar('MINDFLOW_HOME').",
    )

    @classmethod
    def from_environment(cls):
        """The resource with `home` as EnvVar('MINDFLOW_HOME') where that is set (the Makefile and the
        CLI set it); unset, the setting's default ("data") applies."""
        return cls(**_declared({"home": "MINDFLOW_HOME"}))

    def settings(self) -> Settings:
        return load_settings(home=self.home)


# How often a step whose checkout conflicted runs again (each on a new checkout) before its run fails.
CONFLICT_RETRIES = 5


class DuckDBResource(MindflowHome):
    """The relational stores in `$MINDFLOW_HOME/mindflow.duckdb`, migrated on open."""

    @contextlib.contextmanager
    def connect(self) -> Iterator[duckdb.DuckDBPyConnection]:
        settings = self.settings()
        with store.connect(settings.duckdb_path, lock_timeout_s=settings.duckdb_lock_timeout_s) as con:
            yield con

    def beings(self, being_ids: list[str]) -> Iterator[tuple[list[str], duckdb.DuckDBPyConnection]]:
        """(beings, connection) for steps that touch only the rows of the beings they are given.

        One writer (MINDFLOW_DUCKDB_WRITERS=1): all of them, on the store itself. Several: one
        being at a time on a checkout of its rows (mindflow/checkout.py), so runs of other beings
        write at once; a checkout that conflicts asks Dagster to run the step again.
        """
        settings = self.settings()
        if settings.duckdb_writers <= 1:
            with self.connect() as con:
                yield list(being_ids), con
            return
        for being_id in being_ids:
            try:
                with checkout.checkout(
                    settings.duckdb_path,
                    settings.checkouts,
                    being_id,
                    lock_timeout_s=settings.duckdb_lock_timeout_s,
                ) as con:
                    yield [being_id], con
            except checkout.CommitConflict as exc:
                raise dg.RetryRequested(max_retries=CONFLICT_RETRIES, seconds_to_wait=1.0) from exc


class LanceDBResource(MindflowHome):
    """The recall tables in `$MINDFLOW_HOME/lance`."""

    def connect(self):
        return lance.connect(self.settings().lance_path)


class EmbeddingResource(dg.ConfigurableResource):
    """The embedding model; OpenAI models read their key from OPENAI_API_KEY at run time.

    A field left unset takes the setting (the environment, then `.env`, then the default) when
    a run opens the resource. The code location declares `model` and `batch_size` as
    `dg.EnvVar`s where their variables are set when it loads (`from_environment`), so the UI's
    Resources tab names them; not otherwise, since Dagster fails a run whose EnvVar is unset.
    """

    model: str | None = Field(default=None, description="MINDFLOW_EMBEDDING_MODEL when unset.")
    batch_size: int | None = Field(default=None, description="MINDFLOW_EMBEDDING_BATCH_SIZE when unset.")
    openai_base_url: str | None = None

    @classmethod
    def from_environment(cls) -> EmbeddingResource:
        """The resource with an EnvVar for each of its variables set in this process's environment."""
        return cls(
            **_declared({"model": "MINDFLOW_EMBEDDING_MODEL", "batch_size": "MINDFLOW_EMBEDDING_BATCH_SIZE"})
        )

    def embedder(self) -> Embedder:
        settings = load_settings()
        return Embedder.for_settings(
            settings,
            model=self.model or settings.embedding_model or DEFAULT_MODEL,
            batch_size=self.batch_size or settings.embedding_batch_size,
            openai_api_key=os.environ.get("OPENAI_API_KEY"),
            openai_base_url=self.openai_base_url,
        )
