"""When a being's reflection is due outside the nightly schedule: the reflection sensor's three reasons.

- a session ended: an episode came after the last reflection and none since for
  `reflection_session_gap_min` minutes;
- the reflect trigger phrase ("let's reflect", …) in an episode since the last reflection;
- more than `reflection_max_unprocessed` episodes since the last reflection.

Each reason carries a key naming what caused it, so one session or one phrase starts one run.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import duckdb

from mindflow.config import Settings
from mindflow.models import utcnow
from mindflow.reflection.survey import last_reflection


@dataclass(frozen=True)
class Due:
    being_id: str
    reason: str  # session_ended | reflect_trigger | unprocessed
    key: str  # what caused it, with the last reflection's start: one run per cause
    episodes: int  # since the last reflection


def due(
    con: duckdb.DuckDBPyConnection, settings: Settings, being_id: str, now: datetime | None = None
) -> Due | None:
    """Why the being's reflection should run now, or None."""
    now = now or utcnow()
    _, since = last_reflection(con, being_id)
    count, last_ingested, last_ts, trigger = con.execute(
        "SELECT count(*), max(ingested_at), max(ts), max(episode_id) FILTER (WHERE trigger = 'reflect') "
        "FROM episodes WHERE being_id = ? AND ingested_at > ?",
        [being_id, since or datetime(1970, 1, 1)],
    ).fetchone()
    if not count:
        return None
    after = since.isoformat(timespec="seconds") if since else "never"
    if trigger is not None:
        return Due(being_id, "reflect_trigger", f"{after}-{trigger}", count)
    if count > settings.reflection_max_unprocessed:
        return Due(being_id, "unprocessed", after, count)
    gap = timedelta(minutes=settings.reflection_session_gap_min)
    # The later of when the last episode happened and when it arrived: a backfill of old
    # episodes ends its session once the gap has passed since it arrived.
    quiet_since = max(last_ingested, last_ts) if last_ts is not None else last_ingested
    if now - quiet_since >= gap:
        return Due(being_id, "session_ended", f"{after}-{quiet_since.isoformat(timespec='seconds')}", count)
    return None
