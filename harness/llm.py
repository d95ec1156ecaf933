"""A small client for two chat APIs, with a request-digest cache and a call budget.

The real prose channel (:mod:`harness.prose_llm`) talks to a model through
one of two public HTTP APIs:

- ``openai`` — Chat Completions: ``POST {base}/v1/chat/completions`` with
  ``Authorization: Bearer <key>``; structured output through
  ``response_format = {"type": "json_schema", "json_schema": {name, strict,
  schema}}``; the answer is ``choices[0].message`` (``content`` or
  ``refusal``) and ``choices[0].finish_reason``.
- ``anthropic`` — Messages: ``POST {base}/v1/messages`` with ``x-api-key``
  and ``anthropic-version: 2023-06-01``; structured output through one tool
  (``tools = [{name, description, input_schema}]``) that ``tool_choice``
  forces; the answer is the ``content`` blocks (``text`` / ``tool_use``) and
  ``stop_reason`` (``refusal`` when the model declines).

Guarantees:

- **Cache.** Every answered request is stored under the SHA-256 of its
  canonical request — RFC 8785 JSON of ``{"provider", "path", "body"}``
  (the body holds the model name; the base URL and the key are not part of
  it, so the same request to a mirror of the same model is one entry). A
  request found in the cache makes no HTTP call, so a rerun over the same
  states costs nothing and gives the same answers. Entries are written
  atomically (temporary file + rename); an unreadable entry is a miss.
- **Budget.** With ``budget = N`` at most N requests leave the process; the
  request that would be the (N+1)-th raises :class:`BudgetExhausted`
  before anything is sent. Cache hits are free.
- **Retries.** A 429, a 5xx, a timeout or a failed connection is retried
  at most ``max_retries`` times. A ``retry-after`` (seconds or HTTP date) or
  ``retry-after-ms`` header is honoured when present — a wait longer than
  ``max_retry_after`` is not waited for but reported — otherwise the wait is
  ``backoff_base · 2^attempt`` capped at ``backoff_cap``. Every request has
  a timeout.
- **Errors.** Nothing here lets a foreign exception out: transport, HTTP and
  protocol failures become one :class:`LLMError` subclass whose message
  names the provider, the URL and what went wrong. An answer whose *content*
  is unusable (refusal, malformed JSON inside a well-formed answer) is not an
  error here: it is returned, cached, and judged by the caller.

Errors (defined in :mod:`harness.llm_errors`)::

    LLMError
    ├── LLMSetupError       missing key or model, bad base URL
    ├── LLMTransportError   timeouts, connection failures, retries exhausted
    ├── LLMHTTPError        a non-retryable HTTP status (400, 401, 404, …)
    ├── LLMProtocolError    a 200 whose body is not the API's answer shape
    └── BudgetExhausted     the next request would exceed the call budget
"""

from __future__ import annotations

import contextlib
import email.utils
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, assert_never

import httpx
import rfc8785

from harness.llm_errors import (
    BudgetExhausted,
    LLMError,
    LLMHTTPError,
    LLMProtocolError,
    LLMSetupError,
    LLMTransportError,
)

__all__ = [
    "ANTHROPIC_VERSION",
    "BudgetExhausted",
    "ChatReply",
    "ChatRequest",
    "LLMClient",
    "LLMError",
    "LLMHTTPError",
    "LLMProtocolError",
    "LLMSettings",
    "LLMSetupError",
    "LLMStats",
    "LLMTransportError",
    "Provider",
    "ResponseCache",
    "api_path",
    "build_body",
    "endpoint",
    "parse_reply",
    "request_digest",
]

ANTHROPIC_VERSION = "2023-06-01"


class Provider(StrEnum):
    """The chat APIs the real prose channel can speak."""

    OPENAI = "openai"
    ANTHROPIC = "anthropic"

    @property
    def key_env(self) -> str:
        match self:
            case Provider.OPENAI:
                return "OPENAI_API_KEY"
            case Provider.ANTHROPIC:
                return "ANTHROPIC_API_KEY"
            case _:
                assert_never(self)

    @property
    def base_url_env(self) -> str:
        match self:
            case Provider.OPENAI:
                return "OPENAI_BASE_URL"
            case Provider.ANTHROPIC:
                return "ANTHROPIC_BASE_URL"
            case _:
                assert_never(self)

    @property
    def default_base_url(self) -> str:
        match self:
            case Provider.OPENAI:
                return "https://api.openai.com"
            case Provider.ANTHROPIC:
                return "https://api.anthropic.com"
            case _:
                assert_never(self)


def api_path(provider: Provider) -> str:
    match provider:
        case Provider.OPENAI:
            return "/v1/chat/completions"
        case Provider.ANTHROPIC:
            return "/v1/messages"
        case _:
            assert_never(provider)


def endpoint(base_url: str, provider: Provider) -> str:
    """``{base}/v1/…``; a base that already ends in ``/v1`` is not doubled.

    (The OpenAI SDK's ``OPENAI_BASE_URL`` convention includes ``/v1``;
    Anthropic's ``ANTHROPIC_BASE_URL`` does not — both are accepted.)
    """
    try:
        url = httpx.URL(base_url)
    except (httpx.InvalidURL, TypeError) as exc:
        raise LLMSetupError(f"base URL {base_url!r}: {exc}") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise LLMSetupError(f"base URL {base_url!r}: expected http(s)://host[:port][/path]")
    base = base_url.rstrip("/")
    if base.endswith("/v1"):
        base = base[: -len("/v1")]
    return base + api_path(provider)


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """One system + user turn; ``schema`` asks for a structured answer."""

    system: str
    user: str
    max_tokens: int
    #: (name, JSON schema) of the structured answer, or None for free text
    schema: tuple[str, Mapping[str, Any]] | None = None


@dataclass(frozen=True, slots=True)
class ChatReply:
    """What the model answered, in provider-neutral form.

    ``structured`` is the parsed object when a schema was requested and the
    answer carried valid JSON of object type; ``structured_error`` says why
    not otherwise. ``refusal`` is the model's refusal (text, or the stop
    reason when the API gives no text).
    """

    text: str | None
    structured: dict[str, Any] | None
    structured_error: str | None
    refusal: str | None
    stop: str
    cached: bool


def build_body(provider: Provider, model: str, request: ChatRequest) -> dict[str, Any]:
    """The request body exactly as the provider's public API defines it."""
    match provider:
        case Provider.OPENAI:
            body: dict[str, Any] = {
                "model": model,
                "messages": [
                    {"role": "system", "content": request.system},
                    {"role": "user", "content": request.user},
                ],
                "max_completion_tokens": request.max_tokens,
            }
            if request.schema is not None:
                name, schema = request.schema
                body["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": name, "strict": True, "schema": dict(schema)},
                }
            return body
        case Provider.ANTHROPIC:
            body = {
                "model": model,
                "max_tokens": request.max_tokens,
                "system": request.system,
                "messages": [{"role": "user", "content": request.user}],
                "temperature": 0,
            }
            if request.schema is not None:
                name, schema = request.schema
                body["tools"] = [
                    {
                        "name": name,
                        "description": "Record the values read from the summary.",
                        "input_schema": dict(schema),
                    }
                ]
                body["tool_choice"] = {"type": "tool", "name": name}
            return body
        case _:
            assert_never(provider)


def request_digest(provider: Provider, body: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of the RFC 8785 canonical ``{"provider", "path", "body"}``."""
    canonical = rfc8785.dumps(
        {"provider": provider.value, "path": api_path(provider), "body": dict(body)}
    )
    return hashlib.sha256(canonical).hexdigest()


def _shape(cond: bool, provider: Provider, what: str) -> None:
    if not cond:
        raise LLMProtocolError(f"{provider.value} answer: {what}")


def _json_object(text: str) -> tuple[dict[str, Any] | None, str | None]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        return None, f"not JSON ({exc})"
    if not isinstance(value, dict):
        return None, f"expected a JSON object, got {type(value).__name__}"
    return value, None


def parse_reply(
    provider: Provider, answer: Any, *, structured: bool, cached: bool = False
) -> ChatReply:
    """Read an answer body; :class:`LLMProtocolError` if it is not the API's shape."""
    _shape(isinstance(answer, dict), provider, "expected a JSON object")
    match provider:
        case Provider.OPENAI:
            choices = answer.get("choices")
            _shape(
                isinstance(choices, list) and len(choices) > 0 and isinstance(choices[0], dict),
                provider,
                "'choices' is missing or empty",
            )
            choice = choices[0]
            message = choice.get("message")
            _shape(isinstance(message, dict), provider, "'choices[0].message' is missing")
            content = message.get("content")
            refusal = message.get("refusal")
            _shape(content is None or isinstance(content, str), provider, "content not a string")
            _shape(refusal is None or isinstance(refusal, str), provider, "refusal not a string")
            stop = str(choice.get("finish_reason"))
            if refusal is None and stop == "content_filter":
                refusal = "content_filter"
            obj: dict[str, Any] | None = None
            err: str | None = None
            if structured and refusal is None:
                if content is None:
                    err = f"no content (finish_reason {stop})"
                else:
                    obj, err = _json_object(content)
            return ChatReply(content, obj, err, refusal, stop, cached)
        case Provider.ANTHROPIC:
            blocks = answer.get("content")
            _shape(isinstance(blocks, list), provider, "'content' is not a list")
            stop = str(answer.get("stop_reason"))
            texts: list[str] = []
            tool_input: dict[str, Any] | None = None
            for block in blocks:
                _shape(isinstance(block, dict), provider, "a content block is not an object")
                kind = block.get("type")
                if kind == "text":
                    _shape(isinstance(block.get("text"), str), provider, "text block without text")
                    texts.append(block["text"])
                elif kind == "tool_use" and tool_input is None:
                    value = block.get("input")
                    _shape(isinstance(value, dict), provider, "tool_use block without input")
                    tool_input = value
            text = "".join(texts) if texts else None
            refusal_text = (text or "refusal") if stop == "refusal" else None
            err = None
            if structured and refusal_text is None and tool_input is None:
                err = f"no tool_use block (stop_reason {stop})"
            return ChatReply(text, tool_input, err, refusal_text, stop, cached)
        case _:
            assert_never(provider)


class ResponseCache:
    """Answer bodies on disk, one JSON file per request digest (``ab/abcd….json``)."""

    __slots__ = ("root",)

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, digest: str) -> Path:
        return self.root / digest[:2] / f"{digest}.json"

    def get(self, digest: str) -> Any | None:
        path = self._path(digest)
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(entry, dict) or "response" not in entry:
            return None
        return entry["response"]

    def put(self, digest: str, request: Mapping[str, Any], response: Any) -> None:
        path = self._path(digest)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        except OSError as exc:
            raise LLMSetupError(f"LLM cache {self.root}: cannot write ({exc})") from None
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump({"request": request, "response": response}, fh, sort_keys=True)
            os.replace(tmp, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise LLMSetupError(f"LLM cache {self.root}: cannot write ({exc})") from None


@dataclass(frozen=True, slots=True)
class LLMSettings:
    """Where and how to call; ``api_key`` may be None until a request must be sent."""

    provider: Provider
    model: str
    base_url: str
    api_key: str | None
    cache_dir: Path
    budget: int | None = None
    timeout: float = 60.0
    max_retries: int = 4
    backoff_base: float = 1.0
    backoff_cap: float = 30.0
    max_retry_after: float = 120.0


@dataclass(slots=True)
class LLMStats:
    """Counts over the client's life: requests sent, answers from the cache, retries."""

    calls: int = 0
    cache_hits: int = 0
    retries: int = 0
    waited_seconds: float = 0.0


def _retry_after(headers: httpx.Headers) -> float | None:
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _error_detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:200]
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return str(err["message"])[:200]
    return response.text[:200]


class LLMClient:
    """Cached, budgeted, retrying calls to one provider and model.

    ``transport`` and ``sleep`` exist for tests (an in-process transport, a
    recorded sleep); by default httpx's own transport and :func:`time.sleep`.
    """

    __slots__ = ("_http", "cache", "settings", "sleep", "stats", "transport", "url")

    def __init__(
        self,
        settings: LLMSettings,
        *,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.settings = settings
        self.transport = transport
        self.sleep = sleep
        self.stats = LLMStats()
        self.url = endpoint(settings.base_url, settings.provider)
        self.cache = ResponseCache(settings.cache_dir)
        self._http: httpx.Client | None = None

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
            self._http = None

    def complete(self, request: ChatRequest) -> ChatReply:
        """One answer: from the cache, else from the API (then cached)."""
        s = self.settings
        body = build_body(s.provider, s.model, request)
        digest = request_digest(s.provider, body)
        structured = request.schema is not None
        hit = self.cache.get(digest)
        if hit is not None:
            try:
                reply = parse_reply(s.provider, hit, structured=structured, cached=True)
            except LLMProtocolError:
                reply = None  # an entry from elsewhere that does not parse: ask again
            if reply is not None:
                self.stats.cache_hits += 1
                return reply
        if s.budget is not None and self.stats.calls >= s.budget:
            raise BudgetExhausted(
                f"LLM call budget of {s.budget} reached: {self.stats.calls} calls made, "
                f"{self.stats.cache_hits} answers from the cache; the answers so far are "
                f"cached in {s.cache_dir} — rerun with a larger --llm-budget to continue"
            )
        answer = self._post(body)
        self.stats.calls += 1
        reply = parse_reply(s.provider, answer, structured=structured)
        self.cache.put(digest, body, answer)
        return reply

    def _client(self) -> httpx.Client:
        if self._http is None:
            self._http = httpx.Client(
                timeout=httpx.Timeout(self.settings.timeout), transport=self.transport
            )
        return self._http

    def _headers(self) -> dict[str, str]:
        s = self.settings
        if not s.api_key:
            raise LLMSetupError(
                f"{s.provider.key_env} is not set (needed to call {self.url}; "
                "answers already in the cache need no key)"
            )
        match s.provider:
            case Provider.OPENAI:
                return {"authorization": f"Bearer {s.api_key}"}
            case Provider.ANTHROPIC:
                return {"x-api-key": s.api_key, "anthropic-version": ANTHROPIC_VERSION}
            case _:
                assert_never(s.provider)

    def _post(self, body: dict[str, Any]) -> Any:
        s = self.settings
        headers = self._headers()
        where = f"{s.provider.value} POST {self.url}"
        last = "no attempt"
        attempts = s.max_retries + 1
        for attempt in range(attempts):
            wait: float | None = None
            try:
                response = self._client().post(self.url, json=body, headers=headers)
            except httpx.TimeoutException:
                last = f"timed out after {s.timeout:g} s"
            except httpx.TransportError as exc:
                last = f"connection failed ({exc or type(exc).__name__})"
            else:
                status = response.status_code
                if status == 200:
                    try:
                        return response.json()
                    except ValueError:
                        raise LLMProtocolError(
                            f"{where}: answer is not JSON: {response.text[:80]!r}"
                        ) from None
                if status == 429 or status >= 500:
                    last = f"HTTP {status}: {_error_detail(response)}"
                    wait = _retry_after(response.headers)
                    if wait is not None and wait > s.max_retry_after:
                        raise LLMTransportError(
                            f"{where}: HTTP {status} asks to retry after {wait:g} s, more than "
                            f"the {s.max_retry_after:g} s this client waits"
                        )
                else:
                    raise LLMHTTPError(f"{where}: HTTP {status}: {_error_detail(response)}")
            if attempt + 1 == attempts:
                break
            if wait is None:
                wait = min(s.backoff_cap, s.backoff_base * 2**attempt)
            self.stats.retries += 1
            self.stats.waited_seconds += wait
            self.sleep(wait)
        raise LLMTransportError(f"{where}: gave up after {attempts} attempts: {last}")
