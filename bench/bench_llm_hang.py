"""Wall time of a patrol whose model never answers, beside the same patrol with no model.

A loopback server (tests/llm_server.py) accepts every request and never answers: a hung
model, reached through the real openai SDK. The patrol job runs through Dagster over the
sample beings (ada, bram: one run, as `mindflow run patrol`) with the patrol model on that
server, each configuration on a fresh MINDFLOW_HOME after the same (untimed) ingest:

- no model configured: the baseline;
- the hung model with the breaker and the run budget out of reach: the behaviour before them;
- the hung model with the default breaker (MINDFLOW_LLM_BREAKER_FAILURES=5);
- the hung model with the breaker out of reach and a 3 s run budget (MINDFLOW_LLM_RUN_BUDGET_S);
- no model again, last: on a shared machine the two baselines show the noise in wall time
  (the model seconds, from the runs' metadata, are not noisy).

The per-request timeout is 0.5 s (default 120 s) and retries wait 0.05 s (default 1 s,
doubling), so the bench takes under two minutes; the last column prices the same
requests at the defaults. Extraction stays mechanical (MINDFLOW_LLM unset): the steps
that ask the patrol model are roots, ❹, ❻, diary and think.md.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

TIMEOUT_S = 0.5
DEFAULT_TIMEOUT_S = 120.0
DEFAULT_RETRY_WAITS_S = (1.0, 2.0)  # the default backoff before retry 1 and 2
UNREACHABLE = {"MINDFLOW_LLM_BREAKER_FAILURES": "1000000", "MINDFLOW_LLM_RUN_BUDGET_S": "1000000"}
CONFIGURATIONS = [
    ("no model (baseline)", None),
    ("hung model, no breaker, no run budget (before)", UNREACHABLE),
    ("hung model, default breaker (5 in a row)", {"MINDFLOW_LLM_RUN_BUDGET_S": "1000000"}),
    ("hung model, no breaker, run budget 3 s", {**UNREACHABLE, "MINDFLOW_LLM_RUN_BUDGET_S": "3"}),
    ("no model (baseline again: the spread is noise)", None),
]


def llm_metadata(instance, run_id: str) -> dict[str, float]:
    """Requests and retries summed over the run's assets; the run's model seconds (shared)."""
    import dagster as dg

    out = {"calls": 0.0, "retries": 0.0, "run_seconds": 0.0}
    records = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION).records
    for record in records:
        meta = record.event_log_entry.dagster_event.event_specific_data.materialization.metadata
        out["calls"] += meta["llm/calls"].value if "llm/calls" in meta else 0
        out["retries"] += meta["llm/retries"].value if "llm/retries" in meta else 0
        if "llm/run_seconds" in meta:  # absent before the run budget existed
            out["run_seconds"] = max(out["run_seconds"], meta["llm/run_seconds"].value)
    return out


def patrol_once(folder: Path, name: str, server_url: str, env: dict[str, str] | None) -> tuple[float, str]:
    """(wall seconds of the patrol run, its run id) on a fresh home with the samples ingested."""
    from mindflow.config import load_settings
    from mindflow.runner import run_job

    home = folder / name
    os.environ["MINDFLOW_HOME"] = str(home)
    os.environ["DAGSTER_HOME"] = str(home / "dagster")
    for key in ("MINDFLOW_LLM", "MINDFLOW_LLM_PATROL", *UNREACHABLE):
        os.environ.pop(key, None)
    if env is not None:
        os.environ.update(MINDFLOW_LLM_PATROL="openai:gpt-4o", MINDFLOW_LLM_BASE_URL=server_url, **env)
    settings = load_settings()
    shutil.copytree(ROOT / "data" / "samples" / "inbox", settings.inbox)
    run_job(settings, "ingest")
    started = time.perf_counter()
    (summary,) = run_job(settings, "patrol")
    elapsed = time.perf_counter() - started
    if not summary.success:
        raise SystemExit(f"{name}: the patrol failed")
    return elapsed, summary.run_id


def main() -> int:
    import dagster as dg
    from llm_server import NEVER, LLMServer

    # Each failed request logs a warning (the run's log has them): here they would bury the table.
    logging.getLogger("mindflow.llm").setLevel(logging.ERROR)
    server = LLMServer()
    server.responder = lambda request: NEVER
    os.environ.update(
        OPENAI_API_KEY="bench-key",
        MINDFLOW_LLM_TIMEOUT_S=str(TIMEOUT_S),
        MINDFLOW_LLM_RETRY_BACKOFF_S="0.05",
        MINDFLOW_LLM_MAX_RETRIES="2",
    )
    folder = Path(tempfile.mkdtemp(prefix="mindflow-bench-hang-"))
    print(
        f"patrol of the sample beings (ada, bram) in one run; the patrol model never answers; "
        f"per-request timeout {TIMEOUT_S} s, 2 retries\n"
    )
    patrol_once(folder, "warm-up", server.url, None)  # imports and the embedding model, once
    print(f"{'configuration':<50}{'wall s':>8}{'requests':>10}{'model s':>9}{'at 120 s timeout':>18}")
    baseline = 0.0
    for index, (label, env) in enumerate(CONFIGURATIONS):
        server.requests.clear()
        elapsed, run_id = patrol_once(folder, f"run-{index}", server.url, env)
        meta = llm_metadata(dg.DagsterInstance.get(), run_id)
        requests = len(server.requests)
        # The same requests at the defaults: each a whole timeout, each retry after its wait.
        completions = max(0.0, meta["calls"] - meta["retries"])
        waits = (
            min(meta["retries"], completions) * DEFAULT_RETRY_WAITS_S[0]
            + max(0.0, meta["retries"] - completions) * DEFAULT_RETRY_WAITS_S[1]
        )
        if env is None:
            baseline = baseline or elapsed
        at_defaults = baseline + requests * DEFAULT_TIMEOUT_S + waits
        model = f"{meta['run_seconds']:.1f}" if meta["run_seconds"] else "-"
        print(f"{label:<50}{elapsed:>8.1f}{requests:>10}{model:>9}{at_defaults / 60:>14.1f} min")
    print(
        "\n(the last column: the baseline plus each request at the default 120 s timeout and the "
        "default retry waits; with the default breaker a hung model costs 5 requests per run, and "
        "MINDFLOW_LLM_RUN_BUDGET_S, 1800 s by default, bounds a slow one)"
    )
    server.close()
    shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
