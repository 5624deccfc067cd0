"""❺ revival is driven by recall (seed 002): merges stay merged, recalled memories stay alive.

Real DuckDB, real recall event files, the patrol's own `run`, and the loopback model server
for the ❹ consolidation answer.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import pytest

from mindflow import events, patrol
from mindflow.config import load_settings
from mindflow.llm import resolve

ADA = "ada"
NOW = datetime(2026, 1, 6, 3, 0, 0)
TS = datetime(2026, 1, 5, 9, 0, 0)


def add_node(con, node_id, cluster_id, *, importance=0.5, status="active", session_count=0, seed=0):
    vector = np.random.default_rng(seed).normal(size=8)
    vector = (vector / np.linalg.norm(vector)).tolist()
    con.execute(
        """
        INSERT INTO nodes (node_id, being_id, scene_id, scene, feeling, importance, cluster_id, themes,
            kind, session_count, status, fresh, pinned, reactivation_count, source_episode_ids,
            episode_ts, vector, created_at, updated_at)
        VALUES (?, ?, NULL, {'action': ?, 'actors': ['ada'], 'when': [{'date': '2026-01-05', 'action': NULL}],
                'setting': NULL, 'dialogue': NULL, 'sensory': NULL},
                'calm', ?, ?, [], 'message', ?, ?, TRUE, FALSE, 0, [?], ?, ?::FLOAT[], ?, ?)
        """,
        [node_id, ADA, f"memory {node_id}", importance, cluster_id, session_count, status,
         f"ep-{node_id}", TS + timedelta(minutes=seed), vector, NOW, NOW],
    )  # fmt: skip


def state(con, node_id):
    row = con.execute(
        "SELECT status, session_count, reactivation_count, absorbed_into FROM nodes WHERE node_id = ?",
        [node_id],
    ).fetchall()[0]
    return dict(zip(["status", "sessions", "reactivations", "absorbed_into"], row, strict=True))


def lived(con, node_id):
    """Status, sessions and reactivations (columns every schema version has)."""
    row = con.execute(
        "SELECT status, session_count, reactivation_count FROM nodes WHERE node_id = ?", [node_id]
    ).fetchall()[0]
    return dict(zip(["status", "sessions", "reactivations"], row, strict=True))


def recalled(settings, tool, refs, statuses, ts):
    events.append_events(settings.events, [events.recall_event(ADA, tool, refs, statuses, ts=ts)])


@pytest.fixture
def business(con):
    patrol.ensure_roots(con, ADA, NOW)
    return patrol.root_cluster_id(ADA, "Business")


def test_a_node_merged_by_consolidation_is_not_revived_in_the_same_patrol(
    con, llm_server, business, embedder, settings
):
    llm_server.configure("openai:gpt-4o")
    add_node(con, "n-a", business, importance=0.5, seed=1)
    add_node(con, "n-b", business, importance=0.4, seed=2)
    llm_server.script([{"merges": [{"survivor": "n-a", "absorbed": ["n-b"]}], "make_dead": []}])

    report = patrol.run(
        con, ADA, embedder, now=NOW, events_dir=settings.events, llm=resolve(load_settings(), "patrol")
    )

    assert report.consolidated.counts["merged"] == 1
    # Its value 0.4 * exp(-1/30) is far above 0.05, which used to bring it back at ❺.
    assert report.revived.counts == {"revived": 0}
    assert state(con, "n-b")["status"] == "dead"
    assert state(con, "n-b")["absorbed_into"] == "n-a"
    assert state(con, "n-a")["status"] == "active"
    assert con.execute("SELECT count(*) FROM history WHERE operation = 'revived'").fetchall()[0][0] == 0

    # A recall of the absorbed memory reinforces its survivor; the absorbed one stays dead.
    recalled(settings, "search_memory", ["n-b"], ["dead"], NOW + timedelta(hours=1))
    patrol.run(con, ADA, embedder, now=NOW + timedelta(days=1), events_dir=settings.events)
    assert state(con, "n-b") == {"status": "dead", "sessions": 1, "reactivations": 0, "absorbed_into": "n-a"}
    assert state(con, "n-a")["reactivations"] == 2
    # Merged again into a third node: the pointer follows to the new survivor.
    add_node(con, "n-c", business, importance=0.6, seed=3)
    llm_server.script([{"merges": [{"survivor": "n-c", "absorbed": ["n-a"]}], "make_dead": []}])
    patrol.step_consolidate(con, ADA, resolve(load_settings(), "patrol"), NOW + timedelta(days=2))
    assert state(con, "n-a")["absorbed_into"] == "n-c"
    assert state(con, "n-b")["absorbed_into"] == "n-c"


def test_daily_recalls_keep_a_memory_alive_while_its_twin_fades(con, business, embedder, settings):
    add_node(con, "n-kept", business, importance=0.1, seed=1)
    add_node(con, "n-left", business, importance=0.1, seed=2)
    # 0.1 * exp(-sessions/30) <= 0.05 from the 21st session on.
    day = NOW
    for _ in range(25):
        recalled(settings, "recall", ["n-kept"], ["active"], day - timedelta(hours=5))
        patrol.run(con, ADA, embedder, now=day, events_dir=settings.events)
        day += timedelta(days=1)

    kept, left = lived(con, "n-kept"), lived(con, "n-left")
    assert kept["status"] == "active" and kept["sessions"] == 1 and kept["reactivations"] == 25
    assert left["status"] == "dying" and left["sessions"] == 21

    # One recall of the dying memory: its session count resets and ❺ brings it back.
    recalled(settings, "recall", ["n-left"], ["dying"], day - timedelta(hours=5))
    report = patrol.run(con, ADA, embedder, now=day, events_dir=settings.events)
    assert report.revived.counts == {"revived": 1}
    assert lived(con, "n-left")["status"] == "active"


def test_a_dead_memory_comes_back_only_after_it_was_recalled(con, business, embedder, settings):
    add_node(con, "n-dead", business, importance=0.5, status="dead", session_count=3, seed=1)
    con.execute("UPDATE nodes SET died_reactivations = reactivation_count WHERE node_id = 'n-dead'")

    report = patrol.run(con, ADA, embedder, now=NOW, events_dir=settings.events)
    assert report.revived.counts == {"revived": 0}  # value 0.45, but nobody asked for it
    assert state(con, "n-dead")["status"] == "dead"

    recalled(settings, "search_memory", ["n-dead"], ["dead"], NOW + timedelta(hours=2))
    report = patrol.run(con, ADA, embedder, now=NOW + timedelta(days=1), events_dir=settings.events)
    assert report.revived.counts == {"revived": 1}
    assert state(con, "n-dead") == {
        "status": "active",
        "sessions": 0,
        "reactivations": 2,
        "absorbed_into": None,
    }
    revived = con.execute(
        "SELECT before->>'status' FROM history WHERE operation = 'revived' AND memory_ref = 'n-dead'"
    ).fetchall()
    assert revived == [("dead",)]
