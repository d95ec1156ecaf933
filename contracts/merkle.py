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
    "merkle_root",
    "node_hash",
    "root_from_inclusion",
    "root_from_leaf_hashes",
    "verify_inclusion",
]

HASH_LEN = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()
_sha256 = hashlib.sha256


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
    sha = _sha256
    while len(level) > 1:
        n = len(level)
        nxt = [sha(b"\x01" + level[i] + level[i + 1]).digest() for i in range(0, n - 1, 2)]
        if n & 1:
            nxt.append(level[-1])
        level = nxt
    return level[0]


def merkle_root(leaves: Iterable[bytes]) -> bytes:
    """RFC 6962 Merkle tree hash of the leaf data, in order."""
    sha = _sha256
    return root_from_leaf_hashes([sha(b"\x00" + d).digest() for d in leaves])


class MerkleTree:
    """All levels of a tree, so many inclusion proofs cost O(log n) each."""

    __slots__ = ("_levels",)

    def __init__(self, leaf_hashes: Sequence[bytes]) -> None:
        levels = [list(leaf_hashes)]
        while len(levels[-1]) > 1:
            level = levels[-1]
            n = len(level)
            nxt = [node_hash(level[i], level[i + 1]) for i in range(0, n - 1, 2)]
            if n & 1:
                nxt.append(level[-1])
            levels.append(nxt)
        self._levels = levels

    @classmethod
    def from_leaves(cls, leaves: Iterable[bytes]) -> MerkleTree:
        return cls([leaf_hash(d) for d in leaves])

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
