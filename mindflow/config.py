"""Typed settings read from the environment and `.env` (prefix MINDFLOW_)."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_MODEL = "all-MiniLM-L6-v2"


class Settings(BaseSettings):
    """Where mindflow keeps its state and which embedding model it uses.

    Every field can be set as MINDFLOW_<NAME> in the environment or in `.env`.
    """

    model_config = SettingsConfigDict(env_prefix="MINDFLOW_", env_file=".env", extra="ignore")

    home: Path = Field(default=Path("data"), description="MINDFLOW_HOME: the folder holding all state.")
    embedding_model: str = Field(
        default=DEFAULT_MODEL,
        description="all-MiniLM-L6-v2 (bundled, offline), any sentence-transformers name or path, "
        "or openai:text-embedding-3-small (needs OPENAI_API_KEY).",
    )
    embedding_batch_size: int = 64
    ingest_max_gap_days: int = Field(
        default=120,
        description="An ingest of pending files starts a new run where their days lie further apart: "
        "Dagster records ~17 ms per daily partition and ~2.5 s per run, so shorter gaps cost less "
        "as one run.",
    )
    duckdb_lock_timeout_s: float = Field(
        default=600.0, description="How long a job waits for another process holding the DuckDB file."
    )
    api_tokens: SecretStr | None = Field(
        default=None,
        description="Bearer tokens of the read API, each scoped to beings: 'tokA=ada,bram;tokB=*'. "
        "Without any, `mindflow serve` binds only to loopback.",
    )
    api_max_body_bytes: int = Field(default=1_048_576, description="Larger request bodies get 413.")
    api_max_query_chars: int = Field(default=4_000, description="Longer recall queries get 422.")
    api_max_episodes: int = Field(default=1_000, description="Episodes per POST episodes request.")
    api_echo_recalls: int = Field(
        default=25, description="Echo filter: refs shown in a session's last N recalls are not repeated."
    )
    api_echo_sessions: int = Field(
        default=10_000, description="Sessions the echo filter remembers (least recently used dropped)."
    )
    api_query_cache: int = Field(default=2_048, description="Query vectors kept in memory (LRU).")

    @cached_property
    def resolved_home(self) -> Path:
        return self.home.expanduser().resolve()

    @property
    def duckdb_path(self) -> Path:
        return self.resolved_home / "mindflow.duckdb"

    @property
    def lance_path(self) -> Path:
        return self.resolved_home / "lance"

    @property
    def inbox(self) -> Path:
        return self.resolved_home / "inbox"

    @property
    def events(self) -> Path:
        return self.resolved_home / "events"

    @property
    def workspace(self) -> Path:
        return self.resolved_home / "workspace"

    @property
    def dagster_home(self) -> Path:
        return self.resolved_home / "dagster"


def load_settings(**overrides) -> Settings:
    """Settings from the environment, `.env` and explicit overrides (None values ignored)."""
    return Settings(**{k: v for k, v in overrides.items() if v is not None})
