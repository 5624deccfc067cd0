"""What mindflow holds, per being: the counts `mindflow status` and the demo print."""

from __future__ import annotations

from dataclasses import dataclass, field

import duckdb

from mindflow.decay import STATUSES


@dataclass
class BeingStatus:
    being_id: str
    episodes: int = 0
    nodes: int = 0
    clusters: int = 0
    active: int = 0
    dying: int = 0
    dead: int = 0
    decay: dict[str, int] = field(default_factory=dict)


def being_statuses(con: duckdb.DuckDBPyConnection) -> list[BeingStatus]:
    rows = con.execute(
        """
        WITH b AS (SELECT DISTINCT being_id FROM episodes UNION SELECT DISTINCT being_id FROM nodes)
        SELECT b.being_id,
            (SELECT count(*) FROM episodes e WHERE e.being_id = b.being_id),
            (SELECT count(*) FROM nodes n WHERE n.being_id = b.being_id),
            (SELECT count(*) FROM clusters c WHERE c.being_id = b.being_id),
            (SELECT count(*) FROM nodes n WHERE n.being_id = b.being_id AND n.status = 'active'),
            (SELECT count(*) FROM nodes n WHERE n.being_id = b.being_id AND n.status = 'dying'),
            (SELECT count(*) FROM nodes n WHERE n.being_id = b.being_id AND n.status = 'dead')
        FROM b ORDER BY 1
        """
    ).fetchall()
    decay = con.execute("SELECT being_id, status, count(*) FROM decay_scores GROUP BY 1, 2").fetchall()
    out = [BeingStatus(*row) for row in rows]
    by_id = {s.being_id: s for s in out}
    for being_id, status, n in decay:
        if being_id in by_id:
            by_id[being_id].decay[status] = n
    for s in out:
        s.decay = {status: s.decay.get(status, 0) for status in STATUSES}
    return out


def render(statuses: list[BeingStatus]) -> str:
    """A plain table, readable in a terminal and in CI logs."""
    header = ["being", "episodes", "nodes", "clusters", "active", "dying", "dead"]
    header += [f"decay:{s}" for s in STATUSES]
    rows = [
        [s.being_id, s.episodes, s.nodes, s.clusters, s.active, s.dying, s.dead]
        + [s.decay[k] for k in STATUSES]
        for s in statuses
    ]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=False)]
    lines = [
        "  ".join(
            str(v).rjust(w) if i else str(v).ljust(w) for i, (v, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in [header, *rows]
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def integrity_lines(settings, con: duckdb.DuckDBPyConnection | None = None) -> str:
    """Critical files (SOUL.md, IDENTITY.md, configuration) that differ from their recorded checksums
    (in DuckDB, or the committed record before there is a DuckDB file); empty when none does."""
    from mindflow import audit, store
    from mindflow.errors import MindflowError

    if con is not None:
        report = audit.verify_critical(settings, con, record=False)
    elif settings.duckdb_path.exists():
        try:
            with store.connect(settings.duckdb_path, read_only=True) as con:
                report = audit.verify_critical(settings, con, record=False)
        except MindflowError as exc:
            return f"critical files not checked: {exc}"
    else:
        report = audit.verify_critical(settings, record=False)
    if report.ok:
        return ""
    return "\n".join(
        [
            f"ALERT critical files changed outside mindflow: {', '.join(report.changed)}",
            "  inspect: mindflow audit --action ALERT; keep: mindflow audit --accept FILE; "
            "undo: mindflow rollback FILE --to COMMIT",
        ]
    )


def proposal_lines(settings, now=None) -> str:
    """Beings with proposals waiting for a decision; those pending for over a day are flagged."""
    from mindflow.loop.proposals import ProposalStore
    from mindflow.reflection.items import STALE_HOURS, pending_items, stale_proposals

    store = ProposalStore(settings.proposals)
    lines = []
    for being in store.beings():
        waiting = pending_items(store, being)
        if not waiting:
            continue
        stale = stale_proposals(store, being, now)
        kinds: dict[str, int] = {}
        for item in waiting:
            kinds[item.proposal.kind] = kinds.get(item.proposal.kind, 0) + 1
        line = (
            f"{being}: {len(waiting)} proposal(s) waiting ("
            + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))
            + f") — `mindflow review --being {being}`"
        )
        if stale:
            line = f"ALERT {line}; {len(stale)} pending for more than {STALE_HOURS} hours"
        lines.append(line)
    return "\n".join(lines)


def dead_run_lines(settings) -> str:
    """Runs left started by a process that is gone (killed with -9, out of memory), judged as the
    reaper of `mindflow run` and `init` judges them; shown, not marked: status writes nothing."""
    from mindflow import pool
    from mindflow.runner import existing_instance

    try:
        with existing_instance(settings) as instance:
            dead = pool.dead_runs(instance) if instance is not None else []
    except pool.StorageLocked as exc:
        return f"runs not checked: {exc}"
    return "\n".join(
        f"killed: {run.job} run {run.run_id} ({run.status.lower()}"
        + (f" since {run.started:%Y-%m-%d %H:%M:%S} UTC" if run.started else "")
        + f"): process {run.pid} is gone; the next `mindflow run` or `mindflow init` marks it failed"
        for run in dead
    )
