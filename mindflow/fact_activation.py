"""Gandalf's fact activation: each access raises it, each day without one lowers it.

activation = min(cap, 1 + importance + boost * (access_count - 1)) * exp(-rate * days since last access)

- An access is a fact returned by `GET facts` or by resonance (the read API appends a
  `fact_access` event beside the recall events), or seen again by extraction.
- The decay job folds the accesses and recomputes every activation as of its day.
- Tiers: Hot above 2.0, Warm from 1.0 to 2.0, Cool below 1.0. A new fact starts Warm
  (1 + its importance); a few accesses make it Hot; about a week unused makes it Cool.
- A Cool fact not accessed for `cool_days` leaves the published graph (LanceDB); its
  DuckDB row stays, and an access (extraction seeing it again) brings it back.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import duckdb
import pyarrow as pa

from mindflow import events, store
from mindflow.models import utcnow

TOOL = "fact_access"
TIERS = ("hot", "warm", "cool")


@dataclass(frozen=True)
class ActivationParams:
    rate: float = 0.05  # per day since the last access
    boost: float = 0.5  # per access after the first
    cap: float = 5.0  # so that a fact read every turn cannot stay Hot for months unused
    hot: float = 2.0  # above: Hot
    warm: float = 1.0  # at or above: Warm; below: Cool
    cool_days: int = 30  # a Cool fact not accessed this long leaves the published graph


@dataclass
class ActivationReport:
    """What one decay run did to the facts: accesses folded, activations and tiers."""

    events: int = 0  # fact_access events folded
    accessed: int = 0  # facts they reached
    unknown: int = 0  # fact ids no longer in DuckDB (erased, or another store's)
    scored: int = 0
    tiers: dict[str, int] = field(default_factory=dict)
    pruned: int = 0  # Cool facts kept out of the published graph

    def counts(self) -> dict[str, int]:
        return {
            "fact_access_events": self.events,
            "facts_accessed": self.accessed,
            "facts_unknown": self.unknown,
            "facts_scored": self.scored,
            **{f"facts_{t}": self.tiers.get(t, 0) for t in TIERS},
            "facts_pruned": self.pruned,
        }


def tier(activation: float | None, params: ActivationParams | None = None) -> str:
    params = params or ActivationParams()
    value = activation or 0.0
    if value > params.hot:
        return "hot"
    return "warm" if value >= params.warm else "cool"


def tier_sql(column: str, params: ActivationParams) -> str:
    return (
        f"CASE WHEN {column} > {params.hot!r} THEN 'hot' "
        f"WHEN {column} >= {params.warm!r} THEN 'warm' ELSE 'cool' END"
    )


def activation_sql(params: ActivationParams) -> str:
    """A fact's activation as of the bound `$as_of`, as one SQL expression over `facts`."""
    days = "greatest(0.0, epoch($as_of) - epoch(coalesce(last_accessed, created_at))) / 86400.0"
    return (
        f"least({params.cap!r}, 1.0 + importance + {params.boost!r} * greatest(access_count - 1, 0)) "
        f"* exp(-{params.rate!r} * {days})"
    )


def activation(importance: float, access_count: int, days: float, params: ActivationParams) -> float:
    """The same formula in Python (for tests and the docs)."""
    base = min(params.cap, 1.0 + importance + params.boost * max(access_count - 1, 0))
    return base * math.exp(-params.rate * max(days, 0.0))


def pruned_sql(params: ActivationParams) -> str:
    """True for a fact that stays out of the published graph as of the bound `$as_of`."""
    return (
        f"(activation < {params.warm!r} "
        f"AND coalesce(last_accessed, created_at) < $as_of - to_days({int(params.cool_days)}))"
    )


def access_event(being_id: str, fact_ids: Sequence[str], ts: datetime | None = None) -> events.RecallEvent:
    """The event the read API appends for the facts one answer returned."""
    ids = tuple(dict.fromkeys(fact_ids))
    return events.RecallEvent(
        event_id=uuid.uuid4().hex,
        being_id=being_id,
        tool=TOOL,
        memory_refs=ids,
        increments=tuple(1 for _ in ids),
        ts=ts or utcnow(),
    )


def fold_accesses(con: duckdb.DuckDBPyConnection, events_dir: Path, report: ActivationReport) -> None:
    """Apply every not-yet-folded fact access, once: access_count and last_accessed. Only the
    events files new or changed since the last fold are read (`events.unread_files`); this fold
    spans every being, so its files are noted under no being ('')."""
    listed = events.event_files(events_dir)
    files = events.unread_files(con, listed, TOOL, "")
    if not files:
        return
    found = [e for e in events.read_events(events_dir, files=files) if e.tool == TOOL]
    table = pa.table(
        {
            "event_id": pa.array([e.event_id for e in found], pa.string()),
            "being_id": pa.array([e.being_id for e in found], pa.string()),
            "ts": pa.array([e.ts for e in found], pa.timestamp("us")),
            "fact_ids": pa.array([list(e.memory_refs) for e in found], pa.list_(pa.string())),
        }
    )
    with store.registered(con, "fact_access_events", table):
        try:
            with store.transaction(con):
                if found:
                    _fold(con, report)
                events.record_files(con, TOOL, "", files, listed)
        finally:
            con.execute("DROP TABLE IF EXISTS fact_access_new")
            con.execute("DROP TABLE IF EXISTS fact_access_refs")


def _fold(con: duckdb.DuckDBPyConnection, report: ActivationReport) -> None:
    # An event appended twice (a retried write) is still one access.
    con.execute(
        """
        CREATE TEMP TABLE fact_access_new AS
        SELECT * FROM fact_access_events e
        WHERE NOT EXISTS (SELECT 1 FROM folded_events f WHERE f.event_id = e.event_id)
        QUALIFY row_number() OVER (PARTITION BY event_id ORDER BY ts) = 1
        """
    )
    con.execute(
        """
        CREATE TEMP TABLE fact_access_refs AS
        SELECT t.being_id, t.fact_id, count(DISTINCT t.event_id)::BIGINT AS accesses, max(t.ts) AS last_ts,
               bool_or(f.fact_id IS NOT NULL) AS known
        FROM (SELECT event_id, being_id, ts, unnest(fact_ids) AS fact_id FROM fact_access_new) t
        LEFT JOIN facts f ON f.fact_id = t.fact_id AND f.being_id = t.being_id
        GROUP BY 1, 2
        """
    )
    con.execute(
        """
        UPDATE facts SET access_count = facts.access_count + r.accesses,
            last_accessed = greatest(coalesce(facts.last_accessed, facts.created_at), r.last_ts)
        FROM fact_access_refs r
        WHERE facts.fact_id = r.fact_id AND facts.being_id = r.being_id AND r.known
        """
    )
    con.execute("INSERT INTO folded_events SELECT event_id, being_id, now()::TIMESTAMP FROM fact_access_new")
    report.events += con.execute("SELECT count(*) FROM fact_access_new").fetchall()[0][0]
    accessed, unknown = con.execute(
        "SELECT count(*) FILTER (WHERE known), count(*) FILTER (WHERE NOT known) FROM fact_access_refs"
    ).fetchall()[0]
    report.accessed += accessed
    report.unknown += unknown


def run_activation(
    con: duckdb.DuckDBPyConnection,
    as_of: datetime,
    events_dir: Path | None = None,
    params: ActivationParams | None = None,
) -> ActivationReport:
    """Fold the fact accesses, then every fact's activation as of `as_of`, with its tier counts."""
    params = params or ActivationParams()
    report = ActivationReport()
    if events_dir is not None:
        fold_accesses(con, events_dir, report)
    rows = con.execute(
        f"UPDATE facts SET activation = {activation_sql(params)} WHERE created_at <= $as_of",
        {"as_of": as_of},
    ).fetchall()
    report.scored = int(rows[0][0]) if rows else 0
    current = "invalid_at IS NULL AND forgotten_at IS NULL AND created_at <= $as_of"
    report.tiers = dict(
        con.execute(
            f"SELECT {tier_sql('activation', params)}, count(*) FROM facts WHERE {current} GROUP BY 1",
            {"as_of": as_of},
        ).fetchall()
    )
    report.pruned = con.execute(
        f"SELECT count(*) FROM facts WHERE {current} AND {pruned_sql(params)}", {"as_of": as_of}
    ).fetchall()[0][0]
    return report
