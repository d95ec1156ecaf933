"""Errors of the real prose channel's client (:mod:`harness.llm`).

Kept apart from the client so the CLI can name them without importing the
HTTP stack on runs that never use it::

    LLMError
    ├── LLMSetupError       missing key or model, bad base URL, cache not writable
    ├── LLMTransportError   timeouts, connection failures, retries exhausted
    ├── LLMHTTPError        a non-retryable HTTP status (400, 401, 404, …)
    ├── LLMProtocolError    a 200 whose body is not the API's answer shape
    └── BudgetExhausted     the next request would exceed the call budget
"""

from __future__ import annotations

__all__ = [
    "BudgetExhausted",
    "LLMError",
    "LLMHTTPError",
    "LLMProtocolError",
    "LLMSetupError",
    "LLMTransportError",
]


class LLMError(Exception):
    """Root of every error the LLM client raises."""


class LLMSetupError(LLMError):
    """The channel cannot start: no key, no model, or a bad base URL."""


class LLMTransportError(LLMError):
    """The request did not get an answer (after the allowed retries)."""


class LLMHTTPError(LLMError):
    """The API answered with a status that retrying cannot fix."""


class LLMProtocolError(LLMError):
    """A 200 answer that is not the API's response shape."""


class BudgetExhausted(LLMError):
    """The next request would exceed the call budget; nothing was sent."""
