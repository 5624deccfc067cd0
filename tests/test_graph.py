"""The semantic graph served to recall: publishing facts, relations and aliases to LanceDB, and the walk.

Two beings share an entity name ("ledgerline") with different facts. ada's graph:

    ledgerline --uses (0.9)--> DuckDB --written-in (0.5)--> C++
    ledgerline --depends-on (0.7)--> OAuth PKCE <--defined-in (0.6)-- "OAuth2 PKCE flow" (an alias)
                                                             ... --> RFC 7636

Expected results are written out by hand from that picture.
"""

from __future__ import annotations

from datetime import datetime

import dagster as dg
import pytest

from mindflow import graph, lance, store
from mindflow.errors import MindflowError
from mindflow.resources import DuckDBResource, LanceDBResource

NOW = datetime(2026, 10, 1, 12, 0, 0)
VALID = datetime(2026, 9, 1, 8, 0, 0)

# fact_id, being, entity, key, value, importance, invalidated
FACTS = [
    ("fa-lang", "ada", "ledgerline", "language", "Python", 0.9, False),
    ("fa-owner", "ada", "Ledgerline", "owner", "Ada's team", 0.5, False),
    ("fa-old-lang", "ada", "ledgerline", "language", "Java", 0.9, True),
    ("fa-duck", "ada", "DuckDB", "version", "2.0", 0.6, False),
    ("fa-pkce", "ada", "OAuth2 PKCE flow", "purpose", "public clients", 0.7, False),
    ("fa-cpp", "ada", "C++", "standard", "C++20", 0.4, False),
    ("fb-lang", "bram", "ledgerline", "language", "Rust", 0.8, False),
    ("fb-auth", "bram", "Bram Auth", "kind", "SSO", 0.5, False),
]
# relation_id, being, subject, predicate, object, weight, invalidated
RELATIONS = [
    ("ra-uses", "ada", "ledgerline", "uses", "DuckDB", 0.9, False),
    ("ra-depends", "ada", "ledgerline", "depends-on", "OAuth PKCE", 0.7, False),
    ("ra-old-uses", "ada", "ledgerline", "uses", "Postgres", 0.95, True),
    ("ra-cpp", "ada", "DuckDB", "written-in", "C++", 0.5, False),
    ("ra-rfc", "ada", "OAuth2 PKCE flow", "defined-in", "RFC 7636", 0.6, False),
    ("rb-uses", "bram", "ledgerline", "uses", "SQLite", 0.8, False),
]
# being, alias, entity
ALIASES = [
    ("ada", "OAuth2 PKCE flow", "OAuth PKCE"),
    ("bram", "OAuth2 PKCE flow", "Bram Auth"),
]


def seed(con) -> None:
    con.executemany(
        "INSERT INTO facts (fact_id, being_id, entity, key, value, category, confidence, activation,"
        " importance, source_episode_ids, valid_at, invalid_at, created_at)"
        " VALUES (?, ?, ?, ?, ?, 'tech', 0.9, 1.53, ?, [?], ?, ?, ?)",
        [
            [fid, being, entity, key, value, imp, f"ep-{fid}", VALID, NOW if gone else None, NOW]
            for fid, being, entity, key, value, imp, gone in FACTS
        ],
    )
    con.executemany(
        "INSERT INTO relations (relation_id, being_id, subject, predicate, object, weight,"
        " source_episode_ids, valid_at, invalid_at, created_at) VALUES (?, ?, ?, ?, ?, ?, [?], ?, ?, ?)",
        [
            [rid, being, s, p, o, w, f"ep-{rid}", VALID, NOW if gone else None, NOW]
            for rid, being, s, p, o, w, gone in RELATIONS
        ],
    )
    con.executemany(
        "INSERT INTO aliases (being_id, alias, entity, created_at) VALUES (?, ?, ?, ?)",
        [[being, alias, entity, NOW] for being, alias, entity in ALIASES],
    )


@pytest.fixture
def published(con, settings):
    """ada's and bram's graphs in DuckDB, published once; yields the LanceDB folder."""
    seed(con)
    report = graph.publish_graph(con, lance.connect(settings.lance_path), now=NOW)
    assert report.upserted > 0
    return settings.lance_path


def ids(rows: list[dict], column: str) -> list[str]:
    return [r[column] for r in rows]


# --------------------------------------------------------------------------- traversal


def test_depth_1_gives_the_entitys_facts_its_relations_and_its_neighbours(published):
    got = graph.neighbourhood(published, "ada", "ledgerline", depth=1)
    assert got["entity"] == "ledgerline"
    # Both spellings of ledgerline; the invalidated Java fact is gone. Most important first.
    assert ids(got["facts"], "fact_id") == ["fa-lang", "fa-owner"]
    assert ids(got["relations"], "relation_id") == ["ra-uses", "ra-depends"]
    assert got["neighbours"] == ["DuckDB", "OAuth PKCE"]
    lang = got["facts"][0]
    assert (lang["being_id"], lang["entity_key"], lang["key"], lang["value"]) == (
        "ada",
        "ledgerline",
        "language",
        "Python",
    )
    assert lang["activation"] == pytest.approx(1.5)  # rounded, so daily decay drift rewrites nothing
    assert lang["tier"] == "warm"
    assert lang["valid_at"] == VALID
    assert lang["source_episode_ids"] == ["ep-fa-lang"]
    depends = got["relations"][1]
    assert (depends["subject"], depends["predicate"], depends["object"], depends["object_key"]) == (
        "ledgerline",
        "depends-on",
        "OAuth PKCE",
        "oauth pkce",
    )


def test_depth_2_adds_the_neighbours_facts_and_their_relations(published):
    got = graph.neighbourhood(published, "ada", "ledgerline", depth=2)
    assert got["entity"] == "ledgerline"
    # C++ is two hops away: reached by a relation, but its facts are not included.
    assert ids(got["facts"], "fact_id") == ["fa-lang", "fa-owner", "fa-duck", "fa-pkce"]
    assert ids(got["relations"], "relation_id") == ["ra-uses", "ra-depends", "ra-rfc", "ra-cpp"]
    assert got["neighbours"] == ["DuckDB", "OAuth PKCE", "RFC 7636", "C++"]


def test_an_alias_and_any_case_find_the_canonical_entity(published, con, settings):
    by_alias = graph.neighbourhood(published, "ada", "  oauth2 PKCE   FLOW ", depth=1)
    assert by_alias["entity"] == "OAuth PKCE"
    # The fact stored under the alias is folded into the canonical entity.
    assert ids(by_alias["facts"], "fact_id") == ["fa-pkce"]
    assert ids(by_alias["relations"], "relation_id") == ["ra-depends", "ra-rfc"]
    assert by_alias["neighbours"] == ["ledgerline", "RFC 7636"]
    assert by_alias["resolved_by"] == "alias"
    by_name = graph.neighbourhood(published, "ada", "oauth pkce")
    assert by_name["resolved_by"] == "name"
    assert {**by_name, "resolved_by": "alias"} == by_alias

    upper = graph.neighbourhood(published, "ada", "LEDGERLINE")
    assert upper == graph.neighbourhood(published, "ada", "ledgerline")

    # An alias of an alias resolves to the end of the chain.
    con.execute("INSERT INTO aliases VALUES ('ada', 'PKCE', 'OAuth2 PKCE flow', ?)", [NOW])
    graph.publish_graph(con, lance.connect(settings.lance_path), now=NOW)
    assert graph.neighbourhood(published, "ada", "pkce") == by_alias
    assert graph.neighbourhood(published, "ada", "pkce")["resolved_by"] == "alias"


def test_a_being_never_sees_another_beings_graph(published):
    bram = graph.neighbourhood(published, "bram", "ledgerline", depth=2)
    assert ids(bram["facts"], "fact_id") == ["fb-lang"]
    assert ids(bram["relations"], "relation_id") == ["rb-uses"]
    assert bram["neighbours"] == ["SQLite"]
    # The same alias text means another entity for bram.
    assert graph.neighbourhood(published, "bram", "OAuth2 PKCE flow")["entity"] == "Bram Auth"
    assert ids(graph.neighbourhood(published, "bram", "OAuth2 PKCE flow")["facts"], "fact_id") == ["fb-auth"]
    ada = graph.neighbourhood(published, "ada", "ledgerline", depth=2)
    assert not [f for f in ada["facts"] if f["being_id"] != "ada"]
    assert not [r for r in ada["relations"] if r["being_id"] != "ada"]

    for hostile in ("ada' OR '1'='1", "ada' OR being_id = 'bram", "ADA", ""):
        with pytest.raises(MindflowError, match="invalid being id"):
            graph.neighbourhood(published, hostile, "ledgerline")
    # A hostile entity is a quoted literal: it matches nothing as a key, and its words find
    # at most one of ada's own entities.
    got = graph.neighbourhood(published, "ada", "x' OR being_id = 'bram", depth=2)
    assert (got["facts"], got["relations"], got["neighbours"]) == ([], [], [])
    got = graph.neighbourhood(published, "ada", "ledgerline' OR '1'='1", depth=2)
    assert got["resolved_by"] == "words"
    assert {f["being_id"] for f in got["facts"]} == {"ada"}


def test_unknown_entity_and_unpublished_graph_give_empty_lists(published, tmp_path):
    assert graph.neighbourhood(published, "ada", "nothing-like-this", depth=2) == {
        "entity": "nothing-like-this",
        "facts": [],
        "relations": [],
        "neighbours": [],
        "resolved_by": None,
    }
    assert graph.neighbourhood(published, "carol", "ledgerline")["facts"] == []
    for lance_path in (tmp_path / "never-created", tmp_path):
        got = graph.neighbourhood(lance_path, "ada", "ledgerline", depth=2)
        assert (got["facts"], got["relations"], got["neighbours"]) == ([], [], [])


@pytest.mark.parametrize("depth", [0, 3])
def test_depth_other_than_1_or_2_is_refused(published, depth):
    with pytest.raises(ValueError, match="depth must be 1 or 2"):
        graph.neighbourhood(published, "ada", "ledgerline", depth=depth)


# --------------------------------------------------------------------------- publishing


def test_the_published_tables_hold_current_rows_with_aliases_folded_into_keys(published):
    db = lance.connect(published)
    facts = {r["fact_id"]: r for r in db.open_table(graph.FACTS).search().limit(None).to_arrow().to_pylist()}
    assert set(facts) == {fid for fid, *_, gone in FACTS if not gone}
    assert facts["fa-pkce"]["entity"] == "OAuth2 PKCE flow"
    assert facts["fa-pkce"]["entity_key"] == "oauth pkce"
    assert facts["fa-owner"]["entity_key"] == "ledgerline"
    relations = {
        r["relation_id"]: r
        for r in db.open_table(graph.RELATIONS).search().limit(None).to_arrow().to_pylist()
    }
    assert set(relations) == {rid for rid, *_, gone in RELATIONS if not gone}
    assert (relations["ra-rfc"]["subject_key"], relations["ra-rfc"]["object_key"]) == (
        "oauth pkce",
        "rfc 7636",
    )


def test_an_unchanged_graph_publishes_nothing(published, con):
    db = lance.connect(published)
    versions = {name: db.open_table(name).version for name in (graph.FACTS, graph.RELATIONS, graph.ALIASES)}
    report = graph.publish_graph(con, db)
    assert (report.upserted, report.deleted) == (0, 0)
    assert {name: db.open_table(name).version for name in versions} == versions
    assert (report.tables[graph.FACTS].rows, report.tables[graph.RELATIONS].rows) == (7, 5)
    assert report.per_being == {
        "ada": {"facts": 5, "relations": 4, "aliases": 1},
        "bram": {"facts": 2, "relations": 1, "aliases": 1},
    }


def test_an_invalidated_fact_leaves_recall_after_the_next_publish(published, con):
    db = lance.connect(published)
    before = graph.neighbourhood(published, "ada", "ledgerline")
    assert "fa-lang" in ids(before["facts"], "fact_id")

    con.execute("UPDATE facts SET invalid_at = ? WHERE fact_id = 'fa-lang'", [NOW])
    con.execute("UPDATE relations SET invalid_at = ? WHERE relation_id = 'ra-uses'", [NOW])
    con.execute("UPDATE facts SET value = 'Ada and Bram' WHERE fact_id = 'fa-owner'")
    report = graph.publish_graph(con, db)
    assert (report.tables[graph.FACTS].deleted, report.tables[graph.RELATIONS].deleted) == (1, 1)
    assert report.tables[graph.FACTS].upserted == 1  # the changed owner, nothing else

    # The same reader sees the new table versions without a restart.
    after = graph.neighbourhood(published, "ada", "ledgerline")
    assert ids(after["facts"], "fact_id") == ["fa-owner"]
    assert after["facts"][0]["value"] == "Ada and Bram"
    assert ids(after["relations"], "relation_id") == ["ra-depends"]
    assert after["neighbours"] == ["OAuth PKCE"]
    assert db.open_table(graph.FACTS).count_rows(lance.where(fact_id="fa-lang")) == 0
    assert con.execute("SELECT count(*) FROM published_graph WHERE ref = 'fa-lang'").fetchone()[0] == 0


def test_a_lancedb_table_removed_by_hand_is_published_again(published, con):
    db = lance.connect(published)
    db.drop_table(graph.RELATIONS)
    report = graph.publish_graph(con, db)
    assert report.tables[graph.RELATIONS].upserted == 5
    assert report.tables[graph.FACTS].upserted == 0
    assert ids(graph.neighbourhood(published, "ada", "ledgerline")["relations"], "relation_id") == [
        "ra-uses",
        "ra-depends",
    ]


# --------------------------------------------------------------------------- the asset


def test_the_facts_graph_asset_reports_what_it_published(settings):
    with store.connect(settings.duckdb_path) as con:
        seed(con)
    resources = {"duckdb": DuckDBResource(), "lancedb": LanceDBResource()}

    def materialized() -> dict:
        from assets.facts import facts_graph

        result = dg.materialize([facts_graph], resources=resources)
        assert result.success
        (event,) = result.get_asset_materialization_events()
        return {k: v.value for k, v in event.materialization.metadata.items()}

    first = materialized()
    assert (first["dagster/row_count"], first["upserted"], first["deleted"]) == (14, 14, 0)
    assert (first["facts_rows"], first["relations_rows"], first["aliases_rows"]) == (7, 5, 2)
    second = materialized()
    assert (second["dagster/row_count"], second["upserted"], second["deleted"]) == (14, 0, 0)
