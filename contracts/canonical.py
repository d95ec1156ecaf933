r"""Canonical JSON (RFC 8785), bounded strict parsing, digests and times.

Every statement is serialised with :func:`canonical_bytes`, the RFC 8785
JSON Canonicalization Scheme, so that the same statement always has the same
bytes and the same digest. One encoder writes them for every value a
statement is built of, with the reference package for the values outside its
domain:

* ``orjson``, for values built only of ``dict`` (ASCII string keys),
  ``list``/``tuple``, ``str``, ``bool``, ``None`` and ``int`` within
  ±(2**53 - 1) — proven float-free by :func:`_fast_encodable` before it is
  taken: ``orjson.dumps(obj, option=OPT_SORT_KEYS)`` (UTF-8, no
  whitespace). For such values its output *is* RFC 8785: ASCII keys sort
  the same by byte, code point and UTF-16 code unit (§3.2.3); strings are
  escaped exactly as §3.2.2.2 requires (``\"``, ``\\``, ``\b \f \n \r \t``,
  other controls as lower-case ``\u00xx``, everything else as is); integers
  in that range print as ECMAScript prints
  the same double (§3.2.2.3). The property tests
  ``tests/contracts/test_canonical_fast.py`` check byte equality against the
  ``rfc8785`` package and against the standard library's ``json.dumps(obj,
  sort_keys=True, separators=(",", ":"), ensure_ascii=False)`` over generated
  values, control characters and non-BMP text included; floats never reach
  orjson (its float format is not ECMAScript's);
* the ``rfc8785`` package for everything else (floats, non-ASCII keys,
  integers outside the safe range, other types), and whenever the fast
  encoder refuses (a lone surrogate, which UTF-8 cannot carry), so errors
  are the package's.

Parsing untrusted JSON goes through :func:`parse_json`, which bounds the
input before the standard library sees it: at most ``max_bytes`` bytes and
at most :data:`MAX_DEPTH` levels of nesting (checked by a scan that needs no
recursion), no duplicate object keys, no ``NaN``/``Infinity``, UTF-8 only.
Anything else is an :class:`~contracts.errors.EncodingError`.

Times are integers: milliseconds since the Unix epoch (UTC). Checks take the
current time as an explicit ``now`` argument and never read a clock.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import re
from collections.abc import Callable
from typing import Any

import orjson
import rfc8785

from contracts.errors import EncodingError

__all__ = [
    "MAX_DEPTH",
    "MAX_DOCUMENT_BYTES",
    "JsonObject",
    "canonical_bytes",
    "format_ms",
    "parse_json",
    "parse_json_object",
    "sha256_hex",
]

#: Largest JSON document (envelope, evidence file, policy) accepted, bytes.
MAX_DOCUMENT_BYTES = 8 * 1024 * 1024
#: Deepest nesting of arrays/objects accepted in untrusted JSON.
MAX_DEPTH = 32

JsonObject = dict[str, Any]

_OPEN = frozenset(b"[{")
_CLOSE = frozenset(b"]}")


_SAFE_INT_MIN = -(2**53) + 1
_SAFE_INT_MAX = 2**53 - 1
_ORJSON_DUMPS = orjson.dumps
_ORJSON_OPTIONS = orjson.OPT_SORT_KEYS


def _fast_encodable(obj: Any) -> bool:
    """True if ``json.dumps`` output of ``obj`` is its RFC 8785 form (module docstring)."""
    stack = [obj]
    pop, extend = stack.pop, stack.extend
    while stack:
        value = pop()
        kind = type(value)
        if kind is str or kind is bool or value is None:
            continue
        if kind is int:
            if not _SAFE_INT_MIN <= value <= _SAFE_INT_MAX:
                return False
        elif kind is dict:
            for key in value:
                if type(key) is not str or not key.isascii():
                    return False
            extend(value.values())
        elif kind is list or kind is tuple:
            extend(value)
        else:
            return False
    return True


def canonical_bytes(obj: Any) -> bytes:
    """RFC 8785 canonical JSON of ``obj`` (UTF-8).

    Raises ``ValueError`` for values JSON cannot carry (NaN, huge integers):
    that is caller misuse, since callers only canonicalise what they built.
    """
    if _fast_encodable(obj):
        try:
            return _ORJSON_DUMPS(obj, option=_ORJSON_OPTIONS)
        except orjson.JSONEncodeError:
            pass  # a lone surrogate: let the reference encoder report it
    try:
        return bytes(rfc8785.dumps(obj))
    except (rfc8785.CanonicalizationError, UnicodeEncodeError) as exc:
        raise ValueError(f"cannot canonicalise: {exc}") from exc


def sha256_hex(data: bytes) -> str:
    """Lower-case hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def _check_depth(data: bytes, max_depth: int) -> None:
    # Linear scan that tracks string state so brackets inside strings do not
    # count; json.loads itself would recurse and could exhaust the stack.
    depth = 0
    in_string = False
    escaped = False
    for byte in data:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in _OPEN:
            depth += 1
            if depth > max_depth:
                raise EncodingError(f"JSON nested deeper than {max_depth} levels")
        elif byte in _CLOSE:
            depth -= 1


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise EncodingError(f"duplicate JSON key {key!r:.80}")
            seen.add(key)
    return out


def _no_constants(name: str) -> Any:
    raise EncodingError(f"JSON constant {name} is not allowed")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise EncodingError(f"JSON number {text[:32]!r} is out of range")
    return value


_DECODER = json.JSONDecoder(
    object_pairs_hook=_no_duplicates,
    parse_constant=_no_constants,
    parse_float=_finite_float,
)
_SCAN: Callable[[str, int], tuple[Any, int]] = _DECODER.scan_once  # type: ignore[attr-defined]
_WS_RE = re.compile(r"[ \t\n\r]*")
_WS_CHARS = " \t\n\r"  # note: "" in _WS_CHARS, so empty text takes the slow path
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _skip_ws(text: str, pos: int) -> int:
    match = _WS_RE.match(text, pos)
    return pos if match is None else match.end()


def _check_strings_encodable(value: Any, what: str) -> None:
    # A lone UTF-16 surrogate (\ud800 …) is valid JSON but not valid UTF-8:
    # such a string could never be re-encoded canonically, so refuse it here.
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise EncodingError(f"{what}: string with a lone surrogate") from exc
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def parse_json(data: bytes, *, what: str, max_bytes: int = MAX_DOCUMENT_BYTES) -> Any:
    """Parse untrusted JSON bytes with explicit size and depth bounds."""
    if type(data) is not bytes:
        if not isinstance(data, bytes | bytearray | memoryview):
            raise EncodingError(f"{what}: expected bytes, got {type(data).__name__}")
        data = bytes(data)
    if len(data) > max_bytes:
        raise EncodingError(f"{what}: {len(data)} bytes exceeds the limit of {max_bytes}")
    # Fast path: nesting can only exceed the bound if there are enough brackets.
    if data.count(b"[") + data.count(b"{") > MAX_DEPTH:
        _check_depth(data, MAX_DEPTH)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EncodingError(f"{what}: not UTF-8 ({exc.reason} at byte {exc.start})") from exc
    # json.JSONDecoder.decode, minus one Python frame: this is on the hot path.
    try:
        value, end = _SCAN(text, 0 if text[:1] not in _WS_CHARS else _skip_ws(text, 0))
    except StopIteration as exc:
        raise EncodingError(f"{what}: not valid JSON (expecting a value at {exc.value})") from exc
    except EncodingError as exc:
        raise EncodingError(f"{what}: {exc}") from exc
    except (ValueError, RecursionError) as exc:
        raise EncodingError(f"{what}: not valid JSON ({exc})") from exc
    if end != len(text) and _skip_ws(text, end) != len(text):
        raise EncodingError(f"{what}: not valid JSON (extra data at {end})")
    if _SURROGATE_ESCAPE.search(text) is not None:
        _check_strings_encodable(value, what)
    return value


def parse_json_object(data: bytes, *, what: str, max_bytes: int = MAX_DOCUMENT_BYTES) -> JsonObject:
    """:func:`parse_json`, additionally requiring a top-level object."""
    value = parse_json(data, what=what, max_bytes=max_bytes)
    if not isinstance(value, dict):
        raise EncodingError(f"{what}: expected a JSON object, got {type(value).__name__}")
    return value


def format_ms(ms: int) -> str:
    """``2026-11-29T10:00:00.000Z`` for a time in ms since the Unix epoch."""
    try:
        moment = _dt.datetime.fromtimestamp(ms / 1000, tz=_dt.UTC)
    except (OverflowError, OSError, ValueError):
        return f"{ms}ms"
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
