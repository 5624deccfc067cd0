"""Checkouts of one being's rows (MINDFLOW_DUCKDB_WRITERS > 1): merged back whole, other beings
written meanwhile, a conflict writes nothing, a killed checkout leaves nothing behind."""

from __future__ import annotations

import os
import subprocess
import sys

import dagster as dg
import pytest

from mindflow import checkout, store
from mindflow.resources import DuckDBResource


def _episode(con, being: str, episode_id: str, text: str) -> None:
    con.execute(
        "INSERT INTO episodes (being_id, episode_id, session_id, ts, day, speaker, role, text, source, ingested_at) "
        "VALUES (?, ?, 's1', TIMESTAMP '2026-03-02 09:00:00', DATE '2026-03-02', 'me', 'user', ?, 'test', "
        "TIMESTAMP '2026-03-02 09:00:00')",
        [being, episode_id, text],
    )


def _texts(path, being: str) -> list[str]:
    with store.connect(path, read_only=True) as con:
        rows = con.execute(
            "SELECT text FROM episodes WHERE being_id = ? ORDER BY episode_id", [being]
        ).fetchall()
    return [r[0] for r in rows]


@pytest.fixture
def stores(settings):
    with store.connect(settings.duckdb_path) as con:
        for being in ("ada", "bram"):
            _episode(con, being, f"{being}-1", f"{being} wrote the first line")
        con.execute("INSERT INTO integrity VALUES ('SOUL.md', 'abc', NULL, now()::TIMESTAMP, NULL)")
    return settings.duckdb_path, settings.checkouts


def test_a_checkout_holds_the_beings_rows_and_merges_them_back_while_another_being_commits(stores):
    path, folder = stores
    report = checkout.CheckoutReport("ada")
    with checkout.checkout(path, folder, "ada", report=report) as con:
        # Only ada's rows are in the checkout, with the checksums the steps read.
        assert con.execute("SELECT DISTINCT being_id FROM episodes").fetchall() == [("ada",)]
        assert con.execute("SELECT key FROM integrity").fetchall() == [("SOUL.md",)]
        con.execute("UPDATE episodes SET text = 'ada changed it' WHERE episode_id = 'ada-1'")
        _episode(con, "ada", "ada-2", "ada added a line")
        con.execute(
            "INSERT INTO audit_log VALUES ('a-1', now()::TIMESTAMP, 'UPDATE', 'table:episodes', 'test', "
            "NULL, 'ada', NULL)"
        )
        # The store is free while ada's step runs: bram's run checks out and commits meanwhile.
        with checkout.checkout(path, folder, "bram") as other:
            _episode(other, "bram", "bram-2", "bram added a line")
        assert _texts(path, "bram") == ["bram wrote the first line", "bram added a line"]
        assert _texts(path, "ada") == ["ada wrote the first line"]  # not merged yet
    assert _texts(path, "ada") == ["ada changed it", "ada added a line"]
    assert _texts(path, "bram") == ["bram wrote the first line", "bram added a line"]
    with store.connect(path, read_only=True) as con:
        assert con.execute("SELECT audit_id FROM audit_log").fetchall() == [("a-1",)]
        assert con.execute("SELECT count(*) FROM integrity").fetchone()[0] == 1
    assert report.rows_out == 1 and report.rows_in == 2 and report.added == 1
    assert list(folder.iterdir()) == []  # the checkout file is gone


def test_a_being_changed_meanwhile_is_a_conflict_and_nothing_is_written(stores):
    path, folder = stores
    with pytest.raises(checkout.CommitConflict, match="being ada changed in episodes"):
        with checkout.checkout(path, folder, "ada") as con:
            con.execute("UPDATE episodes SET text = 'the stale run' WHERE being_id = 'ada'")
            with store.connect(path) as live:  # an ingest of ada's episodes commits first
                _episode(live, "ada", "ada-9", "ada's newer episode")
    assert _texts(path, "ada") == ["ada wrote the first line", "ada's newer episode"]
    assert list(folder.iterdir()) == []


def test_a_failed_step_writes_nothing(stores):
    path, folder = stores
    with pytest.raises(RuntimeError, match="model call failed"):
        with checkout.checkout(path, folder, "ada") as con:
            con.execute("DELETE FROM episodes")
            raise RuntimeError("model call failed")
    assert _texts(path, "ada") == ["ada wrote the first line"]


def test_a_checkout_left_by_a_killed_process_is_removed_and_one_in_use_is_kept(stores, tmp_path):
    path, folder = stores
    folder.mkdir(parents=True, exist_ok=True)
    # A process killed inside its step: the file and its lock file stay, the lock dies with it.
    code = (
        "import os, sys; from pathlib import Path; from mindflow import checkout\n"
        "c = checkout.checkout(Path(sys.argv[1]), Path(sys.argv[2]), 'ada'); c.__enter__()\n"
        "print('in', flush=True); os._exit(0) if sys.argv[3] == 'die' else sys.stdin.read()\n"
    )
    subprocess.run(
        [sys.executable, "-c", code, str(path), str(folder), "die"], check=True, capture_output=True
    )
    assert len(list(folder.glob("ada-*.duckdb"))) == 1
    live = subprocess.Popen(
        [sys.executable, "-c", code, str(path), str(folder), "wait"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ},
    )
    try:
        assert live.stdout.readline().strip() == "in"
        with checkout.checkout(path, folder, "bram"):
            left = sorted(p.name for p in folder.glob("*.duckdb"))
        # The dead one was swept; the live one and this one were there.
        assert len([n for n in left if n.startswith("ada-")]) == 1 and len(left) == 2
    finally:
        live.communicate("")
    assert _texts(path, "ada") == ["ada wrote the first line"]


def test_the_resource_asks_dagster_to_run_a_conflicting_step_again(stores, monkeypatch, home):
    path, _ = stores
    monkeypatch.setenv("MINDFLOW_DUCKDB_WRITERS", "2")
    resource = DuckDBResource(home=str(home))
    groups = resource.beings(["ada", "bram"])
    beings, con = next(groups)
    assert beings == ["ada"]
    con.execute("UPDATE episodes SET text = 'stale' WHERE being_id = 'ada'")
    with store.connect(path) as live:
        _episode(live, "ada", "ada-9", "newer")
    with pytest.raises(dg.RetryRequested) as raised:
        next(groups)
    assert raised.value.max_retries >= 1
    assert isinstance(raised.value.__cause__, checkout.CommitConflict)
    assert _texts(path, "ada") == ["ada wrote the first line", "newer"]


def test_one_writer_keeps_every_being_on_the_store(stores, monkeypatch, home):
    monkeypatch.delenv("MINDFLOW_DUCKDB_WRITERS", raising=False)
    groups = list(DuckDBResource(home=str(home)).beings(["ada", "bram"]))
    assert [g for g, _ in groups] == [["ada", "bram"]]


def test_a_step_that_only_read_the_being_adds_its_audit_rows_whatever_changed_meanwhile(stores):
    path, folder = stores
    with checkout.checkout(path, folder, "ada") as con:
        assert con.execute("SELECT count(*) FROM episodes").fetchone()[0] == 1  # a narration reads
        con.execute(
            "INSERT INTO audit_log VALUES ('a-2', now()::TIMESTAMP, 'UPDATE', 'STORY.md', 'narrative', "
            "NULL, 'ada', NULL)"
        )
        with store.connect(path) as live:
            _episode(live, "ada", "ada-9", "ada's newer episode")
    assert _texts(path, "ada") == ["ada wrote the first line", "ada's newer episode"]
    with store.connect(path, read_only=True) as con:
        assert con.execute("SELECT audit_id FROM audit_log").fetchall() == [("a-2",)]


def test_a_patrol_whose_being_gets_an_episode_mid_step_retries_the_step_and_loses_nothing(
    settings, sample_inbox, monkeypatch
):
    """A real conflict in a real run: while `nodes` embeds ada's scenes on its checkout, an episode
    of ada lands in the store; the step's merge finds ada changed, Dagster runs the step again on a
    new checkout, and the run succeeds with both the patrol's nodes and the new episode kept."""
    import threading

    from mindflow.runner import run_job

    assert all(s.success for s in run_job(settings, "ingest"))
    monkeypatch.setenv("MINDFLOW_DUCKDB_WRITERS", "2")
    from mindflow.config import load_settings

    settings = load_settings()
    seen: list[str] = []
    stop = threading.Event()

    def land_an_episode_during_nodes():
        # Checkouts are named <being>-<id>.duckdb; the second one of the run is `nodes`'.
        while not stop.is_set():
            for path in settings.checkouts.glob("ada-*.duckdb"):
                if path.name not in seen:
                    seen.append(path.name)
                    if len(seen) == 2:
                        with store.connect(settings.duckdb_path) as con:
                            _episode(con, "ada", "ada-landed", "landed while the patrol ran")
                        return
            stop.wait(0.002)

    watcher = threading.Thread(target=land_an_episode_during_nodes)
    watcher.start()
    try:
        [summary] = run_job(settings, "patrol", being="ada")
    finally:
        stop.set()
        watcher.join()
    assert summary.success
    with dg.DagsterInstance.get() as instance:
        retried = instance.get_records_for_run(
            summary.run_id, of_type=dg.DagsterEventType.STEP_UP_FOR_RETRY
        ).records
    assert [r.event_log_entry.step_key for r in retried] == ["nodes"]
    with store.connect(settings.duckdb_path, read_only=True) as con:
        episodes, nodes = con.execute(
            "SELECT (SELECT count(*) FROM episodes WHERE being_id = 'ada'), "
            "(SELECT count(*) FROM nodes WHERE being_id = 'ada')"
        ).fetchone()
        landed = con.execute("SELECT count(*) FROM episodes WHERE episode_id = 'ada-landed'").fetchone()[0]
    assert landed == 1 and nodes == episodes - 1  # its scene comes with the next patrol
    assert all(s.success for s in run_job(settings, "patrol", being="ada"))
    with store.connect(settings.duckdb_path, read_only=True) as con:
        assert con.execute("SELECT count(*) FROM nodes WHERE being_id = 'ada'").fetchone()[0] == episodes


def test_a_publish_of_the_being_meanwhile_is_no_conflict(stores):
    """`memories` (another run's, spanning every being) records what it published while ada's step
    works: that bookkeeping is not ada's step's to overwrite, and no reason to run it again."""
    path, folder = stores
    with checkout.checkout(path, folder, "ada") as con:
        con.execute("UPDATE episodes SET text = 'ada changed it' WHERE episode_id = 'ada-1'")
        with store.connect(path) as live:
            live.execute("INSERT INTO published_memories VALUES ('n-1', 'ada', 'h1', now()::TIMESTAMP)")
    assert _texts(path, "ada") == ["ada changed it"]
    with store.connect(path, read_only=True) as con:
        assert con.execute("SELECT memory_ref FROM published_memories").fetchall() == [("n-1",)]
