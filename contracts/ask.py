"""The unsigned first ask (design revision 3: sign where it carries information).

A holder's first request for folds under heads it already verified carries no
signature and no nonce: it names, per fold, the signed head and the fold
record proven under it, and nothing else. Its answer is the fold's hops and
no receipt. Nothing about it can be evidence — the holder keeps the hops only
if they reproduce the root proven under the verified head
(:func:`reproduces_fold`), and anything else is followed by a signed demand
that requires a signed receipt (:mod:`contracts.serve`). So neither side signs
or verifies a signature when the origin is faithful.

Why no nonce and no time: an ask moves no state on the origin (no replay
floor, no nonce memory, no future-nonce file), so there is nothing to replay;
answering it twice gives the same bytes. Why no holder: the obligation is a
bearer instrument (S7), answered the same whoever asks.

Layout (one ask per fold, back to back; the request's ``asks`` field)::

    offset  size  field
    0       32    head      SHA-256 digest of the signed head's envelope
    32      32    fold      RFC 6962 leaf hash of the fold record (RFC 9162 §2.1.1)

Sizes are checked before anything is looked up or hashed: a multiple of
:data:`ASK_BYTES`, at most ``max_folds`` asks, none repeated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from contracts.errors import EncodingError
from contracts.heads import VerifiedFold
from contracts.merkle import KnownRoots, merkle_root

__all__ = [
    "ASK_BYTES",
    "ASK_LAYOUT",
    "MAX_OPEN_LEAVES",
    "FoldAsk",
    "pack_asks",
    "read_ask",
    "reproduces_fold",
    "split_asks",
]

#: (field, bytes) in order: the one layout :func:`pack_asks` and :func:`read_ask` follow.
ASK_LAYOUT: tuple[tuple[str, int], ...] = (("head", 32), ("fold", 32))
ASK_BYTES = sum(size for _, size in ASK_LAYOUT)
#: The most hops an origin answers one unsigned ask with: a larger fold is demanded
#: signed (or streamed), so a 64-byte ask never buys more than this many hops.
MAX_OPEN_LEAVES = 4096


@dataclass(frozen=True, slots=True)
class FoldAsk:
    """One fold asked unsigned: the head digest and the fold record's leaf hash (hex)."""

    head: str
    fold: str

    @classmethod
    def for_fold(cls, fold: VerifiedFold) -> FoldAsk:
        return cls(fold.head.digest, fold.leaf_hash.hex())


def pack_asks(asks: Sequence[FoldAsk]) -> bytes:
    """The ``asks`` bytes for ``asks``, in order (:data:`ASK_LAYOUT` per ask)."""
    parts: list[bytes] = []
    for ask in asks:
        for (name, size), value in zip(ASK_LAYOUT, (ask.head, ask.fold), strict=True):
            raw = bytes.fromhex(value)
            if len(raw) != size:
                raise ValueError(f"ask {name} must be {size} bytes, got {len(raw)}")
            parts.append(raw)
    return b"".join(parts)


def split_asks(data: bytes, *, max_folds: int) -> tuple[bytes, ...]:
    """The asks in ``data``, each its :data:`ASK_BYTES` bytes, in order;
    :class:`EncodingError` naming what is wrong (checked by size first: nothing is
    read from bytes of a length no honest holder sends; then no ask repeated)."""
    if not data:
        raise EncodingError("asks: empty (at least one fold must be asked)")
    if len(data) % ASK_BYTES:
        raise EncodingError(f"asks: {len(data)} bytes is not a multiple of {ASK_BYTES}")
    count = len(data) // ASK_BYTES
    if count > max_folds:
        raise EncodingError(f"asks: {count} folds exceeds {max_folds} per call")
    if count == 1:  # nearly every call
        return (data,)
    chunks = tuple(data[at : at + ASK_BYTES] for at in range(0, len(data), ASK_BYTES))
    if len(set(chunks)) != count:
        raise EncodingError("asks: the same fold is asked twice in one call")
    return chunks


def read_ask(chunk: bytes) -> FoldAsk:
    """One ask's :data:`ASK_LAYOUT` fields (``chunk``: one item of :func:`split_asks`)."""
    fields: list[str] = []
    offset = 0
    for _, size in ASK_LAYOUT:
        fields.append(chunk[offset : offset + size].hex())
        offset += size
    return FoldAsk(*fields)


def reproduces_fold(hops: Sequence[bytes], fold: VerifiedFold, known: KnownRoots | None) -> bool:
    """Whether unsigned ``hops`` are the whole fold: as many as the record's leaf count,
    their RFC 6962 root equal to the root the record (proven under the verified
    head) commits to. True makes them the committed bytes, whoever sent them."""
    record = fold.record
    if len(hops) != record.leaf_count:
        return False
    root = bytes.fromhex(record.root)
    return known.reproduces(hops, root) if known is not None else merkle_root(hops) == root
