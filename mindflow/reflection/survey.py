"""Phase 1, survey: what is new since the being's last reflection. Mechanical."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import duckdb


@dataclass
class Survey:
    since: datetime | None
    episodes: int = 0
    sessions: int = 0
    kinds: dict[str, int] = field(default_factory=dict)
    entities: list[str] = field(default_factory=list)  # with facts new since
    facts: int = 0
    transitions: dict[str, int] = field(default_factory=dict)  # "active->fading": n
    hot: list[tuple[str, str, int]] = field(default_factory=list)  # ref, text, reactivations

    def lines(self) -> list[str]:
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(self.kinds.items()))
        out = [f"{self.episodes} new episodes in {self.sessions} sessions" + (f" ({kinds})" if kinds else "")]
        out.append(
            f"{self.facts} new facts"
            + (f"; entities: {', '.join(self.entities[:12])}" if self.entities else "")
        )
        if self.transitions:
            out.append("decay: " + ", ".join(f"{k} {n}" for k, n in sorted(self.transitions.items())))
        if self.hot:
            out.append("recalled most: " + "; ".join(f"{text[:60]} ({n}x)" for _, text, n in self.hot))
        return out


def last_reflection(con: duckdb.DuckDBPyConnection, being_id: str) -> tuple[int, datetime | None]:
    """(the number of the being's finished reflections, when the last one started)."""
    number, started = con.execute(
        "SELECT count(*), max(started_at) FROM reflections WHERE being_id = ? AND finished_at IS NOT NULL",
        [being_id],
    ).fetchone()
    return int(number), started


def survey(con: duckdb.DuckDBPyConnection, being_id: str, since: datetime | None) -> Survey:
    found = Survey(since)
    after = since or datetime(1970, 1, 1)
    for kind, n in con.execute(
        "SELECT kind, count(*) FROM episodes WHERE being_id = ? AND ingested_at > ? GROUP BY kind",
        [being_id, after],
    ).fetchall():
        found.kinds[kind] = int(n)
        found.episodes += int(n)
    found.sessions = int(
        con.execute(
            "SELECT count(DISTINCT coalesce(session_id, day::VARCHAR)) FROM episodes "
            "WHERE being_id = ? AND ingested_at > ?",
            [being_id, after],
        ).fetchone()[0]
    )
    rows = con.execute(
        "SELECT entity, count(*) FROM facts WHERE being_id = ? AND created_at > ? AND forgotten_at IS NULL "
        "GROUP BY entity ORDER BY count(*) DESC, entity",
        [being_id, after],
    ).fetchall()
    found.entities = [r[0] for r in rows]
    found.facts = sum(int(r[1]) for r in rows)
    for was, now, n in con.execute(
        "SELECT json_extract_string(before, '$.decay_status'), json_extract_string(after, '$.decay_status'), "
        "count(*) FROM history WHERE being_id = ? AND operation = 'decay_status' AND ts > ? GROUP BY ALL",
        [being_id, after],
    ).fetchall():
        found.transitions[f"{was}->{now}"] = int(n)
    found.hot = [
        (ref, " ".join(str(text or "").split()), int(n))
        for ref, text, n in con.execute(
            "SELECT node_id, scene.action, reactivation_count FROM nodes WHERE being_id = ? "
            "AND last_activated > ? AND forgotten_at IS NULL AND reactivation_count > 0 "
            "ORDER BY reactivation_count DESC, node_id LIMIT 5",
            [being_id, after],
        ).fetchall()
    ]
    return found
