"""Embeddings through onnxruntime: the vectors of sentence-transformers, sooner.

A recall embeds one short query. PyTorch spends ~15 ms on MiniLM for it, most of it in
per-operator overhead; onnxruntime runs the same graph in ~5 ms. Batches (ingestion, the
patrol, ebook chunks) run the same graph, one text per call on each core (see
`OnnxEncoder.encode_batch`), so a text gets the same vector in a batch as alone.

The graph is exported once from the sentence-transformers model (with torch, ~2 s) to
`<cache_dir>/<model>-<fingerprint>.onnx`, checked against sentence-transformers on probe
texts, and loaded without torch afterwards. The int8 precision is that graph with its
weights quantised by onnxruntime's dynamic quantisation (`...-int8.onnx`, made once).
Only models whose modules are a Transformer, mean pooling and an optional Normalize
qualify; any other model, or a failed export, keeps the sentence-transformers path
(`load` returns None and says why in the log).
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
from filelock import FileLock

log = logging.getLogger(__name__)

PROBES = [
    "I went camping with my kids last summer near the lake.",
    "What did Caroline research?",
    "-100123:45 HEARTBEAT_OK",
    "Zürich, 14:30 — decision: ship the ebook index on Sunday",
]
# The exported graph must reproduce sentence-transformers on the probes to this cosine: the
# embedding cache and the vector tables hold vectors of either path under one key.
MIN_PROBE_COSINE = 0.99999
# int8 weights move a vector by design (LoCoMo turns: mean cosine 0.992 to float32, min 0.974);
# this only catches a broken quantisation. Whether int8 keeps recall is bench_recall's question.
MIN_INT8_PROBE_COSINE = 0.9
INT8_RECIPE = "matmul-per-channel"
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class OnnxEncoder:
    """Mean-pooled, L2-normalised embeddings of single texts from an exported graph."""

    def __init__(
        self, graph: Path, model_dir: Path, max_length: int, normalize: bool, threads: int | None = None
    ):
        from tokenizers import Tokenizer

        self.graph = graph
        # One thread for a query: it is a few tokens, and a second thread costs more in hand-off
        # than it saves (MiniLM fp32: 3.6 ms of CPU on one; 4.2 ms wall and 5.2 ms of CPU on
        # two), while the other core answers another request.
        self.threads = threads or 1
        self.session = self._session(self.threads)
        self._batch_session = None  # one thread per call, made on the first batch
        self._batch_lock = threading.Lock()
        self.inputs = {i.name for i in self.session.get_inputs()}
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length)
        self.normalize = normalize

    def _session(self, threads: int):
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        # Idle worker threads sleep instead of spinning: a recall's vector and full-text
        # search run right after the embedding and need the cores.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        return onnxruntime.InferenceSession(str(self.graph), options, providers=["CPUExecutionProvider"])

    def encode(self, text: str) -> np.ndarray:
        """One text's vector (a query's), on one thread."""
        return self._run(self.session, self.tokenizer.encode(text).ids)

    def encode_batch(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        """Vectors of many texts, in their order, each exactly as `encode` gives it alone.

        Each text runs by itself, on its own core (one single-threaded call per worker),
        instead of in padded batches. Measured on LoCoMo's 2,760 turns on 2 cores, this is
        faster than padded batches of 64 sorted by length (fp32 21 s vs 25 s, int8 10 s vs
        13 s, busy machine): no padded tokens, no idle cores between a batch's operators.
        And it keeps vectors independent of their batch: int8's dynamic quantisation scales
        activations by the whole input tensor, so a padded batch moved a text's int8 vector
        by up to 0.05 (cosine 0.963) from the same text embedded alone by a recall's query.
        `batch_size` is kept for the callers' signature (sentence-transformers' batches).
        """
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        ids = [e.ids for e in self.tokenizer.encode_batch(texts)]
        session = self._batch()
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        # One shared iterator: each worker takes the next text when it is free (next() on a
        # range iterator holds the GIL, so no text is taken twice), one future per worker
        # instead of one per text.
        indices = iter(range(len(texts)))

        def work() -> None:
            for index in indices:
                out[index] = self._run(session, ids[index])

        workers = min(cores(), len(texts))
        if workers == 1:
            work()
            return out
        from concurrent.futures import ThreadPoolExecutor

        # onnxruntime releases the GIL while it runs, so the workers use every core.
        with ThreadPoolExecutor(workers, thread_name_prefix="onnx-batch") as pool:
            for future in [pool.submit(work) for _ in range(workers)]:
                future.result()
        return out

    def _batch(self):
        with self._batch_lock:
            if self._batch_session is None:
                self._batch_session = self.session if self.threads == 1 else self._session(1)
            return self._batch_session

    @property
    def dimension(self) -> int:
        return int(self.session.get_outputs()[0].shape[-1])

    def _run(self, session, token_ids: list[int]) -> np.ndarray:
        ids = np.array([token_ids], dtype=np.int64)
        return self._pool(session, ids, np.ones_like(ids))[0]

    def _pool(self, session, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        hidden = session.run(None, {k: v for k, v in feed.items() if k in self.inputs})[0]
        weights = mask[:, :, None].astype(np.float32)
        vectors = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        if self.normalize:
            vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        return vectors.astype(np.float32)


def cores() -> int:
    """The cores this process may run on (a container's CPU set, not the host's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


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


def _quantise(graph: Path, int8: Path) -> None:
    """Write `graph` with int8 weights (onnxruntime's dynamic quantisation), atomically."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    partial = int8.with_suffix(f".{os.getpid()}.{threading.get_ident()}.partial")
    try:
        # The quantiser logs advice about pre-processing for static calibration; dynamic
        # quantisation needs none.
        quiet = logging.getLogger().level
        logging.getLogger().setLevel(logging.ERROR)
        try:
            # Per output channel, MatMul weights only: on LoCoMo's turns the vectors keep a mean
            # cosine of 0.992 to float32 (min 0.974), where one scale per tensor over every
            # quantisable op gave 0.933 (min 0.847), at about the same speed.
            quantize_dynamic(
                str(graph),
                str(partial),
                weight_type=QuantType.QInt8,
                per_channel=True,
                op_types_to_quantize=["MatMul"],
            )
        finally:
            logging.getLogger().setLevel(quiet)
        os.replace(partial, int8)
    finally:
        partial.unlink(missing_ok=True)


def _probe_cosine(model, encoder: OnnxEncoder) -> float:
    expected = model.encode(PROBES, normalize_embeddings=True, convert_to_numpy=True)
    got = np.stack([encoder.encode(p) for p in PROBES])
    got = got / np.linalg.norm(got, axis=1, keepdims=True)
    return float((expected * got).sum(axis=1).min())


def load(
    model_dir: Path | None, cache_dir: Path, load_model, name: str, precision: str = "fp32"
) -> OnnxEncoder | None:
    """The onnxruntime encoder of a local model, exported on first use; None when it cannot be.

    `load_model()` returns the sentence-transformers model; it is only called (and torch only
    imported) when a graph has to be made. `precision` "int8" loads the graph with int8
    weights, quantised from the float32 one on first use.
    """
    if model_dir is None:
        return None
    shape = _modules(model_dir)
    if shape is None:
        log.info("embedding of %s stays on sentence-transformers (not mean-pooled)", name)
        return None
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        log.info("onnxruntime is not installed: embedding stays on sentence-transformers")
        return None
    max_length, normalize = shape
    slug = "".join(c if c.isalnum() or c in "-_." else "_" for c in name.rsplit("/", 1)[-1])
    graph = cache_dir / f"{slug}-{_fingerprint(model_dir)}.onnx"
    # The name carries the quantisation recipe: a new recipe makes a new graph, never reads an old one.
    int8 = graph.with_name(f"{graph.stem}-int8-{INT8_RECIPE}.onnx")
    try:
        if graph.is_file() and (precision == "fp32" or int8.is_file()):
            return OnnxEncoder(int8 if precision == "int8" else graph, model_dir, max_length, normalize)
        cache_dir.mkdir(parents=True, exist_ok=True)
        # One process makes the graphs, the others wait and load them: the quantiser writes a
        # shape-inferred copy beside its input under a fixed name, which two at once remove
        # from under each other.
        with FileLock(str(graph) + ".lock"):
            return _make(graph, int8, model_dir, load_model, name, precision, max_length, normalize)
    except Exception as exc:  # noqa: BLE001 - the fast path is optional; recall must still work
        log.warning("embedding of %s stays on sentence-transformers: %s: %s", name, type(exc).__name__, exc)
        return None


def _make(
    graph: Path, int8: Path, model_dir: Path, load_model, name: str, precision: str, max_length, normalize
):
    """Export (and quantise) the graphs that are not there yet; the encoder of `precision`, or None."""
    model = None
    if not graph.is_file():
        model = load_model()
        _export(model, graph)
        worst = _probe_cosine(model, OnnxEncoder(graph, model_dir, max_length, normalize))
        if worst < MIN_PROBE_COSINE:
            graph.unlink(missing_ok=True)
            log.warning(
                "the ONNX graph of %s differs from sentence-transformers (cosine %.5f): not used",
                name,
                worst,
            )
            return None
        log.info("exported %s to %s", name, graph)
    if precision == "fp32":
        return OnnxEncoder(graph, model_dir, max_length, normalize)
    if not int8.is_file():
        model = model or load_model()
        _quantise(graph, int8)
        worst = _probe_cosine(model, OnnxEncoder(int8, model_dir, max_length, normalize))
        if worst < MIN_INT8_PROBE_COSINE:
            int8.unlink(missing_ok=True)
            log.warning("the int8 graph of %s is broken (cosine %.5f): not used", name, worst)
            return None
        log.info("quantised %s to %s", name, int8)
    return OnnxEncoder(int8, model_dir, max_length, normalize)
