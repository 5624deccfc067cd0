"""LLM scene and fact extraction against hand-written answers from the loopback server."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest

from mindflow import extraction, patrol
from mindflow.config import load_settings
from mindflow.inbox import episodes_table
from mindflow.llm import resolve
from mindflow.models import Episode

ADA = "ada"
TS = datetime(2026, 1, 5, 9, 0, 0)
NOW = datetime(2026, 1, 6, 3, 0, 0)
VADSNT = {"valence": 0.6, "arousal": 0.4, "dominance": 0.5, "safety": 0.1, "novelty": 0.3, "trust": 0.2}
TABLES = ("scene_notes", "facts", "relations", "aliases", "co_occurrences", "history")


def insert(con, texts, prefix="e", start=TS):
    episodes = [
        Episode(episode_id=f"{prefix}{i}", being_id=ADA, ts=start + timedelta(minutes=i), speaker="ada",
                role="user", text=t)
        for i, t in enumerate(texts)
    ]  # fmt: skip
    con.register("test_episodes", episodes_table(episodes))
    con.execute("INSERT INTO episodes SELECT *, ?::TIMESTAMP FROM test_episodes", [NOW])
    con.unregister("test_episodes")


def scene(ids, action, **extra):
    return {
        "episode_ids": ids,
        "action": action,
        "actors": ["ada"],
        "when": [{"date": "2026-01-05", "action": action}],
        "feeling": "focused",
        "importance": 0.7,
        "themes": ["auth"],
        "emotion": [0.6, 0.4, 0.5, 0.1, 0.3, 0.2],
        **extra,
    }


def snapshot(con):
    return {t: con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in TABLES}


def llm_for(settings_env, purpose="extraction"):
    return resolve(load_settings(), purpose)


def test_batch_becomes_scenes_facts_relations(con, llm_server):
    llm_server.configure("openai:gpt-4o")
    insert(con, ["We chose Postgres for the billing service", "Bram will build the OAuth PKCE login",
                 "Coffee with Bram after the review"])  # fmt: skip
    llm_server.script([{
        "scenes": [scene(["e0", "e1"], "Planned the billing service"), scene(["e2"], "Coffee with Bram")],
        "entities": [{"name": "billing service", "aliases": ["billing"]}, {"name": "Bram", "aliases": []}],
        "facts": [
            {"entity": "billing service", "key": "database", "value": "Postgres", "category": "decision",
             "confidence": 0.9, "episode_ids": ["e0"]},
            {"entity": "billing", "key": "login", "value": "OAuth PKCE", "category": "technology",
             "episode_ids": ["e0", "e1"]},
        ],
        "relations": [
            {"subject": "Bram", "predicate": "develops", "object": "OAuth PKCE", "episode_ids": ["e1"]},
            {"subject": "billing", "predicate": "USES", "object": "Postgres", "episode_ids": ["e0"]},
            {"subject": "Bram", "predicate": "likes", "object": "coffee", "episode_ids": ["e2"]},
        ],
    }])  # fmt: skip
    report = extraction.extract(con, ADA, llm_for(None), NOW)
    assert len(llm_server.requests) == 1  # three episodes, one call
    assert "[e0] 2026-01-05 ada: We chose Postgres" in llm_server.requests[0].prompt_text
    assert (report.scenes, report.facts_new, report.relations, report.aliases) == (2, 2, 3, 1)
    scenes = con.execute(
        "SELECT episode_ids, action, emotion, extractor FROM scene_notes ORDER BY action"
    ).fetchall()
    # Six numbers are VADSNT in order, stored under their names.
    assert scenes == [
        (["e2"], "Coffee with Bram", VADSNT, "openai:gpt-4o"),
        (["e0", "e1"], "Planned the billing service", VADSNT, "openai:gpt-4o"),
    ]
    # The alias "billing" was resolved to its entity in facts and relations.
    assert con.execute(
        "SELECT entity, key, value, source_episode_ids FROM facts ORDER BY key"
    ).fetchall() == [
        ("billing service", "database", "Postgres", ["e0"]),
        ("billing service", "login", "OAuth PKCE", ["e0", "e1"]),
    ]
    assert con.execute("SELECT subject, predicate, object FROM relations ORDER BY ALL").fetchall() == [
        ("Bram", "develops", "OAuth PKCE"),
        ("Bram", "relates-to", "coffee"),  # not in the vocabulary
        ("billing service", "uses", "Postgres"),
    ]
    # Both facts came from e0: mentioned together once.
    assert con.execute("SELECT weight FROM co_occurrences").fetchall() == [(1.0,)]
    # The scenes become nodes with their emotion and the `when` actions.
    patrol.ensure_roots(con, ADA, NOW)
    assert patrol.step_scenes(con, ADA, NOW).counts["new"] == 0  # nothing left for the mechanical step


def test_contradicted_fact_is_superseded_not_overwritten(con, llm_server):
    llm_server.configure("openai:gpt-4o")
    insert(con, ["Billing runs on MySQL"], prefix="a")
    llm_server.script([{
        "scenes": [scene(["a0"], "Billing on MySQL")],
        "facts": [{"entity": "billing", "key": "database", "value": "MySQL", "episode_ids": ["a0"]}],
    }])  # fmt: skip
    extraction.extract(con, ADA, llm_for(None), NOW)
    insert(con, ["We moved billing to Postgres"], prefix="b", start=TS + timedelta(days=1))
    llm_server.script([{
        "scenes": [scene(["b0"], "Billing moved to Postgres")],
        "facts": [{"entity": "Billing", "key": "Database", "value": "Postgres", "episode_ids": ["b0"]}],
    }])  # fmt: skip
    report = extraction.extract(con, ADA, llm_for(None), NOW)
    assert report.facts_superseded == 1
    facts = con.execute("SELECT value, valid_at, invalid_at FROM facts ORDER BY valid_at").fetchall()
    assert facts == [
        ("MySQL", TS, TS + timedelta(days=1)),
        ("Postgres", TS + timedelta(days=1), None),
    ]
    assert con.execute("SELECT subject, predicate, object FROM relations").fetchall() == [
        ("billing database: Postgres", "supersedes", "billing database: MySQL")
    ]
    assert con.execute("SELECT operation FROM history").fetchall() == [("superseded",)]


def test_review_mode_flags_a_contradiction_instead_of_superseding(con, llm_server):
    """A being in review mode keeps both values current; reflection proposes which to keep."""
    from mindflow.reflection.consolidate import contradictions

    llm_server.configure("openai:gpt-4o")
    insert(con, ["Billing runs on MySQL"], prefix="a")
    llm_server.script([{
        "scenes": [scene(["a0"], "Billing on MySQL")],
        "facts": [{"entity": "billing", "key": "database", "value": "MySQL", "episode_ids": ["a0"]}],
    }])  # fmt: skip
    extraction.extract(con, ADA, llm_for(None), NOW, supersede=False)
    insert(con, ["We moved billing to Postgres"], prefix="b", start=TS + timedelta(days=1))
    llm_server.script([{
        "scenes": [scene(["b0"], "Billing moved to Postgres")],
        "facts": [{"entity": "Billing", "key": "Database", "value": "Postgres", "episode_ids": ["b0"]}],
    }])  # fmt: skip
    report = extraction.extract(con, ADA, llm_for(None), NOW, supersede=False)
    assert (report.facts_superseded, report.facts_flagged) == (0, 1)
    assert con.execute("SELECT value, invalid_at FROM facts ORDER BY valid_at").fetchall() == [
        ("MySQL", None),
        ("Postgres", None),
    ]
    assert con.execute("SELECT count(*) FROM history").fetchone()[0] == 0
    [draft] = contradictions(con, ADA)
    assert [s["value"] for s in draft.payload["sides"]] == ["MySQL", "Postgres"]
    assert draft.payload["keep_value"] == "Postgres"


def test_alias_merge_across_runs(con, llm_server):
    llm_server.configure("openai:gpt-4o")
    insert(con, ["Started on OAuth PKCE"], prefix="a")
    llm_server.script([{
        "scenes": [scene(["a0"], "OAuth work")],
        "entities": [{"name": "OAuth PKCE", "aliases": []}],
        "facts": [{"entity": "OAuth PKCE", "key": "status", "value": "started", "episode_ids": ["a0"]}],
    }])  # fmt: skip
    extraction.extract(con, ADA, llm_for(None), NOW)
    insert(con, ["The OAuth2 PKCE flow is done"], prefix="b", start=TS + timedelta(hours=1))
    llm_server.script([{
        "scenes": [scene(["b0"], "OAuth done")],
        "entities": [{"name": "OAuth PKCE", "aliases": ["OAuth2 PKCE flow"]}],
        "facts": [{"entity": "OAuth2 PKCE flow", "key": "status", "value": "done", "episode_ids": ["b0"]}],
    }])  # fmt: skip
    extraction.extract(con, ADA, llm_for(None), NOW)
    assert '"OAuth PKCE"' in llm_server.requests[1].prompt_text  # known entities shown to the model
    assert con.execute("SELECT alias, entity FROM aliases").fetchall() == [("OAuth2 PKCE flow", "OAuth PKCE")]
    assert con.execute(
        "SELECT entity, value, invalid_at IS NULL FROM facts ORDER BY created_at, value"
    ).fetchall() == [("OAuth PKCE", "done", True), ("OAuth PKCE", "started", False)]


def test_rejected_answers_write_nothing_and_parse_failed_is_repaired(con, llm_server, embedder):
    llm_server.configure("anthropic:claude-sonnet-4-5", fallback="openai:gpt-4o")
    insert(con, ["first", "second"])
    before = snapshot(con)
    # Unknown episode id from the primary, wrong shape from the fallback.
    llm_server.script([
        {"scenes": [scene(["e9"], "invented")]},
        '{"scenes": [{"episode_ids": ["e0"], "action": "x", "importance": 7}]}',
    ])  # fmt: skip
    report = extraction.extract(con, ADA, llm_for(None), NOW)
    assert report.parse_failed == 1 and report.scenes == 0
    after = snapshot(con)
    assert {t: after[t] for t in TABLES if t != "scene_notes"} == {
        t: before[t] for t in TABLES if t != "scene_notes"
    }
    notes = con.execute("SELECT episode_ids, action, note_status, raw FROM scene_notes").fetchall()
    assert notes == [(["e0", "e1"], "[PARSE_FAILED]", "parse_failed",
                      '{"scenes": [{"episode_ids": ["e0"], "action": "x", "importance": 7}]}')]  # fmt: skip
    # No node from a failed note.
    patrol.ensure_roots(con, ADA, NOW)
    assert patrol.step_nodes(con, ADA, embedder, patrol.PatrolParams(), NOW).counts["new"] == 0
    # Next run: the same episodes are asked again and the note goes.
    llm_server.script([{"scenes": [scene(["e0", "e1"], "both")]}])
    report = extraction.extract(con, ADA, llm_for(None), NOW)
    assert (report.scenes, report.repaired, report.parse_failed) == (1, 1, 0)
    assert con.execute("SELECT action, note_status FROM scene_notes").fetchall() == [("both", "ok")]
    # The scene becomes one node with its emotion and its `when` action.
    assert patrol.step_nodes(con, ADA, embedder, patrol.PatrolParams(), NOW).counts["new"] == 1
    assert con.execute("SELECT source_episode_ids, emotion, scene.when FROM nodes").fetchall() == [
        (["e0", "e1"], VADSNT, [{"date": "2026-01-05", "action": "both"}])
    ]


def test_server_down_writes_nothing_and_leaves_episodes_pending(con, llm_server):
    llm_server.configure("openai:gpt-4o", LLM_MAX_RETRIES="0", LLM_CONTEXT_TOKENS="2048")
    insert(con, [f"episode number {i} " + "words " * 200 for i in range(12)])
    before = snapshot(con)
    llm_server.script([500] * 3)
    llm = llm_for(None)
    report = extraction.extract(con, ADA, llm, NOW)
    assert report.batches == 1 and report.pending == 12 and report.scenes == 0
    assert len(llm_server.requests) == 1  # it stopped instead of hammering a dead server
    assert snapshot(con) == before
    assert llm.usage.failed_calls == 1 and "HTTP 500" in llm.usage.errors[0]


def test_batches_are_sized_to_the_context(con, llm_server):
    llm_server.configure("openai-compatible:small", LLM_CONTEXT_TOKENS="8192")
    texts = [f"note {i}: " + "a fairly ordinary sentence about the day " * 5 for i in range(200)]
    insert(con, texts)

    def answer(request):
        ids = [line[1:].split("]")[0] for line in request.prompt_text.splitlines() if line.startswith("[e")]
        return {"scenes": [scene([i], f"scene {i}") for i in ids]}

    llm_server.responder = answer
    report = extraction.extract(con, ADA, llm_for(None), NOW)
    llm = llm_for(None)
    lines = [f"[e{i}] 2026-01-05 ada: {t}" for i, t in enumerate(texts)]
    total = sum(llm.count_tokens(line) + 1 for line in lines)
    # 8,192 context: 2,048-token answers, so at most 4,096 input tokens per batch.
    expected = -(-total // 4096)
    assert report.scenes == 200
    assert expected <= len(llm_server.requests) <= expected + 1
    assert len(llm_server.requests) < 20
    for request in llm_server.requests:
        assert request.body["max_tokens"] == 2048
        user = request.body["messages"][1]["content"]
        assert llm.count_tokens(user) < 4096 + 200
    assert json.loads(json.dumps(report.counts()))["batches"] == len(llm_server.requests)


def test_switching_the_model_off_covers_parse_failed_episodes_mechanically(con, llm_server):
    llm_server.configure("openai:gpt-4o", LLM_MAX_RETRIES="0")
    insert(con, ["first", "second"])
    llm_server.script(["not json"])
    assert extraction.extract(con, ADA, llm_for(None), NOW).parse_failed == 1
    assert patrol.step_scenes(con, ADA, NOW).counts["new"] == 2
    assert con.execute(
        "SELECT episode_ids, note_status, extractor FROM scene_notes ORDER BY ALL"
    ).fetchall() == [
        (["e0"], "ok", "mechanical"),
        (["e1"], "ok", "mechanical"),
    ]


FACT = {"entity": "billing", "key": "database", "value": "Postgres", "episode_ids": ["e0"]}


@pytest.mark.parametrize(
    "bad",
    [
        {"scenes": [scene(["e0"], "   ")]},  # whitespace-only action
        {"scenes": [scene(["e0"], "ok", actors=["ada", "\t"])]},
        {"scenes": [scene(["e0"], "ok", themes=[" "])]},
        {"scenes": [scene(["e0"], "ok", when=[{"date": "last Tuesday", "action": "x"}])]},
        {"scenes": [scene(["e0"], "ok", emotion=[0.5, 0.5, 0.5, 0.5, 0.5, 1.5])]},
        {"scenes": [scene(["e0"], "ok", emotion=[0.5, 0.5, float("nan"), 0.5, 0.5, 0.5])]},  # NaN on the wire
        {"scenes": [scene(["e0"], "ok", emotion=[0.5, 0.5, 0.5])]},  # not six values
        # The old schema's names: surprise and tension are not VADSNT.
        {"scenes": [scene(["e0"], "ok", emotion={"valence": 0.5, "arousal": 0.5, "dominance": 0.5,
                                                 "surprise": 0.5, "novelty": 0.5, "tension": 0.5})]},
        {"scenes": [scene(["e0"], "ok", importance=float("nan"))]},
        {"scenes": [scene(["e0"], "ok")], "entities": [{"name": "  ", "aliases": []}]},
        {"scenes": [scene(["e0"], "ok")], "entities": [{"name": "billing", "aliases": [" "]}]},
        {"scenes": [scene(["e0"], "ok")], "facts": [FACT | {"entity": " "}]},
        {"scenes": [scene(["e0"], "ok")], "facts": [FACT | {"key": "\n"}]},
        {"scenes": [scene(["e0"], "ok")], "facts": [FACT | {"value": "  "}]},
        {"scenes": [scene(["e0"], "ok")], "facts": [FACT | {"category": " "}]},
        {"scenes": [scene(["e0"], "ok")],
         "relations": [{"subject": " ", "predicate": "uses", "object": "Postgres"}]},
        {"scenes": [scene(["e0"], "ok")],
         "relations": [{"subject": "billing", "predicate": "uses", "object": "\t"}]},
    ],
)  # fmt: skip
def test_blank_text_or_out_of_range_values_reject_the_whole_answer(con, llm_server, bad):
    llm_server.configure("openai:gpt-4o", LLM_MAX_RETRIES="0")
    insert(con, ["Billing runs on Postgres"])
    before = snapshot(con)
    llm_server.script([bad])
    llm = llm_for(None)
    report = extraction.extract(con, ADA, llm, NOW)
    assert (report.parse_failed, report.scenes, report.facts_new) == (1, 0, 0)
    assert "wrong shape" in llm.usage.errors[0]
    after = snapshot(con)
    assert {t: after[t] for t in TABLES if t != "scene_notes"} == {
        t: before[t] for t in TABLES if t != "scene_notes"
    }
    assert con.execute("SELECT action, note_status FROM scene_notes").fetchall() == [
        ("[PARSE_FAILED]", "parse_failed")
    ]


def test_text_is_stored_stripped_and_blank_optional_text_as_null(con, llm_server):
    llm_server.configure("openai:gpt-4o")
    insert(con, ["Billing runs on Postgres"])
    llm_server.script([{
        "scenes": [scene(["e0"], "  Chose Postgres  ", setting="  ", dialogue="", sensory=" hum of fans ",
                         when=[{"date": "2026-01-05T09:00:00Z", "action": "   "}])],
        "facts": [FACT | {"entity": " billing ", "value": " Postgres\n"}],
    }])  # fmt: skip
    report = extraction.extract(con, ADA, llm_for(None), NOW)
    assert (report.scenes, report.facts_new) == (1, 1)
    assert con.execute('SELECT action, setting, dialogue, sensory, "when" FROM scene_notes').fetchall() == [
        ("Chose Postgres", None, None, ["hum of fans"], [{"date": "2026-01-05", "action": None}])
    ]
    assert con.execute("SELECT entity, key, value FROM facts").fetchall() == [
        ("billing", "database", "Postgres")
    ]


def test_alias_merge_keeps_the_stored_entity_when_the_model_names_the_new_spelling(con, llm_server):
    llm_server.configure("openai:gpt-4o")
    insert(con, ["Started on OAuth PKCE"], prefix="a")
    llm_server.script([{
        "scenes": [scene(["a0"], "OAuth work")],
        "entities": [{"name": "OAuth PKCE", "aliases": []}],
        "facts": [{"entity": "OAuth PKCE", "key": "status", "value": "started", "episode_ids": ["a0"]}],
    }])  # fmt: skip
    extraction.extract(con, ADA, llm_for(None), NOW)
    # This time the model calls the new spelling canonical and lists the stored one (in
    # another case) as its alias.
    insert(con, ["The OAuth2 PKCE flow is done"], prefix="b", start=TS + timedelta(hours=1))
    llm_server.script([{
        "scenes": [scene(["b0"], "OAuth done")],
        "entities": [{"name": "OAuth2 PKCE flow", "aliases": ["oauth pkce"]}],
        "facts": [{"entity": "OAuth2 PKCE flow", "key": "status", "value": "done", "episode_ids": ["b0"]}],
        "relations": [{"subject": "OAuth2 PKCE flow", "predicate": "uses", "object": "PKCE",
                       "episode_ids": ["b0"]}],
    }])  # fmt: skip
    report = extraction.extract(con, ADA, llm_for(None), NOW)
    assert report.facts_superseded == 1
    assert con.execute("SELECT alias, entity FROM aliases").fetchall() == [("OAuth2 PKCE flow", "OAuth PKCE")]
    assert con.execute(
        "SELECT entity, value, invalid_at IS NULL FROM facts ORDER BY created_at, value"
    ).fetchall() == [("OAuth PKCE", "done", True), ("OAuth PKCE", "started", False)]
    assert sorted(con.execute("SELECT subject, predicate, object FROM relations").fetchall()) == [
        ("OAuth PKCE", "uses", "PKCE"),
        ("OAuth PKCE status: done", "supersedes", "OAuth PKCE status: started"),
    ]
    # A third run, in either spelling, still lands on the one entity.
    insert(con, ["OAuth2 PKCE flow was reopened"], prefix="c", start=TS + timedelta(hours=2))
    llm_server.script([{
        "scenes": [scene(["c0"], "OAuth reopened")],
        "entities": [{"name": "OAuth2 PKCE flow", "aliases": ["OAuth PKCE"]}],
        "facts": [{"entity": "OAuth2 PKCE flow", "key": "status", "value": "reopened", "episode_ids": ["c0"]}],
    }])  # fmt: skip
    extraction.extract(con, ADA, llm_for(None), NOW)
    assert '"OAuth PKCE"' in llm_server.requests[-1].prompt_text
    assert 'OAuth2 PKCE flow"' not in llm_server.requests[-1].prompt_text.split("Episodes:")[0]
    assert con.execute("SELECT DISTINCT entity FROM facts").fetchall() == [("OAuth PKCE",)]
    assert con.execute("SELECT value FROM facts WHERE invalid_at IS NULL").fetchall() == [("reopened",)]
    assert con.execute("SELECT count(*) FROM aliases").fetchall() == [(1,)]


def test_the_next_batch_is_shown_the_canonical_name_not_the_alias(con, llm_server):
    llm_server.configure("openai:gpt-4o", LLM_CONTEXT_TOKENS="2048")
    insert(con, ["Started on OAuth PKCE"], prefix="a")
    llm_server.script([{
        "scenes": [scene(["a0"], "OAuth work")],
        "facts": [{"entity": "OAuth PKCE", "key": "status", "value": "started", "episode_ids": ["a0"]}],
    }])  # fmt: skip
    extraction.extract(con, ADA, llm_for(None), NOW)
    # Two long episodes: one batch each in a 2,048-token context.
    insert(con, ["OAuth2 PKCE flow done. " + "detail " * 300, "Unrelated. " + "more " * 300],
           prefix="b", start=TS + timedelta(hours=1))  # fmt: skip
    llm_server.script([
        {"scenes": [scene(["b0"], "OAuth done")],
         "entities": [{"name": "OAuth2 PKCE flow", "aliases": ["OAuth PKCE"]}, {"name": "Bram"}]},
        {"scenes": [scene(["b1"], "Other things")]},
    ])  # fmt: skip
    report = extraction.extract(con, ADA, llm_for(None), NOW)
    assert report.batches == 2
    known = llm_server.requests[-1].prompt_text.split("Known entities: ", 1)[1].split("\n", 1)[0]
    assert json.loads(known) == ["Bram", "OAuth PKCE"]
