"""The chat client against a loopback server: request shapes, cache, budget, retries, errors."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.llm import (
    ANTHROPIC_VERSION,
    BudgetExhausted,
    ChatRequest,
    LLMClient,
    LLMHTTPError,
    LLMProtocolError,
    LLMSettings,
    LLMSetupError,
    LLMTransportError,
    Provider,
    endpoint,
    request_digest,
)
from harness.prose_llm import EXTRACT_SCHEMA, extract_request, summarize_request
from tests.harness._llm_server import KEY, Content, Delay, FakeLLM, Status

STATE = ((0.7, 0.65, 0.65, 0.45, 1.0), {"taint:unverified_web:2", "taint:tool_flaky:6"})


@pytest.fixture
def fake() -> Iterator[FakeLLM]:
    server = FakeLLM().start()
    try:
        yield server
    finally:
        server.stop()


class Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def _client(
    fake: FakeLLM,
    tmp_path: Path,
    provider: Provider = Provider.OPENAI,
    *,
    key: str | None = KEY,
    sleep: Sleeps | None = None,
    **kw: object,
) -> LLMClient:
    settings = LLMSettings(
        provider=provider,
        model="test-model",
        base_url=fake.base_url,
        api_key=key,
        cache_dir=tmp_path / "cache",
        **kw,  # type: ignore[arg-type]
    )
    return LLMClient(settings, sleep=sleep if sleep is not None else Sleeps())


def test_openai_requests_are_chat_completions_with_bearer_and_json_schema(
    fake: FakeLLM, tmp_path: Path
) -> None:
    client = _client(fake, tmp_path)
    summary = client.complete(summarize_request(*STATE))
    assert summary.text is not None
    assert "taint:unverified_web:2" in summary.text
    reply = client.complete(extract_request(summary.text))
    assert reply.structured is not None
    assert set(reply.structured["taints"]) == STATE[1]
    first, second = fake.requests
    for r in (first, second):
        assert r.path == "/v1/chat/completions"
        assert r.headers["authorization"] == f"Bearer {KEY}"
        assert r.headers["content-type"] == "application/json"
        assert "x-api-key" not in r.headers
        assert r.body["model"] == "test-model"
        assert [m["role"] for m in r.body["messages"]] == ["system", "user"]
        assert isinstance(r.body["max_completion_tokens"], int)
    assert "response_format" not in first.body
    fmt = second.body["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["strict"] is True
    assert fmt["json_schema"]["schema"] == EXTRACT_SCHEMA
    assert client.stats.calls == 2
    assert client.stats.cache_hits == 0


def test_anthropic_requests_are_messages_with_api_key_version_and_forced_tool(
    fake: FakeLLM, tmp_path: Path
) -> None:
    client = _client(fake, tmp_path, Provider.ANTHROPIC)
    summary = client.complete(summarize_request(*STATE))
    assert summary.text is not None
    reply = client.complete(extract_request(summary.text))
    assert reply.structured is not None
    assert reply.stop == "tool_use"
    assert reply.structured["scores"]["verification"] == 0.45
    first, second = fake.requests
    for r in (first, second):
        assert r.path == "/v1/messages"
        assert r.headers["x-api-key"] == KEY
        assert r.headers["anthropic-version"] == ANTHROPIC_VERSION
        assert "authorization" not in r.headers
        assert isinstance(r.body["system"], str)
        assert [m["role"] for m in r.body["messages"]] == ["user"]
        assert isinstance(r.body["max_tokens"], int)
    assert "tools" not in first.body
    (tool,) = second.body["tools"]
    assert tool["input_schema"] == EXTRACT_SCHEMA
    assert second.body["tool_choice"] == {"type": "tool", "name": tool["name"]}


def test_base_url_with_v1_is_not_doubled() -> None:
    assert endpoint("https://x.test/v1/", Provider.OPENAI) == "https://x.test/v1/chat/completions"
    assert endpoint("https://x.test", Provider.ANTHROPIC) == "https://x.test/v1/messages"
    with pytest.raises(LLMSetupError, match="ftp://x"):
        endpoint("ftp://x", Provider.OPENAI)


def test_cached_answer_makes_no_http_call_and_needs_no_key(fake: FakeLLM, tmp_path: Path) -> None:
    first = _client(fake, tmp_path).complete(summarize_request(*STATE))
    assert len(fake.requests) == 1
    again = _client(fake, tmp_path, key=None)
    reply = again.complete(summarize_request(*STATE))
    assert len(fake.requests) == 1
    assert reply.text == first.text
    assert reply.cached
    assert (again.stats.calls, again.stats.cache_hits) == (0, 1)


def test_digest_covers_model_and_body_but_not_base_url_or_key() -> None:
    req = summarize_request(*STATE)
    from harness.llm import build_body

    a = request_digest(Provider.OPENAI, build_body(Provider.OPENAI, "m1", req))
    b = request_digest(Provider.OPENAI, build_body(Provider.OPENAI, "m2", req))
    c = request_digest(Provider.ANTHROPIC, build_body(Provider.ANTHROPIC, "m1", req))
    assert len({a, b, c}) == 3
    assert a == request_digest(Provider.OPENAI, build_body(Provider.OPENAI, "m1", req))


def test_budget_stops_before_the_next_request_and_cache_stays_free(
    fake: FakeLLM, tmp_path: Path
) -> None:
    client = _client(fake, tmp_path, budget=1)
    client.complete(summarize_request(*STATE))
    with pytest.raises(BudgetExhausted, match="budget of 1 reached: 1 calls made"):
        client.complete(summarize_request((0.1,) * 5, set()))
    assert len(fake.requests) == 1
    client.complete(summarize_request(*STATE))  # cached: allowed past the budget
    assert len(fake.requests) == 1
    assert client.stats.cache_hits == 1


def test_429_waits_as_retry_after_says(fake: FakeLLM, tmp_path: Path) -> None:
    sleeps = Sleeps()
    fake.push(
        Status(429, {"retry-after": "2"}, {"error": {"message": "rate limited"}}),
        Status(429, {"retry-after-ms": "250"}, {"error": {"message": "rate limited"}}),
    )
    client = _client(fake, tmp_path, sleep=sleeps)
    assert client.complete(summarize_request(*STATE)).text
    assert sleeps == [2.0, 0.25]
    assert len(fake.requests) == 3
    assert client.stats.retries == 2
    assert client.stats.calls == 1


def test_5xx_backs_off_exponentially_then_succeeds(fake: FakeLLM, tmp_path: Path) -> None:
    sleeps = Sleeps()
    fake.push(Status(503, body={"error": {"message": "overloaded"}}), Status(500, body=b"oops"))
    client = _client(fake, tmp_path, sleep=sleeps, backoff_base=0.5)
    assert client.complete(summarize_request(*STATE)).text
    assert sleeps == [0.5, 1.0]


def test_rate_limit_without_end_gives_up_with_the_last_status(
    fake: FakeLLM, tmp_path: Path
) -> None:
    fake.push(*[Status(429, {"retry-after": "1"}, {"error": {"message": "slow down"}})] * 3)
    client = _client(fake, tmp_path, max_retries=2)
    with pytest.raises(LLMTransportError, match=r"gave up after 3 attempts: HTTP 429: slow down"):
        client.complete(summarize_request(*STATE))
    assert len(fake.requests) == 3


def test_retry_after_beyond_the_limit_is_reported_not_waited(fake: FakeLLM, tmp_path: Path) -> None:
    sleeps = Sleeps()
    fake.push(Status(429, {"retry-after": "3600"}, {"error": {"message": "quota"}}))
    client = _client(fake, tmp_path, sleep=sleeps)
    with pytest.raises(LLMTransportError, match="retry after 3600 s, more than the 120 s"):
        client.complete(summarize_request(*STATE))
    assert sleeps == []
    assert len(fake.requests) == 1


def test_timeout_is_retried_then_reported(fake: FakeLLM, tmp_path: Path) -> None:
    fake.push(Delay(5.0), Delay(5.0))
    client = _client(fake, tmp_path, timeout=0.2, max_retries=1)
    with pytest.raises(LLMTransportError, match=r"gave up after 2 attempts: timed out after 0.2 s"):
        client.complete(summarize_request(*STATE))
    assert len(fake.requests) == 2


def test_answer_that_is_not_json_is_a_protocol_error_and_not_cached(
    fake: FakeLLM, tmp_path: Path
) -> None:
    fake.push(Status(200, body=b"{not json"))
    client = _client(fake, tmp_path)
    with pytest.raises(LLMProtocolError, match="answer is not JSON"):
        client.complete(summarize_request(*STATE))
    assert client.complete(summarize_request(*STATE)).text  # asked again, not served from cache
    assert len(fake.requests) == 2


@pytest.mark.parametrize("provider", list(Provider))
def test_answer_of_the_wrong_shape_is_a_protocol_error(
    fake: FakeLLM, tmp_path: Path, provider: Provider
) -> None:
    fake.push(Status(200, body={"id": "x", "unexpected": True}))
    with pytest.raises(LLMProtocolError, match=f"{provider.value} answer"):
        _client(fake, tmp_path, provider).complete(summarize_request(*STATE))


def test_auth_failure_is_not_retried(fake: FakeLLM, tmp_path: Path) -> None:
    client = _client(fake, tmp_path, Provider.ANTHROPIC, key="wrong")
    with pytest.raises(LLMHTTPError, match="HTTP 401: invalid x-api-key"):
        client.complete(summarize_request(*STATE))
    assert len(fake.requests) == 1


def test_missing_key_is_named_and_nothing_is_sent(fake: FakeLLM, tmp_path: Path) -> None:
    with pytest.raises(LLMSetupError, match="OPENAI_API_KEY is not set"):
        _client(fake, tmp_path, key=None).complete(summarize_request(*STATE))
    assert fake.requests == []


def test_refused_connection_is_a_transport_error(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = LLMSettings(
        Provider.OPENAI, "m", f"http://127.0.0.1:{port}", KEY, tmp_path, max_retries=1
    )
    sleeps = Sleeps()
    with pytest.raises(LLMTransportError, match="connection failed"):
        LLMClient(settings, sleep=sleeps).complete(ChatRequest("s", "u", 10))
    assert sleeps == [1.0]


def test_unusable_content_is_returned_and_cached_for_the_caller_to_judge(
    fake: FakeLLM, tmp_path: Path
) -> None:
    fake.push(Content("here you go: {scores"))
    client = _client(fake, tmp_path)
    reply = client.complete(extract_request("a summary"))
    assert reply.structured is None
    assert reply.structured_error is not None
    assert "not JSON" in reply.structured_error
    again = client.complete(extract_request("a summary"))
    assert again.cached
    assert again.structured_error == reply.structured_error
    assert len(fake.requests) == 1
