"""The procedural store: how the being does things, learned from repeated decisions and tasks.

A procedure (`procedure_ref`, stable per being and name) has versions: saving different
content adds version n+1 and closes version n (`superseded_at`), never overwrites it. The
current versions are published to the LanceDB table `procedures`, where the read API searches
them. Each procedure has one decay row (store `procedures`, type weight 1.0, procedural) like
the memories; a new version counts as an access.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime

import duckdb
import numpy as np
import pyarrow as pa

from mindflow import lance, store
from mindflow.decay import TYPE_WEIGHTS
from mindflow.errors import MindflowError
from mindflow.models import utcnow

TABLE = "procedures"
MAX_STEPS = 50
COLUMNS = (
    "procedure_ref", "procedure_id", "being_id", "name", "trigger", "steps", "notes", "learned_from",
    "confidence", "version", "status", "created_at", "updated_at",
)  # fmt: skip


@dataclass(frozen=True)
class ProcedureIn:
    """A procedure as it is proposed or posted: what a person or the model wrote."""

    name: str
    trigger: str
    steps: list[str]
    notes: str | None = None
    learned_from: list[str] = field(default_factory=list)
    confidence: float = 0.7

    @classmethod
    def from_payload(cls, payload: dict) -> ProcedureIn:
        try:
            found = cls(
                name=" ".join(str(payload["name"]).split()),
                trigger=" ".join(str(payload["trigger"]).split()),
                steps=[" ".join(str(s).split()) for s in payload["steps"] if str(s).strip()],
                notes=(str(payload["notes"]).strip() or None) if payload.get("notes") else None,
                learned_from=[str(i) for i in payload.get("learned_from") or []],
                confidence=float(payload.get("confidence", 0.7)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise MindflowError(f"a procedure needs name, trigger and steps: {exc}") from exc
        if not found.name or not found.trigger or not found.steps:
            raise MindflowError("a procedure needs a name, a trigger and at least one step")
        if len(found.steps) > MAX_STEPS or not 0.0 <= found.confidence <= 1.0:
            raise MindflowError(f"a procedure has 1-{MAX_STEPS} steps and a confidence in [0, 1]")
        return found

    def text(self) -> str:
        """What is embedded and shown: name, when it applies, its steps."""
        steps = "\n".join(f"{i}. {s}" for i, s in enumerate(self.steps, 1))
        return f"{self.name}\nWhen: {self.trigger}\n{steps}" + (
            f"\nNotes: {self.notes}" if self.notes else ""
        )


@dataclass(frozen=True)
class Saved:
    procedure_ref: str
    procedure_id: str
    version: int
    created: bool  # False: the current version already held this content


def procedure_ref(being_id: str, name: str) -> str:
    key = " ".join(name.lower().split())
    return "pr-" + hashlib.sha256(f"{being_id}\x00{key}".encode()).hexdigest()[:24]


def save(
    con: duckdb.DuckDBPyConnection,
    being_id: str,
    procedure: ProcedureIn,
    *,
    source: str,
    now: datetime | None = None,
) -> Saved:
    """Add the procedure's next version (or nothing, when the current one says the same)."""
    now = now or utcnow()
    ref = procedure_ref(being_id, procedure.name)
    current = con.execute(
        "SELECT procedure_id, version, trigger, steps, notes FROM procedures "
        "WHERE procedure_ref = ? AND superseded_at IS NULL",
        [ref],
    ).fetchall()
    if current and (current[0][2], list(current[0][3]), current[0][4]) == (
        procedure.trigger,
        procedure.steps,
        procedure.notes,
    ):
        return Saved(ref, current[0][0], current[0][1], created=False)
    version = current[0][1] + 1 if current else 1
    procedure_id = f"{ref}-v{version}"
    with store.transaction(con):
        con.execute(
            "UPDATE procedures SET superseded_at = ?, updated_at = ? "
            "WHERE procedure_ref = ? AND superseded_at IS NULL",
            [now, now, ref],
        )
        con.execute(
            "INSERT INTO procedures VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL)",
            [
                procedure_id, ref, being_id, procedure.name, procedure.trigger, procedure.steps,
                procedure.notes, procedure.learned_from, procedure.confidence, version, source, now, now,
            ],
        )  # fmt: skip
        # One decay row per procedure: a new version is an access of it.
        con.execute(
            "INSERT INTO decay_scores (memory_ref, being_id, store, kind, base_relevance, created_at, "
            "last_accessed, access_count, type_weight, score, status, pinned, as_of) "
            "VALUES (?, ?, 'procedures', 'procedure', ?, ?, ?, 1, ?, NULL, 'active', FALSE, NULL) "
            "ON CONFLICT (memory_ref) DO UPDATE SET last_accessed = excluded.last_accessed, "
            "access_count = decay_scores.access_count + 1, base_relevance = excluded.base_relevance",
            [ref, being_id, procedure.confidence, now, now, TYPE_WEIGHTS["procedural"]],
        )
    return Saved(ref, procedure_id, version, created=True)


def current(con: duckdb.DuckDBPyConnection, being_id: str) -> list[dict]:
    """The being's current versions with their decay status, by name."""
    rows = con.execute(
        "SELECT p.procedure_ref, p.procedure_id, p.being_id, p.name, p.trigger, p.steps, p.notes, "
        "p.learned_from, p.confidence, p.version, coalesce(d.status, 'active'), p.created_at, p.updated_at "
        "FROM procedures p LEFT JOIN decay_scores d ON d.memory_ref = p.procedure_ref "
        "WHERE p.being_id = ? AND p.superseded_at IS NULL ORDER BY p.name",
        [being_id],
    ).fetchall()
    return [dict(zip(COLUMNS, r, strict=True)) for r in rows]


def versions(con: duckdb.DuckDBPyConnection, being_id: str, name: str) -> list[dict]:
    """Every version of one procedure, oldest first."""
    rows = con.execute(
        "SELECT version, trigger, steps, notes, source, created_at, superseded_at FROM procedures "
        "WHERE procedure_ref = ? ORDER BY version",
        [procedure_ref(being_id, name)],
    ).fetchall()
    keys = ("version", "trigger", "steps", "notes", "source", "created_at", "superseded_at")
    return [dict(zip(keys, r, strict=True)) for r in rows]


def _text(row: dict) -> str:
    return ProcedureIn(row["name"], row["trigger"], list(row["steps"]), row["notes"]).text()


def publish(con: duckdb.DuckDBPyConnection, db, embedder, being_ids: list[str]) -> int:
    """Replace the beings' rows of LanceDB `procedures` by their current versions; returns the rows."""
    rows = [r for being in being_ids for r in current(con, being)]
    table = lance.open_table(db, TABLE)
    texts = [_text(r) for r in rows]
    vectors = embedder.encode_cached(con, texts) if rows else np.zeros((0, embedder.dimension), np.float32)
    data = pa.table(
        {
            **{c: [r[c] for r in rows] for c in COLUMNS if c not in ("steps", "learned_from")},
            "steps": pa.array([list(r["steps"]) for r in rows], pa.list_(pa.string())),
            "learned_from": pa.array([list(r["learned_from"] or []) for r in rows], pa.list_(pa.string())),
            "text": texts,
            "vector": pa.array(list(vectors), lance.vector_type(embedder.dimension)),
        },
        schema=_schema(embedder.dimension),
    )
    if table is None:
        db.create_table(TABLE, data=data)
        return len(rows)
    # A being's procedures are few: its rows are replaced as a whole, one delete and one add.
    table.delete(lance.where(being_id=being_ids))
    if rows:
        table.add(data)
    return len(rows)


def _schema(dim: int) -> pa.Schema:
    return pa.schema(
        [
            ("procedure_ref", pa.string()),
            ("procedure_id", pa.string()),
            ("being_id", pa.string()),
            ("name", pa.string()),
            ("trigger", pa.string()),
            ("notes", pa.string()),
            ("confidence", pa.float64()),
            ("version", pa.int32()),
            ("status", pa.string()),
            ("created_at", pa.timestamp("us")),
            ("updated_at", pa.timestamp("us")),
            ("steps", pa.list_(pa.string())),
            ("learned_from", pa.list_(pa.string())),
            ("text", pa.string()),
            ("vector", lance.vector_type(dim)),
        ]
    )


def search(table, being_id: str, query_vector: np.ndarray | None, k: int = 5) -> list[dict]:
    """The being's current procedures nearest the query (all by name without one); archived hidden."""
    if table is None:
        return []
    condition = lance.all_of(lance.where(being_id=being_id), "status <> 'archived'")
    columns = [c for c in COLUMNS] + ["text"]
    if query_vector is None:
        found = table.search().where(condition).select(columns).limit(None).to_arrow().to_pylist()
        return sorted(found, key=lambda r: r["name"])[:k]
    found = (
        table.search(np.asarray(query_vector, dtype=np.float32))
        .where(condition, prefilter=True)
        .select(columns + ["_distance"])
        .limit(k)
        .to_arrow()
        .to_pylist()
    )
    for row in found:
        row["score"] = round(1.0 - float(row.pop("_distance")) / 2.0, 4)  # cosine from L2 of unit vectors
    return found


def propose_procedure(settings, being_id: str, payload: dict, *, created_by: str, approved: bool):
    """A `procedure` proposal for a procedure a person or the main agent wrote (validated first).

    `approved`: the writer may add it directly, so it is approved at once (approval `user`) and the
    next `approvals` run saves and publishes it; otherwise it waits for a decision like the others.
    """
    from mindflow.loop.proposals import ProposalStore

    found = ProcedureIn.from_payload(payload)
    store = ProposalStore(settings.proposals)
    proposal = store.create(
        being_id,
        "procedure",
        {
            "name": found.name,
            "trigger": found.trigger,
            "steps": found.steps,
            "notes": found.notes,
            "learned_from": found.learned_from,
            "confidence": found.confidence,
        },
        created_by=created_by,
    )
    if not approved:
        return proposal
    return store.decide(
        being_id,
        proposal.proposal_id,
        "approved",
        created_by,
        payload={**proposal.payload, "approval": "user"},
    )
