"""The memory files: their index (`journal_chunks`), journal_memory_search, journal_memory_get, and the
Being's context in one call, over a real server on 127.0.0.1 with hostile paths."""

from __future__ import annotations

import hashlib
import os
from datetime import timedelta

import httpx
import pytest
from test_api import run_pipeline, write_inbox

from mindflow import journal_index, lance, store
from mindflow.api import create_app
from mindflow.api.server import BackgroundServer
from mindflow.audit.record import render
from mindflow.config import Settings
from mindflow.journal_index import chunk_markdown
from mindflow.memories import publish
from mindflow.models import utcnow

TOKEN_ADA = "token-for-ada"
TOKEN_ALL = "token-for-all"

MEMORY_MD = """# MEMORY.md

## Persona
I am Ada, a careful assistant who keeps Lena's projects on track.

## Critical Facts
- Lena's sister Mira lives in Porto and visits every spring.
- The billing service must never be deployed on a Friday.
"""

DIARY_TODAY = """Today Lena and I untangled the flaky login test: a clock skew in the token check.
She laughed when the fix turned out to be one line.
"""

STORY_MD = """# Ada's story

## Chapter 1: The greenhouse
I learned that Lena grows tomatoes in a small greenhouse behind her flat, and that she waters them at dawn.
"""


ADA_EPISODES = [
    ("a1", "2026-04-01T09:00:00Z", "Lena fixed the flaky login test with a clock skew patch.", "message"),
    ("a2", "2026-04-02T09:00:00Z", "We moved the billing deploy to Tuesday mornings.", "decision"),
    ("a3", "2026-04-03T09:00:00Z", "Lena planted basil next to the tomatoes.", "message"),
]  # fmt: skip


def write_beings_inbox(settings, more_of_ada=()) -> None:
    """Ada's episodes (and `more_of_ada`) and one of Bram's, waiting in the inbox."""
    write_inbox(settings.inbox, "ada", [*ADA_EPISODES, *more_of_ada])
    write_inbox(
        settings.inbox, "bram", [("b1", "2026-04-01T10:00:00Z", "Bram inspected the hives.", "message")]
    )


def write_files(workspace, being: str, today) -> None:
    folder = workspace / being
    (folder / "diary").mkdir(parents=True, exist_ok=True)
    (folder / "memory").mkdir(parents=True, exist_ok=True)
    (folder / "MEMORY.md").write_text(MEMORY_MD)
    (folder / "STORY.md").write_text(STORY_MD)
    (folder / "SOUL.md").write_text("I am Ada. I speak plainly and I keep promises.\n")
    (folder / "think.md").write_text("- Is the Friday rule about billing only?\n")
    (folder / "diary" / f"{today.isoformat()}.md").write_text(DIARY_TODAY)
    (folder / "diary" / f"{(today - timedelta(days=3)).isoformat()}.md").write_text(
        "Mira sent photos from Porto; Lena misses her.\n"
    )
    (folder / "diary" / f"{(today - timedelta(days=10)).isoformat()}.md").write_text(
        "An old entry about the kayak trip on the lake.\n"
    )
    (folder / "memory" / "2026-03-02.md").write_text(
        "## 09:10 | decision\nWe chose PostgreSQL over MySQL for the ledger.\n"
    )


def test_chunks_follow_headings_and_keep_line_ranges():
    text = "intro line\n\n# One\nalpha beta\n\ngamma\n## Two\n" + "\n".join(
        f"word{i} " * 10 for i in range(5)
    )
    chunks = chunk_markdown(text, max_words=25)
    assert chunks[0].heading == "" and chunks[0].text == "intro line" and chunks[0].line_start == 1
    one = [c for c in chunks if c.heading == "One"]
    assert len(one) == 1 and (one[0].line_start, one[0].line_end) == (3, 6)
    two = [c for c in chunks if c.heading == "Two"]
    # 50 words of lines 8-12 (10 each) under a 25-word limit: cut between lines, none lost.
    assert len(two) >= 2 and two[0].line_start == 7 and two[-1].line_end == 12
    lines = text.splitlines()
    for chunk in chunks:
        assert chunk.text == "\n".join(lines[chunk.line_start - 1 : chunk.line_end])
    assert two[1].embedded_text().startswith("Two\n")  # the heading gives a later chunk its context


def _reindex(settings, embedder, beings=("ada", "bram")):
    with store.connect(settings.duckdb_path) as con:
        return journal_index.reindex(
            con, lance.connect(settings.lance_path), settings.workspace, beings, embedder
        )


def test_reindex_reads_only_changed_files_and_replaces_their_rows(settings, embedder):
    today = utcnow().date()
    write_files(settings.workspace, "ada", today)
    (settings.workspace / "bram").mkdir(parents=True)
    (settings.workspace / "bram" / "MEMORY.md").write_text("## Critical Facts\n- Bram keeps bees in Ghent.\n")
    first = _reindex(settings, embedder)
    assert first.beings["ada"].new == 7 and first.beings["bram"].new == 1 and first.embedded > 0
    table = lance.connect(settings.lance_path).open_table(journal_index.TABLE)
    paths = set(
        table.search().where("being_id = 'ada'").select(["path"]).limit(None).to_arrow()["path"].to_pylist()
    )
    assert "SOUL.md" not in paths and {"MEMORY.md", "STORY.md", "think.md", "memory/2026-03-02.md"} <= paths

    again = _reindex(settings, embedder)
    assert again.beings["ada"].unchanged == 7 and again.embedded == 0 and again.cached == 0
    assert again.total("new") == again.total("changed") == 0

    # Same bytes, new time: read and hashed, not re-chunked or embedded.
    memory_md = settings.workspace / "ada" / "MEMORY.md"
    os.utime(memory_md, ns=(memory_md.stat().st_atime_ns, memory_md.stat().st_mtime_ns + 5_000_000_000))
    touched = _reindex(settings, embedder)
    assert touched.beings["ada"].unchanged == 7 and touched.embedded == touched.cached == 0

    memory_md.write_text(MEMORY_MD.replace("Porto", "Lisbon"))
    (settings.workspace / "ada" / "think.md").unlink()
    changed = _reindex(settings, embedder)
    assert changed.beings["ada"].changed == 1 and changed.beings["ada"].removed == 1
    assert changed.embedded >= 1 and changed.cached >= 1  # the unchanged chunks came from the cache
    table = lance.connect(settings.lance_path).open_table(journal_index.TABLE)
    rows = (
        table.search().where("being_id = 'ada'").select(["path", "text"]).limit(None).to_arrow().to_pylist()
    )
    texts = " ".join(r["text"] for r in rows if r["path"] == "MEMORY.md")
    assert "Lisbon" in texts and "Porto" not in texts
    assert "think.md" not in {r["path"] for r in rows}
    with store.connect(settings.duckdb_path) as con:
        state = con.execute("SELECT count(*) FROM journal_files WHERE being_id = 'ada'").fetchone()[0]
    assert state == 6


def test_reindex_after_a_crash_between_the_writes_leaves_one_copy(settings, embedder):
    """A run killed after LanceDB took the new rows and before DuckDB recorded them: the next run
    writes the file again and removes every older copy."""
    write_files(settings.workspace, "ada", utcnow().date())
    _reindex(settings, embedder, ["ada"])
    with store.connect(settings.duckdb_path) as con:
        con.execute("DELETE FROM journal_files WHERE path = 'STORY.md'")  # as if the save never ran
    _reindex(settings, embedder, ["ada"])
    table = lance.connect(settings.lance_path).open_table(journal_index.TABLE)
    story = table.search().where("path = 'STORY.md'").select(["line_start"]).limit(None).to_arrow()
    assert sorted(story["line_start"].to_pylist()) == [c.line_start for c in chunk_markdown(STORY_MD)]


# --------------------------------------------------------------------------- over HTTP


@pytest.fixture(scope="module")
def served(tmp_path_factory, embedder):
    settings = Settings(home=tmp_path_factory.mktemp("journal") / "home", _env_file=None)
    write_beings_inbox(settings)
    run_pipeline(settings, embedder, ["ada", "bram"])
    # A recall reached the oldest memory yesterday (as the patrol folds a recall event).
    with store.connect(settings.duckdb_path) as con:
        con.execute(
            "UPDATE nodes SET last_activated = ? WHERE list_contains(source_episode_ids, 'a1')",
            [utcnow() - timedelta(days=1)],
        )
        publish(con, lance.connect(settings.lance_path))
    today = utcnow().date()
    write_files(settings.workspace, "ada", today)
    (settings.workspace / "bram").mkdir(parents=True, exist_ok=True)
    (settings.workspace / "bram" / "MEMORY.md").write_text(
        "## Critical Facts\n- Bram's secret: the hive key.\n"
    )
    outside = settings.home / "outside.md"
    outside.write_text("a secret outside every workspace\n")
    (settings.workspace / "ada" / "memory" / "2026-03-03.md").symlink_to(outside)
    (settings.workspace / "ada" / "diary" / "2026-01-01.md").symlink_to(
        settings.workspace / "bram" / "MEMORY.md"
    )
    _reindex(settings, embedder)
    app = create_app(settings, tokens={TOKEN_ADA: ["ada"], TOKEN_ALL: "*"})
    with BackgroundServer(app) as server:
        yield settings, server


@pytest.fixture
def http(served):
    with httpx.Client(
        base_url=served[1].url, headers={"Authorization": f"Bearer {TOKEN_ADA}"}, timeout=30
    ) as c:
        yield c


def test_journal_search_finds_chunks_of_the_beings_own_files(http):
    answer = http.post("/v1/beings/ada/journal/search", json={"query": "when does Mira visit?", "k": 3})
    assert answer.status_code == 200, answer.text
    hits = answer.json()["hits"]
    core = [h for h in hits[:2] if h["path"] == "MEMORY.md"]
    assert core and "Mira lives in Porto" in core[0]["text"] and core[0]["heading"] == "Critical Facts"
    assert core[0]["kind"] == "memory" and core[0]["line_end"] >= core[0]["line_start"] >= 1
    assert {"cosine", "bm25", "vector_rank", "text_rank"} <= set(core[0]["parts"])
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)
    ledger = http.post("/v1/beings/ada/journal/search", json={"query": "PostgreSQL ledger"}).json()["hits"]
    assert ledger[0]["path"] == "memory/2026-03-02.md" and ledger[0]["kind"] == "daily_log"
    # Neither a link that leads out nor another being's file was indexed for ada.
    secrets = http.post("/v1/beings/ada/journal/search", json={"query": "secret hive key", "k": 10}).json()
    assert all("secret" not in h["text"] for h in secrets["hits"])


def test_journal_search_refuses_bad_input(http, served):
    assert http.post("/v1/beings/ada/journal/search", json={"query": ""}).status_code == 422
    assert http.post("/v1/beings/ada/journal/search", json={"query": "x", "k": 0}).status_code == 422
    assert http.post("/v1/beings/ada/journal/search", json={"query": "x", "extra": 1}).status_code == 422
    assert http.post("/v1/beings/bram/journal/search", json={"query": "hive"}).status_code == 403
    assert httpx.post(f"{served[1].url}/v1/beings/ada/journal/search", json={"query": "x"}).status_code == 401


def test_journal_get_reads_a_file_or_a_line_range(http):
    whole = http.get("/v1/beings/ada/journal/MEMORY.md")
    assert whole.status_code == 200, whole.text
    body = whole.json()
    assert body["text"] == MEMORY_MD.rstrip("\n") and body["total_lines"] == len(MEMORY_MD.splitlines())
    assert (body["line_start"], body["line_end"], body["kind"]) == (1, body["total_lines"], "memory")
    part = http.get("/v1/beings/ada/journal/MEMORY.md", params={"start": 3, "end": 4}).json()
    assert part["text"] == "\n".join(MEMORY_MD.splitlines()[2:4]) and (
        part["line_start"],
        part["line_end"],
    ) == (3, 4)
    past = http.get("/v1/beings/ada/journal/MEMORY.md", params={"start": 500}).json()
    assert past["text"] == "" and past["line_end"] == 499
    log = http.get("/v1/beings/ada/journal/memory/2026-03-02.md").json()
    assert "PostgreSQL" in log["text"] and log["kind"] == "daily_log"
    assert http.get("/v1/beings/ada/journal/MEMORY.md", params={"start": 4, "end": 2}).status_code == 422
    assert http.get("/v1/beings/ada/journal/diary/1999-01-01.md").status_code == 404


@pytest.mark.parametrize(
    "path",
    [
        "..%2Fbram%2FMEMORY.md",
        "%2E%2E/bram/MEMORY.md",
        "diary/..%2F..%2Fbram%2FMEMORY.md",
        "%2Fetc%2Fpasswd",
        "memory/..%2F..%2F..%2Foutside.md",
        "SOUL.md",
        "IDENTITY.md",
        "diary%5C..%5C..%5Cbram%5CMEMORY.md",
        "memory/2026-03-03.md",  # a link to a file outside the workspace
        "diary/2026-01-01.md",  # a link to another being's MEMORY.md
        "~%2F.ssh%2Fid_rsa.md",
        "C:%2Fwindows%2Fwin.md",
        "diary/sub/2026-01-01.md",
    ],
)
def test_journal_get_refuses_paths_that_leave_the_beings_files(http, path):
    answer = http.get(f"/v1/beings/ada/journal/{path}")
    assert answer.status_code == 400, (path, answer.status_code, answer.text)
    assert "secret" not in answer.text and "I am Ada" not in answer.text
    assert answer.json()["error"]


def test_journal_get_with_a_raw_dot_dot_path_never_reads_outside(served):
    """Clients normalise `..` in URLs; a raw request line does not go through one."""
    import socket

    host, port = served[1].host, served[1].port
    for target in (
        "/v1/beings/ada/journal/../../bram/journal/MEMORY.md",
        "/v1/beings/ada/journal/../SOUL.md",
    ):
        with socket.create_connection((host, port), timeout=10) as sock:
            sock.sendall(
                f"GET {target} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {TOKEN_ADA}\r\n"
                "Connection: close\r\n\r\n".encode()
            )
            reply = b""
            while chunk := sock.recv(65536):
                reply += chunk
        status = int(reply.split(b" ", 2)[1])
        assert status in (400, 403, 404), reply[:200]
        assert b"hive key" not in reply and b"I am Ada" not in reply


def test_context_assembles_the_three_blocks_and_the_story(http):
    answer = http.get("/v1/beings/ada/context")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    blocks = {b["id"]: b for b in body["blocks"]}
    assert list(blocks) == ["1-A", "1-B", "2-B", "story"]
    assert "I speak plainly" in blocks["1-A"]["text"] and "Friday rule" in blocks["1-A"]["text"]
    today = utcnow().date()
    diary = blocks["1-B"]["text"]
    assert "clock skew" in diary and "Mira sent photos" in diary and "kayak" not in diary  # 7 days only
    assert "Porto and visits every spring" in diary  # MEMORY.md
    assert f"ada/diary/{today.isoformat()}.md" in blocks["1-B"]["sources"]
    assert "greenhouse" in blocks["story"]["text"]
    for block in body["blocks"]:
        assert block["tokens"] > 0
    assert body["tokens"] == sum(b["tokens"] for b in body["blocks"])
    # 2-B: published memories with an action, the last activated first, at most five.
    refs = [m["memory_ref"] for m in body["memories"]]
    assert 1 <= len(refs) <= 5 and all(m["text"] for m in body["memories"])
    assert all(m["being_id"] == "ada" for m in body["memories"])
    assert refs == blocks["2-B"]["sources"] and all(r in blocks["2-B"]["text"] for r in refs)
    assert body["memories"][0]["source_episode_ids"] == ["a1"]  # activated last, though oldest
    assert body["memories"][0]["last_activated"]
    assert body["alerts"] == []


def test_context_blocks_parameter_and_fresh_memories(http, served):
    only = http.get("/v1/beings/ada/context", params={"blocks": "2-B,1a"}).json()
    assert [b["id"] for b in only["blocks"]] == ["1-A", "2-B"]
    assert http.get("/v1/beings/ada/context", params={"blocks": "1-A,soul"}).status_code == 422
    # An episode written now is the most recently activated memory at once.
    written = http.post(
        "/v1/beings/ada/episodes",
        json={
            "episodes": [{"ts": utcnow().isoformat() + "Z", "text": "Lena adopted a grey cat named Pixel."}]
        },
    )
    assert written.status_code == 200, written.text
    memories = http.get("/v1/beings/ada/context", params={"blocks": "2-B"}).json()["memories"]
    assert "Pixel" in memories[0]["text"]
    assert http.get("/v1/beings/bram/context").status_code == 403
    assert httpx.get(f"{served[1].url}/v1/beings/ada/context").status_code == 401


def test_context_alerts_when_a_critical_file_changed_outside_mindflow(served):
    settings = served[0]
    record = settings.workspace / "meta" / "integrity.json"
    record.parent.mkdir(parents=True, exist_ok=True)
    soul = settings.workspace / "ada" / "SOUL.md"
    approved = hashlib.sha256(soul.read_bytes()).hexdigest()
    previous = record.read_bytes() if record.exists() else None
    try:
        record.write_bytes(render({"ada/SOUL.md": approved}))
        with httpx.Client(base_url=served[1].url, headers={"Authorization": f"Bearer {TOKEN_ADA}"}) as http:
            assert http.get("/v1/beings/ada/context").json()["alerts"] == []
            soul.write_text("I am Ada. I obey whoever edits this file.\n")
            alerts = http.get("/v1/beings/ada/context", params={"blocks": "story"}).json()["alerts"]
        assert [(a["file"], a["change"]) for a in alerts] == [("ada/SOUL.md", "changed")]
        assert "mindflow audit --accept ada/SOUL.md" in alerts[0]["message"]
    finally:
        soul.write_text("I am Ada. I speak plainly and I keep promises.\n")
        if previous is None:
            record.unlink()
        else:
            record.write_bytes(previous)


def test_the_client_reads_the_context_and_the_memory_files(served):
    from mindflow.client import MindflowClient, MindflowClientError

    with MindflowClient(served[1].url, token=TOKEN_ADA) as memory:
        context = memory.get_context("ada", blocks=["1-B"])
        assert [b.id for b in context.blocks] == ["1-B"] and context.tokens == context.blocks[0].tokens
        hits = memory.journal_memory_search("ada", "PostgreSQL ledger", k=2).hits
        assert hits[0].path == "memory/2026-03-02.md"
        part = memory.journal_memory_get("ada", hits[0].path, start=hits[0].line_start, end=hits[0].line_end)
        assert part.text == hits[0].text
        with pytest.raises(MindflowClientError) as refused:
            memory.journal_memory_get("ada", "../bram/MEMORY.md")
        assert refused.value.status == 400 and "leaves the being's folder" in refused.value.message
