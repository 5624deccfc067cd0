"""The scale profile on real servers on 127.0.0.1: the Dagster instance in PostgreSQL (the OS package's
initdb + pg_ctl) and the LanceDB tables in moto's S3 server, started once for the module by
mindflow.scale, as `make demo-scale` does. The relational stores stay one DuckDB file (DuckLake cannot
carry them: README, Running at scale), written by 4 runs at once, each being's steps on a checkout."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from mindflow import scale

MISSING = [
    m for m in ("dagster_postgres", "moto", "psycopg2", "boto3") if importlib.util.find_spec(m) is None
]
TOKEN = "scale-test-token"


def test_the_dagster_instance_follows_the_setting_and_an_edited_yaml_stays(home, monkeypatch):
    from mindflow import runner
    from mindflow.config import load_settings

    if "dagster_postgres" in MISSING:
        pytest.skip("dagster-postgres missing: pip install -e '.[scale]'")
    config = home / "dagster" / "dagster.yaml"
    monkeypatch.setenv("MINDFLOW_DAGSTER_POSTGRES_URL", "postgresql://u:secret@127.0.0.1:5432/db")
    runner.prepare_instance(load_settings())
    written = config.read_text()
    assert written == runner.DAGSTER_YAML + runner.POSTGRES_STORAGE and "secret" not in written
    assert "default_limit: 1" in written  # the pool settings stay
    # SQLAlchemy 2.1 reads a bare postgresql:// as psycopg 3: the instance gets psycopg2's scheme.
    assert os.environ["MINDFLOW_DAGSTER_POSTGRES_URL"].startswith("postgresql+psycopg2://u:secret@")
    monkeypatch.delenv("MINDFLOW_DAGSTER_POSTGRES_URL")
    runner.prepare_instance(load_settings())
    assert config.read_text() == runner.DAGSTER_YAML
    edited = runner.DAGSTER_YAML + "# edited by an operator\n"
    config.write_text(edited)
    monkeypatch.setenv("MINDFLOW_DAGSTER_POSTGRES_URL", "postgresql://u:secret@127.0.0.1:5432/db")
    runner.prepare_instance(load_settings())
    assert config.read_text() == edited


def test_lance_uri_names_object_storage_or_a_folder(home, monkeypatch):
    from mindflow.config import ObjectStore, load_settings

    assert load_settings().lance_path == home.resolve() / "lance"
    monkeypatch.setenv("MINDFLOW_LANCE_URI", "s3://bucket/prefix/")
    monkeypatch.setenv("MINDFLOW_S3_ENDPOINT", "http://127.0.0.1:9000")
    monkeypatch.setenv("MINDFLOW_S3_ALLOW_HTTP", "true")
    where = load_settings().lance_path
    assert isinstance(where, ObjectStore) and str(where) == "s3://bucket/prefix"
    assert where.storage_options == {"aws_endpoint": "http://127.0.0.1:9000", "allow_http": "true"}
    monkeypatch.setenv("MINDFLOW_LANCE_URI", str(home / "elsewhere"))
    assert load_settings().lance_path == home.resolve() / "elsewhere"


@pytest.fixture(scope="module")
def profile():
    if scale.postgres_bin() is None:
        pytest.skip(
            "PostgreSQL is not installed (no initdb/pg_ctl): `make postgres` or apt-get install postgresql"
        )
    if MISSING:
        pytest.skip(f"{', '.join(MISSING)} missing: pip install -e '.[scale]'")
    # Not under pytest's tmp folder: as root, PostgreSQL runs as `postgres`, who cannot enter it.
    root = Path(tempfile.mkdtemp(prefix="mindflow-scale-"))
    root.chmod(0o755)
    running, _ = scale.up(root)
    yield running
    scale.down(root, purge=True)


@pytest.fixture(scope="module")
def env(profile, tmp_path_factory, models_dir):
    home = tmp_path_factory.mktemp("scale") / "home"
    values = {
        **profile.env(),
        "MINDFLOW_HOME": str(home),
        "DAGSTER_HOME": str(home / "dagster"),
        "MINDFLOW_MODELS_DIR": str(models_dir),
    }
    with pytest.MonkeyPatch.context() as patch:
        for key, value in values.items():
            patch.setenv(key, value)
        yield values


@pytest.fixture(scope="module")
def settings(env):
    from mindflow.config import load_settings

    return load_settings(_env_file=None)


@pytest.fixture(scope="module")
def server(settings):
    from mindflow.api import create_app
    from mindflow.api.server import BackgroundServer

    with BackgroundServer(create_app(settings, tokens={TOKEN: "*"})) as running:
        yield running


WORDS = ("budget", "garden", "invoice", "lecture", "harbour", "violin", "pipeline", "museum")


def _episodes(being: str, *texts: str, day: str = "2026-03-02") -> list[dict]:
    return [
        {
            "id": f"{being}-{abs(hash(t)) % 10**8}",
            "ts": f"{day}T{9 + i // 60:02d}:{i % 60:02d}:00Z",
            "text": t,
            "kind": "fact",
        }
        for i, t in enumerate(texts)
    ]


def _mindflow(env: dict, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", "from mindflow.entry import main; main()", *args],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _published(settings, being: str) -> set[str]:
    from mindflow import lance

    table = lance.open_table(lance.connect(settings.lance_path), "memories")
    if table is None:
        return set()
    rows = table.search().where(lance.where(being_id=being)).select(["text"]).limit(None).to_arrow()
    return set(rows.column("text").to_pylist())


def test_ingest_patrol_decay_and_recall_through_the_client(settings, server, profile):
    import boto3
    import dagster as dg

    from mindflow.client import MindflowClient
    from mindflow.runner import run_job

    with MindflowClient(server.url, token=TOKEN) as memory:
        memory.add_episodes("ada", _episodes("ada", "Lena chose DuckDB for the reconciliation reports."))
        memory.add_episodes("bram", _episodes("bram", "Tomas runs the Lisbon half marathon in May."))
        for job in ("ingest", "patrol", "decay"):
            assert all(s.success for s in run_job(settings, job))
        found = memory.recall("ada", "which database do the reports use?", k=3)
    top = found.memories[0]
    assert top.text == "Lena chose DuckDB for the reconciliation reports." and not top.fresh

    # Each store is where the profile puts it: runs in PostgreSQL, memories on the S3 server.
    assert "postgres:" in (settings.dagster_home / "dagster.yaml").read_text()
    with dg.DagsterInstance.get() as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        jobs = [r.dagster_run.job_name for r in instance.get_run_records()]
    assert {"ingest", "patrol", "decay"} <= set(jobs)
    s3 = boto3.client("s3", endpoint_url=profile.s3_endpoint, region_name=scale.REGION)
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=scale.BUCKET, Prefix="lance/")["Contents"]]
    assert any(k.startswith("lance/memories.lance/") for k in keys)
    assert not (settings.resolved_home / "lance").exists()


def test_two_patrols_of_different_beings_at_once_both_succeed(settings, server, env):
    """Both are started together and run at the same time, each on a checkout of its being's rows."""
    import dagster as dg

    from mindflow.client import MindflowClient
    from mindflow.runner import run_job

    # Enough new episodes that each patrol embeds for a few seconds, so two runs that do not
    # wait for each other overlap.
    with MindflowClient(server.url, token=TOKEN) as memory:
        for being in ("ada", "bram"):
            texts = [
                f"{being} logged step {i} of the quarterly {WORDS[i % len(WORDS)]} review."
                for i in range(200)
            ]
            memory.add_episodes(being, _episodes(being, *texts, day="2026-03-05"))
    assert all(s.success for s in run_job(settings, "ingest"))
    with dg.DagsterInstance.get() as instance:
        before = {r.dagster_run.run_id for r in instance.get_run_records()}
    runs = [_mindflow(env, "run", "patrol", "--being", being) for being in ("ada", "bram")]
    outputs = [run.communicate(timeout=240) for run in runs]
    for run, (out, err) in zip(runs, outputs, strict=True):
        assert run.returncode == 0, err[-2000:]
        assert " ok" in out
        assert "waiting for pool" not in err
    with dg.DagsterInstance.get() as instance:
        new = [r.dagster_run for r in instance.get_run_records() if r.dagster_run.run_id not in before]
    assert sorted(r.tags.get("dagster/partition") for r in new) == ["ada", "bram"]
    assert all(r.status == dg.DagsterRunStatus.SUCCESS for r in new)
    with dg.DagsterInstance.get() as instance:
        spans = sorted((s.start_time, s.end_time) for s in (instance.get_run_stats(r.run_id) for r in new))
    assert spans[1][0] < spans[0][1], f"the runs did not overlap: {spans}"
    assert settings.duckdb_writers == scale.WRITERS
    assert not list(settings.checkouts.glob("*.duckdb"))


def test_api_reads_object_storage_while_a_patrol_publishes(settings, server, env):
    from mindflow.client import MindflowClient
    from mindflow.runner import run_job

    text = "The Ledgerline invoice export moved to Parquet files on Tuesdays."
    with MindflowClient(server.url, token=TOKEN) as memory:
        memory.add_episodes("ada", _episodes("ada", text, day="2026-03-03"))
        assert all(s.success for s in run_job(settings, "ingest"))
        assert text not in _published(settings, "ada")

        answers, errors, stop = [], [], threading.Event()

        def recall_meanwhile():
            with MindflowClient(server.url, token=TOKEN) as reader:
                while not stop.is_set():
                    try:
                        answers.append(reader.recall("ada", "which database do the reports use?", k=3))
                    except Exception as exc:  # any failure is what this test is about
                        errors.append(exc)
                    time.sleep(0.05)

        thread = threading.Thread(target=recall_meanwhile)
        thread.start()
        try:
            patrol = _mindflow(env, "run", "patrol", "--being", "ada")
            out, err = patrol.communicate(timeout=240)
        finally:
            stop.set()
            thread.join()
        assert patrol.returncode == 0, err[-2000:]
        assert not errors and len(answers) >= 5
        assert all(a.memories and a.memories[0].text.startswith("Lena chose DuckDB") for a in answers)
        assert text in _published(settings, "ada")
        # The server picks up the table version the patrol committed, without a restart.
        hit = memory.recall("ada", "when does the invoice export run?", k=3).memories[0]
    assert hit.text == text and not hit.fresh
