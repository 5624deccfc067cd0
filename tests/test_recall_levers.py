"""The ranking levers of RecallConfig (pseudo-relevance feedback, session score, session
document, re-score): off by default, and each one changes the ranking the way it says, alike
from LanceDB and the hot index (the session document: from the hot index only)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import date, datetime, timedelta

import numpy as np
import pyarrow as pa
import pytest

from mindflow import lance
from mindflow.inbox import ingest
from mindflow.memories import publish
from mindflow.patrol import run_patrol
from mindflow.recall import (
    BeingIndex,
    RecallConfig,
    fulltext,
    hot,
    open_memories,
    primitives,
    recall,
    rerank,
    sessions,
    speakers,
)
from mindflow.recall.feedback import expansion_terms

T0 = datetime(2026, 10, 1, 9, 0)
BASE = RecallConfig(min_similarity=0.0, time_weight=0.0, speaker_weight=0.0)
# Two sessions a week apart, turns 30 s apart within each, Lena and Tom taking turns.
TURNS = [
    ("s1a", "We adopted a puppy from the shelter, his name is Biscuit.", 0, 0),
    ("s1b", "Biscuit chewed the sofa cushions on his first night.", 0, 1),
    ("s1c", "Biscuit needs his vaccination at the vet on Monday.", 0, 2),
    ("s2a", "The quarterly budget review moved to Wednesday.", 7, 0),
    ("s2b", "Finance wants the travel costs split by team.", 7, 1),
    ("s2c", "A new laptop for the intern is in the budget.", 7, 2),
]
SPEAKER = {
    "s1a": "Lena",
    "s1b": "Tom Berg",
    "s1c": "Lena",
    "s2a": "Tom Berg",
    "s2b": "Lena",
    "s2c": "Tom Berg",
}


@pytest.fixture
def table(settings, con, embedder):
    path = settings.inbox / "ada" / "episodes.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [
        {
            "id": i,
            "ts": (T0 + timedelta(days=d, seconds=30 * n)).isoformat() + "Z",
            "speaker": SPEAKER[i],
            "session_id": f"chat-{i[1]}",
            "role": "user",
            "text": t,
        }
        for i, t, d, n in TURNS
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ingest(con, settings.inbox, date(2026, 9, 1), date(2026, 12, 31))
    run_patrol(con, "ada", embedder, now=T0 + timedelta(days=10))
    publish(con, lance.connect(settings.lance_path))
    return open_memories(settings.lance_path)


def ask(table, embedder, query, config, now=T0 + timedelta(days=10)):
    """Recall from LanceDB, checked against the same recall from the being's hot index."""
    vector = embedder.encode([query])[0]
    found = recall(table, "ada", query, vector, k=6, config=config, now=now)
    rows = primitives.filtered_rows(table, primitives.memory_filter("ada"), None)
    # The same answer from the index, with LanceDB's full text (its own scores by the being's statistics).
    same = replace(config, hot_fulltext="lance")
    hot = recall(
        table, "ada", query, vector, k=6, config=same, now=now, index=BeingIndex("ada", table.version, rows)
    )
    assert [m.memory_ref for m in hot] == [m.memory_ref for m in found]
    assert [m.score for m in hot] == pytest.approx([m.score for m in found], rel=1e-5)
    return {m.source_episode_ids[0]: m for m in found}


def test_levers_are_off_by_default_but_time_speaker_and_reorder():
    config = RecallConfig()
    assert (config.prf_terms, config.session_weight, config.rescore_weight) == (0, 0.0, 0.0)
    assert config.session_doc_weight == 0.0
    # chosen by leave-one-out
    assert (config.time_weight, config.speaker_weight) == (0.2, 0.2)
    assert (config.reorder_weight, config.reorder_window, config.reorder_top) == (0.05, 1, 10)


def test_feedback_lifts_a_memory_sharing_the_best_results_words(table, embedder):
    # "vaccination" finds s1c; the feedback words of the best results ("biscuit") lift the
    # other turns about the puppy, which never say "vaccination".
    config = replace(BASE, context_window=0, prf_terms=3, prf_docs=2, prf_weight=0.5)
    plain = ask(table, embedder, "when is the vaccination", replace(config, prf_terms=0))
    fed = ask(table, embedder, "when is the vaccination", config)
    assert next(iter(fed)) == "s1c"
    assert fed["s1b"].parts["fused"] > plain["s1b"].parts["fused"]
    assert fed["s2b"].parts["fused"] == pytest.approx(plain["s2b"].parts["fused"])


def test_session_score_lifts_the_turns_of_the_session_that_matched(table, embedder):
    config = replace(BASE, context_window=0, session_weight=0.3)
    plain = ask(table, embedder, "budget review", replace(config, session_weight=0.0))
    lifted = ask(table, embedder, "budget review", config)
    gain = {ref: lifted[ref].parts["context"] - plain[ref].parts["context"] for ref in lifted}
    assert min(gain[r] for r in ("s2a", "s2b", "s2c")) > max(gain[r] for r in ("s1a", "s1b", "s1c"))


def _session_index(table) -> BeingIndex:
    columns = hot.index_columns(table.schema.names)  # as the server reads them
    rows = primitives.filtered_rows(table, primitives.memory_filter("ada"), None, columns)
    return BeingIndex("ada", table.version, rows)


def _gains(table, embedder, index, query: str, exclude=()) -> dict[str, float]:
    """What the session document (weight 0.4) adds to each memory recalled from the index."""
    vector = embedder.encode([query])[0]

    def from_index(config):
        found = recall(
            table, "ada", query, vector, k=6, config=config, now=T0 + timedelta(days=10), index=index,
            exclude_refs=list(exclude),
        )  # fmt: skip
        return {m.source_episode_ids[0]: m for m in found}

    plain, lifted = from_index(BASE), from_index(replace(BASE, session_doc_weight=0.4))
    return {ref: lifted[ref].parts["context"] - plain[ref].parts["context"] for ref in lifted}


def test_session_document_lifts_every_turn_of_the_session_whose_words_match(table, embedder):
    # "puppy", "sofa" and "vet" are each in a different turn of chat-1: as one document the
    # session holds all three, so each of its turns is lifted alike, and chat-2 not at all.
    query = "puppy sofa vet"
    index = _session_index(table)
    assert index.rows.column("session_id").to_pylist() == [f"chat-{r[0][1]}" for r in TURNS]
    gain = _gains(table, embedder, index, query)
    assert [gain[r] for r in ("s1a", "s1b", "s1c")] == pytest.approx([0.4] * 3)  # the best session: 1.0
    assert [gain.get(r, 0.0) for r in ("s2a", "s2b", "s2c")] == pytest.approx([0.0] * 3)
    # Without a hot index a session's turns are not all at hand: the lever scores 0 there.
    vector = embedder.encode([query])[0]
    plain = recall(table, "ada", query, vector, k=6, config=BASE, now=T0 + timedelta(days=10))
    lever = replace(BASE, session_doc_weight=0.4)
    from_lance = recall(table, "ada", query, vector, k=6, config=lever, now=T0 + timedelta(days=10))
    assert {m.source_episode_ids[0]: m.parts["context"] for m in from_lance} == pytest.approx(
        {m.source_episode_ids[0]: m.parts["context"] for m in plain}
    )


def test_a_memory_the_request_may_not_see_lends_its_session_no_words(table, embedder):
    # Only s1b says "sofa" and "cushions": hidden (forgotten, say), chat-1 holds neither.
    index = _session_index(table)
    gain = _gains(table, embedder, index, "sofa cushions")
    assert gain["s1a"] == pytest.approx(0.4)
    hidden = str(index.refs[1])  # s1b, second in time
    assert index.rows.column("source_episode_ids")[1].as_py() == ["s1b"]
    gain = _gains(table, embedder, index, "sofa cushions", exclude=[hidden])
    assert "s1b" not in gain and gain and all(g == pytest.approx(0.0) for g in gain.values())


def test_session_document_is_the_bm25_of_the_sessions_texts_together():
    texts = [
        "We adopted a puppy",  # chat-1
        "the budget review moved",  # chat-2
        "puppy chewed the sofa",  # chat-1
        "budget for a new laptop",  # no session id, one minute after the last: with the next
        "the laptop arrived",  # no session id
        "a puppy photo",  # no session id, two hours later: a session of its own
        "puppy food",  # no session id and no time: alone
    ]
    ids = ["chat-1", "chat-2", "chat-1", None, None, None, None]
    ts = np.array(
        ["2026-10-01T09:00", "2026-10-01T09:01", "2026-10-01T09:02", "2026-10-01T09:03", "2026-10-01T09:04",
         "2026-10-01T11:04", "NaT"],
        dtype="datetime64[us]",
    )  # fmt: skip
    arrays = fulltext.build(texts)
    grouped = sessions.group(pa.array(ids, pa.string()), ts, 3600, arrays.lengths)
    assert grouped.of.tolist() == [0, 1, 0, 2, 2, 3, 4]
    documents = [" ".join(t for t, s in zip(texts, grouped.of, strict=True) if s == n) for n in range(5)]
    query = "puppy sofa laptop"
    # The full-text index's BM25 over the sessions' texts put together, one document each.
    hits, bm25 = fulltext.search(fulltext.build(documents), query, np.ones(5, bool), 5)
    expected = np.zeros(5)
    expected[hits] = bm25
    assert sessions.text_scores(arrays, grouped, query) == pytest.approx(expected, rel=1e-5)
    # With the sessions' own postings the scores are the very same numbers; a request that may
    # not see a memory still counts the memories it may see.
    worded = sessions.with_words(grouped, arrays)
    assert worded.word_sessions is not None
    for keep in (None, np.ones(7, bool)):
        assert np.array_equal(
            sessions.text_scores(arrays, worded, query, keep), sessions.text_scores(arrays, grouped, query)
        )
    hidden = np.ones(7, bool)
    hidden[5] = False  # "a puppy photo", alone in its session
    without = sessions.text_scores(arrays, worded, query, hidden)
    assert np.array_equal(without, sessions.text_scores(arrays, grouped, query, hidden))
    assert without[3] == 0 and without[4] > 0
    scores = sessions.document_scores(arrays, grouped, np.array([0, 3, -1, 6]), query)
    best = expected.max()
    assert scores == pytest.approx(
        [expected[0] / best, expected[2] / best, 0.0, expected[4] / best], rel=1e-5
    )


def test_rescore_reorders_only_by_the_query_words(table, embedder):
    plain = ask(table, embedder, "sofa cushions", BASE)
    rescored = ask(table, embedder, "sofa cushions", replace(BASE, rescore_weight=0.5))
    assert next(iter(rescored)) == "s1b"
    assert rescored["s1b"].score > plain["s1b"].score
    assert rescored["s2b"].score == pytest.approx(plain["s2b"].score)


def test_time_named_lifts_the_memories_written_then(table, embedder):
    # Session 2 is on October 8: "on October 8" lifts its turns and leaves session 1's alone.
    config = replace(BASE, context_window=0, time_weight=0.5, time_slack_days=0)
    query = "what did we talk about on October 8"
    plain = ask(table, embedder, query, replace(config, time_weight=0.0))
    timed = ask(table, embedder, query, config)
    for ref in ("s2a", "s2b", "s2c"):
        assert timed[ref].parts["fused"] == pytest.approx(plain[ref].parts["fused"] + 0.5)
    for ref in ("s1a", "s1b", "s1c"):
        assert timed[ref].parts["fused"] == pytest.approx(plain[ref].parts["fused"])
    assert {m for m in list(timed)[:3]} == {"s2a", "s2b", "s2c"}
    # A week's slack reaches session 1 (October 1) too; a query naming no time is unchanged.
    wide = ask(table, embedder, query, replace(config, time_slack_days=7))
    assert wide["s1a"].parts["fused"] == pytest.approx(plain["s1a"].parts["fused"] + 0.5)
    untimed = ask(table, embedder, "what did we talk about", config)
    off = ask(table, embedder, "what did we talk about", replace(config, time_weight=0.0))
    assert {r: m.score for r, m in untimed.items()} == pytest.approx({r: m.score for r, m in off.items()})


def test_a_date_without_its_year_is_the_latest_the_memories_hold(table, embedder):
    # Asked in November 2027 of memories that end in October 2026, "on October 8" is October 8,
    # 2026: October 8, 2027 is after every memory, so it could lift none.
    config = replace(BASE, context_window=0, time_weight=0.5, time_slack_days=0)
    later = T0 + timedelta(days=400)
    query = "what did we talk about on October 8"
    plain = ask(table, embedder, query, replace(config, time_weight=0.0), now=later)
    timed = ask(table, embedder, query, config, now=later)
    for ref in ("s2a", "s2b", "s2c"):
        assert timed[ref].parts["fused"] == pytest.approx(plain[ref].parts["fused"] + 0.5)
    for ref in ("s1a", "s1b", "s1c"):
        assert timed[ref].parts["fused"] == pytest.approx(plain[ref].parts["fused"])
    # A year the query names, and "last October" (from now: October 2027), lift nothing here.
    for named in ("what did we talk about on October 8, 2027", "what did we talk about last October"):
        on = ask(table, embedder, named, config, now=later)
        off = ask(table, embedder, named, replace(config, time_weight=0.0), now=later)
        assert {r: m.parts["fused"] for r, m in on.items()} == pytest.approx(
            {r: m.parts["fused"] for r, m in off.items()}
        )


def test_each_source_knows_its_newest_memory(table):
    # What a date without its year is held by (`timeframe.named_window`): the newest memory the
    # request may see, the same from LanceDB and from the hot index, a fresh one included.
    from mindflow.recall.retrieval import EmptyRetrieval, FreshRetrieval, HotRetrieval, LanceRetrieval

    index = _session_index(table)
    where = primitives.memory_filter("ada")
    newest = T0 + timedelta(days=7, seconds=60)  # s2c
    hot_source = HotRetrieval(table, where, index, index.mask())
    assert LanceRetrieval(table, where).newest() == hot_source.newest() == newest
    s2c = [r["memory_ref"] for r in index.rows.to_pylist() if r["ts"] == newest]
    hidden = index.mask(exclude_refs=s2c)
    assert HotRetrieval(table, where, index, hidden).newest() == newest - timedelta(seconds=30)  # s2b
    assert LanceRetrieval(table, primitives.memory_filter("nobody")).newest() is None
    assert EmptyRetrieval().newest() is None
    published = primitives.filtered_rows(table, where, None)
    row = published.to_pylist()[0]
    for ts, expected in ((T0 + timedelta(days=30), T0 + timedelta(days=30)), (T0, newest)):
        fresh_rows = pa.Table.from_pylist(
            [{**row, "memory_ref": "fresh-1", "ts": ts}], schema=published.schema
        )
        assert FreshRetrieval(hot_source, fresh_rows, corpus=len(index)).newest() == expected
        assert FreshRetrieval(EmptyRetrieval(), fresh_rows, corpus=0).newest() == ts


def test_speaker_named_lifts_that_speakers_memories(table, embedder):
    config = replace(BASE, context_window=0, speaker_weight=0.5)
    query = "what did Tom say about the budget"
    plain = ask(table, embedder, query, replace(config, speaker_weight=0.0))
    lifted = ask(table, embedder, query, config)
    for ref, speaker in SPEAKER.items():
        gain = 0.5 if speaker == "Tom Berg" else 0.0
        assert lifted[ref].parts["fused"] == pytest.approx(plain[ref].parts["fused"] + gain)
    assert set(list(lifted)[:3]) == {"s1b", "s2a", "s2c"}
    # "berg" names him too; a query naming nobody is unchanged.
    assert ask(table, embedder, "did berg like the puppy", config)["s1b"].parts["fused"] == pytest.approx(
        ask(table, embedder, "did berg like the puppy", replace(config, speaker_weight=0.0))["s1b"].parts[
            "fused"
        ]
        + 0.5
    )
    untimed = ask(table, embedder, "the budget", config)
    off = ask(table, embedder, "the budget", replace(config, speaker_weight=0.0))
    assert {r: m.score for r, m in untimed.items()} == pytest.approx({r: m.score for r, m in off.items()})


def test_speakers_named_by_hand():
    actors = [["Lena"], ["Tom Berg"], None, [], ["the user"], ["Lena", "Tom Berg"]]
    assert speakers.named("What did Tom say?", actors).tolist() == [0, 1, 0, 0, 0, 1]
    assert speakers.named("what did the user ask", actors).tolist() == [
        0,
        0,
        0,
        0,
        1,
        0,
    ]  # "the": a stop word
    assert speakers.named("LÉNA", actors).tolist() == [1, 0, 0, 0, 0, 1]
    assert speakers.named("", actors).tolist() == [0] * 6


def test_expansion_terms_are_shared_words_not_the_querys():
    texts = primitives.term_counts(["Biscuit chewed the sofa", "Biscuit at the vet", "the budget review"])
    assert expansion_terms("vet visit", texts, 5) == ["biscuit"]
    assert expansion_terms("vet visit", texts[:1], 5) == []  # one text shares nothing


def test_session_score_by_hand():
    ts = np.array(["2026-10-01T09:00", "2026-10-01T09:01", "2026-10-08T09:00", "NaT"], dtype="datetime64[us]")
    fused = np.array([0.2, 0.4, 0.3, 0.9])
    assert rerank.session_score(fused, ts, 3600) == pytest.approx([0.6 / 0.9, 0.6 / 0.9, 0.3 / 0.9, 1.0])


def test_local_bm25_discounts_a_word_every_candidate_shares():
    texts = ["Lena went hiking", "Lena went to pottery class", "Lena cooked"]
    counts = primitives.term_counts(texts)
    scores = rerank.local_bm25(*primitives.frequencies(primitives.query_terms("Lena pottery"), counts))
    assert scores.argmax() == 1 and scores.max() == pytest.approx(1.0)
    assert max(scores[0], scores[2]) < 0.25  # "lena" alone: every text holds it


def test_counts_from_the_hot_index_are_those_of_the_texts(table, embedder):
    # PRF and the re-score count a hot index's candidates from its postings, and LanceDB's from
    # their texts: the same counts. A fresh memory is counted from the tail's own counts.
    from mindflow.recall.retrieval import FreshRetrieval, HotRetrieval, LanceRetrieval

    index = _session_index(table)
    where = primitives.memory_filter("ada")
    hot_source = HotRetrieval(table, where, index, index.mask())
    vector = embedder.encode(["puppy"])[0]
    # What recall carries with each candidate for the levers (`lever_columns`): from the index,
    # its position there.
    found = hot_source.vector(vector, 6, ["memory_ref", *hot_source.lever_columns])
    assert len(found) == 6
    words = primitives.query_terms("puppy chewing cushions budget")
    tf, lengths = hot_source.term_frequencies(words, found)
    # LanceDB's way: the candidates' texts analysed again.
    expected_tf, expected_lengths = LanceRetrieval(table, where).term_frequencies(words, found)
    assert tf.tolist() == expected_tf.tolist() and lengths.tolist() == expected_lengths.tolist()
    assert tf.sum() > 0
    # The words of each candidate from the index's words by memory: those of its text, in the
    # text's order, with their counts (what PRF's expansion terms are chosen from).
    counted = hot_source.term_counts(found)
    assert counted == primitives.term_counts(found.texts)
    assert [list(c) for c in counted] == [list(c) for c in primitives.term_counts(found.texts)]

    row = primitives.filtered_rows(table, where, 1).to_pylist()[0]
    fresh_rows = pa.Table.from_pylist(
        [{**row, "memory_ref": "fresh-1", "text": "The puppies chewed a cushion"}],
        schema=primitives.filtered_rows(table, where, 1).schema,
    )
    both = FreshRetrieval(HotRetrieval(table, where, index, index.mask()), fresh_rows, corpus=len(index))
    pool = both.vector(vector, 7, ["memory_ref", *both.lever_columns])
    tf, lengths = both.term_frequencies(words, pool)
    at = pool.refs.index("fresh-1")
    assert tf[:, at].tolist() == [1.0, 1.0, 1.0, 0.0] and lengths[at] == 3  # stemmed, "the" and "a" out
    assert both.term_counts(pool)[at] == {"puppi": 1, "chew": 1, "cushion": 1}
    others = pool.take(np.array([i for i in range(len(pool)) if i != at]))
    assert np.delete(tf, at, axis=1).tolist() == both.published.term_frequencies(words, others)[0].tolist()


def test_a_fresh_memory_ranks_beside_a_hot_index_with_every_lever_on(table, embedder):
    # With the levers on, the pool carries each candidate's index position; a fresh memory, found
    # by vector, by full text and in the context windows, carries -1 there and is counted from the
    # tail, and comes back marked fresh.
    from mindflow.recall.pool import POSITION
    from mindflow.recall.retrieval import FreshRetrieval, HotRetrieval

    index = _session_index(table)
    where = primitives.memory_filter("ada")
    published = primitives.filtered_rows(table, where, None)
    row = published.to_pylist()[0]
    text = "Biscuit the puppy chewed a cushion again"
    fresh_rows = pa.Table.from_pylist(
        [
            {
                **row,
                "memory_ref": "fresh-1",
                "text": text,
                "ts": T0 + timedelta(minutes=3),
                "vector": embedder.encode([text])[0].tolist(),
            }
        ],
        schema=published.schema,
    )
    config = replace(
        BASE, prf_terms=3, prf_docs=2, prf_weight=0.5, session_doc_weight=0.2, rescore_weight=0.1
    )
    query = "puppy cushion"
    found = recall(
        table, "ada", query, embedder.encode([query])[0], k=6, config=config, now=T0 + timedelta(days=10),
        index=index, fresh=fresh_rows, corpus=len(index),
    )  # fmt: skip
    fresh = [m for m in found if m.memory_ref == "fresh-1"]
    assert len(fresh) == 1 and fresh[0].fresh
    assert all(not m.fresh for m in found if m.memory_ref != "fresh-1")

    # The context window around the first session, read with the pool's columns: the index's
    # turns at their positions, the fresh one at -1.
    both = FreshRetrieval(HotRetrieval(table, where, index, index.mask()), fresh_rows, corpus=len(index))
    span = [(T0 - timedelta(minutes=1), T0 + timedelta(minutes=10))]
    around = both.around(span, 50, [], ["memory_ref", "ts", POSITION])
    at = dict(zip(around.refs, around.positions.tolist(), strict=True))
    assert at.pop("fresh-1") == -1
    assert len(at) == 3 and all(index.refs[p] == ref for ref, p in at.items())


def test_the_reorder_puts_first_a_memory_whose_neighbours_hold_the_query_words(table, embedder):
    query = "vet on Monday"  # s1c says it; s1b, just before it, says neither word, nor does s1a
    off = ask(table, embedder, query, replace(BASE, reorder_weight=0.0))
    on = ask(table, embedder, query, replace(BASE, reorder_weight=0.5))
    assert list(off)[:3] == ["s1c", "s1a", "s1b"]
    # s1b's words with its neighbours' (s1a and s1c) hold the query's; s1a's with s1b's none.
    assert list(on)[:3] == ["s1c", "s1b", "s1a"]
    assert on["s1b"].parts["reorder"] > 0 and on["s1a"].parts["reorder"] == 0
    assert all(m.parts["reorder"] == 0 for ref, m in on.items() if ref.startswith("s2"))
    scores = [m.score for m in on.values()]
    assert scores == sorted(scores, reverse=True)
    assert [m.score - m.parts["reorder"] for m in on.values()] == pytest.approx(
        [m.parts["fused"] * m.parts["decay"] * m.parts["recency"] for m in on.values()]
    )

    def first(k, **reorder):
        config = replace(BASE, **{"reorder_weight": 0.5, **reorder})
        found = recall(
            table, "ada", query, embedder.encode([query])[0], k=k, config=config, now=T0 + timedelta(days=10)
        )
        return [m.source_episode_ids[0] for m in found]

    # It re-orders the first `reorder_top` of MMR's order: a memory among them can move into
    # the k asked for, one after them cannot.
    assert first(2) == ["s1c", "s1b"]
    assert first(2, reorder_top=2) == ["s1c", "s1a"]
    assert first(2, reorder_weight=0.0) == ["s1c", "s1a"]
    # Without neighbours (a window of 0) s1b holds none of the words either.
    assert first(3, reorder_window=0) == ["s1c", "s1a", "s1b"]
