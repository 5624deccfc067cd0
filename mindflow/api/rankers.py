"""Processes that rank a server's hot-index recalls, the next free one taking the next recall.

A worker of `mindflow serve --workers N` answers only the connections it accepted, and clients
keep theirs: with 8 clients and two workers the kernel split them 2/6 or 3/5 more often than
4/4, and the worker with more clients queued while the other idled (bench_latency prints the
split). With rankers (`MINDFLOW_API_RANKERS`; unset, `mindflow serve` starts
`default_processes`), the server takes the HTTP and hands each recall that its hot index can
answer to a pool of ranking processes: the recall waits for a free one, whichever connection it
came on. Each ranker maps the same index files
(`mindflow.recall.hot_files`) and embeds its queries itself. The first recall of a being at a
new table version is noticed to every ranker, so each maps that version's index at once rather
than at its own first recall of it (which, for a ranker idle until the load rises, would be under
that load, its recalls falling back to the server meanwhile).

Crash-only: a ranker that dies (or hangs past RANK_TIMEOUT) is replaced in the background, and
its recall, like any while no ranker is alive, is ranked in the server's own process as without
rankers. A ranker whose server is gone finds its pipe closed and exits.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import threading
from collections.abc import Iterator

log = logging.getLogger(__name__)


def default_processes(workers: int) -> int:
    """The rankers `mindflow serve` starts when MINDFLOW_API_RANKERS is unset: one per CPU this
    process may use, with one worker on two or more CPUs; none otherwise (several workers share
    the recalls by connection, and on one CPU a ranker adds only its hand-off)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return cpus if workers == 1 and cpus >= 2 else 0


class Ranker:
    """One ranking process: the model, its query vectors, the mapped hot indexes."""

    def __init__(self) -> None:
        from threadpoolctl import threadpool_limits

        from mindflow import lance
        from mindflow.api.service import QueryVectors
        from mindflow.config import load_settings
        from mindflow.embeddings import Embedder
        from mindflow.memories import TABLE
        from mindflow.recall.hot import HotIndexes
        from mindflow.recall.hot_files import HotFiles

        # One BLAS thread, as in the server: the process ranks one recall at a time.
        threadpool_limits(1, user_api="blas")
        settings = load_settings()
        embedder = Embedder.for_settings(settings)
        embedder.encode_query("warm up")
        self.vectors = QueryVectors(embedder, settings.api_query_cache)
        self.hot = HotIndexes(
            settings.lance_path,
            settings.api_hot_index_rows,
            HotFiles(settings.hot_index),
            small=settings.api_hot_index_small,
        )
        self.latest = lance.LatestTable(settings.lance_path, TABLE)

    def rank_batch(self, batch: list[tuple[str, int, str, dict]]) -> Iterator:
        """The recall of each (being, version, query, kwargs) of `batch` in turn, each as soon as
        it is ranked: None for one whose index this process does not map yet (it starts mapping
        it), or that failed.

        The recalls of one index share one int8 scan of their query vectors
        (`BeingIndex.scans_shared`): at 100,000 memories a scan costs 2.1 ms for one query and
        3.0 ms for four. Each query is still embedded alone, so its vector is the one it gets
        alone."""
        from mindflow.recall import recall

        prepared = []
        for being_id, version, _query, _ in batch:
            try:
                prepared.append(self.prepare(being_id, version))
            except Exception:  # noqa: BLE001 - the server ranks this recall itself
                log.exception("a ranking process could not open the index of %s", being_id)
                prepared.append((None, None))
        # The queries of each index mapped here.
        groups: dict[int, tuple[object, list[str]]] = {}
        for (_, _, query, _), (_, index) in zip(batch, prepared, strict=True):
            if index is not None:
                groups.setdefault(id(index), (index, []))[1].append(query)
        with contextlib.ExitStack() as shared:
            for index, queries in groups.values():
                if len(queries) > 1:  # a lone query is embedded when its recall needs it
                    try:
                        shared.enter_context(index.scans_shared([self.vectors.get(q) for q in queries]))
                    except Exception:  # noqa: BLE001 - each recall then scans alone
                        log.exception("a ranking process could not scan a batch of queries together")
            for (being_id, _, query, kwargs), (table, index) in zip(batch, prepared, strict=True):
                if index is None:
                    yield None
                    continue
                try:
                    yield recall(
                        table, being_id, query, lambda q=query: self.vectors.get(q), index=index, **kwargs
                    )
                except Exception:  # noqa: BLE001 - the server ranks this recall itself
                    log.exception("a ranking process failed on a recall")
                    yield None

    def prepare(self, being_id: str, version: int):
        """(table, the being's index at `version`); the index None while it is mapped in the
        background (started here if it was not)."""
        table, _ = self.latest.get()
        return table, self.hot.get(table, being_id, version)


# A ranker that has not answered in this long is taken for hung: stopped, replaced, and the
# recall ranked by the server.
RANK_TIMEOUT = 30.0
START_TIMEOUT = 300.0


def _serve(conn, notices, cpu: int | None = None) -> None:
    """A ranking process: pinned to `cpu` when given, load, say ready, then answer each recall
    sent down the pipe (and, on a thread of its own, prepare each index `notices` names)."""
    if cpu is not None:
        try:
            os.sched_setaffinity(0, {cpu})
        except OSError as exc:  # the CPU was taken from the server's set since: run unpinned
            log.warning("a ranking process could not be pinned to CPU %d: %s", cpu, exc)
    ranker = Ranker()
    threading.Thread(target=_prepare, args=(ranker, notices), daemon=True, name="mindflow-notices").start()
    conn.send("ready")
    while True:
        try:
            batch = conn.recv()
        except (EOFError, OSError):  # the server closed its end, or is gone
            return
        # One answer per recall of the batch, in its order, each sent as soon as it is ranked.
        for answer in ranker.rank_batch(batch):
            conn.send(answer)


def _prepare(ranker: Ranker, notices) -> None:
    while True:
        try:
            being_id, version = notices.recv()
        except (EOFError, OSError):  # the server is gone: the main loop finds out too
            return
        try:
            ranker.prepare(being_id, version)
        except Exception:  # noqa: BLE001 - the index is then mapped at its first recall
            log.exception("a ranking process could not prepare the hot index of %s", being_id)


class _Process:
    """One ranking process and the server's ends of its pipes: recalls, and notices of new indexes.
    `cpu`: the CPU it is pinned to (None: not pinned), which its replacement takes over."""

    def __init__(self, context, cpu: int | None = None):
        self.cpu = cpu
        self.conn, theirs = context.Pipe()
        their_notices, self.notices = context.Pipe(duplex=False)
        self.process = context.Process(
            target=_serve, args=(theirs, their_notices, cpu), name="mindflow-ranker"
        )
        self.process.start()
        theirs.close()
        their_notices.close()

    def notice(self, being_id: str, version: int) -> None:
        try:
            self.notices.send((being_id, version))
        except OSError:  # dead: found and replaced at its next take
            pass

    def ready(self) -> bool:
        return self.conn.poll(START_TIMEOUT) and self.conn.recv() == "ready"

    def send(self, batch: list[tuple]) -> None:
        """Hand the process these recalls; it answers each in turn (`receive`)."""
        self.conn.send(batch)

    def receive(self):
        """The next answer of the recalls sent."""
        if not self.conn.poll(RANK_TIMEOUT):
            raise TimeoutError(f"no answer in {RANK_TIMEOUT:.0f} s")
        return self.conn.recv()

    def stop(self) -> None:
        self.conn.close()
        self.notices.close()
        self.process.kill()
        self.process.join(5)


class _Turn:
    """A recall's place in the queue for a ranker, then in the batch it is sent in."""

    __slots__ = ("args", "batch", "given", "read")

    def __init__(self, args: tuple) -> None:
        self.args = args
        self.batch: _Batch | None = None  # None once given: rank it yourself
        self.given = threading.Event()
        self.read = threading.Event()  # its answer is the next on the pipe (or the batch failed)


class _Batch:
    """Recalls sent down one ranker's pipe at once, oldest first. The thread of each reads its own
    answer, in the batch's order, so each returns as soon as its recall is ranked."""

    __slots__ = ("failed", "ranker", "turns")

    def __init__(self, ranker: _Process, turns: list[_Turn]) -> None:
        self.ranker = ranker
        self.turns = turns
        self.failed = False


class Rankers:
    """A server process's ranking processes: a recall takes a free one, or waits its turn, sends
    its arguments down that one's pipe and waits for the memories.

    Waiting recalls are served first come, first served: a ranker coming free is handed to the
    recall that has waited longest, not left for whichever thread takes it first. Before, a
    recall arriving just as a ranker came free often took it ahead of those waiting, and a woken
    waiter that lost the race queued again at the back: under 8 clients the fastest 1% of
    recalls took ~15 ms and the slowest 5% over ~68 ms, where each waits ~55 ms in turn.
    """

    def __init__(self, processes: int, pin: bool = False, batch: int = 1):
        import multiprocessing

        if batch < 1:
            raise ValueError(f"a ranker takes at least one recall at a time, not {batch}")
        self.processes = processes
        # Waiting recalls handed to a ranker coming free at once, at most (MINDFLOW_API_RANKER_BATCH).
        self.batch = batch
        self._context = multiprocessing.get_context("spawn")
        # With pin and no more rankers than CPUs, ranker i runs on the i-th CPU of the server's set.
        cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        self._cpus: list[int | None] = (
            list(cpus[:processes]) if pin and 1 < processes <= len(cpus) else [None] * processes
        )
        self._lock = threading.Lock()
        # The free rankers, the one used last at the end: it is taken first, so under light load
        # one ranker answers with its caches warm.
        self._free: list[_Process] = []
        self._waiting: collections.deque[_Turn] = collections.deque()  # oldest first
        self._alive: set[_Process] = set()
        self._closed = False
        # (being, version) of the indexes every ranker has been told to map; sends under a lock of
        # their own (request threads share each pipe; a recall never waits on one behind it).
        self._noticed: set[tuple[str, int]] = set()
        self._noticing = threading.Lock()

    def start(self) -> None:
        """Start every ranker and wait until each has loaded the model (server start-up)."""
        for started in [_Process(self._context, cpu) for cpu in self._cpus]:
            self._admit(started)
        log.info("%d of %d ranking processes ready (MINDFLOW_API_RANKERS)", self.alive(), self.processes)

    def alive(self) -> int:
        """The ranking processes started and not found dead (a replacement counts once it is ready)."""
        with self._lock:
            return len(self._alive)

    def _admit(self, started: _Process) -> None:
        try:
            ready = started.ready()
        except (EOFError, OSError):
            ready = False
        with self._lock:
            if ready and not self._closed:
                self._alive.add(started)
                self._give(started)
                return
        if not self._closed:
            log.error("a ranking process did not start: the server ranks its share of recalls")
        started.stop()

    def _take(self, turn: _Turn) -> _Batch | None:
        """A free ranker for this recall alone, else the batch it is put in when its turn comes;
        None when no ranker is alive."""
        with self._lock:
            for dead in [r for r in self._free if not r.process.is_alive()]:
                self._free.remove(dead)
                self._lost(dead)
            if self._closed or not self._alive:
                return None
            if self._free and not self._waiting:
                return _Batch(self._free.pop(), [turn])
            self._waiting.append(turn)
        while not turn.given.wait(1.0):
            with self._lock:
                if turn.given.is_set():
                    break
                if self._closed or not self._alive:
                    self._waiting.remove(turn)
                    return None
        return turn.batch

    def _give(self, ranker: _Process) -> None:
        """Called holding the lock: hand a ranker come free to the oldest waiting recalls (up to
        `batch` of them, sent together), or keep it free."""
        if not ranker.process.is_alive():
            self._lost(ranker)
            return
        if self._waiting:
            turns = [self._waiting.popleft() for _ in range(min(self.batch, len(self._waiting)))]
            batch = _Batch(ranker, turns)
            for turn in turns:
                turn.batch = batch
                turn.given.set()
            return
        self._free.append(ranker)

    def notice(self, being_id: str, version: int) -> None:
        """Tell every ranker, once, to map the being's index at `version`."""
        with self._lock:
            if (being_id, version) in self._noticed:
                return
            if len(self._noticed) > 10_000:
                self._noticed.clear()
            self._noticed.add((being_id, version))
            alive = list(self._alive)
        with self._noticing:
            for ranker in alive:
                ranker.notice(being_id, version)

    def _lost(self, ranker: _Process) -> None:
        """Called holding the lock: forget a dead ranker and start its replacement. With none
        left alive, the waiting recalls are ranked by the server meanwhile."""
        self._alive.discard(ranker)
        if not self._alive:
            self._release_waiting()
        replacing = threading.Thread(target=self._replace, args=(ranker,), daemon=True)
        replacing.start()

    def _release_waiting(self) -> None:
        """Called holding the lock: every waiting recall is told to rank itself."""
        while self._waiting:
            self._waiting.popleft().given.set()

    def _replace(self, dead: _Process) -> None:
        dead.stop()
        if not self._closed:
            log.warning("a ranking process died: it is replaced")
            self._admit(_Process(self._context, dead.cpu))

    def rank(self, being_id: str, version: int, query: str, **kwargs):
        """The memories, or None when no ranker answers (the caller ranks the recall itself)."""
        self.notice(being_id, version)
        # The fresh tail's word counts are not sent: the ranker counts its texts itself, once per
        # text while they stay in its cache (`primitives.term_counts`). Pickled with each recall,
        # the counts of 2,000 fresh memories (MINDFLOW_TAIL_MAX_EPISODES) cost ~9 ms a recall.
        kwargs = {name: value for name, value in kwargs.items() if name != "fresh_terms"}
        turn = _Turn((being_id, version, query, kwargs))
        batch = self._take(turn)
        if batch is None:
            return None
        return self._answer(batch, turn)

    def _answer(self, batch: _Batch, turn: _Turn):
        """Send the batch (its oldest recall's thread does), then read this recall's answer once
        the one before it has read its own; the last gives the ranker back."""
        position = batch.turns.index(turn)
        answer = None
        try:
            if position == 0:
                try:
                    batch.ranker.send([t.args for t in batch.turns])
                except Exception as exc:  # noqa: BLE001 - dead, or its pipe broken
                    self._fail(batch, exc)
            else:
                turn.read.wait()
            if not batch.failed:
                try:
                    answer = batch.ranker.receive()
                except Exception as exc:  # noqa: BLE001 - dead, hung, or its pipe in an unknown state
                    self._fail(batch, exc)
        finally:
            if position + 1 < len(batch.turns):
                batch.turns[position + 1].read.set()
            elif not batch.failed:
                with self._lock:
                    if self._closed:
                        batch.ranker.stop()
                    else:
                        self._give(batch.ranker)
        return answer

    def _fail(self, batch: _Batch, exc: Exception) -> None:
        """The batch's ranker failed: it is replaced, and the batch's recalls not yet answered are
        ranked by the server."""
        with self._lock:
            if batch.failed:
                return
            batch.failed = True
            self._lost(batch.ranker)
        log.warning("a ranking process failed (%r): the server ranks its unanswered recalls", exc)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            free, self._free = self._free, []
            self._release_waiting()
        for ranker in free:
            ranker.stop()
