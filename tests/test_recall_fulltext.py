"""The hot index's own BM25 finds what LanceDB's full-text index finds, and scores it alike."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from mindflow.recall import fulltext, primitives

TEXTS = [
    "I went camping with my kids last summer near the lake.",
    "We camped by the river; the children loved it",
    "Caroline researched adoption agencies for months",
    "My research on adoption is going well",
    "The running shoes were great for marathons",
    "She runs every morning before work",
    "Decision: ship the ebook index on Sunday",
    "Zürich was cold, we drank hot chocolate",
    "The cats are playing with the dog's toys",
    "Painting sunsets relaxes me",
]
QUERIES = [
    "camping kids", "researching adoption", "run", "zurich chocolate", "cat toys", "painted sunset",
    "item3 decision", "the of and", "-100123:45 OR NOT", "",
]  # fmt: skip


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return [f"{t} item{i}" for i, t in enumerate(TEXTS * 3)]


def test_same_hits_and_scores_as_lancedb_full_text_index(tmp_path, texts):
    import lancedb
    from lancedb.index import FTS

    table = lancedb.connect(str(tmp_path)).create_table(
        "m", data=pa.table({"id": list(range(len(texts))), "text": texts})
    )
    table.create_index("text", config=FTS())  # what memories.ensure_indexes builds
    arrays = fulltext.build(texts)
    keep = np.ones(len(texts), dtype=bool)
    for query in QUERIES:
        from mindflow.recall.primitives import sanitize_fts_query

        clean = sanitize_fts_query(query)
        lance = {}
        if clean:
            found = table.search(clean, query_type="fts").limit(50).select(["id", "_score"]).to_arrow()
            lance = dict(zip(found["id"].to_pylist(), found["_score"].to_pylist(), strict=True))
        positions, scores = fulltext.search(arrays, query, keep, 50)
        ours = dict(zip(positions.tolist(), scores.tolist(), strict=True))
        assert set(ours) == set(lance), query  # stemming included: "camping" finds "camped"
        for ref, score in lance.items():
            assert ours[ref] == pytest.approx(score, rel=0.1), (query, ref)
        assert list(scores) == sorted(scores, reverse=True)


def test_keep_and_limit(texts):
    arrays = fulltext.build(texts)
    keep = np.ones(len(texts), dtype=bool)
    everything, _ = fulltext.search(arrays, "adoption research", keep, 50)
    assert sorted(everything.tolist()) == [2, 3, 12, 13, 22, 23]
    keep[[2, 12]] = False  # forgotten, or outside the request's time window
    allowed, _ = fulltext.search(arrays, "adoption research", keep, 50)
    assert sorted(allowed.tolist()) == [3, 13, 22, 23]
    best, scores = fulltext.search(arrays, "adoption research", keep, 2)
    assert len(best) == 2 and set(best.tolist()) <= set(allowed.tolist())
    assert scores.min() >= fulltext.search(arrays, "adoption research", keep, 50)[1][2]


def test_an_empty_index_and_unknown_words():
    empty = fulltext.build([])
    assert fulltext.search(empty, "anything", np.zeros(0, dtype=bool), 5)[0].tolist() == []
    arrays = fulltext.build(["hello world"])
    assert fulltext.search(arrays, "nothing here", np.ones(1, dtype=bool), 5)[0].tolist() == []


def test_bm25_of_texts_outside_the_index_is_the_index_s_own(texts):
    # A fresh memory's BM25 (primitives.bm25 over its words) counts words as the index does:
    # over the same texts, the same hits and scores, stemming included.
    from mindflow.recall import primitives

    arrays = fulltext.build(texts)
    keep = np.ones(len(texts), dtype=bool)
    counts = primitives.term_counts(texts)
    assert arrays.lengths.tolist() == [sum(c.values()) for c in counts]
    for query in QUERIES:
        positions, scores = fulltext.search(arrays, query, keep, 50)
        outside = primitives.bm25(query, counts, len(texts))
        assert np.flatnonzero(outside).tolist() == sorted(positions.tolist()), query
        assert outside[positions] == pytest.approx(scores, rel=1e-5), query


def test_frequencies_from_the_postings_are_the_texts_counts(texts):
    from mindflow.recall import primitives

    arrays = fulltext.build(texts)
    words = primitives.query_terms("camping children research zzz adoption")
    assert words == ["camp", "children", "research", "zzz", "adopt"]
    positions = np.array([0, 1, 3, -1, 13, 29])
    tf = fulltext.frequencies(arrays, words, positions)
    inside = [p for p in positions.tolist() if p >= 0]
    expected, _ = primitives.frequencies(words, primitives.term_counts([texts[p] for p in inside]))
    assert tf[:, positions >= 0].tolist() == expected.tolist()
    assert tf[:, 3].tolist() == [0.0] * len(words)  # not in the index
    assert tf[0, :2].tolist() == [1.0, 1.0]  # "camping" and "camped"
    assert fulltext.frequencies(fulltext.build([]), words, np.array([-1])).tolist() == [[0.0]] * len(words)


def test_words_stemmed_by_many_threads_at_once_are_stemmed_right():
    # Requests stem their queries (and, from LanceDB or the fresh tail, the candidates' texts)
    # on threads of their own while an index may be built on another.
    import random
    import string
    import sys
    import threading

    import snowballstemmer

    from mindflow.recall import analysis

    rng = random.Random(0)
    endings = ["ing", "ed", "s", "ation", "ness", "ly"]
    batches = [
        [
            "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(4, 14)))
            + rng.choice(endings)
            for _ in range(5_000)
        ]
        for _ in range(8)
    ]
    errors: list[str] = []

    def stem(words: list[str]) -> None:
        try:
            for word in words:
                analysis.term(word)
        except Exception as error:  # noqa: BLE001 - collected and asserted below
            errors.append(repr(error))

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: a shared stemmer breaks
    try:
        threads = [threading.Thread(target=stem, args=(batch,)) for batch in batches]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    alone = snowballstemmer.stemmer("english")
    wrong = [
        word
        for batch in batches
        for word in batch
        if analysis.term(word) not in (alone.stemWord(word), "")  # "" is a stop word's term
    ]
    assert errors == [] and wrong == []


@pytest.mark.parametrize("n, count", [(100_000, 256), (100_000, 30), (20_000, 2_400), (5_000, 30), (300, 30)])
def test_largest_chooses_the_values_a_full_selection_chooses(n, count):
    rng = np.random.default_rng(n + count)
    cases = {
        "floats": rng.normal(size=n).astype(np.float32),
        "ties": rng.integers(-50, 50, size=n).astype(np.int32),
        # the largest clustered at the start, where every sampled value is among them
        "clustered": np.sort(rng.normal(size=n))[::-1].copy(),
        # most masked out, as a scan over a short horizon
        "masked": np.where(rng.random(n) < 0.995, -np.inf, rng.normal(size=n)),
    }
    # every sampled value among the largest: the bar is too high, and the full selection runs
    strided = rng.normal(size=n)
    strided[:: max(n // primitives.SAMPLE, 1)] += 100
    cases["strided"] = strided
    for name, values in cases.items():
        chosen = primitives.largest(values, count)
        assert len(chosen) == min(count, n) and len(np.unique(chosen)) == len(chosen), name
        expected = np.sort(values)[::-1][:count]
        assert np.array_equal(np.sort(values[chosen])[::-1], expected), name
    assert len(primitives.largest(np.ones(10), 0)) == 0
    assert sorted(primitives.largest(np.arange(5.0), 9)) == [0, 1, 2, 3, 4]


def test_the_words_by_memory_are_each_texts_terms_in_its_order(texts):
    arrays = fulltext.build(texts + ["", "the the the"])
    positions = np.array([3, -1, 0, len(texts), len(texts) + 1, 3])
    counted = fulltext.term_counts(arrays, positions)
    expected = primitives.term_counts([texts[3], "", texts[0], "", "the the the", texts[3]])
    assert counted == [dict(c) for c in expected]
    assert [list(c) for c in counted] == [list(c) for c in expected]  # first use first: PRF's tie-break
    assert fulltext.term_counts(fulltext.build([]), np.zeros(0, dtype=np.int64)) == []
