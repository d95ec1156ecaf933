"""Compact binary payloads (version 2) of the two per-demand statements.

A faithful demand makes two statements — the holder's :class:`Demand` and
the origin's :class:`Receipt` — and each is built, signed, sent, parsed and
checked once per demand. Their first form (RFC 8785 JSON, payload types
``application/vnd.provnet.demand+json`` / ``…receipt+json``) spends more CPU
on text (hex digests, key sorting, JSON parsing, field-by-field validation)
than on anything that decides. Version 2 carries the same fields, with the
same meaning and the same bounds, in a fixed binary layout, signed inside the
same DSSE envelope under its own payload type:

* ``application/vnd.provnet.demand.v2+bin``
* ``application/vnd.provnet.receipt.v2+bin``

Both forms stay valid everywhere (open, verify, evidence, ``provnet
evidence verify``); the payload type says which one a statement uses, and the
PAE signs it, so one form can never be read as the other. The digest of a
statement is still the SHA-256 of its payload bytes as signed.

Layout (integers big-endian, unsigned; ``node id`` and ``digest`` are the
32 raw bytes whose lower-case hex the JSON form carries)::

    demand                         receipt
    u8   version = 2               u8   version = 2
    u8   kind = 0x44 ('D')         u8   kind = 0x52 ('R')
    32   holder (node id)          32   origin (node id)
    32   origin (node id)          32   obligation (digest)
    32   obligation (digest)       32   commitment (digest)
    32   commitment (digest)       32   demand (digest)
    u64  time (ms)                 u64  issued_at (ms)
    u8   nonce length n            u64  tree_size
    n    nonce (ASCII 0x21..0x7e)  u8   status (STATUS_CODES)
    LEAVES                         u8   reason (REASON_CODES; 0 = none)
                                   u8   nonce length n
                                   n    nonce (ASCII 0x21..0x7e)
                                   LEAVES
                                   u8   served_root present (0/1) [+ 32 root]
                                   u32  leaf hash count h, then h × 32
                                   u32  proof count p, then p × (u8 length l, l × 32)

    LEAVES = u8 0 (the whole fold, ``leaves`` null)
           | u8 1, u32 count c, c × u64 index (strictly increasing)

Decoding is strict: exact lengths, no trailing bytes, flags 0 or 1, codes
from the tables, the bounds and the SERVED/refusal shape rules of the JSON
form (:meth:`Receipt.from_json`). A value has exactly one encoding, so the
payload bytes (and the digest) of a statement are a function of its fields.
"""

from __future__ import annotations

import struct
from typing import Any

from contracts._fields import MAX_COUNT, MAX_LIST, MAX_TIME_MS
from contracts.errors import EncodingError
from contracts.statements import (
    PAYLOAD_TYPE_PREFIX,
    Demand,
    Receipt,
    ReceiptStatus,
    RefusalReason,
    StatementKind,
    check_receipt_shape,
)

__all__ = [
    "BINARY_KINDS",
    "BINARY_VERSION",
    "DEMAND_BINARY_TYPE",
    "REASON_CODES",
    "RECEIPT_BINARY_TYPE",
    "STATUS_CODES",
    "binary_payload_type_for",
    "decode_demand",
    "decode_receipt",
    "encode_demand",
    "encode_receipt",
    "new_demand",
    "new_receipt",
    "served_whole_receipt",
    "served_whole_receipt_frame",
]

BINARY_VERSION = 2
DEMAND_BINARY_TYPE = f"{PAYLOAD_TYPE_PREFIX}demand.v2+bin"
RECEIPT_BINARY_TYPE = f"{PAYLOAD_TYPE_PREFIX}receipt.v2+bin"
#: Statement kinds with a binary form (the per-demand statements).
BINARY_KINDS = frozenset({StatementKind.DEMAND, StatementKind.RECEIPT})

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
_STATUS_BY_CODE = {code: status for status, code in STATUS_CODES.items()}
_REASON_BY_CODE = {code: reason for reason, code in REASON_CODES.items()}

_MIN_NONCE = 16
_MAX_NONCE = 128
_MAX_PATH = 64
_DEMAND_HEAD = struct.Struct(">BB32s32s32s32sQB")
#: A demand's head in two parts: what stays the same for a fold's demands (version,
#: kind, four ids) and the time with the nonce's length (``contracts.serve.DemandTemplate``).
_DEMAND_FIXED = struct.Struct(">BB32s32s32s32s")
_DEMAND_TIME = struct.Struct(">QB")
#: LEAVES of a demand (or a batch item) for the whole fold.
_WHOLE_LEAVES = b"\x00"
_RECEIPT_HEAD = struct.Struct(">BB32s32s32s32sQQBBB")
_U32 = struct.Struct(">I")
#: A receipt's fields before its demand digest, and from issued_at to the nonce length.
_RECEIPT_FIXED = struct.Struct(">BB32s32s32s")
_RECEIPT_TIMES = struct.Struct(">QQBBB")
_DEMAND_TAG = ord("D")
_RECEIPT_TAG = ord("R")
#: Bytes a nonce may hold: visible ASCII (no space, no control characters).
_NONCE_BYTES = bytes(range(0x21, 0x7F))
_NEW = object.__new__
_PUT = object.__setattr__


def binary_payload_type_for(kind: StatementKind) -> str:
    """DSSE payload type of a kind's binary form (demand and receipt only)."""
    if kind is StatementKind.DEMAND:
        return DEMAND_BINARY_TYPE
    if kind is StatementKind.RECEIPT:
        return RECEIPT_BINARY_TYPE
    raise ValueError(f"{kind.value} statements have no binary form")


# ------------------------------------------------------------------- encoding


def _raw(hex_value: str, what: str) -> bytes:
    # The statement constructors admit only lower-case hex digests, so the
    # bytes decode back to the same text; only the length is left to check.
    raw = bytes.fromhex(hex_value)
    if len(raw) != 32:
        raise ValueError(f"{what} must be 64 lower-case hex characters")
    return raw


def _nonce_bytes(nonce: str, lo: int) -> bytes:
    try:
        data = nonce.encode("ascii")
    except UnicodeEncodeError:
        data = b"\x00"  # rejected just below
    if not lo <= len(data) <= _MAX_NONCE or data.translate(None, _NONCE_BYTES):
        raise ValueError(
            f"a binary statement's nonce is {lo}..{_MAX_NONCE} visible ASCII characters,"
            f" got {nonce!r:.40}"
        )
    return data


def _leaves_bytes(leaves: tuple[int, ...] | None) -> bytes:
    if leaves is None:
        return _WHOLE_LEAVES
    if len(leaves) > MAX_LIST:
        raise ValueError(f"at most {MAX_LIST} leaves")
    return b"\x01" + _U32.pack(len(leaves)) + struct.pack(f">{len(leaves)}Q", *leaves)


def encode_demand(d: Demand) -> bytes:
    """The version-2 payload of a demand (``ValueError`` if a field has no binary form)."""
    nonce = _nonce_bytes(d.nonce, _MIN_NONCE)
    return (
        _DEMAND_HEAD.pack(
            BINARY_VERSION,
            _DEMAND_TAG,
            _raw(d.holder, "demand holder"),
            _raw(d.origin, "demand origin"),
            _raw(d.obligation, "demand obligation"),
            _raw(d.commitment, "demand commitment"),
            d.time,
            len(nonce),
        )
        + nonce
        + _leaves_bytes(d.leaves)
    )


def encode_receipt(r: Receipt) -> bytes:
    """The version-2 payload of a receipt (``ValueError`` if a field has no binary form)."""
    nonce = _nonce_bytes(r.nonce, 0)
    parts = [
        _RECEIPT_HEAD.pack(
            BINARY_VERSION,
            _RECEIPT_TAG,
            _raw(r.origin, "receipt origin"),
            _raw(r.obligation, "receipt obligation"),
            _raw(r.commitment, "receipt commitment"),
            _raw(r.demand, "receipt demand"),
            r.issued_at,
            r.tree_size,
            STATUS_CODES[r.status],
            0 if r.reason is None else REASON_CODES[r.reason],
            len(nonce),
        ),
        nonce,
    ]
    _served_bytes(r, parts)
    return b"".join(parts)


def _served_bytes(r: Receipt, parts: list[bytes]) -> None:
    """Append what a receipt says was served (as :func:`_read_served` reads it):
    leaves, the served_root flag [+ root], leaf hashes and inclusion proofs."""
    if any(len(h) != 32 for h in r.leaf_hashes):
        raise ValueError("receipt leaf hashes are 32 bytes each")
    parts.append(_leaves_bytes(r.leaves))
    parts.append(b"\x00" if r.served_root is None else b"\x01" + _raw(r.served_root, "served_root"))
    parts.append(_U32.pack(len(r.leaf_hashes)))
    parts.extend(r.leaf_hashes)
    parts.append(_U32.pack(len(r.proofs)))
    for path in r.proofs:
        if len(path) > _MAX_PATH or any(len(p) != 32 for p in path):
            raise ValueError(f"a receipt proof is at most {_MAX_PATH} hashes of 32 bytes")
        parts.append(bytes((len(path),)))
        parts.extend(path)


def served_whole_receipt_frame(
    origin: str, obligation: str, commitment: str, root: str
) -> tuple[bytes, bytes]:
    """What a SERVED receipt for a whole fold (``leaves`` null, no leaf hashes,
    no proofs) holds before its demand digest and after its nonce.

    Those bytes depend on the fold alone: an origin packs them once per fold
    and :func:`served_whole_receipt` fills in each demand's fields.
    """
    head = _RECEIPT_FIXED.pack(
        BINARY_VERSION,
        _RECEIPT_TAG,
        _raw(origin, "receipt origin"),
        _raw(obligation, "receipt obligation"),
        _raw(commitment, "receipt commitment"),
    )
    tail = _leaves_bytes(None) + b"\x01" + _raw(root, "served_root") + _U32.pack(0) + _U32.pack(0)
    return head, tail


def served_whole_receipt(
    frame: tuple[bytes, bytes], demand: bytes, nonce: str, issued_at: int, tree_size: int
) -> bytes:
    """The version-2 payload of a SERVED whole-fold receipt in ``frame``
    (:func:`served_whole_receipt_frame`) for the demand whose raw 32-byte digest
    is ``demand``: the bytes :func:`encode_receipt` writes for that receipt."""
    if len(demand) != 32:
        raise ValueError("receipt demand must be a 32-byte digest")
    raw_nonce = _nonce_bytes(nonce, 0)
    return b"".join(
        (
            frame[0],
            demand,
            _RECEIPT_TIMES.pack(
                issued_at, tree_size, STATUS_CODES[ReceiptStatus.SERVED], 0, len(raw_nonce)
            ),
            raw_nonce,
            frame[1],
        )
    )


# ------------------------------------------------------------------- decoding


def _bad(kind: str, what: str) -> EncodingError:
    return EncodingError(f"{kind} (binary v{BINARY_VERSION}): {what}")


def _read_nonce(data: bytes, at: int, n: int, lo: int, kind: str) -> tuple[str, int]:
    end = at + n
    raw = data[at:end]
    if len(raw) != n:
        raise _bad(kind, "truncated nonce")
    if not lo <= n <= _MAX_NONCE or raw.translate(None, _NONCE_BYTES):
        raise _bad(kind, f"nonce must be {lo}..{_MAX_NONCE} visible ASCII characters")
    return raw.decode("ascii"), end


def _read_leaves(data: bytes, at: int, kind: str) -> tuple[tuple[int, ...] | None, int]:
    flag = data[at : at + 1]
    if flag == b"\x00":
        return None, at + 1
    if flag != b"\x01":
        raise _bad(kind, "leaves flag must be 0 (whole fold) or 1 (listed)")
    head = data[at + 1 : at + 5]
    if len(head) != 4:
        raise _bad(kind, "truncated leaf count")
    (count,) = _U32.unpack(head)
    if count > MAX_LIST:
        raise _bad(kind, f"{count} leaves exceeds {MAX_LIST}")
    start, end = at + 5, at + 5 + 8 * count
    if len(data) < end:
        raise _bad(kind, "truncated leaf indices")
    leaves: tuple[int, ...] = struct.unpack_from(f">{count}Q", data, start)
    prev = -1
    for index in leaves:
        if index <= prev:
            raise _bad(kind, "leaves must be strictly increasing")
        prev = index
    if leaves and leaves[-1] >= MAX_COUNT:
        raise _bad(kind, f"leaf index {leaves[-1]} exceeds {MAX_COUNT - 1}")
    return leaves, end


def decode_demand(data: bytes) -> Demand:
    """Parse a version-2 demand payload (untrusted bytes; :class:`EncodingError`)."""
    k = "demand"
    size = _DEMAND_HEAD.size
    if len(data) < size + 1:
        raise _bad(k, f"{len(data)} bytes is shorter than a demand")
    version, tag, holder, origin, obligation, commitment, time, n = _DEMAND_HEAD.unpack_from(data)
    if version != BINARY_VERSION or tag != _DEMAND_TAG:
        raise _bad(k, f"version/kind bytes {version}/{tag} are not {BINARY_VERSION}/'D'")
    if time > MAX_TIME_MS:
        raise _bad(k, "time out of range")
    nonce, at = _read_nonce(data, size, n, _MIN_NONCE, k)
    leaves, at = _read_leaves(data, at, k)
    if at != len(data):
        raise _bad(k, f"{len(data) - at} trailing bytes")
    return new_demand(
        holder.hex(), origin.hex(), obligation.hex(), commitment.hex(), nonce, time, leaves
    )


def new_demand(
    holder: str,
    origin: str,
    obligation: str,
    commitment: str,
    nonce: str,
    time: int,
    leaves: tuple[int, ...] | None,
) -> Demand:
    """A :class:`Demand` from fields already known valid (skips ``__post_init__``).

    For decoded payloads and for a holder building a demand from its own node
    id, a verified obligation and a fresh nonce; anything else goes through
    the checking constructor.
    """
    demand: Any = _NEW(Demand)
    _PUT(demand, "holder", holder)
    _PUT(demand, "origin", origin)
    _PUT(demand, "obligation", obligation)
    _PUT(demand, "commitment", commitment)
    _PUT(demand, "nonce", nonce)
    _PUT(demand, "time", time)
    _PUT(demand, "leaves", leaves)
    return demand  # type: ignore[no-any-return]


def new_receipt(
    origin: str,
    obligation: str,
    commitment: str,
    demand: str,
    nonce: str,
    status: ReceiptStatus,
    issued_at: int,
    tree_size: int,
    leaves: tuple[int, ...] | None = None,
    served_root: str | None = None,
    leaf_hashes: tuple[bytes, ...] = (),
    proofs: tuple[tuple[bytes, ...], ...] = (),
    reason: RefusalReason | None = None,
) -> Receipt:
    """A :class:`Receipt` from fields already known valid (skips ``__post_init__``).

    For an origin answering a parsed demand: its own node id, the digests of
    statements it holds and a root it computed.
    """
    receipt: Any = _NEW(Receipt)
    _PUT(receipt, "origin", origin)
    _PUT(receipt, "obligation", obligation)
    _PUT(receipt, "commitment", commitment)
    _PUT(receipt, "demand", demand)
    _PUT(receipt, "nonce", nonce)
    _PUT(receipt, "status", status)
    _PUT(receipt, "issued_at", issued_at)
    _PUT(receipt, "reason", reason)
    _PUT(receipt, "tree_size", tree_size)
    _PUT(receipt, "leaves", leaves)
    _PUT(receipt, "served_root", served_root)
    _PUT(receipt, "leaf_hashes", leaf_hashes)
    _PUT(receipt, "proofs", proofs)
    return receipt  # type: ignore[no-any-return]


def decode_receipt(data: bytes) -> Receipt:
    """Parse a version-2 receipt payload (untrusted bytes; :class:`EncodingError`)."""
    k = "receipt"
    size = _RECEIPT_HEAD.size
    if len(data) < size:
        raise _bad(k, f"{len(data)} bytes is shorter than a receipt")
    (
        version,
        tag,
        origin,
        obligation,
        commitment,
        demand,
        issued_at,
        tree_size,
        status_code,
        reason_code,
        n,
    ) = _RECEIPT_HEAD.unpack_from(data)
    if version != BINARY_VERSION or tag != _RECEIPT_TAG:
        raise _bad(k, f"version/kind bytes {version}/{tag} are not {BINARY_VERSION}/'R'")
    if issued_at > MAX_TIME_MS:
        raise _bad(k, "issued_at out of range")
    status, reason = _read_codes(tree_size, status_code, reason_code, k)
    nonce, at = _read_nonce(data, size, n, 0, k)
    leaves, served_root, leaf_hashes, proofs, at = _read_served(data, at, k)
    if at != len(data):
        raise _bad(k, f"{len(data) - at} trailing bytes")
    check_receipt_shape(k, status, reason, leaves, served_root, leaf_hashes, proofs)
    return new_receipt(
        origin.hex(),
        obligation.hex(),
        commitment.hex(),
        demand.hex(),
        nonce,
        status,
        issued_at,
        tree_size,
        leaves,
        served_root,
        leaf_hashes,
        proofs,
        reason,
    )


def _read_codes(
    tree_size: int, status_code: int, reason_code: int, k: str
) -> tuple[ReceiptStatus, RefusalReason | None]:
    """A receipt's tree size checked and its status and reason codes read."""
    if tree_size > MAX_COUNT:
        raise _bad(k, f"tree_size exceeds {MAX_COUNT}")
    status = _STATUS_BY_CODE.get(status_code)
    if status is None:
        raise _bad(k, f"unknown status code {status_code}")
    reason = None
    if reason_code:
        reason = _REASON_BY_CODE.get(reason_code)
        if reason is None:
            raise _bad(k, f"unknown reason code {reason_code}")
    return status, reason


def _read_served(
    data: bytes, at: int, k: str
) -> tuple[
    tuple[int, ...] | None,
    str | None,
    tuple[bytes, ...],
    tuple[tuple[bytes, ...], ...],
    int,
]:
    """What a receipt says was served: leaves, the served_root flag [+ root], leaf
    hashes and inclusion proofs; the end offset."""
    leaves, at = _read_leaves(data, at, k)
    flag = data[at : at + 1]
    served_root = None
    if flag == b"\x01":
        raw = data[at + 1 : at + 33]
        if len(raw) != 32:
            raise _bad(k, "truncated served_root")
        served_root, at = raw.hex(), at + 33
    elif flag == b"\x00":
        at += 1
    else:
        raise _bad(k, "served_root flag must be 0 or 1")
    leaf_hashes, at = _read_hashes(data, at, MAX_LIST, k, "leaf hashes")
    proofs, at = _read_proofs(data, at, k)
    return leaves, served_root, leaf_hashes, proofs, at


def _read_proofs(data: bytes, at: int, k: str) -> tuple[tuple[tuple[bytes, ...], ...], int]:
    """A u32 count of inclusion proofs, each a u8 count of 32-byte hashes; the end offset."""
    head = data[at : at + 4]
    if len(head) != 4:
        raise _bad(k, "truncated proof count")
    (count,) = _U32.unpack(head)
    if count > MAX_LIST:
        raise _bad(k, f"{count} proofs exceeds {MAX_LIST}")
    at += 4
    proofs = []
    for _ in range(count):
        length = data[at : at + 1]
        if not length:
            raise _bad(k, "truncated proof")
        if length[0] > _MAX_PATH:
            raise _bad(k, f"a proof of {length[0]} hashes exceeds {_MAX_PATH}")
        end = at + 1 + 32 * length[0]
        raw = data[at + 1 : end]
        if len(raw) != end - at - 1:
            raise _bad(k, "truncated proof")
        proofs.append(tuple(raw[i : i + 32] for i in range(0, len(raw), 32)))
        at = end
    return tuple(proofs), at


def _read_hashes(
    data: bytes, at: int, limit: int, kind: str, what: str
) -> tuple[tuple[bytes, ...], int]:
    head = data[at : at + 4]
    if len(head) != 4:
        raise _bad(kind, f"truncated {what} count")
    (count,) = _U32.unpack(head)
    if count > limit:
        raise _bad(kind, f"{count} {what} exceeds {limit}")
    start, end = at + 4, at + 4 + 32 * count
    if len(data) < end:
        raise _bad(kind, f"truncated {what}")
    return tuple(data[i : i + 32] for i in range(start, end, 32)), end
