"""Memories as records: GET one, list them page by page, their history, from a real pipeline.

Ingest, patrol (with a scripted patrol model on 127.0.0.1 for ❹ merges and ❻ splits), a
recall over real HTTP, a second patrol that folds it, then decay: every history row read
here was written by the real steps, published by the `memories` asset, and read through
the API, the client and the CLI.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path

import duckdb
import httpx
import lancedb
import pyarrow as pa
import pytest
from llm_server import LLMServer, _nodes, _system, fake_model
from typer.testing import CliRunner

from mindflow import lance, memories, memory_history, store
from mindflow.api import create_app
from mindflow.api.server import BackgroundServer
from mindflow.client import AsyncMindflowClient, MindflowClient, MindflowClientError
from mindflow.config import Settings, load_settings
from mindflow.inbox import ingest
from mindflow.loop.marks import append_marks, new_mark
from mindflow.patrol import run_patrol
from mindflow.runner import run_job

TOKEN = "tok-all"
WORK = [
    "Lena fixed the flaky Postgres migration test in ledgerline",
    "Lena reviewed the CSV importer pull request and asked for smaller commits",
    "The Friday release of ledgerline went out without drama",
    "Lena switched the login of ledgerline to OAuth with PKCE",
    "DuckDB now builds the monthly reconciliation report in seconds",
    "Lena paired with Tom on the payments reconciliation edge cases",
    "A customer reported duplicated invoices after the importer change",
    "Lena wrote a runbook for the nightly reconciliation job",
    "The staging database ran out of disk during the load test",
    "Lena asked for a code review checklist for the team",
    "The reconciliation service got a health check endpoint",
    "Lena planned the migration of the reporting job to DuckDB",
    "The team agreed to ship smaller pull requests",
    "Lena found the parser bug that dropped trailing commas",
]
# Importance 0.05: dying in the first patrol (0.05 * e^(-1/30) <= 0.05).
FADING = ["Lena mentioned the office plant needs water", "Lena said the coffee machine is loud"]
DAILY = """# 2026-10-20
- [i=0.3] The printer on the third floor jammed twice this morning
- [i=0.3] Lena ate lunch at the noodle place near the station
"""
BRAM = [
    "Tomas signed up for the Porto half marathon in March",
    "Tomas prefers running in the early morning",
    "Miso the cat started a chicken-free diet",
]


def patrol_model(received):
    """Roots: all Business. ❹: the oldest dying node absorbs the oldest fresh one (so ❺ revives it).
    ❻ (fake_model): the two newest memories become a sub-cluster, which ❼ merges back."""
    system = _system(received)
    nodes = _nodes(received)
    if system.startswith("You sort a being's memories"):
        return {"labels": [{"node_id": n["node_id"], "root": "Business"} for n in nodes]}
    if system.startswith("You consolidate one cluster"):
        dying = [n["node_id"] for n in nodes if n["status"] == "dying"]
        fresh = [n["node_id"] for n in nodes if n.get("fresh") and n["status"] == "active"]
        merges = [{"survivor": dying[0], "absorbed": [fresh[0]]}] if dying and fresh else []
        return {"merges": merges, "make_dead": []}
    return fake_model(received)


def write_inbox(settings: Settings) -> None:
    ada = settings.inbox / "ada"
    ada.mkdir(parents=True)
    lines = [
        {
            "id": f"w{i:02d}",
            "ts": f"2026-10-{i + 1:02d}T09:00:00Z",
            "speaker": "Lena",
            "text": t,
            "importance": 0.6,
        }
        for i, t in enumerate(WORK)
    ] + [
        {"id": f"f{i}", "ts": f"2026-10-2{i + 2}T18:00:00Z", "speaker": "Lena", "text": t, "importance": 0.05}
        for i, t in enumerate(FADING)
    ]
    (ada / "work.jsonl").write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    (ada / "2026-10-20.md").write_text(DAILY)
    bram = settings.inbox / "bram"
    bram.mkdir(parents=True)
    rows = [{"id": f"b{i}", "ts": f"2026-10-0{i + 1}T07:00:00Z", "text": t} for i, t in enumerate(BRAM)]
    (bram / "bram.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")


@dataclass
class World:
    settings: Settings
    url: str
    runs: dict[str, list[str]]  # job -> run ids
    recalled: list[str]  # refs the recall between the patrols returned

    def duck(self, sql: str, params=None) -> list[tuple]:
        with store.connect(self.settings.duckdb_path, read_only=True) as con:
            return con.execute(sql, params or []).fetchall()


@pytest.fixture(scope="module")
def world(tmp_path_factory, models_dir):
    home = tmp_path_factory.mktemp("records") / "home"
    home.mkdir()
    server = LLMServer()
    server.responder = patrol_model
    with pytest.MonkeyPatch.context() as mp:
        for name, value in {
            "MINDFLOW_HOME": str(home),
            "DAGSTER_HOME": str(home / "dagster"),
            "MINDFLOW_MODELS_DIR": str(models_dir),
            "MINDFLOW_LLM_BASE_URL": server.url,
            "OPENAI_API_KEY": "sk-test-SECRET-openai-0000",
            "MINDFLOW_LLM_TIMEOUT_S": "5",
            "MINDFLOW_LLM_RETRY_BACKOFF_S": "0.01",
            "MINDFLOW_LLM_PATROL": "openai:gpt-4o",
        }.items():
            mp.setenv(name, value)
        mp.delenv("MINDFLOW_LLM", raising=False)
        settings = load_settings()
        write_inbox(settings)
        runs: dict[str, list[str]] = {}

        def run(job: str) -> None:
            summaries = run_job(settings, job)
            assert summaries and all(s.success for s in summaries), summaries
            runs.setdefault(job, []).extend(s.run_id for s in summaries)

        run("ingest")
        run("patrol")
        app = create_app(settings, tokens={TOKEN: "*"})
        with BackgroundServer(app) as api:
            headers = {"Authorization": f"Bearer {TOKEN}"}
            answer = httpx.post(
                f"{api.url}/v1/beings/ada/recall", json={"query": "parser bug trailing commas", "k": 2},
                headers=headers, timeout=30,
            )  # fmt: skip
            assert answer.status_code == 200, answer.text
            recalled = [m["memory_ref"] for m in answer.json()["memories"]]
            assert recalled
            run("patrol")  # folds the recall: reinforced
            run("decay")  # the daily-log entries are past their 7 days: archived
            yield World(settings, api.url, runs, recalled)
    server.close()


@pytest.fixture
def http(world):
    with httpx.Client(base_url=world.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as client:
        yield client


def ref_of(world: World, text: str, being: str = "ada") -> str:
    rows = world.duck("SELECT node_id FROM nodes WHERE being_id = ? AND scene.action = ?", [being, text])
    assert len(rows) == 1, (text, rows)
    return rows[0][0]


def all_pages(http, being: str, **params) -> list[dict]:
    out, cursor = [], None
    while True:
        query = {**params, **({"cursor": cursor} if cursor else {})}
        response = http.get(f"/v1/beings/{being}/memories", params=query)
        assert response.status_code == 200, response.text
        page = response.json()
        assert len(page["memories"]) <= params.get("limit", 50)
        out += page["memories"]
        cursor = page["next_cursor"]
        if cursor is None:
            return out


# --------------------------------------------------------------------------- GET one


def test_get_memory_has_scene_statuses_sources_and_times(http, world):
    survivor = ref_of(world, FADING[0])  # dying, absorbed a fresh node, revived by ❺
    got = http.get(f"/v1/beings/ada/memories/{survivor}")
    assert got.status_code == 200, got.text
    memory = got.json()
    node = world.duck(
        "SELECT n.status, n.cluster_id, n.pinned, n.importance, n.source_episode_ids, n.created_at, "
        "d.status, d.score FROM nodes n JOIN decay_scores d ON d.memory_ref = n.node_id WHERE n.node_id = ?",
        [survivor],
    )[0]
    status, cluster, pinned, importance, sources, created, decay_status, score = node
    assert memory["memory_ref"] == survivor and memory["being_id"] == "ada"
    assert memory["text"] == FADING[0] == memory["scene"]["action"]
    assert memory["scene"]["actors"] == ["Lena"]
    # The absorbed memory's day joined the survivor's `when`, with its action.
    assert memory["scene"]["when"][0] == {"date": "2026-10-22", "action": None}
    assert len(memory["scene"]["when"]) == 2 and memory["scene"]["when"][1]["action"]
    assert memory["source_episode_ids"] == sources and len(sources) == 2
    assert (memory["cluster_id"], memory["pinned"]) == (cluster, pinned)
    assert memory["importance"] == pytest.approx(importance, abs=1e-6) == pytest.approx(0.1)
    assert memory["decay_status"] == decay_status and memory["decay_score"] == pytest.approx(round(score, 1))
    # The patrol revived it; decay found it dormant (0.1 * 0.8 = 0.08): what recall filters on.
    assert status == "active" and decay_status == "dormant" and memory["status"] == "dormant"
    assert memory["ts"] == "2026-10-22T18:00:00Z"
    assert memory["created_at"] == created.isoformat() + "Z"
    assert memory["last_activated"] is None and memory["reactivation_count"] == 0

    recalled = http.get(f"/v1/beings/ada/memories/{world.recalled[0]}").json()
    assert recalled["reactivation_count"] == 1 and recalled["last_activated"] is not None


def test_unknown_and_other_beings_refs_are_the_same_404(http, world):
    bram_ref = ref_of(world, BRAM[0], "bram")
    assert http.get(f"/v1/beings/bram/memories/{bram_ref}").status_code == 200
    for path in ("", "/history"):
        theirs = http.get(f"/v1/beings/ada/memories/{bram_ref}{path}")
        unknown = http.get(f"/v1/beings/ada/memories/n-000000000000000000000000{path}")
        assert theirs.status_code == unknown.status_code == 404
        assert theirs.json()["error"].replace(bram_ref, "REF") == unknown.json()["error"].replace(
            "n-000000000000000000000000", "REF"
        )
        assert "bram" not in theirs.text and "Tomas" not in theirs.text


# --------------------------------------------------------------------------- list


def test_list_pages_through_every_memory_once_in_a_stable_order(http, world):
    expected = {r[0] for r in world.duck("SELECT node_id FROM nodes WHERE being_id = 'ada'")}
    assert len(expected) == len(WORK) + len(FADING) + 2
    for limit in (1, 4, 500):
        listed = all_pages(http, "ada", limit=limit)
        refs = [m["memory_ref"] for m in listed]
        assert len(refs) == len(set(refs)) and set(refs) == expected  # no duplicate, no gap
        keys = [(m["ts"], m["memory_ref"]) for m in listed]
        assert keys == sorted(keys)
    assert {m["being_id"] for m in all_pages(http, "bram")} == {"bram"}


def published_status(world: World) -> dict[str, str]:
    rows = world.duck(
        "SELECT n.node_id, CASE WHEN n.status = 'archived' OR d.status = 'archived' THEN 'archived' "
        "WHEN n.status = 'dead' THEN 'dead' WHEN d.status = 'dormant' THEN 'dormant' ELSE n.status END "
        "FROM nodes n LEFT JOIN decay_scores d ON d.memory_ref = n.node_id WHERE n.being_id = 'ada'"
    )
    return dict(rows)


def test_list_filters(http, world):
    status = published_status(world)
    # No memory stays dead here: ❺ revives the absorbed one at once (importance 0.6 > 0.05).
    assert {"active", "dormant", "archived"} <= set(status.values())
    for wanted in ("active", "dying", "dormant", "dead", "archived"):
        listed = {m["memory_ref"] for m in all_pages(http, "ada", status=wanted, limit=3)}
        assert listed == {ref for ref, s in status.items() if s == wanted}, wanted
    both = {m["memory_ref"] for m in all_pages(http, "ada", status=["dead", "archived"])}
    assert both == {ref for ref, s in status.items() if s in ("dead", "archived")}
    archived = {ref_of(world, line.split("] ", 1)[1]) for line in DAILY.splitlines()[1:]}
    assert archived <= both

    clusters = dict(world.duck("SELECT node_id, cluster_id FROM nodes WHERE being_id = 'ada'"))
    cluster = clusters[ref_of(world, WORK[0])]
    listed = {m["memory_ref"] for m in all_pages(http, "ada", cluster=cluster, limit=5)}
    assert listed == {ref for ref, c in clusters.items() if c == cluster}

    window = all_pages(http, "ada", since="2026-10-03T00:00:00Z", until="2026-10-05T23:59:59Z", limit=2)
    assert [m["text"] for m in window] == WORK[2:5]
    # A date alone as the upper bound takes the whole day, as "at or before" reads.
    days = all_pages(http, "ada", since="2026-10-03", until="2026-10-05", limit=2)
    assert [m["text"] for m in days] == WORK[2:5]

    for bad in ({"status": "fading"}, {"limit": 0}, {"limit": 501}, {"cursor": "not-a-cursor"}):
        assert http.get("/v1/beings/ada/memories", params=bad).status_code == 422, bad


# --------------------------------------------------------------------------- history


def history(http, ref: str) -> list[dict]:
    response = http.get(f"/v1/beings/ada/memories/{ref}/history")
    assert response.status_code == 200, response.text
    return response.json()["entries"]


def test_history_records_every_change_of_the_real_steps(http, world):
    patrol_runs, decay_runs = set(world.runs["patrol"]), set(world.runs["decay"])
    survivor = ref_of(world, FADING[0])
    entries = history(http, survivor)
    ops = [e["operation"] for e in entries]
    assert ops[:4] == ["formed", "dying", "absorbed", "revived"]
    formed, dying, absorbed, revived = entries[:4]
    assert formed["before"] is None and formed["after"]["status"] == "active"
    assert dying["before"] == {"status": "active"} and dying["after"] == {"status": "dying"}
    assert absorbed["before"] == {"importance": 0.05}
    assert absorbed["after"]["importance"] == pytest.approx(0.1) and len(absorbed["after"]["absorbed"]) == 1
    assert revived["before"] == {"status": "dying"} and revived["after"] == {"status": "active"}
    assert {e["actor"] for e in entries[:4]} == {"patrol"} and {
        e["run_id"] for e in entries[:4]
    } <= patrol_runs
    assert entries[0]["run_id"] == world.runs["patrol"][0]
    # Decay then found it dormant (0.1 * 0.8).
    assert entries[-1]["operation"] == "decay_status" and entries[-1]["actor"] == "decay"
    assert entries[-1]["after"] == {"decay_status": "dormant"} and entries[-1]["run_id"] in decay_runs
    assert [e["ts"] for e in entries] == sorted(e["ts"] for e in entries)

    gone = absorbed["after"]["absorbed"][0]
    merged = [e for e in history(http, gone) if e["operation"] == "merged"]
    assert merged[0]["before"] == {"status": "active"} and merged[0]["after"] == {
        "status": "dead",
        "into": survivor,
    }

    moved = world.duck(
        "SELECT DISTINCT memory_ref FROM history WHERE operation = 'moved' AND being_id = 'ada'"
    )
    assert moved
    moves = [e for e in history(http, moved[0][0]) if e["operation"] == "moved"]
    # ❻ carved a sub-cluster out of the root and ❼ merged it back (two active memories at most).
    assert len(moves) >= 2 and moves[0]["after"]["cluster_id"] == moves[1]["before"]["cluster_id"]
    assert moves[0]["before"]["cluster_id"] == moves[1]["after"]["cluster_id"]

    reinforced = [e for e in history(http, world.recalled[0]) if e["operation"] == "reinforced"]
    assert len(reinforced) == 1 and reinforced[0]["actor"] == "recall"
    assert reinforced[0]["before"] == {"reactivation_count": 0}
    assert reinforced[0]["after"] == {"reactivation_count": 1, "increment": 1, "recalls": 1}
    assert reinforced[0]["run_id"] == world.runs["patrol"][1]

    printer = ref_of(world, "The printer on the third floor jammed twice this morning")
    last = history(http, printer)[-1]
    assert (last["operation"], last["before"], last["after"]) == (
        "decay_status",
        {"decay_status": "active"},
        {"decay_status": "archived"},
    )


def test_history_is_published_once_per_row(world):
    table = lance.connect(world.settings.lance_path).open_table("memory_history")
    ids = table.search().select(["history_id"]).limit(None).to_arrow().column("history_id").to_pylist()
    published = world.duck("SELECT count(*) FROM history WHERE operation <> 'superseded'")[0][0]
    assert len(ids) == len(set(ids)) == published
    assert {i.columns[0] for i in table.list_indices()} == {"being_id", "memory_ref"}


# --------------------------------------------------------------------------- archived never recalled


def test_archived_memories_never_reach_recall_search_or_resonance(http, world):
    archived = {ref for ref, s in published_status(world).items() if s == "archived"}
    assert len(archived) >= 2
    queries = ["printer on the third floor jammed", "lunch at the noodle place near the station"]
    for query in queries:
        for route, body in (
            ("recall", {"query": query, "k": 50}),
            ("resonance", {"query": query}),
            ("search_memory", {"query": query, "k": 50}),
        ):
            answer = http.post(f"/v1/beings/ada/{route}", json=body)
            assert answer.status_code == 200, answer.text
            data = answer.json()
            refs = {m["memory_ref"] for m in data.get("memories", [])} | {
                i["memory"]["memory_ref"] for i in data.get("items", [])
            }
            assert not refs & archived, (route, query)
    for cluster in {m["cluster_id"] for m in all_pages(http, "ada", status="archived")}:
        listed = http.get(f"/v1/beings/ada/clusters/{cluster}/memories", params={"k": 200}).json()
        assert not {m["memory_ref"] for m in listed["memories"]} & archived


# --------------------------------------------------------------------------- client and CLI


def test_client_iterates_every_page(http, world):
    expected = [m["memory_ref"] for m in all_pages(http, "ada")]
    with MindflowClient(world.url, token=TOKEN) as client:
        assert [m.memory_ref for m in client.list_memories("ada", page_size=3)] == expected
        dormant = list(client.list_memories("ada", status="dormant"))
        assert dormant and {m.status for m in dormant} == {"dormant"}
        one = client.get_memory("ada", expected[0])
        assert one.memory_ref == expected[0] and one.ts.tzinfo is None
        assert client.memory_history("ada", expected[0]).entries[0].operation == "formed"
        with pytest.raises(MindflowClientError) as missing:
            client.get_memory("ada", "n-nothing")
        assert missing.value.status == 404

    async def run() -> list[str]:
        async with AsyncMindflowClient(world.url, token=TOKEN) as client:
            refs = [m.memory_ref async for m in client.list_memories("ada", page_size=4)]
            assert (await client.memory_history("ada", refs[0])).memory_ref == refs[0]
            assert (await client.get_memory("ada", refs[1])).memory_ref == refs[1]
            return refs

    assert asyncio.run(run()) == expected


def test_cli_reads_lancedb_without_a_server(world, monkeypatch):
    from mindflow.cli import app

    monkeypatch.setenv("MINDFLOW_HOME", str(world.settings.home))
    runner = CliRunner()
    listed = runner.invoke(app, ["memories", "list", "--being", "ada", "--json"])
    assert listed.exit_code == 0, listed.output
    records = [json.loads(line) for line in listed.stdout.splitlines()]
    assert len(records) == len(WORK) + len(FADING) + 2
    archived = runner.invoke(app, ["memories", "list", "--being", "ada", "--status", "archived"])
    assert archived.exit_code == 0 and "printer on the third floor" in archived.stdout
    # --until with a date alone takes that whole day, as the API does.
    days = runner.invoke(
        app,
        ["memories", "list", "--being", "ada", "--since", "2026-10-03", "--until", "2026-10-05", "--json"],
    )
    assert days.exit_code == 0, days.output
    assert [json.loads(line)["text"] for line in days.stdout.splitlines()] == WORK[2:5]
    survivor = ref_of(world, FADING[0])
    shown = runner.invoke(app, ["memories", "show", survivor, "--being", "ada"])
    assert shown.exit_code == 0 and "dormant" in shown.stdout and FADING[0] in shown.stdout
    # The scene as the design shows it: date — action.
    scene_line = next(line for line in shown.stdout.splitlines() if line.startswith("  scene:"))
    assert re.fullmatch(r"  scene: +\d{4}-\d{2}-\d{2} — " + re.escape(FADING[0]) + ".*", scene_line)
    told = runner.invoke(app, ["memories", "history", survivor, "--being", "ada"])
    assert told.exit_code == 0
    assert [line.split()[2] for line in told.stdout.splitlines()[1:5]] == [
        "formed",
        "dying",
        "absorbed",
        "revived",
    ]
    as_json = runner.invoke(app, ["memories", "history", survivor, "--being", "ada", "--json"])
    assert json.loads(as_json.stdout)["entries"][0]["operation"] == "formed"
    missing = runner.invoke(app, ["memories", "show", ref_of(world, BRAM[0], "bram"), "--being", "ada"])
    assert missing.exit_code == 1 and "has no memory" in missing.output


# --------------------------------------------------------------------------- marks (last: they stay)


def test_marks_apply_at_once_then_fold_into_history(http, world):
    forgotten, pinned, deleted = ref_of(world, WORK[1]), ref_of(world, WORK[2]), ref_of(world, WORK[3])
    append_marks(
        world.settings.loop,
        [
            new_mark("ada", "forget", [forgotten], actor="agent"),
            new_mark("ada", "pin", [pinned]),
            new_mark("ada", "delete", [deleted]),
            new_mark("ada", "forget", [], episode_ids=["w04"]),  # by its episode
        ],
    )
    by_episode = ref_of(world, WORK[4])
    assert http.get(f"/v1/beings/ada/memories/{by_episode}").json()["status"] == "archived"
    got = http.get(f"/v1/beings/ada/memories/{forgotten}").json()
    assert (got["status"], got["decay_status"]) == ("archived", "archived")
    assert http.get(f"/v1/beings/ada/memories/{pinned}").json()["pinned"] is True
    assert http.get(f"/v1/beings/ada/memories/{deleted}").status_code == 404
    assert {forgotten, by_episode} <= {m["memory_ref"] for m in all_pages(http, "ada", status="archived")}
    active = {m["memory_ref"] for m in all_pages(http, "ada", status="active")}
    assert not {forgotten, by_episode, deleted} & active and pinned in active
    assert deleted not in {m["memory_ref"] for m in all_pages(http, "ada", limit=7)}
    gone = http.get(f"/v1/beings/ada/memories/{deleted}/history").json()
    assert gone["deleted"] is True and gone["entries"][-1]["operation"] == "deleted"
    assert gone["entries"][-1]["pending"] is True and WORK[3] not in json.dumps(gone)

    # The next run folds the marks in: the history says who did it.
    from mindflow.loop.fold import fold_marks

    with store.connect(world.settings.duckdb_path) as con:
        fold_marks(con, world.settings, "ada", datetime.now())
        memories.publish(con, lance.connect(world.settings.lance_path))
    last = {ref: history(http, ref)[-1] for ref in (forgotten, pinned)}
    assert last[forgotten]["operation"] == "forgotten" and last[forgotten]["after"] == {"status": "archived"}
    # The pin, then what it brought back: its decay status active again, as decay would record.
    pin, status = history(http, pinned)[-2:]
    assert (pin["operation"], pin["after"]) == ("pinned", {"pinned": True})
    assert (status["operation"], status["after"], status["actor"]) == (
        "decay_status",
        {"decay_status": "active"},
        "user",
    )
    assert http.get(f"/v1/beings/ada/memories/{forgotten}").json()["status"] == "archived"


# --------------------------------------------------------------------------- migrations


OLD_COLUMNS = [
    "memory_ref", "being_id", "kind", "text", "feeling", "themes", "status", "importance", "ts",
    "cluster_id", "source_episode_ids", "pinned", "trigger", "when_dates", "decay_score", "vector",
]  # fmt: skip


def test_a_table_of_the_earlier_schema_is_written_again(settings, con, embedder):
    shutil.copytree(
        Path(__file__).parent.parent / "data" / "samples" / "inbox" / "bram", settings.inbox / "bram"
    )
    ingest(con, settings.inbox, date(2026, 1, 1), date(2026, 12, 31))
    run_patrol(con, "bram", embedder, now=datetime(2026, 11, 1))
    nodes = con.execute("SELECT count(*) FROM nodes").fetchall()[0][0]
    db = lance.connect(settings.lance_path)
    # What the earlier version wrote: its columns, one row, and its published_memories.
    old = {name: pa.array([None], pa.string()) for name in OLD_COLUMNS if name != "vector"}
    old["vector"] = pa.array([[0.0] * 384], pa.list_(pa.float32(), 384))
    db.create_table(memories.TABLE, data=pa.table(old))
    con.execute("INSERT INTO published_memories SELECT node_id, being_id, 'old-hash', now() FROM nodes")
    report = memories.publish(con, db)
    assert report.rebuilt and report.upserted == report.rows == nodes
    table = lancedb.connect(str(settings.lance_path)).open_table(memories.TABLE)
    assert tuple(table.schema.names) == memories.COLUMNS and table.count_rows() == nodes
    assert not memories.publish(con, db).rebuilt


def test_a_publish_killed_between_the_drop_and_its_bookkeeping_loses_nothing(settings, con, embedder):
    # A rebuild drops the tables and clears what they record as published. Killed in between,
    # the next publish must find nothing published, not a record of rows no table holds.
    shutil.copytree(
        Path(__file__).parent.parent / "data" / "samples" / "inbox" / "bram", settings.inbox / "bram"
    )
    ingest(con, settings.inbox, date(2026, 1, 1), date(2026, 12, 31))
    run_patrol(con, "bram", embedder, now=datetime(2026, 11, 1))
    db = lance.connect(settings.lance_path)
    first = memories.publish(con, db)
    history_rows = first.history.appended
    assert first.upserted == first.rows > 0 and history_rows > 0
    for table in (memories.TABLE, memory_history.TABLE):
        db.drop_table(table)  # the bookkeeping in DuckDB still says every row is published
    again = memories.publish(con, db)
    assert again.upserted == again.rows == first.rows
    assert again.history.appended == history_rows
    assert lance.open_table(db, memory_history.TABLE).count_rows() == history_rows


def test_migration_17_keeps_history_without_its_key(con):
    # A database of version 16: history keyed by history_id, holding rows in the order written.
    con.execute("DROP TABLE history")
    con.execute(
        "CREATE TABLE history (history_id VARCHAR PRIMARY KEY, ts TIMESTAMP NOT NULL, memory_ref VARCHAR NOT NULL, "
        "being_id VARCHAR NOT NULL, operation VARCHAR NOT NULL, before JSON, after JSON, run_id VARCHAR, "
        "actor VARCHAR)"
    )
    rows = [
        (
            f"h-{i}",
            datetime(2026, 1, 3),
            f"n{i % 3}",
            "ada",
            "dying",
            None,
            '{"decay_status": "fading"}',
            None,
            "decay",
        )
        for i in (5, 1, 4, 2, 3)
    ]
    con.executemany("INSERT INTO history VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    con.execute("DELETE FROM schema_version WHERE version = 17")
    keyed = "SELECT count(*) FROM duckdb_constraints() WHERE table_name = 'history' AND constraint_type = 'PRIMARY KEY'"
    assert con.execute(keyed).fetchone()[0] == 1
    assert store.migrate(con) == 1
    assert con.execute(keyed).fetchone()[0] == 0
    # Every row kept, in the order written (what memory_history publishes them by), with its types.
    assert con.execute("SELECT * FROM history ORDER BY rowid").fetchall() == [
        (r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8]) for r in rows
    ]
    assert con.execute("SELECT after->>'decay_status' FROM history LIMIT 1").fetchone()[0] == "fading"
    with pytest.raises(duckdb.ConstraintException):  # what a writer must still give
        con.execute(
            "INSERT INTO history (history_id, ts, memory_ref, being_id, operation) VALUES ('h-9', now(), 'n1', 'ada', NULL)"
        )
    # Migrating again (a run killed after the copy committed) changes nothing.
    con.execute("DELETE FROM schema_version WHERE version = 17")
    assert store.migrate(con) == 1
    assert con.execute("SELECT history_id FROM history ORDER BY rowid").fetchall() == [(r[0],) for r in rows]


def test_migration_18_keeps_published_history_without_its_key(con):
    con.execute("DROP TABLE published_history")
    con.execute(
        "CREATE TABLE published_history (history_id VARCHAR PRIMARY KEY, being_id VARCHAR NOT NULL, "
        "seq BIGINT NOT NULL, published_at TIMESTAMP NOT NULL)"
    )
    rows = [(f"h-{i}", "ada", seq, datetime(2026, 1, 3)) for seq, i in enumerate((5, 1, 4), start=1)]
    con.executemany("INSERT INTO published_history VALUES (?, ?, ?, ?)", rows)
    con.execute("DELETE FROM schema_version WHERE version = 18")
    assert store.migrate(con) == 1
    keyed = "SELECT count(*) FROM duckdb_constraints() WHERE table_name = 'published_history' AND constraint_type = 'PRIMARY KEY'"
    assert con.execute(keyed).fetchone()[0] == 0
    assert con.execute("SELECT * FROM published_history ORDER BY rowid").fetchall() == rows


def test_migration_7_adds_the_actor_and_formed_rows(con):
    con.execute(
        "INSERT INTO nodes (node_id, being_id, importance, source_episode_ids, created_at, updated_at, cluster_id) "
        "VALUES ('n1', 'ada', 0.5, ['e1'], TIMESTAMP '2026-01-02', TIMESTAMP '2026-01-02', 'c1')"
    )
    # A database of version 6: no actor, no published_history.
    con.execute("ALTER TABLE history DROP COLUMN actor")
    con.execute("DROP TABLE published_history")
    con.execute("DELETE FROM schema_version WHERE version = 7")
    con.execute(
        "INSERT INTO history VALUES ('h-1', TIMESTAMP '2026-01-03', 'n1', 'ada', 'dying', NULL, NULL, NULL)"
    )
    assert store.migrate(con) == 1
    rows = con.execute(
        "SELECT operation, actor, ts, after->>'cluster_id' FROM history ORDER BY ts"
    ).fetchall()
    assert rows == [
        ("formed", "patrol", datetime(2026, 1, 2), "c1"),
        ("dying", "patrol", datetime(2026, 1, 3), None),
    ]
    assert con.execute("SELECT count(*) FROM published_history").fetchall()[0][0] == 0
