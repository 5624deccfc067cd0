"""A being's recallable memories held in the server's memory, at one version of the table.

LanceDB answers each recall query in 10-25 ms (a vector search, a read of the context
windows, a read of the chosen rows), each query paying for its own filter and random
reads. An agent asks hundreds of times a day, so the server keeps the unit vectors, times
and rows of each being it serves (`BeingIndex`) and answers the vector search, the
context windows and the rows from them; the full-text search stays in LanceDB.

An index belongs to one table version. `HotIndexes.get` hands it out only while the table
is still at that version; after a publish the request is answered from LanceDB as before
while the index is rebuilt in the background (~3 s per 100,000 memories), so a recall
never sees stale memories. A small being (at most `small` memories) is built in a fraction of
a second, and its recalls wait for that instead: from LanceDB, whose full text counts every
being's words, they would rank differently for the first second or so after each publish.
The indexes are bounded by a number of rows (least recently used beings go first; a being
larger than the whole budget is always served from LanceDB).

With `files` (the server's), an index is written once under the home and every worker
process maps it read-only (`mindflow.recall.hot_files`): the workers share one copy, and a
restarted server maps the index of an unchanged table instead of building it. The int8 codes
of the scan are computed once, with the files, and mapped like the rest; what stays per process
is onnxruntime's packing of them into its own layout (a quarter of the vectors' size), without
which the scan is three times slower (5.6 against 1.9 ms at 100,000 memories).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa

from mindflow import lance
from mindflow.inbox import validate_being_id
from mindflow.memories import FULLTEXT_COLUMN, TABLE
from mindflow.recall import fulltext, primitives
from mindflow.recall import sessions as sessions_module
from mindflow.recall.hot_files import HotFiles, IndexArrays
from mindflow.recall.models import COLUMNS
from mindflow.together import Together
from mindflow.vectors import to_column

log = logging.getLogger(__name__)

# The memories' session (their first episode's `session_id`), which only the index reads.
SESSION_COLUMN = "session_id"


def _naive_us(value: datetime) -> np.datetime64:
    """A filter bound as the table stores times: naive UTC, microseconds."""
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return np.datetime64(value, "us")


# An int8 scan picks the candidates of the exact cosine from this many memories on
# (below it a float32 scan takes under 3 ms); COARSE candidates at least.
INT8_SCAN_FROM = 20_000
COARSE = 256
# Queries scanned together at most: one scan of 100,000 codes costs about the same for 1 query
# as for 8 (1.41 against 1.56 ms; MatMulInteger streams the codes once for all of them).
SCAN_BATCH = 8


def scan_codes(vectors: np.ndarray) -> np.ndarray:
    """The int8 codes an `Int8Scan` reads: the unit vectors scaled by one factor for all,
    transposed (a row per dimension, MatMulInteger's right operand). Empty (no columns) below
    INT8_SCAN_FROM memories, where `BeingIndex.nearest` compares the float32 vectors.

    Computed where the index is built, and written with its files, so the processes that map
    them do not each quantise the vectors again at every new table version, while they answer
    recalls (mapping an index of 100,000 memories with its scan: 0.19 s of CPU a process, against
    0.56-0.68 s when each quantised its own codes)."""
    n, dim = vectors.shape
    if n < INT8_SCAN_FROM:
        return np.zeros((dim, 0), np.int8)
    scale = 127.0 / max(float(np.abs(vectors).max()), 1e-12)
    codes = np.empty((dim, n), np.int8)
    # By blocks: float32 temporaries of a block, not of every vector.
    for start in range(0, n, 8192):
        block = np.clip(np.rint(vectors[start : start + 8192] * scale), -127, 127)
        codes[:, start : start + 8192] = block.astype(np.int8).T
    return codes


class Int8Scan:
    """Approximate dot products with every memory at a quarter of float32's memory traffic.

    A scan of 100,000 float32 vectors reads 150 MB and takes ~12 ms on one core; the
    int8 codes of the unit vectors (one scale for all, `scan_codes`) are read by onnxruntime's
    MatMulInteger (VNNI where the CPU has it) in ~2 ms. The codes only choose
    candidates; `BeingIndex.nearest` ranks them by their float32 cosine, so the order
    returned is exact as long as the true nearest are among the candidates (at 256
    candidates for 30 results they are on MiniLM vectors; tests/test_recall_hot.py).
    """

    def __init__(self, session):
        self.session = session
        # Queries that reach the scan while one runs are scanned together next.
        self._together: Together[np.ndarray, np.ndarray] = Together(self._scan, SCAN_BATCH)
        # Scores scanned ahead for queries known to come (`shared`), by their codes.
        self._ahead: dict[bytes, np.ndarray] = {}

    @classmethod
    def build(cls, codes: np.ndarray) -> Int8Scan | None:
        """The scan of `codes` (`scan_codes`, in memory or mapped from the index's files); None
        without codes or without onnxruntime."""
        dim, n = codes.shape
        if n == 0:
            return None
        try:
            import onnxruntime
            from onnx import TensorProto, helper, numpy_helper
        except ImportError:
            return None
        # The codes reach onnxruntime as an external initializer, not inside the serialised
        # graph: the session copies them once and packs them, where a graph holding them was
        # copied three times on the way. For 100,000 random unit vectors the scan kept 80 MB of
        # private memory that way (0.48-0.52 s with the quantising); this way 38 MB, the packed
        # codes (0.08 s from codes already made).
        codes_tensor = TensorProto(name="codes", data_type=TensorProto.INT8, dims=[dim, n])
        codes_tensor.data_location = TensorProto.EXTERNAL
        # Where the data would be read from; never read, the initializer given below replaces it.
        codes_tensor.external_data.add(key="location", value="codes")
        graph = helper.make_graph(
            [helper.make_node("MatMulInteger", ["query", "codes", "zero"], ["scores"])],
            "int8_scan",
            [helper.make_tensor_value_info("query", TensorProto.UINT8, ["queries", dim])],
            [helper.make_tensor_value_info("scores", TensorProto.INT32, ["queries", n])],
            initializer=[codes_tensor, numpy_helper.from_array(np.array(128, dtype=np.uint8), "zero")],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.add_external_initializers(
            ["codes"], [onnxruntime.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(codes))]
        )
        session = onnxruntime.InferenceSession(
            model.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
        return cls(session)

    def scores(self, query: np.ndarray) -> np.ndarray:
        """int32 scores, in the order of the vectors: larger is more similar.

        Callers on several threads at once share scans (`mindflow.together`): the queries that
        come while a scan runs (up to SCAN_BATCH) are scanned together next. A query's scores
        are the same alone or together (integer arithmetic)."""
        code = self._code(query)
        ahead = self._ahead.pop(code.tobytes(), None)
        return ahead if ahead is not None else self._together(code)

    @contextmanager
    def shared(self, queries: list[np.ndarray]) -> Iterator[None]:
        """While open, `scores` of these queries are read from one scan of them all, made here.

        For a caller that knows which queries come next (a ranking process handed several
        recalls at once): one scan streams the codes once for all of them (at 100,000 memories
        2.1 ms for one query, 2.5 for two, 3.0 for four). What no recall asked for is dropped
        on leaving."""
        codes = list({code.tobytes(): code for code in map(self._code, queries)}.values())
        try:
            if len(codes) > 1:
                for start in range(0, len(codes), SCAN_BATCH):
                    part = codes[start : start + SCAN_BATCH]
                    for code, row in zip(part, self._scan(part), strict=True):
                        self._ahead[code.tobytes()] = row
            yield
        finally:
            for code in codes:
                self._ahead.pop(code.tobytes(), None)

    @staticmethod
    def _code(query: np.ndarray) -> np.ndarray:
        """A query's uint8 code (offset by 128, MatMulInteger's zero point), scaled to its largest value."""
        step = 127.0 / max(float(np.abs(query).max()), 1e-12)
        return (np.clip(np.rint(query * step), -127, 127) + 128).astype(np.uint8)

    def _scan(self, codes: list[np.ndarray]) -> np.ndarray:
        """The scores of each query code, one row per code."""
        return self.session.run(None, {"query": np.stack(codes)})[0]


def index_arrays(rows: pa.Table) -> IndexArrays:
    """A being's recallable rows (`primitives.ALL_COLUMNS`) as the arrays of its index, in time order."""
    if rows.num_rows:
        rows = rows.sort_by([("ts", "ascending"), ("memory_ref", "ascending")])
        vectors = primitives.vectors_of(rows)
    else:
        # The table's width even without rows: empty answers keep the vector column's type.
        vector = rows.schema.field("vector").type
        width = vector.list_size if pa.types.is_fixed_size_list(vector) else 0
        vectors = np.zeros((0, width), np.float32)
    if len(vectors):
        vectors = vectors / np.clip(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12, None)
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    # Refs as a fixed-width numpy array and a sorted copy for look-ups: no Python object
    # per memory, so the garbage collector never walks 100,000 strings mid-request.
    refs = np.array(rows.column("memory_ref").to_pylist(), dtype=str)
    by_ref = np.argsort(refs, kind="stable")
    # The full-text document: the text and the memory's facts (mindflow/recall/keys.py), or the
    # text alone in a table published before them.
    document = FULLTEXT_COLUMN if FULLTEXT_COLUMN in rows.column_names else "text"
    text = fulltext.build(rows.column(document).to_pylist())
    return IndexArrays(
        text_vocabulary=text.vocabulary,
        text_starts=text.starts,
        text_positions=text.positions,
        text_counts=text.counts,
        text_lengths=text.lengths,
        text_word_starts=text.word_starts,
        text_words=text.words,
        text_word_counts=text.word_counts,
        vectors=vectors,
        codes=scan_codes(vectors),
        ts=rows.column("ts").to_numpy() if rows.num_rows else np.zeros(0, "datetime64[us]"),
        refs=refs,
        by_ref=by_ref,
        sorted_refs=refs[by_ref],
        rows=rows.select([*COLUMNS, *([SESSION_COLUMN] if SESSION_COLUMN in rows.column_names else [])]),
    )


class BeingIndex:
    """One being's recallable memories at table `version`, in time order."""

    def __init__(self, being_id: str, version: int, rows: pa.Table, snapshot=None):
        self._hold(being_id, version, index_arrays(rows), snapshot)

    @classmethod
    def of_arrays(cls, being_id: str, version: int, arrays: IndexArrays, snapshot=None) -> BeingIndex:
        """The index over arrays already computed, such as those `HotFiles` maps from disk."""
        index = cls.__new__(cls)
        index._hold(being_id, version, arrays, snapshot)
        return index

    def _hold(self, being_id: str, version: int, arrays: IndexArrays, snapshot) -> None:
        self.being_id = being_id
        self.version = version
        # The table opened at `version` (never re-reading it; LanceDB's async API, one call
        # per query): full-text searches through it see exactly the memories of the index,
        # without a version check per query.
        self.snapshot = snapshot
        self.vectors = arrays.vectors
        self.rows = arrays.rows
        self.ts = arrays.ts
        # What recall weighs each candidate by, as an array (NaN: no decay score yet): 0.8 MB per
        # 100,000 memories in each process, read by position (`pool.IndexPool`).
        self.decay = self.rows.column("decay_score").to_numpy(zero_copy_only=False).astype(np.float64)
        self.refs = arrays.refs
        self._by_ref = arrays.by_ref
        self._sorted_refs = arrays.sorted_refs
        self.text = fulltext.TextArrays(
            arrays.text_vocabulary, arrays.text_starts, arrays.text_positions, arrays.text_counts,
            arrays.text_lengths, arrays.text_word_starts, arrays.text_words, arrays.text_word_counts,
        )  # fmt: skip
        self.dim = self.vectors.shape[1]
        self.scan = Int8Scan.build(arrays.codes)
        self._sessions: dict[float, sessions_module.Sessions] = {}

    def __len__(self) -> int:
        return len(self.refs)

    def sessions(self, gap_seconds: float) -> sessions_module.Sessions:
        """The sessions of this index's memories (`sessions.group`) with their postings
        (`sessions.with_words`), at first use."""
        found = self._sessions.get(gap_seconds)
        if found is None:
            if SESSION_COLUMN in self.rows.column_names:
                ids = self.rows.column(SESSION_COLUMN)
            else:  # an index of a table published before memories had it
                ids = pa.nulls(len(self), pa.string())
            grouped = sessions_module.group(ids, self.ts, gap_seconds, self.text.lengths)
            found = sessions_module.with_words(grouped, self.text)
            self._sessions[gap_seconds] = found  # computed twice at worst, never half
        return found

    def mask(
        self,
        exclude_refs: tuple[str, ...] | list[str] = (),
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> np.ndarray:
        """The memories a request may see: the horizon and the refs it excludes applied."""
        keep = np.ones(len(self), dtype=bool)
        if since is not None:
            keep &= self.ts >= _naive_us(since)
        if until is not None:
            keep &= self.ts <= _naive_us(until)
        if since is not None or until is not None:
            keep &= ~np.isnat(self.ts)
        if exclude_refs:
            keep[self.positions(exclude_refs)] = False
        return keep

    def scanned(self, vector: np.ndarray, keep: np.ndarray, limit: int) -> np.ndarray | None:
        """The positions among which `nearest` finds the `limit` most similar visible memories:
        from INT8_SCAN_FROM memories on, the `max(COARSE, 8 x limit)` best of an int8 scan of
        every memory; None where `nearest` compares every visible memory (a small index).

        Apart from `nearest` so the server scans outside its ranking turn, where the scans of
        recalls running at once are shared (`Int8Scan.scores`)."""
        visible = int(np.count_nonzero(keep))
        coarse = max(COARSE, 8 * min(limit, visible))
        if self.scan is None or limit <= 0 or coarse >= visible:
            return None
        approx = self.scan.scores(self._unit(vector))
        if visible < len(keep):
            approx[~keep] = np.iinfo(np.int32).min
        return primitives.largest(approx, coarse)

    def scans_shared(self, vectors: list[np.ndarray]):
        """A context in which `scanned` reads the int8 scores of these query vectors from one scan
        of them all (`Int8Scan.shared`); nothing to share in an index without an int8 scan."""
        if self.scan is None:
            return nullcontext()
        return self.scan.shared([self._unit(vector) for vector in vectors])

    @staticmethod
    def _unit(vector: np.ndarray) -> np.ndarray:
        q = np.asarray(vector, dtype=np.float32)
        return q / max(float(np.linalg.norm(q)), 1e-12)

    def nearest(
        self, vector: np.ndarray, keep: np.ndarray, limit: int, scanned: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The `limit` most similar visible memories by exact cosine, best first: (positions, cosines).

        Among the positions `scanned` for the same vector, keep and limit, when given (else
        scanned here)."""
        if len(self) == 0 or limit <= 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        q = np.asarray(vector, dtype=np.float32)
        q = q / max(float(np.linalg.norm(q)), 1e-12)
        visible = int(np.count_nonzero(keep))
        limit = min(limit, visible)
        if limit == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        candidates = scanned if scanned is not None else self.scanned(vector, keep, limit)
        if candidates is not None:
            cosine = self.vectors[candidates] @ q
        else:
            candidates = np.flatnonzero(keep)
            cosine = self.vectors[candidates] @ q if visible < len(keep) else self.vectors @ q
        best = np.argpartition(-cosine, limit - 1)[:limit] if limit < len(cosine) else np.arange(len(cosine))
        best = best[np.argsort(-cosine[best], kind="stable")]
        return candidates[best].astype(np.int64), cosine[best]

    def around(
        self, spans: list[tuple[datetime, datetime]], keep: np.ndarray, limit: int, also: list[str] = ()
    ) -> np.ndarray:
        """Positions of the visible memories inside the time spans, plus those `also` names."""
        chosen: list[np.ndarray] = []
        for start, end in spans:
            lo = np.searchsorted(self.ts, _naive_us(start), side="left")
            hi = np.searchsorted(self.ts, _naive_us(end), side="right")
            chosen.append(np.arange(lo, hi))
        chosen.append(self.positions(also))
        found = np.unique(np.concatenate(chosen)) if chosen else np.zeros(0, np.int64)
        found = found[keep[found]]
        return found[: limit + len(also)]

    def positions(self, refs) -> np.ndarray:
        """Positions of the refs this index holds, in the order given; unknown refs are skipped."""
        wanted = np.array(list(refs), dtype=str)
        if len(wanted) == 0 or len(self) == 0:
            return np.zeros(0, dtype=np.int64)
        at = np.searchsorted(self._sorted_refs, wanted).clip(max=len(self) - 1)
        found = self._sorted_refs[at] == wanted
        return self._by_ref[at[found]].astype(np.int64)

    def rows_at(self, positions: np.ndarray, columns: list[str]) -> pa.Table:
        """These memories as rows of `columns`, with `vector` as LanceDB returns it."""
        # One take of every column but the vectors (a take per column cost twice as much).
        rows = self.rows.select([c for c in columns if c != "vector"]).take(
            pa.array(positions, type=pa.int64())
        )
        if "vector" in columns:
            rows = rows.append_column(
                "vector", to_column(self.vectors[positions].reshape(len(positions), self.dim))
            )
        return rows.select(columns)


def _recallable(table, being_id: str) -> pa.Table:
    """The being's recallable rows in `table` (an async snapshot), every column recall reads and
    the full-text document."""
    where = primitives.memory_filter(being_id, statuses=primitives.RECALLABLE)
    names = lance.run_async(table.schema()).names
    return lance.run_async(table.query().where(where).select(index_columns(names)).to_arrow())


def index_columns(names: list[str]) -> list[str]:
    """What an index reads of a table with these columns: every column recall reads, the
    full-text document and the memories' sessions (`sessions.group`), the last two where the
    table has them (one published by an earlier version has neither until it is rewritten)."""
    return [*primitives.ALL_COLUMNS, *(c for c in (FULLTEXT_COLUMN, SESSION_COLUMN) if c in names)]


def write_index(lance_path, being_id: str, version: int, stamp: int, root: Path, max_rows: int) -> int:
    """Write the being's index at `version` as files under `root` (in a process of its own, with
    the caller holding the being's lock); its number of rows. Over `max_rows`, nothing is written."""
    table = lance.snapshot(lance_path, TABLE)
    lance.run_async(table.checkout(version))
    arrays = index_arrays(_recallable(table, being_id))
    if len(arrays.refs) <= max_rows:
        HotFiles(root).write(being_id, version, stamp, arrays)
    return len(arrays.refs)


# How long a recall of a small being waits for its index before it reads LanceDB: a bound for a
# build slowed down by a busy machine, not a figure any build is expected to approach.
SMALL_WAIT = 2.0


@dataclass
class _Building:
    """A build under way: whether the being is small, and set when the build ends."""

    small: bool
    done: threading.Event = field(default_factory=threading.Event)


class HotIndexes:
    """The server's `BeingIndex`es: least recently used first out, at most `max_rows` rows in all.

    A being of at most `small` memories is small: its index is built by this process (its first
    recall after a publish, the build included, took 144-300 ms for 400-5,000 memories here,
    where a process of its own takes ~1 s to start), on a builder thread of its own so it never
    waits behind a large being's build, and a recall waits for it (up to `SMALL_WAIT`) instead of
    being answered from LanceDB. 0: no being is small."""

    def __init__(self, lance_path: Path, max_rows: int, files: HotFiles | None = None, small: int = 0):
        self.lance_path = lance_path
        self.max_rows = max_rows
        # Where the indexes are written once and mapped by every worker; None: each index
        # lives in this process's memory only.
        self.files = files
        self.small = small
        self._indexes: OrderedDict[str, BeingIndex] = OrderedDict()
        self._building: dict[str, _Building] = {}
        self._lock = threading.Lock()
        self._builder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mindflow-hot-index")
        self._small_builder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mindflow-hot-index-small")
        # being -> the table version at which its index did not fit or could not be built:
        # no rebuild is tried again before the table moves on.
        self._skip: dict[str, int] = {}

    @property
    def rows(self) -> int:
        with self._lock:
            return sum(len(i) for i in self._indexes.values())

    def get(self, table, being_id: str, version: int | None = None) -> BeingIndex | None:
        """The being's index if it matches the table's current `version` (asked of the table
        when not given); else starts a rebuild."""
        validate_being_id(being_id)
        if self.max_rows <= 0 or table is None:
            return None
        if version is None:
            version = table.version
        with self._lock:
            index = self._current(being_id, version)
            if index is not None or self._skip.get(being_id) == version:
                return index
            building = self._building.get(being_id)
        if building is None:
            building = self._start(table, being_id, version)
        if building.small and building.done.wait(SMALL_WAIT):
            with self._lock:
                return self._current(being_id, version)
        return None

    def _current(self, being_id: str, version: int) -> BeingIndex | None:
        """The being's index at `version`, marked as the most recently used (under the lock)."""
        index = self._indexes.get(being_id)
        if index is None or index.version != version:
            return None
        self._indexes.move_to_end(being_id)
        return index

    def _start(self, table, being_id: str, version: int) -> _Building:
        """Start building the being's index, unless another request has just done so."""
        small = False
        if self.small > 0:
            try:
                where = primitives.memory_filter(being_id, statuses=primitives.RECALLABLE)
                small = table.count_rows(where) <= self.small  # ~1 ms, once per table version
            except Exception:  # noqa: BLE001 - the index is built all the same, and not waited for
                log.exception("could not count the memories of being %s", being_id)
        with self._lock:
            building = self._building.get(being_id)
            if building is None:
                building = self._building[being_id] = _Building(small)
                builder = self._small_builder if small else self._builder
                builder.submit(self._build, being_id, version, small)
        return building

    def wait(self, being_id: str, timeout: float = 30.0) -> bool:
        """Block until a rebuild of the being's index under way finishes (tests, warm-up)."""
        with self._lock:
            building = self._building.get(being_id)
        return True if building is None else building.done.wait(timeout)

    def _build(self, being_id: str, seen_version: int, small: bool) -> None:
        try:
            # A connection of its own that never re-reads the version: the rows and the
            # version they are labelled with come from one snapshot.
            table = lance.snapshot(self.lance_path, TABLE)
            if table is None:
                return
            version = lance.run_async(table.version())
            if self.files is None:
                index = BeingIndex(being_id, version, _recallable(table, being_id), table)
                rows = len(index)
            else:
                index, rows = self._mapped(table, being_id, version, small)
            with self._lock:
                self._indexes.pop(being_id, None)
                if rows > self.max_rows:
                    self._skip[being_id] = version
                    log.info(
                        "being %s has %d memories, more than the hot-index budget of %d rows:"
                        " its recalls read LanceDB",
                        being_id,
                        rows,
                        self.max_rows,
                    )
                    return
                self._indexes[being_id] = index
                total = sum(len(i) for i in self._indexes.values())
                while total > self.max_rows:
                    _, evicted = self._indexes.popitem(last=False)
                    total -= len(evicted)
        except Exception:  # noqa: BLE001 - the request path falls back to LanceDB
            log.exception("could not build the hot index of being %s", being_id)
            with self._lock:
                self._skip[being_id] = seen_version
        finally:
            with self._lock:
                building = self._building.pop(being_id, None)
            if building is not None:
                building.done.set()

    def _mapped(self, table, being_id: str, version: int, small: bool) -> tuple[BeingIndex | None, int]:
        """The index of this version from the shared files, written first if no worker has yet
        (by this process for a `small` being), and its rows (None over the budget: no files are
        written for it)."""
        # A table dropped and created again starts its versions over: the commit's time tells
        # its version 3 from the old table's version 3.
        stamp = next(
            int(v["timestamp"].timestamp() * 1_000_000)
            for v in lance.run_async(table.list_versions())
            if v["version"] == version
        )
        with self.files.lock(being_id):
            arrays = self.files.open(being_id, version, stamp)
            if arrays is None:
                # Built in a process of its own: building reads every row and leaves ~0.9 GB
                # per 100,000 memories in the allocators of the process that did it, which a
                # worker would then keep; the worker maps the files like the others. Building a
                # small being's here grew this process by 15 MB for 5,000 memories, and by 57 MB
                # over 18 such builds: less than the ~1 s that starting a process would cost.
                args = (self.lance_path, being_id, version, stamp, self.files.root, self.max_rows)
                if small:
                    rows = write_index(*args)
                else:
                    from mindflow import spawned

                    rows = spawned.call(write_index, *args)
                if rows > self.max_rows:
                    return None, rows
                arrays = self.files.open(being_id, version, stamp)
                if arrays is None:
                    raise OSError(f"the hot index files of {being_id} at version {version} could not be read")
            self.files.prune(being_id, keep=self.files.folder(being_id, version, stamp))
        return BeingIndex.of_arrays(being_id, version, arrays, table), len(arrays.refs)

    def close(self) -> None:
        self._builder.shutdown(wait=False, cancel_futures=True)
        self._small_builder.shutdown(wait=False, cancel_futures=True)
