"""Facts as full-text keys of their memories (mindflow/recall/keys.py): a question in the words of a
fact the extraction model drew from a memory's episodes finds that memory by full text, through
LanceDB's index and the server's hot index alike; MINDFLOW_RECALL_FACT_KEYS=false publishes the
text alone."""

from __future__ import annotations

import json

import pytest
from llm_server import fake_model

from mindflow import lance, store
from mindflow.config import load_settings
from mindflow.memories import TABLE
from mindflow.recall import HotIndexes, RecallConfig, open_memories, recall
from mindflow.runner import run_job

EPISODES = [
    "We finally signed the papers at the notary this morning.",
    "The keys come on Friday, the movers on Saturday.",
    "Lunch with the team, then the sprint review ran long.",
    "Booked the dentist for next Tuesday.",
]
QUESTION = "Where is the apartment Lena bought?"


def _with_a_fact(received):
    """The loopback model's extraction, with the first scene's fact in words its text never uses."""
    answer = fake_model(received)
    if isinstance(answer, dict) and answer.get("facts"):
        answer["facts"][0] |= {"entity": "Lena", "key": "bought", "value": "an apartment in Lisbon"}
    return answer


def _through_the_model(llm_server, responder):
    """The episodes ingested, extracted by the loopback model answering with `responder`, patrolled."""
    llm_server.configure("openai:gpt-4o")
    llm_server.responder = responder
    settings = load_settings()
    folder = settings.inbox / "ada"
    folder.mkdir(parents=True)
    lines = [
        json.dumps({"id": f"ada-{i}", "ts": f"2026-03-02T09:{i:02d}:00Z", "text": t, "kind": "event"})
        for i, t in enumerate(EPISODES)
    ]
    (folder / "moving.jsonl").write_text("\n".join(lines) + "\n")
    for job in ("ingest", "extraction", "patrol"):
        assert all(s.success for s in run_job(settings, job))
    return settings


@pytest.fixture
def published(home, llm_server):
    settings = _through_the_model(llm_server, _with_a_fact)
    with store.connect(settings.duckdb_path, read_only=True) as con:
        [(source,)] = con.execute(
            "SELECT source_episode_ids FROM facts WHERE entity = 'Lena' AND invalid_at IS NULL"
        ).fetchall()
        [(ref,)] = con.execute(
            "SELECT node_id FROM nodes WHERE being_id = 'ada' AND list_has_all(source_episode_ids, ?)",
            [source],
        ).fetchall()
    return settings, ref


def _text_hit(settings, ref: str, embedder, hot: bool, question: str = QUESTION) -> bool:
    table = open_memories(settings.lance_path)
    index = indexes = None
    if hot:
        indexes = HotIndexes(settings.lance_path, max_rows=1_000)
        indexes.get(table, "ada")
        assert indexes.wait("ada")
        index = indexes.get(table, "ada")
        assert index is not None
    found = recall(
        table, "ada", question, embedder.encode_query(question), k=4,
        # No similarity floor: what is measured is the full-text side alone (text_rank).
        config=RecallConfig.for_model(settings.embedding_model, min_similarity=0.0), index=index,
    )  # fmt: skip
    if indexes is not None:
        indexes.close()
    parts = {m.memory_ref: m.parts for m in found}
    return ref in parts and parts[ref]["text_rank"] >= 0


def _published_row(settings, ref: str) -> dict:
    return (
        lance.open_table(lance.connect(settings.lance_path), TABLE)
        .search()
        .where(lance.where(memory_ref=[ref]))
        .to_arrow()
        .to_pylist()[0]
    )


def test_a_question_in_a_facts_words_finds_its_memory_by_full_text(published, embedder, monkeypatch):
    settings, ref = published
    row = _published_row(settings, ref)
    assert "Lena bought an apartment in Lisbon" in row["search_text"]
    assert "Lisbon" not in row["text"]  # the memory is still shown by its own text
    assert _text_hit(settings, ref, embedder, hot=False)
    assert _text_hit(settings, ref, embedder, hot=True)

    # Switched off, the next publish writes the text alone, and the fact's words no longer reach it.
    monkeypatch.setenv("MINDFLOW_RECALL_FACT_KEYS", "false")
    settings = load_settings()
    assert all(s.success for s in run_job(settings, "patrol"))
    assert not _text_hit(settings, ref, embedder, hot=False)
    assert not _text_hit(settings, ref, embedder, hot=True)


KEYPHRASE_QUESTION = "When did the property purchase go through?"


def _with_a_keyphrase(received):
    """The loopback model's extraction, the notary scene with keyphrases in words no episode uses."""
    answer = fake_model(received)
    if isinstance(answer, dict) and answer.get("scenes"):
        for scene in answer["scenes"]:
            if "notary" in scene["action"]:
                scene["keyphrases"] = ["property purchase", "  deed   signing ", "property purchase", ""]
            else:  # a model listing too many: the first 8 are kept
                scene["keyphrases"] = [f"errand {i}" for i in range(12)]
    return answer


def test_a_question_in_a_scenes_keyphrases_finds_its_memory_by_full_text(
    home, llm_server, embedder, monkeypatch
):
    settings = _through_the_model(llm_server, _with_a_keyphrase)
    with store.connect(settings.duckdb_path, read_only=True) as con:
        # Stored as the model gave them, blanks and repeats out, spaces collapsed.
        stored = con.execute("SELECT episode_ids, keyphrases FROM scene_notes ORDER BY scene_id").fetchall()
        [(episodes, keyphrases)] = [(e, k) for e, k in stored if "property purchase" in k]
        assert keyphrases == ["property purchase", "deed signing"]
        assert all(k == [f"errand {i}" for i in range(8)] for e, k in stored if e != episodes)
        [(ref,)] = con.execute(
            "SELECT node_id FROM nodes WHERE being_id = 'ada' AND list_has_all(source_episode_ids, ?)",
            [episodes],
        ).fetchall()
        others = [r for (r,) in con.execute("SELECT node_id FROM nodes WHERE node_id != ?", [ref]).fetchall()]
    rows = {
        r["memory_ref"]: r
        for r in lance.open_table(lance.connect(settings.lance_path), TABLE).search().to_arrow().to_pylist()
    }
    assert "deed signing ; property purchase" in rows[ref]["search_text"]
    assert "property" not in rows[ref]["text"]  # shown by its own text
    assert others and all("property" not in rows[o]["search_text"] for o in others)

    def hit(hot: bool) -> bool:
        return _text_hit(settings, ref, embedder, hot, KEYPHRASE_QUESTION)

    assert hit(hot=False)
    assert hit(hot=True)

    # Switched off, the next publish leaves the keyphrases out.
    monkeypatch.setenv("MINDFLOW_RECALL_KEYPHRASE_KEYS", "false")
    settings = load_settings()
    assert all(s.success for s in run_job(settings, "patrol"))
    row = _published_row(settings, ref)
    assert "property" not in row["search_text"]
    assert not hit(hot=False)
    assert not hit(hot=True)
