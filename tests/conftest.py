"""Shared fixtures: a fresh MINDFLOW_HOME per test, real DuckDB, real LanceDB, the real model."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Tests build stores with the session's `embedder` (sentence-transformers, float32) and serve
# them from settings: one home, one encoder. The int8 default of new homes is tested where it
# is unset again (tests/test_embeddings.py).
os.environ.setdefault("MINDFLOW_EMBEDDING_PRECISION", "fp32")

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "data" / "samples"
SHARED_DATASETS = REPO.parent / "shared" / "datasets"


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory) -> Path:
    """One folder for derived model files (the server's ONNX query encoder) for the session."""
    return tmp_path_factory.mktemp("models")


@pytest.fixture
def home(tmp_path, monkeypatch, models_dir) -> Path:
    """An empty MINDFLOW_HOME (and DAGSTER_HOME inside it) for one test."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("MINDFLOW_HOME", str(home))
    monkeypatch.setenv("DAGSTER_HOME", str(home / "dagster"))
    monkeypatch.setenv("MINDFLOW_MODELS_DIR", str(models_dir))
    return home


@pytest.fixture
def settings(home):
    from mindflow.config import load_settings

    return load_settings()


@pytest.fixture
def con(settings):
    """A migrated DuckDB connection on the test's own file."""
    from mindflow import store

    with store.connect(settings.duckdb_path) as connection:
        yield connection


@pytest.fixture(scope="session")
def embedder():
    """The real all-MiniLM-L6-v2, loaded once per test session."""
    from mindflow.embeddings import Embedder

    return Embedder()


@pytest.fixture
def sample_inbox(settings) -> Path:
    """The tracked sample files copied into the test's inbox."""
    shutil.copytree(SAMPLES / "inbox", settings.inbox, dirs_exist_ok=True)
    return settings.inbox


@pytest.fixture
def llm_server(monkeypatch):
    """A scripted OpenAI/Anthropic server on 127.0.0.1 (tests/llm_server.py).

    `llm_server.configure("openai:gpt-4o", fallback=...)` points MINDFLOW_LLM* at it with
    fake keys, short timeouts and fast retries; `script([...])` queues its answers.
    """
    from llm_server import LLMServer

    server = LLMServer()

    def configure(llm: str | None = "openai-compatible:loopback", fallback: str | None = None, **env):
        monkeypatch.setenv("MINDFLOW_LLM_BASE_URL", server.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-SECRET-anthropic-0000")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-SECRET-openai-0000")
        monkeypatch.setenv("MINDFLOW_LLM_TIMEOUT_S", "2")
        monkeypatch.setenv("MINDFLOW_LLM_RETRY_BACKOFF_S", "0.01")
        for name, value in {"MINDFLOW_LLM": llm, "MINDFLOW_LLM_FALLBACK": fallback, **env}.items():
            name = (
                name if name.startswith("MINDFLOW_") or name.endswith("_KEY") else f"MINDFLOW_{name.upper()}"
            )
            if value is None:
                monkeypatch.delenv(name, raising=False)
            else:
                monkeypatch.setenv(name, str(value))

    server.configure = configure
    yield server
    server.close()
