"""Decay over 1,000,000 synthetic decay_scores rows, beside a bare one-column UPDATE."""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ROWS = 1_000_000


def main(rows: int = ROWS, folder: Path | None = None) -> int:
    """The benchmark over `rows` rows in `folder` (a temporary one by default); tests run it small,
    so it keeps up with the table's schema."""
    from mindflow import store
    from mindflow.decay import compute_scores, run_decay

    path = (folder or Path(tempfile.mkdtemp(prefix="mindflow-bench-"))) / "mindflow.duckdb"
    as_of = datetime(2026, 11, 1)
    with store.connect(path) as con:
        con.execute(
            f"""
            INSERT INTO decay_scores (
                memory_ref, being_id, store, kind, base_relevance, created_at, last_accessed,
                access_count, type_weight, score, status, pinned, retention_from, retention_days, as_of
            )
            SELECT 'n-' || i, 'being-' || (i % 11), 'nodes',
                   ['message', 'fact', 'decision', 'task'][1 + i % 4],
                   (i % 100) / 100.0,
                   TIMESTAMP '2026-01-01' + to_seconds((i * 25) % 25000000),
                   TIMESTAMP '2026-01-01' + to_seconds((i * 25) % 25000000),
                   1 + i % 7, [0.8, 1.2, 1.0, 1.5][1 + i % 4], NULL, 'active',
                   i % 97 = 0, NULL, NULL, NULL
            FROM range({rows}) t(i)
            """
        )
        # The first pass sets every status; then each pass is the next night.
        run_decay(con, as_of - timedelta(days=1))
        bare, arith, scores, nightly = [], [], [], []
        for night in range(5):
            day = as_of + timedelta(days=night)
            t0 = time.perf_counter()
            con.execute("UPDATE decay_scores SET as_of = ?", [day])
            bare.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            con.execute("UPDATE decay_scores SET score = base_relevance * type_weight")
            arith.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            n = compute_scores(con, day)
            scores.append(time.perf_counter() - t0)
            con.execute("UPDATE decay_scores SET status = 'active', as_of = ?", [day - timedelta(days=1)])
            compute_scores(con, day - timedelta(days=1))  # back to the night before
            t0 = time.perf_counter()
            report = run_decay(con, day)
            nightly.append(time.perf_counter() - t0)
        assert n == rows and report.scored == rows, (n, report.scored)
        statuses = dict(con.execute("SELECT status, count(*) FROM decay_scores GROUP BY 1").fetchall())
        expected = {s: statuses.get(s, 0) for s in report.statuses}
        assert report.statuses == expected, (report.statuses, statuses)
    b, a = statistics.median(bare), statistics.median(arith)
    d, r = statistics.median(scores), statistics.median(nightly)
    print(f"## decay over {rows:,} rows (median of 5 nights)")
    print(f"bare UPDATE, one column := constant          {b:8.3f} s   baseline 1")
    print(f"bare UPDATE, one column := a * b             {a:8.3f} s   baseline 2")
    print(
        f"compute_scores: scores, changed statuses     {d:8.3f} s   "
        f"{d / b:.2f}x baseline 1, {d / a:.2f}x baseline 2 (target <= 2x)"
    )
    print(
        f"run_decay: + registration, counts, transitions {r:6.3f} s   "
        f"{r / b:.2f}x baseline 1, {r / a:.2f}x baseline 2"
    )
    print(f"statuses after the last night   {statuses}; last night's changes {report.changes}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
