"""One reflection cycle of one being: the seed's five phases within an output budget.

1. survey (mechanical); 2. meta-reflection over reflection-log.md and evolution.md (model
only); 3. consolidate: merges, archival, contradictions (mechanical), merge judgement and
procedures (model); 4. rewrite core: a proposed MEMORY.md with its diff; 5. summary in
`reflection/pending-reflection.md`, one numbered item per pending proposal.

Every change is a proposal. In review mode the cycle stops there: nothing in nodes, facts or
MEMORY.md changes until a person decides. In auto mode the cycle approves its own proposals
(approval `auto`) and applies them at once, as the Being's unattended patrol does.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime

import duckdb

from mindflow.config import Settings
from mindflow.core_memory import compose_core_memory
from mindflow.llm.budget import estimate_tokens
from mindflow.loop.proposals import ProposalStore
from mindflow.models import utcnow
from mindflow.reflection import consolidate, notes
from mindflow.reflection.apply import ApplyReport, apply_approved
from mindflow.reflection.approvals import Published, publish_changes
from mindflow.reflection.core import propose_core
from mindflow.reflection.items import pending_items
from mindflow.reflection.modes import approval_mode
from mindflow.reflection.survey import Survey, last_reflection, survey

META_TOKENS = 600
MERGE_TOKENS = 1_200
PROCEDURE_TOKENS = 1_500
CORE_TOKENS = 3_000  # MEMORY.md's cap


@dataclass
class ReflectionReport:
    being_id: str
    reflection_id: str
    number: int
    mode: str
    survey: Survey
    proposed: dict[str, int] = field(default_factory=dict)  # kind -> new proposals
    skipped: int = 0  # findings an earlier cycle proposed already (whatever was decided)
    pending: int = 0  # items in pending-reflection.md
    insights: list[str] = field(default_factory=list)
    output_tokens: int = 0  # of the budget: model answers and the summary
    applied: ApplyReport | None = None  # auto mode
    errors: list[str] = field(default_factory=list)
    milestone: bool = False

    @property
    def total(self) -> int:
        return sum(self.proposed.values())


class _Budget:
    """The cycle's output tokens: each model call may use what the earlier ones left."""

    def __init__(self, total: int, llm):
        self.total, self.llm = total, llm
        self.start = llm.usage.output_tokens if llm is not None else 0
        self.own = 0  # tokens of text the cycle writes itself

    @property
    def used(self) -> int:
        model = (self.llm.usage.output_tokens - self.start) if self.llm is not None else 0
        return model + self.own

    def allow(self, wanted: int) -> int:
        """Tokens a call may answer with (0: skip it)."""
        left = self.total - self.used
        return min(wanted, left) if left >= 200 else 0


def _meta(settings: Settings, being_id: str, llm, budget: _Budget, report: ReflectionReport) -> None:
    from mindflow.llm import LLMError
    from mindflow.prompts import reflection as prompt

    tokens = budget.allow(META_TOKENS)
    if not tokens:
        return
    log_tail = notes.read(settings, being_id, notes.LOG)[-6_000:]
    evolution = notes.read(settings, being_id, notes.EVOLUTION)[-3_000:]
    if not log_tail and not evolution:
        return  # nothing to reflect on yet
    try:
        answer = llm.complete(prompt.meta(being_id, log_tail, evolution, max_tokens=tokens))
        report.insights = list(answer.insights)
    except LLMError as exc:
        report.errors.append(f"meta-reflection: {exc}"[:300])


def reflect(
    con: duckdb.DuckDBPyConnection,
    settings: Settings,
    being_id: str,
    *,
    llm=None,
    run_id: str | None = None,
    trigger: str = "manual",
    now: datetime | None = None,
) -> ReflectionReport:
    """Run one cycle for `being_id`.

    `llm` (purpose reflection) adds phase 2 and the model parts of phases 3 and 4."""
    now = now or utcnow()
    mode = approval_mode(settings, being_id)
    done, since = last_reflection(con, being_id)
    reflection_id = "r-" + uuid.uuid4().hex[:16]
    actor = f"reflection:{reflection_id}"
    con.execute(
        "INSERT INTO reflections (reflection_id, being_id, number, mode, trigger, started_at, run_id) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        [reflection_id, being_id, done + 1, mode, trigger, now, run_id],
    )
    budget = _Budget(settings.reflection_budget_tokens, llm)
    report = ReflectionReport(being_id, reflection_id, done + 1, mode, survey(con, being_id, since))

    if llm is not None:
        _meta(settings, being_id, llm, budget, report)

    drafts: list[consolidate.Draft] = []
    merged = consolidate.merges(
        con, being_id, settings.reflection_merge_cosine, llm if budget.allow(MERGE_TOKENS) else None,
        max_tokens=budget.allow(MERGE_TOKENS) or 1,
    )  # fmt: skip
    drafts += merged.drafts
    drafts += consolidate.archivals(con, being_id)
    drafts += consolidate.contradictions(con, being_id)
    report.errors += merged.errors
    if llm is not None and budget.allow(PROCEDURE_TOKENS):
        learned = consolidate.learned_procedures(
            con, being_id, since, llm, max_tokens=budget.allow(PROCEDURE_TOKENS)
        )
        drafts += learned.drafts
        report.errors += learned.errors

    store = ProposalStore(settings.proposals)
    known = {p.payload.get("finding") for p in store.list(being_id)}
    created = []
    for draft in drafts:
        if draft.finding in known:
            report.skipped += 1
            continue
        known.add(draft.finding)
        draft.payload["reflection_id"] = reflection_id
        created.append(store.create(being_id, draft.kind, draft.payload, created_by=actor))
        report.proposed[draft.kind] = report.proposed.get(draft.kind, 0) + 1

    # Phase 4: the core rebuild, rewritten by the model while the budget holds a MEMORY.md.
    core_llm = llm if budget.allow(CORE_TOKENS) >= CORE_TOKENS else None
    text, core_report = compose_core_memory(con, settings, being_id, llm=core_llm, run_id=run_id)
    core_id = propose_core(
        settings, being_id, text, core_report, created_by=actor, reflection_id=reflection_id
    )
    if (
        core_id
        and all(p.proposal_id != core_id for p in created)
        and store.get(being_id, core_id).payload.get("reflection_id") == reflection_id
    ):
        created.append(store.get(being_id, core_id))
        report.proposed["core"] = report.proposed.get("core", 0) + 1
    if core_report.error:
        report.errors.append(f"core rewrite: {core_report.error}")

    if mode == "auto":
        for proposal in created:
            store.decide(
                being_id,
                proposal.proposal_id,
                "approved",
                actor,
                payload={**proposal.payload, "approval": "auto"},
            )
        report.applied = apply_approved(
            con, settings, being_id, run_id=run_id, now=now, only=[p.proposal_id for p in created]
        )

    # Phase 5: the summary, then the log and milestones.
    items = pending_items(store, being_id)
    report.pending = len(items)
    summary = notes.render_pending(
        being_id, report.number, reflection_id, now, mode, report.survey.lines(), report.insights, items,
        max(500, settings.reflection_budget_tokens - budget.used),
    )  # fmt: skip
    budget.own += estimate_tokens(summary)
    notes.write_pending(settings, being_id, summary, actor=actor, run_id=run_id, con=con)
    proposed = ", ".join(f"{k} {n}" for k, n in sorted(report.proposed.items())) or "nothing new"
    applied = report.applied.total if report.applied else 0
    notes.append_log(
        settings,
        being_id,
        [
            f"## Reflection {report.number} — {now:%Y-%m-%d %H:%M} UTC "
            f"(`{reflection_id}`, {mode}, {trigger})",
            "",
            *[f"- survey: {line}" for line in report.survey.lines()],
            f"- proposed: {proposed}; already proposed before: {report.skipped}",
            f"- pending after the cycle: {report.pending}; applied by the cycle: {applied}",
            *[f"- insight: {x}" for x in report.insights],
        ],
        actor=actor,
        run_id=run_id,
        con=con,
    )
    report.milestone = notes.milestone(
        settings, being_id, report.number, _evolution(con, being_id), actor=actor, run_id=run_id, con=con
    )
    report.output_tokens = budget.used
    con.execute(
        "UPDATE reflections SET finished_at = ?, proposals = ?, applied = ?, output_tokens = ? "
        "WHERE reflection_id = ?",
        [utcnow(), report.total, applied, report.output_tokens, reflection_id],
    )
    return report


def _evolution(con: duckdb.DuckDBPyConnection, being_id: str) -> list[str]:
    """What a milestone records: the reflections so far and the memory's shape now."""
    reflections, proposals, applied = con.execute(
        "SELECT count(*), coalesce(sum(proposals), 0), coalesce(sum(applied), 0) FROM reflections "
        "WHERE being_id = ?",
        [being_id],
    ).fetchone()
    nodes = dict(
        con.execute("SELECT status, count(*) FROM nodes WHERE being_id = ? GROUP BY 1", [being_id]).fetchall()
    )
    facts, procedures_n = con.execute(
        "SELECT (SELECT count(*) FROM facts WHERE being_id = $b AND invalid_at IS NULL "
        "AND forgotten_at IS NULL), "
        "(SELECT count(*) FROM procedures WHERE being_id = $b AND superseded_at IS NULL)",
        {"b": being_id},
    ).fetchone()
    return [
        f"- reflections: {reflections}; proposals made: {proposals}; "
        f"applied by cycles in auto mode: {applied}",
        "- memories: " + ", ".join(f"{k} {v}" for k, v in sorted(nodes.items())),
        f"- current facts: {facts}; procedures: {procedures_n}",
    ]


@dataclass
class ReflectionRun:
    """One run's cycles, and what the cycles of beings in auto mode published."""

    reports: list[ReflectionReport]
    published: Published

    def per_being(self) -> dict[str, dict[str, int]]:
        """Counts per being for the UI's table: proposals by kind, pending, applied, tokens."""
        return {
            r.being_id: {
                **r.proposed,
                "pending": r.pending,
                "applied": r.applied.total if r.applied else 0,
                "output_tokens": r.output_tokens,
                "errors": len(r.errors),
            }
            for r in self.reports
        }


def reflect_beings(
    con: duckdb.DuckDBPyConnection,
    settings: Settings,
    being_ids: list[str],
    *,
    db,
    embedder,
    llm=None,
    run_id: str | None = None,
    trigger: str = "manual",
    log=None,
) -> ReflectionRun:
    """A cycle per being, then the LanceDB tables refreshed for what auto mode applied."""
    reports = []
    for being_id in being_ids:
        report = reflect(con, settings, being_id, llm=llm, run_id=run_id, trigger=trigger)
        if log is not None:
            # Counts only: the run's log cannot be edited by a later permanent forget.
            log(
                f"{being_id}: reflection {report.number} ({report.mode}): {report.total} proposed, "
                f"{report.pending} pending, {report.applied.total if report.applied else 0} applied, "
                f"{report.output_tokens} output tokens"
            )
        reports.append(report)
    applied = [r.applied for r in reports if r.applied is not None]
    return ReflectionRun(reports, publish_changes(con, settings, db, embedder, applied))
