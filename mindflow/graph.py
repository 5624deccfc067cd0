"""The semantic graph for recall: facts, relations and aliases published to LanceDB, and the walk over them.

The read API must never open the DuckDB file, so the graph it traverses lives in
three LanceDB tables: `facts`, `relations` and `aliases`. Entities are matched by
a key (lower case, whitespace collapsed) in which aliases are already resolved
to their canonical entity, so a lookup is one filtered scan per hop.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
from duckdb.sqltypes import VARCHAR

from mindflow import lance, store
from mindflow.entity_match import EntityIndex
from mindflow.fact_activation import ActivationParams
from mindflow.inbox import validate_being_id
from mindflow.models import utcnow

FACTS = "facts"
RELATIONS = "relations"
ALIASES = "aliases"
DEPTHS = (1, 2)
CHUNK = 500
# An alias may point at another alias; longer chains than this are data errors.
MAX_ALIAS_HOPS = 8

_KEY_FUNCTION = "mindflow_entity_key"


def entity_key(values: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """Lower case, runs of whitespace as one space, trimmed: how entities are matched.

    The one definition of the key: DuckDB calls it (as an Arrow function) when
    publishing, `neighbourhood` when looking up, so both sides always agree.
    """
    collapsed = pc.replace_substring_regex(values, r"[\s\p{Z}]+", " ")
    return pc.utf8_lower(pc.utf8_trim_whitespace(collapsed))


def key_of(name: str) -> str:
    return entity_key(pa.array([name], pa.string()))[0].as_py()


def key_of_many(names: list[str]) -> list[str]:
    if not names:
        return []
    return entity_key(pa.array(names, pa.string())).to_pylist()


# --------------------------------------------------------------------------- publishing

# Aliases resolved to the end of their chain: one row per (being, alias key).
_RESOLVED_ALIASES_SQL = f"""
    WITH RECURSIVE edges AS (
        SELECT being_id, {_KEY_FUNCTION}(alias) AS alias_key,
               {_KEY_FUNCTION}(entity) AS entity_key, alias, entity
        FROM aliases
        WHERE {_KEY_FUNCTION}(alias) <> {_KEY_FUNCTION}(entity)
    ),
    chain AS (
        SELECT being_id, alias_key, alias, entity_key, entity, 1 AS hops FROM edges
        UNION ALL
        SELECT c.being_id, c.alias_key, c.alias, e.entity_key, e.entity, c.hops + 1
        FROM chain c JOIN edges e ON e.being_id = c.being_id AND e.alias_key = c.entity_key
        WHERE c.hops < {MAX_ALIAS_HOPS}
    ),
    resolved AS (
        SELECT being_id, alias_key,
               min(alias) AS alias,
               first(entity_key ORDER BY hops DESC, entity_key) AS entity_key,
               first(entity ORDER BY hops DESC, entity_key, entity) AS entity
        FROM chain GROUP BY being_id, alias_key
    )
    -- A cycle resolves an alias to itself: then it is no alias.
    SELECT * FROM resolved WHERE alias_key <> entity_key
"""

# Activation drifts a little every day with decay: rounded, so that drift does
# not rewrite every fact nightly (a LanceDB update un-indexes the rows it touches).
# A Cool fact unused for the configured days stays out ($as_of, $cool_days); `text` is what
# the full-text index reads.
_FACTS_SQL = f"""
    SELECT f.fact_id, f.being_id, f.entity, coalesce(a.entity_key, f.raw_key) AS entity_key,
           f.key, f.value, f.entity || ' ' || f.key || ' ' || f.value AS text,
           f.category, f.confidence, round(f.activation, 1) AS activation,
           CASE WHEN f.activation > $hot THEN 'hot' WHEN f.activation >= $warm THEN 'warm'
                ELSE 'cool' END AS tier,
           f.importance, f.valid_at, f.source_episode_ids
    FROM (
        SELECT *, {_KEY_FUNCTION}(entity) AS raw_key FROM facts
        WHERE invalid_at IS NULL AND forgotten_at IS NULL
          AND NOT (activation < $warm AND coalesce(last_accessed, created_at) < $as_of - to_days($cool_days))
    ) f
    LEFT JOIN graph_aliases a ON a.being_id = f.being_id AND a.alias_key = f.raw_key
"""

# How often facts of two entities were drawn from the same episodes (co_occurrences,
# summed over their facts), by unordered pair of entity keys: it ranks the neighbours
# a traversal returns.
_CO_OCCURRENCES_SQL = f"""
    WITH keyed AS (
        SELECT f.fact_id, f.being_id, coalesce(a.entity_key, {_KEY_FUNCTION}(f.entity)) AS k
        FROM facts f
        LEFT JOIN graph_aliases a ON a.being_id = f.being_id AND a.alias_key = {_KEY_FUNCTION}(f.entity)
        WHERE f.invalid_at IS NULL AND f.forgotten_at IS NULL
    )
    SELECT c.being_id, least(x.k, y.k) AS k1, greatest(x.k, y.k) AS k2, sum(c.weight) AS weight
    FROM co_occurrences c
    JOIN keyed x ON x.fact_id = c.fact_a AND x.being_id = c.being_id
    JOIN keyed y ON y.fact_id = c.fact_b AND y.being_id = c.being_id
    WHERE x.k <> y.k
    GROUP BY ALL
"""

_RELATIONS_SQL = f"""
    SELECT r.relation_id, r.being_id, r.subject, r.subject_key, r.predicate, r.object, r.object_key,
           r.weight, coalesce(p.weight, 0.0) AS co_occurrence, r.valid_at, r.source_episode_ids
    FROM (
        SELECT r.*, coalesce(s.entity_key, r.raw_subject) AS subject_key,
               coalesce(o.entity_key, r.raw_object) AS object_key
        FROM (
            SELECT *, {_KEY_FUNCTION}(subject) AS raw_subject, {_KEY_FUNCTION}(object) AS raw_object
            FROM relations WHERE invalid_at IS NULL AND forgotten_at IS NULL
        ) r
        LEFT JOIN graph_aliases s ON s.being_id = r.being_id AND s.alias_key = r.raw_subject
        LEFT JOIN graph_aliases o ON o.being_id = r.being_id AND o.alias_key = r.raw_object
    ) r
    LEFT JOIN graph_co_occurrences p ON p.being_id = r.being_id
         AND p.k1 = least(r.subject_key, r.object_key) AND p.k2 = greatest(r.subject_key, r.object_key)
"""

# Being ids are slugs without '/', so being_id/alias_key names one alias row.
_ALIASES_SQL = """
    SELECT being_id || '/' || alias_key AS alias_id, being_id, alias, alias_key, entity, entity_key
    FROM graph_aliases
"""


@dataclass(frozen=True)
class _Kind:
    """One published table: its DuckDB source, LanceDB schema and indexed columns."""

    name: str  # published_graph.kind
    table: str
    id_column: str
    sql: str
    schema: pa.Schema
    indexed: tuple[str, ...]
    full_text: tuple[str, ...] = ()  # columns with a full-text index


_STRINGS = pa.list_(pa.string())

KINDS = (
    _Kind(
        "fact",
        FACTS,
        "fact_id",
        _FACTS_SQL,
        pa.schema(
            [
                ("fact_id", pa.string()),
                ("being_id", pa.string()),
                ("entity", pa.string()),
                ("entity_key", pa.string()),
                ("key", pa.string()),
                ("value", pa.string()),
                ("text", pa.string()),
                ("category", pa.string()),
                ("confidence", pa.float64()),
                ("activation", pa.float64()),
                ("tier", pa.string()),
                ("importance", pa.float64()),
                ("valid_at", pa.timestamp("us")),
                ("source_episode_ids", _STRINGS),
            ]
        ),
        ("entity_key",),
        ("text",),
    ),
    _Kind(
        "relation",
        RELATIONS,
        "relation_id",
        _RELATIONS_SQL,
        pa.schema(
            [
                ("relation_id", pa.string()),
                ("being_id", pa.string()),
                ("subject", pa.string()),
                ("subject_key", pa.string()),
                ("predicate", pa.string()),
                ("object", pa.string()),
                ("object_key", pa.string()),
                ("weight", pa.float64()),
                ("co_occurrence", pa.float64()),
                ("valid_at", pa.timestamp("us")),
                ("source_episode_ids", _STRINGS),
            ]
        ),
        ("subject_key", "object_key"),
    ),
    _Kind(
        "alias",
        ALIASES,
        "alias_id",
        _ALIASES_SQL,
        pa.schema(
            [
                ("alias_id", pa.string()),
                ("being_id", pa.string()),
                ("alias", pa.string()),
                ("alias_key", pa.string()),
                ("entity", pa.string()),
                ("entity_key", pa.string()),
            ]
        ),
        ("alias_key", "entity_key"),
    ),
)


@dataclass
class TableReport:
    upserted: int = 0
    deleted: int = 0
    rows: int = 0
    version: int | None = None


@dataclass
class GraphPublishReport:
    """What one publish wrote, per LanceDB table, and the current rows per being."""

    tables: dict[str, TableReport] = field(default_factory=dict)
    per_being: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def upserted(self) -> int:
        return sum(t.upserted for t in self.tables.values())

    @property
    def deleted(self) -> int:
        return sum(t.deleted for t in self.tables.values())

    @property
    def rows(self) -> int:
        return sum(t.rows for t in self.tables.values())


def publish_graph(
    con: duckdb.DuckDBPyConnection,
    db,
    now: datetime | None = None,
    params: ActivationParams | None = None,
) -> GraphPublishReport:
    """Bring LanceDB `facts`, `relations` and `aliases` in line with DuckDB, writing only what changed.

    Cool facts unused for `params.cool_days` are left out (their DuckDB rows stay)."""
    now = now or utcnow()
    params = params or ActivationParams()
    report = GraphPublishReport()
    with _key_function(con):
        con.execute(f"CREATE OR REPLACE TEMP TABLE graph_aliases AS {_RESOLVED_ALIASES_SQL}")
        con.execute(f"CREATE OR REPLACE TEMP TABLE graph_co_occurrences AS {_CO_OCCURRENCES_SQL}")
        try:
            for kind in KINDS:
                report.tables[kind.table] = _publish_kind(con, db, kind, now, params, report.per_being)
        finally:
            con.execute("DROP TABLE IF EXISTS graph_aliases")
            con.execute("DROP TABLE IF EXISTS graph_co_occurrences")
    return report


def _publish_kind(
    con, db, kind: _Kind, now: datetime, params: ActivationParams, per_being: dict[str, dict[str, int]]
) -> TableReport:
    result = TableReport()
    desired = f"desired_graph_{kind.name}"
    table = lance.open_table(db, kind.table)
    if table is not None and table.schema.names != kind.schema.names:
        # Published by an older mindflow with other columns: written again whole.
        db.drop_table(kind.table)
        table = None
    if table is None:
        # The LanceDB table is gone (first run, or removed by hand): publish everything again.
        con.execute("DELETE FROM published_graph WHERE kind = ?", [kind.name])
    bound = {"as_of": now, "cool_days": params.cool_days, "hot": params.hot, "warm": params.warm}
    # The hash covers exactly the published row, column names included.
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE {desired} AS "
        f"SELECT d.*, md5(to_json(d)) AS row_hash FROM ({kind.sql}) d",
        bound if "$as_of" in kind.sql else None,
    )
    try:
        for being_id, n in con.execute(f"SELECT being_id, count(*) FROM {desired} GROUP BY 1").fetchall():
            per_being.setdefault(being_id, {})[kind.table] = n
        changed = con.sql(
            f"""
            SELECT d.* FROM {desired} d
            LEFT JOIN published_graph p ON p.kind = ? AND p.ref = d.{kind.id_column}
            WHERE p.row_hash IS DISTINCT FROM d.row_hash
            ORDER BY d.{kind.id_column}
            """,
            params=[kind.name],
        ).to_arrow_table()
        removed = [
            r[0]
            for r in con.execute(
                f"SELECT p.ref FROM published_graph p WHERE p.kind = ? AND NOT EXISTS "
                f"(SELECT 1 FROM {desired} d WHERE d.{kind.id_column} = p.ref) ORDER BY p.ref",
                [kind.name],
            ).fetchall()
        ]
        if changed.num_rows:
            batch = changed.select(kind.schema.names).cast(kind.schema)
            table = lance.upsert(db, kind.table, table, batch, kind.id_column)
            lance.ensure_scalar_indexes(
                table,
                {
                    **dict.fromkeys(("being_id", *kind.indexed), "BTREE"),
                    **dict.fromkeys(kind.full_text, "FTS"),
                },
            )
            result.upserted = changed.num_rows
        if table is not None and removed:
            result.deleted = lance.delete_keys(table, kind.id_column, removed)
        if table is not None and (result.upserted or result.deleted):
            # Folds the new rows into the scalar indexes and compacts small fragments.
            table.optimize()
        # Recorded only once LanceDB holds the rows: a failure before this point
        # republishes the same rows next time.
        hashes = changed.select([kind.id_column, "being_id", "row_hash"])
        with store.registered(con, "changed_graph_hashes", hashes):
            con.execute(
                f"INSERT OR REPLACE INTO published_graph "
                f"SELECT ?, {kind.id_column}, being_id, row_hash, ?::TIMESTAMP FROM changed_graph_hashes",
                [kind.name, now],
            )
        if removed:
            con.execute(
                "DELETE FROM published_graph WHERE kind = ? AND list_contains(?, ref)", [kind.name, removed]
            )
        if table is not None:
            result.rows = table.count_rows()
            result.version = table.version
    finally:
        con.execute(f"DROP TABLE IF EXISTS {desired}")
    return result


@contextlib.contextmanager
def _key_function(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    # Like registering a view, creating a function needs no partly fetched result pending.
    con.execute("SELECT 1").fetchall()
    con.create_function(_KEY_FUNCTION, entity_key, [VARCHAR], VARCHAR, type="arrow")
    try:
        yield
    finally:
        con.remove_function(_KEY_FUNCTION)


# --------------------------------------------------------------------------- traversal


def _reader(path: lance.Location):
    # lance.reader's zero consistency interval makes every read check for a newer table
    # version, so the API sees each publish without a restart.
    return lance.reader(path)


def _tables(lance_path: Path):
    db = _reader(lance_path)
    return lance.open_table(db, FACTS), lance.open_table(db, RELATIONS), lance.open_table(db, ALIASES)


def _version(table) -> int | None:
    return None if table is None else table.version


_ENTITY_INDEXES: dict[tuple, EntityIndex] = {}


def entity_index(lance_path: Path, being_id: str) -> EntityIndex:
    """Every entity of the being with the names it goes by, as published (cached per table versions)."""
    validate_being_id(being_id)
    if not lance.exists(lance_path):
        return EntityIndex()
    facts_table, relations_table, aliases_table = _tables(lance_path)
    cache_key = (
        str(lance_path),
        being_id,
        *(_version(t) for t in (facts_table, relations_table, aliases_table)),
    )
    index = _ENTITY_INDEXES.get(cache_key)
    if index is not None:
        return index
    index = EntityIndex()
    mine = lance.where(being_id=being_id)
    if facts_table is not None:
        for row in _select(facts_table, mine, ["entity", "entity_key"]):
            index.add(row["entity_key"], row["entity"], 1)
    if relations_table is not None:
        for row in _select(relations_table, mine, ["subject", "subject_key", "object", "object_key"]):
            index.add(row["subject_key"], row["subject"], 1)
            index.add(row["object_key"], row["object"], 1)
    if aliases_table is not None:
        for row in _select(aliases_table, mine, ["alias", "entity", "entity_key"]):
            index.add(row["entity_key"], row["entity"])
            index.add(row["entity_key"], row["alias"])
    if len(_ENTITY_INDEXES) > 64:
        _ENTITY_INDEXES.clear()
    _ENTITY_INDEXES[cache_key] = index
    return index


def _select(table, condition: str, columns: list[str]) -> list[dict]:
    return table.search().where(condition).select(columns).limit(None).to_arrow().to_pylist()


def resolve_entity(lance_path: Path, being_id: str, entity: str) -> tuple[str, str] | None:
    """(entity key, how) for a loose name: `alias`, `name`, `normalised` or `words`; None if unknown."""
    query_key = key_of(entity)
    if not query_key or not lance.exists(lance_path):
        return None
    facts_table, relations_table, aliases_table = _tables(lance_path)
    if aliases_table is not None:
        hit = _rows(aliases_table, lance.where(being_id=being_id, alias_key=query_key), limit=1)
        if hit:
            return hit[0]["entity_key"], "alias"
    if _facts(facts_table, being_id, [query_key]) or _touching(relations_table, being_id, [query_key]):
        return query_key, "name"
    return entity_index(lance_path, being_id).resolve(entity)


def search_facts(
    lance_path: Path, being_id: str, query: str, k: int = 20, key: str | None = None
) -> list[dict]:
    """The being's published facts whose entity, key or value match the words of `query` (BM25)."""
    from mindflow.recall.primitives import sanitize_fts_query

    validate_being_id(being_id)
    terms = sanitize_fts_query(query)
    if not terms or not lance.exists(lance_path):
        return []
    facts_table = _tables(lance_path)[0]
    if facts_table is None:
        return []
    condition = lance.where(being_id=being_id)
    if key is not None:
        condition = lance.all_of(condition, lance.where(key=" ".join(key.split()).lower()))
    rows = facts_table.search(terms, query_type="fts").where(condition, prefilter=True).limit(k).to_arrow()
    return [{c: v for c, v in row.items() if c != "_score"} for row in rows.to_pylist()]


def neighbourhood(
    lance_path: Path, being_id: str, entity: str, depth: int = 1, key: str | None = None
) -> dict:
    """Facts and relations around `entity` in one being's graph, up to `depth` hops (1 or 2).

    - depth 1: the entity's facts and the relations touching it;
    - depth 2: also the facts of its direct neighbours and the relations touching them.

    `entity` is resolved as `resolve_entity` says (aliases, the name, its normalised form,
    its words); `resolved_by` tells which. `key` keeps only the facts with that key (any
    case), the exact entity + key lookup. `neighbours` are the other entities the returned
    relations reach, nearest first: by hop, then by how often their facts were drawn from
    the same episodes as the other end's (co-occurrence), then by the strongest relation
    weight, then by name. An unknown entity, or a graph not published yet, gives empty lists.
    """
    validate_being_id(being_id)
    if depth not in DEPTHS:
        raise ValueError(f"depth must be 1 or 2, not {depth!r}")
    if not isinstance(entity, str):
        raise ValueError("entity must be a string")
    result = {"entity": " ".join(entity.split()), "facts": [], "relations": [], "neighbours": []}
    result["resolved_by"] = None
    resolved = resolve_entity(lance_path, being_id, entity)
    if resolved is None:
        return result
    centre, how = resolved
    result["resolved_by"] = how
    facts_table, relations_table, aliases_table = _tables(lance_path)

    # Breadth-first over relations: hop[k] is how far entity key k is from the centre.
    hop = {centre: 0}
    relations: dict[str, dict] = {}
    relation_hop: dict[str, int] = {}
    frontier = [centre]
    for step in range(1, depth + 1):
        found = _touching(relations_table, being_id, frontier) if frontier else []
        frontier = []
        for row in found:
            if row["relation_id"] in relations:
                continue
            relations[row["relation_id"]] = row
            relation_hop[row["relation_id"]] = step
            for k in (row["subject_key"], row["object_key"]):
                if k not in hop:
                    hop[k] = step
                    frontier.append(k)
    with_facts = sorted(k for k, h in hop.items() if h < depth)
    facts = _facts(facts_table, being_id, with_facts)
    if key is not None:
        wanted = " ".join(key.split()).lower()
        facts = [f for f in facts if f["key"] == wanted]
    if not facts and not relations:
        return result

    strongest: dict[str, float] = {}
    together: dict[str, float] = {}
    for row in relations.values():
        for k in (row["subject_key"], row["object_key"]):
            strongest[k] = max(strongest.get(k, float("-inf")), row["weight"] or 0.0)
            together[k] = max(together.get(k, 0.0), row.get("co_occurrence") or 0.0)
    names = _names(aliases_table, being_id, hop, facts, relations.values())
    neighbours = sorted(
        (k for k in hop if k != centre), key=lambda k: (hop[k], -together[k], -strongest[k], names[k])
    )

    order = {k: i for i, k in enumerate([centre, *neighbours])}
    facts.sort(
        key=lambda f: (
            order[f["entity_key"]],
            -(f["importance"] or 0.0),
            -(f["activation"] or 0.0),
            f["key"],
            f["fact_id"],
        )
    )
    ordered_relations = sorted(
        relations.values(),
        key=lambda r: (
            relation_hop[r["relation_id"]],
            -(r["weight"] or 0.0),
            r["subject_key"],
            r["predicate"],
            r["object_key"],
            r["relation_id"],
        ),
    )
    return {
        "entity": names[centre],
        "facts": facts,
        "relations": ordered_relations,
        "neighbours": [names[k] for k in neighbours],
        "resolved_by": how,
    }


def _rows(table, condition: str, limit: int | None = None) -> list[dict]:
    return table.search().where(condition).limit(limit).to_arrow().to_pylist()


def _chunks(values: list[str]) -> Iterator[list[str]]:
    for start in range(0, len(values), CHUNK):
        yield values[start : start + CHUNK]


def _touching(table, being_id: str, keys: list[str]) -> list[dict]:
    if table is None:
        return []
    rows = []
    for chunk in _chunks(keys):
        # One scan per side: each uses its own scalar index.
        for column in ("subject_key", "object_key"):
            rows.extend(_rows(table, lance.where(being_id=being_id, **{column: chunk})))
    return rows


def _facts(table, being_id: str, keys: list[str]) -> list[dict]:
    if table is None or not keys:
        return []
    rows = []
    for chunk in _chunks(keys):
        rows.extend(_rows(table, lance.where(being_id=being_id, entity_key=chunk)))
    return rows


def _names(aliases_table, being_id: str, keys: Iterable[str], facts: list[dict], relations) -> dict[str, str]:
    """How each entity key is shown: the alias target's name, else its most used spelling."""
    keys = list(keys)
    names: dict[str, str] = {}
    if aliases_table is not None:
        for chunk in _chunks(keys):
            for row in _rows(aliases_table, lance.where(being_id=being_id, entity_key=chunk)):
                current = names.get(row["entity_key"])
                names[row["entity_key"]] = row["entity"] if current is None else min(current, row["entity"])
    spellings: Counter[tuple[str, str]] = Counter()
    for f in facts:
        spellings[(f["entity_key"], f["entity"])] += 1
    for r in relations:
        spellings[(r["subject_key"], r["subject"])] += 1
        spellings[(r["object_key"], r["object"])] += 1
    # Only spellings that are the key itself, not aliases folded into it.
    pairs = list(spellings)
    own = key_of_many([s for _, s in pairs])
    best: dict[str, tuple[int, str]] = {}
    for (k, spelling), spelling_key in zip(pairs, own, strict=True):
        if spelling_key != k:
            continue
        rank = (-spellings[(k, spelling)], spelling)
        if k not in best or rank < best[k]:
            best[k] = rank
    for k in keys:
        if k not in names:
            names[k] = best[k][1] if k in best else k
    return names
