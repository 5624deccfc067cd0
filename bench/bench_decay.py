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
ARITH = "UPDATE decay_scores SET score = base_relevance * type_weight"  # baseline 2


def main(rows: int = ROWS, folder: Path | None = None) -> int:
    """The benchmark over `rows` rows in `folder` (a temporary one by default); tests run it small,
    so it keeps up with the table's schema."""
    from mindflow import store
    from mindflow.decay import compute_scores, run_decay

    path = (folder or Path(tempfile.mkdtemp(prefix="mindflow-bench-"))) / "mindflow.duckdb"
    as_of = datetime(2026, 11, 1)
    scored: list[int] = []
    reports = []
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
        timings: dict[str, list[tuple[float, float]]] = {}

        def timed(name: str, work) -> None:
            """`work` from a checkpointed database: (the statements, the statements and the
            checkpoint that writes their changes to the file). DuckDB checkpoints on its own once
            its log passes 16 MiB, inside whichever statement crosses it; started clean, each
            operation pays for its own changes and for none of the untimed ones before it."""
            con.execute("CHECKPOINT")
            t0 = time.perf_counter()
            work()
            t1 = time.perf_counter()
            con.execute("CHECKPOINT")
            timings.setdefault(name, []).append((t1 - t0, time.perf_counter() - t0))

        for night in range(5):
            day = as_of + timedelta(days=night)
            timed("bare", lambda day=day: con.execute("UPDATE decay_scores SET as_of = ?", [day]))
            timed("arith", lambda: con.execute(ARITH))
            timed("scores", lambda day=day: scored.append(compute_scores(con, day)))
            con.execute("UPDATE decay_scores SET status = 'active', as_of = ?", [day - timedelta(days=1)])
            compute_scores(con, day - timedelta(days=1))  # back to the night before
            timed("nightly", lambda day=day: reports.append(run_decay(con, day)))
        n, report = scored[-1], reports[-1]
        assert n == rows and report.scored == rows, (n, report.scored)
        statuses = dict(con.execute("SELECT status, count(*) FROM decay_scores GROUP BY 1").fetchall())
        expected = {s: statuses.get(s, 0) for s in report.statuses}
        assert report.statuses == expected, (report.statuses, statuses)
    durable = {name: statistics.median(t for _, t in runs) for name, runs in timings.items()}
    alone = {name: statistics.median(t for t, _ in runs) for name, runs in timings.items()}
    b, a, d, r = (durable[name] for name in ("bare", "arith", "scores", "nightly"))
    print(f"## decay over {rows:,} rows (median of 5 nights; each from a checkpointed database, timed")
    print("## with the checkpoint that writes its changes; in brackets: the statements alone)")
    print(f"bare UPDATE, one column := constant          {b:8.3f} s ({alone['bare']:.3f} s)   baseline 1")
    print(f"bare UPDATE, one column := a * b             {a:8.3f} s ({alone['arith']:.3f} s)   baseline 2")
    print(
        f"compute_scores: scores, changed statuses     {d:8.3f} s ({alone['scores']:.3f} s)   "
        f"{d / b:.2f}x baseline 1, {d / a:.2f}x baseline 2 (target <= 2x)"
    )
    print(
        f"run_decay: + registration, counts, transitions {r:6.3f} s ({alone['nightly']:.3f} s)   "
        f"{r / b:.2f}x baseline 1, {r / a:.2f}x baseline 2"
    )
    print(f"statuses after the last night   {statuses}; last night's changes {report.changes}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
