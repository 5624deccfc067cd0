"""A `mindflow run` killed with -9 mid-step, or frozen while it holds pool `duckdb`: later runs
wait asleep, say what they wait for, stop on Ctrl-C, and complete once the holder is gone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.test_cli import SAMPLES, mindflow, start

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc for CPU time")

TICKS = os.sysconf("SC_CLK_TCK")


def _instance(home: Path):
    import dagster as dg

    assert os.environ["DAGSTER_HOME"] == str(home / "dagster")
    return dg.DagsterInstance.get()


def _wait_for_step(home: Path, job: str, proc: subprocess.Popen, timeout: float = 120) -> str:
    """The run id of `job` once one of its steps has started (the pool is taken then)."""
    import dagster as dg

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"{job} ended before a step started: {proc.communicate()}"
        if (home / "dagster" / "dagster.yaml").exists():
            with _instance(home) as instance:
                for record in instance.get_run_records(
                    dg.RunsFilter(job_name=job, statuses=[dg.DagsterRunStatus.STARTED])
                ):
                    run_id = record.dagster_run.run_id
                    if instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.STEP_START).records:
                        return run_id
        time.sleep(0.2)
    raise AssertionError(f"no step of {job} started within {timeout} s")


def _cpu_seconds(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    fields = stat[stat.rfind(b")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


class _Lines:
    """Every line a pipe gives, read on a thread (no deadlock), to wait for one and read all."""

    def __init__(self, stream):
        import threading

        self.lines: list[str] = []
        self._thread = threading.Thread(target=lambda: self.lines.extend(stream), daemon=True)
        self._thread.start()

    def wait_for(self, needle: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(needle in line for line in list(self.lines)):
                return "".join(self.lines)
            time.sleep(0.2)
        raise AssertionError(f"{needle!r} not printed within {timeout} s; got {''.join(self.lines)!r}")

    def all(self, timeout: float = 15) -> str:
        self._thread.join(timeout)  # the pipe closes when the process ends
        return "".join(self.lines)


def _kill_patrol_mid_step(home: Path) -> tuple[str, subprocess.Popen]:
    """`mindflow run patrol` killed with -9 once a step has started: its run id and process."""
    victim = start(home, "run", "patrol")
    killed_run = _wait_for_step(home, "patrol", victim)
    victim.send_signal(signal.SIGKILL)
    victim.communicate()
    return killed_run, victim


@pytest.fixture
def ingested(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("DAGSTER_HOME", str(home / "dagster"))  # this test reads the runs too
    landed = mindflow(home, "ingest", str(SAMPLES / "bram" / "2026-10-20.md"), "--being", "bram")
    assert landed.returncode == 0, landed.stderr
    ran = mindflow(home, "run", "ingest")
    assert ran.returncode == 0, ran.stderr
    return home


def test_a_run_killed_mid_step_never_blocks_the_next_one(ingested):
    home = ingested
    killed_run, victim = _kill_patrol_mid_step(home)

    # Before the fix the next run waited for the dead run's slot for ever, printing nothing.
    again = mindflow(home, "run", "patrol", timeout=240)
    assert again.returncode == 0, again.stderr
    assert "patrol [bram] run" in again.stdout and ": ok" in again.stdout
    assert (
        f"run {killed_run} (patrol, pid {victim.pid}) was left unfinished by a dead process" in again.stderr
    )

    import dagster as dg

    with _instance(home) as instance:
        assert instance.get_run_by_id(killed_run).status == dg.DagsterRunStatus.FAILURE
        assert not instance.event_log_storage.get_concurrency_run_ids()

    # `mindflow status` sees the memory the second patrol made.
    status = mindflow(home, "status")
    assert status.returncode == 0 and "bram" in status.stdout


def test_status_shows_a_killed_run_before_anything_reaps_it(ingested):
    home = ingested
    killed_run, victim = _kill_patrol_mid_step(home)

    status = mindflow(home, "status")
    assert status.returncode == 0, status.stderr
    killed = [line for line in status.stdout.splitlines() if line.startswith("killed: ")]
    assert len(killed) == 1, status.stdout
    assert killed[0].startswith(f"killed: patrol run {killed_run} (started since ")
    assert killed[0].endswith(
        f"): process {victim.pid} is gone; the next `mindflow run` or `mindflow init` marks it failed"
    )

    import dagster as dg

    # Status only tells: the run is still recorded started and no failure was written.
    with _instance(home) as instance:
        assert instance.get_run_by_id(killed_run).status == dg.DagsterRunStatus.STARTED
    assert not (home / "runs" / "failures.jsonl").exists()
    reaped = mindflow(home, "init")
    assert reaped.returncode == 0, reaped.stderr
    after = mindflow(home, "status")
    assert "killed: " not in after.stdout and f"run {killed_run}" in after.stdout


def test_a_waiting_run_says_why_sleeps_and_stops_on_ctrl_c(ingested):
    home = ingested
    holder = start(home, "run", "patrol")
    held_by = _wait_for_step(home, "patrol", holder)
    holder.send_signal(signal.SIGSTOP)  # alive, holding the pool, doing nothing
    with _instance(home) as instance:
        # What keeps the daemon's queue (UI and sensor runs) waiting behind a CLI run too.
        assert "duckdb" in instance.get_run_by_id(held_by).run_op_concurrency.all_pools
    try:
        waiter = start(home, "run", "decay")
        stderr = _Lines(waiter.stderr)
        said = stderr.wait_for("waiting for pool duckdb", timeout=90)
        assert "patrol run" in said and f"pid {holder.pid}" in said and "Ctrl-C" in said

        # Waiting costs nothing measurable: before the fix it spun at ~0.8 of a core.
        before = _cpu_seconds(waiter.pid)
        time.sleep(5)
        spent = _cpu_seconds(waiter.pid) - before
        assert spent < 0.25, f"the waiting run used {spent:.2f} s of CPU in 5 s"

        waiter.send_signal(signal.SIGINT)
        waiter.wait(timeout=15)
        err = stderr.all()
        assert waiter.returncode == 130, err
        assert "interrupted" in err and "Traceback" not in err
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.communicate()

    # The frozen holder is gone now: the next run marks it failed and completes.
    again = mindflow(home, "run", "decay", timeout=240)
    assert again.returncode == 0, again.stderr
    assert "decay [" in again.stdout and ": ok" in again.stdout
    # Its turn note went with its turn.
    assert not (home / "dagster" / "pool-duckdb.lock.holder").exists()


def test_a_run_waits_while_a_stopped_process_keeps_dagster_storage_locked(ingested):
    """A process stopped mid-write (Ctrl-Z, a debugger) keeps Dagster's SQLite event log locked:
    the next run says so and waits, and completes once the lock is gone, instead of failing when
    SQLite's busy timeout runs out."""
    import sqlite3
    import threading

    import dagster as dg

    from sensors.runs import stale_run_sensor

    home = ingested
    index = home / "dagster" / "history" / "runs" / "index.db"
    assert index.exists(), sorted(str(p.relative_to(home)) for p in (home / "dagster").rglob("*"))
    holder = sqlite3.connect(index, isolation_level=None)
    # What a Dagster process holds while it closes the last connection to a WAL file (it
    # checkpoints under an exclusive lock): nobody else can even read it. Dagster's storage
    # opens and closes a connection per operation, so a process stopped at a random instant
    # is often stopped here.
    holder.execute("PRAGMA locking_mode=EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        waiter = start(home, "run", "decay")
        stdout, stderr = _Lines(waiter.stdout), _Lines(waiter.stderr)
        # The daemon's stale_run_sensor meanwhile skips its tick, saying why, instead of erring.
        ticks: list = []

        def tick():
            with _instance(home) as instance:
                ticks.append(stale_run_sensor(dg.build_sensor_context(instance=instance)))

        sensor = threading.Thread(target=tick, daemon=True)
        sensor.start()
        said = stderr.wait_for("the storage is locked", timeout=120)
        assert "waiting for pool duckdb" in said and "Traceback" not in said
        assert waiter.poll() is None, said
        sensor.join(120)
        assert len(ticks) == 1 and "locked" in ticks[0].skip_message, ticks
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    waiter.wait(timeout=240)
    assert waiter.returncode == 0, stderr.all()
    out = stdout.all()
    assert "decay [" in out and ": ok" in out


def test_turn_notes_name_a_live_holder_only(tmp_path):
    from mindflow import pool

    lock = tmp_path / "pool-duckdb.lock"
    assert pool.read_turn_note(lock) is None
    pool.write_turn_note(lock, "patrol", "bram")
    note = pool.read_turn_note(lock)
    assert note is not None and note.pid == os.getpid()
    assert note.describe().startswith(f"patrol run for bram (pid {os.getpid()}, since ")
    assert [p.name for p in tmp_path.iterdir()] == ["pool-duckdb.lock.holder"]

    gone = subprocess.Popen(["true"])
    gone.wait()
    note = {"job": "patrol", "label": "bram", "pid": gone.pid, "start": None, "since": "x"}
    pool.TurnNote.path(lock).write_text(json.dumps(note))
    assert pool.read_turn_note(lock) is None  # its process is gone: the note names nobody
    pool.TurnNote.path(lock).write_text("{not json")
    assert pool.read_turn_note(lock) is None


@pytest.mark.parametrize("message", ["database is locked", "locking protocol"])
def test_sqlite_refusals_of_a_stopped_writer_read_as_a_locked_storage(message):
    """Both of SQLite's answers while a stopped process holds its lock are a wait, not a crash:
    "locking protocol" once reached a run's first reap as a traceback (a WAL lock a SIGSTOPped
    patrol held), where the run should have said it waits."""
    import sqlite3

    from mindflow import pool

    def read():
        raise sqlite3.OperationalError(message)

    with pytest.raises(pool.StorageLocked):
        pool._storage_read(read)()

    def other():
        raise sqlite3.OperationalError("no such table: runs")

    with pytest.raises(sqlite3.OperationalError):
        pool._storage_read(other)()


def test_init_marks_a_dead_run_failed(ingested):
    import dagster as dg

    home = ingested
    killed_run, _ = _kill_patrol_mid_step(home)

    done = mindflow(home, "init")
    assert done.returncode == 0, done.stderr
    with _instance(home) as instance:
        assert instance.get_run_by_id(killed_run).status == dg.DagsterRunStatus.FAILURE


def test_a_dagster_run_killed_mid_step_is_found_by_its_engine_pid(ingested):
    """A run started outside mindflow's CLI (here `dagster job execute`, as the UI's launcher
    does) carries no mindflow tags: the pid in its engine events tells that it is gone."""
    import dagster as dg

    from tests.test_cli import REPO, env_for

    home = ingested
    victim = subprocess.Popen(
        [
            str(REPO / ".venv" / "bin" / "dagster"),
            "job",
            "execute",
            "-f",
            str(REPO / "definitions.py"),
            "-d",
            str(REPO),
            "-j",
            "patrol",
            "--tags",
            '{"dagster/partition": "bram"}',
        ],
        env=env_for(home),
        cwd=home,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    killed_run = _wait_for_step(home, "patrol", victim)
    victim.send_signal(signal.SIGKILL)
    victim.wait()

    from sensors.runs import stale_run_sensor

    with _instance(home) as instance:
        assert instance.get_run_by_id(killed_run).status == dg.DagsterRunStatus.STARTED
        # What the daemon does every 30 s: the sensor judges the run by its engine pid.
        result = stale_run_sensor(dg.build_sensor_context(instance=instance))
        assert "marked 1 run(s) failed" in result.skip_message
        assert instance.get_run_by_id(killed_run).status == dg.DagsterRunStatus.FAILURE
        # A live run is left alone: a second look finds nothing to do.
        again = stale_run_sensor(dg.build_sensor_context(instance=instance))
        assert "every unfinished run has a live process" in again.skip_message

    done = mindflow(home, "run", "patrol", timeout=240)
    assert done.returncode == 0, done.stderr


def test_a_run_with_nothing_to_do_still_marks_a_dead_run_failed(ingested):
    home = ingested
    killed_run, victim = _kill_patrol_mid_step(home)

    idle = mindflow(home, "run", "ingest")  # no pending inbox file: it launches no run
    assert idle.returncode == 0, idle.stderr
    assert "nothing to do" in idle.stdout
    assert f"run {killed_run} (patrol, pid {victim.pid}) was left unfinished by a dead process" in idle.stderr

    import dagster as dg

    with _instance(home) as instance:
        assert instance.get_run_by_id(killed_run).status == dg.DagsterRunStatus.FAILURE
    # No Dagster daemon runs here: the run is recorded as failed all the same.
    status = mindflow(home, "status")
    assert "ALERT 1 failed run(s)" in status.stdout
    assert f"patrol [bram]  run {killed_run}" in status.stdout and "process is gone" in status.stdout
    audit = mindflow(home, "audit", "--action", "ALERT")
    assert "job:patrol" in audit.stdout


def test_a_being_whose_episodes_were_stored_by_a_run_that_then_died_is_patrolled(tmp_path, monkeypatch):
    import duckdb

    home = tmp_path / "home"
    monkeypatch.setenv("DAGSTER_HOME", str(home / "dagster"))
    landed = mindflow(home, "ingest", str(SAMPLES / "bram" / "2026-10-20.md"), "--being", "bram")
    assert landed.returncode == 0, landed.stderr
    # Where an ingested file moves (inbox/.done) is a file: the run dies after storing the episodes,
    # as one killed right after its INSERT would.
    (home / "inbox" / ".done").write_text("")
    died = mindflow(home, "run", "ingest")
    assert died.returncode == 1 and "ingest run" in died.stderr and "failed" in died.stderr
    assert "ALERT 1 failed run(s)" in mindflow(home, "status").stdout  # recorded without a daemon
    with duckdb.connect(str(home / "mindflow.duckdb"), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM episodes WHERE being_id = 'bram'").fetchone()[0] > 0

    # Before, the being became a partition only at the end of the run: patrol refused it as
    # unknown, and the nightly patrol over the partitions never saw its episodes.
    patrolled = mindflow(home, "run", "patrol", "--being", "bram")
    assert patrolled.returncode == 0, patrolled.stderr
    assert "patrol [bram] run" in patrolled.stdout and ": ok" in patrolled.stdout
    (home / "inbox" / ".done").unlink()
    again = mindflow(home, "run", "ingest")  # the file is still pending: stored once, then moved
    assert again.returncode == 0, again.stderr
    assert not list((home / "inbox" / "bram").iterdir())
