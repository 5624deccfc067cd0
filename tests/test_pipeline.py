"""Tests for the Dagster code location: definitions, jobs on a real instance, the sensor, checks."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path

import dagster as dg
import pytest

from mindflow import lance, store
from mindflow.config import Settings, load_settings
from mindflow.errors import MindflowError
from mindflow.models import utcnow
from mindflow.runner import run_job

warnings.filterwarnings("ignore", category=dg.BetaWarning)

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "data" / "samples"
MINDFLOW = REPO / ".venv" / "bin" / "mindflow"

# Every asset check of the code location, as (asset, check name).
CHECKS = [
    ("nodes", "nodes_in_own_beings_clusters"),
    ("clusters", "two_roots"),
    ("decay_scores", "scores_in_range"),
    ("memories", "one_row_per_memory"),
]
# checks of the jobs the main pipeline does not run
OTHER_CHECKS = [("story", "critical_files_unchanged")]


def definitions():
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    import definitions as module

    return module.defs


def counts(settings: Settings) -> dict[str, int]:
    with store.connect(settings.duckdb_path, read_only=True) as con:
        out = {
            t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            for t in (
                "episodes",
                "scene_notes",
                "nodes",
                "clusters",
                "decay_scores",
                "inbox_files",
                "published_memories",
            )
        }
    out["lance_memories"] = lance.connect(settings.lance_path).open_table("memories").count_rows()
    return out


def node_sessions(settings: Settings) -> dict[str, tuple[int, str]]:
    with store.connect(settings.duckdb_path, read_only=True) as con:
        rows = con.execute("SELECT node_id, session_count, status FROM nodes").fetchall()
    return {node_id: (sessions, status) for node_id, sessions, status in rows}


def run_all(settings: Settings) -> list:
    summaries = []
    for job in ("ingest", "patrol", "decay"):
        summaries.extend(run_job(settings, job))
    return summaries


def check_records(instance: dg.DagsterInstance, asset: str, name: str) -> list:
    key = dg.AssetCheckKey(dg.AssetKey(asset), name)
    return list(instance.event_log_storage.get_asset_check_execution_history(key, limit=100))


@dataclass
class Pipeline:
    home: Path
    settings: Settings
    first: dict[str, int]
    second: dict[str, int]
    sessions_first: dict[str, tuple[int, str]]
    sessions_second: dict[str, tuple[int, str]]
    summaries: list


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory) -> Pipeline:
    """The sample inbox through ingest, patrol and decay, twice, on one local Dagster instance."""
    home = tmp_path_factory.mktemp("pipeline") / "home"
    home.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MINDFLOW_HOME", str(home))
        mp.setenv("DAGSTER_HOME", str(home / "dagster"))
        settings = load_settings()
        shutil.copytree(SAMPLES / "inbox", settings.inbox)
        summaries = run_all(settings)
        first, sessions_first = counts(settings), node_sessions(settings)
        # The same files landed again.
        shutil.copytree(SAMPLES / "inbox", settings.inbox, dirs_exist_ok=True)
        summaries += run_all(settings)
        second, sessions_second = counts(settings), node_sessions(settings)
    return Pipeline(home, settings, first, second, sessions_first, sessions_second, summaries)


@pytest.fixture
def copied_pipeline(pipeline, home) -> Settings:
    """A private copy of the finished pipeline's MINDFLOW_HOME, for tests that break things."""
    shutil.copytree(pipeline.home, home, dirs_exist_ok=True)
    return load_settings()


# --------------------------------------------------------------------------- definitions


def test_definitions_load_and_every_asset_is_described():
    defs = definitions()
    dg.Definitions.validate_loadable(defs)

    specs = {spec.key.to_user_string(): spec for spec in defs.resolve_all_asset_specs()}
    assert set(specs) == {
        "episodes",
        "scene_notes",
        "nodes",
        "clusters",
        "facts_graph",
        "journal",
        "decay_scores",
        "memories",
        "story",
        "core_memory",
        "journal_chunks",
        "audit_archive",
        "ebook_chunks",
        "erasures",
        "reflections",
        "applied_proposals",
    }
    for name, spec in specs.items():
        assert spec.description and spec.description.strip(), name
        assert spec.group_name and spec.group_name != "default", name
        assert spec.kinds, name
    graph = defs.resolve_asset_graph()
    declared = {(k.asset_key.to_user_string(), k.name) for k in graph.asset_check_keys}
    assert declared == {*CHECKS, *OTHER_CHECKS}
    for job in (
        "ingest", "patrol", "decay", "extraction", "narrative", "audit_digest", "ebook_reindex", "forget",
        "reflection", "approvals",
    ):  # fmt: skip
        assert defs.resolve_job_def(job).description


def test_importing_definitions_does_not_import_the_model():
    # torch and the model load only when a run embeds; lancedb (seconds to import) when a run opens it.
    code = "import definitions, sys; print(*(m in sys.modules for m in ('torch', 'sentence_transformers', 'lancedb')))"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120, check=True
    ).stdout.split()
    assert out[:3] == ["False", "False", "False"]


def test_loading_the_code_location_freezes_its_objects_out_of_full_collections():
    # A run the daemon launches imports definitions.py, then executes: the objects of the loaded
    # code location are left out of the garbage collector's full passes, as the CLI's runs do.
    code = (
        "import gc; before = gc.get_freeze_count(); import definitions; print(before, gc.get_freeze_count())"
    )
    before, after = map(
        int,
        subprocess.run(
            [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120, check=True
        ).stdout.split(),
    )
    assert before == 0
    assert after > 50_000


def test_lancedb_is_imported_once_for_two_threads_and_its_client_still_validates():
    # In a fresh interpreter: lancedb asked for by two threads at once (each waits for the
    # whole module); pydantic is left as it is, and the REST client's validation holds.
    code = """
import threading
import pydantic
validate_call = pydantic.validate_call
from mindflow import lance
other = []
thread = threading.Thread(target=lambda: other.append(lance.lancedb_module()))
thread.start()
module = lance.lancedb_module()
thread.join()
print(other == [module], callable(module.connect), callable(other[0].connect), sep="|")
from lance_namespace_urllib3_client import ApiClient
from lance_namespace_urllib3_client.api.table_api import TableApi
try:
    TableApi(ApiClient()).describe_table(id=123, describe_table_request=None)
    outcome = "accepted"
except pydantic.ValidationError as error:
    outcome = f"rejected {error.error_count()}"
print(pydantic.validate_call is validate_call, outcome, sep="|")
"""
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120, check=True
    ).stdout.strip()
    assert out.splitlines() == ["True|True|True", "True|rejected 2"]


# --------------------------------------------------------------------------- the whole graph


def test_the_whole_graph_twice_gives_identical_counts(pipeline):
    first, second = pipeline.first, pipeline.second
    assert first["episodes"] == 337  # ada 162 + 26, bram 126 + 23 (see test_inbox)
    assert first["nodes"] == first["scene_notes"] == first["episodes"]
    assert first["decay_scores"] == first["nodes"]
    assert first["clusters"] >= 4  # two roots per being
    assert first["inbox_files"] == 5
    assert 0 < first["lance_memories"] <= first["nodes"]
    assert second == first

    # Every node that was active lived through exactly one more patrol session.
    assert set(pipeline.sessions_second) == set(pipeline.sessions_first)
    active = [n for n, (_, status) in pipeline.sessions_first.items() if status == "active"]
    assert len(active) > 300
    for node_id, (sessions, status) in pipeline.sessions_first.items():
        advanced = pipeline.sessions_second[node_id][0] - sessions
        assert advanced == (1 if status == "active" else 0), node_id


def test_runs_are_recorded_and_every_check_passed(pipeline, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(pipeline.home / "dagster"))
    assert all(s.success for s in pipeline.summaries)
    # Per round: one ingest run, one patrol run over every being, one decay run.
    assert [(s.job, s.partition) for s in pipeline.summaries[:3]] == [
        ("ingest", "2026-10-12...2026-10-31"),
        ("patrol", "ada...bram"),
        ("decay", utcnow().date().isoformat()),
    ]
    instance = dg.DagsterInstance.get()
    runs = instance.get_runs()
    assert len(runs) == 6
    assert {r.run_id for r in runs} == {s.run_id for s in pipeline.summaries}
    assert all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs)
    assert sorted(instance.get_dynamic_partitions("beings")) == ["ada", "bram"]

    for asset, name in CHECKS:
        records = check_records(instance, asset, name)
        assert records, (asset, name)
        assert all(r.evaluation is not None and r.evaluation.passed for r in records), (asset, name)
    # The patrol checks ran in every patrol run (one per round), decay's in every decay run.
    patrol_runs = {s.run_id for s in pipeline.summaries if s.job == "patrol"}
    decay_runs = {s.run_id for s in pipeline.summaries if s.job == "decay"}
    assert len(patrol_runs) == 2 and len(decay_runs) == 2
    assert {r.run_id for r in check_records(instance, "nodes", "nodes_in_own_beings_clusters")} == patrol_runs
    assert {r.run_id for r in check_records(instance, "clusters", "two_roots")} == patrol_runs
    assert {r.run_id for r in check_records(instance, "decay_scores", "scores_in_range")} == decay_runs
    assert {
        r.run_id for r in check_records(instance, "memories", "one_row_per_memory")
    } == patrol_runs | decay_runs

    latest = instance.get_latest_materialization_event(dg.AssetKey("memories")).asset_materialization
    assert latest.metadata["dagster/row_count"].value == pipeline.second["lance_memories"]
    assert latest.metadata["upserted"].value == 0  # nothing changed, nothing rewritten
    episodes = instance.get_latest_materialization_event(dg.AssetKey("episodes")).asset_materialization
    assert (episodes.metadata["new"].value, episodes.metadata["duplicates"].value) == (0, 337)
    assert episodes.metadata["quarantined"].value == 6


def test_the_memories_table_serves_recall(pipeline):
    table = lance.connect(pipeline.settings.lance_path).open_table("memories")
    rows = table.search().select(["memory_ref", "being_id"]).limit(None).to_arrow().to_pylist()
    refs = [r["memory_ref"] for r in rows]
    assert len(refs) == len(set(refs))
    with store.connect(pipeline.settings.duckdb_path, read_only=True) as con:
        # Every memory, archived ones too (recall filters them out; reading a memory sees them).
        wanted = con.execute("SELECT node_id, being_id FROM nodes").fetchall()
    assert sorted((r["memory_ref"], r["being_id"]) for r in rows) == sorted(wanted)

    hits = table.search("Miso", query_type="fts").limit(50).to_list()
    assert hits
    assert {h["being_id"] for h in hits} == {"bram"}
    assert any("allergic to chicken" in h["text"] for h in hits)

    only_ada = table.search("Miso", query_type="fts").where(lance.where(being_id="ada")).limit(50).to_list()
    assert only_ada == []
    ada_rows = table.search().where(lance.where(being_id="ada")).select(["being_id"]).limit(None).to_arrow()
    assert set(ada_rows.column("being_id").to_pylist()) == {"ada"}
    assert 0 < ada_rows.num_rows < len(rows)


# --------------------------------------------------------------------------- backfills


def test_an_ingest_backfill_materializes_only_its_days(settings, sample_inbox):
    summaries = run_job(settings, "ingest", partition="2026-10-12...2026-10-14")

    assert [(s.partition, s.success) for s in summaries] == [("2026-10-12...2026-10-14", True)]
    with store.connect(settings.duckdb_path, read_only=True) as con:
        days = [r[0] for r in con.execute("SELECT DISTINCT day FROM episodes ORDER BY 1").fetchall()]
    assert days == [date(2026, 10, 12), date(2026, 10, 13), date(2026, 10, 14)]
    instance = dg.DagsterInstance.get()
    assert instance.get_materialized_partitions(dg.AssetKey("episodes")) == {
        "2026-10-12",
        "2026-10-13",
        "2026-10-14",
    }
    # The run records one "planned" event for its range of days, not one per day.
    planned = instance.get_records_for_run(
        summaries[0].run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION_PLANNED
    ).records
    assert len(planned) == 1
    # Files with later days wait for a run that covers them.
    assert sorted(p.name for p in (sample_inbox / "ada").iterdir()) == [
        "2026-10-31-openclaw.jsonl",
        "2026-10-session-log.jsonl",
    ]
    assert sorted(p.name for p in (sample_inbox / "bram").iterdir()) == [
        "2026-10-20.md",
        "2026-10-27.md",
        "2026-10-bram.jsonl",
    ]
    assert not (sample_inbox / ".done").exists()


# --------------------------------------------------------------------------- the inbox sensor


def evaluate(instance, cursor=None) -> dg.SensorResult:
    from sensors.inbox import inbox_sensor

    return inbox_sensor(dg.build_sensor_context(instance=instance, cursor=cursor))


def write_day(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"- [fact] {text}\n")


def test_the_inbox_sensor_requests_one_deterministic_run_per_new_set_of_files(settings):
    definitions()  # puts the repository root on sys.path for `sensors`
    instance = dg.DagsterInstance.ephemeral()

    empty = evaluate(instance)
    assert empty.run_requests in (None, []) and empty.skip_reason is not None

    shutil.copytree(SAMPLES / "inbox", settings.inbox)
    first = evaluate(instance)
    (request,) = first.run_requests
    assert request.tags["dagster/asset_partition_range_start"] == "2026-10-12"
    assert request.tags["dagster/asset_partition_range_end"] == "2026-10-31"
    add_days, add = first.dynamic_partitions_requests
    # The days the files hold become partitions before the run starts; no day between them does.
    assert add_days.partitions_def_name == "days" and "2026-10-12" in add_days.partition_keys
    assert len(add_days.partition_keys) < 20 and add_days.partition_keys == sorted(add_days.partition_keys)
    assert (add.partitions_def_name, sorted(add.partition_keys)) == ("beings", ["ada", "bram"])
    # Evaluated again from scratch, the same files give the same run key (Dagster dedupes it).
    assert [r.run_key for r in evaluate(instance).run_requests] == [request.run_key]

    seen = evaluate(instance, first.cursor)
    assert seen.run_requests in (None, []) and seen.skip_reason is not None

    instance.add_dynamic_partitions("beings", list(add.partition_keys))
    write_day(settings.inbox / "ada" / "2026-11-02.md", "Lena moved the release to Monday")
    later = evaluate(instance, first.cursor)
    (new_request,) = later.run_requests
    assert new_request.run_key != request.run_key
    assert new_request.tags["dagster/asset_partition_range_start"] == "2026-10-12"
    assert new_request.tags["dagster/asset_partition_range_end"] == "2026-11-02"
    # ada is known already; the new day is a new partition.
    assert [(r.partitions_def_name, list(r.partition_keys)) for r in later.dynamic_partitions_requests] == [
        ("days", [*add_days.partition_keys, "2026-11-02"])
    ]

    write_day(settings.inbox / "cleo" / "2026-11-03.md", "Cleo met her first user")
    newest = evaluate(instance, later.cursor)
    assert newest.run_requests
    assert all(r.run_key not in (request.run_key, new_request.run_key) for r in newest.run_requests)
    assert max(r.tags["dagster/asset_partition_range_end"] for r in newest.run_requests) == "2026-11-03"
    _, add_cleo = newest.dynamic_partitions_requests
    assert list(add_cleo.partition_keys) == ["cleo"]


# --------------------------------------------------------------------------- blocking checks


def test_a_node_in_another_beings_cluster_fails_that_beings_patrol(copied_pipeline):
    settings = copied_pipeline
    with store.connect(settings.duckdb_path) as con:
        con.execute(
            "INSERT INTO nodes SELECT * REPLACE ('n-stray' AS node_id, "
            "(SELECT cluster_id FROM clusters WHERE being_id = 'ada' AND parent_id IS NULL LIMIT 1) "
            "AS cluster_id) "
            "FROM nodes WHERE being_id = 'bram' LIMIT 1"
        )
    instance = dg.DagsterInstance.get()
    memories_before = instance.get_latest_materialization_event(dg.AssetKey("memories")).run_id

    with pytest.raises(
        MindflowError, match=r"patrol run \S+ for bram failed.*nodes: nodes_in_own_beings_clusters"
    ):
        run_job(settings, "patrol", being="bram")

    (failed,) = [r for r in instance.get_runs() if r.status == dg.DagsterRunStatus.FAILURE]
    latest = check_records(instance, "nodes", "nodes_in_own_beings_clusters")[0]
    assert latest.run_id == failed.run_id and failed.tags.get("dagster/partition") == "bram"
    assert not latest.evaluation.passed
    assert latest.evaluation.metadata["misplaced_nodes"].value == 1
    # The blocking check stopped the run before it published anything.
    assert instance.get_latest_materialization_event(dg.AssetKey("memories")).run_id == memories_before
    # Other beings are not affected.
    assert [s.success for s in run_job(settings, "patrol", being="ada")] == [True]


def test_a_memory_deleted_from_lancedb_by_hand_fails_the_memories_check(copied_pipeline):
    settings = copied_pipeline
    table = lance.connect(settings.lance_path).open_table("memories")
    victim = table.search().where(lance.where(being_id="bram")).select(["memory_ref"]).limit(1).to_list()[0]
    table.delete(lance.where(memory_ref=victim["memory_ref"]))
    instance = dg.DagsterInstance.get()

    with pytest.raises(MindflowError, match=r"decay run \S+ for \S+ failed.*memories: one_row_per_memory"):
        run_job(settings, "decay")

    latest = check_records(instance, "memories", "one_row_per_memory")[0]
    assert not latest.evaluation.passed
    assert latest.evaluation.metadata["missing"].value == 1
    failed = [r for r in instance.get_runs() if r.status == dg.DagsterRunStatus.FAILURE]
    assert [r.run_id for r in failed] == [latest.run_id]


# --------------------------------------------------------------------------- concurrency


def test_two_jobs_launched_at_once_queue_instead_of_failing(copied_pipeline):
    settings = copied_pipeline
    env = {
        **os.environ,
        "MINDFLOW_HOME": str(settings.resolved_home),
        "DAGSTER_HOME": str(settings.dagster_home),
        "HF_HUB_OFFLINE": "1",
    }
    instance = dg.DagsterInstance.get()
    started = dg.RunsFilter(job_name="decay", statuses=[dg.DagsterRunStatus.STARTED])
    # Hold the DuckDB file while both runs start, so that they really contend for it.
    with store.connect(settings.duckdb_path):
        procs = [
            subprocess.Popen(
                [str(MINDFLOW), "run", "decay"],
                env=env,
                cwd=settings.resolved_home,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        deadline = time.monotonic() + 120
        while len(instance.get_runs(filters=started)) < 1:
            assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
            assert time.monotonic() < deadline, "no decay run started"
            time.sleep(0.2)
        time.sleep(2.0)
        assert all(p.poll() is None for p in procs)  # both wait their turn
        # Pool `duckdb` admits one run: the other has not started a run at all.
        assert len(instance.get_runs(filters=started)) == 1
    results = [(p.wait(timeout=180), *p.communicate()) for p in procs]

    for code, out, err in results:
        assert code == 0, err
        assert "decay [" in out and ": ok" in out
    # The one that waited said what for.
    assert sum("waiting for pool duckdb" in err for _, _, err in results) == 1
    decay_runs = [r for r in instance.get_runs() if r.job_name == "decay"]
    assert len(decay_runs) == 4
    assert all(r.status == dg.DagsterRunStatus.SUCCESS for r in decay_runs)
    after = counts(settings)
    assert after["decay_scores"] == after["nodes"]


def test_nightly_schedules_request_one_run_per_known_being():
    repository = definitions().get_repository_def()
    from jobs.narrative import nightly_narrative
    from jobs.patrol import nightly_patrol
    from jobs.reflection import nightly_reflection

    with dg.instance_for_test() as instance:
        at = datetime(2026, 11, 22, 2, 0, tzinfo=UTC)
        for schedule in (nightly_patrol, nightly_narrative, nightly_reflection):
            skipped = schedule.evaluate_tick(
                dg.build_schedule_context(instance, scheduled_execution_time=at, repository_def=repository)
            )
            assert not skipped.run_requests and skipped.skip_message == "no being has episodes yet"
        instance.add_dynamic_partitions("beings", ["ada", "bram"])
        for schedule, job in (
            (nightly_patrol, "patrol"),
            (nightly_narrative, "narrative"),
            (nightly_reflection, "reflection"),
        ):
            requests = schedule.evaluate_tick(
                dg.build_schedule_context(instance, scheduled_execution_time=at, repository_def=repository)
            ).run_requests
            assert [(r.run_key, r.partition_key) for r in requests] == [
                (f"{job}-ada-2026-11-22", "ada"),
                (f"{job}-bram-2026-11-22", "bram"),
            ]
        assert (nightly_patrol.cron_schedule, nightly_narrative.cron_schedule) == ("0 2 * * *", "30 3 * * *")
        assert nightly_reflection.cron_schedule == "0 4 * * *"  # after decay (03:00) and the narrative
