"""The read API where agents meet it first and where clients get it wrong: empty stores, bad
types and times, token mistakes, the open routes. Real LanceDB, the real model, real HTTP.
"""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

# The published memories of the API tests: ada's work and family, bram's runs.
from test_api import ADA, BRAM, run_pipeline, write_inbox

from mindflow import lance
from mindflow.api import create_app
from mindflow.api.auth import parse_tokens
from mindflow.api.server import BackgroundServer
from mindflow.config import Settings
from mindflow.errors import MindflowError
from mindflow.inbox import BEING_ID_PATTERN

REPO = Path(__file__).resolve().parent.parent
TOKEN = "token-for-every-being"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@contextmanager
def served(settings: Settings):
    """The app as `mindflow serve` builds it (tokens from the settings), on 127.0.0.1."""
    app = create_app(settings)
    with BackgroundServer(app) as server, httpx.Client(base_url=server.url, headers=AUTH, timeout=30) as http:
        http.app = app
        yield http


def _settings(home: Path) -> Settings:
    return Settings(home=home, api_tokens=f"{TOKEN}=*", _env_file=None)


def read_everything(http: httpx.Client, being: str) -> dict[str, httpx.Response]:
    """Every read route of a being, each asked three times with its hot index built in between:
    the first answer comes from LanceDB, the next ones from the index."""
    service = http.app.state.service
    answers: dict[str, httpx.Response] = {}
    for _ in range(3):
        answers = {
            "recall": http.post(f"/v1/beings/{being}/recall", json={"query": "what did we decide"}),
            "fragments": http.post(
                f"/v1/beings/{being}/recall", json={"query": "a walk", "mode": "fragments", "k": 3}
            ),
            "horizon": http.post(
                f"/v1/beings/{being}/recall",
                json={"query": "work", "since": "2026-01-01T00:00:00Z", "until": "2026-12-31T00:00:00Z"},
            ),
            "resonance": http.post(f"/v1/beings/{being}/resonance", json={"query": "how are things"}),
            "search": http.post(f"/v1/beings/{being}/search_memory", json={"query": "login password"}),
            "cluster": http.get(f"/v1/beings/{being}/clusters/c-1/memories"),
            "facts": http.get(f"/v1/beings/{being}/facts", params={"entity": "Lena"}),
            "ebooks": http.post("/v1/ebooks/search", json={"query": "the login"}),
        }
        assert service.hot.wait(being)
    return answers


def assert_nothing_recalled(answers: dict[str, httpx.Response], being: str) -> None:
    for route, response in answers.items():
        assert response.status_code == 200, (route, response.text)
    assert answers["recall"].json() == {"being_id": being, "mode": "list", "memories": [], "fragments": None}
    assert answers["fragments"].json()["memories"] == [] and not answers["fragments"].json()["fragments"]
    assert answers["horizon"].json()["memories"] == []
    resonance = answers["resonance"].json()
    assert resonance["items"] == [] and resonance["text"] == ""
    assert answers["facts"].json()["facts"] == [] and answers["ebooks"].json()["hits"] == []


def test_a_being_without_memories_is_answered_with_empty_lists(tmp_path, embedder):
    settings = _settings(tmp_path / "home")
    with served(settings) as http:
        # No memories table yet: the state of every agent that recalls before its first patrol.
        answers = read_everything(http, "nobody")
        assert_nothing_recalled(answers, "nobody")
        assert answers["search"].json()["memories"] == [] and answers["cluster"].json()["memories"] == []

        # Published memories of others, none of this being: the table moves on under the server.
        for being, rows in (("ada", ADA), ("bram", BRAM)):
            write_inbox(settings.inbox, being, rows)
        run_pipeline(settings, embedder, ["ada", "bram"])
        answers = read_everything(http, "nobody")
        assert_nothing_recalled(answers, "nobody")
        assert answers["search"].json()["memories"] == [] and answers["cluster"].json()["memories"] == []
        assert http.post("/v1/beings/ada/recall", json={"query": "OAuth login"}).json()["memories"]

        # Rows of the being, none of them recallable (all dead): search still reaches them.
        table = lance.connect(settings.lance_path).open_table("memories")
        table.update(where="being_id = 'bram'", values={"status": "dead"})
        answers = read_everything(http, "bram")
        assert_nothing_recalled(answers, "bram")
        assert answers["search"].json()["memories"]

        # An empty `memories` table.
        table.delete("true")
        assert table.count_rows() == 0
        answers = read_everything(http, "nobody")
        assert_nothing_recalled(answers, "nobody")
        assert answers["search"].json()["memories"] == [] and answers["cluster"].json()["memories"] == []
        # ada's episodes are in the inbox and no longer published: the fresh tail serves them.
        answers = read_everything(http, "ada")
        recalled = [
            m
            for route in ("recall", "fragments", "horizon", "search")
            for m in answers[route].json()["memories"]
        ] + [item["memory"] for item in answers["resonance"].json()["items"]]
        assert recalled and all(m["fresh"] for m in recalled)
        assert answers["cluster"].json()["memories"] == []
        story = http.get("/v1/beings/nobody/story")
        assert story.status_code == 404 and "no STORY.md" in story.json()["error"]


# --------------------------------------------------------------------------- bodies: types and times


@pytest.fixture(scope="module")
def http(tmp_path_factory, embedder):
    settings = _settings(tmp_path_factory.mktemp("safety") / "home")
    write_inbox(settings.inbox, "ada", ADA)
    run_pipeline(settings, embedder, ["ada"])
    with served(settings) as client:
        client.settings = settings
        yield client


@pytest.mark.parametrize(
    ("path", "body", "says"),
    [
        ("recall", {"k": "5"}, "k: Value error, must be a JSON integer such as 5, not '5'"),
        ("recall", {"k": True}, "k: Value error, must be a JSON integer such as 5, not True"),
        ("recall", {"k": 5.5}, "k: Input should be a valid integer, got a number with a fractional part"),
        ("resonance", {"k": "5"}, "k: Value error, must be a JSON integer"),
        ("search_memory", {"k": "5"}, "k: Value error, must be a JSON integer"),
        ("/v1/ebooks/search", {"k": "5"}, "k: Value error, must be a JSON integer"),
        ("recall", {"until": 0}, "until: Value error, use an ISO 8601 timestamp"),
        ("recall", {"until": "0"}, "until: Value error, use an ISO 8601 timestamp"),
        ("recall", {"since": 1775898000}, "since: Value error, use an ISO 8601 timestamp"),
        ("recall", {"since": "1775898000"}, "since: Value error, use an ISO 8601 timestamp"),
        ("recall", {"until": 1775898000000}, "until: Value error, use an ISO 8601 timestamp"),
        ("resonance", {"now": 0}, "now: Value error, use an ISO 8601 timestamp"),
        ("resonance", {"until": False}, "until: Value error, use an ISO 8601 timestamp"),
        ("recall", {"until": "1969-12-31T23:59:59Z"}, "year 1969 outside 1970..2100"),
        ("recall", {"since": "2101-01-01T00:00:00"}, "year 2101 outside 1970..2100"),
        (
            "recall",
            {"since": "2026-03-01T00:00:00Z", "until": "2026-02-01T00:00:00Z"},
            "since (2026-03-01T00:00:00) is after until (2026-02-01T00:00:00): no memory can match",
        ),
    ],
)
def test_loose_types_and_impossible_times_are_422(http, path, body, says):
    url = path if path.startswith("/") else f"/v1/beings/ada/{path}"
    response = http.post(url, json={"query": "login", **body})
    assert response.status_code == 422, response.text
    assert says in response.json()["error"]


def test_times_that_mean_something_are_taken(http):
    def recall(**body):
        response = http.post("/v1/beings/ada/recall", json={"query": "the billing release", "k": 50, **body})
        assert response.status_code == 200, response.text
        return [m["ts"] for m in response.json()["memories"]]

    assert recall(until="2026-03-05T00:00:00+01:00") and all(
        t < "2026-03-05" for t in recall(until="2026-03-04T23:00:00Z")
    )
    assert recall(since="2026-02-15T18:00:00", until="2026-02-15T18:00:00") == ["2026-02-15T18:00:00Z"]
    assert recall(since=None, until=None) and recall(k=5.0)  # 5.0 is an integer to JSON Schema
    response = http.post("/v1/beings/ada/resonance", json={"query": "violin", "now": "2026-04-10T12:00:00Z"})
    assert response.status_code == 200 and response.json()["items"]
    assert response.json()["now"] == "2026-04-10T12:00:00Z"  # RFC 3339, as the schema says


@pytest.mark.parametrize(
    ("path", "params", "name", "says"),
    [
        ("proposals", {"kind": "zzz"}, "kind", "Input should be 'forget', 'merge', 'archive'"),
        ("proposals", {"status": "zzz"}, "status", "Input should be 'pending', 'approved'"),
        (
            "context",
            {"blocks": "1-A,zzz"},
            "blocks",
            "unknown block 'zzz': choose among 1-A, 1-B, 2-B, story",
        ),
        (
            "memories",
            {"since": "2026-03-01T00:00:00Z", "until": "2026-02-01T00:00:00Z"},
            "since",
            "since (2026-03-01T00:00:00) is after until (2026-02-01T00:00:00): no memory can match",
        ),
    ],
)
def test_query_values_no_answer_can_match_are_422_in_one_shape(http, path, params, name, says):
    response = http.get(f"/v1/beings/ada/{path}", params=params)
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["error"].startswith(f"query.{name}") and says in body["error"]
    assert [d["loc"][:2] for d in body["details"]] == [["query", name]]  # a repeatable one adds its index
    assert says in body["details"][0]["msg"]


# --------------------------------------------------------------------------- the open routes


def test_readiness_says_why_without_a_path(http):
    home = str(http.settings.resolved_home)
    with httpx.Client(base_url=str(http.base_url), timeout=30) as anonymous:
        ready = anonymous.get("/readyz")
        assert ready.status_code == 200 and ready.json() == {
            "status": "ready",
            "model": "all-MiniLM-L6-v2",
            "rankers": 0,
        }
        lance_dir = http.settings.lance_path
        moved = lance_dir.with_name("lance-away")
        lance_dir.rename(moved)
        try:
            gone = anonymous.get("/readyz")
        finally:
            moved.rename(lance_dir)
        assert gone.status_code == 503
        assert gone.json()["error"].startswith("not ready: the LanceDB folder (lance/ in MINDFLOW_HOME)")
        for answer in (ready, gone, anonymous.get("/openapi.json"), anonymous.get("/healthz")):
            assert home not in answer.text and str(Path(home).parent) not in answer.text
        assert anonymous.get("/readyz").status_code == 200


BEING_ROUTES = {
    ("post", "recall"): {200, 400, 401, 403, 413, 422},
    ("post", "resonance"): {200, 400, 401, 403, 413, 422},
    ("post", "search_memory"): {200, 400, 401, 403, 413, 422},
    ("get", "clusters/{cluster_id}/memories"): {200, 401, 403, 422},
    ("get", "facts"): {200, 401, 403, 422},
    ("get", "story"): {200, 401, 403, 404, 422},
    ("post", "episodes"): {200, 400, 401, 403, 409, 413, 422, 503},
    ("post", "forget"): {200, 400, 401, 403, 404, 409, 413, 422},
    ("post", "memories/{ref}/restore"): {200, 400, 401, 403, 404, 409, 413, 422},
    ("post", "memories/{ref}/pin"): {200, 400, 401, 403, 404, 409, 413, 422},
    ("post", "memories/{ref}/unpin"): {200, 400, 401, 403, 404, 409, 413, 422},
    ("get", "proposals"): {200, 401, 403, 422},
    ("get", "proposals/{proposal_id}"): {200, 401, 403, 404, 422},
    ("post", "proposals"): {201, 400, 401, 403, 413, 422},
    ("post", "proposals/{proposal_id}/decision"): {200, 400, 401, 403, 404, 409, 413, 422},
    ("post", "proposals/decisions"): {200, 400, 401, 403, 404, 409, 413, 422},
    ("get", "procedures"): {200, 401, 403, 422},
    ("post", "procedures"): {202, 400, 401, 403, 413, 422},
    ("get", "memories"): {200, 401, 403, 422},
    ("get", "memories/{ref}"): {200, 401, 403, 404, 422},
    ("get", "memories/{ref}/history"): {200, 401, 403, 404, 422},
    ("get", "context"): {200, 401, 403, 422},
    ("post", "journal/search"): {200, 400, 401, 403, 413, 422},
    ("get", "journal/{path}"): {200, 400, 401, 403, 404, 422},
}


def test_the_schema_declares_the_being_id_and_every_answer(http):
    spec = http.get("/openapi.json").json()
    error_ref = "#/components/schemas/ErrorResponse"
    declared = {(method, path): op for path, ops in spec["paths"].items() for method, op in ops.items()}
    expected = {(m, f"/v1/beings/{{being_id}}/{p}"): codes for (m, p), codes in BEING_ROUTES.items()}
    expected[("post", "/v1/ebooks/search")] = {200, 400, 401, 413, 422}
    expected[("get", "/readyz")] = {200, 503}
    expected[("get", "/healthz")] = {200}
    assert set(declared) == set(expected)
    for key, codes in expected.items():
        op = declared[key]
        assert {int(c) for c in op["responses"]} == codes, key
        for code in {c for c in codes if c >= 400}:
            content = op["responses"][str(code)]["content"]["application/json"]
            assert content["schema"]["$ref"] == error_ref, (key, code)
        if "{being_id}" in key[1]:
            (being,) = [p for p in op["parameters"] if p["name"] == "being_id"]
            assert being["in"] == "path" and being["schema"]["pattern"] == BEING_ID_PATTERN.pattern
            assert being["schema"]["maxLength"] == 64


def test_the_being_id_is_checked_after_the_token(http):
    with httpx.Client(base_url=str(http.base_url), timeout=30) as anonymous:
        response = anonymous.post("/v1/beings/ADA/recall", json={"query": "x"})
        assert response.status_code == 401
    response = http.post("/v1/beings/ADA/recall", json={"query": "x"})
    assert response.status_code == 422 and "invalid being id 'ADA'" in response.json()["error"]


# --------------------------------------------------------------------------- tokens


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        (";", "names no token"),
        (" ;; ", "names no token"),
        ("tokA=ada;;", "MINDFLOW_API_TOKENS has an empty entry"),
        ("tokA=ada;;tokB=*", "MINDFLOW_API_TOKENS has an empty entry"),
        (";tokA=ada", "MINDFLOW_API_TOKENS has an empty entry"),
        ("tokA=ada;tokA=*", "listed twice"),
        ("tokA=ada;tokB=*;tokA=bram", "listed twice"),
    ],
)
def test_token_mistakes_refuse_to_start(tmp_path, spec, says):
    with pytest.raises(MindflowError, match=says):
        parse_tokens(spec)
    with pytest.raises(MindflowError, match=says):
        create_app(Settings(home=tmp_path / "home", api_tokens=spec, _env_file=None))
    # `mindflow serve` says so on one line and exits non-zero, before it binds anything.
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(REPO),  # this checkout's mindflow
        "MINDFLOW_HOME": str(tmp_path / "home"),
        "MINDFLOW_API_TOKENS": spec,
        "HF_HUB_OFFLINE": "1",
    }
    done = subprocess.run(
        [sys.executable, "-m", "mindflow.cli", "serve", "--port", "0"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("error: ") and says in done.stderr and done.stderr.count("\n") == 1
    assert "tokA=" not in done.stderr.split("e.g.")[0]  # the token itself is not echoed


def test_a_blank_token_setting_is_no_tokens_and_trailing_separators_are_fine():
    assert not parse_tokens("").enabled and not parse_tokens("   ").enabled
    assert parse_tokens("tokA=ada,bram;").scopes == {"tokA": frozenset({"ada", "bram"})}
    # Only one: a second is an empty entry, and says where.
    with pytest.raises(MindflowError, match=r"empty entry \(entry 2 of 3: "):
        parse_tokens("tokA=ada;;")
    with pytest.raises(MindflowError, match=r"empty entry \(entry 1 of 2: "):
        parse_tokens(";tokA=ada")
