"""An origin checks each fold proof of a compaction it just committed once."""

from __future__ import annotations

import pytest

from contracts.head_note import SignedHead, open_head
from contracts.heads import FoldProof, VerifiedFold, verify_fold
from tests.nodes.rpc_support import MemCluster, hop_json


async def test_a_committed_value_verifies_its_fold_once(
    cluster: MemCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    origin = await cluster.add("origin")
    folds: list[tuple[str, list[int], bytes]] = []
    for i, ref in enumerate(("a", "b", "c")):
        _, seqs = await origin.append([hop_json(10 * i + j) for j in range(3)])
        folds.append((ref, list(seqs), b"value " + ref.encode()))
    checked: list[bytes] = []

    def counting(proof: FoldProof, head: SignedHead) -> VerifiedFold:
        checked.append(proof.record)
        return verify_fold(proof, head)

    monkeypatch.setattr("nodes.origin_log.verify_fold", counting)
    out = await origin.commit_compaction(folds)
    assert len(checked) == len(folds) == len(set(checked))
    # the values are held under the head just signed
    assert {FoldProof.from_bytes(p).head for p in out.fold_proofs} == {open_head(out.head).digest}
    for ref, _, value in folds:
        assert origin.held(ref).delivery.value == value
