"""Fold records and fold proofs: their one byte layout, declared once per kind.

A fold record is a leaf of its compaction's tree; a fold proof is a fold
record with its audit path under a head. Each kind has exactly one encoding,
the one below: the bytes a record is hashed as (RFC 6962 leaf data) are the
bytes that travel in a delivery, are stored and are cited (evidence and
attestations carry them in standard base64). Nothing is rebuilt from another
form.

Each layout is a table (:data:`RECORD_LAYOUT`, :data:`PROOF_LAYOUT`) of
named parts in order; :func:`encode` and :func:`decode` both walk it, so
the two cannot disagree. Parts::

    varint     LEB128, shortest form (one byte for 0-127)
    hash       32 raw bytes
    opt_hash   one byte 0x00 (absent) or 0x01 followed by 32 raw bytes
    text       varint length, then that many bytes of UTF-8
    record     a fold record, inline (its own layout; self-delimiting)
    records    varint count, then that many fold records
    hashes     the rest of the bytes: whole 32-byte hashes

Fold record (leaf data)::

    prev        opt_hash   leaf hash of the value's previous fold record
    fold_seq    varint
    leaf_count  varint     hops the fold covers
    root        hash       RFC 6962 root over the fold's hop bytes
    value_ref   text

Fold proof::

    head        hash       digest of the head it is proven under
    index       varint     leaf index of ``record`` in the head's compaction tree
    record      record     the value's latest fold record
    chain       records    earlier fold records, newest first
    path        hashes     audit path of ``record``

Decoding is strict: shortest varints, exact lengths, no trailing bytes, a
presence byte of 0 or 1, UTF-8 text. A record's first byte is its presence
byte, so bytes in the JSON form of earlier versions (``{``) are refused by
name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from contracts.errors import EncodingError

__all__ = [
    "PROOF_LAYOUT",
    "RECORD_LAYOUT",
    "Part",
    "Piece",
    "decode",
    "encode",
    "put_varint",
]

_HASH = 32
_MAX_VARINT_BYTES = 10
_MAX_TEXT = 1024
_MAX_RECORDS = 4096
_MAX_HASHES = 64


class Part(Enum):
    """How one piece of a layout is written."""

    VARINT = "varint"
    HASH = "hash"
    OPT_HASH = "opt_hash"
    TEXT = "text"
    RECORD = "record"
    RECORDS = "records"
    HASHES = "hashes"


@dataclass(frozen=True, slots=True)
class Piece:
    """One named piece of a layout."""

    name: str
    part: Part


#: The fold record's layout: its leaf data, in this order.
RECORD_LAYOUT: tuple[Piece, ...] = (
    Piece("prev", Part.OPT_HASH),
    Piece("fold_seq", Part.VARINT),
    Piece("leaf_count", Part.VARINT),
    Piece("root", Part.HASH),
    Piece("value_ref", Part.TEXT),
)

#: The fold proof's layout, in this order (``path`` last: it is the rest).
PROOF_LAYOUT: tuple[Piece, ...] = (
    Piece("head", Part.HASH),
    Piece("index", Part.VARINT),
    Piece("record", Part.RECORD),
    Piece("chain", Part.RECORDS),
    Piece("path", Part.HASHES),
)


def put_varint(out: bytearray, n: int) -> None:
    """Append ``n`` as a shortest-form LEB128 varint."""
    if n < 0:
        raise ValueError(f"a varint is not negative, got {n}")
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)


def _put(out: bytearray, piece: Piece, value: Any) -> None:
    part = piece.part
    if part is Part.VARINT:
        put_varint(out, value)
    elif part is Part.HASH:
        if len(value) != _HASH:
            raise ValueError(f"{piece.name} must be {_HASH} bytes, got {len(value)}")
        out += value
    elif part is Part.OPT_HASH:
        if value is None:
            out.append(0)
        else:
            out.append(1)
            _put(out, Piece(piece.name, Part.HASH), value)
    elif part is Part.TEXT:
        raw = value.encode("utf-8")
        put_varint(out, len(raw))
        out += raw
    elif part is Part.RECORD:
        out += value  # a record's own bytes, verbatim
    elif part is Part.RECORDS:
        put_varint(out, len(value))
        for record in value:
            out += record
    else:  # Part.HASHES
        for h in value:
            _put(out, Piece(piece.name, Part.HASH), h)


def encode(layout: tuple[Piece, ...], values: Mapping[str, Any]) -> bytes:
    """The bytes of ``values`` in ``layout`` (records in ``record``/``records`` pieces
    are already-encoded fold record bytes, copied as they are)."""
    out = bytearray()
    for piece in layout:
        _put(out, piece, values[piece.name])
    return bytes(out)


class _Reader:
    __slots__ = ("at", "data", "what")

    def __init__(self, data: bytes, what: str) -> None:
        self.data, self.at, self.what = data, 0, what

    def take(self, n: int, name: str) -> bytes:
        end = self.at + n
        if end > len(self.data):
            raise EncodingError(f"{self.what}: ends inside its {name}")
        out, self.at = self.data[self.at : end], end
        return out

    def varint(self, name: str) -> int:
        n = 0
        for i in range(_MAX_VARINT_BYTES):
            byte = self.take(1, name)[0]
            n |= (byte & 0x7F) << (7 * i)
            if not byte & 0x80:
                if byte == 0 and i:
                    raise EncodingError(f"{self.what}: {name} is not a shortest-form varint")
                return n
        raise EncodingError(f"{self.what}: {name} is a varint of more than 10 bytes")

    def record(self, name: str) -> bytes:
        start = self.at
        _read(self, RECORD_LAYOUT, f"{self.what} {name}")
        return self.data[start : self.at]


def _get(r: _Reader, piece: Piece) -> Any:
    part, name = piece.part, piece.name
    if part is Part.VARINT:
        return r.varint(name)
    if part is Part.HASH:
        return r.take(_HASH, name)
    if part is Part.OPT_HASH:
        flag = r.take(1, name)[0]
        if flag == 0:
            return None
        if flag != 1:
            form = " (a JSON fold record, the earlier form, is not read)" if flag == 0x7B else ""
            raise EncodingError(f"{r.what}: {name} presence byte {flag:#04x}, not 0 or 1{form}")
        return r.take(_HASH, name)
    if part is Part.TEXT:
        length = r.varint(f"{name} length")
        if length > _MAX_TEXT:
            raise EncodingError(f"{r.what}: {name} of {length} bytes (at most {_MAX_TEXT})")
        try:
            return r.take(length, name).decode("utf-8")
        except UnicodeDecodeError:
            raise EncodingError(f"{r.what}: {name} is not UTF-8") from None
    if part is Part.RECORD:
        return r.record(name)
    if part is Part.RECORDS:
        count = r.varint(f"{name} count")
        if count > _MAX_RECORDS:
            raise EncodingError(f"{r.what}: {count} {name} records (at most {_MAX_RECORDS})")
        return tuple(r.record(f"{name}[{i}]") for i in range(count))
    # Part.HASHES: the rest
    rest = r.take(len(r.data) - r.at, name)
    if len(rest) % _HASH or len(rest) > _MAX_HASHES * _HASH:
        raise EncodingError(
            f"{r.what}: {name} of {len(rest)} bytes is not whole 32-byte hashes"
            f" (at most {_MAX_HASHES})"
        )
    return tuple(rest[i : i + _HASH] for i in range(0, len(rest), _HASH))


def _read(r: _Reader, layout: tuple[Piece, ...], what: str) -> dict[str, Any]:
    outer, r.what = r.what, what
    try:
        return {piece.name: _get(r, piece) for piece in layout}
    finally:
        r.what = outer


def decode(layout: tuple[Piece, ...], data: bytes, what: str) -> dict[str, Any]:
    """The values ``data`` holds in ``layout``; :class:`EncodingError` names the piece.
    Every byte must be read: trailing bytes are refused."""
    r = _Reader(bytes(data), what)
    values = _read(r, layout, what)
    if r.at != len(r.data):
        raise EncodingError(f"{what}: {len(r.data) - r.at} bytes after its last part")
    return values
