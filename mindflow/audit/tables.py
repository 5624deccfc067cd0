"""Table-level audit rows: what a run changed in the stores, summarised per being and kind of change."""

from __future__ import annotations

from datetime import datetime

import duckdb

from mindflow.audit import AuditRow, log_table_mutations
from mindflow.config import Settings

# history.operation -> audit action
HISTORY_ACTIONS = {
    "formed": "CREATE",
    "reinforced": "EDIT",
    "moved": "EDIT",
    "decay_status": "DECAY",
    "dying": "DECAY",
    "dead": "DELETE",
    "died": "DELETE",
    "revived": "EDIT",
    "merged": "MERGE",
    "absorbed": "MERGE",
    "consolidated": "MERGE",
    "split": "EDIT",
    "archived": "ARCHIVE",
    "forgotten": "ARCHIVE",
    "restored": "EDIT",
    "pinned": "EDIT",
    "unpinned": "EDIT",
    "deleted": "DELETE",
}
# Written by the fold of a person's marks, which audits and commits them itself (mindflow.loop.fold);
# `deleted` by that fold or by the `forget` job, which writes its own DELETE row.
DECIDED_BY_MARKS = ("forgotten", "restored", "deleted", "pinned", "unpinned")


def log_history(
    con: duckdb.DuckDBPyConnection, settings: Settings, *, since: datetime, run_id: str | None, actor: str
) -> list[AuditRow]:
    """Stamp the run id on the history rows written since `since` and log one row per being and operation."""
    if run_id is not None:
        con.execute("UPDATE history SET run_id = ? WHERE ts >= ? AND run_id IS NULL", [run_id, since])
    # A row of the run may be dated before it started: a reinforcement by when its recalls happened.
    counts = con.execute(
        "SELECT being_id, operation, count(*) FROM history WHERE (ts >= ? OR run_id = ?) "
        "AND run_id IS NOT DISTINCT FROM ? AND NOT list_contains(?, operation) GROUP BY 1, 2 ORDER BY 1, 2",
        [since, run_id, run_id, list(DECIDED_BY_MARKS)],
    ).fetchall()
    rows = [
        AuditRow(
            HISTORY_ACTIONS.get(op, "EDIT"), "table:nodes", actor, f"{being}: {n} nodes {op}", run_id=run_id
        )
        for being, op, n in counts
    ]
    log_table_mutations(con, rows, settings)
    return rows


def log_cluster_changes(
    con: duckdb.DuckDBPyConnection,
    settings: Settings,
    per_being: dict[str, dict[str, int]],
    *,
    run_id: str | None,
    actor: str = "patrol",
) -> list[AuditRow]:
    """MERGE / DELETE rows from the patrol's ❼ counts (merged_to_sibling, merged_to_root, deleted)."""
    rows = []
    for being, counts in sorted(per_being.items()):
        merged = counts.get("merged_to_sibling", 0) + counts.get("merged_to_root", 0)
        if merged:
            rows.append(
                AuditRow(
                    "MERGE",
                    "table:clusters",
                    actor,
                    f"{being}: {merged} small clusters merged "
                    f"({counts.get('merged_to_sibling', 0)} into siblings, "
                    f"{counts.get('merged_to_root', 0)} into roots)",
                    run_id=run_id,
                )
            )
        if counts.get("deleted", 0):
            rows.append(
                AuditRow(
                    "DELETE",
                    "table:clusters",
                    actor,
                    f"{being}: {counts['deleted']} empty clusters deleted",
                    run_id=run_id,
                )
            )
    log_table_mutations(con, rows, settings)
    return rows


def log_decay_transitions(
    con: duckdb.DuckDBPyConnection,
    settings: Settings,
    transitions: list[tuple[str, str, str, int]],
    *,
    run_id: str | None,
    actor: str = "decay",
) -> list[AuditRow]:
    """One row per (being, from, to): ARCHIVE for memories archived, DECAY for every other move."""
    rows = [
        AuditRow(
            "ARCHIVE" if to == "archived" else "DECAY",
            "table:decay_scores",
            actor,
            f"{being}: {n} memories {before} -> {to}",
            run_id=run_id,
        )
        for being, before, to, n in sorted(transitions)
    ]
    log_table_mutations(con, rows, settings)
    return rows
