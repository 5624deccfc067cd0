"""Retrieval primitives over the LanceDB `memories` table: vector, full-text, filters."""

from __future__ import annotations

import functools
import re
import unicodedata
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa

from mindflow import lance
from mindflow.inbox import validate_being_id
from mindflow.memories import TABLE
from mindflow.recall.models import COLUMNS
from mindflow.vectors import to_matrix

# Recall returns active and dying memories; search_memory and a cluster's memories also
# reach dormant and dead ones, as in the seed.
RECALLABLE = ("active", "dying")
SEARCHABLE = ("active", "dying", "dormant", "dead")
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


# The full-text index's analysis (lancedb.index.FTS defaults: simple tokenizer, lower case,
# ASCII folding, English stop words), for texts not in the index yet (the fresh tail). Its
# stemming is not repeated: a fresh memory matches a query's words as written, and by meaning
# through its vector.
_STOP_WORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then "
    "there these they this to was will with".split()
)
_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)
BM25_K1, BM25_B = 1.2, 0.75


def fts_tokens(text: str) -> list[str]:
    """A text's words as the full-text index's simple tokenizer splits them, lower case, ASCII-folded."""
    text = (text or "").lower()
    # Most texts are ASCII: nothing to fold (the per-character pass is most of the cost).
    folded = (
        text
        if text.isascii()
        else "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    )
    return [w for w in _TOKEN.findall(folded) if len(w) <= 40]


def fts_terms(text: str) -> list[str]:
    return [w for w in fts_tokens(text) if w not in _STOP_WORDS]


def term_counts(texts: list[str]) -> list[Counter]:
    """Each text's words as the full-text index counts them (what `bm25` scores); read-only."""
    return [_term_counts(t or "") for t in texts]


@functools.lru_cache(maxsize=65_536)
def _term_counts(text: str) -> Counter:
    # The levers count the words of the same popular memories again and again: each text is
    # split once while it stays among the recently counted (the Counters are shared, never changed).
    return Counter(fts_terms(text))


def bm25(query: str, docs: list[Counter], corpus: int, published_hits: int = 0) -> np.ndarray:
    """BM25 of texts (their `term_counts`) for the query, as the full-text index scores its rows
    (same k1, b and idf).

    The texts are not in the index, so its statistics are estimated: `corpus` documents in
    all, and each query word in the texts that hold it plus the `published_hits` the index
    matched for the query (what a word's document frequency is at least, as far as one query
    shows). Document lengths are those of the texts.
    """
    words = list(dict.fromkeys(fts_terms(sanitize_fts_query(query))))
    scores = np.zeros(len(docs), dtype=np.float64)
    if not words or not docs:
        return scores
    lengths = np.array([sum(d.values()) for d in docs], dtype=np.float64)
    norm = BM25_K1 * (1 - BM25_B + BM25_B * lengths / max(float(lengths.mean()), 1.0))
    n = max(corpus, len(docs))
    for word in words:
        tf = np.array([d.get(word, 0) for d in docs], dtype=np.float64)
        held = int((tf > 0).sum())
        if not held:
            continue
        df = min(n, held + published_hits)
        idf = np.log(1 + (n - df + 0.5) / (df + 0.5))
        scores += idf * tf * (BM25_K1 + 1) / (tf + norm)
    return scores
