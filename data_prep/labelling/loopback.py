"""A chat-completions server on loopback whose answers are scripted per request: the test double
the labeller's tests and ``scripts/bench_labelling.py`` run against (real HTTP, real sockets).

    with ChatServer(responder, latency=0.2) as server:
        backend = OpenAIBackend([server.url], model="judge")

``responder(request, n)`` gets the parsed request body and its 0-based arrival number and returns
a :class:`Reply`: a chat completion with ``content``, or any status, headers and raw body, after an
optional delay; ``drop=True`` closes the connection without an answer. :func:`oracle_reply` is the
default: a valid JSON answer for each task, decided by the word overlap of query and passage (so a
test knows what every label will be). Every request is recorded (:attr:`ChatServer.requests`),
headers included, so a test can check what was sent and how often.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

_WORD = re.compile(r"\w+")
_STOP = frozenset("a an the of in on at to for is are was were be by and or what who when where which how did do does "
                  "with from as that this it its".split())


@dataclass
class Reply:
    content: str | None = None  # the assistant message of a 200 chat completion
    status: int = 200
    body: str | bytes | None = None  # a raw body instead of a chat completion
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    drop: bool = False
    usage: tuple[int, int] | None = None  # (prompt_tokens, completion_tokens); default from word counts


@dataclass
class Recorded:
    n: int
    path: str
    headers: dict[str, str]
    body: Any
    time: float


def words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP}


def prompt_parts(request: dict[str, Any]) -> tuple[str, str, list[str]]:
    """(query, passage, numbered sentences) read back from the labeller's user message."""
    user = next((m["content"] for m in request.get("messages", []) if m.get("role") == "user"), "")
    q = re.search(r"^(?:Query|Question): (.*)$", user, re.M)
    p = re.search(r"<passage>\n(.*)\n</passage>", user, re.S)
    passage = p.group(1) if p else ""
    sentences = re.findall(r"^\[\d+\] (.*)$", passage, re.M)
    return (q.group(1) if q else ""), passage, sentences


def overlap(query: str, text: str) -> float:
    q = words(query)
    return len(q & words(text)) / len(q) if q else 0.0


def oracle_answer(request: dict[str, Any]) -> str:
    """A valid answer for the prompt in ``request``, by word overlap (deterministic)."""
    query, passage, sentences = prompt_parts(request)
    user = next((m["content"] for m in request.get("messages", []) if m.get("role") == "user"), "")
    if '"key_sentences"' in user:
        scores = [overlap(query, s) for s in sentences]
        best = max(range(len(scores)), key=lambda i: scores[i]) if scores else None
        keys = [best] if best is not None and scores[best] > 0 else []
        return json.dumps({"reason": "overlap", "key_sentences": keys})
    ov = overlap(query, passage)
    if '"has_answer"' in user:
        return json.dumps({"reason": "overlap", "has_answer": ov >= 0.5})
    grade = 3 if ov >= 0.75 else 2 if ov >= 0.5 else 1 if ov >= 0.25 else 0
    return json.dumps({"reason": f"{ov:.2f} of the query's words", "grade": grade})


def oracle_reply(request: dict[str, Any], n: int) -> Reply:
    return Reply(oracle_answer(request))


class _Server(ThreadingHTTPServer):
    # the default listen backlog (5) refuses connections when many clients connect at once on a busy
    # machine; a real inference server accepts far more
    request_queue_size = 128
    daemon_threads = True


class ChatServer:
    """``ThreadingHTTPServer`` on 127.0.0.1 (a free port) serving ``POST /v1/chat/completions``."""

    def __init__(self, responder: Callable[[dict[str, Any], int], Reply] = oracle_reply, latency: float = 0.0,
                 host: str = "127.0.0.1", port: int = 0):
        self.responder = responder
        self.latency = latency
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        self._count = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except json.JSONDecodeError:
                    body = raw.decode("utf-8", "replace")
                with server._lock:
                    n = server._count
                    server._count += 1
                    server.requests.append(Recorded(n, self.path, dict(self.headers), body, time.time()))
                if self.path.rstrip("/") != "/v1/chat/completions":
                    return self._send(404, b'{"error": {"message": "not found"}}', {})
                reply = server.responder(body if isinstance(body, dict) else {}, n)
                delay = server.latency + reply.delay
                if delay:
                    time.sleep(delay)
                if reply.drop:
                    self.close_connection = True
                    try:
                        self.connection.shutdown(2)
                    except OSError:
                        pass
                    return
                if reply.body is not None:
                    data = reply.body.encode("utf-8") if isinstance(reply.body, str) else reply.body
                else:
                    content = reply.content if reply.content is not None else ""
                    usage = reply.usage or (len(json.dumps(body).split()), len(content.split()))
                    data = json.dumps({
                        "id": f"chatcmpl-{n}", "object": "chat.completion", "created": int(time.time()),
                        "model": body.get("model") if isinstance(body, dict) else None,
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                     "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1],
                                  "total_tokens": usage[0] + usage[1]},
                    }).encode("utf-8")
                self._send(reply.status, data, reply.headers)

            def _send(self, status: int, data: bytes, headers: dict[str, str]) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout)
                    self.close_connection = True

        self._httpd = _Server((host, port), Handler)
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> "ChatServer":
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> "ChatServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
