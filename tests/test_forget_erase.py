"""The permanent forget: a confirmed delete erased from every store under MINDFLOW_HOME by the `forget` job.

One world per module, built through the real jobs (ingest, patrol, narrative, decay on a local
Dagster instance, the real model) and a real server whose recalls leave events; each test
works on its own copy of that MINDFLOW_HOME.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import duckdb
import httpx
import pytest

from mindflow import audit, lance, store
from mindflow.config import Settings, load_settings
from mindflow.loop import forget
from mindflow.loop.proposals import ProposalStore
from mindflow.runner import run_job

REPO = Path(__file__).resolve().parent.parent
MINDFLOW = REPO / ".venv" / "bin" / "mindflow"
TOKEN = "token-for-erase"
PHRASE = "ZEBRA-7731-QX"
SECRET = f"Note to self: the quokka vault code is {PHRASE}, keep it safe."
ADA = [
    ("a01", "2026-01-05T09:00:00Z", "Lena's sister Maja had knee surgery at the Vienna clinic.", "event"),
    ("a02", "2026-01-05T10:00:00Z", SECRET, "fact"),
    ("a03", "2026-01-05T11:00:00Z", "Lena adopted a grey cat called Pixel from the shelter.", "event"),
    ("a04", "2026-01-12T09:00:00Z", "Lena decided to learn the cello this spring.", "decision"),
    ("a05", "2026-01-20T09:00:00Z", "Lena's favourite tea is smoked lapsang souchong.", "preference"),
]
BRAM = [("b01", "2026-01-10T07:00:00Z", "Tomas keeps his bicycle in the cellar.", "fact")]


def _lines(rows) -> list[str]:
    return [json.dumps({"id": i, "ts": ts, "speaker": "Lena", "text": t, "kind": k}) for i, ts, t, k in rows]


def _write(inbox: Path, being: str, rows, extra: tuple[str, ...] = (), name: str = "episodes.jsonl") -> None:
    path = inbox / being / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join([*_lines(rows), *extra]) + "\n")


def _env(home: Path) -> dict[str, str]:
    return {"MINDFLOW_HOME": str(home), "DAGSTER_HOME": str(home / "dagster")}


def _refs(settings: Settings) -> dict[str, str]:
    """episode id -> memory ref, from LanceDB `memories`."""
    table = lance.connect(settings.lance_path).open_table("memories")
    rows = table.search().select(["memory_ref", "source_episode_ids"]).limit(None).to_arrow().to_pylist()
    return {r["source_episode_ids"][0]: r["memory_ref"] for r in rows}


def _recall(settings: Settings, query: str, being: str = "ada") -> list[str]:
    from mindflow.api import create_app
    from mindflow.api.server import BackgroundServer
    from mindflow.recall import RecallConfig

    config = RecallConfig.for_model(settings.embedding_model, min_similarity=0.1)
    app = create_app(settings, recall_config=config, tokens={TOKEN: "*"})
    with BackgroundServer(app) as server:
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as c:
            response = c.post(f"/v1/beings/{being}/recall", json={"query": query, "k": 10})
            assert response.status_code == 200, response.text
            return [m["memory_ref"] for m in response.json()["memories"]]


@dataclass
class World:
    home: Path
    refs: dict[str, str]


@pytest.fixture(scope="module")
def world(tmp_path_factory, embedder) -> World:
    """Two beings through ingest, patrol, narrative and decay; recalls served, so events exist."""
    home = tmp_path_factory.mktemp("erase") / "home"
    home.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        for k, v in _env(home).items():
            mp.setenv(k, v)
        settings = load_settings()
        # A copy of the secret with a broken time: quarantined, its raw line kept.
        broken = json.dumps({"id": "a99", "ts": "the day before yesterday", "text": SECRET})
        _write(settings.inbox, "ada", ADA, extra=(broken,))
        _write(settings.inbox, "bram", BRAM)
        for job in ("ingest", "patrol", "narrative", "decay"):
            run_job(settings, job)
        refs = _refs(settings)
        assert refs["a02"] in _recall(settings, "quokka vault code")
        assert refs["a03"] in _recall(settings, "grey cat from the shelter")
    return World(home, refs)


@pytest.fixture
def copy(world, home) -> Settings:
    """A private copy of the world's MINDFLOW_HOME (the `home` fixture points the environment at it)."""
    shutil.copytree(world.home, home, dirs_exist_ok=True)
    return load_settings()


def _confirm_permanent(settings: Settings, query: str = "quokka vault code") -> str:
    proposal = forget.propose(settings, "ada", query)
    assert proposal.payload["candidates"], "the forget found nothing"
    decided = forget.confirm(settings, "ada", proposal.proposal_id, permanent=True)
    assert decided.mark is not None and decided.mark.op == "delete"
    return proposal.proposal_id


def _grep(home: Path, phrase: str) -> str:
    """The real grep over every byte under MINDFLOW_HOME: the files that hold the phrase."""
    proc = subprocess.run(["grep", "-r", "-a", "-i", "-l", phrase, str(home)], capture_output=True, text=True)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.stdout


def _duckdb_hits(settings: Settings, phrase: str) -> list[str]:
    con = duckdb.connect(str(settings.duckdb_path), read_only=True)
    try:
        tables = [r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()]
        return [
            t
            for t in tables
            if any(
                phrase.lower() in str(row).lower() for row in con.execute(f'SELECT * FROM "{t}"').fetchall()
            )
        ]
    finally:
        con.close()


def _lance_hits(settings: Settings, phrase: str) -> list[str]:
    db = lance.connect(settings.lance_path)
    return [
        name
        for name in db.table_names()
        if phrase.lower() in str(db.open_table(name).to_arrow().to_pylist()).lower()
    ]


def _git(settings: Settings, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=settings.workspace, capture_output=True, check=True
    ).stdout.decode("utf-8", "replace")


def _everything_gone(settings: Settings) -> None:
    for phrase in (PHRASE, "quokka vault"):
        assert _grep(settings.resolved_home, phrase) == "", f"{phrase!r} still under MINDFLOW_HOME"
        assert _duckdb_hits(settings, phrase) == []
        assert _lance_hits(settings, phrase) == []
        assert phrase.lower() not in _git(settings, "log", "--all", "-p").lower()
        objects = subprocess.run(
            ["git", "cat-file", "--batch-all-objects", "--batch"], cwd=settings.workspace, capture_output=True
        ).stdout
        assert phrase.lower().encode() not in objects.lower()


def _node_count(settings: Settings) -> dict[str, int]:
    with store.connect(settings.duckdb_path, read_only=True) as con:
        return dict(con.execute("SELECT being_id, count(*) FROM nodes GROUP BY 1").fetchall())


def _write_hot_index(settings: Settings) -> None:
    """The hot index files a server of two workers writes for ada, as its first recall builds them."""
    from mindflow.api.models import RecallRequest
    from mindflow.api.service import RecallService
    from mindflow.recall import RecallConfig

    two = settings.model_copy(update={"api_workers": 2})
    service = RecallService(two, RecallConfig.for_model(settings.embedding_model))
    try:
        service.recall("ada", RecallRequest(query="quokka vault code"))
        assert service.hot.wait("ada")
    finally:
        service.hot.close()


def test_a_permanent_forget_leaves_nothing_of_the_text(copy, world):
    settings = copy
    secret_ref = world.refs["a02"]
    story = settings.workspace / "ada" / "STORY.md"
    assert PHRASE in story.read_text() and PHRASE in (settings.workspace / "ada" / "MEMORY.md").read_text()
    # A story written before chapters cited their episodes: the time window finds the chapter.
    from mindflow import narrative

    old = narrative.CITATION.sub("", story.read_text())
    audit.write_file(
        settings,
        "ada/STORY.md",
        old,
        action="EDIT",
        summary="older story",
        actor="test",
        trigger="test",
        run_id=None,
    )
    assert any(PHRASE in p.read_text() for p in (settings.inbox / ".quarantine" / "ada").iterdir())
    # A server of several workers keeps the being's hot index as files under cache/hot.
    _write_hot_index(settings)
    assert _grep(settings.hot_index, PHRASE)  # the index's rows.arrow holds the text
    # The secret sent again, waiting in the inbox beside a new episode.
    a06 = ("a06", "2026-01-21T09:00:00Z", "Lena booked a train to Graz for the weekend.", "event")
    _write(settings.inbox, "ada", [ADA[1], a06], name="resent.jsonl")
    nodes_before = _node_count(settings)
    proposal_id = _confirm_permanent(settings)
    assert _grep(settings.resolved_home, PHRASE)  # still there until the job runs
    # The narrative run indexed MEMORY.md and STORY.md for journal_memory_search: the phrase too.
    assert "journal_chunks" in _lance_hits(settings, PHRASE)

    [summary] = run_job(settings, "forget")
    assert summary.success and "erasures:" in summary.changes

    _everything_gone(settings)
    # Each step once more on the finished erase: each finds nothing left to do.
    from mindflow.loop.erase import STEPS, erase

    head = _git(settings, "rev-parse", "HEAD")
    applied = ProposalStore(settings.proposals).get("ada", proposal_id)
    with store.connect(settings.duckdb_path) as con:
        again = erase(settings, con, "ada", [applied], run_id="again")
    assert again.steps == list(STEPS[:9])
    work = {k: v for k, v in again.counts().items() if k not in ("proposals", "refs", "episodes", "seconds")}
    assert not any(work.values()), work
    assert _git(settings, "rev-parse", "HEAD") == head
    # Unrelated memories all stay, and are recalled.
    assert _node_count(settings) == {"ada": nodes_before["ada"] - 1, "bram": nodes_before["bram"]}
    refs = _refs(settings)
    assert secret_ref not in refs.values()
    assert {k: v for k, v in world.refs.items() if k != "a02"} == refs
    assert world.refs["a03"] in _recall(settings, "grey cat from the shelter")
    # STORY.md still tells the rest of that day, and the chapter now cites its episodes.
    text = story.read_text()
    assert text.startswith("<!-- LAST_PROCESSED") and "# The story of ada" in text
    assert "Pixel" in text and "Maja" in text and "cello" in text
    chapters = narrative.read_story(settings, "ada").chapters
    assert len(chapters) == 3
    assert '<!-- episodes: ["a01", "a03"] -->' in text
    assert "cello" in (settings.workspace / "ada" / "MEMORY.md").read_text()  # rebuilt, the rest kept

    with store.connect(settings.duckdb_path, read_only=True) as con:
        rows = con.execute(
            "SELECT actor, approval, summary FROM audit_log WHERE action = 'DELETE'"
        ).fetchall()
        tombstone = con.execute(
            "SELECT before, after, actor FROM history WHERE memory_ref = ? AND operation = 'deleted'",
            [secret_ref],
        ).fetchall()
        kept_history = con.execute(
            "SELECT count(*), count(*) FILTER (WHERE before IS NOT NULL OR after IS NOT NULL) FROM history "
            "WHERE memory_ref = ?",
            [secret_ref],
        ).fetchone()
        episodes = con.execute("SELECT episode_id FROM episodes WHERE being_id = 'ada' ORDER BY 1").fetchall()
    [(actor, approval, audit_summary)] = rows
    assert (actor, approval) == ("user", "user")
    assert secret_ref in audit_summary and proposal_id in audit_summary
    assert hashlib.sha256(SECRET.encode()).hexdigest() in audit_summary
    assert tombstone == [(None, None, "user")]
    assert kept_history[0] > 1 and kept_history[1] == 0  # when and what happened, not what it held
    assert [e[0] for e in episodes] == ["a01", "a03", "a04", "a05"]
    log = _git(settings, "log", "--all", "--format=%B")
    assert "[DELETE] table:nodes" in log and "Actor: user\nApproval: user" in log
    # The proposal is applied and keeps only hashes.
    proposal = ProposalStore(settings.proposals).get("ada", proposal_id)
    assert proposal.applied_at is not None
    assert all(c["text"].startswith("sha256:") for c in proposal.payload["candidates"])

    # A backfill of those days reads the rewritten done file, and the waiting file: the secret
    # does not come back, the new episode comes in.
    run_job(settings, "ingest", partition="2026-01-01...2026-01-31")
    with store.connect(settings.duckdb_path, read_only=True) as con:
        ids = con.execute("SELECT episode_id FROM episodes WHERE being_id = 'ada' ORDER BY 1").fetchall()
    assert [i[0] for i in ids] == ["a01", "a03", "a04", "a05", "a06"]
    assert _grep(settings.resolved_home, PHRASE) == ""

    # Rollback still works on the rewritten history.
    history = audit.file_history(settings, "ada/STORY.md")
    restored, changed = audit.rollback(settings, "ada/STORY.md", to=history[-1][0])
    assert changed and PHRASE not in story.read_text()

    # The same job again: nothing waits, nothing changes.
    head = _git(settings, "rev-parse", "HEAD")
    [again] = run_job(settings, "forget")
    assert again.success and _git(settings, "rev-parse", "HEAD") == head


def test_a_permanent_forget_rejects_the_reflection_proposals_that_cite_it(copy, world):
    settings = copy
    secret, kept = world.refs["a02"], world.refs["a03"]
    proposals = ProposalStore(settings.proposals)
    merge = proposals.create(
        "ada",
        "merge",
        {"survivor": kept, "absorbed": [secret], "memories": {kept: "the grey cat", secret: SECRET}},
        created_by="reflection:r-1",
    )
    core = proposals.create(
        "ada",
        "core",
        {"text": f"- {SECRET}\n", "diff": f"+- {SECRET}\n", "promoted": [SECRET]},
        "reflection:r-1",
    )
    other = proposals.create(
        "ada",
        "archive",
        {"refs": [world.refs["a04"]], "memories": {world.refs["a04"]: "cello"}},
        "reflection:r-1",
    )
    _confirm_permanent(settings)
    [summary] = run_job(settings, "forget")
    assert summary.success
    _everything_gone(settings)  # the proposals folder included
    for proposal_id in (merge.proposal_id, core.proposal_id):
        decided = proposals.get("ada", proposal_id)
        assert (decided.status, decided.decided_by) == ("rejected", "forget")
        assert decided.payload["erased"]
    assert proposals.get("ada", merge.proposal_id).payload["memories"][kept].startswith("sha256:")
    assert proposals.get("ada", other.proposal_id).status == "pending"  # cites nothing erased
    assert proposals.get("ada", other.proposal_id).payload["memories"] == {world.refs["a04"]: "cello"}


def test_a_permanent_forget_scrubs_every_proposal_that_holds_the_text(copy, world):
    """Earlier forgets of the same memory (pending, rejected, one that found nothing) and proposals
    quoting it keep only hashes: their candidates, their queries, a sub-agent's content."""
    settings = copy
    proposals = ProposalStore(settings.proposals)
    left_pending = forget.propose(settings, "ada", "quokka vault code")
    assert any(PHRASE in c["text"] for c in left_pending.payload["candidates"])
    rejected = forget.propose(settings, "ada", "the quokka vault")
    forget.reject(settings, "ada", rejected.proposal_id)
    # Asked for before the memory was formed: no candidates, the query alone says it.
    nothing = proposals.create(
        "ada", "forget", {"query": PHRASE, "refs": [], "candidates": [], "permanent": False}, "user"
    )
    # A soft forget of the MEMORY.md line, approved earlier: the line's text is its candidate.
    line = next(x for x in (settings.workspace / "ada" / "MEMORY.md").read_text().splitlines() if PHRASE in x)
    soft = proposals.create(
        "ada",
        "forget",
        {
            "query": "vault",
            "candidates": [{"ref": "MEMORY.md:9", "store": "memory_md", "text": line[2:], "status": None}],
            "permanent": False,
        },
        "user",
    )
    proposals.decide("ada", soft.proposal_id, "approved", "user")
    memory = proposals.create(
        "ada",
        "memory",
        {"content": f"Lena said: {SECRET}", "value": PHRASE, "entity": "Lena", "key": "vault code"},
        "subagent:scribe",
    )
    kept = proposals.create(
        "ada",
        "archive",
        {"refs": [world.refs["a04"]], "memories": {world.refs["a04"]: "cello"}},
        "reflection:r-1",
    )
    permanent_id = _confirm_permanent(settings)

    [summary] = run_job(settings, "forget")
    assert summary.success
    _everything_gone(settings)  # the proposals folder included
    for p in (left_pending, rejected, nothing, soft):
        payload = proposals.get("ada", p.proposal_id).payload
        assert payload["query"].startswith("sha256:"), p.payload["query"]
    assert proposals.get("ada", left_pending.proposal_id).status == "pending"  # still the person's to decide
    assert proposals.get("ada", soft.proposal_id).payload["candidates"][0]["text"].startswith("sha256:")
    assert proposals.get("ada", nothing.proposal_id).payload["query"] == (
        "sha256:" + hashlib.sha256(PHRASE.encode()).hexdigest()
    )
    decided = proposals.get("ada", memory.proposal_id)
    assert (decided.status, decided.decided_by) == ("rejected", "forget")
    assert decided.payload["content"].startswith("sha256:") and decided.payload["value"].startswith("sha256:")
    assert proposals.get("ada", kept.proposal_id).payload == kept.payload  # holds nothing erased
    assert proposals.get("ada", permanent_id).applied_at is not None


def test_an_erased_episode_landed_again_is_refused_and_kept_nowhere(copy, world, tmp_path):
    """The original file landed again after the erase (`mindflow ingest FILE`): the deleted episode
    is not stored again, nor the same text under another id, nor its malformed copy quarantined;
    the file moved to .done holds none of them, and the run says so. POST episodes refuses it."""
    from mindflow.inbox import land_file

    settings = copy
    _confirm_permanent(settings)
    [summary] = run_job(settings, "forget")
    assert summary.success and _grep(settings.resolved_home, PHRASE) == ""
    original = tmp_path / "episodes.jsonl"
    broken = json.dumps({"id": "a99", "ts": "the day before yesterday", "text": SECRET})
    again = ("a77", "2026-01-22T09:00:00Z", SECRET, "fact")  # the same text under a new id
    a06 = ("a06", "2026-01-21T09:00:00Z", "Lena booked a train to Graz for the weekend.", "event")
    original.write_text("\n".join([*_lines(ADA), broken, *_lines([again, a06])]) + "\n")
    land_file(settings.inbox, original, "ada")

    [ingested] = run_job(settings, "ingest")
    assert ingested.success and "deleted=3" in ingested.changes, ingested.changes
    run_job(settings, "form", being="ada")
    with store.connect(settings.duckdb_path, read_only=True) as con:
        ids = [
            r[0]
            for r in con.execute(
                "SELECT episode_id FROM episodes WHERE being_id = 'ada' ORDER BY 1"
            ).fetchall()
        ]
        texts = [r[0] for r in con.execute("SELECT text FROM episodes").fetchall()]
    assert ids == ["a01", "a03", "a04", "a05", "a06"] and SECRET not in texts
    assert not (settings.inbox / "ada").exists() or not any((settings.inbox / "ada").iterdir())
    assert _grep(settings.resolved_home, PHRASE) == "" and _grep(settings.resolved_home, "quokka vault") == ""
    assert world.refs["a02"] not in _refs(settings).values()
    # A backfill reads the done files again: still nothing comes back.
    run_job(settings, "ingest", partition="2026-01-01...2026-01-31")
    with store.connect(settings.duckdb_path, read_only=True) as con:
        assert con.execute("SELECT count(*) FROM episodes WHERE being_id = 'ada'").fetchone()[0] == 5

    from mindflow.api import create_app
    from mindflow.api.server import BackgroundServer

    inbox = (
        sorted(p.name for p in (settings.inbox / "ada").glob("*"))
        if (settings.inbox / "ada").exists()
        else []
    )
    app = create_app(settings, tokens={TOKEN: "*"})
    with BackgroundServer(app) as server:
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as c:
            episode = {"id": "a02", "ts": "2026-01-05T10:00:00Z", "speaker": "Lena", "text": "something else"}
            fine = {
                "id": "a08",
                "ts": "2026-01-23T10:00:00Z",
                "speaker": "Lena",
                "text": "Lena bought bread.",
            }
            response = c.post("/v1/beings/ada/episodes", json={"episodes": [fine, episode]})
    assert response.status_code == 409, response.text
    assert "permanently forgotten" in response.text and "'a02'" in response.text
    after = (
        sorted(p.name for p in (settings.inbox / "ada").glob("*"))
        if (settings.inbox / "ada").exists()
        else []
    )
    assert after == inbox  # nothing written


def test_two_files_each_emptied_by_a_permanent_forget_leave_later_forgets_working(copy, tmp_path):
    """An agent that posts one episode at a time leaves one-line inbox files: two of them, each
    blanked by its own permanent forget, hold the same bytes; the second forget run (and every
    later one, of any being) failed on `inbox_files`' key."""
    from mindflow.inbox import land_file

    settings = copy
    texts = {
        "a61": "The otter marmalade cipher is my bank PIN hint.",
        "a62": "The walrus tangerine riddle opens the attic safe.",
    }
    for i, (episode_id, text) in enumerate(texts.items()):
        path = tmp_path / f"{episode_id}.jsonl"
        path.write_text(_lines([(episode_id, f"2026-01-2{i + 2}T09:00:00Z", text, "fact")])[0] + "\n")
        land_file(settings.inbox, path, "ada")
    [ingested] = run_job(settings, "ingest")
    assert ingested.success, ingested.changes
    run_job(settings, "form", being="ada")
    for query in ("otter marmalade cipher", "walrus tangerine riddle"):
        _confirm_permanent(settings, query)
        [summary] = run_job(settings, "forget")
        assert summary.success, summary
    with store.connect(settings.duckdb_path, read_only=True) as con:
        rows = con.execute(
            "SELECT file_name, sha256 FROM inbox_files WHERE being_id = 'ada' AND file_name LIKE 'a6%'"
        ).fetchall()
    assert sorted(name for name, _ in rows) == ["a61.jsonl", "a62.jsonl"]
    assert len({sha for _, sha in rows}) == 1  # the same blanked bytes, one row each
    for phrase in ("otter marmalade", "walrus tangerine"):
        assert _grep(settings.resolved_home, phrase) == ""


def test_a_deleted_text_posted_again_under_a_new_id_is_refused_and_never_recalled(copy, world):
    """The read API never opens DuckDB, yet refuses a permanently forgotten text under any id, from
    the confirm on: the confirm, and the `forget` job again, record each deleted text's sha256 (only
    hashes) in loop/ada/deleted.jsonl. One accepted under another id before the confirm leaves the
    fresh tail at once, and ingestion refuses it."""
    from mindflow.api import create_app
    from mindflow.api.server import BackgroundServer
    from mindflow.recall import RecallConfig

    settings = copy
    config = RecallConfig.for_model(settings.embedding_model, min_similarity=0.1)
    app = create_app(settings, recall_config=config, tokens={TOKEN: "*"})

    def post(c: httpx.Client, episode_id: str) -> httpx.Response:
        episode = {"id": episode_id, "ts": "2026-01-22T09:00:00Z", "speaker": "Lena", "text": SECRET}
        return c.post("/v1/beings/ada/episodes", json={"episodes": [episode]})

    def recalled(c: httpx.Client) -> list[str]:
        response = c.post("/v1/beings/ada/recall", json={"query": "quokka vault code", "k": 10})
        assert response.status_code == 200, response.text
        return [m["text"] for m in response.json()["memories"]]

    def refused(c: httpx.Client, episode_id: str) -> None:
        def files() -> dict[Path, bytes]:
            return {p: p.read_bytes() for p in sorted((settings.inbox / "ada").rglob("*")) if p.is_file()}

        before = files()
        response = post(c, episode_id)
        assert response.status_code == 409, response.text
        assert "permanently forgotten" in response.text and repr(episode_id) in response.text
        assert PHRASE not in response.text and "quokka" not in response.text
        assert files() == before  # nothing written
        assert SECRET not in recalled(c)

    with BackgroundServer(app) as server:
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as c:
            found = c.post("/v1/beings/ada/forget", json={"query": "quokka vault code"})
            assert found.status_code == 200 and found.json()["candidates"], found.text
            # Posted between the forget's two steps: no candidate, taken, recallable as a fresh memory.
            assert post(c, "a66").status_code == 200
            assert SECRET in recalled(c)
            body = {"proposal_id": found.json()["proposal_id"], "confirm": True, "permanent": True}
            assert c.post("/v1/beings/ada/forget", json=body).status_code == 200
            refused(c, "a88")  # the fresh a66 is not served either
            # The `forget` job records the hashes again from DuckDB: a confirm killed after its mark
            # and before the hashes loses nothing.
            (settings.loop / "ada" / "deleted.jsonl").unlink()
            [summary] = run_job(settings, "forget")
            assert summary.success
            refused(c, "a89")
    # Ingestion refuses the line accepted before the confirm, and nothing of the text is left.
    [ingested] = run_job(settings, "ingest")
    assert ingested.success and "deleted=1" in ingested.changes, ingested.changes
    with store.connect(settings.duckdb_path, read_only=True) as con:
        assert not con.execute("SELECT count(*) FROM episodes WHERE episode_id = 'a66'").fetchone()[0]
    assert _grep(settings.resolved_home, PHRASE) == ""


@pytest.mark.timeout(300)
def test_with_a_narrative_model_the_chapter_is_told_again_by_it_without_the_secret(copy, llm_server):
    settings = copy
    llm_server.configure(MINDFLOW_LLM_MAX_RETRIES="0")
    prompts: list[str] = []

    def answer(request):
        prompts.append(request.prompt_text)
        if "core memory" in request.prompt_text:
            return {
                "identity": "I am ada.",
                "active_context": ["Pixel"],
                "persona": ["Calm"],
                "critical_facts": ["-"],
            }
        return {
            "chapters": [{"when": "2026-01-05 09:00", "title": "Surgery and a cat", "text": "A told day."}]
        }

    llm_server.responder = answer
    _confirm_permanent(settings)
    [summary] = run_job(settings, "forget")
    assert summary.success
    _everything_gone(settings)
    story = (settings.workspace / "ada" / "STORY.md").read_text()
    assert (
        '### [2026-01-05 09:00] Surgery and a cat\n\nA told day.\n\n<!-- episodes: ["a01", "a03"] -->'
        in story
    )
    assert "cello" in story  # the other chapters as they were
    assert "I am ada." in (settings.workspace / "ada" / "MEMORY.md").read_text()
    # The model was shown the day's other episodes, never the deleted one.
    told = [p for p in prompts if "Pixel" in p and "Maja" in p]
    assert told and not any(PHRASE in p or "quokka" in p for p in prompts)


def _consistent(settings: Settings, world: World) -> None:
    """After a kill: every store opens, and every other memory is whole in DuckDB and LanceDB."""
    with store.connect(settings.duckdb_path, read_only=True) as con:
        nodes = {r[0] for r in con.execute("SELECT node_id FROM nodes").fetchall()}
        episodes = {r[0] for r in con.execute("SELECT episode_id FROM episodes").fetchall()}
    published = set(_refs(settings).values())
    for episode, ref in world.refs.items():
        if episode == "a02":
            continue
        assert ref in nodes and ref in published and episode in episodes


def _visible_progress(settings: Settings, world: World) -> set[str]:
    """Which file stores no longer hold the deleted memory, read while a run may be writing them."""
    done = set()
    if world.refs["a02"] not in _refs(settings).values():
        done.add("lance")
    if PHRASE not in (settings.workspace / "ada" / "STORY.md").read_text():
        done.add("workspace")
    if PHRASE not in _git(settings, "log", "--all", "-p"):
        done.add("git")
    return done


def _progress(settings: Settings, world: World) -> set[str]:
    """Which stores no longer hold the deleted memory (a kill between steps leaves some)."""
    done = _visible_progress(settings, world)
    with store.connect(settings.duckdb_path, read_only=True) as con:
        if not con.execute("SELECT count(*) FROM episodes WHERE episode_id = 'a02'").fetchone()[0]:
            done.add("duckdb")
    return done


def _run_until_a_step_lands(env: dict[str, str], settings: Settings, world: World, before: set[str]) -> None:
    """Start `mindflow run forget` and kill -9 it as soon as one more store is visibly erased.

    Watching the stores rather than a clock puts the kill just after a step on any machine speed; a
    run that shows nothing new (the DuckDB steps at the end) is left to finish.
    """
    proc = subprocess.Popen(
        [str(MINDFLOW), "run", "forget"],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            seen = _visible_progress(settings, world)
        except (subprocess.CalledProcessError, OSError, ValueError, RuntimeError):
            seen = before  # caught a store mid-write: look again
        if seen - before:
            break
        time.sleep(0.01)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def test_a_killed_forget_run_finishes_when_run_again(copy, world):
    from mindflow.inbox import text_sha256
    from mindflow.loop.deleted_texts import read_hashes

    settings = copy
    proposal_id = _confirm_permanent(settings)
    # As if the confirm had died before recording the texts' hashes: the killed runs record them.
    (settings.loop / "ada" / "deleted.jsonl").unlink()
    env = {**os.environ, **_env(settings.resolved_home), "HF_HUB_OFFLINE": "1"}
    # Each run is killed just after it erases one more store, and starts over from what the killed
    # ones left; the run that has nothing visible left to erase finishes the DuckDB steps.
    midway = []
    for _ in range(8):
        _run_until_a_step_lands(env, settings, world, _progress(settings, world))
        _consistent(settings, world)
        if ProposalStore(settings.proposals).get("ada", proposal_id).applied_at is not None:
            break
        midway.append(_progress(settings, world))
    assert any(midway) and len(set(map(frozenset, midway))) >= 2, midway  # kills at different steps
    run_job(settings, "forget")
    assert ProposalStore(settings.proposals).get("ada", proposal_id).applied_at is not None
    _everything_gone(settings)
    _consistent(settings, world)
    assert not list(settings.resolved_home.glob("*.erase-tmp*"))
    assert text_sha256(SECRET) in read_hashes(settings.loop, "ada")


def test_a_run_with_nothing_approved_changes_nothing(copy):
    settings = copy
    from mindflow.loop.erase import erase_all

    db_file = settings.duckdb_path.stat()
    versions = {
        name: len(lance.connect(settings.lance_path).open_table(name).list_versions())
        for name in lance.connect(settings.lance_path).table_names()
    }
    head = _git(settings, "rev-parse", "HEAD")
    started = time.monotonic()
    report = erase_all(settings)
    assert time.monotonic() - started < 0.5 and report.proposals == 0 and report.steps == []
    [summary] = run_job(settings, "forget")
    assert summary.success
    after = settings.duckdb_path.stat()
    assert (after.st_mtime_ns, after.st_size) == (db_file.st_mtime_ns, db_file.st_size)
    assert versions == {
        name: len(lance.connect(settings.lance_path).open_table(name).list_versions()) for name in versions
    }
    assert _git(settings, "rev-parse", "HEAD") == head


def test_the_sensor_asks_for_one_run_per_approved_permanent_forget_and_again_after_a_failure(settings):
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from definitions import defs
    from sensors.forget import TAG, forget_sensor

    assert forget_sensor.minimum_interval_seconds <= 30
    assert forget_sensor.default_status == dg.DefaultSensorStatus.RUNNING
    job = defs.resolve_job_def("forget")
    store_ = ProposalStore(settings.proposals)
    with dg.DagsterInstance.ephemeral() as instance:

        def evaluate():
            return forget_sensor(dg.build_sensor_context(instance=instance))

        assert isinstance(evaluate(), dg.SkipReason)
        soft = store_.create("ada", "forget", {"candidates": [], "permanent": False}, "user")
        store_.decide("ada", soft.proposal_id, "approved", "user")
        assert isinstance(evaluate(), dg.SkipReason)  # a soft forget needs no run
        hard = store_.create("ada", "forget", {"candidates": [], "permanent": True}, "user")
        assert isinstance(evaluate(), dg.SkipReason)  # pending: nobody confirmed it
        store_.decide("ada", hard.proposal_id, "approved", "user")
        first, second = evaluate(), evaluate()
        assert isinstance(first, dg.RunRequest) and first.run_key == second.run_key
        # That run fails (here: the DuckDB file cannot be opened): the next tick asks again.
        settings.duckdb_path.mkdir(parents=True)
        failed = job.execute_in_process(instance=instance, tags=first.tags, raise_on_error=False)
        assert not failed.success
        retry = evaluate()
        assert isinstance(retry, dg.RunRequest) and retry.run_key != first.run_key
        assert retry.tags[TAG] == first.tags[TAG]
        settings.duckdb_path.rmdir()
        assert job.execute_in_process(instance=instance, tags=retry.tags).success
        assert store_.get("ada", hard.proposal_id).applied_at is not None
        assert isinstance(evaluate(), dg.SkipReason)


def test_the_duckdb_file_is_copied_whole_and_swapped(settings):
    from mindflow.loop.erase import REWRITE_SUFFIX, rewrite_duckdb

    with store.connect(settings.duckdb_path) as con:
        con.execute(
            "INSERT INTO audit_log (audit_id, ts, action, target, actor) VALUES ('a-1', now(), 'EDIT', 'x', 'me')"
        )
        schema = con.execute(
            "SELECT (SELECT list(index_name ORDER BY index_name) FROM duckdb_indexes()), "
            "(SELECT count(*) FROM duckdb_constraints()), (SELECT max(version) FROM schema_version)"
        ).fetchone()
    # A copy left by a run killed before its rename is never taken for the database.
    leftover = settings.duckdb_path.with_name(settings.duckdb_path.name + REWRITE_SUFFIX)
    leftover.write_bytes(b"half a copy")
    before, after, _ = rewrite_duckdb(settings)
    assert before and after and not leftover.exists()
    assert sorted(p.name for p in settings.resolved_home.iterdir()) == [
        "embedding_precision",  # the home's encoder, pinned when its schema was created
        "mindflow.duckdb",
        "mindflow.duckdb.lock",
    ]
    with store.connect(settings.duckdb_path) as con:
        assert (
            con.execute(
                "SELECT (SELECT list(index_name ORDER BY index_name) FROM duckdb_indexes()), "
                "(SELECT count(*) FROM duckdb_constraints()), (SELECT max(version) FROM schema_version)"
            ).fetchone()
            == schema
        )
        assert con.execute("SELECT actor FROM audit_log WHERE audit_id = 'a-1'").fetchall() == [("me",)]
