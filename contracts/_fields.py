"""Strict field readers for statements parsed from untrusted JSON.

Each reader takes the decoded JSON object, a field name and bounds, and
returns a typed value or raises :class:`EncodingError` naming the statement
kind, the field and what was expected.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar

from contracts.errors import EncodingError

__all__ = [
    "MAX_COUNT",
    "MAX_LIST",
    "MAX_STR",
    "MAX_TIME_MS",
    "T",
    "check_fields",
    "get_bool",
    "get_digest",
    "get_enum",
    "get_float01",
    "get_int",
    "get_list",
    "get_node_id",
    "get_opt",
    "get_str",
    "is_digest",
]

T = TypeVar("T")

#: Longest free-form string field (refs, endpoints, taint ids, reasons).
MAX_STR = 1024
#: Most items in a list field (leaves served, citations, endpoints …).
MAX_LIST = 100_000
#: Largest count/index (leaf counts, sequence numbers, re-asks).
MAX_COUNT = 2**40
#: Latest representable time, ms since the epoch (year ~5138).
MAX_TIME_MS = 10**14

_HEX_CHARS = "0123456789abcdef"


def is_digest(value: object) -> bool:
    """64 lower-case hex characters (a SHA-256 digest or a node id)."""
    # str.strip with the hex alphabet leaves "" only if every character is hex;
    # cheaper than a regex on this hot path.
    return type(value) is str and len(value) == 64 and not value.strip(_HEX_CHARS)


def check_fields(obj: dict[str, Any], kind: str, allowed: frozenset[str]) -> None:
    got = obj.get("type")
    if got != kind:
        raise EncodingError(f"{kind}: field 'type' is {got!r:.60}, expected {kind!r}")
    if not obj.keys() <= allowed:
        unknown = sorted(obj.keys() - allowed)
        raise EncodingError(f"{kind}: unknown fields {unknown[:5]}")


def _missing(kind: str, key: str) -> EncodingError:
    return EncodingError(f"{kind}: missing field {key!r}")


def get_str(obj: dict[str, Any], key: str, kind: str, *, max_len: int = MAX_STR) -> str:
    if key not in obj:
        raise _missing(kind, key)
    value = obj[key]
    if not isinstance(value, str):
        raise EncodingError(f"{kind}: field {key!r} must be a string, got {type(value).__name__}")
    if len(value) > max_len:
        raise EncodingError(f"{kind}: field {key!r} longer than {max_len} characters")
    return value


def get_int(obj: dict[str, Any], key: str, kind: str, *, lo: int = 0, hi: int = MAX_COUNT) -> int:
    if key not in obj:
        raise _missing(kind, key)
    value = obj[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise EncodingError(f"{kind}: field {key!r} must be an integer, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise EncodingError(f"{kind}: field {key!r} = {value} outside [{lo}, {hi}]")
    return value


def get_bool(obj: dict[str, Any], key: str, kind: str) -> bool:
    if key not in obj:
        raise _missing(kind, key)
    value = obj[key]
    if not isinstance(value, bool):
        raise EncodingError(f"{kind}: field {key!r} must be a boolean, got {type(value).__name__}")
    return value


def get_float01(obj: dict[str, Any], key: str, kind: str) -> float:
    if key not in obj:
        raise _missing(kind, key)
    value = obj[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise EncodingError(f"{kind}: field {key!r} must be a number, got {type(value).__name__}")
    result = float(value)
    if not (math.isfinite(result) and 0.0 <= result <= 1.0):
        raise EncodingError(f"{kind}: field {key!r} = {value!r} outside [0, 1]")
    return result


def get_digest(obj: dict[str, Any], key: str, kind: str) -> str:
    if key not in obj:
        raise _missing(kind, key)
    value = obj[key]
    if not is_digest(value):
        raise EncodingError(f"{kind}: field {key!r} must be 64 lower-case hex characters")
    return str(value)


def get_node_id(obj: dict[str, Any], key: str, kind: str) -> str:
    # A node id is a raw Ed25519 public key in hex; whether it is a valid
    # curve point is checked when a signature is verified against it.
    if key not in obj:
        raise _missing(kind, key)
    value = obj[key]
    if not is_digest(value):
        raise EncodingError(f"{kind}: field {key!r} must be a node id (64 lower-case hex)")
    return str(value)


def get_list(
    obj: dict[str, Any],
    key: str,
    kind: str,
    item: Callable[[object, str], T],
    *,
    max_len: int = MAX_LIST,
) -> tuple[T, ...]:
    if key not in obj:
        raise _missing(kind, key)
    value = obj[key]
    if not isinstance(value, list):
        raise EncodingError(f"{kind}: field {key!r} must be a list, got {type(value).__name__}")
    if len(value) > max_len:
        raise EncodingError(f"{kind}: field {key!r} has {len(value)} items, limit {max_len}")
    try:
        return tuple([item(v, key) for v in value])
    except (EncodingError, ValueError, TypeError):
        # read again naming each item by its index, so the error names the first
        # one that fails (items are read without side effects)
        for i, v in enumerate(value):
            item(v, f"{key}[{i}]")
        raise


def get_opt(obj: dict[str, Any], key: str, read: Callable[[], T]) -> T | None:
    """``None`` when the field is absent or JSON null, else ``read()``."""
    if obj.get(key) is None:
        return None
    return read()


E = TypeVar("E")


_ENUM_VALUES: dict[Any, dict[str, Any]] = {}


def get_enum(obj: dict[str, Any], key: str, kind: str, enum: type[E]) -> E:
    raw = get_str(obj, key, kind, max_len=64)
    values = _ENUM_VALUES.get(enum)
    if values is None:
        # Enum(value) is slow in CPython; a value→member table is not.
        values = _ENUM_VALUES[enum] = {m.value: m for m in enum}  # type: ignore[attr-defined]
    member = values.get(raw)
    if member is None:
        raise EncodingError(f"{kind}: field {key!r} has unknown value {raw!r:.70}")
    result: E = member
    return result
