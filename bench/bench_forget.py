"""The permanent forget on LoCoMo: a `forget` run erasing one memory, beside a no-op run of the same job.

LoCoMo (one being per conversation, plus one turn holding a unique phrase) is ingested,
patrolled and narrated into a temporary MINDFLOW_HOME; then the same job runs with nothing
approved, and again to erase the phrase's memory. Prints both times, what the erase took per
store (the DuckDB file rewrite apart), and the grep over every byte of the home.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import locomo  # noqa: E402

PHRASE = "KESTREL-4410-VX"


def main() -> int:
    if not locomo.DATASET.is_dir():
        print(f"skipped: {locomo.DATASET} not found")
        return 0
    home = Path(tempfile.mkdtemp(prefix="mindflow-bench-forget-"))
    os.environ["MINDFLOW_HOME"] = str(home)
    os.environ["DAGSTER_HOME"] = str(home / "dagster")
    try:
        return run(home)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def run(home: Path) -> int:
    import dagster as dg

    from mindflow import store
    from mindflow.config import load_settings
    from mindflow.loop import forget
    from mindflow.runner import run_job

    settings = load_settings()
    counts = locomo.write_inbox(settings.inbox)
    being = sorted(counts)[0]
    inbox_file = next((settings.inbox / being).glob("*.jsonl"))
    secret = {
        "id": "bench-secret",
        "ts": "2023-05-08T13:56:00Z",
        "speaker": "Caroline",
        "role": "user",
        "text": f"Caroline: the heron ledger password is {PHRASE}, do not tell anyone.",
        "session_id": "session_1",
    }
    with inbox_file.open("a") as fh:
        fh.write(json.dumps(secret) + "\n")
    t0 = time.perf_counter()
    for job in ("ingest", "patrol", "narrative"):
        run_job(settings, job)
    setup = time.perf_counter() - t0
    with store.connect(settings.duckdb_path, read_only=True) as con:
        episodes, nodes = con.execute(
            "SELECT (SELECT count(*) FROM episodes), (SELECT count(*) FROM nodes)"
        ).fetchone()
    size = settings.duckdb_path.stat().st_size

    def grep() -> list[str]:
        cmd = ["grep", "-r", "-a", "-i", "-l", PHRASE, str(home)]
        out = subprocess.run(cmd, capture_output=True, text=True)
        return [str(Path(p).relative_to(home)) for p in out.stdout.split()]

    before = grep()
    t0 = time.perf_counter()
    run_job(settings, "forget")
    noop = time.perf_counter() - t0

    proposal = forget.propose(settings, being, f"heron ledger password {PHRASE}")
    forget.confirm(settings, being, proposal.proposal_id, permanent=True)
    t0 = time.perf_counter()
    run_job(settings, "forget")
    erase = time.perf_counter() - t0
    after = grep()
    with dg.DagsterInstance.get() as instance:
        event = instance.get_latest_materialization_event(dg.AssetKey("erasures"))
        meta = {k: v.value for k, v in event.asset_materialization.metadata.items()}

    print(f"LoCoMo dev: {len(counts)} beings, {episodes} episodes, {nodes} memories")
    print(f"DuckDB file before: {size / 1e6:.1f} MB")
    print(f"setup (ingest + patrol + narrative): {setup:.1f} s")
    print(f"forget, nothing approved (no-op):    {noop:.2f} s")
    print(
        f"forget, one memory erased:           {erase:.2f} s "
        f"(inside the asset {meta['seconds']:.2f} s, of which the DuckDB file rewrite "
        f"{meta['duckdb_rewrite_seconds']:.2f} s: {meta['duckdb_bytes_before'] / 1e6:.1f} MB -> "
        f"{meta['duckdb_bytes_after'] / 1e6:.1f} MB)"
    )
    print(
        f"erased: {meta['refs']} refs, {meta['episodes']} episodes, {meta['lance_rows']} LanceDB rows, "
        f"{meta['lance_versions_removed']} LanceDB versions removed, {meta['inbox_lines']} inbox lines, "
        f"{meta['chapters_renarrated']} chapters narrated again, "
        f"{meta['commits_rewritten']} commits rewritten"
    )
    print(
        f"grep -r -a -i {PHRASE} MINDFLOW_HOME: before {len(before)} files "
        f"({', '.join(before[:6])}), after {len(after)}"
    )
    return 1 if after or not before else 0


if __name__ == "__main__":
    raise SystemExit(main())
