"""The patrol of a being's memory: steps ⓪ ❶ ❷ ❸ ❺ ❼ mechanically, ❹ ❻ diary/think_md with a model.

Each step is `(connection, being_id, params, ...) -> StepReport`, callable from an
asset, a test or a benchmark. The LLM steps (root classification, ❹ consolidation,
❻ split, diary/think_md) take the patrol's LLM chain and change nothing when its
answer is rejected.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from mindflow import events, store
from mindflow.embeddings import Embedder
from mindflow.models import utcnow
from mindflow.reflection.modes import in_review
from mindflow.scenes import EMOTION_ARROW, STRINGS, scene_to_text
from mindflow.vectors import to_column, to_matrix

BYOK_SKIP_MESSAGE = "[graph] BYOK key not set: skipping ❹❻ diary/think_md (mechanical processing only)"
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
    # Why the model's answers were rejected: short reasons for the run's log, never keys.
    errors: list[str] = field(default_factory=list)


def _hash_id(prefix: str, *parts: str) -> str:
    return prefix + hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()[:24]


def root_cluster_id(being_id: str, label: str) -> str:
    return _hash_id("c-", being_id, "root", label)


def ensure_roots(con: duckdb.DuckDBPyConnection, being_id: str, now: datetime) -> StepReport:
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
    con: duckdb.DuckDBPyConnection, being_id: str, events_dir: Path, now: datetime, run_id: str | None = None
) -> StepReport:
    """⓪ Reinforcement from recalls since the last patrol, each event folded exactly once."""
    report = events.fold_events(con, events_dir, being_id, now, run_id)
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
        f"""
        INSERT INTO scene_notes (scene_id, being_id, episode_ids, action, actors, "when", setting,
            dialogue, sensory, feeling, importance, themes, emotion, note_status, raw, extractor,
            created_at)
        SELECT 's-' || substr(sha256(e.being_id || chr(31) || e.episode_id), 1, 24),
               e.being_id, [e.episode_id], e.text, [coalesce(e.speaker, e.role, 'unknown')],
               [{{'date': strftime(e.day, '%Y-%m-%d'), 'action': NULL}}],
               NULL, NULL, NULL, NULL,
               least(1.0, greatest(0.0, coalesce(e.importance, 0.5))),
               coalesce(e.tags, []::VARCHAR[]), NULL, 'ok', NULL, 'mechanical', ?
        FROM episodes e
        WHERE e.being_id = ? AND {store.WITHOUT_SCENE}
        ORDER BY e.ts
        ON CONFLICT (scene_id) DO NOTHING
        RETURNING scene_id
        """,
        [now, being_id],
    ).fetchall()
    # [PARSE_FAILED] notes left by an LLM run are covered now (the model was switched off).
    con.execute(
        "DELETE FROM scene_notes WHERE being_id = ? AND note_status = 'parse_failed'",
        [being_id],
    )
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


def _scenes_without_node(con: duckdb.DuckDBPyConnection, being_ids: list[str]) -> list[tuple]:
    """The scenes of these beings that have no node yet, with their first episode's kind, trigger, ts."""
    return con.execute(
        """
        SELECT s.scene_id, s.episode_ids, s.action, s.actors, s."when", s.setting, s.dialogue,
               s.sensory, s.feeling, s.importance, s.themes, s.emotion,
               e.kind, e.trigger, e.ts
        FROM scene_notes s
        LEFT JOIN episodes e ON e.being_id = s.being_id AND e.episode_id = s.episode_ids[1]
        WHERE list_contains(?, s.being_id) AND s.note_status = 'ok'
          AND NOT EXISTS (SELECT 1 FROM nodes n WHERE n.node_id = 'n-' || substr(s.scene_id, 3))
        ORDER BY e.ts, s.scene_id
        """,
        [being_ids],
    ).fetchall()


def embed_new_scenes(con: duckdb.DuckDBPyConnection, being_ids: list[str], embedder: Embedder) -> int:
    """Embed the node texts of every listed being in one batch, into `embedding_cache`.

    The patrol visits beings one by one; embedding all their new texts together first
    lets the model batch texts of similar length across beings instead of padding a
    few small batches per being, and `step_nodes` then finds every vector in the
    cache. Returns the count of node texts.
    """
    texts = [node_text(row[4], row[2], row[8]) for row in _scenes_without_node(con, being_ids)]
    if texts:  # nothing new: the model is not even loaded
        # The root prototypes too, which new nodes are compared with (cached after the first patrol).
        embedder.encode_cached(con, texts + [ROOT_PROTOTYPES[label] for label in ROOT_LABELS])
    return len(texts)


def step_nodes(
    con: duckdb.DuckDBPyConnection,
    being_id: str,
    embedder: Embedder,
    params: PatrolParams,
    now: datetime,
    llm=None,
    actor: str = "patrol",
) -> StepReport:
    """❶b Nodes for new scenes: fresh, importance clamped, embedded in one batch, clustered.

    With a patrol model, nodes that fit no sub-cluster go to the root the model names
    (Business or Private); without one, or where it gave no valid label, to the closer
    root prototype. `actor`: the job that forms them (`form` after ingestion, else `patrol`),
    named by their `formed` history rows.
    """
    scenes = _scenes_without_node(con, [being_id])
    if not scenes:
        empty = {"new": 0, "to_subcluster": 0, "to_root": 0}
        return StepReport("❶ nodes", empty if llm is None else empty | {"root_by_llm": 0, "root_rejected": 0})

    texts = [node_text(row[4], row[2], row[8]) for row in scenes]
    vectors = _unit(embedder.encode_cached(con, texts))

    cluster_ids, reasons = assign_clusters(con, being_id, vectors, embedder, params)
    by_llm = 0
    errors: list[str] = []
    if llm is not None:
        at_root = [i for i, reason in enumerate(reasons) if reason == "root"]
        chosen = classify_roots(
            con, being_id, ["n-" + scenes[i][0][2:] for i in at_root],
            [_short(scene_to_text(scenes[i][4], scenes[i][5], scenes[i][2], scenes[i][6], scenes[i][8]))
             for i in at_root],
            llm,
            errors=errors,
        )  # fmt: skip
        for i in at_root:
            if "n-" + scenes[i][0][2:] in chosen:
                cluster_ids[i] = chosen["n-" + scenes[i][0][2:]]
                by_llm += 1
    table = pa.table(
        {
            "node_id": ["n-" + row[0][2:] for row in scenes],
            "being_id": [being_id] * len(scenes),
            "scene_id": [row[0] for row in scenes],
            "action": [row[2] for row in scenes],
            "actors": [row[3] for row in scenes],
            "when_dates": [[w["date"] for w in (row[4] or [])] for row in scenes],
            "when_actions": [[w.get("action") for w in (row[4] or [])] for row in scenes],
            "emotion": pa.array([row[11] for row in scenes], type=EMOTION_ARROW),
            "setting": pa.array([row[5] for row in scenes], type=pa.string()),
            "dialogue": pa.array([row[6] for row in scenes], type=STRINGS),
            "sensory": pa.array([row[7] for row in scenes], type=STRINGS),
            "feeling": [row[8] for row in scenes],
            "importance": [float(row[9]) for row in scenes],
            "cluster_id": cluster_ids,
            "themes": [row[10] or [] for row in scenes],
            "kind": [row[12] or "message" for row in scenes],
            "trigger": [row[13] for row in scenes],
            "source_episode_ids": [row[1] for row in scenes],
            "episode_ts": pa.array([row[14] for row in scenes], type=pa.timestamp("us")),
            "vector": to_column(vectors),
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
                    'when': [{'date': when_dates[i], 'action': when_actions[i]::VARCHAR}
                             for i in range(1, len(when_dates) + 1)],
                    'setting': setting, 'dialogue': dialogue, 'sensory': sensory},
                   feeling, least(1.0, greatest(0.0, importance)), cluster_id, themes, emotion, kind,
                   trigger, 0, 'active', TRUE, FALSE, 0, NULL, source_episode_ids, episode_ts,
                   vector::FLOAT[], ?, ?
            FROM new_nodes
            ON CONFLICT (node_id) DO NOTHING
            """,
            [now, now],
        )
        # The nodes this statement created are the ones created at `now` (a conflicting older node
        # keeps its own time); no content in history, only what a reader filters on.
        con.execute(
            f"INSERT INTO history {HISTORY_COLUMNS} "
            "SELECT 'h-' || uuid()::VARCHAR, ?, n.node_id, n.being_id, 'formed', NULL, "
            "to_json({'status': n.status, 'cluster_id': n.cluster_id, 'importance': n.importance}), "
            "NULL, ? FROM new_nodes x JOIN nodes n ON n.node_id = x.node_id WHERE n.created_at = ?",
            [now, actor, now],
        )
    recompute_cluster_vectors(con, being_id, now)
    return StepReport(
        "❶ nodes",
        {
            "new": len(scenes),
            "to_subcluster": reasons.count("subcluster"),
            "to_root": reasons.count("root"),
        }
        | ({"root_by_llm": by_llm, "root_rejected": len(errors)} if llm is not None else {}),
        errors,
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
    """Cluster vector = element-wise mean of its active nodes' vectors.

    The vectors come out as one Arrow column, sorted by cluster, and each cluster's sum
    is one `reduceat` over its run of rows: ~25 ms per LoCoMo being (370-680 nodes), where
    unnesting every dimension in SQL and grouping it back took ~32 ms.
    """
    active = con.sql(
        "SELECT cluster_id, vector FROM nodes "
        "WHERE being_id = ? AND status = 'active' AND vector IS NOT NULL ORDER BY cluster_id",
        params=[being_id],
    ).to_arrow_table()
    if active.num_rows:
        cluster_ids = np.asarray(active.column("cluster_id").to_pylist(), dtype=object)
        starts = np.flatnonzero(np.r_[True, cluster_ids[1:] != cluster_ids[:-1]])
        sums = np.add.reduceat(to_matrix(active.column("vector")).astype(np.float64), starts, axis=0)
        counts = np.diff(np.r_[starts, len(cluster_ids)])[:, None]
        means = pa.table({"cluster_id": cluster_ids[starts], "vector": to_column(sums / counts)})
        with store.registered(con, "cluster_means", means):
            con.execute(
                "UPDATE clusters c SET vector = m.vector::FLOAT[], updated_at = ? "
                "FROM cluster_means m WHERE c.cluster_id = m.cluster_id",
                [now],
            )
    # A cluster with no active node has no centre.
    con.execute(
        "UPDATE clusters SET vector = NULL, updated_at = ? WHERE being_id = ? AND vector IS NOT NULL "
        "AND NOT EXISTS (SELECT 1 FROM nodes n WHERE n.cluster_id = clusters.cluster_id "
        "AND n.status = 'active')",
        [now, being_id],
    )


def step_session_counts(
    con: duckdb.DuckDBPyConnection, being_id: str, now: datetime, session_run: str | None = None
) -> StepReport:
    """❷ Every active node lived through one more patrol session.

    `session_run` names the session (the assets: the run, or the root run of a re-execution):
    a session already counted for the being advances nothing, so a retried step or a run
    re-executed after a crash does not age the being's memories twice. Without it every call
    is a session.
    """
    with store.transaction(con):
        if session_run is not None:
            counted = con.execute(
                "SELECT 1 FROM patrol_sessions WHERE being_id = ? AND run_id = ?", [being_id, session_run]
            ).fetchall()
            if counted:
                return StepReport("❷ session counts", {"advanced": 0, "already_counted": 1})
        # The count, not RETURNING: DuckDB materialises each returned row of this wide table,
        # which made the statement fifteen times slower.
        (advanced,) = con.execute(
            "UPDATE nodes SET session_count = session_count + 1, updated_at = ? "
            "WHERE being_id = ? AND status = 'active'",
            [now, being_id],
        ).fetchall()[0]
        if session_run is not None:
            con.execute(
                "INSERT INTO patrol_sessions (being_id, run_id, advanced, counted_at) VALUES (?, ?, ?, ?)",
                [being_id, session_run, advanced, now],
            )
    return StepReport("❷ session counts", {"advanced": int(advanced), "already_counted": 0})


def _value_sql(params: PatrolParams) -> str:
    return f"importance * exp(-session_count / {float(params.session_scale)!r})"


def step_dying(
    con: duckdb.DuckDBPyConnection, being_id: str, params: PatrolParams, now: datetime
) -> StepReport:
    """❸ Active, unpinned nodes whose importance * exp(-sessions/30) <= 0.05 are dying."""
    dying = f"being_id = ? AND status = 'active' AND NOT pinned AND {_value_sql(params)} <= ?"
    count = _status_change(
        con,
        f"INSERT INTO history {HISTORY_COLUMNS} SELECT 'h-' || uuid()::VARCHAR, ?, node_id, being_id, "
        f"'dying', to_json({{'status': status}}), to_json({{'status': 'dying'}}), NULL, 'patrol' "
        f"FROM nodes WHERE {dying}",
        f"UPDATE nodes SET status = 'dying', updated_at = ? WHERE {dying}",
        [now, being_id, params.dying_value],
    )
    return StepReport("❸ dying", {"dying": count})


def _status_change(con: duckdb.DuckDBPyConnection, history: str, update: str, parameters: list) -> int:
    """A patrol status change in one transaction: its history rows first (while the nodes still
    have the status they leave), then the UPDATE, both bound to `parameters`. Returns the nodes
    changed. Apart, a patrol that failed between the two (killed, or its UPDATE in conflict with
    another writer) left history rows of changes never made, which the next patrol wrote again,
    or changes with no history row, which the next never wrote.

    The UPDATE has no RETURNING: on DuckDB 2.0.1 an UPDATE ... RETURNING of a row another
    transaction had changed and not yet committed went through instead of failing on the
    conflict (without RETURNING it fails)."""
    with store.transaction(con):
        ((count,),) = con.execute(history, parameters).fetchall()
        con.execute(update, parameters)
    return int(count)


def step_revive(
    con: duckdb.DuckDBPyConnection, being_id: str, params: PatrolParams, now: datetime
) -> StepReport:
    """❺ Revival, driven by recall as the seed says.

    A folded recall resets a node's session count (events.fold_events), so its value
    importance * exp(-sessions/30) is its importance again. A dying node whose value is back
    above 0.05 is active. A dead node comes back only when it was reactivated after it died
    (its reactivation_count grew past `died_reactivations`) and its value is then above 0.05:
    a dead node nobody asked for stays dead, however important. A node absorbed by a ❹ merge
    (`absorbed_into`) never revives on its own: its recalls reinforce the survivor. Pinned
    nodes come back whatever their value (the fold of pins does the same).
    """
    value = f"{_value_sql(params)} > ?"
    revivable = (
        f"being_id = ? AND absorbed_into IS NULL AND ("
        f"(status = 'dying' AND ({value} OR pinned)) OR (status = 'dead' AND (pinned OR ("
        f"reactivation_count > coalesce(died_reactivations, reactivation_count) AND {value}))))"
    )
    count = _status_change(
        con,
        f"INSERT INTO history {HISTORY_COLUMNS} SELECT 'h-' || uuid()::VARCHAR, ?, node_id, being_id, "
        "'revived', to_json({'status': status}), to_json({'status': 'active'}), NULL, 'patrol' "
        f"FROM nodes WHERE {revivable}",
        f"UPDATE nodes SET status = 'active', died_reactivations = NULL, updated_at = ? WHERE {revivable}",
        [now, being_id, params.dying_value, params.dying_value],
    )
    return StepReport("❺ revival", {"revived": count})


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
        # The moves, their history rows and the emptied cluster's removal commit together (see
        # _status_change: a patrol failing between them left moves never made in the history).
        with store.transaction(con):
            moved = _moved(con, "cluster_id = ?", [cluster_id], target, now)
            con.execute(
                "UPDATE nodes SET cluster_id = ?, updated_at = ? WHERE cluster_id = ?",
                [target, now, cluster_id],
            )
            con.execute("DELETE FROM clusters WHERE cluster_id = ?", [cluster_id])
        moved_nodes += moved
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


def _moved(con: duckdb.DuckDBPyConnection, where: str, params: list, target: str, now: datetime) -> int:
    """A `moved` history row for each node `where` selects that changes cluster (before the move);
    returns how many."""
    (count,) = con.execute(
        f"INSERT INTO history {HISTORY_COLUMNS} SELECT 'h-' || uuid()::VARCHAR, ?, node_id, being_id, "
        "'moved', to_json({'cluster_id': cluster_id}), to_json({'cluster_id': ?::VARCHAR}), NULL, 'patrol' "
        f"FROM nodes WHERE {where} AND cluster_id IS DISTINCT FROM ?",
        [now, target, *params, target],
    ).fetchall()[0]
    return int(count)


# Every history row names its columns: `actor` came after the others (migration 7).
HISTORY_COLUMNS = "(history_id, ts, memory_ref, being_id, operation, before, after, run_id, actor)"


def _history(
    con: duckdb.DuckDBPyConnection,
    being_id: str,
    node_ids: list[str],
    operation: str,
    now: datetime,
    before: str | None = None,
) -> None:
    """One row per node for a status change by the patrol; the run id is stamped by the run."""
    if not node_ids:
        return
    con.execute(
        f"INSERT INTO history {HISTORY_COLUMNS} SELECT 'h-' || uuid()::VARCHAR, ?, node_id, ?, ?, "
        "CASE WHEN ?::VARCHAR IS NOT NULL THEN to_json({'status': ?::VARCHAR}) END, to_json({'status': ?}), "
        "NULL, 'patrol' FROM (SELECT unnest(?::VARCHAR[]) AS node_id)",
        [now, being_id, operation, before, before, operation, node_ids],
    )


@dataclass
class FormReport:
    """What forming (❶) did for one being: the form run's whole work, and the patrol's first part."""

    roots: StepReport
    nodes: StepReport  # ❶b nodes for scenes without one: embedded, clustered
    scenes: StepReport | None = None  # ❶a, when the caller forms scenes (the assets: `scene_notes`)
    marks: StepReport | None = None  # the being's marks folded (with `settings`)
    events: StepReport | None = None  # ⓪ recall events folded (with `events_dir`)
    statuses: dict[str, int] = field(default_factory=dict)  # the being's nodes by status afterwards
    misplaced: int = 0  # nodes in another being's cluster or in none (must stay 0)

    def steps(self) -> list[StepReport]:
        """The reports in the seed's order (⓪ first, though it is folded after ❶: see `form`)."""
        return [s for s in (self.events, self.roots, self.scenes, self.nodes, self.marks) if s is not None]

    def counts(self) -> dict[str, int]:
        """One flat row for the UI's per-being table."""
        return {
            "nodes": sum(self.statuses.values()),
            "recall_events": self.events.counts["events"] if self.events else 0,
            "reinforced": self.events.counts["reinforced"] if self.events else 0,
            **self.nodes.counts,
            "forgotten": self.marks.counts.get("forgotten", 0) if self.marks else 0,
            "active_total": self.statuses.get("active", 0),
            "dying_total": self.statuses.get("dying", 0),
            "dead_total": self.statuses.get("dead", 0),
        }


@dataclass
class PatrolReport:
    """What the patrol did for one being, step by step."""

    form: FormReport  # ⓪ ❶ and the marks
    sessions: StepReport  # ❷
    dying: StepReport  # ❸
    revived: StepReport  # ❺
    consolidated: StepReport | None = None  # ❹, with the patrol model
    split: StepReport | None = None  # ❻, with the patrol model
    small_clusters: StepReport | None = None  # ❼, when asked (the assets: `clusters`)
    journal: StepReport | None = None  # diary/think_md, with the patrol model and settings

    def steps(self) -> list[StepReport]:
        """The reports in the seed's order."""
        after = [self.sessions, self.dying, self.consolidated, self.revived, self.split, self.small_clusters]
        return [*self.form.steps(), *(s for s in [*after, self.journal] if s is not None)]

    def counts(self, llm: bool = False) -> dict[str, int]:
        """One flat row for the UI's per-being table (the keys the `nodes` asset has always shown)."""
        out = {
            **self.form.counts(),
            "sessions_advanced": self.sessions.counts["advanced"],
            "sessions_already_counted": self.sessions.counts["already_counted"],
            "dying": self.dying.counts["dying"],
            "revived": self.revived.counts["revived"],
            "merged": self.consolidated.counts["merged"] if self.consolidated else 0,
            "made_dead": self.consolidated.counts["made_dead"] if self.consolidated else 0,
            "new_subclusters": self.split.counts["new_subclusters"] if self.split else 0,
        }
        rejected = [self.form.nodes.counts.get("root_rejected", 0)]
        rejected += [s.counts.get("rejected", 0) for s in (self.consolidated, self.split) if s is not None]
        out["rejected_llm_answers"] = sum(rejected) if llm else 0
        return out


def node_statuses(con: duckdb.DuckDBPyConnection, being_id: str) -> dict[str, int]:
    return dict(
        con.execute("SELECT status, count(*) FROM nodes WHERE being_id = ? GROUP BY 1", [being_id]).fetchall()
    )


def misplaced_nodes(con: duckdb.DuckDBPyConnection, being_id: str) -> int:
    """Nodes of the being in another being's cluster, or in no cluster at all."""
    return con.execute(
        "SELECT count(*) FROM nodes n LEFT JOIN clusters c ON c.cluster_id = n.cluster_id "
        "WHERE n.being_id = ? AND (c.cluster_id IS NULL OR c.being_id <> n.being_id)",
        [being_id],
    ).fetchall()[0][0]


def form(
    con: duckdb.DuckDBPyConnection,
    being_id: str,
    embedder: Embedder,
    params: PatrolParams | None = None,
    now: datetime | None = None,
    *,
    events_dir: Path | None = None,
    llm=None,
    settings=None,
    run_id: str | None = None,
    scenes: bool = False,
    extraction_llm=None,
    actor: str = "form",
) -> FormReport:
    """❶ for one being: nodes for its new scenes (embedded, clustered), then its marks and recall events.

    What the form run does after each ingestion, and what the patrol starts with. No session
    count moves: those advance once a night, in `run`. `scenes` forms the scenes too (LLM
    extraction with `extraction_llm`, else one per episode). With `settings`, the being's marks
    are folded after ❶, so a node formed from an episode already forgotten is archived before
    it is published. The recall events are folded after ❶ as well: an agent recalls a fresh
    memory under the ref its node gets here, so the event reinforces the node instead of
    counting as unknown. `actor`: the job running it, `form` or (from `run`) `patrol`.
    """
    params = params or PatrolParams()
    now = now or utcnow()
    roots = ensure_roots(con, being_id, now)
    scene_report = None
    if scenes and extraction_llm is not None:
        from mindflow import extraction

        # A being in review mode keeps contradicting facts side by side for a person to settle.
        supersede = settings is None or not in_review(settings, being_id)
        extracted = extraction.extract(con, being_id, extraction_llm, now, supersede=supersede)
        scene_report = StepReport("❶ scenes (LLM)", extracted.counts(), extracted.errors)
    elif scenes:
        scene_report = step_scenes(con, being_id, now)
    nodes = step_nodes(con, being_id, embedder, params, now, llm=llm, actor=actor)
    marks = None
    if settings is not None:
        from mindflow.loop.fold import fold_marks

        marks = StepReport("marks", fold_marks(con, settings, being_id, now, run_id).counts())
    events = step_fold_events(con, being_id, events_dir, now, run_id) if events_dir is not None else None
    return FormReport(
        roots=roots,
        nodes=nodes,
        scenes=scene_report,
        marks=marks,
        events=events,
        statuses=node_statuses(con, being_id),
        misplaced=misplaced_nodes(con, being_id),
    )


def run(
    con: duckdb.DuckDBPyConnection,
    being_id: str,
    embedder: Embedder,
    params: PatrolParams | None = None,
    now: datetime | None = None,
    *,
    events_dir: Path | None = None,
    llm=None,
    settings=None,
    run_id: str | None = None,
    scenes: bool = False,
    extraction_llm=None,
    small_clusters: bool = False,
    journal: bool = False,
    session_run: str | None = None,
) -> PatrolReport:
    """The nightly patrol of one being in the seed's order: `form` (⓪ ❶, marks), then ❷ ❸ ❹ ❺ ❻.

    `llm` (purpose patrol) adds root classification, ❹ and ❻; `small_clusters` runs ❼ (the
    `clusters` asset runs it on its own), `journal` the diary and think.md (with `llm` and
    `settings`). `session_run` names the patrol session ❷ counts once (`step_session_counts`).
    """
    params = params or PatrolParams()
    now = now or utcnow()
    formed = form(
        con, being_id, embedder, params, now, events_dir=events_dir, llm=llm, settings=settings,
        run_id=run_id, scenes=scenes, extraction_llm=extraction_llm, actor="patrol",
    )  # fmt: skip
    sessions = step_session_counts(con, being_id, now, session_run)
    dying = step_dying(con, being_id, params, now)
    # ❹ sits between ❸ and ❺ in the seed; ❻ after ❺. Both need the patrol model. A being in
    # review mode is reorganised only by approved proposals: reflection proposes its merges.
    reorganise = llm is not None and not (settings is not None and in_review(settings, being_id))
    consolidated = step_consolidate(con, being_id, llm, now) if reorganise else None
    revived = step_revive(con, being_id, params, now)
    split = step_split(con, being_id, llm, params, now) if reorganise else None
    report = PatrolReport(formed, sessions, dying, revived, consolidated=consolidated, split=split)
    if small_clusters:
        report.small_clusters = step_merge_small_clusters(con, being_id, params, now)
    if journal and llm is not None and settings is not None:
        report.journal = step_journal(con, settings, being_id, llm, now, run_id=run_id)
    formed.statuses = node_statuses(con, being_id)
    formed.misplaced = misplaced_nodes(con, being_id)
    return report


def run_patrol(
    con: duckdb.DuckDBPyConnection,
    being_id: str,
    embedder: Embedder,
    params: PatrolParams | None = None,
    now: datetime | None = None,
    events_dir: Path | None = None,
    llm=None,
    extraction_llm=None,
    settings=None,
) -> list[StepReport]:
    """The whole patrol for one being with its scenes and ❼ (what the assets do in three), as a list.

    `llm` (purpose patrol) adds root classification, ❹, ❻ and, with `settings`, the
    diary and think.md; `extraction_llm` replaces the mechanical scenes with LLM
    extraction. Without them the patrol is mechanical.
    """
    report = run(
        con, being_id, embedder, params, now, events_dir=events_dir, llm=llm, settings=settings,
        scenes=True, extraction_llm=extraction_llm, small_clusters=True, journal=True,
    )  # fmt: skip
    return report.steps()


# --------------------------------------------------------------------------- LLM steps
# Each takes the patrol's LLM chain; an answer that fails validation (or no answer at
# all) changes nothing, and the failure is counted in the step's report and the usage.
# A call the run no longer sends (LLMSkipped: breaker open, time budget spent) changes
# nothing either; it is counted once in the usage (llm/skipped_calls), not per step.

CONSOLIDATE_MAX_NODES = 60  # fresh/dying nodes per call, with up to 20 older neighbours
SPLIT_MIN_ACTIVE = 11  # ❻ clusters with more than 10 active nodes
SPLIT_MAX_NODES = 200  # most recent active nodes shown to the model per cluster
ROOT_BATCH = 100


def _short(text: str, limit: int = 300) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# A node's scene as the model is shown it: scene_to_text's columns.
_SHOWN = 'scene."when", scene.setting, scene.action, scene.dialogue, feeling'


def _node_texts(con: duckdb.DuckDBPyConnection, node_ids: list[str]) -> dict[str, str]:
    rows = con.execute(
        f"SELECT node_id, {_SHOWN} FROM nodes WHERE node_id IN (SELECT unnest(?::VARCHAR[]))",
        [node_ids],
    ).fetchall()
    return {r[0]: _short(scene_to_text(*r[1:])) for r in rows}


def classify_roots(
    con: duckdb.DuckDBPyConnection,
    being_id: str,
    node_ids: list[str],
    texts: list[str],
    llm,
    errors: list[str] | None = None,
) -> dict[str, str]:
    """{node_id: root cluster id} as the model labels them; nodes it did not label are absent.

    Each rejected answer (one per batch of nodes) adds its reason to `errors`.
    """
    from mindflow.llm import LLMError, LLMSkipped
    from mindflow.prompts import root as prompt

    chosen: dict[str, str] = {}
    for start in range(0, len(node_ids), ROOT_BATCH):
        chunk = list(
            zip(node_ids[start : start + ROOT_BATCH], texts[start : start + ROOT_BATCH], strict=True)
        )
        known = {i for i, _ in chunk}

        def check(answer, known=known) -> None:
            unknown = {label.node_id for label in answer.labels} - known
            if unknown:
                raise ValueError(f"unknown node ids {sorted(unknown)[:3]}")

        request = prompt.build([(i, _short(t)) for i, t in chunk])
        try:
            answer = llm.complete(_with_check(request, check))
        except LLMSkipped:
            continue  # the run stopped asking models (said once, in llm/skipped_calls)
        except LLMError as exc:
            if errors is not None:
                errors.append(_reason(exc))
            continue  # the prototype choice stands
        for label in answer.labels:
            chosen[label.node_id] = root_cluster_id(being_id, label.root)
    return chosen


def _reason(exc: Exception) -> str:
    """An LLMError's message, short; it names models and the failure, never a key."""
    return _short(str(exc), 300)


def _with_check(request, check):
    from dataclasses import replace

    return replace(request, check=check)


def step_consolidate(con: duckdb.DuckDBPyConnection, being_id: str, llm, now: datetime) -> StepReport:
    """❹ Per cluster with fresh or dying nodes: the model's merges and make_dead list.

    The survivor gains 0.05 importance (at most 1.0) and keeps the absorbed nodes'
    history as `when` items {date, action}; absorbed and make_dead nodes are dead;
    fresh nodes that were not merged lose `fresh`.
    """
    from mindflow.llm import LLMError, LLMSkipped
    from mindflow.prompts import consolidate as prompt

    counts = {"clusters": 0, "merged": 0, "made_dead": 0, "unfreshened": 0, "rejected": 0}
    errors: list[str] = []
    clusters = con.execute(
        "SELECT c.cluster_id, c.label FROM clusters c WHERE c.being_id = ? AND EXISTS ("
        "SELECT 1 FROM nodes n WHERE n.cluster_id = c.cluster_id "
        "AND ((n.fresh AND n.status = 'active') OR n.status = 'dying')) ORDER BY c.cluster_id",
        [being_id],
    ).fetchall()
    for cluster_id, label in clusters:
        candidates = con.execute(
            "SELECT node_id, status, fresh, importance, vector FROM nodes WHERE cluster_id = ? "
            "AND ((fresh AND status = 'active') OR status = 'dying') ORDER BY episode_ts, node_id",
            [cluster_id],
        ).fetchall()
        for start in range(0, len(candidates), CONSOLIDATE_MAX_NODES):
            chunk = candidates[start : start + CONSOLIDATE_MAX_NODES]
            counts["clusters"] += start == 0
            older = _neighbours(con, cluster_id, chunk, 20)
            rows = chunk + older
            texts = _node_texts(con, [r[0] for r in rows])
            info = {r[0]: r for r in rows}
            shown = [
                {"node_id": r[0], "text": texts.get(r[0], ""), "status": r[1], "fresh": bool(r[2]),
                 "importance": round(float(r[3]), 3)}
                for r in rows
            ]  # fmt: skip
            dying = {r[0] for r in rows if r[1] == "dying"}

            def check(answer, known=frozenset(info), dying=frozenset(dying)) -> None:
                used: list[str] = []
                for merge in answer.merges:
                    used += [merge.survivor, *merge.absorbed]
                used += answer.make_dead
                if set(used) - known:
                    raise ValueError(f"unknown node ids {sorted(set(used) - known)[:3]}")
                if len(used) != len(set(used)):
                    raise ValueError("a node appears twice")
                if set(answer.make_dead) - dying:
                    raise ValueError("make_dead names a node that is not dying")

            try:
                answer = llm.complete(_with_check(prompt.build(label, shown), check))
            except LLMSkipped:
                continue
            except LLMError as exc:
                counts["rejected"] += 1
                errors.append(_reason(exc))
                continue
            _apply_consolidation(con, being_id, answer, [r[0] for r in chunk], now, counts)
    if counts["merged"] or counts["made_dead"]:
        recompute_cluster_vectors(con, being_id, now)
    return StepReport("❹ consolidation", counts, errors)


def _neighbours(con, cluster_id: str, chunk: list, limit: int) -> list:
    """The older active nodes of the cluster closest to the chunk's centre."""
    older = con.execute(
        "SELECT node_id, status, fresh, importance, vector FROM nodes WHERE cluster_id = ? "
        "AND status = 'active' AND NOT fresh",
        [cluster_id],
    ).fetchall()
    if len(older) <= limit:
        return older
    centre = _unit(np.asarray([r[4] for r in chunk], dtype=np.float32).mean(axis=0, keepdims=True))
    sims = _unit(np.asarray([r[4] for r in older], dtype=np.float32)) @ centre.T
    order = np.argsort(-sims.ravel(), kind="stable")[:limit]
    return [older[int(i)] for i in order]


def merge_nodes(
    con: duckdb.DuckDBPyConnection,
    being_id: str,
    survivor: str,
    absorbed: list[str],
    now: datetime,
    actor: str = "patrol",
    run_id: str | None = None,
) -> int:
    """Merge `absorbed` into `survivor` (the caller holds the transaction); returns the nodes absorbed.

    `run_id`: the run, for callers that stamp no run id on their rows afterwards (the patrol does).

    The survivor gains 0.05 importance and the absorbed nodes' history as `when` items; the
    absorbed die pointing at it. Nodes already dead are left out, so applying a merge twice
    (a run killed before it recorded the first) changes nothing more.
    """
    absorbed = [
        r[0]
        for r in con.execute(
            "SELECT node_id FROM nodes WHERE being_id = ? AND status <> 'dead' AND node_id <> ? "
            "AND node_id IN (SELECT unnest(?::VARCHAR[]))",
            [being_id, survivor, absorbed],
        ).fetchall()
    ]
    if not absorbed:
        return 0
    merged = con.execute(
        'SELECT node_id, scene."when", scene.action, source_episode_ids FROM nodes '
        "WHERE node_id IN (SELECT unnest(?::VARCHAR[])) ORDER BY episode_ts, node_id",
        [absorbed],
    ).fetchall()
    history = [
        {"date": w["date"], "action": w.get("action") or _short(action, 200)}
        for _, when, action, _ in merged
        for w in (when or [])
    ]
    sources = [i for _, _, _, ids in merged for i in (ids or [])]
    before = con.execute("SELECT importance FROM nodes WHERE node_id = ?", [survivor]).fetchall()[0][0]
    con.execute(
        """
        UPDATE nodes SET importance = least(1.0, importance + 0.05), fresh = FALSE,
            scene = struct_update(scene, "when" := list_concat(scene."when",
                ?::STRUCT(date VARCHAR, action VARCHAR)[])),
            source_episode_ids = list_concat(source_episode_ids,
                list_filter(?::VARCHAR[], lambda x: NOT list_contains(source_episode_ids, x))),
            updated_at = ?
        WHERE node_id = ?
        """,
        [history, sources, now, survivor],
    )
    # Written before the update, while the absorbed nodes still have their status.
    con.execute(
        f"INSERT INTO history {HISTORY_COLUMNS} SELECT 'h-' || uuid()::VARCHAR, ?, node_id, "
        "being_id, 'merged', to_json({'status': status}), to_json({'status': 'dead', 'into': ?}), "
        "?, ? FROM nodes WHERE node_id IN (SELECT unnest(?::VARCHAR[]))",
        [now, survivor, run_id, actor, absorbed],
    )
    con.execute(
        "UPDATE nodes SET status = 'dead', fresh = FALSE, absorbed_into = ?, "
        "died_reactivations = reactivation_count, updated_at = ? "
        "WHERE node_id IN (SELECT unnest(?::VARCHAR[]))",
        [survivor, now, absorbed],
    )
    # Nodes absorbed earlier into one absorbed now point at the new survivor, so a
    # pointer is always one hop from a node that can be recalled.
    con.execute(
        "UPDATE nodes SET absorbed_into = ? WHERE being_id = ? "
        "AND absorbed_into IN (SELECT unnest(?::VARCHAR[]))",
        [survivor, being_id, absorbed],
    )
    con.execute(
        f"INSERT INTO history {HISTORY_COLUMNS} VALUES ('h-' || uuid()::VARCHAR, ?, ?, ?, "
        "'absorbed', to_json({'importance': ?}), to_json({'importance': least(1.0, ? + 0.05), "
        "'absorbed': ?::VARCHAR[]}), ?, ?)",
        [now, survivor, being_id, before, before, absorbed, run_id, actor],
    )
    return len(absorbed)


def _apply_consolidation(con, being_id, answer, chunk_ids: list[str], now: datetime, counts) -> None:
    with store.transaction(con):
        for merge in answer.merges:
            counts["merged"] += merge_nodes(con, being_id, merge.survivor, merge.absorbed, now)
        if answer.make_dead:
            con.execute(
                "UPDATE nodes SET status = 'dead', fresh = FALSE, died_reactivations = reactivation_count, "
                "updated_at = ? WHERE node_id IN (SELECT unnest(?::VARCHAR[]))",
                [now, answer.make_dead],
            )
            _history(con, being_id, answer.make_dead, "dead", now, before="dying")
            counts["made_dead"] += len(answer.make_dead)
        (unfreshened,) = con.execute(
            "UPDATE nodes SET fresh = FALSE, updated_at = ? "
            "WHERE node_id IN (SELECT unnest(?::VARCHAR[])) AND fresh",
            [now, chunk_ids],
        ).fetchall()[0]
        counts["unfreshened"] += int(unfreshened)


def step_split(
    con: duckdb.DuckDBPyConnection, being_id: str, llm, params: PatrolParams, now: datetime
) -> StepReport:
    """❻ Clusters with more than 10 active nodes: the model's groups become new sub-clusters.

    Each group needs at least 2 nodes and at least 2 must stay. A root is never split
    itself: groups carved out of a root become its sub-clusters; groups carved out of a
    sub-cluster become its siblings.
    """
    from mindflow.llm import LLMError, LLMSkipped
    from mindflow.prompts import split as prompt

    counts = {"clusters": 0, "new_subclusters": 0, "moved": 0, "rejected": 0}
    errors: list[str] = []
    big = con.execute(
        "SELECT c.cluster_id, c.label, c.parent_id FROM clusters c "
        "JOIN nodes n ON n.cluster_id = c.cluster_id "
        "WHERE c.being_id = ? AND n.status = 'active' GROUP BY ALL HAVING count(*) >= ? ORDER BY 1",
        [being_id, SPLIT_MIN_ACTIVE],
    ).fetchall()
    for cluster_id, label, parent_id in big:
        active = [
            r[0]
            for r in con.execute(
                "SELECT node_id FROM nodes WHERE cluster_id = ? AND status = 'active' "
                "ORDER BY episode_ts DESC, node_id LIMIT ?",
                [cluster_id, SPLIT_MAX_NODES],
            ).fetchall()
        ]
        total = con.execute(
            "SELECT count(*) FROM nodes WHERE cluster_id = ? AND status = 'active'", [cluster_id]
        ).fetchall()[0][0]
        texts = _node_texts(con, active)

        def check(answer, known=frozenset(active), total=total) -> None:
            used = [i for g in answer.groups for i in g.node_ids]
            if set(used) - known:
                raise ValueError(f"unknown node ids {sorted(set(used) - known)[:3]}")
            if len(used) != len(set(used)):
                raise ValueError("a node is in two groups")
            if total - len(used) < 2:
                raise ValueError("fewer than 2 nodes would stay")

        counts["clusters"] += 1
        try:
            answer = llm.complete(_with_check(prompt.build(label, [(i, texts[i]) for i in active]), check))
        except LLMSkipped:
            continue
        except LLMError as exc:
            counts["rejected"] += 1
            errors.append(_reason(exc))
            continue
        new_parent = cluster_id if parent_id is None else parent_id
        with store.transaction(con):
            for group in answer.groups:
                new_id = _hash_id("c-", being_id, "sub", cluster_id, *sorted(group.node_ids))
                con.execute(
                    "INSERT INTO clusters (cluster_id, being_id, label, parent_id, is_parent, vector, "
                    "created_at, updated_at) VALUES (?, ?, ?, ?, FALSE, NULL, ?, ?)",
                    [new_id, being_id, " ".join(group.label.split()), new_parent, now, now],
                )
                counts["moved"] += _moved(
                    con, "node_id IN (SELECT unnest(?::VARCHAR[]))", [group.node_ids], new_id, now
                )
                con.execute(
                    "UPDATE nodes SET cluster_id = ?, updated_at = ? "
                    "WHERE node_id IN (SELECT unnest(?::VARCHAR[]))",
                    [new_id, now, group.node_ids],
                )
                counts["new_subclusters"] += 1
    if counts["new_subclusters"]:
        recompute_cluster_vectors(con, being_id, now)
    return StepReport("❻ split", counts, errors)


# The first journal of a being reads this far back (later ones: since the one before).
FIRST_CYCLE = timedelta(days=1)
JOURNAL_SCENES = 30  # most scenes of one cycle shown to the model, the most important first
# History operations that say what the patrol did, in the order they are told.
PATROL_OPERATIONS = ("formed", "reinforced", "dying", "revived", "merged", "absorbed", "dead", "moved")


@dataclass
class Cycle:
    """What a journal writes about: the scenes formed since the last one and the patrol's changes."""

    since: datetime
    scenes: list[str]  # scene_to_text lines
    changes: dict[str, int]  # history operation -> memories

    def told(self) -> str:
        return ", ".join(f"{n} {op}" for op, n in self.changes.items()) or "nothing else"


def journal_cycle(con: duckdb.DuckDBPyConnection, being_id: str, now: datetime) -> Cycle:
    row = con.execute("SELECT journaled_at FROM journal_cycles WHERE being_id = ?", [being_id]).fetchone()
    since = row[0] if row else now - FIRST_CYCLE
    scenes = con.execute(
        f"SELECT {_SHOWN} FROM nodes WHERE being_id = $being AND created_at > $since AND created_at <= $now "
        "AND status <> 'archived' ORDER BY importance DESC, episode_ts DESC LIMIT $limit",
        {"being": being_id, "since": since, "now": now, "limit": JOURNAL_SCENES},
    ).fetchall()
    counts = dict(
        con.execute(
            "SELECT operation, count(DISTINCT memory_ref) FROM history WHERE being_id = $being "
            "AND ts > $since AND ts <= $now AND list_contains($ops, operation) GROUP BY 1",
            {"being": being_id, "since": since, "now": now, "ops": list(PATROL_OPERATIONS)},
        ).fetchall()
    )
    return Cycle(
        since=since,
        scenes=[_short(scene_to_text(*r), 200) for r in scenes],
        changes={op: counts[op] for op in PATROL_OPERATIONS if counts.get(op)},
    )


def step_journal(
    con: duckdb.DuckDBPyConnection,
    settings,
    being_id: str,
    llm,
    now: datetime,
    run_id: str | None = None,
) -> StepReport:
    """Diary (3-5 lines, upserted for the day) and think.md (3-7 bullets), after ❼.

    Both take this cycle only: the scenes formed since the being's last journal and what the
    patrol did since (from `history`). A cycle without new scenes writes neither. A second
    cycle on the same day gives the model the day's entry so far, and the file is replaced by
    the day's lines. The cycle is closed only once both are written, so scenes a failed model
    call did not take in are offered again next time.
    """
    from mindflow.llm import LLMError, LLMSkipped
    from mindflow.prompts import diary, think

    counts = {"diary": 0, "think": 0, "rejected": 0, "scenes": 0}
    errors: list[str] = []
    cycle = journal_cycle(con, being_id, now)
    counts["scenes"] = len(cycle.scenes)
    if not cycle.scenes:
        return StepReport("diary/think_md", counts, errors)
    day = now.strftime("%Y-%m-%d")
    relpath = f"{being_id}/diary/{day}.md"
    existing = settings.workspace / relpath
    so_far = _entry_lines(existing.read_text(encoding="utf-8")) if existing.is_file() else []
    done = 0
    try:
        answer = llm.complete(diary.build(being_id, day, cycle.scenes, cycle.told(), so_far))
        text = f"# {day}\n\n" + "\n".join(answer.lines) + "\n"
        counts["diary"] += write_workspace_file(settings, relpath, text, "diary", run_id, con)
        done += 1
    except LLMSkipped:
        pass
    except LLMError as exc:
        counts["rejected"] += 1
        errors.append(_reason(exc))
    try:
        answer = llm.complete(think.build(being_id, cycle.scenes, cycle.told()))
        text = "# think\n\n" + "\n".join(f"- {b}" for b in answer.bullets) + "\n"
        counts["think"] += write_workspace_file(
            settings, f"{being_id}/think.md", text, "think_md", run_id, con
        )
        done += 1
    except LLMSkipped:
        pass
    except LLMError as exc:
        counts["rejected"] += 1
        errors.append(_reason(exc))
    if done == 2:
        con.execute(
            "INSERT OR REPLACE INTO journal_cycles (being_id, journaled_at) VALUES (?, ?)", [being_id, now]
        )
    return StepReport("diary/think_md", counts, errors)


def _entry_lines(text: str) -> list[str]:
    """The lines of a diary file below its `# day` heading."""
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("# ")]


def write_workspace_file(settings, relpath: str, text: str, what: str, run_id, con) -> bool:
    """Every workspace write goes through the audit layer (git commit + audit log)."""
    from mindflow import audit

    if not isinstance(text, str) or not text.strip():
        return False
    exists = (settings.workspace / relpath).exists()
    return audit.write_file(
        settings, relpath, text, action="EDIT" if exists else "CREATE", summary=f"patrol {what}",
        actor="patrol", trigger="patrol", run_id=run_id, con=con,
    )  # fmt: skip
