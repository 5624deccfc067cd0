"""Where recall's candidates come from: the LanceDB table, or a being's hot index.

Each answers the same questions with a pool of candidates (`mindflow.recall.pool`): LanceDB
with rows, a hot index with positions in it. The ranking in `search.recall` reads both the
same way, so it does not know which source it talks to.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

import numpy as np
import pyarrow as pa

from mindflow.recall import fulltext, primitives, sessions
from mindflow.recall.hot import BeingIndex
from mindflow.recall.models import COLUMNS
from mindflow.recall.pool import POSITION, IndexPool, Pool, RowPool


def _pool_of(found: pa.Table | None, score: str | None = None) -> RowPool | None:
    """Rows read from LanceDB (or merged with the fresh tail) as a pool; `score` names their
    retrieval's score column."""
    return RowPool(found, score) if found is not None else None


def _newest(ts: np.ndarray) -> datetime | None:
    """The latest of these times (naive UTC), or None when none is known."""
    known = ts[~np.isnat(ts)] if len(ts) else ts
    return known.max().astype("datetime64[us]").item() if len(known) else None


def _table(found: Pool | None, columns: list[str]) -> pa.Table | None:
    """A source's candidates as rows of (at least) `columns`, with their score column."""
    return found.table(columns) if found is not None else None


class LanceRetrieval:
    """Every candidate read from the table, within the `where` of the request."""

    # What the ranking levers that count words (`search._feedback`, `search._rescored`) need carried
    # with each candidate: from LanceDB its text, where a read by ref would cost a query.
    lever_columns: tuple[str, ...] = ("text",)

    def __init__(self, table, where: str):
        self.table = table
        self.where = where

    def vector(self, vector: np.ndarray, limit: int, columns: list[str]) -> Pool | None:
        return _pool_of(
            primitives.vector_candidates(self.table, vector, self.where, limit, columns), "cosine"
        )

    def text(self, query: str, limit: int, columns: list[str]) -> Pool | None:
        return _pool_of(primitives.text_candidates(self.table, query, self.where, limit, columns), "_score")

    def around(self, spans, limit: int, also: list[str], columns: list[str]) -> Pool | None:
        """The memories inside the time spans and those `also` names: at least `columns`.

        From LanceDB every column, whatever `columns` asks: the same read then holds the chosen
        memories' rows, where a second query would cost more than the width."""
        return _pool_of(primitives.rows_around(self.table, self.where, spans, limit, also))

    def by_ref(self, refs: list[str]) -> pa.Table:
        return primitives.rows_by_ref(self.table, self.where, refs)

    def newest(self) -> datetime | None:
        """When the newest memory the request may see was written (None: none has a time).

        A scan of the being's times: asked only for a query naming a date without its year."""
        return _newest(primitives.filtered_rows(self.table, self.where, None, ["ts"]).column("ts").to_numpy())

    def session_documents(self, query: str, pool: Pool, gap_seconds: float) -> np.ndarray:
        """Each candidate's session score (`sessions.document_scores`); 0 here: a session's turns
        are read whole only from a hot index."""
        return np.zeros(len(pool))

    def term_counts(self, pool: Pool) -> list[Mapping[str, int]]:
        """The words of these candidates with their counts, in the order each text first uses
        them (`primitives.term_counts`)."""
        return primitives.term_counts(pool.texts)

    def term_frequencies(self, words: list[str], pool: Pool) -> tuple[np.ndarray, np.ndarray]:
        """(how often each of `words` (terms) is in each of these candidates, words x candidates;
        each one's length in words), for a BM25 among them (`primitives.bm25_scores`)."""
        return primitives.frequencies(words, self.term_counts(pool))


class HotRetrieval(LanceRetrieval):
    """Vectors, context windows and rows from the being's index; full text from the table."""

    def __init__(
        self,
        table,
        where: str,
        index: BeingIndex,
        keep: np.ndarray,
        own_text: bool = True,
        scanned: np.ndarray | None = None,
    ):
        super().__init__(table, where)
        self.index = index
        self.keep = keep
        self.scanned = scanned  # `BeingIndex.scanned` for the vector search, when the caller scanned
        self.own_text = own_text  # full text from the index's postings, not from LanceDB

    def vector(self, vector: np.ndarray, limit: int, columns: list[str]) -> IndexPool:
        positions, cosine = self.index.nearest(vector, self.keep, limit, self.scanned)
        return IndexPool(self.index, positions, cosine.astype(np.float64), "cosine")

    def text(self, query: str, limit: int, columns: list[str]) -> IndexPool | None:
        if self.own_text:
            positions, scores = fulltext.search(self.index.text, query, self.keep, limit)
            if not len(positions):
                return None
            return IndexPool(self.index, positions, np.asarray(scores, dtype=np.float32), "_score")
        table = self.index.snapshot if self.index.snapshot is not None else self.table
        found = primitives.text_candidates(table, query, self.where, limit, ["memory_ref"])
        if found is None:
            return None
        # Without a snapshot, a publish since the index's version may bring refs the index
        # does not hold yet; the next request uses the rebuilt index.
        refs = found.column("memory_ref").to_pylist()
        scores = dict(zip(refs, found.column("_score").to_pylist(), strict=True))
        positions = self.index.positions(scores)
        positions = positions[self.keep[positions]]
        ordered = np.array([scores[str(self.index.refs[p])] for p in positions], dtype=np.float32)
        return IndexPool(self.index, positions, ordered, "_score")

    def around(self, spans, limit: int, also: list[str], columns: list[str]) -> IndexPool | None:
        # Positions only: the chosen memories' rows are a cheap read by position (`by_ref`).
        if not spans and not also:
            return None
        return IndexPool(self.index, self.index.around(spans, self.keep, limit, also))

    def by_ref(self, refs: list[str]) -> pa.Table:
        positions = self.index.positions(refs)
        return self.index.rows_at(positions[self.keep[positions]], COLUMNS)

    def newest(self) -> datetime | None:
        return _newest(self.index.ts[self.keep])

    # The candidates' words come from the index's postings, by their positions there, not from
    # their texts. (In rows from another source (`FreshRetrieval`) each carries its position as a
    # column: looking the refs up in the index's sorted refs instead costs ~0.5 ms for a pool of
    # 400 at 100,000, once the scan has swept the caches.)
    lever_columns = (POSITION,)

    def term_counts(self, pool: Pool) -> list[Mapping[str, int]]:
        # From the index's words by memory: analysing the texts again cost ~0.25 ms each.
        return fulltext.term_counts(self.index.text, pool.positions)

    def term_frequencies(self, words: list[str], pool: Pool) -> tuple[np.ndarray, np.ndarray]:
        # Counting the words of a few hundred texts no request has read before costs ~6.5 us a
        # text; the postings already hold the counts. A memory the index does not hold counts 0.
        positions = pool.positions
        lengths = np.zeros(len(positions), dtype=np.float64)
        inside = positions >= 0
        lengths[inside] = self.index.text.lengths[positions[inside]]
        return fulltext.frequencies(self.index.text, words, positions), lengths

    def session_documents(self, query: str, pool: Pool, gap_seconds: float) -> np.ndarray:
        # Only the turns the request may see lend their words: a forgotten one none.
        return sessions.document_scores(
            self.index.text, self.index.sessions(gap_seconds), pool.positions, query, self.keep
        )


class EmptyRetrieval:
    """Nothing published yet (no table, or none of the being's memories is recallable)."""

    def vector(self, vector: np.ndarray, limit: int, columns: list[str]) -> None:
        return None

    def text(self, query: str, limit: int, columns: list[str]) -> None:
        return None

    def around(self, spans, limit: int, also: list[str], columns: list[str]) -> None:
        return None

    def by_ref(self, refs: list[str]) -> None:
        return None

    def newest(self) -> None:
        return None

    def session_documents(self, query: str, pool: Pool, gap_seconds: float) -> np.ndarray:
        return np.zeros(len(pool))

    lever_columns = ()

    def term_counts(self, pool: Pool) -> list[Mapping[str, int]]:
        return [{} for _ in range(len(pool))]

    def term_frequencies(self, words: list[str], pool: Pool) -> tuple[np.ndarray, np.ndarray]:
        return np.zeros((len(words), len(pool))), np.zeros(len(pool))


class FreshRetrieval:
    """The published candidates of another retrieval and the being's fresh tail, as one source.

    The fresh memories (`mindflow.loop.tail.rows`, already filtered by the request) answer
    each question the way the table does: nearest by cosine, full text by BM25, the same
    columns and types, so `search.recall` ranks them with the published ones in one pool (of
    rows: the published candidates are read as rows too).
    A fresh memory whose ref a published row already has (published since the tail was
    checked) is left out: the published row stands for it.
    """

    def __init__(self, published, fresh: pa.Table, corpus: int, terms: list | None = None):
        self.published = published
        self.fresh = fresh
        self.refs = fresh.column("memory_ref").to_pylist()
        self._at = {ref: i for i, ref in enumerate(self.refs)}  # ref -> its row in `fresh`
        vectors = primitives.vectors_of(fresh) if fresh.num_rows else np.zeros((0, 0), np.float32)
        norms = np.clip(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12, None) if len(vectors) else 1.0
        self.vectors = vectors / norms
        self.ts = fresh.column("ts").to_numpy()
        # The texts' words as the full-text index counts them; the tail keeps them between requests.
        self.terms = terms if terms is not None else primitives.term_counts(fresh.column("text").to_pylist())
        self.corpus = corpus  # published memories the full-text statistics stand for
        self.shadowed: set[str] = set()

    def is_fresh(self, ref: str) -> bool:
        """True when `ref` was answered from the fresh tail, not by a published row."""
        return ref in self._at and ref not in self.shadowed

    def _merged(self, published: pa.Table | None, positions, extra: dict[str, np.ndarray], columns):
        """Published rows and the fresh rows at `positions` (with `extra` columns), one table."""
        index = pa.array(np.asarray(positions, dtype=np.int64), type=pa.int64())
        part = self.fresh.select([c for c in columns if c in self.fresh.column_names]).take(index)
        for name, values in extra.items():
            part = part.append_column(name, pa.array(values))
        if POSITION in columns:
            # Not in the index: what the levers read as "count its words from the tail".
            part = part.append_column(POSITION, pa.array(np.full(part.num_rows, -1), type=pa.int64()))
        if published is None or published.num_rows == 0:
            return part if part.num_rows else published
        known = set(published.column("memory_ref").to_pylist())
        self.shadowed |= known & self._at.keys()
        keep = [i for i, ref in enumerate(part.column("memory_ref").to_pylist()) if ref not in known]
        part = part.take(pa.array(keep, type=pa.int64())).select(published.column_names)
        return pa.concat_tables([published, part.cast(published.schema)])

    def vector(self, vector: np.ndarray, limit: int, columns: list[str]) -> Pool | None:
        published = self.published.vector(vector, limit, columns)
        if not self.refs:
            return published
        published = _table(published, columns)
        q = np.asarray(vector, dtype=np.float32)
        cosine = self.vectors @ (q / max(float(np.linalg.norm(q)), 1e-12))
        best = np.argsort(-cosine, kind="stable")[:limit]
        extra = {
            "cosine": cosine[best].astype(np.float64),
            "_distance": (1 - cosine[best]).astype(np.float32),
        }
        merged = self._merged(published, best, extra, columns)
        if merged is None or merged.num_rows == 0:
            return _pool_of(merged, "cosine")
        order = np.argsort(-merged.column("cosine").to_numpy(zero_copy_only=False), kind="stable")[:limit]
        return RowPool(merged.take(pa.array(order, type=pa.int64())), "cosine")

    def text(self, query: str, limit: int, columns: list[str]) -> Pool | None:
        published = self.published.text(query, limit, columns)
        if not self.refs:
            return published
        hits = len(published) if published is not None else 0
        published = _table(published, columns)
        scores = primitives.bm25(query, self.terms, self.corpus + len(self.refs), hits)
        matched = np.flatnonzero(scores > 0)
        if len(matched) == 0:
            return _pool_of(published, "_score")
        best = matched[np.argsort(-scores[matched], kind="stable")][:limit]
        merged = self._merged(published, best, {"_score": scores[best].astype(np.float32)}, columns)
        order = np.argsort(-merged.column("_score").to_numpy(zero_copy_only=False), kind="stable")[:limit]
        return RowPool(merged.take(pa.array(order, type=pa.int64())), "_score")

    def around(self, spans, limit: int, also: list[str], columns: list[str]) -> Pool | None:
        published = self.published.around(spans, limit, also, columns)
        if not self.refs:
            return published
        published = _table(published, columns)
        near = np.zeros(len(self.refs), dtype=bool)
        for start, end in spans:
            near |= (self.ts >= np.datetime64(start, "us")) & (self.ts <= np.datetime64(end, "us"))
        named = set(also)
        near |= np.array([r in named for r in self.refs], dtype=bool)
        # Every column, as LanceDB's `around` reads, and what the request carries (POSITION).
        wanted = list(dict.fromkeys([*COLUMNS, "vector", *columns]))
        return _pool_of(self._merged(published, np.flatnonzero(near), {}, wanted))

    def session_documents(self, query: str, pool: Pool, gap_seconds: float) -> np.ndarray:
        # A fresh memory's session is not in the index yet (its POSITION is -1): scored 0, as
        # recall without one.
        return self.published.session_documents(query, pool, gap_seconds)

    @property
    def lever_columns(self) -> tuple[str, ...]:
        return self.published.lever_columns

    def _fresh_of(self, pool: Pool) -> list[tuple[int, int]]:
        """(row, position in the tail) of the candidates answered from the fresh tail."""
        return [(i, self._at[ref]) for i, ref in enumerate(pool.refs) if self.is_fresh(ref)]

    def term_counts(self, pool: Pool) -> list[Mapping[str, int]]:
        out = self.published.term_counts(pool)
        for i, j in self._fresh_of(pool):
            out[i] = self.terms[j]  # the tail's own counts of its texts
        return out

    def term_frequencies(self, words: list[str], pool: Pool) -> tuple[np.ndarray, np.ndarray]:
        tf, lengths = self.published.term_frequencies(words, pool)
        fresh = self._fresh_of(pool)
        if fresh:
            # The tail's own counts of its texts (`primitives.term_counts`, as the index counts).
            counted = primitives.frequencies(words, [self.terms[j] for _, j in fresh])
            tf[:, [i for i, _ in fresh]], lengths[[i for i, _ in fresh]] = counted
        return tf, lengths

    def newest(self) -> datetime | None:
        times = [t for t in (self.published.newest(), _newest(self.ts)) if t is not None]
        return max(times, default=None)

    def by_ref(self, refs: list[str]) -> pa.Table | None:
        published = self.published.by_ref(refs)
        wanted = set(refs)
        positions = [i for i, r in enumerate(self.refs) if r in wanted]
        return self._merged(published, positions, {}, COLUMNS)
