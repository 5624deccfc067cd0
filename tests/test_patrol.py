"""The mechanical patrol (steps ❶ ❷ ❸ ❺ ❼) against hand-computed expectations.

Real DuckDB in tmp_path and the real all-MiniLM-L6-v2; every cosine a test relies on is
computed in the test with the same model and asserted as a precondition, so a change of
model or text that would make a case meaningless fails loudly instead of passing vacuously.
"""

from __future__ import annotations

import json
import math
from datetime import date, datetime, timedelta

import duckdb
import numpy as np
import pytest

from mindflow import patrol
from mindflow.embeddings import Embedder
from mindflow.inbox import episodes_table, ingest
from mindflow.models import Episode
from mindflow.patrol import (
    ROOT_PROTOTYPES,
    PatrolParams,
    ensure_roots,
    node_text,
    root_cluster_id,
    run_patrol,
    step_dying,
    step_merge_small_clusters,
    step_nodes,
    step_revive,
    step_scenes,
    step_session_counts,
)

ADA = "ada"
BOB = "bob"
DAY = "2026-01-05"
TS = datetime(2026, 1, 5, 9, 0, 0)
NOW = datetime(2026, 1, 6, 3, 0, 0)
PARAMS = PatrolParams()

# Texts whose mutual cosines (with the "2026-01-05 " prefix the node text adds) were
# measured with all-MiniLM-L6-v2; the tests re-check every one they depend on.
DEPLOY = [
    "Deployed the new release of the billing service to production",
    "Rolled back the billing service deployment after the release failed",
    "Scheduled the next production deployment of the billing service",
]
DEPLOY_TOO = "Fixed the billing service release pipeline before deploying to production"
BAKING = ["Baked a sourdough loaf with rye flour", "Fed the sourdough starter and baked bread"]
WORK = "The client meeting about the project deadline and budget went well"
PRIVATE = "My sister's wedding is next weekend and the whole family will be there"
SUB_TOPIC = "Deploying software releases of the billing service to production servers"


# --------------------------------------------------------------------------- helpers


def episode(being, eid, text, *, ts=TS, speaker="sam", role="user", importance=None, kind="message"):
    return Episode(
        episode_id=eid,
        being_id=being,
        ts=ts,
        speaker=speaker,
        role=role,
        text=text,
        kind=kind,
        importance=importance,
    )


def insert_episodes(con, episodes):
    con.register("test_episodes", episodes_table(episodes))
    try:
        con.execute("INSERT INTO episodes SELECT *, ?::TIMESTAMP FROM test_episodes", [NOW])
    finally:
        con.unregister("test_episodes")


def unit(v):
    v = np.asarray(v, dtype=np.float64)
    return v / np.linalg.norm(v)


def embed(embedder, text):
    """The unit embedding of one text, computed outside the patrol."""
    return unit(embedder.encode([text])[0])


def dated(text, day=DAY):
    return f"{day} {text}"


def make_nodes(con, embedder, being, texts, *, prefix="e"):
    """Episodes -> scenes -> nodes through the patrol; returns {text: node_id}."""
    ensure_roots(con, being, NOW)
    insert_episodes(con, [episode(being, f"{prefix}{i}", t) for i, t in enumerate(texts)])
    step_scenes(con, being, NOW)
    step_nodes(con, being, embedder, PARAMS, NOW)
    rows = con.execute(
        "SELECT n.scene.action, n.node_id FROM nodes n WHERE n.being_id = ?", [being]
    ).fetchall()
    return dict(rows)


def add_subcluster(con, being, cluster_id, parent_label, vector=None):
    con.execute(
        "INSERT INTO clusters VALUES (?, ?, ?, ?, FALSE, ?::FLOAT[], ?, ?)",
        [
            cluster_id,
            being,
            cluster_id,
            root_cluster_id(being, parent_label),
            None if vector is None else [float(x) for x in vector],
            NOW,
            NOW,
        ],
    )


def node(con, node_id):
    row = con.execute(
        "SELECT status, session_count, cluster_id, importance, pinned FROM nodes WHERE node_id = ?",
        [node_id],
    ).fetchall()[0]
    return dict(zip(["status", "session_count", "cluster_id", "importance", "pinned"], row, strict=True))


def set_node(con, node_id, **values):
    assignments = ", ".join(f"{k} = ?" for k in values)
    con.execute(f"UPDATE nodes SET {assignments} WHERE node_id = ?", [*values.values(), node_id])


def cluster_of(con, being):
    return dict(
        con.execute(
            "SELECT n.scene.action, n.cluster_id FROM nodes n WHERE n.being_id = ?", [being]
        ).fetchall()
    )


def active_vectors(con, cluster_id):
    rows = con.execute(
        "SELECT vector FROM nodes WHERE cluster_id = ? AND status = 'active' ORDER BY node_id",
        [cluster_id],
    ).fetchall()
    return np.asarray([r[0] for r in rows], dtype=np.float64)


def cluster_vector(con, cluster_id):
    v = con.execute("SELECT vector FROM clusters WHERE cluster_id = ?", [cluster_id]).fetchall()[0][0]
    return None if v is None else np.asarray(v, dtype=np.float64)


# --------------------------------------------------------------------------- ❶ scenes


def test_scenes_one_per_episode_with_clamped_importance(con):
    episodes = [
        episode(ADA, "a1", "I moved to Oslo last week.", importance=0.8, ts=datetime(2026, 1, 5, 23, 59, 59)),
        episode(ADA, "a2", "Tea is better than coffee.", importance=None),
        episode(ADA, "a3", "The release is on Friday.", importance=1.7, speaker="mia"),
        episode(ADA, "a4", "Nothing matters much today.", importance=-0.2),
        episode(
            ADA,
            "a5",
            "Said by nobody in particular.",
            speaker=None,
            role="assistant",
            ts=datetime(2026, 2, 1, 0, 0, 0),
        ),
    ]
    insert_episodes(con, episodes)

    report = step_scenes(con, ADA, NOW)

    assert report.counts == {"new": 5}
    rows = con.execute(
        'SELECT episode_ids, action, actors, "when", importance, extractor, note_status '
        "FROM scene_notes WHERE being_id = ? ORDER BY episode_ids[1]",
        [ADA],
    ).fetchall()
    assert rows == [
        (
            ["a1"],
            "I moved to Oslo last week.",
            ["sam"],
            [{"date": "2026-01-05", "action": None}],
            0.8,
            "mechanical",
            "ok",
        ),
        (
            ["a2"],
            "Tea is better than coffee.",
            ["sam"],
            [{"date": "2026-01-05", "action": None}],
            0.5,
            "mechanical",
            "ok",
        ),
        (
            ["a3"],
            "The release is on Friday.",
            ["mia"],
            [{"date": "2026-01-05", "action": None}],
            1.0,
            "mechanical",
            "ok",
        ),
        (
            ["a4"],
            "Nothing matters much today.",
            ["sam"],
            [{"date": "2026-01-05", "action": None}],
            0.0,
            "mechanical",
            "ok",
        ),
        (
            ["a5"],
            "Said by nobody in particular.",
            ["assistant"],
            [{"date": "2026-02-01", "action": None}],
            0.5,
            "mechanical",
            "ok",
        ),
    ]

    again = step_scenes(con, ADA, NOW + timedelta(days=1))
    assert again.counts == {"new": 0}
    assert con.execute("SELECT count(*) FROM scene_notes").fetchall()[0][0] == 5

    # A new episode later gets exactly one new scene; the old ones are not repeated.
    insert_episodes(con, [episode(ADA, "a6", "One more thing.")])
    assert step_scenes(con, ADA, NOW).counts == {"new": 1}
    assert con.execute("SELECT count(*) FROM scene_notes").fetchall()[0][0] == 6


def test_scenes_from_an_ingested_inbox_file(con, settings):
    folder = settings.inbox / ADA
    folder.mkdir(parents=True)
    lines = [
        {"id": "m1", "ts": "2026-01-05T08:00:00Z", "speaker": "sam", "text": "Booked the dentist."},
        {
            "id": "m2",
            "ts": "2026-01-06T08:00:00Z",
            "speaker": "sam",
            "text": "Cancelled the gym.",
            "importance": 0.9,
        },
    ]
    (folder / "chat.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    assert ingest(con, settings.inbox, date(2026, 1, 5), date(2026, 1, 6), now=NOW).new == 2

    assert step_scenes(con, ADA, NOW).counts == {"new": 2}
    rows = con.execute(
        'SELECT action, "when"[1].date, importance FROM scene_notes ORDER BY action'
    ).fetchall()
    assert rows == [("Booked the dentist.", "2026-01-05", 0.5), ("Cancelled the gym.", "2026-01-06", 0.9)]


# --------------------------------------------------------------------------- ❶ nodes


def test_node_text_is_when_action_feeling():
    when = [{"date": "2026-01-05", "action": None}, {"date": "2026-01-07", "action": "again"}]
    assert node_text(when, "Walked home", "tired") == "2026-01-05 2026-01-07 again Walked home tired"
    assert node_text(None, "Walked home", None) == "Walked home"
    assert node_text([], None, "calm") == "calm"


def test_roots_two_per_being_created_once(con):
    assert ensure_roots(con, ADA, NOW).counts == {"created": 2}
    assert ensure_roots(con, ADA, NOW).counts == {"created": 0}
    ensure_roots(con, BOB, NOW)
    rows = con.execute(
        "SELECT being_id, label, parent_id, is_parent FROM clusters ORDER BY being_id, label"
    ).fetchall()
    assert rows == [
        (ADA, "Business", None, True),
        (ADA, "Private", None, True),
        (BOB, "Business", None, True),
        (BOB, "Private", None, True),
    ]
    ids = {r[0] for r in con.execute("SELECT cluster_id FROM clusters").fetchall()}
    assert len(ids) == 4  # Bob's roots are not Ada's


def test_nodes_fresh_active_embedded_once(con, embedder):
    ensure_roots(con, ADA, NOW)
    insert_episodes(
        con,
        [
            episode(ADA, "n1", DEPLOY[0], importance=0.9),
            episode(ADA, "n2", PRIVATE, importance=None),
            # Same text, same day: the same node text, embedded once.
            episode(ADA, "n3", PRIVATE, importance=1.4, ts=TS + timedelta(hours=2)),
        ],
    )
    step_scenes(con, ADA, NOW)
    before = embedder.stats["embedded"]

    report = step_nodes(con, ADA, embedder, PARAMS, NOW)

    assert report.counts["new"] == 3
    # Two distinct node texts and the two root prototypes, nothing else.
    assert embedder.stats["embedded"] - before == 4
    assert con.execute("SELECT count(*) FROM embedding_cache").fetchall()[0][0] == 4
    rows = con.execute(
        "SELECT source_episode_ids, fresh, status, session_count, pinned, importance, vector, "
        "created_at, episode_ts, kind FROM nodes ORDER BY source_episode_ids[1]"
    ).fetchall()
    expected_importance = {"n1": 0.9, "n2": 0.5, "n3": 1.0}
    expected_text = {"n1": dated(DEPLOY[0]), "n2": dated(PRIVATE), "n3": dated(PRIVATE)}
    for ids, fresh, status, sessions, pinned, importance, vector, created, ep_ts, kind in rows:
        eid = ids[0]
        assert (fresh, status, sessions, pinned, kind) == (True, "active", 0, False, "message")
        assert importance == expected_importance[eid]
        assert created == NOW
        assert ep_ts == (TS if eid != "n3" else TS + timedelta(hours=2))
        want = embed(embedder, expected_text[eid])
        assert np.allclose(np.asarray(vector), want, atol=1e-5), eid
    # Every node sits in one of its being's clusters.
    assert (
        con.execute(
            "SELECT count(*) FROM nodes n JOIN clusters c USING (cluster_id) WHERE c.being_id = n.being_id"
        ).fetchall()[0][0]
        == 3
    )

    # The cache lives in DuckDB: a brand-new embedder (fresh stats) finds every vector there.
    insert_episodes(con, [episode(ADA, "n4", DEPLOY[0], ts=TS + timedelta(hours=5))])
    step_scenes(con, ADA, NOW)
    fresh_embedder = Embedder()
    assert step_nodes(con, ADA, fresh_embedder, PARAMS, NOW).counts["new"] == 1
    assert fresh_embedder.stats["embedded"] == 0
    assert con.execute("SELECT count(*) FROM embedding_cache").fetchall()[0][0] == 4
    v1, v4 = (
        np.asarray(
            con.execute("SELECT vector FROM nodes WHERE source_episode_ids[1] = ?", [e]).fetchall()[0][0]
        )
        for e in ("n1", "n4")
    )
    assert np.array_equal(v1, v4)

    # Nothing new: no node, no embedding.
    assert step_nodes(con, ADA, fresh_embedder, PARAMS, NOW).counts["new"] == 0
    assert fresh_embedder.stats["embedded"] == 0
    assert con.execute("SELECT count(*) FROM nodes").fetchall()[0][0] == 4


def test_a_patrol_with_nothing_new_never_loads_a_model(con, embedder, monkeypatch):
    """A nightly patrol in a fresh process with no new scene must not spend seconds loading torch."""
    ensure_roots(con, ADA, NOW)
    insert_episodes(con, [episode(ADA, "n1", DEPLOY[0])])
    step_scenes(con, ADA, NOW)
    assert patrol.embed_new_scenes(con, [ADA], embedder) == 1
    step_nodes(con, ADA, embedder, PARAMS, NOW)

    def no_model(name):
        raise AssertionError(f"model {name} loaded with nothing to embed")

    monkeypatch.setattr("mindflow.embeddings._load_sentence_transformer", no_model)
    unloaded = Embedder()
    assert patrol.embed_new_scenes(con, [ADA, BOB], unloaded) == 0
    run_patrol(con, ADA, unloaded, PARAMS, NOW + timedelta(days=1))
    assert unloaded.stats["embedded"] == 0


def test_new_node_joins_near_subcluster_else_closest_root(con, embedder):
    ensure_roots(con, ADA, NOW)
    sub_vector = embed(embedder, SUB_TOPIC)
    add_subcluster(con, ADA, "c-deploy", "Business", sub_vector)
    near = [DEPLOY[0], DEPLOY[1]]
    work2 = "Reviewed the quarterly budget with the finance team at the office"
    business, private = root_cluster_id(ADA, "Business"), root_cluster_id(ADA, "Private")
    prototypes = {k: embed(embedder, t) for k, t in ROOT_PROTOTYPES.items()}

    # Preconditions, measured with the real model.
    for t in near:
        assert float(embed(embedder, dated(t)) @ sub_vector) >= 0.45 + 0.1
    for t in (WORK, work2, PRIVATE):
        v = embed(embedder, dated(t))
        assert float(v @ sub_vector) < 0.45 - 0.1
    for t, label in ((WORK, "Business"), (work2, "Business"), (PRIVATE, "Private")):
        v = embed(embedder, dated(t))
        other = "Private" if label == "Business" else "Business"
        assert float(v @ prototypes[label]) > float(v @ prototypes[other]) + 0.1

    insert_episodes(con, [episode(ADA, f"k{i}", t) for i, t in enumerate([*near, WORK, work2, PRIVATE])])
    step_scenes(con, ADA, NOW)
    report = step_nodes(con, ADA, embedder, PARAMS, NOW)

    assert report.counts == {"new": 5, "to_subcluster": 2, "to_root": 3}
    assert cluster_of(con, ADA) == {
        near[0]: "c-deploy",
        near[1]: "c-deploy",
        WORK: business,
        work2: business,
        PRIVATE: private,
    }
    # Cluster vectors are the plain mean of their active nodes' vectors.
    for cid in ("c-deploy", business, private):
        assert np.allclose(cluster_vector(con, cid), active_vectors(con, cid).mean(axis=0), atol=1e-5)

    # A node that is no longer active leaves the mean.
    work_node = con.execute("SELECT node_id FROM nodes WHERE scene.action = ?", [work2]).fetchall()[0][0]
    set_node(con, work_node, status="dying")
    patrol.recompute_cluster_vectors(con, ADA, NOW)
    assert len(active_vectors(con, business)) == 1
    assert np.allclose(cluster_vector(con, business), active_vectors(con, business)[0], atol=1e-6)
    # ... and a cluster left with no active node has no centre.
    set_node(
        con,
        con.execute("SELECT node_id FROM nodes WHERE scene.action = ?", [PRIVATE]).fetchall()[0][0],
        status="dead",
    )
    patrol.recompute_cluster_vectors(con, ADA, NOW)
    assert cluster_vector(con, private) is None


@pytest.mark.parametrize("cosine, joins", [(0.4505, True), (0.45 - 0.0005, False)])
def test_subcluster_threshold_is_cosine_045(con, embedder, cosine, joins):
    """A sub-cluster built at an exact cosine to the node: >= 0.45 joins, below goes to a root."""
    v = embed(embedder, dated(DEPLOY[0]))
    # A unit vector orthogonal to v, then one at exactly `cosine` from v.
    w = embed(embedder, "a completely unrelated sentence about penguins")
    w = unit(w - (w @ v) * v)
    target = cosine * v + math.sqrt(1 - cosine**2) * w
    assert abs(float(unit(target) @ v) - cosine) < 1e-9
    ensure_roots(con, ADA, NOW)
    add_subcluster(con, ADA, "c-edge", "Business", target)
    insert_episodes(con, [episode(ADA, "x", DEPLOY[0])])
    step_scenes(con, ADA, NOW)
    step_nodes(con, ADA, embedder, PARAMS, NOW)
    got = cluster_of(con, ADA)[DEPLOY[0]]
    if joins:
        assert got == "c-edge"
    else:
        assert got in (root_cluster_id(ADA, "Business"), root_cluster_id(ADA, "Private"))


# --------------------------------------------------------------------------- ❷ ❸ ❺


def test_session_counts_advance_active_only(con, embedder):
    ids = make_nodes(con, embedder, ADA, [WORK, PRIVATE, DEPLOY[0]])
    other = make_nodes(con, embedder, BOB, [WORK], prefix="b")
    set_node(con, ids[WORK], session_count=4)
    set_node(con, ids[PRIVATE], session_count=7, status="dying")
    set_node(con, ids[DEPLOY[0]], session_count=9, status="dead")

    report = step_session_counts(con, ADA, NOW)

    assert report.counts == {"advanced": 1, "already_counted": 0}
    assert node(con, ids[WORK])["session_count"] == 5
    assert node(con, ids[PRIVATE])["session_count"] == 7
    assert node(con, ids[DEPLOY[0]])["session_count"] == 9
    assert node(con, other[WORK])["session_count"] == 0  # another being's patrol


def _session_counts(con, ids) -> list[int]:
    return [node(con, i)["session_count"] for i in ids]


def test_a_patrol_session_advances_session_counts_once(con, embedder):
    """A step retried, or a run re-executed, in the same session (its root run) ages the being's
    memories once; the next session ages them again, and another being's session is its own."""
    ids = make_nodes(con, embedder, ADA, [WORK, PRIVATE])
    other = make_nodes(con, embedder, BOB, [WORK], prefix="b")
    assert step_session_counts(con, ADA, NOW, "run-1").counts == {"advanced": 2, "already_counted": 0}
    assert step_session_counts(con, ADA, NOW, "run-1").counts == {"advanced": 0, "already_counted": 1}
    assert _session_counts(con, ids.values()) == [1, 1]
    assert step_session_counts(con, BOB, NOW, "run-1").counts == {"advanced": 1, "already_counted": 0}
    assert step_session_counts(con, ADA, NOW, "run-2").counts == {"advanced": 2, "already_counted": 0}
    assert _session_counts(con, ids.values()) == [2, 2]
    assert _session_counts(con, other.values()) == [1]
    assert con.execute("SELECT being_id, run_id, advanced FROM patrol_sessions ORDER BY ALL").fetchall() == [
        (ADA, "run-1", 2),
        (ADA, "run-2", 2),
        (BOB, "run-1", 1),
    ]


def test_a_failed_session_count_records_no_session_and_its_retry_advances_once(con, embedder):
    ids = make_nodes(con, embedder, ADA, [WORK, PRIVATE])
    # Another writer holds an uncommitted change of one node's session count: the step's UPDATE
    # meets a write-write conflict, as a kill mid-step would leave it undone.
    other = con.cursor()
    other.execute("BEGIN TRANSACTION")
    other.execute("UPDATE nodes SET session_count = 5 WHERE node_id = ?", [ids[WORK]])
    with pytest.raises(duckdb.TransactionException):
        step_session_counts(con, ADA, NOW, "run-1")
    other.execute("ROLLBACK")
    other.close()
    assert con.execute("SELECT count(*) FROM patrol_sessions").fetchall() == [(0,)]
    assert _session_counts(con, ids.values()) == [0, 0]

    assert step_session_counts(con, ADA, NOW, "run-1").counts == {"advanced": 2, "already_counted": 0}
    assert step_session_counts(con, ADA, NOW, "run-1").counts["advanced"] == 0
    assert _session_counts(con, ids.values()) == [1, 1]


def test_dying_at_the_edge(con, embedder):
    texts = ["edge a", "edge b", "edge c", "edge d", "edge e", "edge f"]
    ids = make_nodes(con, embedder, ADA, texts)
    cases = {
        # text: (importance, session_count, pinned)
        "edge a": (0.5, 69, False),
        "edge b": (0.5, 70, False),
        "edge c": (0.05, 0, False),  # value exactly 0.05: <= 0.05 is dying
        "edge d": (float(np.nextafter(0.05, 1.0)), 0, False),
        "edge e": (0.01, 500, True),  # pinned: never dies
        "edge f": (0.0, 0, False),
    }
    for t, (imp, sessions, pinned) in cases.items():
        set_node(con, ids[t], importance=imp, session_count=sessions, pinned=pinned)
    value = {t: imp * math.exp(-s / 30) for t, (imp, s, _) in cases.items()}
    assert 0.0501 < value["edge a"] < 0.0502
    assert 0.0484 < value["edge b"] < 0.0485
    assert value["edge c"] == 0.05 and value["edge d"] > 0.05

    report = step_dying(con, ADA, PARAMS, NOW)

    status = {t: node(con, ids[t])["status"] for t in texts}
    assert status == {
        "edge a": "active",
        "edge b": "dying",
        "edge c": "dying",
        "edge d": "active",
        "edge e": "active",
        "edge f": "dying",
    }
    assert report.counts == {"dying": 3}
    logged = con.execute(
        "SELECT memory_ref, operation, after->>'status' FROM history WHERE operation <> 'formed' ORDER BY 1"
    ).fetchall()
    assert sorted(logged) == sorted((ids[t], "dying", "dying") for t in ("edge b", "edge c", "edge f"))
    # Already dying: not counted again.
    assert step_dying(con, ADA, PARAMS, NOW).counts == {"dying": 0}


def test_revive_dead_nodes_only_when_reactivated_since_death(con, embedder):
    texts = ["dead a", "dead b", "dead c", "dead d", "dead e", "dead f", "dying g"]
    ids = make_nodes(con, embedder, ADA, texts)
    # Reactivated since death (2 recalls after dying at 0): revives when its value is above 0.05.
    set_node(con, ids["dead a"], status="dead", importance=0.5, session_count=10, reactivation_count=2,
             died_reactivations=0)  # 0.358  # fmt: skip
    set_node(con, ids["dead b"], status="dead", importance=0.5, session_count=90, reactivation_count=2,
             died_reactivations=0)  # 0.0249  # fmt: skip
    set_node(con, ids["dead c"], status="dead", importance=0.05, session_count=0, reactivation_count=2,
             died_reactivations=0)  # exactly 0.05  # fmt: skip
    set_node(con, ids["dead d"], status="dead", importance=0.01, session_count=90, pinned=True)
    # A high value alone does not bring a dead node back: nobody recalled it since it died.
    set_node(con, ids["dead e"], status="dead", importance=0.9, session_count=0, reactivation_count=4,
             died_reactivations=4)  # fmt: skip
    # Absorbed by a merge: never revives on its own, recalled or not.
    set_node(con, ids["dead f"], status="dead", importance=0.9, session_count=0, reactivation_count=6,
             died_reactivations=0, absorbed_into=ids["dead a"])  # fmt: skip
    set_node(con, ids["dying g"], status="dying", importance=0.5, session_count=0)
    assert 0.5 * math.exp(-10 / 30) > 0.05 and 0.5 * math.exp(-90 / 30) <= 0.05

    report = step_revive(con, ADA, PARAMS, NOW)

    status = {t: node(con, ids[t])["status"] for t in texts}
    assert status == {
        "dead a": "active",
        "dead b": "dead",
        "dead c": "dead",
        "dead d": "active",
        "dead e": "dead",
        "dead f": "dead",
        "dying g": "active",
    }
    assert report.counts == {"revived": 3}
    revived = con.execute(
        "SELECT memory_ref FROM history WHERE operation = 'revived' AND after->>'status' = 'active'"
    ).fetchall()
    assert sorted(r[0] for r in revived) == sorted([ids["dead a"], ids["dead d"], ids["dying g"]])


def _transitions(con, operation: str) -> list[tuple[str, str, str]]:
    return con.execute(
        "SELECT memory_ref, before->>'status', after->>'status' FROM history WHERE operation = ? ORDER BY 1",
        [operation],
    ).fetchall()


def test_a_failed_status_step_leaves_no_history_and_its_retry_writes_each_change_once(con, embedder):
    ids = make_nodes(con, embedder, ADA, ["fading x", "fading y", "back z"])
    set_node(con, ids["fading x"], importance=0.01, session_count=0)
    set_node(con, ids["fading y"], importance=0.01, session_count=0)
    set_node(con, ids["back z"], status="dying", importance=0.5, session_count=0)
    # Another writer holds an uncommitted change of each step's node status (DuckDB versions
    # updates by column): each step's UPDATE meets a write-write conflict, ❺'s after its
    # history rows were written, as a kill between its two statements would.
    for step, node_id in ((step_dying, ids["fading y"]), (step_revive, ids["back z"])):
        other = con.cursor()
        other.execute("BEGIN TRANSACTION")
        other.execute("UPDATE nodes SET status = 'dead' WHERE node_id = ?", [node_id])
        with pytest.raises(duckdb.TransactionException):
            step(con, ADA, PARAMS, NOW)
        other.execute("ROLLBACK")
        other.close()
    assert _transitions(con, "dying") == _transitions(con, "revived") == []
    assert [node(con, ids[t])["status"] for t in ("fading x", "fading y", "back z")] == [
        "active",
        "active",
        "dying",
    ]

    assert step_dying(con, ADA, PARAMS, NOW).counts == {"dying": 2}
    assert step_revive(con, ADA, PARAMS, NOW).counts == {"revived": 1}
    assert _transitions(con, "dying") == sorted(
        [(ids["fading x"], "active", "dying"), (ids["fading y"], "active", "dying")]
    )
    assert _transitions(con, "revived") == [(ids["back z"], "dying", "active")]


# --------------------------------------------------------------------------- ❼


def test_a_failed_small_cluster_merge_leaves_no_history_and_its_retry_moves_each_node_once(con, embedder):
    ids = make_nodes(con, embedder, ADA, BAKING)
    business = root_cluster_id(ADA, "Business")
    add_subcluster(con, ADA, "c-small", "Business")
    for t in BAKING:
        set_node(con, ids[t], cluster_id="c-small")
    moves = "SELECT memory_ref, after->>'cluster_id' FROM history WHERE operation = 'moved' ORDER BY 1"
    # Another writer holds an uncommitted move of one of its nodes: the step's UPDATE meets a
    # write-write conflict after the moves' history rows were written.
    other = con.cursor()
    other.execute("BEGIN TRANSACTION")
    other.execute("UPDATE nodes SET cluster_id = ? WHERE node_id = ?", [business, ids[BAKING[0]]])
    with pytest.raises(duckdb.TransactionException):
        step_merge_small_clusters(con, ADA, PARAMS, NOW)
    other.execute("ROLLBACK")
    other.close()
    assert con.execute(moves).fetchall() == []
    assert [node(con, ids[t])["cluster_id"] for t in BAKING] == ["c-small", "c-small"]
    assert con.execute("SELECT count(*) FROM clusters WHERE cluster_id = 'c-small'").fetchall() == [(1,)]

    assert step_merge_small_clusters(con, ADA, PARAMS, NOW).counts["moved"] == 2
    assert con.execute(moves).fetchall() == sorted((ids[t], business) for t in BAKING)
    assert con.execute("SELECT count(*) FROM clusters WHERE cluster_id = 'c-small'").fetchall() == [(0,)]


def test_merge_small_clusters(con, embedder):
    texts = [*DEPLOY, DEPLOY_TOO, *BAKING, "Deployed another billing service release to production"]
    private_deploy = texts[-1]
    ids = make_nodes(con, embedder, ADA, texts)
    business, private = root_cluster_id(ADA, "Business"), root_cluster_id(ADA, "Private")
    for cid, parent in (
        ("c-big", "Business"),
        ("c-similar", "Business"),
        ("c-far", "Business"),
        ("c-empty", "Business"),
        ("c-ghosts", "Business"),
        ("c-private", "Private"),
    ):
        add_subcluster(con, ADA, cid, parent)
    for t in DEPLOY:
        set_node(con, ids[t], cluster_id="c-big")
    set_node(con, ids[DEPLOY_TOO], cluster_id="c-similar")
    for t in BAKING:
        set_node(con, ids[t], cluster_id="c-far")
    set_node(con, ids[private_deploy], cluster_id="c-private")
    # c-ghosts holds only a dead node: no active node, so it goes; the node goes to the root.
    ghost = make_nodes(con, embedder, ADA, ["An old dead memory"], prefix="g")["An old dead memory"]
    set_node(con, ghost, cluster_id="c-ghosts", status="dead")

    # Preconditions on the mean vectors the step will compare.
    vec = {t: embed(embedder, dated(t)) for t in texts}
    big = unit(np.mean([vec[t] for t in DEPLOY], axis=0))
    far = unit(np.mean([vec[t] for t in BAKING], axis=0))
    assert float(vec[DEPLOY_TOO] @ big) > 0.45 + 0.1
    assert float(vec[DEPLOY_TOO] @ big) > float(vec[DEPLOY_TOO] @ far)
    big_after = unit(np.mean([vec[t] for t in [*DEPLOY, DEPLOY_TOO]], axis=0))
    assert float(far @ big_after) < 0.45 - 0.05
    assert float(vec[private_deploy] @ big) > 0.45 + 0.1  # similar, but not a sibling

    report = step_merge_small_clusters(con, ADA, PARAMS, NOW)

    assert cluster_of(con, ADA) == {
        **{t: "c-big" for t in DEPLOY},
        DEPLOY_TOO: "c-big",
        **{t: business for t in BAKING},
        private_deploy: private,
        "An old dead memory": business,
    }
    remaining = {r[0] for r in con.execute("SELECT cluster_id FROM clusters").fetchall()}
    assert remaining == {business, private, "c-big"}
    assert report.counts == {
        "deleted": 1,
        "merged_to_sibling": 1,
        "merged_to_root": 3,
        "moved": 5,
    }
    # The surviving cluster's centre includes the node it absorbed.
    assert np.allclose(cluster_vector(con, "c-big"), active_vectors(con, "c-big").mean(axis=0), atol=1e-5)
    assert len(active_vectors(con, "c-big")) == 4

    # Roots are never deleted, even when empty of active nodes; nothing more to merge.
    con.execute("UPDATE nodes SET status = 'dead'")
    again = step_merge_small_clusters(con, ADA, PARAMS, NOW)
    assert again.counts["merged_to_root"] == 1  # c-big, now without active nodes
    assert {r[0] for r in con.execute("SELECT cluster_id FROM clusters").fetchall()} == {
        business,
        private,
    }


def test_merge_leaves_a_cluster_that_grew_past_the_limit(con, embedder):
    """Two small similar siblings: one absorbs the other, and the result (4 nodes) stays."""
    texts = [*DEPLOY, DEPLOY_TOO]
    ids = make_nodes(con, embedder, ADA, texts)
    add_subcluster(con, ADA, "c-a", "Business")
    add_subcluster(con, ADA, "c-b", "Business")
    for t in texts[:2]:
        set_node(con, ids[t], cluster_id="c-a")
    for t in texts[2:]:
        set_node(con, ids[t], cluster_id="c-b")
    vec = {t: embed(embedder, dated(t)) for t in texts}
    a = unit(np.mean([vec[t] for t in texts[:2]], axis=0))
    b = unit(np.mean([vec[t] for t in texts[2:]], axis=0))
    assert float(a @ b) > 0.45 + 0.1

    report = step_merge_small_clusters(con, ADA, PARAMS, NOW)

    placed = set(cluster_of(con, ADA).values())
    assert len(placed) == 1
    survivor = placed.pop()
    assert survivor in ("c-a", "c-b")
    assert report.counts["merged_to_sibling"] == 1
    assert report.counts["merged_to_root"] == 0
    assert len(active_vectors(con, survivor)) == 4


# --------------------------------------------------------------------------- beings, reruns


def test_beings_never_share_clusters(con, embedder):
    texts = [*DEPLOY, WORK, PRIVATE]
    for being in (ADA, BOB):
        ensure_roots(con, being, NOW)
        # Same episode ids and texts in both beings.
        insert_episodes(con, [episode(being, f"e{i}", t) for i, t in enumerate(texts)])
    # Only Ada has a deployment sub-cluster; Bob's deployment notes must not land in it.
    add_subcluster(con, ADA, "c-ada-deploy", "Business", embed(embedder, SUB_TOPIC))

    prototypes = {k: embed(embedder, t) for k, t in ROOT_PROTOTYPES.items()}
    for t in DEPLOY:
        v = embed(embedder, dated(t))
        assert float(v @ prototypes["Business"]) > float(v @ prototypes["Private"])
    v = embed(embedder, dated(PRIVATE))
    assert float(v @ prototypes["Private"]) > float(v @ prototypes["Business"])

    ada_reports = run_patrol(con, ADA, embedder, now=NOW)
    before = embedder.stats["embedded"]
    bob_reports = run_patrol(con, BOB, embedder, now=NOW)

    assert embedder.stats["embedded"] == before  # same texts: all from the cache
    assert ada_reports[2].counts["new"] == 5 and bob_reports[2].counts["new"] == 5
    assert ada_reports[2].counts["to_subcluster"] == 3
    assert bob_reports[2].counts["to_subcluster"] == 0
    mixed = con.execute(
        "SELECT count(*) FROM nodes n JOIN clusters c USING (cluster_id) WHERE c.being_id <> n.being_id"
    ).fetchall()[0][0]
    assert mixed == 0
    assert (
        con.execute(
            "SELECT count(*) FROM nodes WHERE cluster_id IS NULL OR cluster_id NOT IN "
            "(SELECT cluster_id FROM clusters)"
        ).fetchall()[0][0]
        == 0
    )
    ada, bob = cluster_of(con, ADA), cluster_of(con, BOB)
    assert {ada[t] for t in DEPLOY} == {"c-ada-deploy"}
    assert {bob[t] for t in DEPLOY} == {root_cluster_id(BOB, "Business")}
    assert bob[PRIVATE] == root_cluster_id(BOB, "Private")
    assert con.execute("SELECT being_id, count(*) FROM scene_notes GROUP BY 1 ORDER BY 1").fetchall() == [
        (ADA, 5),
        (BOB, 5),
    ]
    # Ada's cluster centre is made of Ada's nodes only.
    assert np.allclose(
        cluster_vector(con, "c-ada-deploy"), active_vectors(con, "c-ada-deploy").mean(axis=0), atol=1e-5
    )
    assert len(active_vectors(con, "c-ada-deploy")) == 3


def test_run_patrol_twice_is_stable_and_advances_sessions(con, embedder):
    ensure_roots(con, ADA, NOW)
    add_subcluster(con, ADA, "c-deploy", "Business", embed(embedder, SUB_TOPIC))
    texts = [*DEPLOY, DEPLOY_TOO, WORK, PRIVATE, *BAKING]
    insert_episodes(con, [episode(ADA, f"e{i}", t) for i, t in enumerate(texts)])

    def snapshot():
        return {
            "nodes": con.execute("SELECT count(*) FROM nodes").fetchall()[0][0],
            "clusters": sorted(r[0] for r in con.execute("SELECT cluster_id FROM clusters").fetchall()),
            "scenes": con.execute("SELECT count(*) FROM scene_notes").fetchall()[0][0],
            "cache": con.execute("SELECT count(*) FROM embedding_cache").fetchall()[0][0],
            "placement": cluster_of(con, ADA),
        }

    first = run_patrol(con, ADA, embedder, now=NOW)
    assert [r.step for r in first][0] == "roots"
    state1 = snapshot()
    sessions1 = dict(con.execute("SELECT node_id, session_count FROM nodes").fetchall())
    assert set(sessions1.values()) == {1}
    assert state1["nodes"] == len(texts)
    assert "c-deploy" in state1["clusters"]  # 4 active deployment nodes keep it alive

    before = embedder.stats["embedded"]
    second = run_patrol(con, ADA, embedder, now=NOW + timedelta(days=1))

    assert embedder.stats["embedded"] == before
    assert snapshot() == state1
    sessions2 = dict(con.execute("SELECT node_id, session_count FROM nodes").fetchall())
    assert {k: v - sessions1[k] for k, v in sessions2.items()} == {k: 1 for k in sessions1}
    counts = {r.step: r.counts for r in second}
    assert counts["❶ scenes"] == {"new": 0}
    assert counts["❶ nodes"]["new"] == 0
    assert counts["❷ session counts"] == {"advanced": len(texts), "already_counted": 0}
