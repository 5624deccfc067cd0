"""A scripted LLM server on 127.0.0.1 speaking OpenAI chat-completions and Anthropic messages.

Tests queue answers with `script([...])`; each request takes the next one. An answer is
a `Reply`, or a shorthand: a str (the text), an int (an HTTP error status), a dict or
list (sent as JSON text), or a pydantic model (sent as its JSON). With the queue empty
the server calls `responder(request)` when one is set (benchmarks), else answers 500.
Hostile answers: `NEVER` takes the request and never answers (a hung model), and
`nested_json(depth)` is a JSON object nested deeper than any parser's recursion limit.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    text: str | None = ""
    status: int = 200
    hang: float = 0.0  # seconds to wait before answering (past the client's timeout = a hang)
    input_tokens: int = 11
    output_tokens: int = 7
    raw: Any = None  # a body sent as is (e.g. a wrong wire shape)
    headers: dict[str, str] | None = None  # extra response headers (e.g. retry-after)


# A hung model: the connection is accepted, the request read, and no byte ever comes back
# (until the server closes).
NEVER = Reply(text=None, hang=math.inf)


def nested_json(depth: int = 100_000) -> str:
    """An answer that starts like the expected object and nests `depth` arrays in one value."""
    return '{"label": ' + "[" * depth + "]" * depth + ', "score": 0.5}'


def as_reply(item: Any) -> Reply:
    if isinstance(item, Reply):
        return item
    if isinstance(item, str):
        return Reply(text=item)
    if isinstance(item, int):
        return Reply(text=None, status=item)
    if isinstance(item, (dict, list)):
        return Reply(text=json.dumps(item))
    if hasattr(item, "model_dump_json"):
        return Reply(text=item.model_dump_json())
    raise TypeError(f"cannot script {item!r}")


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: dict

    @property
    def provider(self) -> str:
        return "anthropic" if self.path.endswith("/messages") else "openai"

    @property
    def model(self) -> str:
        return self.body.get("model", "")

    @property
    def prompt_text(self) -> str:
        """System and user text of the request, joined."""
        parts = [self.body.get("system") or ""]
        for m in self.body.get("messages", []):
            content = m.get("content")
            parts.append(content if isinstance(content, str) else json.dumps(content))
        return "\n".join(parts)


class LLMServer:
    def __init__(self) -> None:
        self._queue: list[Reply] = []
        self._lock = threading.Lock()
        self._closing = threading.Event()  # ends every scripted hang
        self.requests: list[Received] = []
        self.responder: Callable[[Received], Any] | None = None
        server = self
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(server))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        """Base URL for MINDFLOW_LLM_BASE_URL (OpenAI style, ending in /v1)."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def script(self, items: list[Any]) -> None:
        with self._lock:
            self._queue.extend(as_reply(i) for i in items)

    @property
    def pending(self) -> int:
        return len(self._queue)

    def reset(self) -> None:
        with self._lock:
            self._queue.clear()
            self.requests.clear()
            self.responder = None

    def next_reply(self, received: Received) -> Reply:
        with self._lock:
            self.requests.append(received)
            if self._queue:
                return self._queue.pop(0)
        if self.responder is not None:
            return as_reply(self.responder(received))
        return Reply(text=None, status=500)

    def close(self) -> None:
        self._closing.set()
        self._httpd.shutdown()
        self._httpd.server_close()


def _handler(server: LLMServer):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # quiet
            pass

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b"{}"
            try:
                body = json.loads(raw or b"{}")
            except json.JSONDecodeError:
                body = {}
            received = Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            if not (self.path.endswith("/chat/completions") or self.path.endswith("/messages")):
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            reply = server.next_reply(received)
            if reply.hang:
                server._closing.wait(None if math.isinf(reply.hang) else reply.hang)
                if math.isinf(reply.hang):
                    return  # never answered: the connection closes with the server
            if reply.raw is not None:
                self._send(reply.status, reply.raw)
            elif reply.status != 200:
                self._error(
                    received,
                    reply.status,
                    reply.headers or ({"retry-after": "0"} if reply.status == 429 else None),
                )
            elif received.provider == "anthropic":
                self._send(200, _anthropic_body(received, reply))
            else:
                self._send(200, _openai_body(received, reply))

        def _error(self, received: Received, status: int, headers: dict[str, str] | None) -> None:
            if received.provider == "anthropic":
                kind = {429: "rate_limit_error", 529: "overloaded_error"}.get(status, "api_error")
                body = {"type": "error", "error": {"type": kind, "message": f"scripted {status}"}}
            else:
                body = {"error": {"message": f"scripted {status}", "type": "server_error", "code": None}}
            self._send(status, body, headers)

        def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body).encode("utf-8")
            try:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a scripted hang past its timeout)

    return Handler


def _anthropic_body(received: Received, reply: Reply) -> dict:
    return {
        "id": "msg_loopback",
        "type": "message",
        "role": "assistant",
        "model": received.model,
        "content": [{"type": "text", "text": reply.text or ""}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": reply.input_tokens, "output_tokens": reply.output_tokens},
    }


def _openai_body(received: Received, reply: Reply) -> dict:
    return {
        "id": "chatcmpl-loopback",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": received.model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": reply.text},
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": reply.input_tokens,
            "completion_tokens": reply.output_tokens,
            "total_tokens": reply.input_tokens + reply.output_tokens,
        },
    }


# --------------------------------------------------------------------------- a stand-in model


def _system(received: Received) -> str:
    if received.body.get("system"):
        return (
            received.body["system"]
            if isinstance(received.body["system"], str)
            else json.dumps(received.body["system"])
        )
    return next((m["content"] for m in received.body.get("messages", []) if m.get("role") == "system"), "")


def _user(received: Received) -> str:
    return next((m["content"] for m in received.body.get("messages", []) if m.get("role") == "user"), "")


def _nodes(received: Received) -> list[dict]:
    text = _user(received)
    return json.loads(text.split("Nodes:\n", 1)[1]) if "Nodes:\n" in text else []


def fake_model(received: Received) -> Any:
    """A valid answer to any mindflow prompt, derived from the request (for pipeline tests and benches).

    Extraction: one scene per two consecutive episodes, one fact and one relation per scene.
    Roots: alternating labels. Consolidation: the first two fresh nodes merge. Split: the
    first two nodes form a group. Diary and think: fixed lines.
    """
    system = _system(received)
    if system.startswith("You turn a being's raw episodes"):
        lines = [
            line for line in _user(received).split("Episodes:\n", 1)[1].splitlines() if line.startswith("[")
        ]
        episodes = []
        for line in lines:
            episode_id, rest = line[1:].split("] ", 1)
            day, rest = rest.split(" ", 1)
            speaker, _, text = rest.partition(": ")
            episodes.append((episode_id, day, speaker, text))
        scenes, facts, relations = [], [], []
        for i in range(0, len(episodes), 2):
            pair = episodes[i : i + 2]
            ids = [p[0] for p in pair]
            words = " ".join(p[3] for p in pair).split()
            scenes.append({
                "episode_ids": ids, "action": " ".join(words[:40]) or "(nothing said)",
                "actors": sorted({p[2] for p in pair}), "when": [{"date": pair[0][1], "action": None}],
                "feeling": "attentive", "importance": 0.6, "themes": ["daily"],
                "emotion": [0.5, 0.4, 0.5, 0.1, 0.2, 0.3],
            })  # fmt: skip
            topic = " ".join(words[:3]) or "nothing"
            facts.append({"entity": pair[0][2], "key": "current topic", "value": topic, "category": "other",
                          "confidence": 0.7, "episode_ids": ids})  # fmt: skip
            relations.append({"subject": pair[0][2], "predicate": "relates-to", "object": topic,
                              "episode_ids": ids})  # fmt: skip
        entities = [{"name": s, "aliases": []} for s in sorted({e[2] for e in episodes})]
        return {"scenes": scenes, "entities": entities, "facts": facts, "relations": relations}
    if system.startswith("You sort a being's memories"):
        return {"labels": [{"node_id": n["node_id"], "root": ("Business", "Private")[i % 2]}
                           for i, n in enumerate(_nodes(received))]}  # fmt: skip
    if system.startswith("You consolidate one cluster"):
        fresh = [n["node_id"] for n in _nodes(received) if n.get("fresh")]
        merges = [{"survivor": fresh[0], "absorbed": [fresh[1]]}] if len(fresh) >= 2 else []
        return {"merges": merges, "make_dead": []}
    if system.startswith("You organise a being's memory"):
        nodes = _nodes(received)
        return {"groups": [{"label": "thread", "node_ids": [n["node_id"] for n in nodes[:2]]}]}
    if "diary" in system:
        return {"lines": ["Today went by.", "I kept track of it.", "Tomorrow more."]}
    if "bullets" in system:
        return {"bullets": ["keep going", "watch the open threads", "rest"]}
    return "a plain answer"
