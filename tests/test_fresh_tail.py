"""Read-your-writes: an accepted episode is recalled at once, as a fresh memory, until the form run
publishes it under the same ref.

A real uvicorn server on 127.0.0.1 over a published world (DuckDB, LanceDB, the model); the
second server is a real `mindflow serve` process on the same MINDFLOW_HOME.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import time
from datetime import date, datetime
from pathlib import Path

import httpx
import pytest

from mindflow import lance, store
from mindflow.api import create_app
from mindflow.api.server import BackgroundServer
from mindflow.config import Settings
from mindflow.inbox import ingest
from mindflow.loop.marks import append_marks, new_mark
from mindflow.memories import publish
from mindflow.patrol import form, run_patrol, step_scenes
from mindflow.recall import RecallConfig

REPO = Path(__file__).resolve().parent.parent
MINDFLOW = REPO / ".venv" / "bin" / "mindflow"
NOW = datetime(2026, 3, 1, 6, 0)
TOKEN = "token-for-the-tail"
PUBLISHED = [
    ("a01", "2026-01-05T09:00:00Z", "Lena's sister Maja had knee surgery at the Vienna clinic."),
    ("a02", "2026-01-20T09:00:00Z", "Lena decided to learn the cello this spring."),
    ("a03", "2026-02-02T09:00:00Z", "Lena's favourite tea is smoked lapsang souchong."),
]
KAYAK = {"ts": "2026-02-20T18:00:00Z", "text": "Lena bought a red kayak and paddled across Lake Constance."}


def node_ref(being: str, episode: str) -> str:
    """The ref the mechanical form run gives an episode's node (patrol.step_scenes)."""
    return "n-" + hashlib.sha256(f"{being}\x1f{episode}".encode()).hexdigest()[:24]


def _write(settings: Settings, being: str, name: str, rows) -> Path:
    path = settings.inbox / being / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "".join(json.dumps({"id": i, "ts": ts, "speaker": "Lena", "text": t}) + "\n" for i, ts, t in rows)
    )
    return path


def _form_and_publish(settings: Settings, embedder) -> None:
    """Ingestion, then the form run's work (❶, marks, publish), as the `form` job does it."""
    with store.connect(settings.duckdb_path) as con:
        ingest(con, settings.inbox, date(2020, 1, 1), date(2030, 12, 31))
        step_scenes(con, "ada", NOW)
        form(con, "ada", embedder, now=NOW, settings=settings, events_dir=settings.events)
        publish(con, lance.connect(settings.lance_path), now=NOW)


def _settings(home: Path, **overrides) -> Settings:
    return Settings(
        home=home, _env_file=None, models_dir=Path(os.environ["MINDFLOW_MODELS_DIR"]), **overrides
    )


@pytest.fixture
def world(tmp_path, embedder, monkeypatch, models_dir):
    home = tmp_path / "home"
    monkeypatch.setenv("MINDFLOW_HOME", str(home))
    monkeypatch.setenv("MINDFLOW_MODELS_DIR", str(models_dir))
    settings = _settings(home)
    _write(settings, "ada", "published.jsonl", PUBLISHED)
    with store.connect(settings.duckdb_path) as con:
        ingest(con, settings.inbox, date(2026, 1, 1), date(2026, 12, 31))
        run_patrol(con, "ada", embedder, now=NOW)
        publish(con, lance.connect(settings.lance_path), now=NOW)
    return settings


def _client(server: BackgroundServer | str) -> httpx.Client:
    url = server if isinstance(server, str) else server.url
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)


@pytest.fixture
def served(world):
    config = RecallConfig.for_model(world.embedding_model)
    with BackgroundServer(create_app(world, recall_config=config, tokens={TOKEN: "*"})) as server:
        with _client(server) as client:
            yield world, client


def _post(client: httpx.Client, *episodes: dict) -> list[str]:
    response = client.post("/v1/beings/ada/episodes", json={"episodes": list(episodes)})
    assert response.status_code == 200, response.text
    return response.json()["ids"]


def _recall(client: httpx.Client, query: str, k: int = 5) -> list[dict]:
    response = client.post("/v1/beings/ada/recall", json={"query": query, "k": k})
    assert response.status_code == 200, response.text
    return response.json()["memories"]


def _search(client: httpx.Client, query: str) -> list[dict]:
    response = client.post("/v1/beings/ada/search_memory", json={"query": query, "k": 10})
    assert response.status_code == 200, response.text
    return response.json()["memories"]


def _resonance(client: httpx.Client, query: str) -> dict:
    response = client.post("/v1/beings/ada/resonance", json={"query": query, "now": "2026-03-01T12:00:00Z"})
    assert response.status_code == 200, response.text
    return response.json()


def test_a_posted_episode_is_recalled_searched_and_resonates_in_the_next_request(served):
    settings, client = served
    (kayak,) = _post(client, KAYAK)
    ref = node_ref("ada", kayak)

    first = _recall(client, "kayak on the lake")[0]
    assert (first["memory_ref"], first["fresh"], first["source_episode_ids"]) == (ref, True, [kayak])
    assert first["text"] == KAYAK["text"] and first["when_dates"] == ["2026-02-20"]
    # Ranked with the published memories by the same scores, not stacked on top of them.
    tea = _recall(client, "which tea does Lena like")
    assert tea[0]["memory_ref"] == node_ref("ada", "a03") and not tea[0]["fresh"]
    assert [m["memory_ref"] for m in tea].count(ref) <= 1
    found = _search(client, "kayak")
    assert [(m["memory_ref"], m["fresh"]) for m in found] == [(ref, True)]
    echoed = _resonance(client, "paddling a kayak")
    assert echoed["items"][0]["memory"]["memory_ref"] == ref and "red kayak" in echoed["text"]


def test_a_second_server_process_recalls_it_within_five_seconds(served, tmp_path):
    settings, client = served
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {
        "PATH": os.environ["PATH"],
        "MINDFLOW_HOME": str(settings.resolved_home),
        "MINDFLOW_MODELS_DIR": str(settings.models),
        "MINDFLOW_API_TOKENS": f"{TOKEN}=*",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    other = subprocess.Popen(
        [str(MINDFLOW), "serve", "--port", str(port), "--log-level", "warning"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline and other.poll() is None, "the second server did not start"
            time.sleep(0.2)
        with _client(url) as second:
            assert all(not m["fresh"] for m in _recall(second, "kayak on the lake"))  # seen before the post
            (kayak,) = _post(client, KAYAK)
            posted = time.monotonic()
            while not any(
                m["memory_ref"] == node_ref("ada", kayak) for m in _recall(second, "kayak on the lake")
            ):
                assert time.monotonic() - posted < 5.0, "the other server did not recall the episode in 5 s"
                time.sleep(0.05)
            assert any(m["fresh"] for m in _search(second, "kayak"))
    finally:
        other.terminate()
        other.wait(timeout=30)


def test_a_file_dropped_into_the_inbox_counts_once_the_server_sees_it(served):
    settings, client = served
    _write(settings, "ada", "dropped.jsonl", [("d01", KAYAK["ts"], KAYAK["text"])])
    # Heartbeats and bad lines in a file never become memories.
    (settings.inbox / "ada" / "noise.jsonl").write_text(
        json.dumps({"ts": KAYAK["ts"], "text": "HEARTBEAT_OK"}) + "\n" + '{"text": "no time, bad line"}\n'
    )
    deadline = time.monotonic() + 5
    while not (found := [m for m in _recall(client, "kayak on the lake") if m["fresh"]]):
        assert time.monotonic() < deadline, "the dropped file was not seen"
        time.sleep(0.1)
    assert [m["memory_ref"] for m in found] == [node_ref("ada", "d01")]
    assert not [m for m in _search(client, "HEARTBEAT_OK bad line") if m["fresh"]]


def test_once_formed_and_published_it_comes_back_once_under_the_same_ref(served, embedder):
    settings, client = served
    (kayak,) = _post(client, KAYAK)
    ref = node_ref("ada", kayak)
    assert _recall(client, "kayak on the lake")[0]["fresh"]

    _form_and_publish(settings, embedder)  # the file moves to inbox/.done, the node is published

    assert list((settings.inbox / ".done" / "ada").glob("api-*.jsonl"))
    for _ in range(3):  # the hot index may be rebuilt in between: every answer counts
        recalled = [m for m in _recall(client, "kayak on the lake", k=10) if kayak in m["source_episode_ids"]]
        assert [(m["memory_ref"], m["fresh"]) for m in recalled] == [(ref, False)]
        assert recalled[0]["cluster_id"]
        searched = [m for m in _search(client, "kayak") if kayak in m["source_episode_ids"]]
        assert [(m["memory_ref"], m["fresh"]) for m in searched] == [(ref, False)]
        time.sleep(0.3)


def test_the_tail_is_capped_and_the_oldest_wait_for_the_form_run(world, caplog):
    settings = _settings(world.resolved_home, tail_max_episodes=3)
    app = create_app(settings, tokens={TOKEN: "*"})
    with BackgroundServer(app) as server, _client(server) as client:
        texts = [f"Lena planted tomato seedling number {n} in the greenhouse." for n in range(5)]
        ids = _post(client, *({"ts": f"2026-02-2{n}T08:00:00Z", "text": t} for n, t in enumerate(texts)))
        fresh = app.state.service.fresh_memories("ada")
        assert [m.source_episode_ids[0] for m in fresh] == ids[2:]  # the newest three
        recalled = {m["source_episode_ids"][0] for m in _recall(client, "tomato seedling greenhouse", k=10)}
        assert ids[2] in recalled and not {ids[0], ids[1]} & recalled
    assert sum("MINDFLOW_TAIL_MAX_EPISODES=3" in r.getMessage() for r in caplog.records) == 1


def test_a_forgotten_fresh_memory_is_never_returned_and_k_is_still_filled(served):
    settings, client = served
    kayak, canoe = _post(
        client, KAYAK, {"ts": "2026-02-21T18:00:00Z", "text": "Lena rented a green canoe on Lake Constance."}
    )
    assert {node_ref("ada", kayak), node_ref("ada", canoe)} <= {
        m["memory_ref"] for m in _recall(client, "boat")
    }

    before = [m["memory_ref"] for m in _recall(client, "kayak on the lake", k=10)]
    assert len(before) >= 3 and node_ref("ada", kayak) in before

    append_marks(settings.loop, [new_mark("ada", "forget", [node_ref("ada", kayak)], [kayak])])

    # The hidden one is out, and the one after it takes its place.
    recalled = _recall(client, "kayak on the lake", k=len(before) - 1)
    assert [m["memory_ref"] for m in recalled] == [r for r in before if r != node_ref("ada", kayak)]
    assert not [m for m in _search(client, "kayak Lake") if kayak in m["source_episode_ids"]]
    assert all(kayak not in i["memory"]["source_episode_ids"] for i in _resonance(client, "kayak")["items"])


def test_a_pinned_fresh_memory_shows_pinned_and_resonates_first(served):
    settings, client = served
    (kayak,) = _post(client, KAYAK)
    append_marks(settings.loop, [new_mark("ada", "pin", [node_ref("ada", kayak)])])

    assert _recall(client, "kayak")[0]["pinned"]
    items = _resonance(client, "Lena's cello lessons and her kayak")["items"]
    assert len(items) > 1
    assert items[0]["memory"]["memory_ref"] == node_ref("ada", kayak) and items[0]["memory"]["pinned"]
