"""The automatic form run: an ingest run makes `form_sensor` ask for a `form` run, which forms (❶) and
publishes the new episodes without advancing session counts; the nightly patrol still runs ❷-❼.

Real Dagster instance (the one `mindflow run` uses), real DuckDB and LanceDB, the real model.
"""

from __future__ import annotations

import json

import dagster as dg
import pytest

from mindflow import lance, store
from mindflow.loop.marks import append_marks, new_mark
from mindflow.loop.refs import episode_memory_ref
from mindflow.runner import prepare_instance, run_job

EPISODES = [
    ("f01", "2026-02-01T09:00:00Z", "Lena moved the team standup to half past nine."),
    ("f02", "2026-02-01T10:00:00Z", "Lena's cat Pixel learned to open the kitchen door."),
    ("f03", "2026-02-02T09:00:00Z", "The quarterly budget review was postponed to March."),
]
LATER = ("f04", "2026-02-03T09:00:00Z", "Lena booked a train to Vienna for the conference.")
SECRET = ("f05", "2026-02-03T10:00:00Z", "Lena's bank PIN is written on the fridge note.")


def _land(settings, name: str, rows) -> None:
    path = settings.inbox / "ada" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "".join(json.dumps({"id": i, "ts": ts, "speaker": "Lena", "text": t}) + "\n" for i, ts, t in rows)
    )


def _sessions(settings) -> dict[str, int]:
    with store.connect(settings.duckdb_path, read_only=True) as con:
        return dict(con.execute("SELECT node_id, session_count FROM nodes WHERE being_id = 'ada'").fetchall())


def _published(settings) -> dict[str, str]:
    table = lance.connect(settings.lance_path).open_table("memories")
    rows = table.search().select(["memory_ref", "status"]).limit(None).to_arrow().to_pylist()
    return {r["memory_ref"]: r["status"] for r in rows}


def _metadata(result, asset: str) -> dict:
    (materialization,) = [m for m in result.asset_materializations_for_node(asset)][:1]
    return {k: v.value for k, v in materialization.metadata.items()}


class Instance:
    """The Dagster instance `mindflow run` uses, and the sensor's cursor between ticks."""

    def __init__(self, instance: dg.DagsterInstance):
        self.dagster = instance
        self.cursor: str | None = None


@pytest.fixture
def instance(settings):
    prepare_instance(settings)
    with dg.DagsterInstance.get() as instance:
        yield Instance(instance)


def _form_from_sensor(instance: Instance) -> tuple[list[dg.RunRequest], list]:
    """Evaluate `form_sensor` as the daemon would (cursor kept), then execute what it asks for."""
    from definitions import defs
    from sensors.form import form_sensor

    result = form_sensor(dg.build_sensor_context(instance=instance.dagster, cursor=instance.cursor))
    instance.cursor = result.cursor or instance.cursor
    job = defs.resolve_job_def("form")
    runs = [
        job.execute_in_process(
            instance=instance.dagster, partition_key=r.partition_key, run_config=r.run_config, tags=r.tags
        )
        for r in result.run_requests
    ]
    return result.run_requests, runs


def test_an_ingest_run_starts_a_form_run_that_publishes_without_counting_a_session(settings, instance):
    _land(settings, "monday.jsonl", EPISODES)
    run_job(settings, "ingest")

    requests, (run,) = _form_from_sensor(instance)

    assert [(r.partition_key, r.tags["mindflow/new_episodes"]) for r in requests] == [("ada", "3")]
    assert run.success
    nodes = _metadata(run, "nodes")
    assert nodes["mode"] == "form" and nodes["new"] == 3
    assert "sessions_advanced" not in nodes
    assert _metadata(run, "memories")["upserted"] == 3
    refs = {episode_memory_ref("ada", i) for i, _, _ in EPISODES}
    assert set(_published(settings)) == refs
    assert set(_sessions(settings).values()) == {0}  # formed, not a night older
    # The same ingest asks for nothing twice.
    assert _form_from_sensor(instance) == ([], [])

    # The night: ❷ counts one session for every active node, and only the night does.
    run_job(settings, "patrol")
    assert set(_sessions(settings).values()) == {1}

    _land(settings, "tuesday.jsonl", [LATER])
    run_job(settings, "ingest")
    requests, (run,) = _form_from_sensor(instance)
    assert run.success and _metadata(run, "nodes")["new"] == 1
    sessions = _sessions(settings)
    assert sessions.pop(episode_memory_ref("ada", LATER[0])) == 0
    assert set(sessions.values()) == {1}  # a second form run in a day moves no count
    assert len(_published(settings)) == 4


def test_a_form_run_archives_what_was_forgotten_before_its_node_existed(settings, instance):
    # A fresh memory forgotten through the API, before the form run formed it.
    ref = episode_memory_ref("ada", SECRET[0])
    append_marks(settings.loop, [new_mark("ada", "forget", [ref], [SECRET[0]])])
    _land(settings, "secret.jsonl", [SECRET, LATER])

    run_job(settings, "ingest")
    _, (run,) = _form_from_sensor(instance)

    assert run.success and _metadata(run, "nodes")["forgotten"] == 1
    published = _published(settings)
    assert published[ref] == "archived"
    assert published[episode_memory_ref("ada", LATER[0])] == "active"


def test_mindflow_run_form(settings, instance):
    _land(settings, "monday.jsonl", EPISODES)
    run_job(settings, "ingest")

    (summary,) = run_job(settings, "form", being="ada")

    assert summary.success and "nodes: new=3;" in summary.changes  # no session count moved: none shown
    assert "memories: upserted=3" in summary.changes
    assert set(_sessions(settings).values()) == {0}


def test_the_run_that_formed_a_memory_is_its_actor_form_or_patrol(settings, instance):
    """A memory formed minutes after ingestion reads `formed` by `form`, one formed at night by
    `patrol`: history rows and their audit rows, each with the run that wrote it."""
    from mindflow import memory_history

    _land(settings, "monday.jsonl", EPISODES)
    run_job(settings, "ingest")
    (form_run,) = run_job(settings, "form", being="ada")
    _land(settings, "later.jsonl", [LATER])
    run_job(settings, "ingest")
    (patrol_run,) = run_job(settings, "patrol", being="ada")

    with store.connect(settings.duckdb_path, read_only=True) as con:
        formed = con.execute(
            "SELECT memory_ref, actor, run_id FROM history WHERE operation = 'formed' ORDER BY memory_ref"
        ).fetchall()
        audit = con.execute(
            "SELECT actor, run_id FROM audit_log WHERE summary LIKE 'ada: % nodes formed' ORDER BY ts"
        ).fetchall()
    by_form = {episode_memory_ref("ada", i): ("form", form_run.run_id) for i, _, _ in EPISODES}
    by_patrol = {episode_memory_ref("ada", LATER[0]): ("patrol", patrol_run.run_id)}
    assert {ref: (actor, run) for ref, actor, run in formed} == by_form | by_patrol
    assert audit == [("form", form_run.run_id), ("patrol", patrol_run.run_id)]
    table = lance.connect(settings.lance_path).open_table(memory_history.TABLE)
    (first,) = memory_history.rows_of(table, "ada", episode_memory_ref("ada", EPISODES[0][0]))
    assert (first["operation"], first["actor"]) == ("formed", "form")
