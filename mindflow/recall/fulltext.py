"""BM25 over a being's hot index: the full-text side of recall without a query to LanceDB.

A full-text query through LanceDB costs 4.8 ms of CPU at 100,000 memories (its own threads,
its index read per query), the largest share of a recall after the query embedding; with
several clients that CPU is what caps requests per second. The hot index already holds the
being's texts at one table version, so it holds their postings too: one numpy pass per query
word (0.27 ms in all, measured over 450 queries).

The analysis is the full-text index's (`mindflow.recall.analysis`) and the scores are BM25
with the same k1, b and idf; tests/test_recall_fulltext.py checks hits and scores against
LanceDB's index.

The statistics are the being's own memories (LanceDB's are the whole table's, every being's):
a word common in this being's memories weighs less here, which is what its recall is about.
On LoCoMo the server's recall rose from hit@10 0.776 to 0.798 with them (README, "Recall
quality"); the same BM25 with every being's statistics gave LanceDB's figures back.

Everything is a flat numpy array (`TextArrays`), so server workers map one copy from files
(`mindflow.recall.hot_files`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from mindflow.recall.analysis import terms
from mindflow.recall.primitives import BM25_B, BM25_K1, largest, query_terms


@dataclass
class TextArrays:
    """Postings of a being's memories, by word: `vocabulary` sorted, word i's memories (their
    positions in the index) and counts at `starts[i]:starts[i + 1]`, each memory's length.

    And by memory (what pseudo-relevance feedback reads of its best candidates, instead of
    analysing their texts again: ~0.25 ms a text): memory j's distinct words (vocabulary
    numbers, in the order the text first uses them) and their counts at
    `word_starts[j]:word_starts[j + 1]`."""

    vocabulary: np.ndarray  # str, sorted
    starts: np.ndarray  # int64, len(vocabulary) + 1
    positions: np.ndarray  # int32
    counts: np.ndarray  # float32
    lengths: np.ndarray  # float32, one per memory
    word_starts: np.ndarray  # int64, one per memory + 1
    words: np.ndarray  # int32
    word_counts: np.ndarray  # int32


def build(texts: list[str]) -> TextArrays:
    """The postings of `texts` (position i = texts[i])."""
    distinct: list[str] = []  # each text's words once, in the order it first uses them
    distinct_counts: list[int] = []
    lengths = np.zeros(len(texts), dtype=np.float32)
    word_starts = np.zeros(len(texts) + 1, dtype=np.int64)
    for position, text in enumerate(texts):
        found = terms(text)
        lengths[position] = len(found)
        counted = Counter(found)
        distinct.extend(counted)
        distinct_counts.extend(counted.values())
        word_starts[position + 1] = len(distinct)
    ids: dict[str, int] = {}
    word_ids = np.fromiter(
        (ids.setdefault(w, len(ids)) for w in distinct), dtype=np.int64, count=len(distinct)
    )
    vocabulary = np.array(sorted(ids), dtype=str) if ids else np.zeros(0, dtype="<U1")
    # Word ids in the order of the sorted vocabulary, so a word is found by binary search.
    rank = np.empty(len(ids), dtype=np.int64)
    order = np.fromiter((ids[w] for w in vocabulary.tolist()), dtype=np.int64, count=len(ids))
    rank[order] = np.arange(len(ids))
    by_memory = rank[word_ids]
    # The postings are the words by memory turned over: one (word, memory) pair each, sorted by
    # word, then memory.
    docs = np.repeat(np.arange(len(texts), dtype=np.int64), np.diff(word_starts))
    postings = np.lexsort((docs, by_memory))
    counts = np.array(distinct_counts, dtype=np.int32)
    starts = np.zeros(len(ids) + 1, dtype=np.int64)
    np.cumsum(np.bincount(by_memory, minlength=len(ids)), out=starts[1:])
    return TextArrays(
        vocabulary=vocabulary,
        starts=starts,
        positions=docs[postings].astype(np.int32),
        counts=counts[postings].astype(np.float32),
        lengths=lengths,
        word_starts=word_starts,
        words=by_memory.astype(np.int32),
        word_counts=counts,
    )


def term_counts(arrays: TextArrays, positions: np.ndarray) -> list[dict[str, int]]:
    """The words of the memories at `positions` with how often each uses them, in the order the
    text first uses them (as `primitives.term_counts` counts a text); {} at a position of -1."""
    out: list[dict[str, int]] = []
    for position in positions.tolist():
        if position < 0:
            out.append({})
            continue
        start, end = int(arrays.word_starts[position]), int(arrays.word_starts[position + 1])
        words = arrays.vocabulary[arrays.words[start:end]].tolist()
        out.append(dict(zip(words, arrays.word_counts[start:end].tolist(), strict=True)))
    return out


def search(arrays: TextArrays, query: str, keep: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """(positions, BM25) of the `limit` best memories that hold a word of `query`, among those
    `keep` allows, best first."""
    words = query_terms(query)
    n = len(arrays.lengths)
    if not words or not n or not len(arrays.vocabulary):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
    found = np.searchsorted(arrays.vocabulary, words)
    scores = np.zeros(n, dtype=np.float32)
    average = max(float(arrays.lengths.mean()), 1.0)
    for word, i in zip(words, found.tolist(), strict=True):
        if i >= len(arrays.vocabulary) or arrays.vocabulary[i] != word:
            continue
        start, end = int(arrays.starts[i]), int(arrays.starts[i + 1])
        docs, tf = arrays.positions[start:end], arrays.counts[start:end]
        idf = np.log(1 + (n - (end - start) + 0.5) / ((end - start) + 0.5))
        norm = BM25_K1 * (1 - BM25_B + BM25_B * arrays.lengths[docs] / average)
        scores[docs] += (idf * tf * (BM25_K1 + 1) / (tf + norm)).astype(np.float32)
    scores[~keep] = 0
    hits = np.flatnonzero(scores > 0)
    if len(hits) > limit:
        hits = hits[largest(scores[hits], limit)]
    hits = hits[np.argsort(-scores[hits], kind="stable")]
    return hits, scores[hits]


def frequencies(arrays: TextArrays, words: list[str], positions: np.ndarray) -> np.ndarray:
    """How often each of `words` (terms) is in the memories at `positions`: words x positions,
    0 at a position of -1 (a memory the index does not hold)."""
    tf = np.zeros((len(words), len(positions)), dtype=np.float64)
    inside = np.flatnonzero(positions >= 0)
    if not len(words) or not len(inside) or not len(arrays.vocabulary):
        return tf
    at = positions[inside]
    found = np.searchsorted(arrays.vocabulary, words)
    for row, (word, i) in enumerate(zip(words, found.tolist(), strict=True)):
        if i >= len(arrays.vocabulary) or arrays.vocabulary[i] != word:
            continue
        start, end = int(arrays.starts[i]), int(arrays.starts[i + 1])
        docs = arrays.positions[start:end]  # ascending: the postings are sorted by word, then memory
        j = np.searchsorted(docs, at).clip(max=end - start - 1)
        hit = docs[j] == at
        tf[row, inside[hit]] = arrays.counts[start:end][j[hit]]
    return tf
