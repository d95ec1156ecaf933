"""RFC 6962 Merkle trees over a fold's hop bytes.

Hashing (RFC 6962 §2.1, SHA-256):

* leaf hash ``MTH({d}) = SHA-256(0x00 ‖ d)`` over a hop's canonical bytes;
* node hash ``SHA-256(0x01 ‖ left ‖ right)``;
* the empty tree hashes to ``SHA-256("")``;
* for ``n > 1`` leaves the tree splits at ``k``, the largest power of two
  smaller than ``n``: ``MTH(D[n]) = SHA-256(0x01 ‖ MTH(D[0:k]) ‖ MTH(D[k:n]))``.

The root is computed bottom-up (pairing neighbours, carrying an odd last node
up unchanged), which yields exactly the RFC's left-balanced tree; the tests
check this against the recursive definition written out independently.

Inclusion proofs are RFC 6962 §2.1.1 audit paths (sibling hashes, leaf to
root). :func:`root_from_inclusion` follows the verification algorithm of
RFC 9162 §2.1.3.2.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

from contracts.errors import EncodingError, RootMismatch

__all__ = [
    "EMPTY_ROOT",
    "HASH_LEN",
    "MerkleTree",
    "inclusion_proof",
    "leaf_hash",
    "leaf_hashes",
    "merkle_root",
    "node_hash",
    "root_from_inclusion",
    "root_from_leaf_hashes",
    "verify_inclusion",
]

HASH_LEN = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()
_sha256 = hashlib.sha256


# Pre-seeded contexts: copying one and feeding the rest is measurably cheaper
# in CPython than building ``b"\x00" + data`` and a fresh context per hash.
_LEAF_CTX = hashlib.sha256(b"\x00")
_NODE_CTX = hashlib.sha256(b"\x01")


def leaf_hashes(leaves: Iterable[bytes]) -> list[bytes]:
    """RFC 6962 leaf hashes of many leaves (the hot path of fold verification)."""
    out: list[bytes] = []
    append, copy = out.append, _LEAF_CTX.copy
    for data in leaves:
        ctx = copy()
        ctx.update(data)
        append(ctx.digest())
    return out


def _next_level(level: list[bytes]) -> list[bytes]:
    nxt: list[bytes] = []
    append, copy = nxt.append, _NODE_CTX.copy
    it = iter(level)
    for left, right in zip(it, it, strict=False):
        ctx = copy()
        ctx.update(left + right)
        append(ctx.digest())
    if len(level) & 1:
        # A last odd node is carried up unchanged (RFC 6962's left-balanced split).
        nxt.append(level[-1])
    return nxt


def leaf_hash(data: bytes) -> bytes:
    """RFC 6962 leaf hash: SHA-256(0x00 ‖ data)."""
    return _sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """RFC 6962 interior node hash: SHA-256(0x01 ‖ left ‖ right)."""
    return _sha256(b"\x01" + left + right).digest()


def root_from_leaf_hashes(hashes: Sequence[bytes]) -> bytes:
    """Merkle tree hash given the leaf hashes, in leaf order."""
    if not hashes:
        return EMPTY_ROOT
    level = list(hashes)
    while len(level) > 1:
        level = _next_level(level)
    return level[0]


def merkle_root(leaves: Iterable[bytes]) -> bytes:
    """RFC 6962 Merkle tree hash of the leaf data, in order."""
    data = leaves if isinstance(leaves, list | tuple) else list(leaves)
    n = len(data)
    if n < 2:
        return leaf_hashes(data)[0] if n else EMPTY_ROOT
    # Leaf hashes and the first level of nodes in one pass: this is the cost
    # of verifying a served fold, so the loop is kept tight.
    level: list[bytes] = []
    append, leaf, node = level.append, _LEAF_CTX.copy, _NODE_CTX.copy
    it = iter(data)
    for left, right in zip(it, it, strict=False):
        a = leaf()
        a.update(left)
        b = leaf()
        b.update(right)
        c = node()
        c.update(a.digest() + b.digest())
        append(c.digest())
    if n & 1:
        a = leaf()
        a.update(data[-1])
        append(a.digest())
    while len(level) > 1:
        level = _next_level(level)
    return level[0]


class MerkleTree:
    """All levels of a tree, so many inclusion proofs cost O(log n) each."""

    __slots__ = ("_levels",)

    def __init__(self, hashes: Sequence[bytes]) -> None:
        levels = [list(hashes)]
        while len(levels[-1]) > 1:
            levels.append(_next_level(levels[-1]))
        self._levels = levels

    @classmethod
    def from_leaves(cls, leaves: Iterable[bytes]) -> MerkleTree:
        return cls(leaf_hashes(leaves))

    @property
    def size(self) -> int:
        return len(self._levels[0])

    @property
    def root(self) -> bytes:
        return self._levels[-1][0] if self._levels[0] else EMPTY_ROOT

    def leaf_hash(self, index: int) -> bytes:
        return self._levels[0][index]

    def proof(self, index: int) -> tuple[bytes, ...]:
        """RFC 6962 §2.1.1 audit path for leaf ``index`` (leaf to root)."""
        if not 0 <= index < self.size:
            raise ValueError(f"leaf index {index} outside tree of size {self.size}")
        path: list[bytes] = []
        for level in self._levels[:-1]:
            sibling = index ^ 1
            # A last odd node has no sibling at this level: it is carried up.
            if sibling < len(level):
                path.append(level[sibling])
            index >>= 1
        return tuple(path)


def inclusion_proof(leaves: Sequence[bytes], index: int) -> tuple[bytes, ...]:
    """Audit path for ``leaves[index]`` (leaf data, not hashes)."""
    return MerkleTree.from_leaves(leaves).proof(index)


def root_from_inclusion(leaf: bytes, index: int, tree_size: int, proof: Sequence[bytes]) -> bytes:
    """Root implied by a leaf hash and its audit path (RFC 9162 §2.1.3.2).

    Raises :class:`EncodingError` when the path has the wrong shape for
    ``(index, tree_size)``: too long, too short, or a hash of the wrong size.
    """
    if not 0 <= index < tree_size:
        raise EncodingError(f"leaf index {index} outside tree of size {tree_size}")
    fn, sn, r = index, tree_size - 1, leaf
    sha = _sha256
    for p in proof:
        if len(p) != HASH_LEN:
            raise EncodingError(f"proof hash of {len(p)} bytes, expected {HASH_LEN}")
        if sn == 0:
            raise EncodingError(f"inclusion proof for leaf {index} of {tree_size} is too long")
        if fn & 1 or fn == sn:
            r = sha(b"\x01" + p + r).digest()
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = sha(b"\x01" + r + p).digest()
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise EncodingError(f"inclusion proof for leaf {index} of {tree_size} is too short")
    return r


def verify_inclusion(
    leaf: bytes, index: int, tree_size: int, proof: Sequence[bytes], root: bytes
) -> None:
    """Raise :class:`RootMismatch` unless the path leads from ``leaf`` to ``root``."""
    got = root_from_inclusion(leaf, index, tree_size, proof)
    if got != root:
        raise RootMismatch(
            f"leaf {index} of {tree_size}: proof leads to root {got.hex()[:12]}…,"
            f" committed root is {root.hex()[:12]}…"
        )
