"""RFC 6962 Merkle trees, cross-checked against the RFC's recursive definition
(written out again here, independently of ``contracts.merkle``) and against
the published test vectors of the Certificate Transparency reference code."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts import (
    EMPTY_ROOT,
    EncodingError,
    MerkleTree,
    RootMismatch,
    inclusion_proof,
    merkle_root,
    root_from_inclusion,
    verify_inclusion,
)
from contracts.merkle import leaf_hash


def _h(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _k(n: int) -> int:
    """Largest power of two strictly smaller than n (RFC 6962 §2.1)."""
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def reference_mth(d: list[bytes]) -> bytes:
    """MTH(D[n]) exactly as RFC 6962 §2.1 states it, recursively."""
    n = len(d)
    if n == 0:
        return _h(b"")
    if n == 1:
        return _h(b"\x00" + d[0])
    k = _k(n)
    return _h(b"\x01" + reference_mth(d[:k]) + reference_mth(d[k:]))


def reference_path(m: int, d: list[bytes]) -> list[bytes]:
    """PATH(m, D[n]) exactly as RFC 6962 §2.1.1 states it."""
    n = len(d)
    if n == 1:
        return []
    k = _k(n)
    if m < k:
        return [*reference_path(m, d[:k]), reference_mth(d[k:])]
    return [*reference_path(m - k, d[k:]), reference_mth(d[:k])]


# The eight leaves of the Certificate Transparency reference tests
# (merkle_tree_test.cc) and the published root of each prefix of them.
CT_LEAVES = [
    bytes.fromhex(x)
    for x in (
        "",
        "00",
        "10",
        "2021",
        "3031",
        "40414243",
        "5051525354555657",
        "606162636465666768696a6b6c6d6e6f",
    )
]
CT_ROOTS = [
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]


def test_empty_tree_root_is_sha256_of_nothing() -> None:
    assert merkle_root([]) == EMPTY_ROOT == _h(b"")
    assert EMPTY_ROOT.hex() == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


@pytest.mark.parametrize("n", range(1, 9))
def test_roots_match_published_certificate_transparency_vectors(n: int) -> None:
    assert merkle_root(CT_LEAVES[:n]).hex() == CT_ROOTS[n - 1]


@pytest.mark.parametrize("n", [*range(1, 40), 63, 64, 65, 127, 128, 129, 500])
def test_root_and_every_proof_match_the_recursive_rfc_definition(n: int) -> None:
    leaves = [f"hop {i}".encode() for i in range(n)]
    tree = MerkleTree.from_leaves(leaves)
    assert tree.root == reference_mth(leaves) == merkle_root(leaves)
    step = 1 if n <= 129 else 37
    for m in range(0, n, step):
        proof = tree.proof(m)
        assert list(proof) == reference_path(m, leaves)
        verify_inclusion(leaf_hash(leaves[m]), m, n, proof, tree.root)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=40), min_size=1, max_size=70), st.data())
def test_property_inclusion_proofs_verify_and_detect_a_wrong_leaf(
    leaves: list[bytes], data: st.DataObject
) -> None:
    n = len(leaves)
    m = data.draw(st.integers(0, n - 1))
    root = reference_mth(leaves)
    proof = inclusion_proof(leaves, m)
    assert root_from_inclusion(leaf_hash(leaves[m]), m, n, proof) == root
    with pytest.raises(RootMismatch):
        verify_inclusion(leaf_hash(leaves[m] + b"x"), m, n, proof, root)


def test_proof_of_wrong_length_or_index_is_malformed_not_accepted() -> None:
    leaves = [bytes([i]) for i in range(6)]
    tree = MerkleTree.from_leaves(leaves)
    proof = tree.proof(2)
    with pytest.raises(EncodingError, match="too short"):
        root_from_inclusion(leaf_hash(leaves[2]), 2, 6, proof[:-1])
    with pytest.raises(EncodingError, match="too long"):
        root_from_inclusion(leaf_hash(leaves[2]), 2, 6, (*proof, proof[0]))
    with pytest.raises(EncodingError, match="outside tree"):
        root_from_inclusion(leaf_hash(leaves[2]), 6, 6, proof)
    with pytest.raises(EncodingError, match="32"):
        root_from_inclusion(leaf_hash(leaves[2]), 2, 6, (b"\x00" * 31, *proof[1:]))


def test_leaf_and_node_prefixes_keep_a_node_from_posing_as_a_leaf() -> None:
    leaves = [b"a", b"b"]
    root = merkle_root(leaves)
    forged_leaf = leaf_hash(b"a") + leaf_hash(b"b")
    # Without the 0x00/0x01 prefixes this single-leaf tree would share the root.
    assert merkle_root([forged_leaf]) != root
