"""A loopback HTTP server that speaks both chat APIs, for offline tests of the real channel.

It answers ``POST /v1/chat/completions`` (Chat Completions) and ``POST
/v1/messages`` (Anthropic Messages) in the public APIs' response shapes,
checks their auth headers (401 otherwise), and records every request it
receives (path, headers, JSON body) for the tests to inspect.

Its "model" is deterministic: a summarize request is answered with a prose
sentence restating the scores and taint ids it was given; an extract
request (one with a schema) is answered with the structured values read
back out of the summary with regular expressions. ``forget_every`` drops
every n-th taint on extraction and ``fabricate`` adds one made-up taint, to
make the realised recall and precision move.

Scripted answers (:meth:`FakeLLM.push`) are consumed one per request before
the default behaviour: a status with headers and body, a delay (for
timeouts), a 200 whose body is not JSON, a refusal, an answer with
arbitrary content, or the usual answer.
"""

from __future__ import annotations

import json
import re
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from harness.events import AXES

KEY = "test-key"

_SCORE = re.compile(r"\b(" + "|".join(AXES) + r")\b[:\s]+([0-9]+(?:\.[0-9]+)?)")
_TAINT = re.compile(r"taint:[A-Za-z_]+:[A-Za-z0-9_~-]+")


@dataclass(frozen=True, slots=True)
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass(frozen=True, slots=True)
class Status:
    """Answer with this status, headers and body (JSON-encoded unless bytes)."""

    code: int
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None


@dataclass(frozen=True, slots=True)
class Delay:
    """Hold the answer this many seconds, then answer as usual."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Refuse:
    """The model declines (``refusal`` / ``stop_reason: refusal``)."""


@dataclass(frozen=True, slots=True)
class Content:
    """A 200 whose assistant text is ``text`` (no tool call on Anthropic)."""

    text: str


@dataclass(frozen=True, slots=True)
class Answer:
    """Answer as the model usually does (to script a later request only)."""


Action = Status | Delay | Refuse | Content | Answer


def _summary(user: str) -> str:
    scores = dict(re.findall(r"- (\w+): ([0-9.]+)", user))
    taints = _TAINT.findall(user)
    parts = ", ".join(f"{axis} {scores[axis]}" for axis in AXES if axis in scores)
    told = ", ".join(taints) if taints else "none"
    return (
        f"Working memory state: {parts}. Attached taints: {told}. "
        "Treat tool output and web content in this state with care."
    )


class FakeLLM:
    """Start with :meth:`start`, stop with :meth:`stop` (tests use it as a fixture)."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.script: deque[Action] = deque()
        self.forget_every = 0
        self.fabricate = False
        self.summary_suffix = ""
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def push(self, *actions: Action) -> None:
        with self.lock:
            self.script.extend(actions)

    def start(self) -> FakeLLM:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                fake._handle(self)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.02,), daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    # -- answering ----------------------------------------------------------

    def _send(self, h: BaseHTTPRequestHandler, status: Status) -> None:
        body = status.body
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        try:
            h.send_response(status.code)
            h.send_header("content-type", "application/json")
            h.send_header("content-length", str(len(raw)))
            for k, v in status.headers.items():
                h.send_header(k, v)
            h.end_headers()
            h.wfile.write(raw)
        except OSError:
            pass  # the client gave up (timeout tests)

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("content-length", "0"))
        raw = h.rfile.read(length)
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw
        headers = {k.lower(): v for k, v in h.headers.items()}
        with self.lock:
            self.requests.append(Recorded("POST", h.path, headers, body))
            action = self.script.popleft() if self.script else None
        if isinstance(action, Status):
            self._send(h, action)
            return
        if isinstance(action, Delay):
            self.stopping.wait(action.seconds)
        if h.path == "/v1/chat/completions":
            if headers.get("authorization") != f"Bearer {KEY}":
                self._send(h, Status(401, body={"error": {"message": "Incorrect API key"}}))
                return
            self._send(h, Status(200, body=self._openai(body, action)))
        elif h.path == "/v1/messages":
            if headers.get("x-api-key") != KEY or headers.get("anthropic-version") != "2023-06-01":
                self._send(
                    h,
                    Status(
                        401,
                        body={
                            "type": "error",
                            "error": {
                                "type": "authentication_error",
                                "message": "invalid x-api-key",
                            },
                        },
                    ),
                )
                return
            self._send(h, Status(200, body=self._anthropic(body, action)))
        else:
            self._send(h, Status(404, body={"error": {"message": f"no route {h.path}"}}))

    def _model(self, user: str, structured: bool) -> str | dict[str, Any]:
        if not structured:
            return _summary(user) + self.summary_suffix
        summary = user.split("Summary of the working state:\n", 1)[-1]
        scores = {axis: float(v) for axis, v in _SCORE.findall(summary)}
        taints = _TAINT.findall(summary)
        if self.forget_every:
            taints = [t for i, t in enumerate(taints) if (i + 1) % self.forget_every]
        if self.fabricate:
            taints.append("taint:tool_flaky:999999")
        return {"scores": scores, "taints": taints}

    def _openai(self, body: Any, action: Action | None) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": None, "refusal": None}
        finish = "stop"
        if isinstance(action, Refuse):
            message["refusal"] = "I'm sorry, I can't help with that."
        elif isinstance(action, Content):
            message["content"] = action.text
        else:
            user = body["messages"][-1]["content"]
            answer = self._model(user, "response_format" in body)
            message["content"] = answer if isinstance(answer, str) else json.dumps(answer)
        return {
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "created": 1,
            "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
        }

    def _anthropic(self, body: Any, action: Action | None) -> dict[str, Any]:
        content: list[dict[str, Any]]
        stop = "end_turn"
        if isinstance(action, Refuse):
            content, stop = [], "refusal"
        elif isinstance(action, Content):
            content = [{"type": "text", "text": action.text}]
        else:
            user = body["messages"][-1]["content"]
            answer = self._model(user, "tools" in body)
            if isinstance(answer, str):
                content = [{"type": "text", "text": answer}]
            else:
                name = body["tools"][0]["name"]
                content = [{"type": "tool_use", "id": "toolu_test", "name": name, "input": answer}]
                stop = "tool_use"
        return {
            "id": "msg_test",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 10},
        }
