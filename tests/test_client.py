"""mindflow.client against real servers on 127.0.0.1: typed results, errors, retries, restarts, asyncio."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from datetime import date, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from mindflow import lance, store
from mindflow.api import create_app
from mindflow.api.models import EpisodeIn, RecallResponse
from mindflow.api.server import BackgroundServer
from mindflow.client import AsyncMindflowClient, MindflowClient, MindflowClientError, MindflowUnavailable
from mindflow.config import Settings
from mindflow.inbox import ingest
from mindflow.memories import publish
from mindflow.patrol import run_patrol

TOKEN = "client-test-token"
ADA_TOKEN = "client-test-ada"
ROWS = {
    "ada": [
        ("a1", "2026-03-02T09:00:00Z", "Lena chose DuckDB for the reconciliation reports.", "decision"),
        ("a2", "2026-03-05T09:00:00Z", "The CSV importer rejects rows without an IBAN.", "fact"),
        ("a3", "2026-03-09T18:00:00Z", "Lena's daughter has a school play on Friday evening.", "event"),
    ],
    "bram": [("b1", "2026-03-03T07:00:00Z", "Tomas's bank PIN is 4711.", "fact")],
}


@pytest.fixture(scope="module")
def settings(tmp_path_factory, embedder) -> Settings:
    settings = Settings(home=tmp_path_factory.mktemp("client") / "home", _env_file=None)
    for being, rows in ROWS.items():
        path = settings.inbox / being / "episodes.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            "".join(
                json.dumps({"id": i, "ts": ts, "speaker": "Lena", "text": t, "kind": k}) + "\n"
                for i, ts, t, k in rows
            )
        )
    with store.connect(settings.duckdb_path) as con:
        ingest(con, settings.inbox, date(2026, 1, 1), date(2026, 12, 31))
        for being in ROWS:
            run_patrol(con, being, embedder, now=datetime(2026, 3, 10))
        publish(con, lance.connect(settings.lance_path))
    return settings


@pytest.fixture(scope="module")
def server(settings):
    with BackgroundServer(create_app(settings, tokens={TOKEN: "*", ADA_TOKEN: ["ada"]})) as running:
        yield running


def test_typed_results_for_every_call(server, settings):
    with MindflowClient(server.url, token=TOKEN) as memory:
        found = memory.recall("ada", "which database do the reports use?", k=2)
        assert isinstance(found, RecallResponse)
        top = found.memories[0]
        assert top.source_episode_ids == ["a1"] and top.ts == datetime(2026, 3, 2, 9, 0) and top.score > 0
        fragments = memory.recall(
            "ada", "reports", k=2, mode="fragments", session_id="s", exclude_refs=["nope"]
        )
        assert fragments.memories == [] and fragments.fragments.startswith("<fragments>")
        assert top.text in fragments.fragments.removeprefix("<fragments>").removesuffix("</fragments>").split(
            " / "
        )
        block = memory.resonance("ada", "Lena's family", now=datetime(2026, 3, 12, 12, 0))
        assert block.text.startswith("---\n[SUBCONSCIOUS RESONANCE]\n") and block.text.endswith("\n---")
        assert any(i.label == "a few days ago — Mar 9" for i in block.items)
        assert [
            m.source_episode_ids for m in memory.search_memory("ada", "IBAN CSV", mode="and").memories
        ] == [["a2"]]
        cluster = memory.recall_memory("ada", top.cluster_id)
        assert top.memory_ref in {m.memory_ref for m in cluster.memories}
        facts = memory.facts("ada", "Lena", depth=2)
        assert facts.facts == [] and facts.depth == 2
        with pytest.raises(MindflowClientError) as missing:
            memory.story("ada")
        assert missing.value.status == 404 and "no STORY.md" in missing.value.message
        (settings.workspace / "ada").mkdir(parents=True, exist_ok=True)
        (settings.workspace / "ada" / "STORY.md").write_text("# Ada\n")
        assert memory.story("ada") == "# Ada\n"
        added = memory.add_episodes(
            "ada",
            [
                {
                    "ts": datetime(2026, 3, 11, 8, 0),
                    "speaker": "Lena",
                    "text": "Standup moves to 9:30.",
                    "id": "x1",
                },
                EpisodeIn(ts="2026-03-11T08:01:00Z", text="Noted.", speaker="ada", role="assistant"),
            ],
        )
        assert added.ids[0] == "x1" and added.ids[1].startswith("h-") and added.file.startswith("api-")


def test_session_id_is_the_keyword_and_session_its_deprecated_name(server):
    with MindflowClient(server.url, token=TOKEN) as memory:
        first = {m.memory_ref for m in memory.recall("ada", "reports", k=1, session_id="kw").memories}
        with pytest.warns(DeprecationWarning, match="pass `session_id`"):
            second = {m.memory_ref for m in memory.recall("ada", "reports", k=1, session="kw").memories}
        assert first and not first & second  # the same session: its echo filter held
        with pytest.raises(TypeError, match="not both"):
            memory.resonance("ada", "reports", session_id="kw", session="other")

    async def main():
        async with AsyncMindflowClient(server.url, token=TOKEN) as memory:
            block = await memory.resonance("ada", "reports", session_id="kw")
            assert not {i.memory.memory_ref for i in block.items if i.memory} & (first | second)

    asyncio.run(main())


def test_4xx_raises_with_status_and_message_and_is_not_retried(server):
    with MindflowClient(server.url, token=TOKEN, retries=3) as memory:
        with pytest.raises(MindflowClientError) as bad:
            memory.recall("ada", "x", k=500)
        assert bad.value.status == 422 and "body.k" in bad.value.message
        with pytest.raises(MindflowClientError) as invalid:
            memory.add_episodes("ada", [{"ts": "soon", "text": "x"}])
        assert invalid.value.status == 422 and invalid.value.details[0]["index"] == 0
    with MindflowClient(server.url, token=ADA_TOKEN) as memory:
        with pytest.raises(MindflowClientError) as forbidden:
            memory.recall("bram", "PIN")
        assert forbidden.value.status == 403
        for climbing in ("../bram", "ada/../bram", ".."):
            with pytest.raises(MindflowClientError) as lost:
                memory.recall(climbing, "bank PIN")
            assert lost.value.status in (403, 404, 422) and "4711" not in lost.value.message
    with MindflowClient(server.url) as anonymous:
        with pytest.raises(MindflowClientError) as unauthorized:
            anonymous.recall("ada", "x")
        assert unauthorized.value.status == 401


class _Scripted(BaseHTTPRequestHandler):
    """Answers each request with the next (status, body) of the server's script."""

    def do_GET(self):  # noqa: N802 - http.server's naming
        self.server.calls += 1
        status, body = self.server.script.pop(0) if self.server.script else (200, "# story")
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json" if body.startswith("{") else "text/markdown")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def scripted():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Scripted)
    httpd.calls, httpd.script = 0, []
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def test_503_is_retried_with_backoff_and_4xx_is_not(scripted):
    url = f"http://127.0.0.1:{scripted.server_address[1]}"
    scripted.script = [(503, '{"error": "busy"}'), (503, '{"error": "busy"}')]
    with MindflowClient(url, retries=3, backoff=0.05) as memory:
        assert memory.story("ada") == "# story"
        assert scripted.calls == 3
        scripted.calls, scripted.script = 0, [(404, '{"error": "no STORY.md"}')]
        with pytest.raises(MindflowClientError) as missing:
            memory.story("ada")
        assert missing.value.status == 404 and scripted.calls == 1
        scripted.calls, scripted.script = 0, [(503, '{"error": "busy"}')] * 3
    with MindflowClient(url, retries=2, backoff=0.05) as memory:
        with pytest.raises(MindflowUnavailable) as busy:
            memory.story("ada")
        assert busy.value.status == 503 and busy.value.message == "busy" and scripted.calls == 3


def test_unreachable_server_gives_up_after_retries():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with MindflowClient(f"http://127.0.0.1:{port}", retries=2, backoff=0.05, timeout=2) as memory:
        started = time.monotonic()
        with pytest.raises(MindflowUnavailable) as down:
            memory.recall("ada", "anything")
        assert down.value.status is None and "cannot reach" in down.value.message
        assert time.monotonic() - started < 5


def _self_signed(folder) -> tuple[str, str]:
    """A certificate for 127.0.0.1 that no authority signed, and its key: (cert file, key file)."""
    import datetime as dt
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return str(cert_file), str(key_file)


def test_clients_share_one_tls_context_and_still_verify_certificates(scripted, tmp_path):
    """The clients of a process share one TLS context (made once), and it still refuses a
    server whose certificate no authority signed."""
    import ssl

    cert, key = _self_signed(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    scripted.socket = context.wrap_socket(scripted.socket, server_side=True)
    url = f"https://127.0.0.1:{scripted.server_address[1]}"
    with MindflowClient(url, retries=0, timeout=5) as memory, MindflowClient(url, retries=0) as other:
        with pytest.raises(MindflowUnavailable) as refused:
            memory.story("ada")
        assert "CERTIFICATE_VERIFY_FAILED" in refused.value.message
        assert memory._http._transport._pool._ssl_context is other._http._transport._pool._ssl_context

    async def refused_async() -> str:
        async with AsyncMindflowClient(url, retries=0, timeout=5) as memory:
            with pytest.raises(MindflowUnavailable) as refused:
                await memory.story("ada")
            return refused.value.message

    assert "CERTIFICATE_VERIFY_FAILED" in asyncio.run(refused_async())
    assert scripted.calls == 0  # no request got through


def test_client_rides_out_a_server_restart(settings):
    server = BackgroundServer(create_app(settings, tokens={TOKEN: "*"})).start()
    restarted = threading.Event()
    try:
        with MindflowClient(server.url, token=TOKEN, retries=6, backoff=0.2, max_backoff=1.0) as memory:
            before = memory.recall("ada", "school play", k=1).memories[0].memory_ref
            server.stop()

            def start_again():
                time.sleep(0.8)
                server.start()  # the same port
                restarted.set()

            threading.Thread(target=start_again, daemon=True).start()
            started = time.monotonic()
            after = memory.recall("ada", "school play", k=1).memories[0].memory_ref
            assert restarted.is_set() and time.monotonic() - started >= 0.7
            assert after == before
    finally:
        restarted.wait(30)
        server.stop()


def test_async_client(server):
    async def main():
        async with AsyncMindflowClient(server.url, token=TOKEN) as memory:
            found, searched = await asyncio.gather(
                memory.recall("ada", "school play on Friday", k=1),
                memory.search_memory("ada", "DuckDB"),
            )
            assert found.memories[0].source_episode_ids == ["a3"]
            assert [m.source_episode_ids for m in searched.memories] == [["a1"]]
            block = await memory.resonance("ada", "reports", now=datetime(2026, 3, 20))
            assert block.items and block.now == datetime(2026, 3, 20)
            added = await memory.add_episodes(
                "bram", [{"ts": "2026-03-12T07:00:00Z", "text": "Ran 10 km.", "id": "r1"}]
            )
            assert added.ids == ["r1"]
            assert (await memory.facts("bram", "Tomas")).relations == []
            assert (await memory.recall_memory("bram", "no-such-cluster")).memories == []
            with pytest.raises(MindflowClientError) as bad:
                await memory.recall("ADA", "x")
            assert bad.value.status == 422 and "invalid being id" in bad.value.message
            assert await memory.ready()

    asyncio.run(main())
