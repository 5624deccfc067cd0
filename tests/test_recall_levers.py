"""The ranking levers of RecallConfig (pseudo-relevance feedback, session score, re-score):
off by default, and each one changes the ranking the way it says, alike from LanceDB and the hot index."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import date, datetime, timedelta

import numpy as np
import pytest

from mindflow import lance
from mindflow.inbox import ingest
from mindflow.memories import publish
from mindflow.patrol import run_patrol
from mindflow.recall import BeingIndex, RecallConfig, open_memories, primitives, recall, rerank
from mindflow.recall.feedback import expansion_terms

T0 = datetime(2026, 10, 1, 9, 0)
BASE = RecallConfig(min_similarity=0.0)
# Two sessions a week apart, turns 30 s apart within each.
TURNS = [
    ("s1a", "We adopted a puppy from the shelter, his name is Biscuit.", 0, 0),
    ("s1b", "Biscuit chewed the sofa cushions on his first night.", 0, 1),
    ("s1c", "Biscuit needs his vaccination at the vet on Monday.", 0, 2),
    ("s2a", "The quarterly budget review moved to Wednesday.", 7, 0),
    ("s2b", "Finance wants the travel costs split by team.", 7, 1),
    ("s2c", "A new laptop for the intern is in the budget.", 7, 2),
]


@pytest.fixture
def table(settings, con, embedder):
    path = settings.inbox / "ada" / "episodes.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [
        {
            "id": i,
            "ts": (T0 + timedelta(days=d, seconds=30 * n)).isoformat() + "Z",
            "speaker": "Lena",
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


def ask(table, embedder, query, config):
    """Recall from LanceDB, checked against the same recall from the being's hot index."""
    vector = embedder.encode([query])[0]
    now = T0 + timedelta(days=10)
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


def test_levers_are_off_by_default():
    config = RecallConfig()
    assert (config.prf_terms, config.session_weight, config.rescore_weight) == (0, 0.0, 0.0)


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


def test_rescore_reorders_only_by_the_query_words(table, embedder):
    plain = ask(table, embedder, "sofa cushions", BASE)
    rescored = ask(table, embedder, "sofa cushions", replace(BASE, rescore_weight=0.5))
    assert next(iter(rescored)) == "s1b"
    assert rescored["s1b"].score > plain["s1b"].score
    assert rescored["s2b"].score == pytest.approx(plain["s2b"].score)


def test_expansion_terms_are_shared_words_not_the_querys():
    texts = ["Biscuit chewed the sofa", "Biscuit at the vet", "the budget review"]
    assert expansion_terms("vet visit", texts, 5) == ["biscuit"]
    assert expansion_terms("vet visit", texts[:1], 5) == []  # one text shares nothing


def test_session_score_by_hand():
    ts = np.array(["2026-10-01T09:00", "2026-10-01T09:01", "2026-10-08T09:00", "NaT"], dtype="datetime64[us]")
    fused = np.array([0.2, 0.4, 0.3, 0.9])
    assert rerank.session_score(fused, ts, 3600) == pytest.approx([0.6 / 0.9, 0.6 / 0.9, 0.3 / 0.9, 1.0])


def test_local_bm25_discounts_a_word_every_candidate_shares():
    texts = ["Lena went hiking", "Lena went to pottery class", "Lena cooked"]
    scores = rerank.local_bm25("Lena pottery", texts)
    assert scores.argmax() == 1 and scores.max() == pytest.approx(1.0)
    assert max(scores[0], scores[2]) < 0.25  # "lena" alone: every text holds it
