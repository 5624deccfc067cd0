"""Patrol of 10 beings x 1,000 synthetic episodes: in parallel on the scale profile, beside the same
work sequentially on the default profile, in the same run.

The scale profile is PostgreSQL (Dagster instance) and moto's S3 server (LanceDB) on 127.0.0.1,
started by mindflow.scale, with MINDFLOW_DUCKDB_WRITERS runs writing the relational stores at
once (each being's steps on a checkout of its rows, mindflow/checkout.py). The same parallel
start with one writer (the runs queue on pool `duckdb`) shows what the checkouts add. Each
patrol is its own `mindflow run patrol --being B` process, as a run worker would start it.

Usage: python bench/bench_scale.py [--beings 10] [--episodes 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

MINDFLOW = [sys.executable, "-c", "from mindflow.entry import main; main()"]
WORDS = (
    "invoice report deploy garden marathon budget recipe contract lecture train bicycle museum "
    "database migration holiday dentist concert sprint review pottery harbour violin ledger "
    "tomato kitchen bridge cabin novel camera ticket river pipeline meeting festival"
).split()


def write_inbox(inbox: Path, beings: int, episodes: int) -> None:
    rng = random.Random(18)
    for b in range(beings):
        being = f"b{b:02d}"
        folder = inbox / being
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / "episodes.jsonl", "w") as out:
            for i in range(episodes):
                day, minute = 1 + i // 60, i % 60
                text = f"{being} noted the {' '.join(rng.sample(WORDS, 6))} ({i})."
                ts = f"2026-03-{1 + day % 28:02d}T{8 + day // 28:02d}:{minute:02d}:00Z"
                out.write(json.dumps({"id": f"{being}-{i}", "ts": ts, "text": text, "kind": "event"}) + "\n")


def prepare(env: dict, beings: int, episodes: int) -> None:
    """The home with its episodes ingested: not part of the measurement."""
    write_inbox(Path(env["MINDFLOW_HOME"]) / "inbox", beings, episodes)
    subprocess.run([*MINDFLOW, "run", "ingest"], env=env, check=True, capture_output=True)


def patrols(env: dict, beings: int, parallel: bool) -> float:
    names = [f"b{b:02d}" for b in range(beings)]
    started = time.perf_counter()
    if parallel:
        running = [
            subprocess.Popen([*MINDFLOW, "run", "patrol", "--being", b], env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
            for b in names
        ]  # fmt: skip
        for process in running:
            _, err = process.communicate()
            if process.returncode != 0:
                raise SystemExit(f"a parallel patrol failed: {err[-1500:]}")
    else:
        for b in names:
            subprocess.run(
                [*MINDFLOW, "run", "patrol", "--being", b], env=env, check=True, capture_output=True
            )
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--beings", type=int, default=10)
    parser.add_argument("--episodes", type=int, default=1000)
    args = parser.parse_args()
    from mindflow import scale

    if scale.postgres_bin() is None:
        print("skipped: PostgreSQL is not installed (make postgres)")
        return 0
    work = Path(tempfile.mkdtemp(prefix="mindflow-bench-scale-"))
    work.chmod(0o755)  # as root, PostgreSQL runs as `postgres`, who must reach its folder
    base = {k: v for k, v in os.environ.items() if not k.startswith(("MINDFLOW_", "DAGSTER_"))}
    default_env = {
        **base,
        "MINDFLOW_HOME": str(work / "default"),
        "DAGSTER_HOME": str(work / "default/dagster"),
    }
    profile, _ = scale.up(work / "scale")
    try:
        home = work / "scale" / "home"
        scale_env = {
            **base,
            **profile.env(),
            "MINDFLOW_HOME": str(home),
            "DAGSTER_HOME": str(home / "dagster"),
        }
        # The same profile with one writer: a home and a LanceDB prefix of its own.
        queued_env = {
            **scale_env,
            "MINDFLOW_HOME": str(home.with_name("home-one-writer")),
            "DAGSTER_HOME": str(home.with_name("home-one-writer") / "dagster"),
            "MINDFLOW_LANCE_URI": scale_env["MINDFLOW_LANCE_URI"] + "-one-writer",
            "MINDFLOW_DUCKDB_WRITERS": "1",
        }
        total = args.beings * args.episodes
        for env in (default_env, scale_env, queued_env):
            prepare(env, args.beings, args.episodes)
        sequential = patrols(default_env, args.beings, parallel=False)
        queued = patrols(queued_env, args.beings, parallel=True)
        parallel = patrols(scale_env, args.beings, parallel=True)
        writers = scale_env["MINDFLOW_DUCKDB_WRITERS"]
    finally:
        scale.down(work / "scale", purge=True)

    print(f"## patrol of {args.beings} beings x {args.episodes:,} episodes ({total:,} episodes), 2 cores")
    print(
        f"default profile, one run after another   {sequential:8.1f} s"
        f"  ({total / sequential:6.1f} episodes/s)"
        "  baseline (DuckDB, LanceDB on disk, Dagster on SQLite)"
    )
    print(
        f"scale profile, started at once, 1 writer  {queued:8.1f} s  ({total / queued:6.1f} episodes/s)"
        f"  {queued / sequential:.2f}x baseline (PostgreSQL + S3 on loopback; the runs queue on pool"
        " `duckdb`)"
    )
    print(
        f"scale profile, started at once, {writers} writers"
        f" {parallel:8.1f} s  ({total / parallel:6.1f} episodes/s)"
        f"  {parallel / sequential:.2f}x baseline ({writers} runs at once, each being on a checkout)"
    )
    print(f"cores: {os.cpu_count()} (each run's embedding already uses every core)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
