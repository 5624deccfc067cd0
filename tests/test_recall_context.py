"""The context lift: an answer is found through the question it answers, one turn earlier."""

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

T0 = datetime(2026, 10, 1, 18, 0)
# (id, speaker, text, seconds after T0)
TURNS = [
    ("q1", "Lena", "Did you finish the research you were doing on adoption?", 0),
    ("q2", "Cleo", "Mostly agencies near Portland that work with single parents.", 30),
    ("q3", "Lena", "That sounds like a good start.", 60),
    ("x1", "Cleo", "The bakery on Fifth street sells sourdough on Saturdays.", 86400 * 3),
    ("x2", "Lena", "My sister adopted a grey cat from the shelter last spring.", 86400 * 9),
    ("x3", "Cleo", "Portland traffic was terrible on the way to the airport.", 86400 * 14),
    ("x4", "Lena", "I started a course on single-origin coffee roasting.", 86400 * 20),
    ("x5", "Cleo", "My research on old film cameras turned up a Leica from 1954.", 86400 * 22),
    ("x6", "Lena", "The adoption of the new budget was delayed by the council.", 86400 * 24),
    ("x7", "Cleo", "We spent the afternoon at the agency party downtown.", 86400 * 26),
]


@pytest.fixture
def table(settings, con, embedder):
    path = settings.inbox / "cleo" / "chat.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text(
        "".join(
            json.dumps(
                {
                    "id": i,
                    "ts": (T0 + timedelta(seconds=s)).isoformat() + "Z",
                    "speaker": who,
                    "role": "user",
                    "text": f"{who}: {text}",
                }
            )
            + "\n"
            for i, who, text, s in TURNS
        )
    )
    ingest(con, settings.inbox, date(2026, 9, 1), date(2026, 12, 31))
    run_patrol(con, "cleo", embedder, now=T0 + timedelta(days=30))
    publish(con, lance.connect(settings.lance_path))
    return open_memories(settings.lance_path)


def both(table, embedder, query: str, config: RecallConfig):
    """Recall from LanceDB, checked against the same recall from the being's hot index."""
    vector = embedder.encode([query])[0]
    found = recall(table, "cleo", query, vector, k=10, config=config, now=T0 + timedelta(days=30))
    rows = primitives.filtered_rows(
        table, primitives.memory_filter("cleo", statuses=primitives.RECALLABLE), None
    )
    index = BeingIndex("cleo", table.version, rows)
    # The same answer from the index, with LanceDB's full text (its own scores by the being's statistics).
    same = replace(config, hot_fulltext="lance")
    hot = recall(table, "cleo", query, vector, k=10, config=same, now=T0 + timedelta(days=30), index=index)
    assert [(m.memory_ref, m.parts["context"]) for m in hot] == [
        (m.memory_ref, pytest.approx(m.parts["context"], rel=1e-5)) for m in found
    ]
    return found


def ranked(table, embedder, query: str, config: RecallConfig) -> list[str]:
    return [m.source_episode_ids[0] for m in both(table, embedder, query, config)]


def test_the_answer_rises_with_the_question_it_answers(table, embedder):
    query = "What did the adoption research turn up?"
    default = RecallConfig.for_model("all-MiniLM-L6-v2", mmr_lambda=1.0)
    with_context = ranked(table, embedder, query, default)
    without = ranked(table, embedder, query, replace(default, context_window=0))
    assert with_context.index("q2") < without.index("q2")
    assert with_context.index("q2") <= 1


def test_context_stops_at_a_pause(table, embedder):
    query = "What did Cleo research about adoption?"
    found = both(table, embedder, query, RecallConfig(min_similarity=0.0))
    lifted = {m.source_episode_ids[0]: m.parts["context"] for m in found}
    assert lifted["q2"] > 0 and lifted["q3"] > 0
    # days apart from the conversation: no neighbour to borrow from
    assert all(v == 0 for x, v in lifted.items() if x.startswith("x"))


def test_neighbourhood_by_hand():
    ts = np.array(
        ["2026-10-01T18:00:00", "2026-10-01T18:00:30", "2026-10-01T18:01:00", "2026-10-01T20:00:00"]
    )
    best = rerank.neighbourhood(np.array([1.0, 0.0, 0.2, 5.0]), ts.astype("datetime64[us]"), 2, 600)
    assert best == pytest.approx([0.2, 1.0, 1.0, 0.0])  # the last one is two hours later


def test_scaled_fusion_keeps_each_scale():
    fused = rerank.scaled(np.array([0.6, 0.3, -0.1]), np.array([0.0, 8.0, 4.0]), [0.5, 0.5])
    assert fused == pytest.approx([0.3, 0.15 + 0.5, 0.0 + 0.25])


def test_time_order_puts_equal_and_unknown_times_in_ref_order():
    from mindflow.recall import search

    ts = np.array(
        ["2026-01-01T00:00:02", "2026-01-01T00:00:01", "NaT", "2026-01-01T00:00:01", "NaT"],
        dtype="datetime64[us]",
    )
    refs = ["a", "d", "c", "b", "a2"]
    assert search._time_order(ts, refs).tolist() == [3, 1, 0, 4, 2]
    assert search._time_order(ts, refs).tolist() == np.lexsort((np.array(refs), ts)).tolist()
    assert search._time_order(ts[:3], refs[:3]).tolist() == [1, 0, 2]  # no tie: by time alone
