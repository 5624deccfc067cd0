"""The session-document score: a session's turns read as one document.

A question about one conversation ("what did they decide about the trip?") often shares
its words with the conversation as a whole more than with the one turn that answers it:
the words are spread over several turns. Each session of a being's memories is scored as
one document (BM25 over the session's words, the being's sessions as the statistics), and
that score, over the best session's, is mixed into each of its turns'
(`RecallConfig.session_doc_weight`). The cosine of a session's mean vector was measured
beside it and scored lower (README, "Recall quality").

A memory's session is its episode's `session_id`; a memory without one is a session of
its own. The scores need every turn of a session, so they come from a being's hot index
(the server's); recall without one leaves them out.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mindflow.recall import fulltext
from mindflow.recall.primitives import BM25_B, BM25_K1, query_terms


@dataclass
class Sessions:
    """Which session each memory of an index is in (`of`, by position), and each session's
    length in words (its memories' together)."""

    of: np.ndarray  # int64, one per memory
    lengths: np.ndarray  # float64, one per session
    # The sessions' own postings (`with_words`), aligned with the full-text vocabulary: word i is
    # in sessions `word_sessions[word_starts[i]:word_starts[i + 1]]`, `word_counts` times in each.
    word_starts: np.ndarray | None = None
    word_sessions: np.ndarray | None = None
    word_counts: np.ndarray | None = None

    @property
    def count(self) -> int:
        return len(self.lengths)


def with_words(sessions: Sessions, text: fulltext.TextArrays) -> Sessions:
    """`sessions` with their postings: each word's memories' postings summed per session, once
    per index (~0.05 s at 100,000 memories). A request that may see every memory then reads a
    word's sessions instead of counting its memories into their sessions (0.07 against 0.2 ms
    a query at 100,000 memories, the same scores)."""
    starts = np.asarray(text.starts, dtype=np.int64)
    words = np.repeat(np.arange(len(starts) - 1, dtype=np.int64), np.diff(starts))
    width = max(sessions.count, 1)  # one key per (word, session): word x width + session
    key = words * width + sessions.of[np.asarray(text.positions, dtype=np.int64)]
    pairs, which = np.unique(key, return_inverse=True)
    counts = np.bincount(which, weights=np.asarray(text.counts, dtype=np.float64), minlength=len(pairs))
    return replace(
        sessions,
        word_starts=np.searchsorted(pairs // width, np.arange(len(starts))),
        word_sessions=pairs % width,
        word_counts=counts,
    )


def group(
    session_ids: pa.ChunkedArray | pa.Array, ts: np.ndarray, gap_seconds: float, word_lengths: np.ndarray
) -> Sessions:
    """The sessions of an index's memories (position i = memory i, in time order): their
    `session_id`; a memory without one is in the run of memories around it without a pause
    over `gap_seconds`, and one without a time too is a session of its own."""
    n = len(session_ids)
    if n == 0:
        return Sessions(np.zeros(0, np.int64), np.zeros(0))
    if isinstance(session_ids, pa.ChunkedArray):
        session_ids = session_ids.combine_chunks()
    codes = pc.dictionary_encode(session_ids)
    known = codes.indices.is_valid().to_numpy(zero_copy_only=False)
    named = len(codes.dictionary)
    of = np.empty(n, dtype=np.int64)
    of[known] = codes.indices.to_numpy(zero_copy_only=False)[known]
    stamps = np.asarray(ts, dtype="datetime64[us]")
    timed = ~known & ~np.isnat(stamps)
    if timed.any():
        # Runs over the timed memories without a session id, in time order (the index's).
        seconds = stamps[timed].astype(np.int64) / 1e6
        runs = np.cumsum(np.concatenate([[True], np.diff(seconds) > gap_seconds])) - 1
        of[timed] = named + runs
        named += int(runs[-1]) + 1
    alone = ~known & ~timed
    of[alone] = named + np.arange(int(alone.sum()))
    count = named + int(alone.sum())
    lengths = np.bincount(of, weights=np.asarray(word_lengths, dtype=np.float64), minlength=count)
    return Sessions(of, lengths)


def text_scores(
    text: fulltext.TextArrays, sessions: Sessions, query: str, keep: np.ndarray | None = None
) -> np.ndarray:
    """BM25 of every session as one document (its memories' words together) for the query.

    With `keep`, only the memories it allows lend their words: one the request may not see (a
    forgotten one) adds nothing to its session. The lengths stay the whole sessions' (counting
    them again per request would cost a pass over every memory)."""
    scores = np.zeros(sessions.count, dtype=np.float64)
    words = query_terms(query)
    if not words or not sessions.count or not len(text.vocabulary):
        return scores
    average = max(float(sessions.lengths.mean()), 1.0)
    norm = BM25_K1 * (1 - BM25_B + BM25_B * sessions.lengths / average)
    found = np.searchsorted(text.vocabulary, words)
    # The sessions' own postings hold every memory's words: usable when the request sees them all.
    whole = sessions.word_starts is not None and (keep is None or bool(keep.all()))
    for word, i in zip(words, found.tolist(), strict=True):
        if i >= len(text.vocabulary) or text.vocabulary[i] != word:
            continue
        if whole:
            start, end = int(sessions.word_starts[i]), int(sessions.word_starts[i + 1])
            held, tf = sessions.word_sessions[start:end], sessions.word_counts[start:end]
        else:
            start, end = int(text.starts[i]), int(text.starts[i + 1])
            docs, counts = text.positions[start:end], text.counts[start:end]
            if keep is not None:
                seen = keep[docs]
                docs, counts = docs[seen], counts[seen]
            tf = np.bincount(sessions.of[docs], weights=counts, minlength=sessions.count)
            held = np.flatnonzero(tf)
            tf = tf[held]
        idf = np.log(1 + (sessions.count - len(held) + 0.5) / (len(held) + 0.5))
        scores[held] += idf * tf * (BM25_K1 + 1) / (tf + norm[held])
    return scores


def document_scores(
    text: fulltext.TextArrays,
    sessions: Sessions,
    positions: np.ndarray,
    query: str,
    keep: np.ndarray | None = None,
) -> np.ndarray:
    """For the memories at `positions` (-1: not in the index, scored 0), their session's BM25
    as one document (of the memories `keep` allows), over the best session's (0 to 1)."""
    out = np.zeros(len(positions), dtype=np.float64)
    inside = positions >= 0
    if not inside.any():
        return out
    scores = text_scores(text, sessions, query, keep)
    best = float(scores.max()) if len(scores) else 0.0
    if best > 0:
        out[inside] = scores[sessions.of[positions[inside]]] / best
    return out
