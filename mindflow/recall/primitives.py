"""Retrieval primitives over the LanceDB `memories` table: vector, full-text, filters."""

from __future__ import annotations

import functools
import re
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa

from mindflow import lance
from mindflow.inbox import validate_being_id
from mindflow.memories import TABLE
from mindflow.recall.analysis import terms
from mindflow.recall.models import COLUMNS
from mindflow.vectors import to_matrix

# Recall returns active and dying memories; search_memory and a cluster's memories also
# reach dormant and dead ones, as in the seed.
RECALLABLE = ("active", "dying")
SEARCHABLE = ("active", "dying", "dormant", "dead")
# A forget by query also offers archived memories: forgotten ones, so that "no, delete it
# for good" can confirm them permanently, and ones decay's retention archived, whose text is
# still kept everywhere a permanent forget erases. No agent-facing read uses it.
FORGETTABLE = (*SEARCHABLE, "archived")
MAX_QUERY_TERMS = 32
_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?", re.UNICODE)
# Words the full-text parser may read as operators.
_OPERATORS = {"and", "or", "not"}


def open_memories(lance_path: Path):
    """The `memories` table, or None before the first publish; each read sees the latest version."""
    return lance.open_table(lance.reader(lance_path), TABLE)


def sanitize_fts_query(query: str) -> str:
    """Plain words only: punctuation, operators and IDs like `-100123:45` cannot break the parser."""
    words = [w for w in _WORD.findall(query or "") if w.lower() not in _OPERATORS]
    return " ".join(words[:MAX_QUERY_TERMS]).lower()


_KEYWORD = re.compile(r"[^\W_]+(?:[-:'’][^\W_]+)*", re.UNICODE)


def words_of(text: str) -> set[str]:
    """Every lower-case word of a text, split as `keywords` splits a query, however many."""
    return {w.lower() for w in _KEYWORD.findall(text or "")}


def keywords(query: str) -> list[str]:
    """Lower-case keywords for substring search; dates like 2026-10-20 stay whole."""
    return list(dict.fromkeys(w.lower() for w in _KEYWORD.findall(query or "")))[:MAX_QUERY_TERMS]


def memory_filter(
    being_id: str,
    *,
    statuses: tuple[str, ...] = ("active", "dying"),
    exclude_refs: tuple[str, ...] | list[str] = (),
    since: datetime | None = None,
    until: datetime | None = None,
    cluster_id: str | None = None,
) -> str:
    """The filter of every recall query: always scoped to one validated being."""
    validate_being_id(being_id)
    conditions = [lance.where(being_id=being_id, status=statuses)]
    if exclude_refs:
        conditions.append(lance.not_in("memory_ref", exclude_refs))
    if since is not None:
        conditions.append(lance.compare("ts", ">=", since))
    if until is not None:
        conditions.append(lance.compare("ts", "<=", until))
    if cluster_id is not None:
        conditions.append(lance.where(cluster_id=cluster_id))
    return lance.all_of(*conditions)


# What ranking needs of a candidate; the other columns are read for the k chosen only.
# (Each extra column costs LanceDB a random read per candidate: ~8 ms per query at 100k.)
RANKING_COLUMNS = ["memory_ref", "ts", "decay_score", "vector"]
ALL_COLUMNS = [*COLUMNS, "vector"]


def vector_candidates(
    table, vector: np.ndarray, where: str, limit: int, columns: list[str] = ALL_COLUMNS
) -> pa.Table:
    """Nearest memories by cosine, with `cosine` = 1 - distance."""
    result = (
        table.search(np.asarray(vector, dtype=np.float32), vector_column_name="vector")
        .distance_type("cosine")
        .where(where, prefilter=True)
        .select([*columns, "_distance"])
        .limit(limit)
        .to_arrow()
    )
    cosine = pa.compute.subtract(1.0, result.column("_distance"))
    return result.append_column("cosine", cosine)


def text_candidates(
    table, query: str, where: str, limit: int, columns: list[str] = ALL_COLUMNS
) -> pa.Table | None:
    """BM25 matches of the sanitised query, or None when nothing is left to search for."""
    terms = sanitize_fts_query(query)
    if not terms:
        return None
    if lance.is_async(table):  # a hot index's snapshot
        return lance.run_async(
            table.query()
            .nearest_to_text(terms)
            .where(where)  # a prefilter, as below
            .select([*columns, "_score"])
            .limit(limit)
            .to_arrow()
        )
    return (
        table.search(terms, query_type="fts")
        .where(where, prefilter=True)
        .select([*columns, "_score"])
        .limit(limit)
        .to_arrow()
    )


def filtered_rows(table, where: str, limit: int | None, columns: list[str] = ALL_COLUMNS) -> pa.Table:
    return table.search().where(where).select(columns).limit(limit).to_arrow()


def rows_by_ref(table, where: str, refs: list[str], columns: list[str] = COLUMNS) -> pa.Table:
    """The rows of these memories (within `where`), in no particular order."""
    return filtered_rows(table, lance.all_of(where, lance.where(memory_ref=refs)), len(refs), columns)


def vectors_of(rows: pa.Table) -> np.ndarray:
    """The `vector` column as one float32 matrix."""
    return to_matrix(rows.column("vector"))


def windows(times: list[datetime], radius: timedelta) -> list[tuple[datetime, datetime]]:
    """[t - radius, t + radius] around each time, overlapping ones merged, in time order."""
    merged: list[list[datetime]] = []
    for t in sorted(times):
        if merged and t - radius <= merged[-1][1]:
            merged[-1][1] = t + radius
        else:
            merged.append([t - radius, t + radius])
    return [(start, end) for start, end in merged]


def rows_around(
    table,
    where: str,
    spans: list[tuple[datetime, datetime]],
    limit: int,
    also: list[str] = (),
    columns: list[str] = ALL_COLUMNS,
) -> pa.Table | None:
    """Every memory within one of the time `spans`, plus the memories `also` names."""
    wanted = [
        f"({lance.compare('ts', '>=', start)} AND {lance.compare('ts', '<=', end)})" for start, end in spans
    ]
    if also:
        wanted.append(lance.where(memory_ref=also))
    if not wanted:
        return None
    return filtered_rows(table, lance.all_of(where, " OR ".join(wanted)), limit + len(also), columns)


BM25_K1, BM25_B = 1.2, 0.75


def query_terms(query: str) -> list[str]:
    """The distinct words of a query as the full-text index searches for them (`analysis.terms`)."""
    return list(dict.fromkeys(terms(sanitize_fts_query(query))))


def term_counts(texts: list[str]) -> list[Counter]:
    """Each text's words as the full-text index counts them (`analysis.terms`); read-only."""
    return [_term_counts(t or "") for t in texts]


@functools.lru_cache(maxsize=65_536)
def _term_counts(text: str) -> Counter:
    # Texts outside the hot index (fresh ones, LanceDB's rows) are counted again and again by
    # the levers: each is split once while it stays among the recently counted (the Counters
    # are shared, never changed).
    return Counter(terms(text))


def frequencies(words: list[str], docs: list[Counter]) -> tuple[np.ndarray, np.ndarray]:
    """(how often each word is in each doc, words x docs; each doc's length in words) of texts'
    `term_counts`: what `bm25_scores` reads."""
    tf = np.array([[d.get(word, 0) for d in docs] for word in words], dtype=np.float64).reshape(
        len(words), len(docs)
    )
    return tf, np.array([sum(d.values()) for d in docs], dtype=np.float64)


def bm25_scores(tf: np.ndarray, lengths: np.ndarray, corpus: int, published_hits: int = 0) -> np.ndarray:
    """BM25 of documents for a query's words, from their `frequencies` (words x docs) and lengths,
    as the full-text index scores its rows (same k1, b and idf).

    The statistics are those of these documents: `corpus` documents in all, and each word in
    the documents that hold it plus the `published_hits` the index matched for the query (what
    a word's document frequency is at least, as far as one query shows). Lengths are the
    documents'."""
    scores = np.zeros(tf.shape[1], dtype=np.float64)
    if not tf.size:
        return scores
    norm = BM25_K1 * (1 - BM25_B + BM25_B * lengths / max(float(lengths.mean()), 1.0))
    n = max(corpus, tf.shape[1])
    for row in tf:
        held = int((row > 0).sum())
        if not held:
            continue
        df = min(n, held + published_hits)
        idf = np.log(1 + (n - df + 0.5) / (df + 0.5))
        scores += idf * row * (BM25_K1 + 1) / (row + norm)
    return scores


def bm25(query: str, docs: list[Counter], corpus: int, published_hits: int = 0) -> np.ndarray:
    """BM25 of texts not in the index (their `term_counts`) for the query (`bm25_scores`)."""
    return bm25_scores(*frequencies(query_terms(query), docs), corpus, published_hits)


# `largest` first picks a bar from every SAMPLE-th value: over 100,000 scores the selection
# then sorts the ~1,000 above it instead of all of them (0.05 ms against 0.8 ms).
SAMPLE = 2048


def largest(values: np.ndarray, count: int) -> np.ndarray:
    """Positions of the `count` largest `values` (all of them when fewer), in no order; among
    equal values at the bar, any. The same values as a full `argpartition` would choose."""
    n = len(values)
    if count >= n:
        return np.arange(n)
    if count <= 0:
        return np.zeros(0, dtype=np.int64)
    if n >= 8 * SAMPLE and count * 8 <= n:
        sample = values[:: n // SAMPLE]
        # The sample's value where about twice `count` values of the whole are expected above
        # it, and a few more: the bar is under the count-th largest unless the sample happens
        # to hold many of the largest (p < 0.001 at 100,000 values and 256 chosen, by a Poisson
        # estimate; then the full selection runs).
        rank = min(len(sample), int(np.ceil(2 * count * len(sample) / n)) + 8)
        bar = np.partition(sample, len(sample) - rank)[len(sample) - rank]
        above = np.flatnonzero(values >= bar)
        if len(above) >= count:
            return above[np.argpartition(values[above], len(above) - count)[len(above) - count :]]
    return np.argpartition(values, n - count)[n - count :]
