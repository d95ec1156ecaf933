"""Demands and receipts: their one signed form (payload version 3), declared once.

A demand is a holder's signed request for folds of one origin; a receipt is
the origin's signed answer. Each has exactly one payload encoding, signed
inside a DSSE envelope under its own payload type:

* ``application/vnd.provnet.demand-batch.v3+bin``
* ``application/vnd.provnet.receipt-batch.v3+bin``

A demand names one or more folds (obligation digest — for a fold under a
head, the head digest — and commitment digest — the fold record's leaf hash
— plus the leaves of each); a demand for one fold is a batch of one. The
receipt answering it holds one item per fold served or refused (tree size,
status, reason, served root or leaf hashes + audit paths). So a holder signs
**one demand per origin per decision** and the origin **one receipt**,
however many folds it names.

Nothing about a fold is weaker: each item *is* the fold's demand or receipt,
with the batch's holder, origin, nonce, time (demand) and the demand's
digest, nonce and ``issued_at`` (receipt) filled in. Reading a payload for
one fold (:func:`demand_item`, :func:`receipt_item`, or
``open_statement(..., fold=(obligation, commitment))``; a batch of one needs
no fold named) returns that projection as a plain :class:`Demand` /
:class:`Receipt` whose envelope is the batch's: its signature covers every
item, its digest is the batch's, and the per-fold checks (binding by digest
and nonce, signed leaves against the committed root, refusal before
``serve_until``, deadline of a demand) apply unchanged. Evidence cites the
envelopes as received; the record's commitment and obligation select the
item.

Layout: :data:`DEMAND_LAYOUT` and :data:`RECEIPT_LAYOUT` are the only
declaration of the bytes — a head of fields, a u16 item count
(1..:data:`MAX_BATCH`), then the items, each a row of fields — and
:func:`encode_demand_batch` / :func:`decode_demand_batch` (likewise the
receipt) both walk them (integers big-endian, unsigned; ids and digests 32
raw bytes)::

    demand                            receipt
    u8   version = 3                  u8   version = 3
    u8   kind = 0x64 ('d')            u8   kind = 0x72 ('r')
    32   holder (node id)             32   origin (node id)
    32   origin (node id)             32   demand (digest of the demand)
    u64  time (ms)                    u64  issued_at (ms)
    u8   nonce length n + nonce       u8   nonce length n + nonce
    u16  item count c                 u16  item count c
    c × [32 obligation,               c × [32 obligation, 32 commitment,
         32 commitment, LEAVES]            u64 tree_size, u8 status, u8 reason,
                                           LEAVES, u8 served_root flag [+ 32],
                                           u32 h + h × 32 leaf hashes,
                                           u32 p + p × (u8 l + l × 32) proofs]

    LEAVES = u8 0 (the whole fold) | u8 1, u32 count, count × u64 (strictly increasing)

Status and reason codes are fixed numbers (:data:`STATUS_CODES`,
:data:`REASON_CODES`), never enum order; reason 0 is none. A demand's nonce
is 16..128 visible ASCII characters, a receipt's the demand's (0..128).
Demand items are strictly increasing by (obligation, commitment) — one
encoding per set of folds, and no fold twice; receipt items name distinct
folds (in the demand's order when faithful; an item under another head or
commitment is what an equivocating origin signs). Decoding is strict: exact
lengths, no trailing bytes, flags 0/1, known codes, the receipt shape rules
of :func:`~contracts.statements.check_receipt_shape` per item, so whatever
decodes re-encodes to the same bytes.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Protocol

from contracts._answer_rule import refusal_for
from contracts._fields import MAX_COUNT, MAX_LIST, MAX_TIME_MS
from contracts.envelope import Envelope, EnvelopeSigner, sign_envelope
from contracts.errors import BindingMismatch, EncodingError
from contracts.identity import Identity
from contracts.merkle import MerkleTree, leaf_hashes, merkle_root
from contracts.statements import (
    _MAX_NONCE,
    _MIN_NONCE,
    PAYLOAD_TYPE_PREFIX,
    Commitment,
    Demand,
    Obligation,
    Receipt,
    ReceiptStatus,
    RefusalReason,
    check_receipt_shape,
)

__all__ = [
    "BATCH_VERSION",
    "DEMAND_BATCH_TYPE",
    "DEMAND_LAYOUT",
    "MAX_BATCH",
    "REASON_CODES",
    "RECEIPT_BATCH_TYPE",
    "RECEIPT_LAYOUT",
    "STATUS_CODES",
    "DemandBatch",
    "DemandItem",
    "FoldKey",
    "Layout",
    "ReceiptBatch",
    "batch_receipt_item",
    "build_demand_batch",
    "decode_demand_batch",
    "decode_receipt_batch",
    "demand_item",
    "demand_payload",
    "encode_demand_batch",
    "encode_receipt_batch",
    "receipt_batch_head",
    "receipt_batch_payload",
    "receipt_item",
    "receipt_item_bytes",
    "receipt_payload",
    "served_item",
    "served_whole_item",
    "sign_demand_batch",
    "sign_receipt_batch",
]

BATCH_VERSION = 3
DEMAND_BATCH_TYPE = f"{PAYLOAD_TYPE_PREFIX}demand-batch.v3+bin"
RECEIPT_BATCH_TYPE = f"{PAYLOAD_TYPE_PREFIX}receipt-batch.v3+bin"
#: Folds one demand may name (an origin's answer stays far under the size bound).
MAX_BATCH = 1024

#: (obligation digest, commitment digest) of a fold, lower-case hex.
FoldKey = tuple[str, str]

#: Wire codes of receipt statuses and refusal reasons: fixed numbers, never
#: enum order, so a new member never renumbers an old one.
STATUS_CODES: dict[ReceiptStatus, int] = {
    ReceiptStatus.SERVED: 1,
    ReceiptStatus.ABSENT: 2,
    ReceiptStatus.REFUSED: 3,
    ReceiptStatus.PENDING: 4,
}
REASON_CODES: dict[RefusalReason, int] = {
    RefusalReason.EXPIRED: 1,
    RefusalReason.UNKNOWN: 2,
    RefusalReason.EVICTED: 3,
    RefusalReason.NOT_BOUND_HOLDER: 4,
    RefusalReason.BAD_DEMAND: 5,
    RefusalReason.OVERLOADED: 6,
    RefusalReason.PROVENANCE_PENDING: 7,
    RefusalReason.OTHER: 8,
    RefusalReason.STORE_CORRUPTED: 9,
}
_MAX_PATH = 64
#: Bytes a nonce may hold: visible ASCII (no space, no control characters).
_NONCE_BYTES = bytes(range(0x21, 0x7F))
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")


# ------------------------------------------------------------------- field codecs


class _Codec(Protocol):
    """One field's bytes: ``pack`` (``ValueError`` on a value it cannot hold) and
    ``unpack`` from ``data`` at ``at`` (:class:`EncodingError`), with the end offset."""

    def pack(self, value: Any, what: str) -> bytes: ...

    def unpack(self, data: bytes, at: int, what: str) -> tuple[Any, int]: ...


def _truncated(what: str) -> EncodingError:
    return EncodingError(f"{what}: truncated")


class _Tag:
    """A constant byte (version, kind): written as itself, refused otherwise."""

    def __init__(self, value: int) -> None:
        self.value = value
        self._byte = bytes((value,))

    def pack(self, value: Any, what: str) -> bytes:
        return self._byte

    def unpack(self, data: bytes, at: int, what: str) -> tuple[Any, int]:
        got = data[at : at + 1]
        if got != self._byte:
            shown = got[0] if got else "nothing"
            raise EncodingError(f"{what}: {shown} where {self.value} was expected")
        return self.value, at + 1


class _Id:
    """A node id or SHA-256 digest: 32 raw bytes, lower-case hex in the statement."""

    def pack(self, value: Any, what: str) -> bytes:
        raw = bytes.fromhex(value)
        if len(raw) != 32 or raw.hex() != value:
            raise ValueError(f"{what} must be 64 lower-case hex characters")
        return raw

    def unpack(self, data: bytes, at: int, what: str) -> tuple[Any, int]:
        raw = data[at : at + 32]
        if len(raw) != 32:
            raise _truncated(what)
        return raw.hex(), at + 32


class _Uint:
    """An unsigned big-endian integer of ``size`` bytes, at most ``hi``."""

    def __init__(self, fmt: struct.Struct, hi: int) -> None:
        self._fmt, self._hi = fmt, hi

    def pack(self, value: Any, what: str) -> bytes:
        if type(value) is not int or not 0 <= value <= self._hi:
            raise ValueError(f"{what} must be an integer in 0..{self._hi}, got {value!r:.40}")
        return self._fmt.pack(value)

    def unpack(self, data: bytes, at: int, what: str) -> tuple[Any, int]:
        end = at + self._fmt.size
        if len(data) < end:
            raise _truncated(what)
        (value,) = self._fmt.unpack_from(data, at)
        if value > self._hi:
            raise EncodingError(f"{what}: {value} exceeds {self._hi}")
        return value, end


class _Nonce:
    """u8 length + that many visible ASCII bytes, ``lo``..128 of them."""

    def __init__(self, lo: int) -> None:
        self._lo = lo

    def pack(self, value: Any, what: str) -> bytes:
        try:
            data: bytes = value.encode("ascii")
        except (AttributeError, UnicodeEncodeError):
            data = b"\x00"  # refused just below
        if not self._lo <= len(data) <= _MAX_NONCE or data.translate(None, _NONCE_BYTES):
            raise ValueError(
                f"{what} is {self._lo}..{_MAX_NONCE} visible ASCII characters, got {value!r:.40}"
            )
        return bytes((len(data),)) + data

    def unpack(self, data: bytes, at: int, what: str) -> tuple[Any, int]:
        if at >= len(data):
            raise _truncated(what)
        n = data[at]
        raw = data[at + 1 : at + 1 + n]
        if len(raw) != n:
            raise _truncated(what)
        if not self._lo <= n <= _MAX_NONCE or raw.translate(None, _NONCE_BYTES):
            raise EncodingError(f"{what} must be {self._lo}..{_MAX_NONCE} visible ASCII characters")
        return raw.decode("ascii"), at + 1 + n


class _Leaves:
    """LEAVES: u8 0 (the whole fold, ``None``) or u8 1, u32 count, u64 indices increasing."""

    def pack(self, value: Any, what: str) -> bytes:
        if value is None:
            return b"\x00"
        if len(value) > MAX_LIST:
            raise ValueError(f"{what}: at most {MAX_LIST} leaves")
        return b"\x01" + _U32.pack(len(value)) + struct.pack(f">{len(value)}Q", *value)

    def unpack(self, data: bytes, at: int, what: str) -> tuple[Any, int]:
        flag = data[at : at + 1]
        if flag == b"\x00":
            return None, at + 1
        if flag != b"\x01":
            raise EncodingError(f"{what}: flag must be 0 (whole fold) or 1 (listed)")
        head = data[at + 1 : at + 5]
        if len(head) != 4:
            raise EncodingError(f"{what}: truncated count")
        (count,) = _U32.unpack(head)
        if count > MAX_LIST:
            raise EncodingError(f"{what}: {count} leaves exceeds {MAX_LIST}")
        start, end = at + 5, at + 5 + 8 * count
        if len(data) < end:
            raise EncodingError(f"{what}: truncated indices")
        leaves: tuple[int, ...] = struct.unpack_from(f">{count}Q", data, start)
        if any(b <= a for a, b in itertools.pairwise(leaves)):
            raise EncodingError(f"{what}: must be strictly increasing")
        if leaves and leaves[-1] >= MAX_COUNT:
            raise EncodingError(f"{what}: index {leaves[-1]} exceeds {MAX_COUNT - 1}")
        return leaves, end


class _Code:
    """A u8 code from ``codes`` (``optional``: 0 is ``None``)."""

    def __init__(self, codes: dict[Any, int], *, optional: bool) -> None:
        self._codes = codes
        self._by_code = {code: member for member, code in codes.items()}
        self._optional = optional

    def pack(self, value: Any, what: str) -> bytes:
        if value is None and self._optional:
            return b"\x00"
        return bytes((self._codes[value],))

    def unpack(self, data: bytes, at: int, what: str) -> tuple[Any, int]:
        if at >= len(data):
            raise _truncated(what)
        code = data[at]
        if code == 0 and self._optional:
            return None, at + 1
        member = self._by_code.get(code)
        if member is None:
            raise EncodingError(f"{what}: unknown code {code}")
        return member, at + 1


class _OptionalId:
    """u8 flag 0 (``None``) or 1 + a 32-byte digest."""

    _id = _Id()

    def pack(self, value: Any, what: str) -> bytes:
        return b"\x00" if value is None else b"\x01" + self._id.pack(value, what)

    def unpack(self, data: bytes, at: int, what: str) -> tuple[Any, int]:
        flag = data[at : at + 1]
        if flag == b"\x00":
            return None, at + 1
        if flag != b"\x01":
            raise EncodingError(f"{what}: flag must be 0 or 1")
        return self._id.unpack(data, at + 1, what)


class _Hashes:
    """u32 count + count × 32-byte hashes."""

    def pack(self, value: Any, what: str) -> bytes:
        if len(value) > MAX_LIST or any(len(h) != 32 for h in value):
            raise ValueError(f"{what}: at most {MAX_LIST} hashes of 32 bytes")
        return _U32.pack(len(value)) + b"".join(value)

    def unpack(self, data: bytes, at: int, what: str) -> tuple[Any, int]:
        head = data[at : at + 4]
        if len(head) != 4:
            raise EncodingError(f"{what}: truncated count")
        (count,) = _U32.unpack(head)
        if count > MAX_LIST:
            raise EncodingError(f"{what}: {count} exceeds {MAX_LIST}")
        start, end = at + 4, at + 4 + 32 * count
        if len(data) < end:
            raise _truncated(what)
        return tuple(data[i : i + 32] for i in range(start, end, 32)), end


class _Proofs:
    """u32 count of audit paths, each u8 length + that many 32-byte hashes (≤ 64)."""

    def pack(self, value: Any, what: str) -> bytes:
        if len(value) > MAX_LIST:
            raise ValueError(f"{what}: at most {MAX_LIST} proofs")
        parts = [_U32.pack(len(value))]
        for path in value:
            if len(path) > _MAX_PATH or any(len(p) != 32 for p in path):
                raise ValueError(f"{what}: a proof is at most {_MAX_PATH} hashes of 32 bytes")
            parts.append(bytes((len(path),)))
            parts.extend(path)
        return b"".join(parts)

    def unpack(self, data: bytes, at: int, what: str) -> tuple[Any, int]:
        head = data[at : at + 4]
        if len(head) != 4:
            raise EncodingError(f"{what}: truncated count")
        (count,) = _U32.unpack(head)
        if count > MAX_LIST:
            raise EncodingError(f"{what}: {count} exceeds {MAX_LIST}")
        at += 4
        proofs = []
        for _ in range(count):
            if at >= len(data):
                raise _truncated(what)
            length = data[at]
            if length > _MAX_PATH:
                raise EncodingError(f"{what}: a proof of {length} hashes exceeds {_MAX_PATH}")
            end = at + 1 + 32 * length
            if len(data) < end:
                raise _truncated(what)
            proofs.append(tuple(data[i : i + 32] for i in range(at + 1, end, 32)))
            at = end
        return tuple(proofs), at


_ID = _Id()
_TIME = _Uint(_U64, MAX_TIME_MS)
_LEAVES = _Leaves()

Row = tuple[str, _Codec]


@dataclass(frozen=True, slots=True)
class Layout:
    """A kind's bytes: ``head`` fields, a u16 item count, then ``item`` fields per item.

    Fields are read from, and decoded into, attributes of the same name: a field
    is one row here and one attribute of the statement (constant tags, the
    version and kind bytes, are written as themselves and not returned).
    """

    kind: str
    head: tuple[Row, ...]
    item: tuple[Row, ...]

    def pack_head(self, obj: Any, count: int) -> bytes:
        """The head of ``obj`` (its attributes named by the rows) and the item count."""
        if not 1 <= count <= MAX_BATCH:
            raise ValueError(f"a {self.kind} names 1..{MAX_BATCH} folds, got {count}")
        parts = [
            codec.pack(getattr(obj, name, None), f"{self.kind} {name}") for name, codec in self.head
        ]
        parts.append(_U16.pack(count))
        return b"".join(parts)

    def pack_item(self, obj: Any) -> bytes:
        """One item of ``obj``'s attributes named by the rows."""
        return b"".join(
            codec.pack(getattr(obj, name), f"{self.kind} item {name}") for name, codec in self.item
        )

    def unpack(self, data: bytes) -> tuple[dict[str, Any], list[dict[str, Any]], list[int]]:
        """(head fields, each item's fields, each item's start offset) by name, tags
        checked and left out; strict to the last byte."""
        what = f"{self.kind} (v{BATCH_VERSION})"
        head: dict[str, Any] = {}
        at = 0
        for name, codec in self.head:
            value, at = codec.unpack(data, at, f"{what} {name}")
            if not isinstance(codec, _Tag):
                head[name] = value
        raw = data[at : at + 2]
        if len(raw) != 2:
            raise EncodingError(f"{what} item count: truncated")
        (count,) = _U16.unpack(raw)
        if not 1 <= count <= MAX_BATCH:
            raise EncodingError(f"{what} item count {count} is not 1..{MAX_BATCH}")
        at += 2
        items: list[dict[str, Any]] = []
        starts: list[int] = []
        for index in range(count):
            starts.append(at)
            values: dict[str, Any] = {}
            for name, codec in self.item:
                values[name], at = codec.unpack(data, at, f"{what} item {index} {name}")
            items.append(values)
        if at != len(data):
            raise EncodingError(f"{what}: {len(data) - at} trailing bytes")
        return head, items, starts


#: The demand's bytes, declared once (module docstring).
DEMAND_LAYOUT = Layout(
    "demand",
    head=(
        ("version", _Tag(BATCH_VERSION)),
        ("kind", _Tag(ord("d"))),
        ("holder", _ID),
        ("origin", _ID),
        ("time", _TIME),
        ("nonce", _Nonce(_MIN_NONCE)),
    ),
    item=(("obligation", _ID), ("commitment", _ID), ("leaves", _LEAVES)),
)
#: The receipt's bytes, declared once (module docstring).
RECEIPT_LAYOUT = Layout(
    "receipt",
    head=(
        ("version", _Tag(BATCH_VERSION)),
        ("kind", _Tag(ord("r"))),
        ("origin", _ID),
        ("demand", _ID),
        ("issued_at", _TIME),
        ("nonce", _Nonce(0)),
    ),
    item=(
        ("obligation", _ID),
        ("commitment", _ID),
        ("tree_size", _Uint(_U64, MAX_COUNT)),
        ("status", _Code(STATUS_CODES, optional=False)),
        ("reason", _Code(REASON_CODES, optional=True)),
        ("leaves", _LEAVES),
        ("served_root", _OptionalId()),
        ("leaf_hashes", _Hashes()),
        ("proofs", _Proofs()),
    ),
)


# ------------------------------------------------------------------- statements


@dataclass(frozen=True, slots=True)
class DemandItem:
    """One fold a demand names (digests as lower-case hex)."""

    obligation: str
    commitment: str
    leaves: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class DemandBatch:
    """A holder's demand for one or more folds of one origin, signed once."""

    holder: str
    origin: str
    nonce: str
    time: int
    items: tuple[DemandItem, ...]

    def demand(self, index: int) -> Demand:
        """Item ``index`` read as the fold's own :class:`Demand`."""
        it = self.items[index]
        return Demand(
            self.holder,
            self.origin,
            it.obligation,
            it.commitment,
            self.nonce,
            self.time,
            it.leaves,
        )


@dataclass(frozen=True, slots=True)
class ReceiptBatch:
    """An origin's answer to a demand: one item per fold, signed once.

    ``items`` are per-fold :class:`Receipt` statements whose ``origin``,
    ``demand``, ``nonce`` and ``issued_at`` are the batch's own.
    """

    origin: str
    demand: str
    nonce: str
    issued_at: int
    items: tuple[Receipt, ...]


# ------------------------------------------------------------------- encoding


def encode_demand_batch(b: DemandBatch) -> bytes:
    """The payload of a demand (``ValueError`` on fields it cannot hold)."""
    parts = [DEMAND_LAYOUT.pack_head(b, len(b.items))]
    prev = b""
    for it in b.items:
        item = DEMAND_LAYOUT.pack_item(it)
        if item[:64] <= prev:  # (obligation, commitment), the first two fields
            raise ValueError("demand items must be strictly increasing by fold")
        prev = item[:64]
        parts.append(item)
    return b"".join(parts)


def demand_payload(d: Demand) -> bytes:
    """The payload of a demand for the one fold ``d`` names (a batch of one)."""
    return encode_demand_batch(
        DemandBatch(
            d.holder, d.origin, d.nonce, d.time, (DemandItem(d.obligation, d.commitment, d.leaves),)
        )
    )


def receipt_item_bytes(r: Receipt) -> bytes:
    """One receipt item as :data:`RECEIPT_LAYOUT` writes it.

    An item's bytes do not hold the batch's own fields (origin, demand,
    nonce, issued_at): whatever those are in ``r``, the receipt that carries
    the item signs its own.
    """
    return RECEIPT_LAYOUT.pack_item(r)


def encode_receipt_batch(b: ReceiptBatch) -> bytes:
    """The payload of a receipt (``ValueError`` on fields it cannot hold)."""
    for r in b.items:
        if (r.origin, r.demand, r.nonce, r.issued_at) != (b.origin, b.demand, b.nonce, b.issued_at):
            raise ValueError("a receipt item must carry the receipt's origin, demand, nonce, time")
    return receipt_batch_payload(
        [receipt_item_bytes(r) for r in b.items],
        origin=b.origin,
        demand=b.demand,
        nonce=b.nonce,
        issued_at=b.issued_at,
    )


def receipt_payload(r: Receipt) -> bytes:
    """The payload of a receipt answering the one fold ``r`` names (a batch of one)."""
    return receipt_batch_payload(
        [receipt_item_bytes(r)],
        origin=r.origin,
        demand=r.demand,
        nonce=r.nonce,
        issued_at=r.issued_at,
    )


def served_whole_item(obligation: str, commitment: str, tree_size: int, root: str) -> bytes:
    """The item bytes of a SERVED answer for a whole fold (``leaves`` null).

    :func:`receipt_item_bytes` of that item. They depend on the fold alone, not
    on the demand: an origin packs them once per fold, and a holder knows them
    before it asks (:func:`contracts.lazy.served_batch_without_signature`).
    """
    return RECEIPT_LAYOUT.pack_item(
        SimpleNamespace(
            obligation=obligation,
            commitment=commitment,
            tree_size=tree_size,
            status=ReceiptStatus.SERVED,
            reason=None,
            leaves=None,
            served_root=root,
            leaf_hashes=(),
            proofs=(),
        )
    )


def receipt_batch_head(origin: str, demand: str, nonce: str, issued_at: int, count: int) -> bytes:
    """The bytes of a receipt before its items (``ValueError`` on bad fields)."""
    return RECEIPT_LAYOUT.pack_head(
        SimpleNamespace(origin=origin, demand=demand, issued_at=issued_at, nonce=nonce), count
    )


def receipt_batch_payload(
    items: Sequence[bytes], *, origin: str, demand: str, nonce: str, issued_at: int
) -> bytes:
    """A receipt payload from packed items (:func:`receipt_item_bytes`,
    :func:`served_whole_item`); ``ValueError`` if an item names a fold twice."""
    head = receipt_batch_head(origin, demand, nonce, issued_at, len(items))
    if len({item[:64] for item in items}) != len(items):
        raise ValueError("a receipt answers each fold once")
    return head + b"".join(items)


# ------------------------------------------------------------------- decoding


def decode_demand_batch(data: bytes) -> DemandBatch:
    """Parse a demand payload (untrusted bytes; :class:`EncodingError` naming the field)."""
    head, rows, starts = DEMAND_LAYOUT.unpack(data)
    prev = b""
    for at in starts:
        key = data[at : at + 64]  # (obligation, commitment), the first two fields
        if key <= prev:
            raise EncodingError(
                f"demand (v{BATCH_VERSION}): items must be strictly increasing by"
                " (obligation, commitment)"
            )
        prev = key
    return DemandBatch(**head, items=tuple(DemandItem(**row) for row in rows))


def decode_receipt_batch(data: bytes) -> ReceiptBatch:
    """Parse a receipt payload (untrusted bytes; :class:`EncodingError` naming the field)."""
    head, rows, _ = RECEIPT_LAYOUT.unpack(data)
    items: list[Receipt] = []
    seen: set[tuple[str, str]] = set()
    for index, row in enumerate(rows):
        key = (row["obligation"], row["commitment"])
        if key in seen:
            raise EncodingError(
                f"receipt (v{BATCH_VERSION}) item {index}: names a fold already answered"
            )
        seen.add(key)
        check_receipt_shape(
            f"receipt (v{BATCH_VERSION}) item {index}",
            row["status"],
            row["reason"],
            row["leaves"],
            row["served_root"],
            row["leaf_hashes"],
            row["proofs"],
        )
        items.append(Receipt(**head, **row))
    return ReceiptBatch(**head, items=tuple(items))


# ------------------------------------------------------------------- one fold of a batch


def _no_item(kind: str, fold: FoldKey) -> BindingMismatch:
    return BindingMismatch(f"{kind} names no fold {fold[1][:12]}… under obligation {fold[0][:12]}…")


def demand_item(payload: bytes, fold: FoldKey | None) -> Demand:
    """The demand a payload makes for ``fold`` (:class:`BindingMismatch` if none);
    ``None``: the one fold of a demand that names one (:class:`EncodingError` if more)."""
    batch = decode_demand_batch(payload)
    if fold is None:
        if len(batch.items) != 1:
            raise EncodingError(
                f"a demand naming {len(batch.items)} folds holds one demand per fold:"
                " name the fold (obligation, commitment) to read"
            )
        return batch.demand(0)
    for index, it in enumerate(batch.items):
        if (it.obligation, it.commitment) == fold:
            return batch.demand(index)
    raise _no_item("demand", fold)


def receipt_item(payload: bytes, fold: FoldKey | None) -> Receipt:
    """The receipt a payload signs for ``fold`` (:class:`BindingMismatch` if none);
    ``None``: the one item of a receipt that holds one (:class:`EncodingError` if more)."""
    items = decode_receipt_batch(payload).items
    if fold is None:
        if len(items) != 1:
            raise EncodingError(
                f"a receipt answering {len(items)} folds holds one receipt per fold:"
                " name the fold (obligation, commitment) to read"
            )
        return items[0]
    for r in items:
        if (r.obligation, r.commitment) == fold:
            return r
    raise _no_item("receipt", fold)


# ------------------------------------------------------------------- building and signing


def build_demand_batch(
    identity: Identity,
    folds: Sequence[tuple[Obligation, str, tuple[int, ...] | None]],
    *,
    origin: str,
    nonce: str,
    now: int,
) -> tuple[Envelope, DemandBatch]:
    """Sign one demand for every fold in ``folds`` ((obligation, its digest, leaves)).

    Items are put in the canonical order (by digests); a caller maps them back
    with :meth:`DemandBatch.demand` and the keys.
    """
    batch = _demand_batch(identity.node_id, folds, origin=origin, nonce=nonce, now=now)
    envelope = sign_envelope(identity, DEMAND_BATCH_TYPE, encode_demand_batch(batch))
    return envelope, batch


def sign_demand_batch(
    signer: EnvelopeSigner,
    folds: Sequence[tuple[Obligation, str, tuple[int, ...] | None]],
    *,
    origin: str,
    nonce: str,
    now: int,
) -> tuple[Envelope, DemandBatch, bytes]:
    """:func:`build_demand_batch` signed with ``signer`` (the holder's
    :class:`~contracts.envelope.EnvelopeSigner` for ``DEMAND_BATCH_TYPE``, kept
    by the caller), and the envelope's bytes."""
    holder, payload_type = signer.signs_as
    if payload_type != DEMAND_BATCH_TYPE:
        raise ValueError(f"signer signs {payload_type!r:.80}, not demands")
    batch = _demand_batch(holder, folds, origin=origin, nonce=nonce, now=now)
    envelope, data = signer.sign_envelope(encode_demand_batch(batch))
    return envelope, batch, data


def _demand_batch(
    holder: str,
    folds: Sequence[tuple[Obligation, str, tuple[int, ...] | None]],
    *,
    origin: str,
    nonce: str,
    now: int,
) -> DemandBatch:
    items = []
    for obligation, obligation_digest, leaves in folds:
        if obligation.origin != origin:
            raise ValueError(
                f"obligation {obligation_digest[:12]}… is by {obligation.origin[:16]}…,"
                f" not the demand's origin {origin[:16]}…"
            )
        picked = None if leaves is None else tuple(sorted(set(leaves)))
        items.append(DemandItem(obligation_digest, obligation.commitment, picked))
    items.sort(key=lambda it: (it.obligation, it.commitment))
    return DemandBatch(holder, origin, nonce, now, tuple(items))


def batch_receipt_item(
    origin: str,
    demand: Demand,
    demand_digest: str,
    *,
    obligation: Obligation,
    obligation_digest: str,
    commitment: Commitment,
    commitment_digest: str,
    hops: Sequence[bytes] | None,
    now: int,
    hops_root: str | None = None,
) -> Receipt:
    """The receipt item a correct origin answers one fold with (unsigned).

    The decisions of :func:`contracts.serve.answer_demand`, in the same order:
    EXPIRED at/after ``serve_until``, NOT_BOUND_HOLDER, BAD_DEMAND for a leaf
    outside the fold, PENDING / EVICTED when the fold cannot be read,
    STORE_CORRUPTED when the stored bytes no longer reproduce the committed
    root, else SERVED over exactly ``hops``. ``hops_root``: the root of
    ``hops`` when the caller already has it.
    """
    o, c, d = obligation, commitment, demand
    why = refusal_for(o, c, d, hops, now, hops_root)
    if why is not None:
        status, reason = why
        return Receipt(
            origin,
            obligation_digest,
            commitment_digest,
            demand_digest,
            d.nonce,
            status,
            now,
            reason,
            c.leaf_count,
        )
    if hops is None:  # pragma: no cover - refusal_for refuses a fold it cannot read
        raise AssertionError("no hops to serve")
    return served_item(
        origin,
        d,
        demand_digest,
        obligation_digest,
        commitment_digest,
        c.leaf_count,
        hops,
        now,
        c.root,
    )


def served_item(
    origin: str,
    demand: Demand,
    demand_digest: str,
    obligation_digest: str,
    commitment_digest: str,
    tree_size: int,
    hops: Sequence[bytes],
    now: int,
    root: str | None = None,
) -> Receipt:
    """A SERVED receipt item over exactly ``hops`` (no check against the commitment)."""
    if demand.leaves is None:
        served_root: str | None = merkle_root(hops).hex() if root is None else root
        signed_hashes: tuple[bytes, ...] = ()
        proofs: tuple[tuple[bytes, ...], ...] = ()
    else:
        tree = MerkleTree(leaf_hashes(hops))
        if demand.leaves and demand.leaves[-1] >= tree.size:
            raise ValueError(f"demand asks for leaf {demand.leaves[-1]} of a {tree.size}-hop fold")
        served_root = None
        signed_hashes = tuple(tree.leaf_hash(i) for i in demand.leaves)
        proofs = tuple(tree.proof(i) for i in demand.leaves)
    return Receipt(
        origin,
        obligation_digest,
        commitment_digest,
        demand_digest,
        demand.nonce,
        ReceiptStatus.SERVED,
        now,
        None,
        tree_size,
        demand.leaves,
        served_root,
        signed_hashes,
        proofs,
    )


def sign_receipt_batch(
    identity: Identity,
    items: Sequence[Receipt | bytes],
    *,
    demand: str,
    nonce: str,
    issued_at: int,
) -> Envelope:
    """Sign one receipt over ``items`` (each rebound to the receipt's own fields).

    An item's ``origin``, ``demand``, ``nonce`` and ``issued_at`` are the
    receipt's; every other field (obligation, commitment, status, reason, tree
    size, leaves, root, leaf hashes, proofs) is signed as given. An item may
    come already packed (:func:`served_whole_item`, :func:`receipt_item_bytes`):
    an origin serving a whole fold packs its item once, not per demand.
    """
    packed = [r if isinstance(r, bytes) else receipt_item_bytes(r) for r in items]
    payload = receipt_batch_payload(
        packed, origin=identity.node_id, demand=demand, nonce=nonce, issued_at=issued_at
    )
    return sign_envelope(identity, RECEIPT_BATCH_TYPE, payload)
