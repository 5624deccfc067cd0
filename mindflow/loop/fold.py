"""Folding a being's marks into DuckDB: forgotten memories archived, restored ones back, pins set.

The fold applies the *state* the marks describe, not each mark once: a tombstone set
on a fresh memory before its node existed, or on an episode a later extraction turns
into a new node, is applied by whichever run finds the node. Every statement is
set-based and idempotent, so a run killed halfway and run again finishes the job.

History follows the decisions, not only the state: each mark not folded before writes a
row for every memory it changes, in the order the marks were set, so a forget and its
restore between two runs are both on record though the memory ends as it was. Only what
changes writes a row, dated when its mark was set.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import NamedTuple

import duckdb

from mindflow import store
from mindflow.audit import AuditRow
from mindflow.audit.writes import commit_table_mutations
from mindflow.config import Settings
from mindflow.loop.marks import (
    FORGETTING,
    Mark,
    MarkState,
    MarkTracker,
    read_folded,
    read_marks,
    state_of,
    write_folded,
)


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
        # Before the statements below change them: each memory as the new marks found it.
        decided, rows = _decisions(con, being_id, [m for m in marks if m.mark_id in folded], new, actors, now)
        rows += _forget(con, being_id, state, now, report, actors, decided)
        rows += _restore(con, being_id, state, now, report, actors, decided)
        rows += _pins(con, being_id, state, now, report, actors, decided)
        _history(con, being_id, rows, now, run_id)
        if new:
            con.executemany(
                "INSERT OR IGNORE INTO folded_marks VALUES (?, ?, ?, ?)",
                [[m.mark_id, being_id, m.op, now] for m in new],
            )
    # After the commit: a run killed in between leaves them shown as pending until the next fold.
    if read_folded(settings.loop, being_id) != (True, marks[-1].mark_id):
        write_folded(settings.loop, being_id, marks[-1], now)
    if rows or report.changed:
        _audit(con, settings, being_id, report, rows, actors, run_id, now)
    return report


def _actors(marks: list[Mark]) -> dict[str, str]:
    """Who decided, per op: the actor of the latest mark of that op."""
    out: dict[str, str] = {}
    for mark in marks:
        out[mark.op] = mark.actor
    return out


_HISTORY_COLUMNS = "(history_id, ts, memory_ref, being_id, operation, before, after, run_id, actor)"


class Row(NamedTuple):
    """One history row to write."""

    ref: str
    operation: str
    before: dict
    after: dict
    actor: str
    mark_id: str | None = None  # the decision it records; None: the marks' state caught up with
    ts: datetime | None = None  # when it happened; None: now, when the run applied it


# Nodes a tombstone hides: by ref, or formed from a forgotten episode.
_HIDDEN = "(list_contains($refs, n.node_id) OR list_has_any(n.source_episode_ids, $episodes))"
_HIDDEN_FACT = "(list_contains($refs, {id}) OR list_has_any(coalesce(source_episode_ids, []), $episodes))"
# A forgotten memory comes back in the status it had before: its latest `forgotten` row says so.
_STATUS_BEFORE = """coalesce((
    SELECT h.before ->> 'status' FROM history h
    WHERE h.memory_ref = n.node_id AND h.operation = 'forgotten'
    ORDER BY h.ts DESC LIMIT 1), 'active')"""


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


def _decisions(
    con, being_id: str, old: list[Mark], new: list[Mark], actors: dict[str, str], now: datetime
) -> tuple[set[str], list[Row]]:
    """The history rows of the memories the new marks name, one per change, in mark order.

    Each memory starts as DuckDB holds it. A tombstone folded before the memory was formed
    (set on its episode while it was fresh) is caught up first, as the set-based statements
    would, dated when the memory was formed; then each new mark is applied in turn, its row
    dated when the mark was set (as its pending entry was), so a recall folded by the same run
    sorts before or after it as it happened. Returns the memories decided here, whose rows the
    set-based statements leave out.
    """
    if not new:
        return set(), []
    refs = sorted({r for m in new for r in m.refs})
    episodes = sorted({e for m in new if m.op in FORGETTING for e in m.episode_ids})
    nodes = con.execute(
        f"""
        SELECT n.node_id, coalesce(n.source_episode_ids, []), n.forgotten_at IS NOT NULL,
               CASE WHEN n.forgotten_at IS NULL THEN n.status ELSE {_STATUS_BEFORE} END, n.pinned,
               least(coalesce(n.created_at, $now), $now)
        FROM nodes n
        WHERE n.being_id = $being AND {_HIDDEN}
        ORDER BY n.node_id
        """,
        {"being": being_id, "refs": refs, "episodes": episodes, "now": now},
    ).fetchall()
    tracker = MarkTracker()
    for mark in old:
        tracker.apply(mark)
    rows: list[Row] = []
    memories = []
    for ref, node_episodes, hidden, status, pinned, formed in nodes:
        memory = _Memory(ref, tuple(node_episodes), bool(hidden), status, bool(pinned), formed, now)
        if tracker.hides(ref, memory.episodes) != hidden:
            deleted = tracker.is_deleted(ref, memory.episodes)
            rows += memory.hide(
                not hidden,
                actors.get("delete" if deleted else "forget", "user"),
                actors.get("restore", "user"),
                deleted=deleted,
                ts=formed,
            )
        memories.append(memory)
    by_ref = {m.ref: m for m in memories}
    by_episode: dict[str, list[_Memory]] = {}
    for memory in memories:
        for episode in memory.episodes:
            by_episode.setdefault(episode, []).append(memory)
    for mark in new:
        tracker.apply(mark)
        named = [by_ref[r] for r in mark.refs if r in by_ref]
        if mark.op in FORGETTING:
            named += [m for e in mark.episode_ids for m in by_episode.get(e, ())]
        for memory in dict.fromkeys(named):  # each once, in a fixed order
            if mark.op in FORGETTING:
                rows += memory.hide(
                    tracker.hides(memory.ref, memory.episodes),
                    mark.actor,
                    mark.actor,
                    mark.mark_id,
                    deleted=tracker.is_deleted(memory.ref, memory.episodes),
                    ts=mark.ts,
                )
            else:
                rows += memory.pin(mark.op == "pin", mark.actor, mark.mark_id, mark.ts)
    return {m.ref for m in memories}, rows


@dataclass(eq=False)  # one object per memory: kept by identity
class _Memory:
    """One memory as the marks change it, one after another, during a fold."""

    ref: str
    episodes: tuple[str, ...]
    hidden: bool
    status: str  # its status when not hidden: the one a restore brings back
    pinned: bool
    since: datetime  # its rows are dated from here (when it was formed, then its last row)...
    until: datetime  # ...to now

    def at(self, moment: datetime) -> datetime:
        """A row's time: the moment, kept between the memory's previous row (or its forming) and now."""
        self.since = min(self.until, max(moment, self.since))
        return self.since

    def hide(
        self,
        hidden: bool,
        forget_actor: str,
        restore_actor: str,
        mark_id: str | None = None,
        *,
        deleted: bool = False,
        ts: datetime,
    ) -> list[Row]:
        """`deleted`: hidden by a permanent forget, whose archival reads as that decision."""
        if hidden == self.hidden:
            return []
        self.hidden = hidden
        if hidden:
            operation = "deleted" if deleted else "forgotten"
            before, after, actor = {"status": self.status}, {"status": "archived"}, forget_actor
        else:
            operation, before, after, actor = (
                "restored",
                {"status": "archived"},
                {"status": self.status},
                restore_actor,
            )
        return [Row(self.ref, operation, before, after, actor, mark_id, self.at(ts))]

    def pin(self, pinned: bool, actor: str, mark_id: str, ts: datetime) -> list[Row]:
        if pinned == self.pinned:
            return []
        self.pinned = pinned
        operation = "pinned" if pinned else "unpinned"
        return [
            Row(self.ref, operation, {"pinned": not pinned}, {"pinned": pinned}, actor, mark_id, self.at(ts))
        ]


def _forget(con, being_id, state, now, report, actors, decided) -> list[Row]:
    params = _params(being_id, state, now)
    if not params["refs"] and not params["episodes"]:
        return []
    archived = con.execute(
        f"""
        SELECT n.node_id, n.status, coalesce(n.source_episode_ids, []) FROM nodes n
        WHERE n.being_id = $being AND n.forgotten_at IS NULL AND {_HIDDEN}
        """,
        _used(params, _HIDDEN, "$being"),
    ).fetchall()
    rows: list[Row] = []
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
        rows = []
        for ref, status, episodes in archived:
            if ref not in decided:
                # A permanent forget archives the memory until the `forget` job erases it: that decision.
                op, operation = (
                    ("delete", "deleted") if state.is_deleted(ref, episodes) else ("forget", "forgotten")
                )
                rows.append(
                    Row(ref, operation, {"status": status}, {"status": "archived"}, actors.get(op, "user"))
                )
        report.forgotten += len(archived)
    for table, key in (("facts", "fact_id"), ("relations", "relation_id")):
        (n,) = con.execute(
            f"UPDATE {table} SET forgotten_at = $now WHERE being_id = $being AND forgotten_at IS NULL "
            f"AND {_HIDDEN_FACT.format(id=key)}",
            params,
        ).fetchall()[0]
        report.facts_forgotten += int(n)
    return rows


def _restore(con, being_id, state, now, report, actors, decided) -> list[Row]:
    """Memories archived by a tombstone that no mark hides any more go back to their status before."""
    params = _params(being_id, state, now)
    back = con.execute(
        f"""
        SELECT n.node_id, {_STATUS_BEFORE} AS status
        FROM nodes n
        WHERE n.being_id = $being AND n.forgotten_at IS NOT NULL AND NOT {_HIDDEN}
        """,
        _used(params, _HIDDEN, "$being"),
    ).fetchall()
    rows: list[Row] = []
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
        actor = actors.get("restore", "user")
        rows = [
            Row(ref, "restored", {"status": "archived"}, {"status": status}, actor)
            for ref, status in back
            if ref not in decided
        ]
        report.restored += len(back)
    for table_name, key in (("facts", "fact_id"), ("relations", "relation_id")):
        (n,) = con.execute(
            f"UPDATE {table_name} SET forgotten_at = NULL WHERE being_id = $being "
            f"AND forgotten_at IS NOT NULL AND NOT {_HIDDEN_FACT.format(id=key)}",
            _used(params, _HIDDEN_FACT, "$being"),
        ).fetchall()[0]
        report.facts_restored += int(n)
    return rows


def _pins(con, being_id, state, now, report, actors, decided) -> list[Row]:
    rows: list[Row] = []
    for refs, value, operation, op in (
        (state.pinned, True, "pinned", "pin"),
        (state.unpinned, False, "unpinned", "unpin"),
    ):
        if not refs:
            continue
        changed = con.execute(
            "SELECT node_id FROM nodes WHERE being_id = $being AND list_contains($refs, node_id) "
            "AND pinned <> $value",
            {"being": being_id, "refs": sorted(refs), "value": value},
        ).fetchall()
        if not changed:
            continue
        ids = [r[0] for r in changed]
        actor = actors.get(op, "user")
        # What the pin brings back, read before it does: a history row each, as patrol and decay
        # would write had they made the change.
        revived: list = []
        decay_statuses: list = []
        if value:
            revived = con.execute(
                "SELECT node_id, status FROM nodes WHERE list_contains($refs, node_id) "
                "AND status IN ('dying', 'dead') ORDER BY node_id",
                {"refs": ids},
            ).fetchall()
            decay_statuses = con.execute(
                "SELECT memory_ref, status FROM decay_scores WHERE list_contains($refs, memory_ref) "
                "AND forgotten_at IS NULL AND status <> 'active' ORDER BY memory_ref",
                {"refs": ids},
            ).fetchall()
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
        rows += [
            Row(ref, operation, {"pinned": not value}, {"pinned": value}, actor)
            for ref in ids
            if ref not in decided
        ]
        rows += [
            Row(ref, "revived", {"status": status}, {"status": "active"}, actor) for ref, status in revived
        ]
        rows += [
            Row(ref, "decay_status", {"decay_status": status}, {"decay_status": "active"}, actor)
            for ref, status in decay_statuses
        ]
        if value:
            report.pinned += len(ids)
        else:
            report.unpinned += len(ids)
    return rows


def _compact(values: dict) -> str:
    """JSON as DuckDB's to_json writes it, like every other writer's history rows."""
    return json.dumps(values, separators=(",", ":"))


def _history(con, being_id: str, rows: list[Row], now: datetime, run_id: str | None) -> None:
    """The rows in the order they were decided: history reads rows of one time by that order."""
    if rows:
        con.executemany(
            f"INSERT INTO history {_HISTORY_COLUMNS} "
            "VALUES ('h-' || uuid()::VARCHAR, ?, ?, ?, ?, ?::JSON, ?::JSON, ?, ?)",
            [
                [
                    r.ts or now,
                    r.ref,
                    being_id,
                    r.operation,
                    _compact(r.before),
                    _compact(r.after),
                    run_id,
                    r.actor,
                ]
                for r in rows
            ],
        )


def _audit(
    con, settings: Settings, being_id: str, report: MarkFoldReport, rows: list[Row], actors, run_id, now
):
    """One audit row per decision that changed memories, in the order they were made (a pin, its
    unpin and a pin again are three), and one per kind of change the marks' state caught up with;
    committed to the workspace with them."""
    memories: dict[tuple[str | None, str, str], set[str]] = {}
    for row in rows:
        if row.operation != "decay_status":  # decay's own audit counts statuses, not memories
            memories.setdefault((row.mark_id, row.operation, row.actor), set()).add(row.ref)
    # Facts and relations are counted, not decided one by one: they go with the last decision of
    # their kind by the latest actor.
    facts: dict[tuple[str | None, str, str], int] = {}
    for operation, op, count in (
        ("forgotten", "forget", report.facts_forgotten),
        ("restored", "restore", report.facts_restored),
    ):
        if count:
            actor = actors.get(op, "user")
            last = [key for key in memories if key[1:] == (operation, actor)]
            key = last[-1] if last else (None, operation, actor)
            facts[key] = count
            memories.setdefault(key, set())
    audit = []
    for key, refs in memories.items():
        _, operation, actor = key
        n_facts = f" and {facts[key]} facts" if key in facts else ""
        audit.append(
            AuditRow(
                "ARCHIVE" if operation in ("forgotten", "deleted") else "EDIT",
                "table:nodes",
                actor,
                f"{being_id}: {len(refs)} memories{n_facts} {operation}",
                # A person's decision, or an agent acting on its own (auto).
                approval="user" if actor == "user" else "auto",
                run_id=run_id,
                ts=now,
            )
        )
    commit_table_mutations(con, audit, settings, trigger="mark")


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
