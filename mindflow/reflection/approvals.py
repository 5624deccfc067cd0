"""The `approvals` run: every being's approved proposals applied, then what they changed published.

The read API never opens DuckDB, so a decision taken through it (or the /review page, or
`mindflow review`) is only recorded in the proposals store; this run carries it out and
publishes the result at once, so recall and the facts graph agree with the decision without
waiting for the night: merges and archivals re-publish the memories, settled contradictions the
facts graph, procedures the LanceDB table `procedures`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import duckdb

from mindflow.config import Settings
from mindflow.loop.proposals import ProposalStore
from mindflow.reflection import procedures
from mindflow.reflection.apply import ApplyReport, apply_approved, waiting


@dataclass
class Published:
    memories: int = 0  # rows upserted or deleted
    facts: int = 0
    procedures: int = 0


@dataclass
class ApprovalsReport:
    reports: list[ApplyReport] = field(default_factory=list)
    published: Published = field(default_factory=Published)

    def count(self, what: str = "applied") -> dict[str, int]:
        """Kind -> proposals applied (or rows changed, `what="changed"`), over every being."""
        out: dict[str, int] = {}
        for report in self.reports:
            for kind, n in getattr(report, what).items():
                out[kind] = out.get(kind, 0) + n
        return out

    @property
    def applied(self) -> int:
        return sum(r.total for r in self.reports)

    @property
    def failed(self) -> list[str]:
        return [f"{r.being_id}: {f}" for r in self.reports for f in r.failed]


def waiting_beings(settings: Settings) -> list[str]:
    """Beings with an approved proposal no run has applied yet."""
    store = ProposalStore(settings.proposals)
    return [b for b in store.beings() if waiting(store, b)]


def publish_changes(con: duckdb.DuckDBPyConnection, settings: Settings, db, embedder, reports) -> Published:
    """Publish to LanceDB what applied proposals changed in DuckDB (nothing when nothing did)."""
    from mindflow import graph, memories

    published = Published()
    kinds = {kind for r in reports for kind in r.applied}
    if kinds & {"merge", "archive"}:
        report = memories.publish(
            con, db, fact_keys=settings.recall_fact_keys, keyphrase_keys=settings.recall_keyphrase_keys
        )
        published.memories = report.upserted + report.deleted
    if "contradiction" in kinds:
        report = graph.publish_graph(con, db, params=settings.activation_params())
        published.facts = report.upserted + report.deleted
    beings = sorted({r.being_id for r in reports if r.procedures_changed})
    if beings:
        published.procedures = procedures.publish(con, db, embedder(), beings)
    return published


def apply_all(
    con: duckdb.DuckDBPyConnection, settings: Settings, db, embedder, *, run_id: str | None = None
) -> ApprovalsReport:
    """Apply every being's approved, unapplied proposals and publish the result.

    `embedder` is called only when a procedure has to be embedded (the model loads then)."""
    report = ApprovalsReport()
    for being_id in waiting_beings(settings):
        report.reports.append(apply_approved(con, settings, being_id, run_id=run_id))
    report.published = publish_changes(con, settings, db, embedder, report.reports)
    return report
