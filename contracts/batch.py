"""Batched demands and receipts (payload version 3): one signature per side per origin.

A holder that rehydrates a value demands every fold it needs from one origin
in one call. With per-fold statements (version 1 JSON, version 2 binary) each
fold costs a signed :class:`~contracts.statements.Demand` and a signed
:class:`~contracts.statements.Receipt`: 2 × folds signatures per rehydration.
Version 3 signs **one demand batch** naming every fold wanted (obligation
digest — for a fold under a head, the head digest — and commitment digest —
the fold record's leaf hash — plus the leaves of each), answered by **one
receipt batch** with one item per fold served or refused (tree size, status,
reason, served root or leaf hashes + audit paths, exactly the fields of a
per-fold receipt).

* ``application/vnd.provnet.demand-batch.v3+bin``
* ``application/vnd.provnet.receipt-batch.v3+bin``

Nothing about a fold is weaker: each item *is* the fold's demand or receipt,
with the batch's holder, origin, nonce, time (demand) and the batch
demand's digest, nonce and ``issued_at`` (receipt) filled in. Reading a batch
for one fold (:func:`demand_item`, :func:`receipt_item`, or
``open_statement(..., fold=(obligation, commitment))``) returns that
projection as a plain :class:`Demand` / :class:`Receipt` whose envelope is
the batch's: its signature covers every item, its digest is the batch's, and
the per-fold checks (binding by digest and nonce, signed leaves against the
committed root, refusal before ``serve_until``, deadline of a demand) apply
unchanged. So ``bad_data`` for one fold is proven by the batch demand, the
batch receipt and that fold's bytes; ``refused`` by the signed batch receipt
item; ``unanswered`` by the signed batch demand (plus witnesses). Evidence
records keep their format: the demand and receipt envelopes are the batches,
and the record's commitment and obligation select the item.

Layout (integers big-endian, unsigned; ids and digests 32 raw bytes)::

    demand batch                      receipt batch
    u8   version = 3                  u8   version = 3
    u8   kind = 0x64 ('d')            u8   kind = 0x72 ('r')
    32   holder (node id)             32   origin (node id)
    32   origin (node id)             32   demand (digest of the demand batch)
    u64  time (ms)                    u64  issued_at (ms)
    u8   nonce length n + nonce       u8   nonce length n + nonce
    u16  item count c (1..MAX_BATCH)  u16  item count c (1..MAX_BATCH)
    c × [32 obligation,               c × [32 obligation, 32 commitment,
         32 commitment, LEAVES]            u64 tree_size, u8 status, u8 reason,
                                           LEAVES, u8 served_root flag [+ 32],
                                           u32 h + h × 32 leaf hashes,
                                           u32 p + p × (u8 l + l × 32) proofs]

``LEAVES`` and the status/reason codes are those of :mod:`contracts.binary`.
Demand items are strictly increasing by (obligation, commitment) — one
encoding per set of folds, and no fold twice; receipt items name distinct
folds (in the demand's order when faithful; an item under another head or
commitment is what an equivocating origin signs). Decoding is as strict as
version 2: exact lengths, no trailing bytes, known codes, the receipt shape
rules of :func:`~contracts.statements.check_receipt_shape` per item.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from contracts._answer_rule import refusal_for
from contracts._fields import MAX_TIME_MS
from contracts.binary import (
    _MIN_NONCE,
    REASON_CODES,
    STATUS_CODES,
    _leaves_bytes,
    _nonce_bytes,
    _raw,
    _read_codes,
    _read_leaves,
    _read_nonce,
    _read_served,
    _served_bytes,
    new_demand,
    new_receipt,
)
from contracts.envelope import Envelope, EnvelopeSigner, sign_envelope
from contracts.errors import BindingMismatch, EncodingError
from contracts.identity import Identity
from contracts.merkle import MerkleTree, leaf_hashes, merkle_root
from contracts.statements import (
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
    "MAX_BATCH",
    "RECEIPT_BATCH_TYPE",
    "DemandBatch",
    "DemandItem",
    "FoldKey",
    "ReceiptBatch",
    "batch_receipt_item",
    "build_demand_batch",
    "decode_demand_batch",
    "decode_receipt_batch",
    "demand_item",
    "encode_demand_batch",
    "encode_receipt_batch",
    "receipt_batch_head",
    "receipt_batch_payload",
    "receipt_item",
    "receipt_item_bytes",
    "served_item",
    "served_whole_item",
    "sign_demand_batch",
    "sign_receipt_batch",
]

BATCH_VERSION = 3
DEMAND_BATCH_TYPE = f"{PAYLOAD_TYPE_PREFIX}demand-batch.v3+bin"
RECEIPT_BATCH_TYPE = f"{PAYLOAD_TYPE_PREFIX}receipt-batch.v3+bin"
#: Folds one batch may name (an origin's answer stays far under the size bound).
MAX_BATCH = 1024

#: (obligation digest, commitment digest) of a fold, lower-case hex.
FoldKey = tuple[str, str]

_DEMAND_TAG = ord("d")
_RECEIPT_TAG = ord("r")
_DEMAND_HEAD = struct.Struct(">BB32s32sQB")
_RECEIPT_HEAD = struct.Struct(">BB32s32sQB")
_U16 = struct.Struct(">H")
_ITEM_KEY = struct.Struct(">32s32s")
_RECEIPT_ITEM = struct.Struct(">32s32sQBB")
_MAX_PATH = 64


@dataclass(frozen=True, slots=True)
class DemandItem:
    """One fold a demand batch names (digests as lower-case hex)."""

    obligation: str
    commitment: str
    leaves: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class DemandBatch:
    """A holder's demand for several folds of one origin, signed once."""

    holder: str
    origin: str
    nonce: str
    time: int
    items: tuple[DemandItem, ...]

    def demand(self, index: int) -> Demand:
        """Item ``index`` read as the fold's own :class:`Demand`."""
        it = self.items[index]
        return new_demand(
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
    """An origin's answer to a demand batch: one item per fold, signed once.

    ``items`` are per-fold :class:`Receipt` statements whose ``origin``,
    ``demand``, ``nonce`` and ``issued_at`` are the batch's own.
    """

    origin: str
    demand: str
    nonce: str
    issued_at: int
    items: tuple[Receipt, ...]


# ------------------------------------------------------------------- encoding


def _key_bytes(obligation: str, commitment: str) -> bytes:
    return _raw(obligation, "batch item obligation") + _raw(commitment, "batch item commitment")


#: A fold's packed key, once per fold: a holder names the same folds demand after demand.
_fold_key = functools.lru_cache(maxsize=4096)(_key_bytes)


def encode_demand_batch(b: DemandBatch) -> bytes:
    """The version-3 payload of a demand batch (``ValueError`` on fields it cannot hold)."""
    if not 1 <= len(b.items) <= MAX_BATCH:
        raise ValueError(f"a demand batch names 1..{MAX_BATCH} folds, got {len(b.items)}")
    nonce = _nonce_bytes(b.nonce, _MIN_NONCE)
    parts = [
        _DEMAND_HEAD.pack(
            BATCH_VERSION,
            _DEMAND_TAG,
            _raw(b.holder, "demand batch holder"),
            _raw(b.origin, "demand batch origin"),
            b.time,
            len(nonce),
        ),
        nonce,
        _U16.pack(len(b.items)),
    ]
    prev = b""
    for it in b.items:
        key = _fold_key(it.obligation, it.commitment)
        if key <= prev:
            raise ValueError("demand batch items must be strictly increasing by fold")
        prev = key
        parts.append(key)
        parts.append(_leaves_bytes(it.leaves))
    return b"".join(parts)


def encode_receipt_batch(b: ReceiptBatch) -> bytes:
    """The version-3 payload of a receipt batch (``ValueError`` on fields it cannot hold)."""
    if not 1 <= len(b.items) <= MAX_BATCH:
        raise ValueError(f"a receipt batch answers 1..{MAX_BATCH} folds, got {len(b.items)}")
    for r in b.items:
        if (r.origin, r.demand, r.nonce, r.issued_at) != (b.origin, b.demand, b.nonce, b.issued_at):
            raise ValueError(
                "a receipt batch item must carry the batch's origin, demand, nonce, time"
            )
    return receipt_batch_payload(
        [receipt_item_bytes(r) for r in b.items],
        origin=b.origin,
        demand=b.demand,
        nonce=b.nonce,
        issued_at=b.issued_at,
    )


def receipt_item_bytes(r: Receipt) -> bytes:
    """One receipt batch item as :func:`encode_receipt_batch` writes it.

    An item's bytes do not hold the batch's own fields (origin, demand,
    nonce, issued_at): whatever those are in ``r``, the batch that carries
    the item signs its own.
    """
    parts = [
        _RECEIPT_ITEM.pack(
            _raw(r.obligation, "batch item obligation"),
            _raw(r.commitment, "batch item commitment"),
            r.tree_size,
            STATUS_CODES[r.status],
            0 if r.reason is None else REASON_CODES[r.reason],
        )
    ]
    _served_bytes(r, parts)
    return b"".join(parts)


#: What follows a SERVED whole-fold item's status and reason: leaves flag 0
#: (the whole fold), served_root present, then (after the root) no leaf
#: hashes and no proofs.
_WHOLE_FOLD = b"\x00\x01"
_NO_HASHES_NO_PROOFS = b"\x00\x00\x00\x00\x00\x00\x00\x00"
_SERVED_CODE = STATUS_CODES[ReceiptStatus.SERVED]


def served_whole_item(obligation: str, commitment: str, tree_size: int, root: str) -> bytes:
    """The item bytes of a SERVED answer for a whole fold (``leaves`` null).

    The same bytes as :func:`receipt_item_bytes` of :func:`served_item` for a
    whole-fold demand with ``root`` as its served root. They depend on the
    fold alone, not on the demand: an origin packs them once per fold, and a
    holder knows them before it asks (:func:`contracts.lazy.served_batch_without_signature`).
    """
    return (
        _RECEIPT_ITEM.pack(
            _raw(obligation, "batch item obligation"),
            _raw(commitment, "batch item commitment"),
            tree_size,
            _SERVED_CODE,
            0,
        )
        + _WHOLE_FOLD
        + _raw(root, "served_root")
        + _NO_HASHES_NO_PROOFS
    )


def receipt_batch_head(origin: str, demand: str, nonce: str, issued_at: int, count: int) -> bytes:
    """The bytes of a receipt batch before its items (``ValueError`` on bad fields)."""
    if not 1 <= count <= MAX_BATCH:
        raise ValueError(f"a receipt batch answers 1..{MAX_BATCH} folds, got {count}")
    raw_nonce = _nonce_bytes(nonce, 0)
    return (
        _RECEIPT_HEAD.pack(
            BATCH_VERSION,
            _RECEIPT_TAG,
            _raw(origin, "receipt batch origin"),
            _raw(demand, "receipt batch demand"),
            issued_at,
            len(raw_nonce),
        )
        + raw_nonce
        + _U16.pack(count)
    )


def receipt_batch_payload(
    items: Sequence[bytes], *, origin: str, demand: str, nonce: str, issued_at: int
) -> bytes:
    """A receipt batch payload from packed items (:func:`receipt_item_bytes`,
    :func:`served_whole_item`); ``ValueError`` if an item names a fold twice."""
    head = receipt_batch_head(origin, demand, nonce, issued_at, len(items))
    if len({item[:64] for item in items}) != len(items):
        raise ValueError("a receipt batch answers each fold once")
    return head + b"".join(items)


# ------------------------------------------------------------------- decoding


def _bad(kind: str, what: str) -> EncodingError:
    return EncodingError(f"{kind} (binary v{BATCH_VERSION}): {what}")


def _read_count(data: bytes, at: int, kind: str) -> tuple[int, int]:
    raw = data[at : at + 2]
    if len(raw) != 2:
        raise _bad(kind, "truncated item count")
    (count,) = _U16.unpack(raw)
    if not 1 <= count <= MAX_BATCH:
        raise _bad(kind, f"item count {count} is not 1..{MAX_BATCH}")
    return count, at + 2


def decode_demand_batch(data: bytes) -> DemandBatch:
    """Parse a version-3 demand batch payload (untrusted bytes; :class:`EncodingError`)."""
    k = "demand batch"
    size = _DEMAND_HEAD.size
    if len(data) < size:
        raise _bad(k, f"{len(data)} bytes is shorter than a demand batch")
    version, tag, holder, origin, time, n = _DEMAND_HEAD.unpack_from(data)
    if version != BATCH_VERSION or tag != _DEMAND_TAG:
        raise _bad(k, f"version/kind bytes {version}/{tag} are not {BATCH_VERSION}/'d'")
    if time > MAX_TIME_MS:
        raise _bad(k, "time out of range")
    nonce, at = _read_nonce(data, size, n, _MIN_NONCE, k)
    count, at = _read_count(data, at, k)
    items = []
    prev = b""
    for _ in range(count):
        key = data[at : at + 64]
        if len(key) != 64:
            raise _bad(k, "truncated item")
        if key <= prev:
            raise _bad(k, "items must be strictly increasing by (obligation, commitment)")
        prev = key
        leaves, at = _read_leaves(data, at + 64, k)
        items.append(DemandItem(key[:32].hex(), key[32:].hex(), leaves))
    if at != len(data):
        raise _bad(k, f"{len(data) - at} trailing bytes")
    return DemandBatch(holder.hex(), origin.hex(), nonce, time, tuple(items))


def decode_receipt_batch(data: bytes) -> ReceiptBatch:
    """Parse a version-3 receipt batch payload (untrusted bytes; :class:`EncodingError`)."""
    k = "receipt batch"
    size = _RECEIPT_HEAD.size
    if len(data) < size:
        raise _bad(k, f"{len(data)} bytes is shorter than a receipt batch")
    version, tag, origin_raw, demand_raw, issued_at, n = _RECEIPT_HEAD.unpack_from(data)
    if version != BATCH_VERSION or tag != _RECEIPT_TAG:
        raise _bad(k, f"version/kind bytes {version}/{tag} are not {BATCH_VERSION}/'r'")
    if issued_at > MAX_TIME_MS:
        raise _bad(k, "issued_at out of range")
    nonce, at = _read_nonce(data, size, n, 0, k)
    count, at = _read_count(data, at, k)
    origin, demand = origin_raw.hex(), demand_raw.hex()
    items: list[Receipt] = []
    seen: set[bytes] = set()
    for _ in range(count):
        if len(data) < at + _RECEIPT_ITEM.size:
            raise _bad(k, "truncated item")
        obligation, commitment, tree_size, status_code, reason_code = _RECEIPT_ITEM.unpack_from(
            data, at
        )
        at += _RECEIPT_ITEM.size
        if obligation + commitment in seen:
            raise _bad(k, "an item names a fold already answered")
        seen.add(obligation + commitment)
        status, reason = _read_codes(tree_size, status_code, reason_code, k)
        leaves, served_root, hashes, proofs, at = _read_served(data, at, k)
        check_receipt_shape(k, status, reason, leaves, served_root, hashes, proofs)
        items.append(
            new_receipt(
                origin,
                obligation.hex(),
                commitment.hex(),
                demand,
                nonce,
                status,
                issued_at,
                tree_size,
                leaves,
                served_root,
                hashes,
                proofs,
                reason,
            )
        )
    if at != len(data):
        raise _bad(k, f"{len(data) - at} trailing bytes")
    return ReceiptBatch(origin, demand, nonce, issued_at, tuple(items))


# ------------------------------------------------------------------- one fold of a batch


def _no_item(kind: str, fold: FoldKey) -> BindingMismatch:
    return BindingMismatch(f"{kind} names no fold {fold[1][:12]}… under obligation {fold[0][:12]}…")


def demand_item(payload: bytes, fold: FoldKey) -> Demand:
    """The demand a batch payload makes for ``fold`` (:class:`BindingMismatch` if none)."""
    batch = decode_demand_batch(payload)
    for index, it in enumerate(batch.items):
        if (it.obligation, it.commitment) == fold:
            return batch.demand(index)
    raise _no_item("demand batch", fold)


def receipt_item(payload: bytes, fold: FoldKey) -> Receipt:
    """The receipt a batch payload signs for ``fold`` (:class:`BindingMismatch` if none)."""
    for r in decode_receipt_batch(payload).items:
        if (r.obligation, r.commitment) == fold:
            return r
    raise _no_item("receipt batch", fold)


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

    Items are put in the batch's canonical order (by digests); a caller maps
    them back with :meth:`DemandBatch.demand` and the keys.
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
    by the caller), and the envelope's bytes: the same envelope, and its
    ``to_bytes()`` written once, from the signer's template."""
    holder, payload_type = signer.signs_as
    if payload_type != DEMAND_BATCH_TYPE:
        raise ValueError(f"signer signs {payload_type!r:.80}, not demand batches")
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
                f" not the batch's origin {origin[:16]}…"
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
    """The receipt item a correct origin answers one fold of a batch with (unsigned).

    The same decisions as :func:`contracts.serve.answer_demand`, in the same
    order: EXPIRED at/after ``serve_until``, NOT_BOUND_HOLDER, BAD_DEMAND for
    a leaf outside the fold, PENDING / EVICTED when the fold cannot be read,
    STORE_CORRUPTED when the stored bytes no longer reproduce the committed root, else
    SERVED over exactly ``hops``. ``hops_root``: the root of ``hops`` when the
    caller already has it.
    """
    o, c, d = obligation, commitment, demand

    def refuse(status: ReceiptStatus, reason: RefusalReason) -> Receipt:
        return new_receipt(
            origin,
            obligation_digest,
            commitment_digest,
            demand_digest,
            d.nonce,
            status,
            now,
            c.leaf_count,
            reason=reason,
        )

    why = refusal_for(o, c, d, hops, now, hops_root)
    if why is not None:
        return refuse(*why)
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
    return new_receipt(
        origin,
        obligation_digest,
        commitment_digest,
        demand_digest,
        demand.nonce,
        ReceiptStatus.SERVED,
        now,
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
    """Sign one receipt batch over ``items`` (each rebound to the batch's own fields).

    An item's ``origin``, ``demand``, ``nonce`` and ``issued_at`` are the
    batch's; every other field (obligation, commitment, status, reason, tree
    size, leaves, root, leaf hashes, proofs) is signed as given. An item may
    come already packed (:func:`served_whole_item`, :func:`receipt_item_bytes`):
    an origin serving a whole fold packs its item once, not per demand.
    """
    packed = [r if isinstance(r, bytes) else receipt_item_bytes(r) for r in items]
    payload = receipt_batch_payload(
        packed, origin=identity.node_id, demand=demand, nonce=nonce, issued_at=issued_at
    )
    return sign_envelope(identity, RECEIPT_BATCH_TYPE, payload)
