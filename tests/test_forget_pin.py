"""Forget (find, then confirm), restore and pin over real HTTP, and what the next runs make of them.

A real uvicorn server on 127.0.0.1 over a real pipeline (DuckDB, LanceDB, the model); a second
app on the same MINDFLOW_HOME stands for another server process: it shares only the files.
"""

from __future__ import annotations

import json
from datetime import date, datetime

import httpx
import pytest

from mindflow import lance, store
from mindflow.api import create_app
from mindflow.api.server import BackgroundServer
from mindflow.config import Settings
from mindflow.core_memory import build_core_memory
from mindflow.decay import run_decay
from mindflow.graph import publish_graph
from mindflow.inbox import ingest
from mindflow.loop.fold import fold_marks
from mindflow.loop.marks import read_marks
from mindflow.loop.proposals import ProposalStore
from mindflow.memories import publish
from mindflow.patrol import run_patrol
from mindflow.recall import RecallConfig

NOW = datetime(2026, 3, 1, 6, 0)
TOKEN = "token-for-the-loop"
ADA = [
    ("a01", "2026-01-05T09:00:00Z", "Lena's sister Maja had knee surgery at the Vienna clinic.", "event"),
    ("a02", "2026-01-12T09:00:00Z", "Lena adopted a grey cat called Pixel from the shelter.", "event"),
    ("a03", "2026-01-20T09:00:00Z", "Lena decided to learn the cello this spring.", "decision"),
    ("a04", "2026-02-02T09:00:00Z", "Lena's favourite tea is smoked lapsang souchong.", "preference"),
]
BRAM = [("b01", "2026-01-10T07:00:00Z", "Tomas keeps his bicycle in the cellar.", "fact")]


def _write(settings: Settings, being: str, rows) -> None:
    path = settings.inbox / being / "episodes.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"id": i, "ts": ts, "speaker": "Lena", "text": t, "kind": k}) for i, ts, t, k in rows]
    path.write_text("\n".join(lines) + "\n")


def _publish(settings: Settings) -> None:
    with store.connect(settings.duckdb_path) as con:
        publish(con, lance.connect(settings.lance_path), now=NOW)
        publish_graph(con, lance.connect(settings.lance_path), now=NOW)


def _fold(settings: Settings, being: str = "ada"):
    with store.connect(settings.duckdb_path) as con:
        report = fold_marks(con, settings, being, NOW, run_id="test-run")
        publish(con, lance.connect(settings.lance_path), now=NOW)
        publish_graph(con, lance.connect(settings.lance_path), now=NOW)
    return report


@pytest.fixture
def world(tmp_path, embedder, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("MINDFLOW_HOME", str(home))
    settings = Settings(home=home, _env_file=None)
    _write(settings, "ada", ADA)
    _write(settings, "bram", BRAM)
    with store.connect(settings.duckdb_path) as con:
        ingest(con, settings.inbox, date(2026, 1, 1), date(2026, 12, 31))
        for being in ("ada", "bram"):
            run_patrol(con, being, embedder, now=NOW)
        # A fact drawn from the surgery episode, as extraction with a model would store it.
        con.execute(
            "INSERT INTO facts (fact_id, being_id, entity, key, value, category, source_episode_ids, "
            "valid_at, created_at) VALUES ('f-surgery', 'ada', 'Maja', 'surgery', 'knee, Vienna clinic', "
            "'health', ['a01'], ?, ?)",
            [NOW, NOW],
        )
    _publish(settings)
    table = lance.connect(settings.lance_path).open_table("memories")
    rows = table.search().select(["memory_ref", "source_episode_ids"]).limit(None).to_arrow().to_pylist()
    refs = {r["source_episode_ids"][0]: r["memory_ref"] for r in rows}
    config = RecallConfig.for_model(settings.embedding_model, min_similarity=0.1)
    apps = [create_app(settings, recall_config=config, tokens={TOKEN: "*"}) for _ in range(2)]
    with BackgroundServer(apps[0]) as one, BackgroundServer(apps[1]) as two:
        clients = [
            httpx.Client(base_url=s.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)
            for s in (one, two)
        ]
        yield settings, refs, clients
        for c in clients:
            c.close()


def _recalled(client, query: str, being: str = "ada") -> list[str]:
    response = client.post(f"/v1/beings/{being}/recall", json={"query": query, "k": 10})
    assert response.status_code == 200, response.text
    return [m["memory_ref"] for m in response.json()["memories"]]


def _searched(client, query: str) -> list[str]:
    response = client.post("/v1/beings/ada/search_memory", json={"query": query, "k": 10})
    assert response.status_code == 200, response.text
    return [m["memory_ref"] for m in response.json()["memories"]]


def test_forget_finds_then_confirms_and_every_server_obeys_at_once(world):
    settings, refs, (one, two) = world
    surgery = refs["a01"]
    assert surgery in _recalled(one, "Maja knee surgery")

    found = one.post("/v1/beings/ada/forget", json={"query": "Maja's knee surgery"})
    assert found.status_code == 200, found.text
    body = found.json()
    assert body["status"] == "pending" and body["forgotten"] == []
    stores = {c["ref"]: c["store"] for c in body["candidates"]}
    assert stores[surgery] == "memory"
    assert stores["f-surgery"] == "fact"
    assert refs["a02"] not in stores  # the cat has nothing to do with it
    # Finding changes nothing.
    assert surgery in _recalled(two, "Maja knee surgery")
    assert read_marks(settings.loop, "ada") == []

    confirmed = one.post(
        "/v1/beings/ada/forget",
        json={"proposal_id": body["proposal_id"], "refs": [surgery, "f-surgery"], "confirm": True},
    )
    assert confirmed.status_code == 200, confirmed.text
    assert confirmed.json()["status"] == "approved"
    assert sorted(confirmed.json()["forgotten"]) == sorted([surgery, "f-surgery"])
    for client in (one, two):  # the other server shares only the files
        assert surgery not in _recalled(client, "Maja knee surgery")
        assert surgery not in _searched(client, "surgery")
        resonance = client.post("/v1/beings/ada/resonance", json={"query": "Maja knee surgery"}).json()
        assert surgery not in [i["memory"]["memory_ref"] for i in resonance["items"]]
        facts = client.get("/v1/beings/ada/facts", params={"entity": "Maja"}).json()
        assert "f-surgery" not in [f["fact_id"] for f in facts["facts"]]
    assert refs["a02"] in _recalled(two, "grey cat from the shelter")

    # A confirm of a proposal already applied: 409, nothing changes.
    again = one.post("/v1/beings/ada/forget", json={"proposal_id": body["proposal_id"], "confirm": True})
    assert again.status_code == 409, again.text
    assert len(read_marks(settings.loop, "ada")) == 1


def test_forget_offers_memories_holding_the_words_whole_not_inside_other_words(world, embedder):
    settings, _, (one, _) = world
    kim = [
        ("k01", "2026-02-20T10:00:00Z", "My bank PIN is 2468.", "fact"),
        (
            "k02",
            "2026-02-20T11:00:00Z",
            "We spent the evening flipping burgers at the Nordbank summer party.",
            "event",
        ),
        ("k03", "2026-02-21T09:00:00Z", "The bank sent two new PINs for the cards.", "event"),
    ]
    _write(settings, "kim", kim)
    with store.connect(settings.duckdb_path) as con:
        ingest(con, settings.inbox, date(2026, 1, 1), date(2026, 12, 31))
        run_patrol(con, "kim", embedder, now=NOW)
    _publish(settings)
    found = one.post("/v1/beings/kim/forget", json={"query": "bank PIN"})
    assert found.status_code == 200, found.text
    texts = sorted(c["text"] for c in found.json()["candidates"] if c["store"] == "memory")
    # "pin" is not in "flipping", nor "bank" in "Nordbank"; a plural holds its noun.
    assert texts == ["My bank PIN is 2468.", "The bank sent two new PINs for the cards."]


def test_a_forget_of_two_words_weighs_the_rare_one_and_a_common_one_alone_offers_nothing(world, embedder):
    """Half of "passport number" is "number": counted plainly, every memory with "numbers" was
    offered, and a confirm of all candidates forgot them with the passport."""
    settings, _, (one, _) = world
    lou = [
        ("l01", "2026-02-20T10:00:00Z", "My passport number is X1234567.", "fact"),
        ("l02", "2026-02-20T11:00:00Z", "The same-day numbers came in above target.", "event"),
        ("l03", "2026-02-21T09:00:00Z", "Today's numbers look fine for the team.", "event"),
        ("l04", "2026-02-21T10:00:00Z", "Write down the line number and the reason.", "task"),
        ("l05", "2026-02-22T10:00:00Z", "Lou learnt the cello at the music school.", "event"),
    ]
    _write(settings, "lou", lou)
    with store.connect(settings.duckdb_path) as con:
        ingest(con, settings.inbox, date(2026, 1, 1), date(2026, 12, 31))
        run_patrol(con, "lou", embedder, now=NOW)
    _publish(settings)

    def offered(query: str) -> list[str]:
        found = one.post("/v1/beings/lou/forget", json={"query": query})
        assert found.status_code == 200, found.text
        return sorted(c["text"] for c in found.json()["candidates"] if c["store"] == "memory")

    assert offered("passport number") == ["My passport number is X1234567."]
    # A word no memory holds weighs nothing: the other one says which memory is meant.
    assert offered("the cello plan") == ["Lou learnt the cello at the music school."]
    # Two words as rare as each other still count half each.
    assert offered("passport cello") == [
        "Lou learnt the cello at the music school.",
        "My passport number is X1234567.",
    ]


def test_a_run_that_started_before_the_forget_does_not_bring_it_back(world):
    settings, refs, (one, two) = world
    surgery = refs["a01"]
    proposal = one.post("/v1/beings/ada/forget", json={"refs": [surgery]}).json()
    one.post("/v1/beings/ada/forget", json={"proposal_id": proposal["proposal_id"], "confirm": True})
    # A publish by a run that read DuckDB before the forget puts the memory back in LanceDB...
    _publish(settings)
    assert surgery not in _recalled(two, "Maja knee surgery")
    # ...and the next runs fold the tombstone in: archived for good, decay keeps it at 0.
    report = _fold(settings)
    assert report.forgotten == 1 and report.facts_forgotten == 1  # the fact drawn from its episode
    with store.connect(settings.duckdb_path) as con:
        run_decay(con, datetime(2026, 3, 2))
        status, forgotten = con.execute(
            "SELECT status, forgotten_at IS NOT NULL FROM nodes WHERE node_id = ?", [surgery]
        ).fetchone()
        decay = con.execute(
            "SELECT score, status FROM decay_scores WHERE memory_ref = ?", [surgery]
        ).fetchone()
        history = con.execute(
            "SELECT operation, before ->> 'status', after ->> 'status', run_id FROM history "
            "WHERE memory_ref = ? AND operation = 'forgotten'",
            [surgery],
        ).fetchall()
        audit = con.execute(
            "SELECT action, actor, approval FROM audit_log WHERE summary LIKE 'ada: 1 memories%forgotten'"
        ).fetchall()
        text = build_core_memory(con, settings, "ada")
    assert (status, forgotten) == ("archived", True)
    assert decay == (0.0, "archived")
    assert history == [("forgotten", "active", "archived", "test-run")]
    assert audit == [("ARCHIVE", "user", "user")]
    memory_md = (settings.workspace / "ada" / "MEMORY.md").read_text()
    assert "surgery" not in memory_md and text.tokens > 0
    assert "Critical Facts" in memory_md
    log = (settings.workspace / "meta" / "audit.log").read_text()
    assert "| ARCHIVE | table:nodes | user | user | ada: 1 memories and 1 facts forgotten" in log
    assert _fold(settings).changed == 0  # idempotent


def test_restore_undoes_a_soft_forget(world):
    settings, refs, (one, two) = world
    cat = refs["a02"]

    def forget_cat() -> None:
        proposal = one.post("/v1/beings/ada/forget", json={"query": "grey cat Pixel"}).json()
        assert cat in [c["ref"] for c in proposal["candidates"]]
        body = {"proposal_id": proposal["proposal_id"], "refs": [cat], "confirm": True}
        assert one.post("/v1/beings/ada/forget", json=body).status_code == 200
        assert cat not in _recalled(two, "grey cat from the shelter")

    # Restored before any run archived it: back at once, on every server.
    forget_cat()
    assert two.post(f"/v1/beings/ada/memories/{cat}/restore").status_code == 200
    assert cat in _recalled(one, "grey cat from the shelter")
    # Restored after a run archived it: back with the next run, in its status before.
    forget_cat()
    assert _fold(settings).forgotten == 1
    assert two.post(f"/v1/beings/ada/memories/{cat}/restore").status_code == 200
    assert _fold(settings).restored == 1
    assert cat in _recalled(one, "grey cat from the shelter")
    with store.connect(settings.duckdb_path) as con:
        assert con.execute("SELECT status FROM nodes WHERE node_id = ?", [cat]).fetchone() == ("active",)
        operations = [
            r[0]
            for r in con.execute(
                "SELECT operation FROM history WHERE memory_ref = ? AND operation IN ('forgotten', 'restored') "
                "ORDER BY rowid",
                [cat],
            ).fetchall()
        ]
    # The first forget and restore came between two runs: on record too.
    assert operations == ["forgotten", "restored", "forgotten", "restored"]
    # Nothing to restore any more.
    assert two.post(f"/v1/beings/ada/memories/{cat}/restore").status_code == 404


def test_a_forget_and_its_restore_between_two_runs_are_both_in_the_history(world):
    """The memory ends as it was, yet both decisions are on record: pending until a run folds
    them in, then history rows in the order they were made, and audit rows."""
    settings, refs, (one, two) = world
    cat, tea = refs["a02"], refs["a04"]

    def history(client, ref: str) -> list[tuple[str, bool, str]]:
        response = client.get(f"/v1/beings/ada/memories/{ref}/history")
        assert response.status_code == 200, response.text
        return [(e["operation"], e["pending"], e["actor"]) for e in response.json()["entries"]]

    proposal = one.post("/v1/beings/ada/forget", json={"refs": [cat]}).json()
    one.post("/v1/beings/ada/forget", json={"proposal_id": proposal["proposal_id"], "confirm": True})
    assert two.post(f"/v1/beings/ada/memories/{cat}/restore").status_code == 200
    assert one.post(f"/v1/beings/ada/memories/{tea}/pin").status_code == 200
    assert two.post(f"/v1/beings/ada/memories/{tea}/unpin").status_code == 200
    # Before any run: the decisions are pending, on every server, after what a run recorded.
    for client in (one, two):
        assert history(client, cat)[-2:] == [("forgotten", True, "user"), ("restored", True, "user")]
        assert history(client, tea)[-2:] == [("pinned", True, "user"), ("unpinned", True, "user")]

    report = _fold(settings)
    assert report.marks == 4 and report.changed == 0  # nothing ends changed...
    with store.connect(settings.duckdb_path) as con:
        rows = con.execute(
            "SELECT memory_ref, operation, before::VARCHAR, after::VARCHAR, run_id FROM history "
            "WHERE run_id = 'test-run' ORDER BY rowid"
        ).fetchall()
        audit = con.execute(
            "SELECT action, summary FROM audit_log WHERE run_id = 'test-run' ORDER BY rowid"
        ).fetchall()
        assert con.execute("SELECT status, pinned FROM nodes WHERE node_id = ?", [cat]).fetchone() == (
            "active",
            False,
        )
    # ...yet every decision is a history row, in the order it was made,
    assert rows == [
        (cat, "forgotten", '{"status":"active"}', '{"status":"archived"}', "test-run"),
        (cat, "restored", '{"status":"archived"}', '{"status":"active"}', "test-run"),
        (tea, "pinned", '{"pinned":false}', '{"pinned":true}', "test-run"),
        (tea, "unpinned", '{"pinned":true}', '{"pinned":false}', "test-run"),
    ]
    # and an audit row per kind of change.
    assert audit == [
        ("ARCHIVE", "ada: 1 memories forgotten"),
        ("EDIT", "ada: 1 memories restored"),
        ("EDIT", "ada: 1 memories pinned"),
        ("EDIT", "ada: 1 memories unpinned"),
    ]
    # Published: the same decisions, no longer pending, and nothing twice.
    for client in (one, two):
        assert history(client, cat)[-2:] == [("forgotten", False, "user"), ("restored", False, "user")]
        assert [op for op, pending, _ in history(client, tea)].count("pinned") == 1
        assert not any(pending for _, pending, _ in history(client, tea))
    # A run again, or a later forget after the fold: recorded once each.
    assert _fold(settings).changed == 0
    proposal = one.post("/v1/beings/ada/forget", json={"refs": [cat]}).json()
    one.post("/v1/beings/ada/forget", json={"proposal_id": proposal["proposal_id"], "confirm": True})
    assert history(one, cat)[-3:] == [
        ("forgotten", False, "user"),
        ("restored", False, "user"),
        ("forgotten", True, "user"),
    ]
    assert _fold(settings).forgotten == 1
    assert [op for op, _, _ in history(two, cat)].count("forgotten") == 2
    assert not any(pending for _, pending, _ in history(two, cat))


def test_a_tombstone_folded_before_its_memory_formed_is_caught_up_before_later_decisions(world, embedder):
    from mindflow.loop.marks import append_marks, new_mark
    from mindflow.loop.refs import episode_memory_ref

    settings, _, _ = world
    _write(settings, "ada", [("a05", "2026-02-20T09:00:00Z", "Lena booked a week in Lisbon.", "event")])
    with store.connect(settings.duckdb_path) as con:
        ingest(con, settings.inbox, date(2026, 1, 1), date(2026, 12, 31))
    fresh = episode_memory_ref("ada", "a05")
    append_marks(settings.loop, [new_mark("ada", "forget", [fresh], ["a05"])])
    assert _fold(settings).forgotten == 0  # folded in, but no memory holds the episode yet
    with store.connect(settings.duckdb_path) as con:
        run_patrol(con, "ada", embedder, now=NOW)  # forms it (a run without marks: not archived)
        (ref,) = con.execute(
            "SELECT node_id FROM nodes WHERE list_contains(source_episode_ids, 'a05')"
        ).fetchone()
    append_marks(settings.loop, [new_mark("ada", "pin", [ref], actor="agent")])
    report = _fold(settings)
    assert (report.forgotten, report.pinned) == (1, 1)
    with store.connect(settings.duckdb_path) as con:
        rows = con.execute(
            "SELECT operation, after::VARCHAR, actor FROM history WHERE memory_ref = ? AND run_id = 'test-run' "
            "ORDER BY rowid",
            [ref],
        ).fetchall()
    # The tombstone's effect first (decided before), then the pin.
    assert rows == [("forgotten", '{"status":"archived"}', "user"), ("pinned", '{"pinned":true}', "agent")]


def test_pin_is_visible_at_once_and_the_runs_keep_it_alive(world):
    settings, refs, (one, two) = world
    tea = refs["a04"]
    ask = {"query": "grey cat, cello and tea", "k": 3}
    pinned = one.post(f"/v1/beings/ada/memories/{tea}/pin")
    assert pinned.status_code == 200, pinned.text
    assert pinned.json() == {"being_id": "ada", "ref": tea, "pinned": True}
    memories = two.post("/v1/beings/ada/recall", json={"query": "favourite smoked tea"}).json()["memories"]
    assert {m["memory_ref"]: m["pinned"] for m in memories}[tea] is True
    # Resonance returns the pinned memory first, before better matches of the query.
    resonance = two.post("/v1/beings/ada/resonance", json=ask).json()
    assert resonance["items"][0]["memory"]["memory_ref"] == tea

    assert _fold(settings).pinned == 1
    with store.connect(settings.duckdb_path) as con:
        # Importance so low that the patrol would let it die at once, were it not pinned.
        con.execute("UPDATE nodes SET importance = 0.01, session_count = 300 WHERE being_id = 'ada'")
        from mindflow.patrol import PatrolParams, step_dying

        step_dying(con, "ada", PatrolParams(), NOW)
        statuses = dict(con.execute("SELECT node_id, status FROM nodes WHERE being_id = 'ada'").fetchall())
        run_decay(con, datetime(2027, 6, 1))  # more than a year later
        decay = con.execute("SELECT status, pinned FROM decay_scores WHERE memory_ref = ?", [tea]).fetchone()
        build_core_memory(con, settings, "ada")
    assert statuses[tea] == "active" and statuses[refs["a02"]] == "dying"
    assert decay == ("active", True)
    critical = (settings.workspace / "ada" / "MEMORY.md").read_text().split("## Critical Facts")[1]
    assert "lapsang souchong" in critical

    assert one.post(f"/v1/beings/ada/memories/{tea}/unpin").json()["pinned"] is False
    assert _fold(settings).unpinned == 1

    # A pin brings the dying cat back: its history says so, as patrol and decay would have.
    cat = refs["a02"]
    with store.connect(settings.duckdb_path) as con:
        (was,) = con.execute("SELECT status FROM decay_scores WHERE memory_ref = ?", [cat]).fetchone()
    assert was != "active"
    one.post(f"/v1/beings/ada/memories/{cat}/pin")
    assert _fold(settings).pinned == 1
    # Pin, unpin, pin again between two runs: three decisions, audited in that order.
    one.post(f"/v1/beings/ada/memories/{tea}/pin")
    one.post(f"/v1/beings/ada/memories/{tea}/unpin")
    one.post(f"/v1/beings/ada/memories/{tea}/pin")
    with store.connect(settings.duckdb_path) as con:
        fold_marks(con, settings, "ada", NOW, run_id="pins-again")
        rows = con.execute(
            "SELECT operation, before::VARCHAR, after::VARCHAR FROM history WHERE memory_ref = ? "
            "AND run_id = 'test-run' ORDER BY rowid DESC LIMIT 3",
            [cat],
        ).fetchall()
        audit = con.execute(
            "SELECT summary FROM audit_log WHERE run_id = 'pins-again' ORDER BY rowid"
        ).fetchall()
    assert rows[::-1] == [
        ("pinned", '{"pinned":false}', '{"pinned":true}'),
        ("revived", '{"status":"dying"}', '{"status":"active"}'),
        ("decay_status", f'{{"decay_status":"{was}"}}', '{"decay_status":"active"}'),
    ]
    assert audit == [("ada: 1 memories pinned",), ("ada: 1 memories unpinned",), ("ada: 1 memories pinned",)]


def test_a_forgotten_fresh_memory_reads_archived_at_once_like_a_published_one(world):
    settings, _, (one, two) = world
    posted = one.post(
        "/v1/beings/ada/episodes",
        json={
            "episodes": [
                {
                    "ts": "2026-02-25T09:00:00Z",
                    "speaker": "Lena",
                    "text": "The spare key is under the blue pot.",
                }
            ]
        },
    )
    assert posted.status_code == 200, posted.text
    (fresh,) = [
        m
        for m in one.post("/v1/beings/ada/recall", json={"query": "spare key blue pot"}).json()["memories"]
        if m["fresh"]
    ]
    ref = fresh["memory_ref"]
    proposal = one.post("/v1/beings/ada/forget", json={"refs": [ref]}).json()["proposal_id"]
    assert (
        one.post("/v1/beings/ada/forget", json={"proposal_id": proposal, "confirm": True}).status_code == 200
    )
    for client in (one, two):
        got = client.get(f"/v1/beings/ada/memories/{ref}")
        assert got.status_code == 200, got.text
        assert got.json()["status"] == "archived"
        assert ref not in _recalled(client, "spare key blue pot")
        ops = [e["operation"] for e in client.get(f"/v1/beings/ada/memories/{ref}/history").json()["entries"]]
        assert ops == ["accepted", "forgotten"]
    assert two.post(f"/v1/beings/ada/memories/{ref}/restore").status_code == 200
    assert one.get(f"/v1/beings/ada/memories/{ref}").json()["status"] == "active"


def test_a_fresh_memory_is_accepted_when_the_api_took_it_not_when_it_happened(world):
    """`accepted` dates the write, on the server that took it and on another that read the file."""
    from mindflow.models import utcnow

    settings, _, (one, two) = world
    before = utcnow()
    episode = {"ts": "2026-02-25T09:00:00Z", "speaker": "Lena", "text": "The bike lock code is 3190."}
    assert one.post("/v1/beings/ada/episodes", json={"episodes": [episode]}).status_code == 200
    after = utcnow()
    recalled = one.post("/v1/beings/ada/recall", json={"query": "bike lock code"}).json()["memories"]
    (ref,) = [m["memory_ref"] for m in recalled if m["fresh"]]
    assert one.post(f"/v1/beings/ada/memories/{ref}/pin").status_code == 200
    for client in (one, two):
        entries = _history_of(client, ref)["entries"]
        assert [(e["operation"], e["pending"]) for e in entries] == [("accepted", True), ("pinned", True)]
        accepted, pinned = (datetime.fromisoformat(e["ts"]).replace(tzinfo=None) for e in entries)
        # The file's write time, to the second (some file systems keep no finer time).
        assert before.replace(microsecond=0) <= accepted <= after, (accepted, before, after)
        assert accepted <= pinned


def test_a_forgotten_memory_can_still_be_deleted_for_good(world):
    settings, refs, (one, two) = world
    cat = refs["a02"]
    proposal = one.post("/v1/beings/ada/forget", json={"refs": [cat]}).json()["proposal_id"]
    one.post("/v1/beings/ada/forget", json={"proposal_id": proposal, "confirm": True})
    assert _fold(settings).forgotten == 1  # archived by a run
    # "No, delete it for good": found again, shown as already forgotten, and confirmed permanently.
    found = two.post("/v1/beings/ada/forget", json={"refs": [cat]})
    assert found.status_code == 200, found.text
    (candidate,) = [c for c in found.json()["candidates"] if c["ref"] == cat]
    assert candidate["status"] == "archived"
    body = {"proposal_id": found.json()["proposal_id"], "refs": [cat], "confirm": True, "permanent": True}
    assert two.post("/v1/beings/ada/forget", json=body).status_code == 200
    assert [m.op for m in read_marks(settings.loop, "ada")] == ["forget", "delete"]
    # Once deleted, it is offered no more.
    assert one.post("/v1/beings/ada/forget", json={"refs": [cat]}).status_code == 404


def _history_of(client, ref: str) -> dict:
    response = client.get(f"/v1/beings/ada/memories/{ref}/history")
    assert response.status_code == 200, response.text
    return response.json()


def _forget(client, ref: str, permanent: bool = False) -> None:
    proposal = client.post("/v1/beings/ada/forget", json={"refs": [ref]}).json()["proposal_id"]
    body = {"proposal_id": proposal, "confirm": True, "permanent": permanent}
    assert client.post("/v1/beings/ada/forget", json=body).status_code == 200


def test_every_pending_decision_shows_once_a_permanent_forget_follows(world):
    """Forget, restore, then delete for good, before any run: three decisions, all pending, in order."""
    settings, refs, (one, two) = world
    cat = refs["a02"]
    _forget(one, cat)
    assert two.post(f"/v1/beings/ada/memories/{cat}/restore").status_code == 200
    _forget(two, cat, permanent=True)
    for client in (one, two):
        found = _history_of(client, cat)
        assert found["deleted"] is True
        pending = [(e["operation"], e["actor"]) for e in found["entries"] if e["pending"]]
        assert pending == [("forgotten", "user"), ("restored", "user"), ("deleted", "user")]
        assert [e["operation"] for e in found["entries"]][-3:] == ["forgotten", "restored", "deleted"]
    assert one.get(f"/v1/beings/ada/memories/{cat}").status_code == 404


def test_the_fold_of_a_permanent_forget_reads_deleted_not_forgotten(world):
    """The run that archives a memory a person deleted for good records that decision, once: the
    erase that follows writes no second `deleted` row."""
    from mindflow.loop.erase import erase_all

    settings, refs, (one, two) = world
    cat = refs["a02"]
    _forget(one, cat, permanent=True)
    assert _fold(settings).forgotten == 1  # archived until the forget job erases it
    with store.connect(settings.duckdb_path) as con:
        rows = con.execute(
            "SELECT operation, before::VARCHAR, after::VARCHAR, actor, run_id FROM history "
            "WHERE memory_ref = ? AND run_id = 'test-run' ORDER BY rowid",
            [cat],
        ).fetchall()
        audit = con.execute(
            "SELECT action, summary FROM audit_log WHERE run_id = 'test-run' ORDER BY rowid"
        ).fetchall()
    assert rows == [("deleted", '{"status":"active"}', '{"status":"archived"}', "user", "test-run")]
    assert audit == [("ARCHIVE", "ada: 1 memories deleted")]
    found = _history_of(two, cat)
    assert found["deleted"] is True
    assert [(e["operation"], e["pending"]) for e in found["entries"]][-1] == ("deleted", False)
    assert "forgotten" not in [e["operation"] for e in found["entries"]]

    erase_all(settings, run_id="forget-run")
    with store.connect(settings.duckdb_path) as con:
        deleted = con.execute(
            "SELECT before, after, run_id FROM history WHERE memory_ref = ? AND operation = 'deleted'", [cat]
        ).fetchall()
    assert deleted == [(None, None, "test-run")]  # one decision, one row, without content
    ops = [e["operation"] for e in _history_of(one, cat)["entries"]]
    assert ops.count("deleted") == 1 and ops[-1] == "deleted" and "forgotten" not in ops


def test_history_tells_recalls_and_marks_in_the_order_they_happened(world, embedder):
    """A recall, then a pin, then a run that folds both: the reinforcement comes first, as it
    happened, not after the pin because the run folds marks before recall events."""
    from mindflow.models import utcnow
    from mindflow.patrol import form

    settings, refs, (one, two) = world
    tea = refs["a04"]
    assert tea in _recalled(one, "favourite smoked tea")
    assert one.post(f"/v1/beings/ada/memories/{tea}/pin").status_code == 200
    pending = [(e["operation"], e["pending"]) for e in _history_of(two, tea)["entries"]]
    assert pending[-1] == ("pinned", True)
    with store.connect(settings.duckdb_path) as con:
        form(
            con, "ada", embedder, now=utcnow(), events_dir=settings.events, settings=settings, run_id="form-1"
        )
    _publish(settings)
    entries = _history_of(two, tea)["entries"]
    assert [(e["operation"], e["pending"], e["run_id"]) for e in entries][-2:] == [
        ("reinforced", False, "form-1"),
        ("pinned", False, "form-1"),
    ]
    assert [e["ts"] for e in entries] == sorted(e["ts"] for e in entries)


def test_a_forget_by_query_finds_archived_memories_again_and_agents_still_do_not(world):
    """A forgotten memory a run archived, and one decay archived, are found by their words and
    deleted for good; recall and search_memory still leave both out."""
    settings, refs, (one, two) = world
    cat, tea = refs["a02"], refs["a04"]
    proposal = one.post("/v1/beings/ada/forget", json={"query": "grey cat Pixel"}).json()["proposal_id"]
    one.post("/v1/beings/ada/forget", json={"proposal_id": proposal, "refs": [cat], "confirm": True})
    assert _fold(settings).forgotten == 1  # archived by a run
    with store.connect(settings.duckdb_path) as con:
        run_decay(con, datetime(2026, 3, 2))
        # Decay's retention archived the tea (as it does a daily-log entry past its days).
        con.execute("UPDATE decay_scores SET score = 0, status = 'archived' WHERE memory_ref = ?", [tea])
    _publish(settings)
    assert one.get(f"/v1/beings/ada/memories/{cat}").json()["status"] == "archived"
    assert one.get(f"/v1/beings/ada/memories/{tea}").json()["status"] == "archived"
    # Agents never get them back: not the forgotten one, nor the one decay archived.
    for client in (one, two):
        assert cat not in _searched(client, "grey cat Pixel") and tea not in _searched(client, "lapsang")
        assert cat not in _recalled(client, "grey cat from the shelter")
        assert tea not in _recalled(client, "smoked lapsang souchong tea")
    for query, ref in (("grey cat Pixel", cat), ("smoked lapsang souchong tea", tea)):
        found = two.post("/v1/beings/ada/forget", json={"query": query})
        assert found.status_code == 200, found.text
        statuses = {c["ref"]: c["status"] for c in found.json()["candidates"] if c["store"] == "memory"}
        assert statuses == {ref: "archived"}
        body = {"proposal_id": found.json()["proposal_id"], "refs": [ref], "confirm": True, "permanent": True}
        assert two.post("/v1/beings/ada/forget", json=body).status_code == 200
    assert [m.op for m in read_marks(settings.loop, "ada")] == ["forget", "delete", "delete"]


def test_unknown_and_other_beings_refs_are_404_and_reveal_nothing(world):
    settings, refs, (one, _) = world
    bicycle = refs["b01"]
    unknown = one.post("/v1/beings/ada/forget", json={"refs": ["n-doesnotexist"]})
    other = one.post("/v1/beings/ada/forget", json={"refs": [bicycle]})
    assert unknown.status_code == other.status_code == 404
    assert other.json()["error"].replace(bicycle, "X") == unknown.json()["error"].replace(
        "n-doesnotexist", "X"
    )
    for path in (f"/v1/beings/ada/memories/{bicycle}/pin", f"/v1/beings/ada/memories/{bicycle}/restore"):
        assert one.post(path).status_code == 404
    # One wording for a memory the being does not have, whichever route names it.
    answers = [
        one.get(f"/v1/beings/ada/memories/{bicycle}"),
        one.get(f"/v1/beings/ada/memories/{bicycle}/history"),
        one.post(f"/v1/beings/ada/memories/{bicycle}/pin"),
        one.post(f"/v1/beings/ada/memories/{bicycle}/unpin"),
        other,
    ]
    assert [a.status_code for a in answers] == [404] * 5
    assert {a.json()["error"] for a in answers} == {
        f"being 'ada' has no memory '{bicycle}'; list its memories to find a ref"
    }
    proposal = one.post("/v1/beings/bram/forget", json={"refs": [bicycle]}).json()["proposal_id"]
    stolen = one.post("/v1/beings/ada/forget", json={"proposal_id": proposal, "confirm": True})
    assert stolen.status_code == 404
    assert read_marks(settings.loop, "ada") == [] and read_marks(settings.loop, "bram") == []
    rejected = one.post("/v1/beings/bram/forget", json={"proposal_id": proposal, "confirm": False})
    assert rejected.json()["status"] == "rejected"
    late = one.post("/v1/beings/bram/forget", json={"proposal_id": proposal, "confirm": True})
    assert late.status_code == 409
    assert bicycle in _recalled(one, "bicycle in the cellar", being="bram")
    bad = one.post("/v1/beings/ada/forget", json={"confirm": True, "refs": [refs["a01"]]})
    assert bad.status_code == 422


def test_a_forget_instruction_in_the_conversation_opens_a_pending_proposal(world):
    settings, refs, (one, _) = world
    said = one.post(
        "/v1/beings/ada/episodes",
        json={
            "episodes": [
                {
                    "ts": "2026-03-01T10:00:00Z",
                    "speaker": "Lena",
                    "text": "Please forget about Maja's knee surgery.",
                }
            ]
        },
    )
    assert said.status_code == 200, said.text
    (proposal_id,) = said.json()["forget_proposals"]
    proposal = ProposalStore(settings.proposals).get("ada", proposal_id)
    assert proposal.status == "pending" and proposal.created_by == "user"
    assert refs["a01"] in [c["ref"] for c in proposal.payload["candidates"]]
    # Never applied without a confirm.
    assert read_marks(settings.loop, "ada") == []
    assert refs["a01"] in _recalled(one, "Maja knee surgery")
    listed = one.get("/v1/beings/ada/proposals", params={"status": "pending"}).json()["proposals"]
    assert [p["proposal_id"] for p in listed] == [proposal_id]


def test_a_forget_that_finds_nothing_opens_no_proposal(world):
    from mindflow.client import MindflowClient

    settings, _, (one, _) = world
    found = one.post("/v1/beings/ada/forget", json={"query": "submarine regatta near Antarctica"})
    assert found.status_code == 200, found.text
    assert found.json() == {
        "being_id": "ada",
        "proposal_id": None,
        "status": None,
        "candidates": [],
        "forgotten": [],
        "permanent": False,
    }
    # Nor does a forget instruction naming nothing kept, proposed at ingestion.
    from mindflow.loop.forget import propose_ingested

    line = {
        "id": "z01",
        "ts": "2026-03-02T10:00:00Z",
        "role": "user",
        "text": "Forget about the submarine regatta.",
    }
    (settings.inbox / "ada" / "later.jsonl").write_text(json.dumps(line) + "\n")
    with store.connect(settings.duckdb_path) as con:
        since = datetime.now().replace(microsecond=0)
        ingest(con, settings.inbox, date(2026, 1, 1), date(2026, 12, 31))
        assert propose_ingested(con, settings, since) == []
    with MindflowClient(str(one.base_url), token=TOKEN) as memory:
        nothing = memory.forget("ada", "submarine regatta near Antarctica")
        assert nothing.proposal_id is None and nothing.candidates == []
    assert ProposalStore(settings.proposals).list("ada") == []
    assert one.get("/v1/beings/ada/proposals", params={"status": "pending"}).json()["proposals"] == []


def test_clients_forget_restore_pin(world):
    import asyncio

    from mindflow.client import AsyncMindflowClient, MindflowClient, MindflowClientError

    settings, refs, (one, _) = world
    url = str(one.base_url)
    with MindflowClient(url, token=TOKEN) as memory:
        found = memory.forget("ada", "cello")
        assert [c.ref for c in found.candidates if c.store == "memory"] == [refs["a03"]]
        done = memory.confirm_forget("ada", found.proposal_id)
        assert done.status == "approved" and done.forgotten == [refs["a03"]]
        assert refs["a03"] not in [
            m.memory_ref for m in memory.recall("ada", "learning the cello", k=10).memories
        ]
        with pytest.raises(MindflowClientError) as conflict:
            memory.confirm_forget("ada", found.proposal_id)
        assert conflict.value.status == 409
        assert memory.restore("ada", refs["a03"]).restored
        assert memory.pin("ada", refs["a04"]).pinned
        assert memory.proposals("ada", status="approved").proposals[0].proposal_id == found.proposal_id

    async def agent() -> None:
        async with AsyncMindflowClient(url, token=TOKEN) as memory:
            found = await memory.forget("ada", refs=[refs["a02"]])
            rejected = await memory.reject_forget("ada", found.proposal_id)
            assert rejected.status == "rejected" and rejected.forgotten == []
            assert not (await memory.unpin("ada", refs["a04"])).pinned
            with pytest.raises(MindflowClientError) as missing:
                await memory.pin("ada", "n-nothing")
            assert missing.value.status == 404

    asyncio.run(agent())


def _cli(settings: Settings, *args: str, answer: str = ""):
    import os
    import subprocess
    from pathlib import Path

    exe = Path(__file__).resolve().parent.parent / ".venv" / "bin" / "mindflow"
    env = {**os.environ, "MINDFLOW_HOME": str(settings.home), "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [str(exe), *args],
        env=env,
        cwd=settings.home,
        input=answer,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_forget_asks_first_and_pin(world):
    settings, refs, (one, _) = world

    def cli(*args: str, answer: str = ""):
        return _cli(settings, *args, answer=answer)

    # "n" is the person's decision: recorded as rejected, not an error.
    asked = cli("forget", "--being", "ada", "cello", answer="n\n")
    assert asked.returncode == 0, asked.stderr
    assert refs["a03"] in asked.stdout and "rejected: nothing changed" in asked.stdout
    assert refs["a03"] in _recalled(one, "learning the cello")
    assert [p.status for p in ProposalStore(settings.proposals).list("ada")] == ["rejected"]

    done = cli("forget", "--being", "ada", "cello", "--yes")
    assert done.returncode == 0, done.stderr
    assert refs["a03"] not in _recalled(one, "learning the cello")

    pinned = cli("pin", "--being", "ada", refs["a04"])
    assert pinned.returncode == 0, pinned.stderr
    tea = [m for m in one.post("/v1/beings/ada/recall", json={"query": "smoked tea"}).json()["memories"]]
    assert {m["memory_ref"]: m["pinned"] for m in tea}[refs["a04"]] is True
    missing = cli("pin", "--being", "ada", "n-nothing")
    assert missing.returncode == 1 and "no memory 'n-nothing'" in missing.stderr


def test_cli_forget_with_no_one_to_answer_opens_nothing(world):
    """stdin closed and no --yes: the question cannot be answered, so nothing is forgotten and
    no proposal is left pending for `mindflow status` to list with no word on it."""
    from mindflow.status import proposal_lines

    settings, refs, (one, _) = world
    unanswered = _cli(settings, "forget", "--being", "ada", "cello")  # stdin at its end at once
    assert unanswered.returncode == 1
    assert refs["a03"] in unanswered.stdout  # shown what it would forget
    assert unanswered.stderr.startswith("error: no answer to confirm with")
    assert "pass --yes" in unanswered.stderr and "Traceback" not in unanswered.stderr
    assert ProposalStore(settings.proposals).list("ada") == [] and proposal_lines(settings) == ""
    assert read_marks(settings.loop, "ada") == []
    assert refs["a03"] in _recalled(one, "learning the cello")


def test_a_forget_instruction_in_a_dropped_file_is_proposed_at_ingestion(world):
    from mindflow.loop.forget import propose_ingested
    from mindflow.loop.refs import episode_memory_ref

    settings, refs, (one, _) = world
    path = settings.inbox / "ada" / "later.jsonl"
    turns = [
        ("c01", "2026-03-02T10:00:00Z", "My locker code at the gym is 4471.", "s9"),
        ("c02", "2026-03-02T10:01:00Z", "Scratch that.", "s9"),
        ("c03", "2026-03-02T10:02:00Z", "Forget about the cello plan.", "s9"),
    ]
    path.write_text(
        "\n".join(
            json.dumps({"id": i, "ts": ts, "speaker": "Lena", "role": "user", "text": t, "session_id": s})
            for i, ts, t, s in turns
        )
        + "\n"
    )
    with store.connect(settings.duckdb_path) as con:
        since = datetime.now().replace(microsecond=0)
        ingest(con, settings.inbox, date(2026, 1, 1), date(2026, 12, 31))
        proposals = propose_ingested(con, settings, since)
        again = propose_ingested(con, settings, since)
    by_source = {p.payload["source_episode_id"]: p for p in proposals}
    assert sorted(by_source) == ["c02", "c03"]
    # "Scratch that" names the turn before it; "forget about the cello plan" the cello memory.
    assert [c["ref"] for c in by_source["c02"].payload["candidates"]] == [episode_memory_ref("ada", "c01")]
    assert refs["a03"] in [c["ref"] for c in by_source["c03"].payload["candidates"]]
    assert all(p.status == "pending" for p in proposals)
    assert [p.proposal_id for p in again] == [p.proposal_id for p in proposals]  # once per instruction
    assert len(ProposalStore(settings.proposals).list("ada")) == 2


def test_the_readme_round_trip_runs_as_written(world):
    """The README's remember / recall / pin / forget / restore example, run against a real server."""
    import re
    from pathlib import Path

    settings, _, _ = world
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = readme.split("## The agent's loop", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    config = RecallConfig.for_model(settings.embedding_model)
    with BackgroundServer(create_app(settings, recall_config=config, tokens={"tokA": "*"})) as server:
        exec(compile(code.replace("http://127.0.0.1:8765", server.url), "README.md", "exec"), {})
        with httpx.Client(base_url=server.url, headers={"Authorization": "Bearer tokA"}, timeout=60) as http:
            found = http.post("/v1/beings/ada/recall", json={"query": "gym locker code", "k": 1}).json()
            (memory,) = found["memories"]
            history = http.get(f"/v1/beings/ada/memories/{memory['memory_ref']}/history").json()
    assert memory["text"] == "My locker code at the gym is 4471." and memory["fresh"] and memory["pinned"]
    operations = [(e["operation"], e["pending"]) for e in history["entries"]]
    assert operations == [("accepted", True), ("pinned", True), ("forgotten", True), ("restored", True)]


def test_a_confirm_whose_mark_cannot_be_written_leaves_the_proposal_open(world):
    from mindflow.loop import forget

    settings, refs, (one, _) = world
    proposal = one.post("/v1/beings/ada/forget", json={"refs": [refs["a02"]]}).json()["proposal_id"]
    settings.loop.mkdir(parents=True, exist_ok=True)
    (settings.loop / "ada").write_text("a file where the marks folder belongs")
    with pytest.raises(OSError):
        forget.confirm(settings, "ada", proposal)
    assert ProposalStore(settings.proposals).get("ada", proposal).status == "pending"
    assert refs["a02"] in _recalled(one, "grey cat from the shelter")
    (settings.loop / "ada").unlink()
    # Confirmed again once the disk is fixed: applied, not a 409.
    confirmed = one.post("/v1/beings/ada/forget", json={"proposal_id": proposal, "confirm": True})
    assert confirmed.status_code == 200, confirmed.text
    assert refs["a02"] not in _recalled(one, "grey cat from the shelter")


def test_resonance_returns_a_pinned_memory_first(world):
    settings, refs, (one, two) = world
    cat = refs["a02"]
    ask = {"query": "grey cat and smoked tea", "k": 3}
    first = one.post("/v1/beings/ada/resonance", json=ask).json()["items"][0]["memory"]
    # Unpinned, a fact-like memory (the tea, a preference) leads the block.
    assert first["memory_ref"] == refs["a04"]
    assert one.post(f"/v1/beings/ada/memories/{cat}/pin").status_code == 200
    first = two.post("/v1/beings/ada/resonance", json=ask).json()["items"][0]["memory"]
    assert first["memory_ref"] == cat and first["pinned"]
