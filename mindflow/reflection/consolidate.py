"""Phase 3, consolidate: what reflection proposes to merge, archive, settle and learn.

Mechanically: merges of near-duplicate active memories (cosine at or above the threshold
within one cluster), archival of memories the decay marked archived or dormant, and
contradictions (one entity and key, several current values). With a model: merge
candidates a little below the threshold judged by it, and procedures learned from decisions
and tasks repeated across episodes. Each finding is a draft proposal (kind, payload, finding);
the finding lets a cycle skip what an earlier one proposed, whatever was decided.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import duckdb
import numpy as np

MAX_GROUP = 6  # memories in one merge proposal
MAX_ARCHIVE = 50  # memories in one archival proposal
MODEL_MARGIN = 0.08  # the model judges groups this far below the mechanical threshold
MAX_EPISODES_SHOWN = 120  # decisions and tasks shown to the procedures prompt


@dataclass
class Draft:
    kind: str
    payload: dict
    finding: str  # what the proposal is about, independent of when it was found

    def __post_init__(self) -> None:
        self.payload["finding"] = self.finding


@dataclass
class Consolidation:
    drafts: list[Draft] = field(default_factory=list)
    judged: int = 0  # merge groups the model judged
    errors: list[str] = field(default_factory=list)


def _key(kind: str, *parts: str) -> str:
    return kind + ":" + hashlib.sha256("\x00".join(sorted(parts)).encode()).hexdigest()[:24]


def _unit(matrix: np.ndarray) -> np.ndarray:
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True).clip(min=1e-12)


def _groups(vectors: np.ndarray, threshold: float) -> list[tuple[list[int], float]]:
    """Connected sets of rows at or above `threshold` cosine, each with its weakest link (the lowest
    best-match cosine of a member)."""
    sims = vectors @ vectors.T
    parent = list(range(len(vectors)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, j in np.argwhere(np.triu(sims >= threshold, k=1)):
        a, b = root(int(i)), root(int(j))
        if a != b:
            parent[b] = a
    members: dict[int, list[int]] = {}
    for i in range(len(vectors)):
        members.setdefault(root(i), []).append(i)
    out = []
    for group in members.values():
        if len(group) < 2:
            continue
        group = group[:MAX_GROUP]
        block = sims[np.ix_(group, group)] - 2.0 * np.eye(len(group))  # a member is not its own match
        out.append((group, float(block.max(axis=1).min())))
    return out


def merge_candidates(
    con: duckdb.DuckDBPyConnection, being_id: str, threshold: float
) -> list[tuple[list[tuple[str, str, float, bool]], float]]:
    """Groups of active memories of one cluster at or above `threshold`: (ref, text, importance, pinned)."""
    rows = con.execute(
        "SELECT node_id, cluster_id, scene.action, importance, pinned, vector FROM nodes "
        "WHERE being_id = ? AND status = 'active' AND forgotten_at IS NULL AND vector IS NOT NULL "
        "AND cluster_id IS NOT NULL ORDER BY cluster_id, created_at, node_id",
        [being_id],
    ).fetchall()
    by_cluster: dict[str, list[tuple]] = {}
    for row in rows:
        by_cluster.setdefault(row[1], []).append(row)
    found = []
    for members in by_cluster.values():
        if len(members) < 2:
            continue
        vectors = _unit(np.asarray([m[5] for m in members], dtype=np.float32))
        for group, cosine in _groups(vectors, threshold):
            found.append(
                (
                    [
                        (members[i][0], str(members[i][2] or ""), float(members[i][3]), bool(members[i][4]))
                        for i in group
                    ],
                    cosine,
                )
            )
    return found


def _merge_draft(
    group: list[tuple[str, str, float, bool]], cosine: float, reason: str | None
) -> Draft | None:
    # The survivor: a pinned memory if any, else the most important, else the oldest.
    ordered = sorted(range(len(group)), key=lambda i: (not group[i][3], -group[i][2], i))
    survivor = group[ordered[0]][0]
    absorbed = [group[i][0] for i in ordered[1:] if not group[i][3]]
    if not absorbed:
        return None
    refs = [survivor, *absorbed]
    return Draft(
        "merge",
        {
            "survivor": survivor,
            "absorbed": absorbed,
            "cosine": round(cosine, 4),
            "memories": {ref: text for ref, text, _, _ in group if ref in refs},
            "reason": reason,
        },
        _key("merge", *refs),
    )


def merges(con, being_id: str, threshold: float, llm=None, *, max_tokens: int = 1000) -> Consolidation:
    """Merge drafts: mechanical ones at the threshold; with `llm`, also those it judges the same."""
    out = Consolidation()
    sure = merge_candidates(con, being_id, threshold)
    for group, cosine in sure:
        draft = _merge_draft(group, cosine, None)
        if draft:
            out.drafts.append(draft)
    if llm is None:
        return out
    seen = {ref for group, _ in sure for ref, *_ in group}
    doubtful = [
        (group, cosine)
        for group, cosine in merge_candidates(con, being_id, max(0.0, threshold - MODEL_MARGIN))
        if not {ref for ref, *_ in group} & seen
    ][:20]
    if not doubtful:
        return out
    from mindflow.llm import LLMError
    from mindflow.prompts import reflection as prompt

    try:
        answer = llm.complete(
            prompt.merges(
                being_id, [[(r, t) for r, t, _, _ in g] for g, _ in doubtful], max_tokens=max_tokens
            )
        )
    except LLMError as exc:
        out.errors.append(f"merge judgement: {exc}"[:300])
        return out
    out.judged = len(doubtful)
    for verdict in answer.verdicts:
        if verdict.same and 1 <= verdict.group <= len(doubtful):
            group, cosine = doubtful[verdict.group - 1]
            draft = _merge_draft(group, cosine, verdict.reason)
            if draft:
                out.drafts.append(draft)
    return out


def archivals(con: duckdb.DuckDBPyConnection, being_id: str) -> list[Draft]:
    """One draft per decay status (archived, dormant) of active, unpinned memories, most stale first."""
    drafts = []
    for status in ("archived", "dormant"):
        rows = con.execute(
            "SELECT n.node_id, n.scene.action FROM nodes n JOIN decay_scores d ON d.memory_ref = n.node_id "
            "WHERE n.being_id = ? AND d.status = ? AND n.status = 'active' AND NOT n.pinned "
            "AND n.forgotten_at IS NULL ORDER BY d.score NULLS FIRST, n.node_id LIMIT ?",
            [being_id, status, MAX_ARCHIVE],
        ).fetchall()
        if rows:
            refs = [r[0] for r in rows]
            drafts.append(
                Draft(
                    "archive",
                    {"refs": refs, "decay_status": status, "memories": {r[0]: str(r[1] or "") for r in rows}},
                    _key("archive", *refs),
                )
            )
    return drafts


def contradictions(con: duckdb.DuckDBPyConnection, being_id: str) -> list[Draft]:
    """Current facts of one entity and key with different values; the newest is the one to keep."""
    rows = con.execute(
        "SELECT lower(entity), key, list(struct_pack(fact_id, entity, value, valid_at, source_episode_ids) "
        "ORDER BY valid_at, created_at, fact_id) FROM facts "
        "WHERE being_id = ? AND invalid_at IS NULL AND forgotten_at IS NULL "
        "GROUP BY lower(entity), key HAVING count(DISTINCT lower(value)) > 1 ORDER BY 1, 2",
        [being_id],
    ).fetchall()
    drafts = []
    for _, key, sides in rows:
        keep = sides[-1]
        drafts.append(
            Draft(
                "contradiction",
                {
                    "entity": keep["entity"],
                    "key": key,
                    "sides": [
                        {
                            "fact_id": s["fact_id"],
                            "value": s["value"],
                            "valid_at": s["valid_at"].isoformat() if s["valid_at"] else None,
                            "sources": list(s["source_episode_ids"] or []),
                        }
                        for s in sides
                    ],
                    "keep": keep["fact_id"],
                    "keep_value": keep["value"],
                },
                _key("contradiction", *(s["fact_id"] for s in sides)),
            )
        )
    return drafts


def learned_procedures(con, being_id: str, since, llm, *, max_tokens: int = 1500) -> Consolidation:
    """Procedures the model finds in the decisions and tasks since the last reflection."""
    out = Consolidation()
    rows = con.execute(
        "SELECT episode_id, kind, text FROM episodes WHERE being_id = ? AND kind IN ('decision', 'task') "
        "AND ingested_at > ? ORDER BY ts, episode_id LIMIT ?",
        [being_id, since or "1970-01-01", MAX_EPISODES_SHOWN],
    ).fetchall()
    if len(rows) < 2:
        return out
    from mindflow.llm import LLMError
    from mindflow.prompts import reflection as prompt

    shown = {r[0] for r in rows}
    try:
        answer = llm.complete(
            prompt.procedures(
                being_id, [(i, k, " ".join(t.split())[:300]) for i, k, t in rows], max_tokens=max_tokens
            )
        )
    except LLMError as exc:
        out.errors.append(f"procedures: {exc}"[:300])
        return out
    for found in answer.procedures:
        sources = [i for i in dict.fromkeys(found.learned_from) if i in shown]
        if len(sources) < 2:
            out.errors.append(f"procedure {found.name!r} names fewer than two shown episodes: dropped")
            continue
        payload = {
            "name": found.name,
            "trigger": found.trigger,
            "steps": list(found.steps),
            "notes": found.notes,
            "learned_from": sources,
            "confidence": found.confidence,
        }
        out.drafts.append(Draft("procedure", payload, _key("procedure", found.name.lower(), *found.steps)))
    return out
