"""Run every benchmark; each prints its figures beside a baseline measured in the same run."""

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHMARKS = [
    "bench_decay.py",
    "bench_ingest_patrol.py",
    "bench_recall.py",
    "bench_latency.py",
    "bench_read_your_writes.py",
    "bench_ebooks.py",
    "bench_llm.py",
    "bench_llm_hang.py",
    "bench_forget.py",
    "bench_fold.py",
]

if __name__ == "__main__":
    failed = 0
    for name in BENCHMARKS:
        print(f"\n=== {name}", flush=True)
        failed |= subprocess.call([sys.executable, str(HERE / name)])
    raise SystemExit(failed)
