"""The mechanical patrol of a being's memory: steps ⓪ ❶ ❷ ❸ ❺ ❼ of the seed.

Each step is `(connection, being_id, params, ...) -> StepReport`, callable from an
asset, a test or a benchmark. Steps ❹ (consolidation), ❻ (split) and the
diary/think_md need an LLM and live with the LLM layer.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from mindflow import events, store
from mindflow.embeddings import Embedder
from mindflow.models import utcnow

BYOK_SKIP_MESSAGE = (
    "[graph] BYOK key not set: skipping ❹❻ diary/think_md (mechanical processing only)"
)
ROOT_LABELS = ("Business", "Private")
# Without an LLM a new node that fits no sub-cluster goes to the root whose
# prototype text it is closest to. The texts name what each root gathers.
ROOT_PROTOTYPES = {
    "Business": "work, job, project, code, software, deployment, meeting, deadline, client, "
    "colleague, review, release, budget, company, career, business decision",
    "Private": "family, friends, home, health, feelings, love, hobby, pets, sleep, sport, "
    "travel, weekend, wedding, personal life, private matter",
}


@dataclass(frozen=True)
class PatrolParams:
    """Thresholds of the patrol, as in the seed."""

    subcluster_threshold: float = 0.45  # ❶ cosine to join a sub-cluster
    dying_value: float = 0.05  # ❸ ❺ importance * exp(-session_count / session_scale)
    session_scale: float = 30.0
    small_cluster_max_active: int = 2  # ❼
    sibling_threshold: float = 0.45  # ❼ move to the most similar sibling above this


@dataclass
class StepReport:
    """What one patrol step changed, for logs and materialization metadata."""

    step: str
    counts: dict[str, int] = field(default_factory=dict)


def _hash_id(prefix: str, *parts: str) -> str:
    return prefix + hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()[:24]


def root_cluster_id(being_id: str, label: str) -> str:
    return _hash_id("c-", being_id, "root", label)


def ensure_roots(
    con: duckdb.DuckDBPyConnection, being_id: str, now: datetime
) -> StepReport:
    """Each being has its two roots, Business and Private."""
    created = 0
    for label in ROOT_LABELS:
        inserted = con.execute(
            "INSERT INTO clusters (cluster_id, being_id, label, parent_id, is_parent, vector, "
            "created_at, updated_at) VALUES (?, ?, ?, NULL, TRUE, NULL, ?, ?) "
            "ON CONFLICT (cluster_id) DO NOTHING RETURNING cluster_id",
            [root_cluster_id(being_id, label), being_id, label, now, now],
        ).fetchall()
        created += len(inserted)
    return StepReport("roots", {"created": created})


def step_fold_events(
    con: duckdb.DuckDBPyConnection, being_id: str, events_dir: Path, now: datetime
) -> StepReport:
    """⓪ Reinforcement from recalls since the last patrol, each event folded exactly once."""
    report = events.fold_events(con, events_dir, being_id, now)
    return StepReport(
        "⓪ recall events",
        {
            "events": report.events,
            "reinforced": report.refs,
            "reactivations": report.reactivations,
            "unknown": report.unknown,
        },
    )


def step_scenes(con: duckdb.DuckDBPyConnection, being_id: str, now: datetime) -> StepReport:
    """❶a One scene per episode without one: action = text, actors = [speaker], when = [date]."""
    rows = con.execute(
        """
        INSERT INTO scene_notes (scene_id, being_id, episode_ids, action, actors, "when", setting,
            dialogue, sensory, feeling, importance, themes, emotion, note_status, raw, extractor,
            created_at)
        SELECT 's-' || substr(sha256(e.being_id || chr(31) || e.episode_id), 1, 24),
               e.being_id, [e.episode_id], e.text, [coalesce(e.speaker, e.role, 'unknown')],
               [{'date': strftime(e.day, '%Y-%m-%d'), 'action': NULL}],
               NULL, NULL, NULL, NULL,
               least(1.0, greatest(0.0, coalesce(e.importance, 0.5))),
               coalesce(e.tags, []::VARCHAR[]), NULL, 'ok', NULL, 'mechanical', ?
        FROM episodes e
        WHERE e.being_id = ?
          AND NOT EXISTS (
              SELECT 1 FROM scene_notes s
              WHERE s.being_id = e.being_id AND list_contains(s.episode_ids, e.episode_id))
        ORDER BY e.ts
        ON CONFLICT (scene_id) DO NOTHING
        RETURNING scene_id
        """,
        [now, being_id],
    ).fetchall()
    return StepReport("❶ scenes", {"new": len(rows)})


def node_text(when: list[dict] | None, action: str | None, feeling: str | None) -> str:
    """The text a node is embedded as: when + action + feeling."""
    dates = " ".join(
        (w.get("date") or "") + (f" {w['action']}" if w.get("action") else "") for w in (when or [])
    ).strip()
    return " ".join(part for part in (dates, action or "", feeling or "") if part).strip()


def _unit(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.clip(norms, 1e-12, None)


def step_nodes(
    con: duckdb.DuckDBPyConnection,
    being_id: str,
    embedder: Embedder,
    params: PatrolParams,
    now: datetime,
) -> StepReport:
    """❶b Nodes for new scenes: fresh, importance clamped, embedded in one batch, clustered."""
    scenes = con.execute(
        """
        SELECT s.scene_id, s.episode_ids, s.action, s.actors, s."when", s.setting, s.dialogue,
               s.sensory, s.feeling, s.importance, s.themes, s.emotion,
               e.kind, e.trigger, e.ts
        FROM scene_notes s
        LEFT JOIN episodes e ON e.being_id = s.being_id AND e.episode_id = s.episode_ids[1]
        WHERE s.being_id = ? AND s.note_status = 'ok'
          AND NOT EXISTS (SELECT 1 FROM nodes n WHERE n.node_id = 'n-' || substr(s.scene_id, 3))
        ORDER BY e.ts, s.scene_id
        """,
        [being_id],
    ).fetchall()
    if not scenes:
        return StepReport("❶ nodes", {"new": 0, "to_subcluster": 0, "to_root": 0})

    texts = [node_text(row[4], row[2], row[8]) for row in scenes]
    vectors = _unit(embedder.encode_cached(con, texts))

    cluster_ids, reasons = assign_clusters(con, being_id, vectors, embedder, params)
    table = pa.table(
        {
            "node_id": ["n-" + row[0][2:] for row in scenes],
            "being_id": [being_id] * len(scenes),
            "scene_id": [row[0] for row in scenes],
            "action": [row[2] for row in scenes],
            "actors": [row[3] for row in scenes],
            "when_dates": [[w["date"] for w in (row[4] or [])] for row in scenes],
            "setting": [row[5] for row in scenes],
            "dialogue": [row[6] for row in scenes],
            "sensory": [row[7] for row in scenes],
            "feeling": [row[8] for row in scenes],
            "importance": [float(row[9]) for row in scenes],
            "cluster_id": cluster_ids,
            "themes": [row[10] or [] for row in scenes],
            "kind": [row[12] or "message" for row in scenes],
            "trigger": [row[13] for row in scenes],
            "source_episode_ids": [row[1] for row in scenes],
            "episode_ts": pa.array([row[14] for row in scenes], type=pa.timestamp("us")),
            "vector": [v.tolist() for v in vectors],
        }
    )
    with store.registered(con, "new_nodes", table):
        con.execute(
            """
            INSERT INTO nodes (node_id, being_id, scene_id, scene, feeling, importance, cluster_id,
                themes, emotion, kind, trigger, session_count, status, fresh, pinned,
                reactivation_count, last_activated, source_episode_ids, episode_ts, vector,
                created_at, updated_at)
            SELECT node_id, being_id, scene_id,
                   {'action': action, 'actors': actors,
                    'when': [{'date': d, 'action': NULL::VARCHAR} for d in when_dates],
                    'setting': setting, 'dialogue': dialogue, 'sensory': sensory},
                   feeling, least(1.0, greatest(0.0, importance)), cluster_id, themes, NULL, kind,
                   trigger, 0, 'active', TRUE, FALSE, 0, NULL, source_episode_ids, episode_ts,
                   vector::FLOAT[], ?, ?
            FROM new_nodes
            ON CONFLICT (node_id) DO NOTHING
            """,
            [now, now],
        )
    recompute_cluster_vectors(con, being_id, now)
    return StepReport(
        "❶ nodes",
        {
            "new": len(scenes),
            "to_subcluster": reasons.count("subcluster"),
            "to_root": reasons.count("root"),
        },
    )


def assign_clusters(
    con: duckdb.DuckDBPyConnection,
    being_id: str,
    vectors: np.ndarray,
    embedder: Embedder,
    params: PatrolParams,
) -> tuple[list[str], list[str]]:
    """The most similar sub-cluster at cosine >= threshold, else the closest root prototype."""
    subs = con.execute(
        "SELECT cluster_id, vector FROM clusters "
        "WHERE being_id = ? AND parent_id IS NOT NULL AND vector IS NOT NULL ORDER BY cluster_id",
        [being_id],
    ).fetchall()
    prototypes = _unit(embedder.encode_cached(con, [ROOT_PROTOTYPES[label] for label in ROOT_LABELS]))
    root_choice = np.argmax(vectors @ prototypes.T, axis=1)
    ids: list[str] = []
    reasons: list[str] = []
    if subs:
        sub_matrix = _unit(np.asarray([s[1] for s in subs], dtype=np.float32))
        sims = vectors @ sub_matrix.T
        best = np.argmax(sims, axis=1)
        best_sim = sims[np.arange(len(vectors)), best]
    else:
        best = best_sim = None
    for i in range(len(vectors)):
        if best_sim is not None and best_sim[i] >= params.subcluster_threshold:
            ids.append(subs[int(best[i])][0])
            reasons.append("subcluster")
        else:
            ids.append(root_cluster_id(being_id, ROOT_LABELS[int(root_choice[i])]))
            reasons.append("root")
    return ids, reasons


def recompute_cluster_vectors(con: duckdb.DuckDBPyConnection, being_id: str, now: datetime) -> None:
    """Cluster vector = element-wise mean of its active nodes' vectors, in one grouped query."""
    con.execute(
        """
        UPDATE clusters c SET vector = m.vector, updated_at = ?
        FROM (
            SELECT cluster_id, list(v ORDER BY i)::FLOAT[] AS vector
            FROM (
                SELECT n.cluster_id, u.i, avg(u.v) AS v
                FROM nodes n,
                     LATERAL (SELECT unnest(n.vector) AS v, generate_subscripts(n.vector, 1) AS i) u
                WHERE n.being_id = ? AND n.status = 'active'
                GROUP BY n.cluster_id, u.i
            ) GROUP BY cluster_id
        ) m
        WHERE c.cluster_id = m.cluster_id
        """,
        [now, being_id],
    )
    # A cluster with no active node has no centre.
    con.execute(
        "UPDATE clusters SET vector = NULL, updated_at = ? WHERE being_id = ? AND vector IS NOT NULL "
        "AND NOT EXISTS (SELECT 1 FROM nodes n WHERE n.cluster_id = clusters.cluster_id "
        "AND n.status = 'active')",
        [now, being_id],
    )


def step_session_counts(
    con: duckdb.DuckDBPyConnection, being_id: str, now: datetime
) -> StepReport:
    """❷ Every active node lived through one more patrol session."""
    n = con.execute(
        "UPDATE nodes SET session_count = session_count + 1, updated_at = ? "
        "WHERE being_id = ? AND status = 'active' RETURNING node_id",
        [now, being_id],
    ).fetchall()
    return StepReport("❷ session counts", {"advanced": len(n)})


def _value_sql(params: PatrolParams) -> str:
    return f"importance * exp(-session_count / {float(params.session_scale)!r})"


def step_dying(
    con: duckdb.DuckDBPyConnection, being_id: str, params: PatrolParams, now: datetime
) -> StepReport:
    """❸ Active, unpinned nodes whose importance * exp(-sessions/30) <= 0.05 are dying."""
    rows = con.execute(
        f"UPDATE nodes SET status = 'dying', updated_at = ? "
        f"WHERE being_id = ? AND status = 'active' AND NOT pinned "
        f"AND {_value_sql(params)} <= ? RETURNING node_id",
        [now, being_id, params.dying_value],
    ).fetchall()
    _history(con, being_id, [r[0] for r in rows], "dying", now)
    return StepReport("❸ dying", {"dying": len(rows)})


def step_revive(
    con: duckdb.DuckDBPyConnection, being_id: str, params: PatrolParams, now: datetime
) -> StepReport:
    """❺ Dead or dying nodes whose value rose above 0.05 are active again."""
    rows = con.execute(
        f"UPDATE nodes SET status = 'active', updated_at = ? "
        f"WHERE being_id = ? AND status IN ('dead', 'dying') "
        f"AND ({_value_sql(params)} > ? OR pinned) RETURNING node_id",
        [now, being_id, params.dying_value],
    ).fetchall()
    _history(con, being_id, [r[0] for r in rows], "revived", now)
    return StepReport("❺ revival", {"revived": len(rows)})


def step_merge_small_clusters(
    con: duckdb.DuckDBPyConnection, being_id: str, params: PatrolParams, now: datetime
) -> StepReport:
    """❼ Sub-clusters with <= 2 active nodes: empty ones go, others join a sibling or the root."""
    recompute_cluster_vectors(con, being_id, now)
    small = con.execute(
        """
        SELECT c.cluster_id, c.parent_id, c.vector, count(n.node_id) FILTER (WHERE n.status = 'active')
        FROM clusters c LEFT JOIN nodes n ON n.cluster_id = c.cluster_id
        WHERE c.being_id = ? AND c.parent_id IS NOT NULL
        GROUP BY ALL
        HAVING count(n.node_id) FILTER (WHERE n.status = 'active') <= ?
        ORDER BY 4, c.cluster_id
        """,
        [being_id, params.small_cluster_max_active],
    ).fetchall()
    deleted = merged_to_sibling = merged_to_root = moved_nodes = 0
    for cluster_id, parent_id, vector, _active in small:
        # An earlier merge in this loop may have grown this cluster past the limit (it stays)
        # or changed its centre: judge it as it is now, not as it was before the loop.
        vector, active = con.execute(
            "SELECT c.vector, count(n.node_id) FILTER (WHERE n.status = 'active') FROM clusters c "
            "LEFT JOIN nodes n ON n.cluster_id = c.cluster_id WHERE c.cluster_id = ? GROUP BY ALL",
            [cluster_id],
        ).fetchall()[0]
        if active > params.small_cluster_max_active:
            continue
        target = parent_id
        if vector is not None:
            siblings = con.execute(
                "SELECT cluster_id, vector FROM clusters WHERE being_id = ? AND parent_id = ? "
                "AND cluster_id <> ? AND vector IS NOT NULL ORDER BY cluster_id",
                [being_id, parent_id, cluster_id],
            ).fetchall()
            if siblings:
                mine = _unit(np.asarray([vector], dtype=np.float32))
                theirs = _unit(np.asarray([s[1] for s in siblings], dtype=np.float32))
                sims = (theirs @ mine.T).ravel()
                best = int(np.argmax(sims))
                if sims[best] > params.sibling_threshold:
                    target = siblings[best][0]
        moved = con.execute(
            "UPDATE nodes SET cluster_id = ?, updated_at = ? WHERE cluster_id = ? RETURNING node_id",
            [target, now, cluster_id],
        ).fetchall()
        moved_nodes += len(moved)
        con.execute("DELETE FROM clusters WHERE cluster_id = ?", [cluster_id])
        if vector is None and not moved:
            deleted += 1
        elif target == parent_id:
            merged_to_root += 1
        else:
            merged_to_sibling += 1
        # A sibling that absorbed nodes changed its centre before the next comparison.
        recompute_cluster_vectors(con, being_id, now)
    return StepReport(
        "❼ small clusters",
        {
            "deleted": deleted,
            "merged_to_sibling": merged_to_sibling,
            "merged_to_root": merged_to_root,
            "moved": moved_nodes,
        },
    )


def _history(
    con: duckdb.DuckDBPyConnection, being_id: str, node_ids: list[str], operation: str, now: datetime
) -> None:
    if not node_ids:
        return
    con.execute(
        "INSERT INTO history SELECT 'h-' || uuid()::VARCHAR, ?, node_id, ?, ?, NULL, "
        "to_json({'status': ?}), NULL FROM (SELECT unnest(?::VARCHAR[]) AS node_id)",
        [now, being_id, operation, operation if operation != "revived" else "active", node_ids],
    )


def run_patrol(
    con: duckdb.DuckDBPyConnection,
    being_id: str,
    embedder: Embedder,
    params: PatrolParams | None = None,
    now: datetime | None = None,
    events_dir: Path | None = None,
) -> list[StepReport]:
    """The whole mechanical patrol for one being, in the seed's order; recall events first."""
    params = params or PatrolParams()
    now = now or utcnow()
    folded = [step_fold_events(con, being_id, events_dir, now)] if events_dir is not None else []
    return [
        *folded,
        ensure_roots(con, being_id, now),
        step_scenes(con, being_id, now),
        step_nodes(con, being_id, embedder, params, now),
        step_session_counts(con, being_id, now),
        step_dying(con, being_id, params, now),
        step_revive(con, being_id, params, now),
        step_merge_small_clusters(con, being_id, params, now),
    ]
