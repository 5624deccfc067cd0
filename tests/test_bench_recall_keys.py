"""`bench/bench_recall.py` with an extraction model: the pipeline runs extraction too, and the
benchmark measures facts and keyphrases as full-text keys against the same memories published
with their text alone, so a user with a model can read their quality in one run.

Checked here with the loopback model: each question is asked in the words of one fact or one
keyphrase the model gave a memory and of nothing any turn says, so only the keys can find it.
"""

import sys
from dataclasses import replace
from pathlib import Path

import pytest
from llm_server import fake_model
from locomo_files import write_conversation

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import bench_recall  # noqa: E402
import locomo  # noqa: E402

TURNS = [
    ("Ines", "I started pottery classes on Monday."),
    ("Omar", "Nice, what did you make first?"),
    ("Ines", "We finally signed the papers at the notary this morning."),
    ("Omar", "Congratulations, that must be a relief."),
    ("Ines", "My knees hurt after the long run along the river."),
    ("Omar", "Take it slow for a few days."),
    ("Ines", "The bowl for my sister cracked in the kiln."),
    ("Omar", "Try again next week, it happens."),
    # A scene of its own that shares a word with each of the two questions below and answers neither.
    ("Omar", "I bought new running shoes yesterday."),
    ("Ines", "The preparation for my exam is going fine."),
]
# Each in words the turn that answers it does not use: the first answered by a fact, the second
# by a keyphrase; by their words alone, both find the decoy scene above first.
FACT_QUESTION = "Where is the apartment Ines bought?"
PHRASE_QUESTION = "How is the marathon preparation going?"


def _conversation(folder: Path, stem: str) -> None:
    turns = [
        {"speaker": speaker, "dia_id": f"D1:{i}", "text": text}
        for i, (speaker, text) in enumerate(TURNS, start=1)
    ]
    qa = [
        {"question": FACT_QUESTION, "evidence": ["D1:3"], "category": 4},
        {"question": PHRASE_QUESTION, "evidence": ["D1:5"], "category": 4},
        {"question": "What cracked in the kiln?", "evidence": ["D1:7"], "category": 4},
    ]
    write_conversation(folder, stem, [("1:56 pm on 8 May, 2023", turns)], qa)


def _keyed(received):
    """The loopback model's extraction, with a fact on the notary's scene and a keyphrase on the
    run's, each in the words of one question."""
    answer = fake_model(received)
    if isinstance(answer, dict) and "merges" in answer:
        return {"merges": [], "make_dead": []}  # every scene stays a memory of its own
    if not isinstance(answer, dict) or "scenes" not in answer:
        return answer
    for scene, fact in zip(answer["scenes"], answer["facts"], strict=True):
        if "D1:3" in scene["episode_ids"]:
            fact |= {"entity": "Ines", "key": "bought", "value": "an apartment in Lisbon"}
        if "D1:5" in scene["episode_ids"]:
            scene["keyphrases"] = ["marathon preparation"]
    return answer


@pytest.fixture
def measured(home, llm_server, tmp_path):
    from mindflow.config import load_settings
    from mindflow.embeddings import Embedder
    from mindflow.recall import RecallConfig, open_memories

    llm_server.configure("openai:gpt-4o")
    llm_server.responder = _keyed
    settings = load_settings()
    folder = tmp_path / "conversations"
    folder.mkdir()
    for stem in ("conv-1", "conv-2"):
        _conversation(folder, stem)
    locomo.write_inbox(settings.inbox, folder)

    model = bench_recall.extraction_model(settings)
    left = bench_recall.run_pipeline(settings, model)
    convs = bench_recall.conversations(folder)
    bench_recall.embed_questions(Embedder.for_settings(settings), convs)
    table = open_memories(settings.lance_path)
    # Full text alone decides the ranking (what keys change is the full-text document): no vectors,
    # no similarity floor over them, no lift or re-order by neighbours, none by a named speaker.
    config = replace(
        RecallConfig.for_model(settings.embedding_model),
        vector_weight=0.0, text_weight=1.0, min_similarity=-1.0, context_window=0, speaker_weight=0.0,
        reorder_weight=0.0,
    )  # fmt: skip
    with_keys = bench_recall.ask_in_process(
        table, convs, config, indexes=bench_recall.hot_indexes(table, convs)
    )
    report = bench_recall.keys_report(settings, table, convs, config, with_keys)
    return settings, model, left, convs, report


def test_with_a_model_the_keys_are_measured_against_the_same_memories_text_alone(measured, capsys):
    from mindflow.recall import open_memories

    settings, model, left, convs, report = measured

    assert model == "openai:gpt-4o"
    assert left == 0  # every episode extracted by the model
    # In each being the notary's scene has fact keys (others may, from the loopback model's own
    # facts) and the run's scene, alone, keyphrase keys.
    assert report.fact_keyed >= 2 and report.phrase_keyed == 2
    assert 2 <= report.keyed <= report.memories
    # The second publish holds the same memories, each with its text alone as its document.
    keyed = open_memories(settings.lance_path).to_arrow()
    alone = open_memories(settings.duckdb_path.parent / "text-alone" / "lance").to_arrow()
    assert sorted(alone.column("memory_ref").to_pylist()) == sorted(keyed.column("memory_ref").to_pylist())
    assert alone.column("search_text").to_pylist() == alone.column("text").to_pylist()
    # With the keys the first two questions of each conversation find their answer first; by the
    # text alone, the decoy. The third, in its answer's own words, is found first either way.
    for conv in convs:
        with_keys, plain = report.with_keys.ranks_of(conv.being), report.text_alone.ranks_of(conv.being)
        assert with_keys[:2] == [0, 0], with_keys
        assert all(rank != 0 for rank in plain[:2]), plain
        assert with_keys[2] == plain[2] == 0
    assert report.with_keys.rate(1) == 1.0 and report.text_alone.rate(1) == pytest.approx(1 / 3)
    # Leave-one-out chooses the keys for each held-out conversation, on the other one.
    assert set(report.choice.chosen.values()) == {"keys"}
    assert report.choice.loo[1] == 1.0

    bench_recall.print_keys(model, left, report)
    out = capsys.readouterr().out
    assert "facts and keyphrases as full-text keys (extraction model openai:gpt-4o)" in out
    assert f"{report.keyed} of {report.memories} memories hold keys" in out
    assert "| text and keys (the table above)" in out and "|  1.000 |" in out
    assert "| the same memories, text alone" in out and "|  0.333 |" in out
    assert "chosen: locomo-conv-1: keys; locomo-conv-2: keys" in out


def test_without_a_model_the_keys_are_said_not_measured(settings, capsys):
    assert bench_recall.extraction_model(settings) is None
    bench_recall.print_keys(None, 0, None)
    assert "not measured, no extraction model is configured" in capsys.readouterr().out
