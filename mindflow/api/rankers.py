"""Processes that rank a server's hot-index recalls, the next free one taking the next recall.

A worker of `mindflow serve --workers N` answers only the connections it accepted, and clients
keep theirs: with 8 clients and two workers the kernel split them 2/6 or 3/5 more often than
4/4, and the worker with more clients queued while the other idled (bench_latency prints the
split). With rankers (`MINDFLOW_API_RANKERS`), the server takes the HTTP and hands each recall
that its hot index can answer to a pool of ranking processes: the recall waits for the first
free one, whichever connection it came on. Each ranker maps the same index files
(`mindflow.recall.hot_files`) and embeds its queries itself.

Crash-only: a ranker that dies (or hangs past RANK_TIMEOUT) is replaced in the background, and
its recall, like any while no ranker is alive, is ranked in the server's own process as without
rankers. A ranker whose server is gone finds its pipe closed and exits.
"""

from __future__ import annotations

import logging
import queue
import threading

log = logging.getLogger(__name__)


class Ranker:
    """One ranking process: the model, its query vectors, the mapped hot indexes."""

    def __init__(self) -> None:
        from threadpoolctl import threadpool_limits

        from mindflow import lance
        from mindflow.api.service import QueryVectors
        from mindflow.config import load_settings
        from mindflow.embeddings import Embedder
        from mindflow.memories import TABLE
        from mindflow.recall import RecallConfig
        from mindflow.recall.hot import HotIndexes
        from mindflow.recall.hot_files import HotFiles

        # One BLAS thread, as in the server: the process ranks one recall at a time.
        threadpool_limits(1, user_api="blas")
        settings = load_settings()
        self.config = RecallConfig.for_model(settings.embedding_model, **settings.recall_overrides())
        embedder = Embedder.for_settings(settings)
        embedder.encode_query("warm up")
        self.vectors = QueryVectors(embedder, settings.api_query_cache)
        self.hot = HotIndexes(settings.lance_path, settings.api_hot_index_rows, HotFiles(settings.hot_index))
        self.latest = lance.LatestTable(settings.lance_path, TABLE)

    def rank(self, being_id: str, version: int, query: str, kwargs: dict):
        """The recall from the being's index at `version`; None while this process maps no such
        index (it starts mapping it)."""
        from mindflow.recall import recall

        table, _ = self.latest.get()
        index = self.hot.get(table, being_id, version)
        if index is None:
            return None
        return recall(
            table, being_id, query, lambda: self.vectors.get(query), config=self.config, index=index, **kwargs
        )


# A ranker that has not answered in this long is taken for hung: stopped, replaced, and the
# recall ranked by the server.
RANK_TIMEOUT = 30.0
START_TIMEOUT = 300.0


def _serve(conn) -> None:
    """A ranking process: load, say ready, then answer each recall sent down the pipe."""
    ranker = Ranker()
    conn.send("ready")
    while True:
        try:
            args = conn.recv()
        except (EOFError, OSError):  # the server closed its end, or is gone
            return
        try:
            answer = ranker.rank(*args)
        except Exception:  # noqa: BLE001 - the server ranks this recall itself
            log.exception("a ranking process failed on a recall")
            answer = None
        conn.send(answer)


class _Process:
    """One ranking process and the server's end of its pipe."""

    def __init__(self, context):
        self.conn, theirs = context.Pipe()
        self.process = context.Process(target=_serve, args=(theirs,), name="mindflow-ranker")
        self.process.start()
        theirs.close()

    def ready(self) -> bool:
        return self.conn.poll(START_TIMEOUT) and self.conn.recv() == "ready"

    def call(self, args: tuple):
        self.conn.send(args)
        if not self.conn.poll(RANK_TIMEOUT):
            raise TimeoutError(f"no answer in {RANK_TIMEOUT:.0f} s")
        return self.conn.recv()

    def stop(self) -> None:
        self.conn.close()
        self.process.kill()
        self.process.join(5)


class Rankers:
    """A server process's ranking processes: a recall takes the next free one (first come, first
    served), sends its arguments down that one's pipe and waits for the memories."""

    def __init__(self, processes: int):
        import multiprocessing

        self.processes = processes
        self._context = multiprocessing.get_context("spawn")
        # The ranker used last is taken first: under light load one ranker answers with its caches
        # warm; waiting recalls are still served first come, first served.
        self._idle: queue.LifoQueue[_Process] = queue.LifoQueue()
        self._alive = 0
        self._lock = threading.Lock()
        self._closed = False

    def start(self) -> None:
        """Start every ranker and wait until each has loaded the model (server start-up)."""
        for started in [_Process(self._context) for _ in range(self.processes)]:
            self._admit(started)

    def _admit(self, started: _Process) -> None:
        try:
            ready = started.ready()
        except (EOFError, OSError):
            ready = False
        if not ready or self._closed:
            log.error("a ranking process did not start: the server ranks its share of recalls")
            started.stop()
            return
        with self._lock:
            self._alive += 1
        self._idle.put(started)

    def rank(self, being_id: str, version: int, query: str, **kwargs):
        """The memories, or None when no ranker answers (the caller ranks the recall itself)."""
        while True:
            with self._lock:
                if self._alive == 0 or self._closed:
                    return None
            try:
                ranker = self._idle.get(timeout=1.0)
                break
            except queue.Empty:
                continue
        try:
            answer = ranker.call((being_id, version, query, kwargs))
        except (EOFError, OSError, TimeoutError) as exc:
            log.warning("a ranking process failed (%s): it is replaced, the server ranks this recall", exc)
            with self._lock:
                self._alive -= 1
            ranker.stop()
            if not self._closed:
                threading.Thread(target=self._replace, name="mindflow-ranker-start", daemon=True).start()
            return None
        self._idle.put(ranker)
        return answer

    def _replace(self) -> None:
        self._admit(_Process(self._context))

    def close(self) -> None:
        self._closed = True
        while True:
            try:
                self._idle.get_nowait().stop()
            except queue.Empty:
                return
