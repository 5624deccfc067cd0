"""Applying approved proposals: each in one DuckDB transaction, then one audit commit, then marked applied.

A run killed between those steps leaves the proposal approved and unapplied; the next run
applies it again, which changes nothing more (every change is idempotent) and records the
audit commit only if it is missing. Forget proposals have their own path (mindflow.loop).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

import duckdb

from mindflow import audit, store
from mindflow.audit.trail import AuditRow
from mindflow.audit.writes import commit_table_mutations
from mindflow.config import Settings
from mindflow.errors import MindflowError
from mindflow.loop.proposals import Proposal, ProposalStore
from mindflow.models import utcnow
from mindflow.patrol import HISTORY_COLUMNS, merge_nodes
from mindflow.reflection import notes, procedures

APPLIED_BY_JOB = ("merge", "archive", "contradiction", "procedure", "core", "memory")


@dataclass
class ApplyReport:
    being_id: str
    applied: dict[str, int] = field(default_factory=dict)  # kind -> proposals applied
    changed: dict[str, int] = field(default_factory=dict)  # nodes merged, facts superseded, ...
    failed: list[str] = field(default_factory=list)  # proposal id: reason
    procedures_changed: bool = False

    @property
    def total(self) -> int:
        return sum(self.applied.values())


def actor_of(proposal: Proposal) -> tuple[str, str]:
    """(actor, how the trail writes it): reflection:<id>, subagent:<name> (bot:commit-from:<name>), or
    who posted it."""
    reflection_id = proposal.payload.get("reflection_id")
    if proposal.kind == "memory" and proposal.created_by.startswith("subagent:"):
        name = proposal.created_by.removeprefix("subagent:")
        return proposal.created_by, f"bot:commit-from:{name}"
    if reflection_id:
        return f"reflection:{reflection_id}", f"reflection:{reflection_id}"
    return proposal.created_by, proposal.created_by


def waiting(store: ProposalStore, being_id: str) -> list[Proposal]:
    """Approved proposals no run has applied yet, oldest decision first."""
    found = [
        p
        for p in store.list(being_id, status="approved")
        if p.kind in APPLIED_BY_JOB and p.applied_at is None
    ]
    return sorted(found, key=lambda p: (p.decided_at or p.created_at, p.proposal_id))


def _audited(con: duckdb.DuckDBPyConnection, proposal_id: str) -> bool:
    return bool(
        con.execute("SELECT count(*) FROM audit_log WHERE summary LIKE ?", [f"%[{proposal_id}]%"]).fetchone()[
            0
        ]
    )


def _in_transaction(con: duckdb.DuckDBPyConnection, change: Callable[[], int]) -> int:
    with store.transaction(con):
        return change()


def _merge(con, proposal: Proposal, now: datetime, actor: str, run_id: str | None) -> int:
    p = proposal.payload
    return _in_transaction(
        con, lambda: merge_nodes(con, proposal.being_id, p["survivor"], p["absorbed"], now, actor, run_id)
    )


def _archive(con, proposal: Proposal, now: datetime, actor: str, run_id: str | None) -> int:
    """The memories die, as the patrol's dead ones (searchable, never recalled): their history rows
    read `dead` from the status each had, the word the patrol writes for the same change."""

    def change() -> int:
        refs = proposal.payload["refs"]
        # Written before the update, while the memories still have their status.
        con.execute(
            f"INSERT INTO history {HISTORY_COLUMNS} SELECT 'h-' || uuid()::VARCHAR, ?, node_id, being_id, "
            "'dead', to_json({'status': status}), to_json({'status': 'dead'}), ?, ? FROM nodes "
            "WHERE being_id = ? AND status <> 'dead' AND NOT pinned "
            "AND node_id IN (SELECT unnest(?::VARCHAR[])) ORDER BY node_id",
            [now, run_id, actor, proposal.being_id, refs],
        )
        rows = con.execute(
            "UPDATE nodes SET status = 'dead', fresh = FALSE, died_reactivations = reactivation_count, "
            "updated_at = ? WHERE being_id = ? AND status <> 'dead' AND NOT pinned "
            "AND node_id IN (SELECT unnest(?::VARCHAR[])) RETURNING node_id",
            [now, proposal.being_id, refs],
        ).fetchall()
        return len(rows)

    return _in_transaction(con, change)


def _settle(con, proposal: Proposal, now: datetime, actor: str, run_id: str | None) -> int:
    p = proposal.payload
    others = [s["fact_id"] for s in p["sides"] if s["fact_id"] != p["keep"]]

    def change() -> int:
        rows = con.execute(
            "UPDATE facts SET invalid_at = ? WHERE being_id = ? AND invalid_at IS NULL "
            "AND fact_id IN (SELECT unnest(?::VARCHAR[])) RETURNING fact_id, value",
            [now, proposal.being_id, others],
        ).fetchall()
        for fact_id, value in rows:
            con.execute(
                f"INSERT INTO history {HISTORY_COLUMNS} VALUES ('h-' || uuid()::VARCHAR, ?, ?, ?, "
                "'superseded', to_json({'value': ?::VARCHAR}), "
                "to_json({'value': ?::VARCHAR, 'fact_id': ?::VARCHAR}), ?, ?)",
                [now, fact_id, proposal.being_id, value, p["keep_value"], p["keep"], run_id, actor],
            )
        return len(rows)

    return _in_transaction(con, change)


def _procedure(con, proposal: Proposal, now: datetime, actor: str, run_id: str | None) -> int:
    found = procedures.ProcedureIn.from_payload(proposal.payload)
    saved = procedures.save(con, proposal.being_id, found, source=proposal.proposal_id, now=now)
    return int(saved.created)


def _memory(settings: Settings, proposal: Proposal) -> int:
    from mindflow.api.episodes import append_episodes

    p = proposal.payload
    append_episodes(
        settings.inbox,
        proposal.being_id,
        [
            {
                # One id per proposal: applied twice, the ingestion keeps one episode.
                "id": "sa-" + proposal.proposal_id.removeprefix("p-")[:32],
                "text": p["content"],
                "kind": p.get("type", "fact"),
                "confidence": float(p.get("confidence", 0.5)),
                "speaker": p.get("agent", "subagent"),
                "role": "agent",
                "source": proposal.created_by,
                "ts": (proposal.decided_at or utcnow()).isoformat() + "Z",
                "tags": ["subagent"],
            }
        ],
        max_chars=settings.max_episode_chars,
    )
    return 1


ACTIONS = {
    "merge": "MERGE",
    "archive": "ARCHIVE",
    "contradiction": "EDIT",
    "procedure": "CREATE",
    "memory": "CREATE",
}
TARGETS = {
    "merge": "table:nodes",
    "archive": "table:nodes",
    "contradiction": "table:facts",
    "procedure": "table:procedures",
    "memory": "table:episodes",
}


def _summary(proposal: Proposal, changed: int) -> str:
    """What the audit commit says: refs and counts, never a memory's words (the trail is kept for
    good, and a permanent forget must not find its text there)."""
    p = proposal.payload
    what = {
        "merge": lambda: f"merge {', '.join(p.get('absorbed', []))} into {p.get('survivor')}",
        "archive": lambda: f"archive {len(p.get('refs', []))} {p.get('decay_status') or ''} memory(ies)",
        "contradiction": lambda: (
            f"settle a contradiction: keep {p.get('keep')}, close "
            + ", ".join(s["fact_id"] for s in p.get("sides", []) if s.get("fact_id") != p.get("keep"))
        ),
        "procedure": lambda: f"procedure {procedure_ref_of(proposal)}",
        "memory": lambda: f"a {p.get('type', 'fact')} proposed by {proposal.created_by}",
        "core": lambda: f"MEMORY.md rewrite (+{p.get('added', 0)} −{p.get('removed', 0)} lines)",
    }[proposal.kind]()
    edited = " (edited)" if p.get("edited") else ""
    return f"{' '.join(what.split())[:200]}{edited}: {changed} changed [{proposal.proposal_id}]"


def procedure_ref_of(proposal: Proposal) -> str:
    return procedures.procedure_ref(proposal.being_id, str(proposal.payload.get("name", "")))


def apply_one(
    con: duckdb.DuckDBPyConnection,
    settings: Settings,
    proposal: Proposal,
    *,
    run_id: str | None,
    now: datetime,
) -> int:
    """Carry out one approved proposal and its audit commit; returns the rows it changed."""
    actor, written = actor_of(proposal)
    approval = proposal.payload.get("approval", "user")
    if proposal.kind == "core":
        rel = f"{proposal.being_id}/MEMORY.md"
        exists = (settings.workspace / rel).is_file()
        changed = audit.write_file(
            settings,
            rel,
            proposal.payload["text"],
            action="EDIT" if exists else "CREATE",
            summary=_summary(proposal, 1),
            actor=written,
            trigger="approved proposal",
            run_id=run_id,
            approval=approval,
            con=con,
        )
        return int(changed)
    appliers = {"merge": _merge, "archive": _archive, "contradiction": _settle, "procedure": _procedure}
    if proposal.kind == "memory":
        changed = _memory(settings, proposal)
    elif proposal.kind in appliers:
        changed = appliers[proposal.kind](con, proposal, now, actor, run_id)
    else:
        raise MindflowError(f"proposal kind {proposal.kind!r} is not applied by the approvals run")
    if not _audited(con, proposal.proposal_id):
        row = AuditRow(
            ACTIONS[proposal.kind],
            TARGETS[proposal.kind],
            written,
            _summary(proposal, changed),
            approval,
            run_id,
        )
        commit_table_mutations(con, [row], settings, trigger="approved proposal")
    return changed


def apply_approved(
    con: duckdb.DuckDBPyConnection,
    settings: Settings,
    being_id: str,
    *,
    run_id: str | None = None,
    now: datetime | None = None,
    only: list[str] | None = None,
) -> ApplyReport:
    """Apply the being's approved, unapplied proposals (`only`: these ids), oldest decision first.

    A proposal that cannot be applied (its memories gone, a broken payload) is reported and left
    approved and unapplied; the others go on."""
    now = now or utcnow()
    store = ProposalStore(settings.proposals)
    report = ApplyReport(being_id)
    applied: list[str] = []
    for proposal in waiting(store, being_id):
        if only is not None and proposal.proposal_id not in only:
            continue
        try:
            changed = apply_one(con, settings, proposal, run_id=run_id, now=now)
        except (MindflowError, KeyError, TypeError, ValueError, duckdb.Error) as exc:
            report.failed.append(f"{proposal.proposal_id}: {exc}"[:300])
            continue
        store.mark_applied(being_id, proposal.proposal_id, run_id)
        report.applied[proposal.kind] = report.applied.get(proposal.kind, 0) + 1
        report.changed[proposal.kind] = report.changed.get(proposal.kind, 0) + changed
        report.procedures_changed |= proposal.kind == "procedure"
        applied.append(
            f"- {proposal.kind} `{proposal.proposal_id}` "
            f"({proposal.payload.get('approval', 'user')}): {changed} changed"
        )
    if applied:
        notes.append_log(
            settings,
            being_id,
            [f"## Applied {now:%Y-%m-%d %H:%M} UTC", "", *applied],
            actor="reflection",
            run_id=run_id,
            con=con,
        )
    return report
