"""LLM extraction: batches of episodes -> scenes, entities, facts, relations, in one call per batch.

Runs instead of the mechanical one-scene-per-episode step when an extraction model is
configured. Each batch is sized to the model's context and written in one transaction,
so a rejected answer leaves every table as it was; an answer that came back unusable is
kept as a `[PARSE_FAILED]` note and its episodes are extracted again on the next run.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
from dataclasses import dataclass, field
from datetime import datetime
from itertools import combinations

import duckdb
import pyarrow as pa

from mindflow import fact_activation, graph, store
from mindflow.llm import LLM, LLMError, LLMSkipped
from mindflow.prompts import extraction as prompt
from mindflow.scenes import EMOTION_ARROW, emotion_dict

log = logging.getLogger("mindflow.extraction")
PARSE_FAILED = "[PARSE_FAILED]"
# A fact with no importance of its own and no scene to take one from.
DEFAULT_FACT_IMPORTANCE = 0.5
KNOWN_ENTITIES = 200  # names shown to the model so it reuses them (alias resolution)
# Keyphrases kept per scene: the prompt asks for 2-6; a model listing dozens would bury the
# memory's own words in its full-text document.
KEYPHRASES = 8


_EXOTIC_SPACE = frozenset("\v\x1c\x1d\x1e\x1f")


@functools.lru_cache(maxsize=65_536)
def key_of(name: str) -> str:
    """graph.key_of (the one entity key), with a pure-Python path for plain ASCII names.

    Both lower-case, collapse runs of whitespace to one space and trim; for ASCII text
    without the rare separators Python and Arrow disagree on, they give the same key.
    """
    if name.isascii() and _EXOTIC_SPACE.isdisjoint(name):
        return " ".join(name.split()).lower()
    return graph.key_of(name)


def _hash_id(prefix: str, *parts: str) -> str:
    return prefix + hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()[:24]


@dataclass
class ExtractionReport:
    episodes: int = 0  # episodes waiting for extraction at the start
    batches: int = 0
    scenes: int = 0
    parse_failed: int = 0
    repaired: int = 0  # [PARSE_FAILED] notes whose episodes now have scenes
    pending: int = 0  # episodes left for the next run (budget spent or no model answered)
    entities: int = 0
    aliases: int = 0
    facts_new: int = 0
    facts_confirmed: int = 0
    facts_superseded: int = 0
    facts_flagged: int = 0  # review mode: a contradicting value kept beside the current one for a person
    relations: int = 0
    co_occurrences: int = 0
    errors: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        return {k: v for k, v in self.__dict__.items() if isinstance(v, int)}


@dataclass
class _Episode:
    episode_id: str
    day: str
    speaker: str
    text: str
    ts: datetime

    def line(self) -> str:
        return prompt.render_episode(self.episode_id, self.day, self.speaker, self.text)


def pending_episodes(con: duckdb.DuckDBPyConnection, being_id: str) -> list[_Episode]:
    """Episodes without a usable scene (none yet, or only [PARSE_FAILED] notes), oldest first."""
    rows = con.execute(
        f"""
        SELECT e.episode_id, strftime(e.day, '%Y-%m-%d'), coalesce(e.speaker, e.role, 'unknown'),
               e.text, e.ts
        FROM episodes e
        WHERE e.being_id = ? AND {store.WITHOUT_SCENE}
        ORDER BY e.ts, e.episode_id
        """,
        [being_id],
    ).fetchall()
    return [_Episode(*row) for row in rows]


def plan_batches(
    llm: LLM, episodes: list[_Episode], overhead_tokens: int
) -> tuple[list[list[_Episode]], int]:
    """Consecutive episodes packed up to the input budget; returns (batches, answer max_tokens).

    The answer roughly restates its input, so a batch holds at most twice the answer
    limit, and input + answer + prompt must fit the smallest context in the chain.
    """
    context = llm.context_tokens()
    max_out = max(512, min(8192, context // 4))
    budget = max(256, min(context - max_out - overhead_tokens - 256, 2 * max_out))
    batches: list[list[_Episode]] = []
    current: list[_Episode] = []
    used = 0
    for episode in episodes:
        tokens = llm.count_tokens(episode.line()) + 1
        if current and used + tokens > budget:
            batches.append(current)
            current, used = [], 0
        current.append(episode)
        used += tokens
    if current:
        batches.append(current)
    return batches, max_out


def known_entities(con: duckdb.DuckDBPyConnection, being_id: str) -> list[str]:
    rows = con.execute(
        "SELECT entity FROM facts WHERE being_id = ? AND invalid_at IS NULL "
        "GROUP BY entity ORDER BY max(created_at) DESC, entity LIMIT ?",
        [being_id, KNOWN_ENTITIES],
    ).fetchall()
    return sorted(r[0] for r in rows)


def extract(
    con: duckdb.DuckDBPyConnection,
    being_id: str,
    llm: LLM,
    now: datetime,
    progress=None,
    *,
    supersede: bool = True,
) -> ExtractionReport:
    """Extract every pending episode of a being, batch by batch.

    `supersede` False (a being in review mode): a fact contradicting a current one does not close
    it; both stay current, and reflection proposes which to keep (a contradiction proposal)."""
    report = ExtractionReport()
    episodes = pending_episodes(con, being_id)
    report.episodes = len(episodes)
    if not episodes:
        return report
    known = known_entities(con, being_id)
    probe = prompt.build([], known, 1)
    overhead = llm.count_tokens(probe.full_system() + probe.messages[0]["content"])
    batches, max_out = plan_batches(llm, episodes, overhead)
    for index, batch in enumerate(batches):
        ids = {e.episode_id for e in batch}

        def check(answer: prompt.Extraction, ids=ids) -> None:
            seen = {i for scene in answer.scenes for i in scene.episode_ids}
            unknown = seen - ids
            if unknown:
                raise ValueError(f"unknown episode ids {sorted(unknown)[:3]}")
            if not seen:
                raise ValueError("no scene")

        request = prompt.build([e.line() for e in batch], known, max_out)
        request = dataclasses.replace(request, check=check)
        report.batches += 1
        try:
            answer = llm.complete(request)
        except LLMError as exc:
            if not isinstance(exc, LLMSkipped):  # a skip is said once for the run, not per being
                report.errors.append(str(exc))
            if llm.last_invalid is None:  # no model answered, or the budget is spent
                report.pending += sum(len(b) for b in batches[index:])
                log.warning("extraction of %s stopped: %s", being_id, exc)
                break
            _store_parse_failed(con, being_id, batch, llm, now)
            report.parse_failed += 1
            continue
        canonical = _apply(con, being_id, batch, answer, llm.model, now, report, supersede)
        known = sorted(set(known) | canonical)[:KNOWN_ENTITIES]
        if progress:
            progress(index + 1, len(batches))
    report.repaired = _drop_repaired_notes(con, being_id)
    return report


def _store_parse_failed(
    con: duckdb.DuckDBPyConnection, being_id: str, batch: list[_Episode], llm: LLM, now: datetime
) -> None:
    ids = [e.episode_id for e in batch]
    con.execute(
        """
        INSERT INTO scene_notes (scene_id, being_id, episode_ids, action, importance, note_status, raw,
            extractor, created_at)
        VALUES (?, ?, ?, ?, NULL, 'parse_failed', ?, ?, ?)
        ON CONFLICT (scene_id) DO UPDATE SET raw = excluded.raw, created_at = excluded.created_at
        """,
        [
            _hash_id("s-pf-", being_id, *ids),
            being_id,
            ids,
            PARSE_FAILED,
            (llm.last_invalid or "")[:20_000],
            llm.model,
            now,
        ],
    )


def _drop_repaired_notes(con: duckdb.DuckDBPyConnection, being_id: str) -> int:
    """[PARSE_FAILED] notes all of whose episodes now have a usable scene."""
    return len(
        con.execute(
            """
            DELETE FROM scene_notes f
            WHERE f.being_id = ? AND f.note_status = 'parse_failed'
              AND NOT EXISTS (
                  SELECT 1 FROM (SELECT unnest(f.episode_ids) AS episode_id) u
                  WHERE NOT EXISTS (
                      SELECT 1 FROM scene_notes s WHERE s.being_id = f.being_id AND s.note_status = 'ok'
                        AND list_contains(s.episode_ids, u.episode_id)))
            RETURNING scene_id
            """,
            [being_id],
        ).fetchall()
    )


def _keyphrases(scene: prompt.Scene) -> list[str]:
    """The scene's keyphrases as stored: spaces collapsed, repeats out, at most KEYPHRASES."""
    return list(dict.fromkeys(" ".join(k.split()) for k in scene.keyphrases))[:KEYPHRASES]


def _apply(
    con: duckdb.DuckDBPyConnection,
    being_id: str,
    batch: list[_Episode],
    answer: prompt.Extraction,
    model: str,
    now: datetime,
    report: ExtractionReport,
    supersede: bool = True,
) -> set[str]:
    """Write one validated answer in one transaction, a few set-based statements per table.

    Returns the canonical names of the answer's entities (aliases resolved).
    """
    ts_of = {e.episode_id: e.ts for e in batch}
    scenes = {}
    for scene in answer.scenes:
        ids = list(dict.fromkeys(scene.episode_ids))
        scenes.setdefault(_hash_id("s-", being_id, "llm", *sorted(ids)), (ids, scene))
    table = pa.table(
        {
            "scene_id": list(scenes),
            "episode_ids": pa.array([ids for ids, _ in scenes.values()], pa.list_(pa.string())),
            "action": [s.action.strip() for _, s in scenes.values()],
            "actors": pa.array([[a for a in s.actors if a.strip()] for _, s in scenes.values()],
                               pa.list_(pa.string())),
            "when": pa.array([[{"date": w.date, "action": w.action} for w in s.when]
                              for _, s in scenes.values()],
                             pa.list_(pa.struct([("date", pa.string()), ("action", pa.string())]))),
            "setting": pa.array([s.setting for _, s in scenes.values()], pa.string()),
            "dialogue": pa.array([s.dialogue or None for _, s in scenes.values()], pa.list_(pa.string())),
            "sensory": pa.array([s.sensory or None for _, s in scenes.values()], pa.list_(pa.string())),
            "feeling": pa.array([s.feeling for _, s in scenes.values()], pa.string()),
            "importance": [float(s.importance) for _, s in scenes.values()],
            "themes": pa.array([[t for t in s.themes if t.strip()] for _, s in scenes.values()],
                               pa.list_(pa.string())),
            "keyphrases": pa.array([_keyphrases(s) for _, s in scenes.values()], pa.list_(pa.string())),
            "emotion": pa.array([emotion_dict(s.emotion) for _, s in scenes.values()], EMOTION_ARROW),
        }
    )  # fmt: skip
    with store.transaction(con):
        with store.registered(con, "new_scenes", table):
            inserted = con.execute(
                """
                INSERT INTO scene_notes (scene_id, being_id, episode_ids, action, actors, "when", setting,
                    dialogue, sensory, feeling, importance, themes, keyphrases, emotion, note_status, raw,
                    extractor, created_at)
                SELECT scene_id, ?, episode_ids, action, actors, "when", setting, dialogue, sensory, feeling,
                       importance, themes, keyphrases, emotion, 'ok', NULL, ?, ?
                FROM new_scenes
                ON CONFLICT (scene_id) DO NOTHING RETURNING scene_id
                """,
                [being_id, model, now],
            ).fetchall()
        report.scenes += len(inserted)
        canonical = _apply_graph(con, being_id, answer, ts_of, now, report, supersede)
    return canonical


def _resolve(aliases: dict[str, str], name: str) -> str:
    name = " ".join(name.split())
    for _ in range(8):  # alias chains are short; a cycle stops here
        target = aliases.get(key_of(name))
        if target is None or key_of(target) == key_of(name):
            break
        name = target
    return name


def _apply_graph(con, being_id, answer, ts_of, now, report, supersede: bool = True) -> set[str]:
    """Entities, facts (with supersession), relations and co-occurrences of one answer.

    The answer is resolved against the stored graph in memory, then written with one
    statement per table, so a batch costs the same few round trips however many facts
    it holds.
    """
    aliases = {key_of(a): e for a, e in con.execute(
        "SELECT alias, entity FROM aliases WHERE being_id = ?", [being_id]
    ).fetchall()}  # fmt: skip
    # The graph as stored, for the entities and keys this answer touches.
    spelling: dict[str, str] = {}
    for (name,) in con.execute(
        "SELECT entity FROM facts WHERE being_id = ? GROUP BY entity ORDER BY min(created_at) DESC",
        [being_id],
    ).fetchall():
        spelling[key_of(name)] = name  # the oldest spelling wins (written last)
    # Entities the graph already knows by name: those with facts, and alias targets.
    established = set(spelling) | {key_of(e) for e in aliases.values()}
    new_aliases: list[tuple[str, str]] = []
    canonical_names: set[str] = set()
    for entity in answer.entities:
        names = [" ".join(n.split()) for n in (entity.name, *entity.aliases)]
        resolved = [_resolve(aliases, n) for n in names]
        # The model may call the new spelling canonical and list the stored entity as its
        # alias: the stored entity stays canonical, so its facts stay under one name and a
        # contradicting fact supersedes the old one.
        canonical = next((r for r in resolved if key_of(r) in established), resolved[0])
        canonical = spelling.get(key_of(canonical), canonical)
        established.add(key_of(canonical))
        canonical_names.add(canonical)
        report.entities += 1
        for name in names:
            if key_of(name) == key_of(canonical) or key_of(name) in aliases:
                continue
            aliases[key_of(name)] = canonical
            new_aliases.append((name, canonical))

    def sources(ids: list[str]) -> list[str]:
        return [i for i in dict.fromkeys(ids) if i in ts_of]

    # A fact the model gives no importance takes that of the scenes it was drawn from.
    scene_importance: dict[str, float] = {}
    for scene in answer.scenes:
        for episode_id in scene.episode_ids:
            scene_importance[episode_id] = max(scene_importance.get(episode_id, 0.0), float(scene.importance))

    def importance_of(fact) -> float:
        if fact.importance is not None:
            return float(fact.importance)
        drawn = [scene_importance[i] for i in fact.episode_ids if i in scene_importance]
        return max(drawn) if drawn else DEFAULT_FACT_IMPORTANCE

    keys = sorted({" ".join(f.key.split()).lower() for f in answer.facts})
    current: dict[tuple[str, str], list[list]] = {}
    for fact_id, entity, key, value in con.execute(
        "SELECT fact_id, entity, key, value FROM facts WHERE being_id = ? AND invalid_at IS NULL "
        "AND key IN (SELECT unnest(?::VARCHAR[])) ORDER BY created_at, fact_id",
        [being_id, keys],
    ).fetchall():
        current.setdefault((key_of(entity), key), []).append([fact_id, value])

    rows: dict[str, dict] = {}  # fact_id -> the row to upsert
    closed: dict[str, datetime] = {}  # stored fact_id -> invalid_at
    history: list[tuple[str, str, str]] = []  # (old fact_id, old value, json after)
    relations: dict[str, dict] = {}
    for fact in answer.facts:
        entity = _resolve(aliases, fact.entity)
        entity = spelling.setdefault(key_of(entity), entity)  # keep the spelling the graph uses
        key = " ".join(fact.key.split()).lower()
        value = " ".join(fact.value.split())
        src = sources(fact.episode_ids)
        valid_at = min((ts_of[i] for i in src), default=now)
        fact_id = _hash_id("f-", being_id, key_of(entity), key, key_of(value))
        slot = current.setdefault((key_of(entity), key), [])
        for old_id, old_value in slot:
            if old_id == fact_id:
                continue
            if not supersede:
                report.facts_flagged += 1
                continue
            # A contradicted fact is closed, never overwritten: it keeps its row and history.
            if old_id in rows:
                rows[old_id]["invalid_at"] = valid_at
            else:
                closed[old_id] = valid_at
            history.append((old_id, old_value, value, fact_id))
            _add_relation(relations, being_id, f"{entity} {key}: {value}", "supersedes",
                          f"{entity} {key}: {old_value}", src, valid_at)  # fmt: skip
            report.facts_superseded += 1
        if supersede:
            slot[:] = [[fact_id, value]]
        elif all(old_id != fact_id for old_id, _ in slot):
            slot.append([fact_id, value])
        closed.pop(fact_id, None)
        row = rows.get(fact_id)
        if row is None:
            rows[fact_id] = {
                "fact_id": fact_id, "entity": entity, "key": key, "value": value, "category": fact.category,
                "confidence": float(fact.confidence), "sources": src, "valid_at": valid_at,
                "invalid_at": None, "importance": importance_of(fact),
                "hits": 1,
            }  # fmt: skip
        else:
            row["hits"] += 1
            row["invalid_at"] = None
            row["confidence"] = max(row["confidence"], float(fact.confidence))
            row["importance"] = max(row["importance"], importance_of(fact))
            row["sources"] += [i for i in src if i not in row["sources"]]
    for relation in answer.relations:
        src = sources(relation.episode_ids)
        _add_relation(
            relations, being_id, _resolve(aliases, relation.subject), relation.predicate,
            _resolve(aliases, relation.object), src, min((ts_of[i] for i in src), default=now),
        )  # fmt: skip
        report.relations += 1
    # Facts drawn from the same episode were mentioned together.
    pairs = []
    for a, b in combinations(sorted(rows), 2):
        shared = len(set(rows[a]["sources"]) & set(rows[b]["sources"]))
        if shared:
            pairs.append((a, b, float(shared)))
    report.co_occurrences += len(pairs)

    _write_graph(con, being_id, now, new_aliases, rows, closed, history, relations, pairs, report)
    return canonical_names


def _add_relation(relations, being_id, subject, predicate, obj, src, valid_at) -> None:
    relation_id = _hash_id("r-", being_id, key_of(subject), predicate, key_of(obj))
    row = relations.get(relation_id)
    if row is None:
        relations[relation_id] = {
            "relation_id": relation_id,
            "subject": subject,
            "predicate": predicate,
            "object": obj,
            "weight": 1.0,
            "sources": list(src),
            "valid_at": valid_at,
        }
    else:
        row["weight"] += 1.0
        row["sources"] += [i for i in src if i not in row["sources"]]


def _write_graph(con, being_id, now, new_aliases, rows, closed, history, relations, pairs, report) -> None:
    strings = pa.list_(pa.string())
    if new_aliases:
        table = pa.table({"alias": [a for a, _ in new_aliases], "entity": [e for _, e in new_aliases]})
        with store.registered(con, "new_aliases", table):
            con.execute(
                "INSERT INTO aliases SELECT ?, alias, entity, ? FROM new_aliases ON CONFLICT DO NOTHING",
                [being_id, now],
            )
        report.aliases += len(new_aliases)
    if closed:
        table = pa.table(
            {"fact_id": list(closed), "invalid_at": pa.array(list(closed.values()), pa.timestamp("us"))}
        )
        with store.registered(con, "closed_facts", table):
            con.execute(
                "UPDATE facts SET invalid_at = c.invalid_at FROM closed_facts c "
                "WHERE facts.fact_id = c.fact_id"
            )
    if history:
        table = pa.table({
            "fact_id": [h[0] for h in history], "old": [h[1] for h in history],
            "new": [h[2] for h in history], "new_id": [h[3] for h in history],
        })  # fmt: skip
        with store.registered(con, "superseded", table):
            con.execute(
                "INSERT INTO history (history_id, ts, memory_ref, being_id, operation, before, after, "
                "run_id, actor) SELECT 'h-' || uuid()::VARCHAR, ?, fact_id, ?, 'superseded', "
                "to_json({'value': old}), to_json({'value': new, 'fact_id': new_id}), NULL, 'extraction' "
                "FROM superseded",
                [now, being_id],
            )
    if rows:
        values = list(rows.values())
        table = pa.table({
            "fact_id": [r["fact_id"] for r in values], "entity": [r["entity"] for r in values],
            "key": [r["key"] for r in values], "value": [r["value"] for r in values],
            "category": [r["category"] for r in values], "confidence": [r["confidence"] for r in values],
            "sources": pa.array([r["sources"] for r in values], strings),
            "valid_at": pa.array([r["valid_at"] for r in values], pa.timestamp("us")),
            "invalid_at": pa.array([r["invalid_at"] for r in values], pa.timestamp("us")),
            "importance": [r["importance"] for r in values], "hits": [r["hits"] for r in values],
        })  # fmt: skip
        with store.registered(con, "new_facts", table):
            existing = con.execute(
                "SELECT count(*) FROM facts WHERE fact_id IN (SELECT fact_id FROM new_facts)"
            ).fetchall()[0][0]
            con.execute(
                """
                INSERT INTO facts (fact_id, being_id, entity, key, value, category, confidence, activation,
                    importance, access_count, source_episode_ids, valid_at, invalid_at, created_at,
                    last_accessed)
                SELECT fact_id, $being, entity, key, value, category, confidence, 1.0, importance, hits,
                       sources, valid_at, invalid_at, $now, $now
                FROM new_facts
                ON CONFLICT (fact_id) DO UPDATE SET
                    access_count = facts.access_count + excluded.access_count,
                    confidence = greatest(facts.confidence, excluded.confidence),
                    importance = greatest(facts.importance, excluded.importance),
                    source_episode_ids = list_concat(facts.source_episode_ids, list_filter(
                        excluded.source_episode_ids,
                        lambda x: NOT list_contains(facts.source_episode_ids, x))),
                    last_accessed = greatest(facts.last_accessed, excluded.last_accessed),
                    valid_at = CASE WHEN facts.invalid_at IS NULL THEN facts.valid_at
                                    ELSE excluded.valid_at END,
                    invalid_at = excluded.invalid_at
                """,
                {"being": being_id, "now": now},
            )
            # Seen (again) now: the activation of an access, as the decay job computes it.
            seen = fact_activation.activation_sql(fact_activation.ActivationParams())
            con.execute(
                f"UPDATE facts SET activation = {seen} WHERE fact_id IN (SELECT fact_id FROM new_facts)",
                {"as_of": now},
            )
        report.facts_new += len(values) - existing
        report.facts_confirmed += sum(r["hits"] for r in values) - (len(values) - existing)
    if relations:
        values = list(relations.values())
        table = pa.table({
            "relation_id": [r["relation_id"] for r in values], "subject": [r["subject"] for r in values],
            "predicate": [r["predicate"] for r in values], "object": [r["object"] for r in values],
            "weight": [r["weight"] for r in values],
            "sources": pa.array([r["sources"] for r in values], strings),
            "valid_at": pa.array([r["valid_at"] for r in values], pa.timestamp("us")),
        })  # fmt: skip
        with store.registered(con, "new_relations", table):
            con.execute(
                """
                INSERT INTO relations (relation_id, being_id, subject, predicate, object, weight,
                    source_episode_ids, valid_at, invalid_at, created_at)
                SELECT relation_id, ?, subject, predicate, object, weight, sources, valid_at, NULL, ?
                FROM new_relations
                ON CONFLICT (relation_id) DO UPDATE SET weight = relations.weight + excluded.weight,
                    source_episode_ids = list_concat(relations.source_episode_ids, list_filter(
                        excluded.source_episode_ids,
                        lambda x: NOT list_contains(relations.source_episode_ids, x)))
                """,
                [being_id, now],
            )
    if pairs:
        table = pa.table({"a": [p[0] for p in pairs], "b": [p[1] for p in pairs], "w": [p[2] for p in pairs]})
        with store.registered(con, "new_pairs", table):
            con.execute(
                "INSERT INTO co_occurrences SELECT ?, a, b, w FROM new_pairs "
                "ON CONFLICT DO UPDATE SET weight = co_occurrences.weight + excluded.weight",
                [being_id],
            )


def summary(report: ExtractionReport) -> str:
    return json.dumps(report.counts())
