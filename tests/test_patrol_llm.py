"""The patrol's LLM steps (roots, ❹, ❻, diary/think_md) against hand-written answers."""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import pytest
from llm_server import nested_json

from mindflow import patrol
from mindflow.config import load_settings
from mindflow.inbox import episodes_table
from mindflow.llm import resolve
from mindflow.models import Episode

ADA = "ada"
NOW = datetime(2026, 1, 6, 3, 0, 0)
TS = datetime(2026, 1, 5, 9, 0, 0)
TABLES = ("nodes", "clusters", "history")


def llm():
    return resolve(load_settings(), "patrol")


def snapshot(con):
    return {t: con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in TABLES}


def add_node(con, node_id, cluster_id, *, importance=0.5, status="active", fresh=True, day="2026-01-05",
             action=None, seed=0):  # fmt: skip
    vector = np.random.default_rng(seed).normal(size=8)
    vector = (vector / np.linalg.norm(vector)).tolist()
    con.execute(
        """
        INSERT INTO nodes (node_id, being_id, scene_id, scene, feeling, importance, cluster_id, themes,
            kind, session_count, status, fresh, pinned, reactivation_count, source_episode_ids,
            episode_ts, vector, created_at, updated_at)
        VALUES (?, ?, NULL, {'action': ?, 'actors': ['ada'], 'when': [{'date': ?, 'action': NULL}],
                'setting': NULL, 'dialogue': NULL, 'sensory': NULL},
                'calm', ?, ?, [], 'message', 1, ?, ?, FALSE, 0, [?], ?, ?::FLOAT[], ?, ?)
        """,
        [node_id, ADA, action or f"memory {node_id}", day, importance, cluster_id, status, fresh,
         f"ep-{node_id}", TS + timedelta(minutes=seed), vector, NOW, NOW],
    )  # fmt: skip


def node(con, node_id):
    row = con.execute(
        "SELECT status, fresh, importance, cluster_id, scene.when, source_episode_ids FROM nodes "
        "WHERE node_id = ?",
        [node_id],
    ).fetchall()[0]
    return dict(zip(["status", "fresh", "importance", "cluster_id", "when", "sources"], row, strict=True))


@pytest.fixture
def roots(con):
    patrol.ensure_roots(con, ADA, NOW)
    return {label: patrol.root_cluster_id(ADA, label) for label in patrol.ROOT_LABELS}


def test_consolidation_merges_kills_and_unfreshens(con, llm_server, roots):
    llm_server.configure("openai:gpt-4o")
    biz = roots["Business"]
    add_node(con, "n-a", biz, importance=0.5, seed=1, action="Deployed billing")
    add_node(con, "n-b", biz, importance=0.4, seed=2, day="2026-01-04", action="Billing deploy prep")
    add_node(con, "n-c", biz, seed=3)
    add_node(con, "n-d", biz, status="dying", fresh=False, importance=0.02, seed=4)
    add_node(con, "n-e", biz, importance=0.98, seed=5)
    add_node(con, "n-f", biz, seed=6)
    llm_server.script([{
        "merges": [{"survivor": "n-a", "absorbed": ["n-b"]}, {"survivor": "n-e", "absorbed": ["n-f"]}],
        "make_dead": ["n-d"],
    }])  # fmt: skip
    report = patrol.step_consolidate(con, ADA, llm(), NOW)
    assert report.counts == {"clusters": 1, "merged": 2, "made_dead": 1, "unfreshened": 1, "rejected": 0}
    a = node(con, "n-a")
    assert a["importance"] == pytest.approx(0.55) and a["fresh"] is False and a["status"] == "active"
    assert a["when"] == [
        {"date": "2026-01-05", "action": None},
        {"date": "2026-01-04", "action": "Billing deploy prep"},
    ]
    assert a["sources"] == ["ep-n-a", "ep-n-b"]
    assert node(con, "n-e")["importance"] == 1.0  # capped
    assert node(con, "n-b")["status"] == "dead" and node(con, "n-f")["status"] == "dead"
    assert node(con, "n-d")["status"] == "dead"
    c = node(con, "n-c")
    assert (c["status"], c["fresh"], c["importance"]) == ("active", False, 0.5)
    assert sorted(con.execute("SELECT memory_ref, operation FROM history").fetchall()) == [
        ("n-a", "absorbed"), ("n-b", "merged"), ("n-d", "dead"), ("n-e", "absorbed"), ("n-f", "merged"),
    ]  # fmt: skip
    # The prompt showed the cluster's nodes with their state.
    assert '"node_id": "n-d", "text": "2026-01-05 — memory n-d — (calm)", "status": "dying"' in (
        llm_server.requests[0].prompt_text
    )


@pytest.mark.parametrize(
    "bad",
    [
        {"merges": [{"survivor": "n-a", "absorbed": ["n-zz"]}]},  # unknown id
        {"merges": [{"survivor": "n-a", "absorbed": ["n-b"]}], "make_dead": ["n-b"]},  # twice
        {"make_dead": ["n-a"]},  # not dying
        {"merges": [{"survivor": "n-a", "absorbed": []}]},  # wrong shape
        {"merges": [{"survivor": "  ", "absorbed": ["n-b"]}]},  # a blank id
        "no json at all",
    ],
)
def test_rejected_consolidation_changes_nothing(con, llm_server, roots, bad):
    llm_server.configure("openai:gpt-4o", LLM_MAX_RETRIES="0")
    add_node(con, "n-a", roots["Business"], seed=1)
    add_node(con, "n-b", roots["Business"], seed=2)
    before = snapshot(con)
    llm_server.script([bad])
    report = patrol.step_consolidate(con, ADA, llm(), NOW)
    assert report.counts["rejected"] == 1
    assert snapshot(con) == before


def test_split_carves_subclusters_out_of_a_root(con, llm_server, roots):
    llm_server.configure("openai:gpt-4o")
    biz = roots["Business"]
    for i in range(12):
        add_node(con, f"n-{i:02d}", biz, seed=i)
    add_node(con, "n-gone", biz, status="dead", seed=99)
    llm_server.script([{
        "groups": [
            {"label": "billing", "node_ids": ["n-00", "n-01", "n-02"]},
            {"label": "hiring", "node_ids": ["n-03", "n-04"]},
        ]
    }])  # fmt: skip
    report = patrol.step_split(con, ADA, llm(), patrol.PatrolParams(), NOW)
    assert report.counts == {"clusters": 1, "new_subclusters": 2, "moved": 5, "rejected": 0}
    sizes = con.execute(
        "SELECT c.label, c.parent_id, count(n.node_id) FROM clusters c LEFT JOIN nodes n "
        "ON n.cluster_id = c.cluster_id AND n.status = 'active' WHERE c.being_id = ? GROUP BY ALL ORDER BY 1",
        [ADA],
    ).fetchall()
    assert sizes == [("Business", None, 7), ("Private", None, 0), ("billing", biz, 3), ("hiring", biz, 2)]
    # New sub-clusters have a centre.
    assert con.execute(
        "SELECT count(*) FROM clusters WHERE parent_id IS NOT NULL AND vector IS NULL"
    ).fetchall() == [(0,)]


def test_split_of_a_subcluster_makes_siblings_and_small_clusters_are_left(con, llm_server, roots):
    llm_server.configure("openai:gpt-4o")
    biz = roots["Business"]
    con.execute(
        "INSERT INTO clusters VALUES ('c-sub', ?, 'work', ?, FALSE, NULL, ?, ?)", [ADA, biz, NOW, NOW]
    )
    for i in range(11):
        add_node(con, f"n-{i:02d}", "c-sub", seed=i)
    for i in range(10):  # exactly 10 active: not split, no call
        add_node(con, f"p-{i:02d}", roots["Private"], seed=50 + i)
    llm_server.script([{"groups": [{"label": "releases", "node_ids": ["n-00", "n-01"]}]}])
    patrol.step_split(con, ADA, llm(), patrol.PatrolParams(), NOW)
    assert len(llm_server.requests) == 1
    assert con.execute("SELECT parent_id FROM clusters WHERE label = 'releases'").fetchall() == [(biz,)]


@pytest.mark.parametrize(
    "bad",
    [
        {"groups": [{"label": "x", "node_ids": ["n-00"]}]},  # a group of one
        {"groups": [{"label": "x", "node_ids": [f"n-{i:02d}" for i in range(11)]}]},  # 1 left
        {
            "groups": [
                {"label": "x", "node_ids": ["n-00", "n-01"]},
                {"label": "y", "node_ids": ["n-01", "n-02"]},
            ]
        },
        {"groups": [{"label": "x", "node_ids": ["n-00", "zz"]}]},
        {"groups": [{"label": " \t ", "node_ids": ["n-00", "n-01"]}]},  # a blank label
    ],
)
def test_rejected_split_changes_nothing(con, llm_server, roots, bad):
    llm_server.configure("openai:gpt-4o", LLM_MAX_RETRIES="0")
    for i in range(12):
        add_node(con, f"n-{i:02d}", roots["Business"], seed=i)
    before = snapshot(con)
    llm_server.script([bad])
    assert patrol.step_split(con, ADA, llm(), patrol.PatrolParams(), NOW).counts["rejected"] == 1
    assert snapshot(con) == before


def test_root_classification_by_the_model(con, llm_server, roots, embedder):
    llm_server.configure("openai:gpt-4o")
    episodes = [
        Episode(episode_id="e0", being_id=ADA, ts=TS, speaker="ada", role="user",
                text="The client meeting about the project deadline went well"),
        Episode(episode_id="e1", being_id=ADA, ts=TS, speaker="ada", role="user",
                text="My sister's wedding is next weekend"),
    ]  # fmt: skip
    con.register("eps", episodes_table(episodes))
    con.execute("INSERT INTO episodes SELECT *, ?::TIMESTAMP FROM eps", [NOW])
    patrol.step_scenes(con, ADA, NOW)
    ids = dict(con.execute("SELECT episode_ids[1], 'n-' || substr(scene_id, 3) FROM scene_notes").fetchall())
    # The model files the meeting under Private (the prototype would say Business) and
    # leaves the wedding out: that one keeps the prototype's choice.
    llm_server.script([{"labels": [{"node_id": ids["e0"], "root": "Private"}]}])
    report = patrol.step_nodes(con, ADA, embedder, patrol.PatrolParams(), NOW, llm=llm())
    assert report.counts["root_by_llm"] == 1
    assert node(con, ids["e0"])["cluster_id"] == roots["Private"]
    assert node(con, ids["e1"])["cluster_id"] == roots["Private"]
    assert len(llm_server.requests) == 1


def test_diary_and_think_are_written_through_the_audit_layer(con, llm_server, roots, settings):
    llm_server.configure("openai:gpt-4o")
    add_node(con, "n-a", roots["Business"], action="Shipped the billing release", seed=1)
    llm_server.script([
        {"lines": ["Shipped billing today.", "It felt good.", "Tomorrow: rest."]},
        {"bullets": ["- billing is live", "watch the error rate", "plan the next sprint"]},
    ])  # fmt: skip
    report = patrol.step_journal(con, settings, ADA, llm(), NOW)
    assert report.counts == {"diary": 1, "think": 1, "rejected": 0, "scenes": 1}
    diary = (settings.workspace / ADA / "diary" / "2026-01-06.md").read_text()
    assert diary == "# 2026-01-06\n\nShipped billing today.\nIt felt good.\nTomorrow: rest.\n"
    think = (settings.workspace / ADA / "think.md").read_text()
    assert think == "# think\n\n- billing is live\n- watch the error rate\n- plan the next sprint\n"


def test_the_journal_takes_this_cycle_only_and_upserts_the_day(con, llm_server, roots, settings):
    """Scenes formed since the last journal and what the patrol did since, never the all-time top
    memories (❷ touches every active node's updated_at); nothing new, nothing written; a second
    cycle the same day rewrites the day's one entry with the lines so far."""
    llm_server.configure("openai:gpt-4o")
    add_node(con, "n-old", roots["Business"], action="Signed the lease on the old office", importance=1.0)
    con.execute("UPDATE nodes SET created_at = ? - INTERVAL 3 DAY", [NOW])
    add_node(con, "n-a", roots["Business"], action="Shipped the billing release", seed=1)
    con.execute("UPDATE nodes SET updated_at = ?", [NOW])  # as ❷ does
    con.execute(
        "INSERT INTO history (history_id, ts, memory_ref, being_id, operation, before, after, run_id, actor) "
        "VALUES ('h-1', ?, 'n-old', ?, 'dying', NULL, NULL, NULL, 'patrol')",
        [NOW, ADA],
    )
    llm_server.script([
        {"lines": ["Shipped billing today.", "It felt good.", "Tomorrow: rest."]},
        {"bullets": ["billing is live", "watch the error rate", "plan the next sprint"]},
    ])  # fmt: skip
    patrol.step_journal(con, settings, ADA, llm(), NOW)
    diary_prompt, think_prompt = (r.prompt_text for r in llm_server.requests)
    for prompt in (diary_prompt, think_prompt):
        assert "2026-01-05 — Shipped the billing release — (calm)" in prompt  # scene_to_text
        assert "old office" not in prompt
        assert "1 dying" in prompt

    # No scene since: neither file is asked for or written again.
    llm_server.requests.clear()
    assert patrol.step_journal(con, settings, ADA, llm(), NOW).counts["diary"] == 0
    assert llm_server.requests == []

    # A second cycle the same day: the day's entry so far goes with the new scene, one file.
    later = NOW + timedelta(hours=5)
    add_node(con, "n-b", roots["Business"], action="Called the bank about the loan", seed=2)
    con.execute("UPDATE nodes SET created_at = ? WHERE node_id = 'n-b'", [later])
    llm_server.script([{"lines": ["One.", "Two.", "Three.", "Four."]}, {"bullets": ["a", "b", "c"]}])
    report = patrol.step_journal(con, settings, ADA, llm(), later)
    assert report.counts == {"diary": 1, "think": 1, "rejected": 0, "scenes": 1}
    prompt = llm_server.requests[0].prompt_text
    assert "Today's entry so far:\n- Shipped billing today." in prompt
    assert "Called the bank about the loan" in prompt and "Shipped the billing release" not in prompt
    assert list((settings.workspace / ADA / "diary").iterdir()) == [
        settings.workspace / ADA / "diary" / "2026-01-06.md"
    ]
    assert (
        settings.workspace / ADA / "diary" / "2026-01-06.md"
    ).read_text() == "# 2026-01-06\n\nOne.\nTwo.\nThree.\nFour.\n"


def test_rejected_diary_writes_no_file(con, llm_server, roots, settings):
    llm_server.configure("openai:gpt-4o", LLM_MAX_RETRIES="0")
    add_node(con, "n-a", roots["Business"], seed=1)
    llm_server.script([{"lines": ["only one line"]}, {"bullets": ["", "b", "c"]}])
    report = patrol.step_journal(con, settings, ADA, llm(), NOW)
    assert report.counts == {"diary": 0, "think": 0, "rejected": 2, "scenes": 1}
    assert not (settings.workspace / ADA / "diary").exists()
    assert not (settings.workspace / ADA / "think.md").exists()


def test_patrol_with_a_dead_server_still_does_its_mechanical_work(con, llm_server, roots, embedder, settings):
    llm_server.configure("openai:gpt-4o", LLM_MAX_RETRIES="0")  # every answer: 500
    add_node(con, "n-old", roots["Business"], importance=0.01, fresh=False, seed=1)
    con.execute("UPDATE nodes SET session_count = 200")
    add_node(con, "n-live", roots["Business"], importance=0.9, seed=2)
    model = llm()
    reports = {r.step: r.counts for r in patrol.run_patrol(
        con, ADA, embedder, now=NOW, llm=model, extraction_llm=resolve(load_settings(), "extraction"),
        settings=settings,
    )}  # fmt: skip
    assert reports["❸ dying"] == {"dying": 1}
    assert reports["❹ consolidation"]["rejected"] == 1
    assert reports["diary/think_md"]["rejected"] >= 1
    assert node(con, "n-old")["status"] == "dying"
    assert model.usage.failed_calls >= 2 and model.usage.metadata()["llm/failed_calls"] >= 2
    assert not (settings.workspace / ADA / "think.md").exists()


def test_answers_nested_past_the_parsers_limit_are_rejected_and_every_being_is_patrolled(
    con, llm_server, embedder, settings
):
    llm_server.configure("openai:gpt-4o", LLM_MAX_RETRIES="0", LLM_BREAKER_FAILURES="100")
    llm_server.responder = lambda request: nested_json()
    beings = ("ada", "bram")
    episodes = [
        Episode(episode_id=f"{being}-{i}", being_id=being, ts=TS + timedelta(minutes=i), speaker=being,
                role="user", text=text)
        for being in beings
        for i, text in enumerate(["The client meeting went well", "My sister's wedding is next weekend"])
    ]  # fmt: skip
    con.register("eps", episodes_table(episodes))
    con.execute("INSERT INTO episodes SELECT *, ?::TIMESTAMP FROM eps", [NOW])
    model = llm()
    for being in beings:
        steps = {
            r.step: r for r in patrol.run_patrol(con, being, embedder, now=NOW, llm=model, settings=settings)
        }
        # Each answer is rejected like any malformed one: the mechanical choices stand.
        assert steps["❶ nodes"].counts["root_rejected"] == 1
        assert "JSON nested too deeply" in steps["❶ nodes"].errors[0]
        assert steps["❹ consolidation"].counts["rejected"] >= 1
        assert steps["diary/think_md"].counts == {"diary": 0, "think": 0, "rejected": 2, "scenes": 2}
        assert not (settings.workspace / being / "think.md").exists()
    nodes = dict(con.execute("SELECT being_id, count(*) FROM nodes GROUP BY 1").fetchall())
    assert nodes == {"ada": 2, "bram": 2}
    assert model.usage.failed_calls == model.usage.calls == len(llm_server.requests)


def test_rejected_root_classification_is_counted_with_its_reason(con, llm_server, roots, embedder):
    llm_server.configure("openai:gpt-4o", LLM_MAX_RETRIES="0")
    episodes = [Episode(episode_id="e0", being_id=ADA, ts=TS, speaker="ada", role="user",
                        text="My sister's wedding is next weekend")]  # fmt: skip
    con.register("eps", episodes_table(episodes))
    con.execute("INSERT INTO episodes SELECT *, ?::TIMESTAMP FROM eps", [NOW])
    patrol.step_scenes(con, ADA, NOW)
    llm_server.script([{"labels": [{"node_id": " ", "root": "Business"}]}])
    report = patrol.step_nodes(con, ADA, embedder, patrol.PatrolParams(), NOW, llm=llm())
    assert (report.counts["root_by_llm"], report.counts["root_rejected"]) == (0, 1)
    assert len(report.errors) == 1 and "no valid answer for root" in report.errors[0]
    assert "labels.0.node_id" in report.errors[0]
    # The prototype's choice stands.
    assert con.execute("SELECT cluster_id FROM nodes").fetchall() == [(roots["Private"],)]


def test_patrol_assets_log_why_answers_were_rejected_and_count_them(home, llm_server, embedder):
    import logging

    import dagster as dg

    from assets.journal import journal
    from assets.nodes import nodes
    from mindflow import store
    from mindflow.resources import DuckDBResource, EmbeddingResource

    llm_server.configure("openai:gpt-4o", LLM_MAX_RETRIES="0")
    settings = load_settings()
    with store.connect(settings.duckdb_path) as con:
        episodes = [
            Episode(episode_id=f"e{i}", being_id=ADA, ts=TS + timedelta(minutes=i), speaker="ada", role="user",
                    text=text)
            for i, text in enumerate(["The client meeting went well", "My sister's wedding is next weekend"])
        ]  # fmt: skip
        con.register("eps", episodes_table(episodes))
        con.execute("INSERT INTO episodes SELECT *, ?::TIMESTAMP FROM eps", [NOW])
        patrol.step_scenes(con, ADA, NOW)
    # Every answer is prose: root labels, ❹, diary and think.md are all rejected.
    llm_server.responder = lambda request: "I would rather not answer in JSON."
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("beings", [ADA])
    resources = {"duckdb": DuckDBResource(), "embeddings": EmbeddingResource()}
    meta, warnings = {}, []
    for asset in (nodes, journal):  # in the patrol's order: the journal reads the new nodes
        result = dg.materialize([asset], partition_key=ADA, instance=instance, resources=resources)
        assert result.success
        (event,) = result.get_asset_materialization_events()
        meta[event.asset_key.path[-1]] = {k: v.value for k, v in event.materialization.metadata.items()}
        warnings += [
            e.user_message
            for e in instance.all_logs(result.run_id)
            if e.level == logging.WARNING and e.user_message
        ]
    prompts = [r.body["messages"][0]["content"] for r in llm_server.requests]
    root_calls = sum(p.startswith("You sort a being's memories") for p in prompts)
    consolidate_calls = sum(p.startswith("You consolidate one cluster") for p in prompts)
    assert root_calls == 1 and consolidate_calls >= 1
    assert meta["nodes"]["rejected_llm_answers"] == root_calls + consolidate_calls
    assert meta["journal"]["rejected_llm_answers"] == 2 and meta["journal"]["written"] == 0
    assert any("❶ nodes" in w and "no valid answer for root" in w for w in warnings), warnings
    assert any("❹ consolidation" in w and "no valid answer for consolidate" in w for w in warnings)
    assert any("diary/think_md" in w and "no valid answer for diary" in w for w in warnings)
    assert any("diary/think_md" in w and "no valid answer for think" in w for w in warnings)
    assert not any("SECRET" in w for w in warnings)
