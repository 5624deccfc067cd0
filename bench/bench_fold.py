"""The patrol's fold of recall events after a year of them, beside reading the year's files.

The read API appends one event per recall to `events/<day>/<host>-<pid>.jsonl`; every night each
being's patrol folds the events not folded yet. The files are never rewritten except by a forget,
so a fold that read every file would take longer every night. The baseline is what such a fold
pays before it can fold anything: reading and parsing every event of the year.
"""

from __future__ import annotations

import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

EVENTS = 1_000_000  # a year of ~2,700 recalls a day across 10 beings
BEINGS = 10
DAYS = 365
START = datetime(2025, 11, 1)


def write_day(events_dir: Path, day: int, per_day: int) -> None:
    """One day of events as a server process writes them (one append of the day's batch)."""
    import numpy as np

    from mindflow.events import RecallEvent, append_events

    rng = np.random.default_rng(day)
    refs = rng.integers(0, 5_000, size=(per_day, 5))
    when = START + timedelta(days=day)
    append_events(
        events_dir,
        [
            RecallEvent(
                event_id=f"{day:03d}-{i:06d}",
                being_id=f"being-{i % BEINGS}",
                tool="recall",
                memory_refs=tuple(f"n-{r}" for r in refs[i]),
                increments=(1,) * 5,
                ts=when + timedelta(seconds=i * 86_400 // per_day),
            )
            for i in range(per_day)
        ],
    )


def main(events: int = EVENTS, folder: Path | None = None) -> int:
    """The benchmark over `events` events in `folder` (a temporary one by default); tests run it
    small, so it keeps up with the fold."""
    from mindflow import store
    from mindflow.events import fold_events, read_events

    root = folder or Path(tempfile.mkdtemp(prefix="mindflow-bench-"))
    events_dir = root / "events"
    per_day = max(1, events // DAYS)
    started = time.perf_counter()
    for day in range(DAYS):
        write_day(events_dir, day, per_day)
    print(f"## a year of recall events: {per_day * DAYS:,} in {DAYS} daily files, {BEINGS} beings")
    print(f"written in {time.perf_counter() - started:.1f} s")

    t0 = time.perf_counter()
    year = sum(1 for _ in read_events(events_dir))
    baseline = time.perf_counter() - t0
    night = START + timedelta(days=DAYS)
    with store.connect(root / "mindflow.duckdb") as con:
        t0 = time.perf_counter()
        first = fold_events(con, events_dir, "being-0", night)
        first_s = time.perf_counter() - t0
        nights = []
        for n in range(3):  # the next nights: one new day each
            write_day(events_dir, DAYS + n, per_day)
            t0 = time.perf_counter()
            report = fold_events(con, events_dir, "being-0", night + timedelta(days=n + 1))
            nights.append((time.perf_counter() - t0, report.events))
    assert year == per_day * DAYS, year
    assert first.events == len(range(0, per_day, BEINGS)) * DAYS, first.events
    assert all(n == len(range(0, per_day, BEINGS)) for _, n in nights), nights
    night_s = sorted(t for t, _ in nights)[1]
    print(f"reading every event of the year (baseline)  {baseline:8.3f} s  ({year:,} events)")
    print(f"first fold of one being (reads every file)  {first_s:8.3f} s  ({first.events:,} events folded)")
    print(
        f"a night's fold of one being (one new day)   {night_s:8.3f} s  ({nights[0][1]:,} events folded; "
        f"median of 3 nights), {night_s / baseline:.3f}x the baseline"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
