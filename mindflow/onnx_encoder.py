"""One query at a time through onnxruntime: the vectors of sentence-transformers, 3x sooner.

A recall embeds one short query. PyTorch spends ~15 ms on MiniLM for it, most of it in
per-operator overhead; onnxruntime runs the same graph in ~5 ms. Batches (the patrol,
ebook chunks) gain nothing and stay on sentence-transformers.

The graph is exported once from the sentence-transformers model (with torch, ~2 s) to
`<cache_dir>/<model>-<fingerprint>.onnx`, checked against sentence-transformers on probe
texts, and loaded without torch afterwards. Only models whose modules are a Transformer,
mean pooling and an optional Normalize qualify; any other model, or a failed export, keeps
the sentence-transformers path (`load` returns None and says why in the log).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import warnings
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

PROBES = [
    "I went camping with my kids last summer near the lake.",
    "What did Caroline research?",
    "-100123:45 HEARTBEAT_OK",
    "Zürich, 14:30 — decision: ship the ebook index on Sunday",
]
# The exported graph must reproduce sentence-transformers on the probes to this cosine.
MIN_PROBE_COSINE = 0.9999
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class OnnxQueryEncoder:
    """Mean-pooled, L2-normalised embeddings of single texts from an exported graph."""

    def __init__(self, graph: Path, model_dir: Path, max_length: int, normalize: bool, threads: int = 2):
        import onnxruntime
        from tokenizers import Tokenizer

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        # Idle worker threads sleep instead of spinning: a recall's vector and full-text
        # search run right after the embedding and need the cores.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = onnxruntime.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
        self.inputs = {i.name for i in self.session.get_inputs()}
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length)
        self.normalize = normalize

    def encode(self, text: str) -> np.ndarray:
        encoding = self.tokenizer.encode(text)
        ids = np.array([encoding.ids], dtype=np.int64)
        mask = np.array([encoding.attention_mask], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        hidden = self.session.run(None, {k: v for k, v in feed.items() if k in self.inputs})[0][0]
        weights = mask[0, :, None].astype(np.float32)
        vector = (hidden * weights).sum(axis=0) / max(float(weights.sum()), 1e-9)
        if self.normalize:
            vector = vector / max(float(np.linalg.norm(vector)), 1e-12)
        return vector.astype(np.float32)


def _modules(model_dir: Path) -> tuple[int, bool] | None:
    """(max_length, normalize) when the model is Transformer + mean pooling [+ Normalize]."""
    try:
        modules = json.loads((model_dir / "modules.json").read_text())
        kinds = [m["type"].rsplit(".", 1)[-1] for m in modules]
        pooling = next(m for m in modules if m["type"].endswith("Pooling"))
        pooling_config = json.loads((model_dir / pooling["path"] / "config.json").read_text())
        max_length = json.loads((model_dir / "sentence_bert_config.json").read_text())["max_seq_length"]
    except (OSError, ValueError, KeyError, StopIteration):
        return None
    if kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
        return None
    if not pooling_config.get("pooling_mode_mean_tokens") or any(
        pooling_config.get(f"pooling_mode_{mode}")
        for mode in ("cls_token", "max_tokens", "mean_sqrt_len_tokens", "weightedmean_tokens", "lasttoken")
    ):
        return None
    if not (model_dir / "tokenizer.json").is_file():
        return None
    return int(max_length), kinds[-1] == "Normalize"


def _fingerprint(model_dir: Path) -> str:
    """Changes when the model's files change: names, sizes and modification times."""
    digest = hashlib.sha256()
    for path in sorted(p for p in model_dir.rglob("*") if p.is_file()):
        stat = path.stat()
        digest.update(f"{path.relative_to(model_dir)}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def _export(model, graph: Path) -> None:
    """Write the transformer of a loaded sentence-transformers model as an ONNX graph."""
    import torch

    class Hidden(torch.nn.Module):
        def __init__(self, transformer):
            super().__init__()
            self.transformer = transformer

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.transformer(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    transformer = model[0].auto_model.eval()
    sample = model.tokenizer(["warm up"], return_tensors="pt")
    args = tuple(sample.get(name, torch.zeros_like(sample["input_ids"])) for name in _INPUTS)
    axes = {name: {0: "batch", 1: "tokens"} for name in (*_INPUTS, "last_hidden_state")}
    partial = graph.with_suffix(f".{os.getpid()}.{threading.get_ident()}.partial")
    try:
        # The tracer warns about shapes it freezes; the probes below check the graph instead.
        with torch.inference_mode(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                Hidden(transformer),
                args,
                str(partial),
                input_names=list(_INPUTS),
                output_names=["last_hidden_state"],
                dynamic_axes=axes,
                opset_version=17,
                dynamo=False,
            )
        os.replace(partial, graph)
    finally:
        partial.unlink(missing_ok=True)


def load(
    model_dir: Path | None, cache_dir: Path, load_model, name: str, threads: int = 2
) -> OnnxQueryEncoder | None:
    """The onnxruntime encoder of a local model, exported on first use; None when it cannot be.

    `load_model()` returns the sentence-transformers model; it is only called (and torch only
    imported) when the graph has to be exported.
    """
    if model_dir is None:
        return None
    shape = _modules(model_dir)
    if shape is None:
        log.info("query embedding of %s stays on sentence-transformers (not mean-pooled)", name)
        return None
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        log.info("onnxruntime is not installed: query embedding stays on sentence-transformers")
        return None
    max_length, normalize = shape
    slug = "".join(c if c.isalnum() or c in "-_." else "_" for c in name.rsplit("/", 1)[-1])
    graph = cache_dir / f"{slug}-{_fingerprint(model_dir)}.onnx"
    try:
        if not graph.is_file():
            cache_dir.mkdir(parents=True, exist_ok=True)
            model = load_model()
            _export(model, graph)
            encoder = OnnxQueryEncoder(graph, model_dir, max_length, normalize, threads)
            expected = model.encode(PROBES, normalize_embeddings=True, convert_to_numpy=True)
            got = np.stack([encoder.encode(p) for p in PROBES])
            got = got / np.linalg.norm(got, axis=1, keepdims=True)
            worst = float((expected * got).sum(axis=1).min())
            if worst < MIN_PROBE_COSINE:
                graph.unlink(missing_ok=True)
                log.warning(
                    "the ONNX graph of %s differs from sentence-transformers (cosine %.5f): not used",
                    name,
                    worst,
                )
                return None
            log.info("exported %s to %s for query embedding", name, graph)
            return encoder
        return OnnxQueryEncoder(graph, model_dir, max_length, normalize, threads)
    except Exception as exc:  # noqa: BLE001 - the fast path is optional; recall must still work
        log.warning(
            "query embedding of %s stays on sentence-transformers: %s: %s", name, type(exc).__name__, exc
        )
        return None
