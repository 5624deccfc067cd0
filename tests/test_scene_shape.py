"""The Being design's scene (seed 002): VADSNT emotion by name, dialogue and sensory as lists,
both forms of `when`, scene_to_text, and the migration of scenes stored before."""

from __future__ import annotations

from datetime import datetime

import duckdb
import pytest
from pydantic import ValidationError

from mindflow import store
from mindflow.prompts.extraction import Scene
from mindflow.scenes import scene_to_text

BASE = {"episode_ids": ["e1"], "action": "Met Hashi at the station", "importance": 0.6}
NAMED = {"valence": 0.8, "arousal": 0.6, "dominance": 0.5, "safety": 0.9, "novelty": 0.7, "trust": 0.95}


def test_emotion_is_vadsnt_by_name_or_in_order():
    by_name = Scene.model_validate(BASE | {"emotion": NAMED}).emotion
    in_order = Scene.model_validate(BASE | {"emotion": list(NAMED.values())}).emotion
    assert by_name == in_order
    assert (by_name.safety, by_name.trust) == (0.9, 0.95)
    with pytest.raises(ValidationError):
        Scene.model_validate(BASE | {"emotion": NAMED | {"trust": 1.2}})


def test_dialogue_and_sensory_are_lists_of_strings():
    scene = Scene.model_validate(
        BASE | {"dialogue": ["Long time!", "Too long."], "sensory": ["rain", "diesel"]}
    )
    assert (scene.dialogue, scene.sensory) == (["Long time!", "Too long."], ["rain", "diesel"])
    one = Scene.model_validate(BASE | {"dialogue": "Long time!", "sensory": None})
    assert (one.dialogue, one.sensory) == (["Long time!"], [])


@pytest.mark.parametrize(
    "when, expected",
    [
        ("2024-03-02", [("2024-03-02", None)]),
        (["2024-03-02", "2024-03-05"], [("2024-03-02", None), ("2024-03-05", None)]),
        ([{"date": "2024-03-02", "action": "met Hashi"}], [("2024-03-02", "met Hashi")]),
        (
            ["2024-03-02", {"date": "2024-03-05", "action": "again"}],
            [("2024-03-02", None), ("2024-03-05", "again")],
        ),
    ],
)
def test_when_takes_both_forms_of_the_design(when, expected):
    scene = Scene.model_validate(BASE | {"when": when})
    assert [(w.date, w.action) for w in scene.when] == expected


def test_scene_to_text_renders_the_designs_line():
    when = [{"date": "2024-03-02", "action": "met"}, {"date": "2024-03-05", "action": None}]
    assert (
        scene_to_text(when, "the station", "Met Hashi", ["Long time!", "Too long."], "glad")
        == '2024-03-02 — the station — Met Hashi — "Long time!" — (glad)'
    )
    assert scene_to_text(when, None, "Met Hashi", [], None) == "2024-03-02 — Met Hashi"
    assert scene_to_text([], "home", "Slept", None, "tired") == "home — Slept — (tired)"


def test_scenes_stored_before_are_migrated(tmp_path):
    path = tmp_path / "old.duckdb"
    con = duckdb.connect(str(path))
    con.execute(
        "CREATE TABLE schema_version (version INTEGER PRIMARY KEY, description VARCHAR, applied_at TIMESTAMP)"
    )
    for version, description, statements in store.MIGRATIONS:
        if version >= 9:
            break
        for statement in statements:
            con.execute(statement)
        con.execute("INSERT INTO schema_version VALUES (?, ?, now()::TIMESTAMP)", [version, description])
    now = datetime(2026, 1, 5)
    con.execute(
        "INSERT INTO scene_notes (scene_id, being_id, episode_ids, action, dialogue, sensory, emotion, created_at) "
        "VALUES ('s-1', 'ada', ['e1'], 'Met Hashi', 'Long time!', NULL, [0.8, 0.6, 0.5, 0.1, 0.7, 0.2], ?)",
        [now],
    )
    con.execute(
        """INSERT INTO nodes (node_id, being_id, scene, importance, emotion, source_episode_ids, created_at,
               updated_at)
           VALUES ('n-1', 'ada', {'action': 'Met Hashi', 'actors': ['ada'], 'when': [{'date': '2024-03-02',
               'action': NULL}], 'setting': 'the station', 'dialogue': 'Long time!', 'sensory': 'rain'},
               0.6, [0.8, 0.6, 0.5, 0.1, 0.7, 0.2], ['e1'], ?, ?)""",
        [now, now],
    )
    assert store.migrate(con) == len([m for m in store.MIGRATIONS if m[0] >= 9])
    emotion = {
        "valence": 0.8,
        "arousal": 0.6,
        "dominance": 0.5,
        "safety": None,
        "novelty": 0.7,
        "trust": None,
    }
    assert con.execute("SELECT dialogue, sensory, emotion FROM scene_notes").fetchall() == [
        (["Long time!"], None, emotion)
    ]
    scene, stored = con.execute("SELECT scene, emotion FROM nodes").fetchone()
    assert (scene["dialogue"], scene["sensory"], scene["setting"]) == (
        ["Long time!"],
        ["rain"],
        "the station",
    )
    assert stored == emotion
    # The index the migration dropped to alter the table is back.
    assert (
        con.execute("SELECT count(*) FROM duckdb_indexes() WHERE index_name = 'nodes_being'").fetchone()[0]
        == 1
    )
