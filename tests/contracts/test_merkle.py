"""RFC 6962 Merkle trees, cross-checked against the RFC's recursive definition
(written out again here, independently of ``contracts.merkle``) and against
the published test vectors of the Certificate Transparency reference code."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

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
from contracts.merkle import (
    FoldRoots,
    KnownRoots,
    MerkleFrontier,
    consistency_roots,
    leaf_hash,
    verify_consistency,
)


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


# ---------------------------------------------------------------- RFC 9162 checks
# Published vectors, kept as data in tests/contracts/vectors/rfc6962 with their
# source repository, path and commit named in each file.

RFC6962_VECTORS = Path(__file__).with_name("vectors") / "rfc6962"

# Where provnet is stricter than the Go library the vectors come from, on purpose:
# RFC 9162 fixes every hash at the hash function's size, and the Go verifier
# compares equal-size roots without checking their length.
STRICTER_THAN_SOURCE = {
    "testdata/consistency/additional/sizes-are-equal-one-and-proof-is-empty.json": (
        "13-byte roots are not SHA-256 hashes"
    ),
}


def _vector_file(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((RFC6962_VECTORS / name).read_text())
    assert data["source"]["repository"].startswith("https://github.com/")
    assert len(data["source"]["commit"]) == 40
    return data


def _b64(value: str | None) -> bytes:
    return base64.b64decode(value or "")


def _b64_list(values: list[str] | None) -> list[bytes]:
    return [_b64(v) for v in values or []]


def _cases(name: str) -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = _vector_file(name)["cases"]
    return cases


@pytest.mark.parametrize(
    "case", _cases("transparency-dev-merkle-inclusion.json"), ids=lambda c: c["path"][18:]
)
def test_transparency_dev_inclusion_vectors_accept_exactly_the_valid_proofs(
    case: dict[str, Any],
) -> None:
    args = (
        _b64(case["leafHash"]),
        case["leafIdx"],
        case["treeSize"],
        _b64_list(case["proof"]),
        _b64(case["root"]),
    )
    want_error = case["wantErr"] or case["path"] in STRICTER_THAN_SOURCE
    if want_error:
        with pytest.raises((EncodingError, RootMismatch)):
            verify_inclusion(*args)
    else:
        verify_inclusion(*args)


@pytest.mark.parametrize(
    "case", _cases("transparency-dev-merkle-consistency.json"), ids=lambda c: c["path"][20:]
)
def test_transparency_dev_consistency_vectors_accept_exactly_the_valid_proofs(
    case: dict[str, Any],
) -> None:
    args = (
        case["size1"],
        case["size2"],
        _b64_list(case["proof"]),
        _b64(case["root1"]),
        _b64(case["root2"]),
    )
    if case["wantErr"] or case["path"] in STRICTER_THAN_SOURCE:
        with pytest.raises((EncodingError, RootMismatch)):
            verify_consistency(*args)
    else:
        verify_consistency(*args)


def test_transparency_dev_vectors_cover_both_outcomes_and_every_happy_path_is_ours() -> None:
    for name in ("inclusion", "consistency"):
        cases = _cases(f"transparency-dev-merkle-{name}.json")
        happy = [c for c in cases if not c["wantErr"]]
        assert len(cases) > 90
        assert len(happy) >= 5
        assert len(cases) - len(happy) > 80
    assert set(STRICTER_THAN_SOURCE) <= {
        c["path"] for c in _cases("transparency-dev-merkle-consistency.json")
    }


CT = _vector_file("certificate-transparency-merkle-tree-test.json")
CT_HASHES = [leaf_hash(bytes.fromhex(x)) for x in CT["inputs"]]


def test_ct_vectors_roots_of_every_prefix() -> None:
    assert bytes.fromhex(CT["empty_tree_hash"]) == EMPTY_ROOT
    tree = MerkleTree(CT_HASHES)
    for n, root in enumerate(CT["roots"], start=1):
        assert tree.root_at(n).hex() == root


@pytest.mark.parametrize("case", CT["paths"][1:], ids=lambda c: f"{c['leaf']}of{c['snapshot']}")
def test_ct_vectors_audit_paths_are_generated_and_verified(case: dict[str, Any]) -> None:
    n, index = case["snapshot"], case["leaf"] - 1
    tree = MerkleTree(CT_HASHES[:n])
    assert [p.hex() for p in tree.proof(index)] == case["path"]
    path = [bytes.fromhex(p) for p in case["path"]]
    verify_inclusion(CT_HASHES[index], index, n, path, bytes.fromhex(CT["roots"][n - 1]))


@pytest.mark.parametrize("case", CT["proofs"], ids=lambda c: f"{c['snapshot1']}to{c['snapshot2']}")
def test_ct_vectors_consistency_proofs_are_generated_and_verified(case: dict[str, Any]) -> None:
    m, n = case["snapshot1"], case["snapshot2"]
    tree = MerkleTree(CT_HASHES[:n])
    assert [p.hex() for p in tree.consistency(m)] == case["proof"]
    root1, root2 = bytes.fromhex(CT["roots"][m - 1]), bytes.fromhex(CT["roots"][n - 1])
    proof = [bytes.fromhex(p) for p in case["proof"]]
    verify_consistency(m, n, proof, root1, root2)
    if m < n:
        # The CT verifier's own negative cases: swapped roots, wrong sizes.
        with pytest.raises((EncodingError, RootMismatch)):
            verify_consistency(m, n, proof, root2, root1)
        for m2, n2 in ((m - 1, n), (m + 1, n), (m ^ 2, n), (m, n * 2), (m, n // 2)):
            with pytest.raises((EncodingError, RootMismatch)):
                verify_consistency(m2, n2, proof, root1, root2)


def test_rfc9162_length_checks_reject_hashes_that_are_not_32_bytes() -> None:
    # This returned without error before the length checks.
    with pytest.raises(EncodingError, match="must be a 32-byte hash, got 0 bytes"):
        verify_inclusion(b"", 0, 1, [], b"")
    good = leaf_hash(b"x")
    with pytest.raises(EncodingError, match="root must be a 32-byte hash"):
        verify_inclusion(good, 0, 1, [], good[:31])
    with pytest.raises(EncodingError, match="leaf hash"):
        root_from_inclusion(good + b"\x00", 0, 1, [])
    with pytest.raises(EncodingError, match="outside tree of size 0"):
        verify_inclusion(good, 0, 0, [], EMPTY_ROOT)
    with pytest.raises(EncodingError, match="non-negative"):
        verify_inclusion(good, -1, 1, [], good)
    with pytest.raises(EncodingError, match="first root"):
        verify_consistency(1, 1, [], b"", b"")
    with pytest.raises(EncodingError, match="empty tree"):
        verify_consistency(0, 0, [], EMPTY_ROOT, EMPTY_ROOT)
    with pytest.raises(EncodingError, match="empty proof"):
        verify_consistency(1, 1, [good], good, good)
    with pytest.raises(EncodingError, match="consistency proof hash 1"):
        consistency_roots(3, 4, [good, b"\x01"])


def reference_subproof(m: int, d: list[bytes], complete: bool) -> list[bytes]:
    """SUBPROOF(m, D[n], b) exactly as RFC 6962 §2.1.2 states it."""
    n = len(d)
    if m == n:
        return [] if complete else [reference_mth(d)]
    k = _k(n)
    if m <= k:
        return [*reference_subproof(m, d[:k], complete), reference_mth(d[k:])]
    return [*reference_subproof(m - k, d[k:], False), reference_mth(d[:k])]


@pytest.mark.parametrize("n", [*range(1, 34), 64, 65, 100])
def test_consistency_proofs_match_the_recursive_rfc_definition_and_verify(n: int) -> None:
    leaves = [f"fold {i}".encode() for i in range(n)]
    tree = MerkleTree.from_leaves(leaves)
    for m in range(1, n + 1):
        proof = tree.consistency(m)
        assert list(proof) == reference_subproof(m, leaves, True)
        verify_consistency(m, n, proof, reference_mth(leaves[:m]), tree.root)


@settings(max_examples=150, deadline=None)
@given(st.integers(2, 70), st.data())
def test_property_a_changed_prefix_or_a_flipped_proof_bit_fails_consistency(
    n: int, data: st.DataObject
) -> None:
    leaves = [f"fold {i}".encode() for i in range(n)]
    m = data.draw(st.integers(1, n - 1))
    tree = MerkleTree.from_leaves(leaves)
    proof = list(tree.consistency(m))
    changed = list(leaves)
    changed[data.draw(st.integers(0, m - 1))] += b"!"
    with pytest.raises(RootMismatch):
        verify_consistency(m, n, proof, merkle_root(changed[:m]), tree.root)
    i = data.draw(st.integers(0, len(proof) - 1))
    flipped = list(proof)
    flipped[i] = bytes([flipped[i][0] ^ 1]) + flipped[i][1:]
    with pytest.raises((RootMismatch, EncodingError)):
        verify_consistency(m, n, flipped, tree.root_at(m), tree.root)


@settings(max_examples=300, deadline=None)
@given(
    a=st.integers(-3, 70),
    b=st.integers(-3, 70),
    hashes=st.lists(st.binary(min_size=0, max_size=34), max_size=9),
    r1=st.binary(max_size=34),
    r2=st.binary(max_size=34),
)
def test_property_verification_of_arbitrary_input_only_ever_raises_contract_errors(
    a: int, b: int, hashes: list[bytes], r1: bytes, r2: bytes
) -> None:
    from contracts import ContractError

    for check in (
        lambda: verify_inclusion(r1, a, b, hashes, r2),
        lambda: verify_consistency(a, b, hashes, r1, r2),
        lambda: consistency_roots(a, b, hashes),
    ):
        try:
            check()
        except ContractError:
            continue
        # Accepted: then every hash given had the right length.
        assert all(len(h) == 32 for h in hashes)


# --------------------------------------------------------------------------- incremental roots


def test_frontier_root_is_the_rfc_root_after_every_append_for_sizes_0_to_300() -> None:
    leaves = [f"leaf {i}".encode() for i in range(300)]
    frontier = MerkleFrontier()
    assert frontier.root == EMPTY_ROOT == reference_mth([])
    for n in range(1, len(leaves) + 1):
        frontier.append([leaves[n - 1]])
        assert frontier.size == n
        assert frontier.root == merkle_root(leaves[:n]) == reference_mth(leaves[:n]), n


def test_ct_vectors_roots_of_every_prefix_from_the_frontier() -> None:
    frontier = MerkleFrontier()
    for n, root in enumerate(CT["roots"], start=1):
        frontier.append_hashes([CT_HASHES[n - 1]])
        assert frontier.root.hex() == root


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.lists(st.binary(max_size=40), max_size=40), min_size=1, max_size=12),
)
def test_property_frontier_after_random_batches_of_appends_is_the_from_scratch_root(
    batches: list[list[bytes]],
) -> None:
    frontier = MerkleFrontier()
    seen: list[bytes] = []
    for batch in batches:
        frontier.append(batch)
        seen += batch
        assert frontier.size == len(seen)
        assert frontier.root == merkle_root(seen)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.binary(min_size=1, max_size=30), min_size=1, max_size=60, unique=True),
    st.lists(st.tuples(st.integers(0, 59), st.integers(0, 59), st.booleans()), max_size=12),
)
def test_property_fold_roots_equal_merkle_root_for_extensions_and_anything_else(
    pool: list[bytes], asks: list[tuple[int, int, bool]]
) -> None:
    # cumulative folds (each extends the last), interleaved with unrelated
    # leaf lists, shorter prefixes and a changed leaf inside a known prefix
    roots = FoldRoots(capacity=3)
    grown: list[bytes] = []
    for a, b, changed in asks:
        grown += pool[: a % 5 + 1]
        assert roots.root(grown) == merkle_root(grown)
        other = pool[min(a, b) : max(a, b) + 1]
        if changed and len(other) > 1:
            other = [other[0], other[1] + b"!", *other[2:]]
        assert roots.root(other) == merkle_root(other)
        assert roots.root(grown[: max(1, len(grown) // 2)]) == merkle_root(
            grown[: max(1, len(grown) // 2)]
        )
    assert roots.root([]) == EMPTY_ROOT


def test_fold_roots_hash_only_the_new_leaves_of_an_extended_fold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import contracts.merkle as merkle

    hashed: list[int] = []
    original = merkle.leaf_hashes

    def counting(leaves: Any) -> list[bytes]:
        items = list(leaves)
        hashed.append(len(items))
        return original(items)

    monkeypatch.setattr(merkle, "leaf_hashes", counting)
    roots = FoldRoots()
    leaves = [f"hop {i}".encode() for i in range(40)]
    assert roots.root(leaves[:25]) == merkle_root(leaves[:25])
    assert roots.root(leaves) == merkle_root(leaves)
    changed = [*leaves[:10], b"other", *leaves[11:]]
    assert roots.root(changed) == merkle_root(changed)
    assert hashed == [25, 15, 40]  # from scratch, the tail, from scratch (prefix differs)
    with pytest.raises(ValueError, match="capacity"):
        FoldRoots(capacity=0)


def test_fold_roots_stay_within_their_leaf_budget_and_stay_right() -> None:
    roots = FoldRoots(capacity=100, max_leaves=50)
    values = [[f"v{v} hop {i}".encode() for i in range(30)] for v in range(4)]
    for n in (10, 20, 30):
        for leaves in values:
            assert roots.root(leaves[:n]) == merkle_root(leaves[:n])
            assert roots._last.weight <= 50
            assert roots._last.weight == sum(len(kept) for _, (kept, _) in roots._last.items())
    too_long = [f"x{i}".encode() for i in range(51)]
    assert roots.root(too_long) == merkle_root(too_long)
    assert too_long[0] not in roots._last


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.binary(min_size=0, max_size=30), min_size=1, max_size=40),
    st.lists(st.tuples(st.integers(0, 39), st.integers(0, 39), st.integers(0, 3)), max_size=12),
)
def test_property_known_roots_answer_exactly_whether_leaves_reproduce_the_root(
    pool: list[bytes], asks: list[tuple[int, int, int]]
) -> None:
    # leaves seen before, the same leaves with one byte changed, a leaf moved
    # across a boundary (same concatenation, other leaves), one dropped, and
    # other roots: always merkle_root(leaves) == root, never more
    known = KnownRoots(capacity=3, max_bytes=200)
    for a, b, how in asks:
        a, b = a % len(pool), b % len(pool)
        leaves = pool[min(a, b) : max(a, b) + 1]
        root = merkle_root(leaves)
        assert known.reproduces(leaves, root)
        assert known.reproduces(list(leaves), root)  # again, from memory
        other = list(leaves)
        if how == 0:
            other[-1] += b"!"
        elif how == 1 and len(other) > 1 and other[0]:
            other[:2] = [other[0][:-1], other[0][-1:] + other[1]]
        elif how == 2:
            other = other[:-1]
        else:
            other = [*other, b""]
        assert known.reproduces(other, root) == (merkle_root(other) == root)
        assert known.reproduces(leaves, root)
        assert not known.reproduces(leaves, merkle_root(other)) or merkle_root(other) == root
        assert len(known) <= 3
        assert known._known.weight <= 200


def test_known_roots_compare_leaves_seen_before_instead_of_hashing_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import contracts.merkle as merkle

    hashed: list[int] = []
    original = merkle.merkle_root

    def counting(leaves: Any) -> bytes:
        items = list(leaves)
        hashed.append(len(items))
        return original(items)

    monkeypatch.setattr(merkle, "merkle_root", counting)
    known = KnownRoots()
    leaves = [f"hop {i}".encode() for i in range(12)]
    root = original(leaves)
    assert known.reproduces(leaves, root)
    assert known.reproduces([bytes(x) for x in leaves], root)  # equal bytes, new objects
    assert known.reproduces(tuple(leaves), root)
    changed = [*leaves[:5], b"hop 5!", *leaves[6:]]
    assert not known.reproduces(changed, root)
    assert known.reproduces(leaves, root)  # a failed check forgets nothing
    assert hashed == [12, 12]  # the first sight and the changed leaves only
    with pytest.raises(ValueError, match="capacity"):
        KnownRoots(capacity=0)


def test_known_roots_stay_within_their_budget_and_stay_right() -> None:
    known = KnownRoots(capacity=100, max_bytes=100)
    folds = [[f"v{v} hop {i}".encode() for i in range(4)] for v in range(6)]  # 32 bytes each
    for leaves in folds * 2:
        assert known.reproduces(leaves, merkle_root(leaves))
        assert known._known.weight <= 100
        assert known._known.weight == sum(size for _, (_, size) in known._known.items())
    big = [b"x" * 60, b"y" * 60]
    assert known.reproduces(big, merkle_root(big))
    assert merkle_root(big) not in known._known  # checked, not remembered
    assert len(known) == 100 // 32  # the newest folds that fit


def test_known_roots_never_keep_a_buffer_its_owner_can_change() -> None:
    """Leaves given as a ``bytearray`` are checked, not remembered: changed afterwards
    by their owner, they are hashed again and no longer reproduce the root."""
    known = KnownRoots()
    buffer = bytearray(b"hop-0")
    mutable: list[Any] = [buffer, b"hop-1"]  # typed as bytes, as a careless caller might
    root = merkle_root([b"hop-0", b"hop-1"])
    assert known.reproduces(mutable, root)
    buffer[0] = ord("H")  # the same object, other bytes
    assert not known.reproduces(mutable, root)
    assert known.reproduces([b"hop-0", b"hop-1"], root)
