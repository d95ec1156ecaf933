"""The fast canonical-JSON path is byte-identical to the ``rfc8785`` package.

``contracts.canonical.canonical_bytes`` encodes float-free values with ASCII
keys and safe integers through ``orjson``; the references are the ``rfc8785``
package and, on the same domain, the standard library's ``json`` encoder.
These tests generate such values (control characters, quotes, backslashes,
DEL, U+2028/9, non-BMP text included) and require the same bytes, and check
that everything outside the
fast domain still gets the reference's bytes or its error.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.canonical import _fast_encodable, canonical_bytes
from contracts.envelope import Envelope, EnvelopeSignature

SAFE = 2**53 - 1

#: The standard library's encoder with RFC 8785's separators and key order: on
#: float-free values with ASCII keys and safe integers, RFC 8785 itself.
_STDLIB_DUMPS = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":")
).encode

# Every code point except lone surrogates (which UTF-8 cannot carry), with
# the ones JSON escaping is about drawn often.
_TRICKY = st.sampled_from(
    [
        "\x00",
        "\x01",
        "\x08",
        "\t",
        "\n",
        "\x0b",
        "\x0c",
        "\r",
        "\x1f",
        '"',
        "\\",
        "/",
        "\x7f",
        "\u2028",
        "\u2029",
        "\ufeff",
        "\uffff",
        "\U0001f600",
        "\U0010ffff",
        "é",
        "€",
    ]
)
_TEXT = st.lists(st.one_of(_TRICKY, st.characters(codec="utf-8")), max_size=24).map("".join)
_ASCII_KEY = st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=12)
_SCALAR = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-SAFE, max_value=SAFE),
    st.sampled_from([0, 1, -1, SAFE, -SAFE, 2**31, -(2**31), 10**15]),
    _TEXT,
)
_VALUE = st.recursive(
    _SCALAR,
    lambda inner: st.one_of(
        st.lists(inner, max_size=6),
        st.lists(inner, max_size=6).map(tuple),
        st.dictionaries(_ASCII_KEY, inner, max_size=6),
    ),
    max_leaves=40,
)


@settings(max_examples=800, deadline=None)
@given(_VALUE)
def test_fast_path_bytes_equal_rfc8785_for_float_free_values(value: Any) -> None:
    assert _fast_encodable(value)
    assert canonical_bytes(value) == bytes(rfc8785.dumps(value))


@settings(max_examples=800, deadline=None)
@given(_VALUE)
def test_orjson_fast_path_equals_the_standard_library_encoder(value: Any) -> None:
    # A second, independent reference on the same proven float-free inputs:
    # byte-identical (and both equal RFC 8785, above).
    assert _fast_encodable(value)
    assert canonical_bytes(value) == _STDLIB_DUMPS(value).encode("utf-8")


@settings(max_examples=300, deadline=None)
@given(
    st.builds(
        dict,
        type=st.just("demand"),
        holder=st.text(alphabet="0123456789abcdef", min_size=64, max_size=64),
        nonce=_TEXT,
        time=st.integers(min_value=0, max_value=10**14),
        leaves=st.one_of(st.none(), st.lists(st.integers(0, 2**40), max_size=8)),
    )
)
def test_statement_shaped_values_encode_as_rfc8785(value: dict[str, Any]) -> None:
    # The shapes signed on the demand path: hex ids, free-form nonces, times, leaf lists.
    assert canonical_bytes(value) == bytes(rfc8785.dumps(value))


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(_ASCII_KEY, _TEXT, min_size=2, max_size=12))
def test_ascii_keys_sort_the_same_by_code_point_and_utf16(value: dict[str, str]) -> None:
    assert canonical_bytes(value) == bytes(rfc8785.dumps(value))
    keys = list(json.loads(canonical_bytes(value)))
    assert keys == sorted(value, key=lambda k: k.encode("utf-16be"))


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=6), st.integers(-5, 5), min_size=1, max_size=8))
def test_non_ascii_keys_leave_the_fast_path_and_keep_utf16_order(value: dict[str, int]) -> None:
    # U+E000..U+FFFF sort after non-BMP characters in UTF-16, before them by code point.
    if not all(k.isascii() for k in value):
        assert not _fast_encodable(value)
    assert canonical_bytes(value) == bytes(rfc8785.dumps(value))


@pytest.mark.parametrize(
    "value",
    [
        1.5,
        {"a": 0.1},
        [2**53],
        {"n": -(2**53)},
        {"\ue000": 1, "\U0001f600": 2},
        {1: "int key"},
        {"s": bytearray(b"x")},
    ],
    ids=[
        "float",
        "nested-float",
        "int-above-2^53",
        "int-below--2^53",
        "non-bmp-keys",
        "int-key",
        "foreign-type",
    ],
)
def test_values_outside_the_fast_domain_take_the_reference_encoder(value: Any) -> None:
    assert not _fast_encodable(value)
    try:
        expected: bytes | type[Exception] = bytes(rfc8785.dumps(value))
    except rfc8785.CanonicalizationError:
        expected = ValueError
    if isinstance(expected, bytes):
        assert canonical_bytes(value) == expected
    else:
        with pytest.raises(expected):
            canonical_bytes(value)


def test_lone_surrogate_is_refused_like_the_reference_encoder() -> None:
    with pytest.raises(rfc8785.CanonicalizationError):
        rfc8785.dumps({"s": "\ud800"})
    with pytest.raises(ValueError, match="cannot canonicalise"):
        canonical_bytes({"s": "\ud800"})


def test_str_subclass_values_take_the_reference_encoder() -> None:
    from enum import StrEnum

    class Colour(StrEnum):
        RED = "red"

    assert not _fast_encodable({"c": Colour.RED})
    assert canonical_bytes({"c": Colour.RED}) == b'{"c":"red"}'


_KEYID = st.one_of(st.text(alphabet="0123456789abcdef", max_size=64), _TEXT)
_PAYLOAD_TYPE = st.one_of(
    st.sampled_from(["application/vnd.provnet.receipt+json", "x/y", "a.b_c-d+e"]),
    st.text(min_size=1, max_size=20),
)


@settings(max_examples=500, deadline=None)
@given(
    st.binary(max_size=300),
    _PAYLOAD_TYPE,
    st.lists(st.tuples(_KEYID, st.binary(min_size=0, max_size=80)), max_size=4),
)
def test_envelope_bytes_equal_the_general_canonical_encoding(
    payload: bytes, payload_type: str, sigs: list[tuple[str, bytes]]
) -> None:
    env = Envelope(payload, payload_type, tuple(EnvelopeSignature(k, s) for k, s in sigs))
    assert env.to_bytes() == bytes(rfc8785.dumps(env.to_json()))
