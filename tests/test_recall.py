"""The ranking package: hybrid retrieval, floors, weighting, MMR, filters and isolation."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import date, datetime, timedelta

import numpy as np
import pytest

from mindflow import lance
from mindflow.errors import MindflowError
from mindflow.inbox import ingest
from mindflow.memories import publish
from mindflow.patrol import run_patrol
from mindflow.recall import (
    BeingIndex,
    RecallConfig,
    cluster_memories,
    open_memories,
    primitives,
    recall,
    rerank,
    sanitize_fts_query,
    search_memory,
)

T0 = datetime(2026, 10, 1, 9, 0)
NO_FLOOR = RecallConfig(min_similarity=0.0)  # for tests of filters, not of the floor
ADA = [
    ("a1", "Lena asked to move the ledgerline deploy window to Thursday afternoons.", 0),
    ("a2", "The flaky Postgres migration 0042 locks the payments table for a minute.", 1),
    ("a3", "We decided to use DuckDB for the reconciliation reports.", 2),
    ("a4", "Lena's daughter has a school play on Friday evening.", 40),
    ("a5", "Code review of the CSV importer found a timezone bug in parse_date.", 41),
    ("a6", "The CSV importer now rejects rows without an IBAN.", 42),
    ("a7", "Order id -100123:45 failed reconciliation twice.", 43),
]
BRAM = [
    ("a1", "Tomas ran 14 km along the river this morning.", 0),
    ("b2", "Miso the cat is allergic to chicken.", 1),
    ("b3", "The deploy of Tomas's new bike rack went fine.", 2),
]


def _write(inbox, being, rows):
    path = inbox / being / "episodes.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps(
            {
                "id": i,
                "ts": (T0 + timedelta(days=d)).isoformat() + "Z",
                "speaker": "Lena",
                "role": "user",
                "text": t,
            }
        )
        for i, t, d in rows
    ]
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture
def table(settings, con, embedder):
    _write(settings.inbox, "ada", ADA)
    _write(settings.inbox, "bram", BRAM)
    ingest(con, settings.inbox, date(2026, 9, 1), date(2026, 12, 31))
    for being in ("ada", "bram"):
        run_patrol(con, being, embedder, now=T0 + timedelta(days=50))
    publish(con, lance.connect(settings.lance_path))
    return open_memories(settings.lance_path)


def ask(table, embedder, being, query, **kwargs):
    """Recall from LanceDB, checked against the same recall from the being's hot index."""
    kwargs.setdefault("now", T0 + timedelta(days=50))
    vector = embedder.encode([query])[0]
    found = recall(table, being, query, vector, **kwargs)
    if table is not None:
        index = hot_index(table, being)
        # The index's own full text scores by the being's statistics (mindflow.recall.fulltext):
        # the same answer is asked of the index with LanceDB's full text.
        same = {**kwargs, "config": replace(kwargs.get("config") or RecallConfig(), hot_fulltext="lance")}
        hot = recall(table, being, query, lambda: vector, index=index, **same)
        own = recall(table, being, query, lambda: vector, index=index, **kwargs)
        assert [m.memory_ref for m in own[:1]] == [m.memory_ref for m in found[:1]]
        assert [m.memory_ref for m in hot] == [m.memory_ref for m in found]
        assert [m.score for m in hot] == pytest.approx([m.score for m in found], rel=1e-5)
        assert [m.text for m in hot] == [m.text for m in found]
    return found


def hot_index(table, being):
    rows = primitives.filtered_rows(
        table, primitives.memory_filter(being, statuses=primitives.RECALLABLE), None
    )
    return BeingIndex(being, table.version, rows)


def test_paraphrased_question_finds_its_memory_first(table, embedder):
    top = ask(table, embedder, "ada", "which database was chosen for reporting?", k=3)
    assert top[0].text.startswith("We decided to use DuckDB")
    assert top[0].source_episode_ids == ["a3"]
    parts = top[0].parts
    assert parts["cosine"] > 0.3 and parts["vector_rank"] == 0
    # The final score, and what the re-order of the first ten added to it.
    assert top[0].score == pytest.approx(
        parts["fused"] * parts["decay"] * parts["recency"] + parts["reorder"]
    )


def test_exact_identifier_is_found_by_full_text(table, embedder):
    top = ask(table, embedder, "ada", "-100123:45", k=3)
    assert top[0].source_episode_ids == ["a7"]
    assert top[0].parts["text_rank"] == 0


def test_beings_never_see_each_other(table, embedder):
    for being, own in (("ada", {e[0] for e in ADA}), ("bram", {e[0] for e in BRAM})):
        found = ask(table, embedder, being, "deploy", k=10, config=NO_FLOOR)
        assert found and all(m.being_id == being for m in found)
        assert {m.source_episode_ids[0] for m in found} <= own
    for hostile in ("ada' OR '1'='1", "ada OR being_id = 'bram'", "../bram", "ADA", "a" * 200, ""):
        with pytest.raises(MindflowError):
            ask(table, embedder, hostile, "deploy")


@pytest.mark.parametrize(
    "query", ['"unclosed', "AND OR NOT", "*", "\\", "(((", "a:b:c", "'; DROP TABLE memories; --", "!" * 5000]
)
def test_hostile_queries_never_raise(table, embedder, query):
    results = ask(table, embedder, "ada", query, k=5)
    assert all(m.being_id == "ada" for m in results)


def test_sanitized_query_keeps_words_only():
    assert sanitize_fts_query('Lena\'s "deploy" AND -100123:45 OR NOT (x)') == "lena's deploy 100123 45 x"
    assert sanitize_fts_query("!!! *** ") == ""


def test_horizon_and_exclusions(table, embedder):
    everything = ask(table, embedder, "ada", "CSV importer", k=10, config=NO_FLOOR)
    assert {"a5", "a6"} <= {m.source_episode_ids[0] for m in everything}
    recent = ask(table, embedder, "ada", "CSV importer", k=10, since=T0 + timedelta(days=30), config=NO_FLOOR)
    assert recent and all(m.ts >= T0 + timedelta(days=30) for m in recent)
    old = ask(table, embedder, "ada", "CSV importer", k=10, until=T0 + timedelta(days=5), config=NO_FLOOR)
    assert old and all(m.ts <= T0 + timedelta(days=5) for m in old)
    a5 = next(m.memory_ref for m in everything if m.source_episode_ids == ["a5"])
    without = ask(
        table, embedder, "ada", "CSV importer", k=10, exclude_refs=[a5, "x' OR '1'='1"], config=NO_FLOOR
    )
    assert a5 not in {m.memory_ref for m in without} and without


def test_similarity_floor_drops_noise(table, embedder):
    query = "quantum chromodynamics lattice gauge theory"
    assert ask(table, embedder, "ada", query, k=5, config=RecallConfig(min_similarity=0.0))
    assert ask(table, embedder, "ada", query, k=5, config=RecallConfig(min_similarity=0.5)) == []
    floored = RecallConfig.for_model("all-MiniLM-L6-v2")
    assert floored.floor == 0.2
    assert RecallConfig.for_model("openai:text-embedding-3-small").floor == 0.35


def test_fusion_strategies_agree_on_the_obvious_answer(table, embedder):
    for config in (RecallConfig(fusion="rrf"), RecallConfig(fusion="weighted")):
        top = ask(table, embedder, "ada", "Postgres migration locks the payments table", k=1, config=config)
        assert top[0].source_episode_ids == ["a2"]


def test_rrf_and_weighted_fusion_by_hand():
    ranks_v, ranks_t = np.array([0, 1, -1]), np.array([1, -1, 0])
    fused = rerank.rrf([ranks_v, ranks_t], [0.7, 0.3], 60)
    assert fused == pytest.approx([0.7 / 61 + 0.3 / 62, 0.7 / 62, 0.3 / 61])
    w = rerank.weighted([np.array([0.9, 0.5, 0.1]), np.array([0.0, 2.0, 4.0])], [0.7, 0.3])
    assert w == pytest.approx([0.7, 0.7 * 0.5 + 0.3 * 0.5, 0.3])


def test_recency_and_decay_factors():
    config = RecallConfig(half_life_days=30, recency_floor=0.5, decay_exponent=0.5)
    now = datetime(2026, 11, 1)
    factors = rerank.recency_factor(
        [now, now - timedelta(days=30), now - timedelta(days=3000), None], now, config
    )
    assert factors == pytest.approx([1.0, 0.75, 0.5, 1.0], abs=1e-9)
    assert rerank.decay_factor(np.array([0.25, 1.0, 2.25]), config) == pytest.approx([0.5, 1.0, 1.0])


def test_mmr_prefers_diverse_results():
    vectors = np.array([[1.0, 0.0], [0.999, 0.0447], [0.0, 1.0]], dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    relevance = np.array([1.0, 0.95, 0.7])
    assert rerank.mmr(relevance, vectors, 2, 1.0) == [0, 1]  # pure relevance
    assert rerank.mmr(relevance, vectors, 2, 0.7) == [0, 2]  # the near-duplicate gives way


def test_search_memory_or_and_and_dates(table, embedder):
    either = search_memory(table, "ada", "IBAN timezone", mode="or", k=10)
    assert {m.source_episode_ids[0] for m in either} == {"a5", "a6"}
    both = search_memory(table, "ada", "CSV importer IBAN", mode="and", k=10)
    assert [m.source_episode_ids[0] for m in both] == ["a6"]
    by_day = search_memory(table, "ada", "2026-10-03", k=10)  # the `when` history
    assert [m.source_episode_ids[0] for m in by_day] == ["a3"]
    assert search_memory(table, "bram", "IBAN", k=10) == []
    with pytest.raises(ValueError):
        search_memory(table, "ada", "x", mode="xor")


def test_cluster_memories_newest_first(table, embedder):
    first = ask(table, embedder, "ada", "CSV importer", k=1)[0]
    members = cluster_memories(table, "ada", first.cluster_id, k=100)
    assert first.memory_ref in {m.memory_ref for m in members}
    assert all(m.cluster_id == first.cluster_id and m.being_id == "ada" for m in members)
    assert [m.ts for m in members] == sorted((m.ts for m in members), reverse=True)
    assert cluster_memories(table, "bram", first.cluster_id) == []


def test_no_table_yet_means_no_memories(settings, embedder):
    assert open_memories(settings.lance_path) is None
    assert recall(None, "ada", "x", embedder.encode(["x"])[0]) == []


def test_dead_memories_only_through_search_and_their_cluster(settings, con, table, embedder):
    """Dead memories stay out of recall; search_memory and recall_memory reach them (+2)."""
    from mindflow.events import recall_event

    (ref,) = con.execute(
        "SELECT node_id FROM nodes WHERE being_id = 'ada' AND source_episode_ids[1] = 'a6'"
    ).fetchone()
    con.execute("UPDATE nodes SET status = 'dead' WHERE node_id = ?", [ref])
    publish(con, lance.connect(settings.lance_path))
    table = open_memories(settings.lance_path)

    recalled = ask(table, embedder, "ada", "IBAN rows rejected by the CSV importer", k=7, config=NO_FLOOR)
    assert ref not in {m.memory_ref for m in recalled}
    (found,) = search_memory(table, "ada", "IBAN", k=10)
    assert (found.memory_ref, found.status) == (ref, "dead")
    assert ref in {m.memory_ref for m in cluster_memories(table, "ada", found.cluster_id, k=100)}
    assert recall_event("ada", "search_memory", [ref], [found.status]).increments == (2,)
