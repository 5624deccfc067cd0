"""Decay scores: how relevant each memory still is, as of a day, in vectorised SQL."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import duckdb
import pyarrow as pa

from mindflow import store

# relevance = base_relevance * exp(-rate * days_since_last_access) * log2(access_count + 1) * type_weight
TYPE_WEIGHTS = {"core": 1.5, "episodic": 0.8, "semantic": 1.2, "procedural": 1.0}
MEMORY_TYPE_OF_KIND = {
    "message": "episodic",
    "event": "episodic",
    "emotion": "episodic",
    "fact": "semantic",
    "preference": "semantic",
    "correction": "semantic",
    "decision": "procedural",
    "task": "procedural",
}
STATUSES = ("active", "fading", "dormant", "archived")


@dataclass(frozen=True)
class DecayParams:
    rate: float = 0.03
    active: float = 0.5
    fading: float = 0.2
    dormant: float = 0.05
    # The frequency factor grows without bound; scores are capped at this multiple of the
    # type weight so that a memory recalled every day cannot drown every other one.
    cap: float = 1.5
    # At or above (Gandalf's i >= 0.8): permanent. Never archived by score (dormant at worst),
    # and daily-log entries are kept by retention.
    keep_importance: float = 0.8
    medium_importance: float = 0.4  # at or above: kept medium_days, below: short_days
    medium_days: int = 30
    short_days: int = 7


@dataclass
class DecayReport:
    registered: int = 0
    scored: int = 0
    # Memories formed after `as_of` (a run as of an earlier day): neither scored nor counted below.
    formed_later: int = 0
    statuses: dict[str, int] = field(default_factory=dict)  # of the memories formed by `as_of`
    changes: dict[str, int] = field(default_factory=dict)  # net change of each status
    transitions: list[tuple[str, str, str, int]] = field(default_factory=list)  # being, from, to, n


def register_nodes(con: duckdb.DuckDBPyConnection, as_of: datetime, params: DecayParams) -> list[str]:
    """Give every node formed by `as_of` a decay row; its creation counts as its first access.

    Returns the refs registered."""
    kind_case = " ".join(f"WHEN '{k}' THEN {TYPE_WEIGHTS[t]}" for k, t in MEMORY_TYPE_OF_KIND.items())
    rows = con.execute(
        f"""
        INSERT INTO decay_scores (memory_ref, being_id, store, kind, base_relevance, created_at,
            last_accessed, access_count, type_weight, score, status, pinned,
            retention_from, retention_days, as_of, forgotten_at)
        SELECT n.node_id, n.being_id, 'nodes', n.kind,
               CASE WHEN n.trigger = 'remember' THEN 1.0 ELSE n.importance END,
               n.created_at, n.created_at, 1,
               CASE WHEN n.pinned THEN {TYPE_WEIGHTS["core"]} ELSE CASE n.kind {kind_case} ELSE
                    {TYPE_WEIGHTS["episodic"]} END END,
               CASE WHEN n.forgotten_at IS NOT NULL THEN 0 END,
               CASE WHEN n.forgotten_at IS NOT NULL THEN 'archived' ELSE 'active' END, n.pinned,
               CASE WHEN e.format = 'daily-md' AND e.importance IS NOT NULL THEN e.ts END,
               CASE WHEN e.format = 'daily-md' AND e.importance IS NOT NULL THEN
                    CASE WHEN e.importance >= ? THEN NULL
                         WHEN e.importance >= ? THEN ? ELSE ? END END,
               NULL, n.forgotten_at
        FROM nodes n
        LEFT JOIN episodes e ON e.being_id = n.being_id AND e.episode_id = n.source_episode_ids[1]
        WHERE n.created_at <= ?
          AND NOT EXISTS (SELECT 1 FROM decay_scores d WHERE d.memory_ref = n.node_id)
        RETURNING memory_ref
        """,
        [params.keep_importance, params.medium_importance, params.medium_days, params.short_days, as_of],
    ).fetchall()
    return [r[0] for r in rows]


def score_sql(params: DecayParams) -> str:
    """The relevance of a row as of the bound `$as_of`, as one SQL expression.

    Pinned rows skip the time and frequency factors: they never decay.
    """
    days = "greatest(0.0, epoch($as_of) - epoch(last_accessed)) / 86400.0"
    return f"""least({params.cap!r} * type_weight, base_relevance * type_weight * CASE WHEN pinned THEN 1.0
        ELSE exp(-{params.rate!r} * {days}) * log2(access_count + 1) END)"""


def status_sql(params: DecayParams, score: str) -> str:
    return f"""CASE
        WHEN pinned THEN 'active'
        WHEN retention_days IS NOT NULL
             AND retention_from + to_days(retention_days) < $as_of THEN 'archived'
        WHEN {score} >= {params.active!r} THEN 'active'
        WHEN {score} >= {params.fading!r} THEN 'fading'
        WHEN {score} >= {params.dormant!r} THEN 'dormant'
        -- i >= 0.8 is permanent (and "remember" sets the base to 1.0): such a memory fades
        -- to dormant, where search still finds it, and is never archived by its score.
        WHEN base_relevance >= {params.keep_importance!r} THEN 'dormant'
        ELSE 'archived' END"""


def update_scores(con: duckdb.DuckDBPyConnection, as_of: datetime, params: DecayParams) -> int:
    """The score of every row formed by `as_of`; returns how many were scored."""
    rows = con.execute(
        f"UPDATE decay_scores SET score = {score_sql(params)}, as_of = $as_of "
        # A forgotten memory stays at 0 and archived until it is restored.
        "WHERE created_at <= $as_of AND forgotten_at IS NULL",
        {"as_of": as_of},
    ).fetchall()
    return int(rows[0][0]) if rows else 0


def update_statuses(
    con: duckdb.DuckDBPyConnection, as_of: datetime, params: DecayParams, run_id: str | None = None
) -> None:
    """The statuses that follow from the scores, writing only those that change (each with a
    `decay_status` history row, dated `as_of`).

    The history rows and the statuses commit together: apart, a run that failed between them
    (killed, or the UPDATE in conflict with another writer) left history rows of changes never
    made, and its retry wrote every one of them a second time."""
    status = status_sql(params, "score")
    changing = f"created_at <= $as_of AND forgotten_at IS NULL AND status <> {status}"
    with store.transaction(con):
        con.execute(
            "INSERT INTO history (history_id, ts, memory_ref, being_id, operation, before, after, run_id, "
            "actor) SELECT 'h-' || uuid()::VARCHAR, $as_of, memory_ref, being_id, 'decay_status', "
            f"to_json({{'decay_status': status}}), to_json({{'decay_status': {status}}}), $run_id, 'decay' "
            f"FROM decay_scores WHERE {changing}",
            {"as_of": as_of, "run_id": run_id},
        )
        con.execute(f"UPDATE decay_scores SET status = {status} WHERE {changing}", {"as_of": as_of})


def compute_scores(con: duckdb.DuckDBPyConnection, as_of: datetime, params: DecayParams | None = None) -> int:
    """Recompute score and status of every row formed by `as_of`; no Python per row.

    Two statements: every score moves each day while few statuses do, and rewriting a
    text column for every row costs more than all the arithmetic, so the second writes
    only the statuses that change (bench/bench_decay.py). They are not wrapped in one
    transaction, which would make the second read a million uncommitted versions (1.6x
    slower): a run that fails between them leaves statuses a day behind their scores,
    and its retry recomputes both.
    """
    params = params or DecayParams()
    scored = update_scores(con, as_of, params)
    update_statuses(con, as_of, params)
    return scored


def _transitions(
    con: duckdb.DuckDBPyConnection, as_of: datetime, params: DecayParams, new_refs: list[str]
) -> list[tuple[str, str, str, int]]:
    """(being, from, to, count) of the status changes the rescored rows are about to make;
    memories registered in this run come from 'new' (and arriving as active is no change)."""
    status = status_sql(params, "score")
    with store.registered(con, "decay_new", pa.table({"memory_ref": pa.array(new_refs, pa.string())})):
        rows = con.execute(
            f"""
            SELECT d.being_id, CASE WHEN n.memory_ref IS NULL THEN d.status ELSE 'new' END AS was,
                   {status} AS now, count(*)
            FROM decay_scores d LEFT JOIN decay_new n USING (memory_ref)
            WHERE d.created_at <= $as_of AND was <> now AND NOT (was = 'new' AND now = 'active')
            GROUP BY ALL ORDER BY ALL
            """,
            {"as_of": as_of},
        ).fetchall()
    return [tuple(row) for row in rows]


def _status_counts(con: duckdb.DuckDBPyConnection, as_of: datetime) -> dict[str, int]:
    """Status counts of the memories formed by `as_of`, the only ones a run as of that day scores."""
    counts = dict(
        con.execute(
            "SELECT status, count(*) FROM decay_scores WHERE created_at <= ? GROUP BY 1", [as_of]
        ).fetchall()
    )
    return {status: counts.get(status, 0) for status in STATUSES}


def run_decay(
    con: duckdb.DuckDBPyConnection,
    as_of: datetime,
    params: DecayParams | None = None,
    run_id: str | None = None,
) -> DecayReport:
    """Register new memories, rescore all formed by `as_of`; report their status counts and net
    change, and how many memories were formed later (left as they were).

    Each status change is a `decay_status` history row of the memory, with `run_id`."""
    params = params or DecayParams()
    report = DecayReport()
    before = _status_counts(con, as_of)
    new_refs = register_nodes(con, as_of, params)
    report.registered = len(new_refs)
    report.scored = update_scores(con, as_of, params)
    # Counted in nodes: one formed after `as_of` may have no decay row yet.
    later = con.execute("SELECT count(*) FROM nodes WHERE created_at > ?", [as_of]).fetchone()
    report.formed_later = later[0]
    # Read between the two statements: the new scores beside the statuses they replace.
    report.transitions = _transitions(con, as_of, params, new_refs)
    update_statuses(con, as_of, params, run_id)
    # New rows enter as 'active' before scoring, so they count as arriving there; the
    # counts after follow from the transitions without another scan.
    before["active"] += report.registered
    report.statuses = dict(before)
    for _, was, now, n in report.transitions:
        report.statuses["active" if was == "new" else was] -= n
        report.statuses[now] += n
    report.changes = {s: report.statuses[s] - before[s] for s in STATUSES}
    return report
