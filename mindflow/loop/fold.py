"""Folding a being's marks into DuckDB: forgotten memories archived, restored ones back, pins set.

The fold applies the *state* the marks describe, not each mark once: a tombstone set
on a fresh memory before its node existed, or on an episode a later extraction turns
into a new node, is applied by whichever run finds the node. Every statement is
set-based and idempotent, so a run killed halfway and run again finishes the job, and
only what changes writes a history row.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import datetime

import duckdb

from mindflow import store
from mindflow.audit import AuditRow
from mindflow.audit.writes import commit_table_mutations
from mindflow.config import Settings
from mindflow.loop.marks import Mark, MarkState, read_marks, state_of


@dataclass
class MarkFoldReport:
    """What one fold changed for a being."""

    marks: int = 0  # marks not folded before
    forgotten: int = 0  # memories archived by a tombstone
    restored: int = 0
    pinned: int = 0
    unpinned: int = 0
    facts_forgotten: int = 0  # facts and relations
    facts_restored: int = 0
    state: MarkState = field(default_factory=MarkState, repr=False)  # what the marks say now

    def counts(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "state"}

    @property
    def changed(self) -> int:
        return sum(v for k, v in self.counts().items() if k != "marks")


def fold_marks(
    con: duckdb.DuckDBPyConnection,
    settings: Settings,
    being_id: str,
    now: datetime,
    run_id: str | None = None,
) -> MarkFoldReport:
    """Bring the being's nodes, decay scores, facts and relations in line with its marks."""
    marks = read_marks(settings.loop, being_id)
    report = MarkFoldReport()
    if not marks:
        return report
    state = report.state = state_of(marks)
    folded = {
        r[0]
        for r in con.execute("SELECT mark_id FROM folded_marks WHERE being_id = ?", [being_id]).fetchall()
    }
    new = [m for m in marks if m.mark_id not in folded]
    report.marks = len(new)
    actors = _actors(marks)
    with store.transaction(con):
        who = (run_id, actors)
        _forget(con, being_id, state, now, report, who)
        _restore(con, being_id, state, now, report, who)
        _pins(con, being_id, state, now, report, who)
        if new:
            con.executemany(
                "INSERT OR IGNORE INTO folded_marks VALUES (?, ?, ?, ?)",
                [[m.mark_id, being_id, m.op, now] for m in new],
            )
    if report.changed:
        _audit(con, settings, being_id, report, actors, run_id, now)
    return report


def _actors(marks: list[Mark]) -> dict[str, str]:
    """Who decided, per op: the actor of the latest mark of that op."""
    out: dict[str, str] = {}
    for mark in marks:
        out[mark.op] = mark.actor
    return out


_HISTORY_COLUMNS = "(history_id, ts, memory_ref, being_id, operation, before, after, run_id, actor)"
# (run id, actor of the latest mark per op): who a history row names.
Who = tuple[str | None, dict[str, str]]
# Nodes a tombstone hides: by ref, or formed from a forgotten episode.
_HIDDEN = "(list_contains($refs, n.node_id) OR list_has_any(n.source_episode_ids, $episodes))"
_HIDDEN_FACT = "(list_contains($refs, {id}) OR list_has_any(coalesce(source_episode_ids, []), $episodes))"


def _params(being_id: str, state: MarkState, now: datetime) -> dict:
    """The named parameters of the statements below: the being, what its tombstones hide, now."""
    return {
        "being": being_id,
        "refs": sorted(state.forgotten),
        "episodes": sorted(state.forgotten_episodes),
        "now": now,
    }


def _used(params: dict, *sql: str) -> dict:
    """The named parameters the statements name (DuckDB refuses unused ones)."""
    text = " ".join(sql)
    return {k: v for k, v in params.items() if f"${k}" in text}


def _forget(con, being_id: str, state: MarkState, now: datetime, report: MarkFoldReport, who: Who) -> None:
    params = _params(being_id, state, now)
    if not params["refs"] and not params["episodes"]:
        return
    archived = con.execute(
        f"""
        SELECT n.node_id, n.status FROM nodes n
        WHERE n.being_id = $being AND n.forgotten_at IS NULL AND {_HIDDEN}
        """,
        _used(params, _HIDDEN, "$being"),
    ).fetchall()
    if archived:
        refs = [r[0] for r in archived]
        con.execute(
            "UPDATE nodes SET status = 'archived', forgotten_at = $now, updated_at = $now "
            "WHERE list_contains($refs, node_id)",
            {"refs": refs, "now": now},
        )
        con.execute(
            "UPDATE decay_scores SET score = 0, status = 'archived', forgotten_at = $now "
            "WHERE list_contains($refs, memory_ref)",
            {"refs": refs, "now": now},
        )
        actor = who[1].get("delete") if "delete" in who[1] else who[1].get("forget", "user")
        _history(con, being_id, archived, "forgotten", "archived", now, (who[0], actor))
        report.forgotten += len(archived)
    for table, key in (("facts", "fact_id"), ("relations", "relation_id")):
        (n,) = con.execute(
            f"UPDATE {table} SET forgotten_at = $now WHERE being_id = $being AND forgotten_at IS NULL "
            f"AND {_HIDDEN_FACT.format(id=key)}",
            params,
        ).fetchall()[0]
        report.facts_forgotten += int(n)


def _restore(con, being_id: str, state: MarkState, now: datetime, report: MarkFoldReport, who: Who) -> None:
    """Memories archived by a tombstone that no mark hides any more go back to their status before."""
    params = _params(being_id, state, now)
    back = con.execute(
        f"""
        SELECT n.node_id, coalesce((
            SELECT h.before ->> 'status' FROM history h
            WHERE h.memory_ref = n.node_id AND h.operation = 'forgotten'
            ORDER BY h.ts DESC LIMIT 1), 'active') AS status
        FROM nodes n
        WHERE n.being_id = $being AND n.forgotten_at IS NOT NULL AND NOT {_HIDDEN}
        """,
        _used(params, _HIDDEN, "$being"),
    ).fetchall()
    if back:
        con.executemany(
            "UPDATE nodes SET status = ?, forgotten_at = NULL, updated_at = ? WHERE node_id = ?",
            [[status, now, ref] for ref, status in back],
        )
        # The score is recomputed by the next decay run; until then the memory counts as fresh.
        con.execute(
            "UPDATE decay_scores SET score = NULL, status = 'active', forgotten_at = NULL "
            "WHERE list_contains($refs, memory_ref)",
            {"refs": [r for r, _ in back]},
        )
        _history(
            con,
            being_id,
            [(ref, "archived") for ref, _ in back],
            "restored",
            None,
            now,
            (who[0], who[1].get("restore", "user")),
            after=[status for _, status in back],
        )
        report.restored += len(back)
    for table_name, key in (("facts", "fact_id"), ("relations", "relation_id")):
        (n,) = con.execute(
            f"UPDATE {table_name} SET forgotten_at = NULL WHERE being_id = $being "
            f"AND forgotten_at IS NOT NULL AND NOT {_HIDDEN_FACT.format(id=key)}",
            _used(params, _HIDDEN_FACT, "$being"),
        ).fetchall()[0]
        report.facts_restored += int(n)


def _pins(con, being_id: str, state: MarkState, now: datetime, report: MarkFoldReport, who: Who) -> None:
    for refs, value, operation, op in (
        (state.pinned, True, "pinned", "pin"),
        (state.unpinned, False, "unpinned", "unpin"),
    ):
        if not refs:
            continue
        changed = con.execute(
            "SELECT node_id, status FROM nodes WHERE being_id = $being AND list_contains($refs, node_id) "
            "AND pinned <> $value",
            {"being": being_id, "refs": sorted(refs), "value": value},
        ).fetchall()
        if not changed:
            continue
        ids = [r[0] for r in changed]
        # A pinned memory never dies: one the patrol let go of comes back at once.
        con.execute(
            "UPDATE nodes SET pinned = $value, updated_at = $now, status = CASE "
            "WHEN $value AND status IN ('dying', 'dead') THEN 'active' ELSE status END "
            "WHERE list_contains($refs, node_id)",
            {"value": value, "now": now, "refs": ids},
        )
        con.execute(
            "UPDATE decay_scores SET pinned = $value, status = CASE WHEN $value AND forgotten_at IS NULL "
            "THEN 'active' ELSE status END WHERE list_contains($refs, memory_ref)",
            {"value": value, "refs": ids},
        )
        con.executemany(
            f"INSERT INTO history {_HISTORY_COLUMNS} VALUES ('h-' || uuid()::VARCHAR, ?, ?, ?, ?, "
            "to_json({'pinned': ?}), to_json({'pinned': ?}), ?, ?)",
            [
                [now, ref, being_id, operation, not value, value, who[0], who[1].get(op, "user")]
                for ref in ids
            ],
        )
        if value:
            report.pinned += len(ids)
        else:
            report.unpinned += len(ids)


def _history(con, being_id, rows, operation: str, after_status: str | None, now, who, after=None) -> None:
    """One history row per memory: its status before and after."""
    con.executemany(
        f"INSERT INTO history {_HISTORY_COLUMNS} VALUES ('h-' || uuid()::VARCHAR, ?, ?, ?, ?, "
        "to_json({'status': ?}), to_json({'status': ?}), ?, ?)",
        [
            [now, ref, being_id, operation, before, after[i] if after is not None else after_status, *who]
            for i, (ref, before) in enumerate(rows)
        ],
    )


def _audit(con, settings: Settings, being_id: str, report: MarkFoldReport, actors, run_id, now) -> None:
    """One audit row per kind of change, committed to the workspace with the person's decision."""
    changes = [
        ("ARCHIVE", "forget", report.forgotten, report.facts_forgotten, "forgotten"),
        ("EDIT", "restore", report.restored, report.facts_restored, "restored"),
        ("EDIT", "pin", report.pinned, 0, "pinned"),
        ("EDIT", "unpin", report.unpinned, 0, "unpinned"),
    ]
    rows = [
        AuditRow(
            action,
            "table:nodes",
            actors.get(op, "user"),
            f"{being_id}: {memories} memories" + (f" and {facts} facts" if facts else "") + f" {done}",
            # A person's decision, or an agent acting on its own (auto).
            approval="user" if actors.get(op, "user") == "user" else "auto",
            run_id=run_id,
            ts=now,
        )
        for action, op, memories, facts, done in changes
        if memories or facts
    ]
    commit_table_mutations(con, rows, settings, trigger="mark")


def fold_all(
    con: duckdb.DuckDBPyConnection, settings: Settings, now: datetime, run_id: str | None = None
) -> dict[str, MarkFoldReport]:
    """`fold_marks` for every being that has marks: runs over all beings (decay) fold them all."""
    root = settings.loop
    if not root.is_dir():
        return {}
    beings = sorted(p.parent.name for p in root.glob("*/marks.jsonl"))
    return {being: fold_marks(con, settings, being, now, run_id) for being in beings}


def totals(reports: dict[str, MarkFoldReport]) -> dict[str, int]:
    """The reports' counts summed over beings, for run metadata (`marks/<count>`)."""
    out: dict[str, int] = {}
    for report in reports.values():
        for key, value in report.counts().items():
            out[f"marks/{key}"] = out.get(f"marks/{key}", 0) + value
    return out
