"""The verified demand path under a signed head: lazy where nothing rides on a signature.

In-process nodes (the NodeCore code the gRPC server runs), Ed25519 calls
counted at the one place every signature passes through:

* a faithful rehydration costs no signature and no verification on either
  side (the unsigned ask, design revision 3); a signed demand exactly two
  signatures (the holder's demand, the origin's receipt) and no verification;
* a serve whose bytes miss the root makes the holder verify the origin's
  receipt — ``bad_data`` is built only from a verified signed receipt, and
  the record verifies standalone;
* the origin answers a bearer demand without its signature, but a demand
  dated ahead of its clock (it raises, on disk, a replay floor of the holder
  it names) is verified: a forged one cannot move an honest holder's floor.
"""

from __future__ import annotations

from typing import Any

import pytest

from contracts.batch import DEMAND_BATCH_TYPE, decode_receipt_batch, demand_payload
from contracts.envelope import sign_envelope
from contracts.errors import BadSignature
from contracts.evidence import EvidenceKind, verify_evidence
from contracts.heads import FoldProof, HeadCache, VerifiedFold
from contracts.identity import Identity
from contracts.serve import build_demand
from contracts.signed import open_statement
from contracts.statements import Receipt, ReceiptStatus
from nodes.client import HeldFold, Holder, Outcome
from nodes.faults import FaultMode, Tamper
from nodes.services import FUTURE_NONCES_FILENAME, NodeCore
from tests.nodes.rpc_support import MemCluster, audit, ed25519_counts, hop_json, single

#: The shared ``cluster`` fixture (tests/nodes/conftest.py) with no re-ask: a
#: failed ask is judged at once.
CLUSTER_REASKS = 0


async def _head_fold(core: NodeCore, ref: str = "v", hops: int = 5) -> HeldFold:
    """One fold committed under a signed head, verified once as a holder would."""
    _, seqs = await core.append([hop_json(1 + i) for i in range(hops)])
    out = await core.commit_compaction([(ref, list(seqs), b"")])
    fold: VerifiedFold = HeadCache().verify_fold(
        FoldProof.from_bytes(out.fold_proofs[0]), now=core.now_ms(), head=out.head
    )
    return HeldFold(fold.commitment, fold.obligation, out.fold_proofs[0], out.head, fold)


async def test_a_hundred_faithful_rehydrations_sign_and_verify_nothing_in_either_node(
    cluster: MemCluster,
) -> None:
    origin = await cluster.add("origin")
    node = await cluster.add("holder")
    # Hop cache off: every decision asks the origin again.
    holder = Holder(node.identity, node.transport, cache=False, reasks=0)
    held = await _head_fold(origin)
    with ed25519_counts() as counts:  # both nodes run in this process
        for _ in range(100):
            report = audit(await holder.rehydrate("v", [held]), cluster.correct_ids())
            assert single(report).outcome is Outcome.SERVED
            assert len(report.hops) == 5
    # Design revision 3: the unsigned ask is answered unsigned and the hops reproduce
    # the root under the verified head; revision 2 made 200 (a demand and a receipt each).
    assert counts == {"sign": 0, "verify": 0}
    assert holder.unsigned_asks == 100


async def test_a_hundred_signed_demands_cost_two_signatures_each_and_no_verification(
    cluster: MemCluster,
) -> None:
    origin = await cluster.add("origin")
    node = await cluster.add("holder")
    # The signed path every failed unsigned ask falls back to, on its own.
    holder = Holder(node.identity, node.transport, cache=False, reasks=0, unsigned_first=False)
    held = await _head_fold(origin)
    with ed25519_counts() as counts:
        for _ in range(100):
            report = await holder.rehydrate("v", [held])
            assert single(report).outcome is Outcome.SERVED
            assert len(report.hops) == 5
    # Per 100 demands: 200 signatures (100 demands + 100 receipts), 0 verified;
    # before heads and lazy verification: 200 made and 200 verified.
    assert counts == {"sign": 200, "verify": 0}


async def test_bytes_that_miss_the_root_are_judged_on_the_verified_signed_receipt(
    cluster: MemCluster,
) -> None:
    origin = await cluster.add("origin", FaultMode.TAMPER)
    holder = await cluster.add("holder")
    held = await _head_fold(origin)
    with ed25519_counts() as counts:
        report = audit(await holder.holder.rehydrate("v", [held]), cluster.correct_ids())
    outcome = single(report)
    assert outcome.outcome is Outcome.BAD_DATA, outcome.detail
    assert counts["verify"] >= 1  # the receipt's signature decided, so it was checked
    verdict = verify_evidence(outcome.evidence, now=origin.now_ms())
    assert verdict.kind is EvidenceKind.BAD_DATA
    assert verdict.accused == origin.node_id


def _forged(victim: Identity, attacker: Identity, held: HeldFold, at: int) -> bytes:
    """A demand naming ``victim`` as its holder, signed by ``attacker``."""
    genuine = build_demand(victim, held.obligation, now=at).statement
    envelope = sign_envelope(attacker, DEMAND_BATCH_TYPE, demand_payload(genuine))
    return envelope.to_bytes()


async def test_a_forged_demand_dated_ahead_cannot_move_an_honest_holders_floor(
    cluster: MemCluster,
) -> None:
    origin = await cluster.add("origin")
    held = await _head_fold(origin)
    victim, attacker = Identity.generate(), Identity.generate()
    ahead = origin.now_ms() + 5_000  # inside the skew window, beyond the slack
    future_file = origin.config.data_dir / FUTURE_NONCES_FILENAME
    before = future_file.read_bytes() if future_file.exists() else b""
    for _ in range(65):
        with pytest.raises(BadSignature):
            await origin.answer_demands([_forged(victim, attacker, held, ahead)])
    assert (future_file.read_bytes() if future_file.exists() else b"") == before
    # The victim's own demand dated ahead is still answered.
    honest = build_demand(victim, held.obligation, now=ahead).to_bytes()
    (answer,) = await origin.answer_demands([honest])
    receipt = open_statement(answer.receipt, Receipt, signer=origin.node_id).statement
    assert receipt.status is ReceiptStatus.SERVED
    # A forged demand dated now is a bearer demand: served, nothing charged to anyone.
    (answer,) = await origin.answer_demands([_forged(victim, attacker, held, origin.now_ms())])
    assert open_statement(answer.receipt, Receipt).statement.status is ReceiptStatus.SERVED
    assert (future_file.read_bytes() if future_file.exists() else b"") != before


async def test_first_demand_after_a_compaction_is_served_without_reading_the_store(
    cluster: MemCluster,
) -> None:
    origin = await cluster.add("origin")
    node = await cluster.add("holder")
    holder = Holder(node.identity, node.transport, cache=False, reasks=0)
    held = await _head_fold(origin, hops=7)
    reads: list[str] = []
    resolve = origin.store.resolve

    async def counted(digest: str, *, now_ms: int) -> object:
        reads.append(digest)
        return await resolve(digest, now_ms=now_ms)

    origin.store.resolve = counted  # type: ignore[method-assign,assignment]
    report = audit(await holder.rehydrate("v", [held]), cluster.correct_ids())
    assert single(report).outcome is Outcome.SERVED
    # The bytes the head's root was signed over, exactly as stored and in order.
    stored = await origin.store.resolve(held.commitment.digest, now_ms=origin.now_ms())
    assert [h.hop for h in report.hops] == list(stored.leaves)
    assert reads == [held.commitment.digest]  # only the check above read the store


async def test_a_pending_compaction_is_not_served_from_memory_before_its_hops_land(
    cluster: MemCluster,
) -> None:
    origin = await cluster.add("origin", provenance_pending=True)
    node = await cluster.add("holder")
    holder = Holder(node.identity, node.transport, cache=False, reasks=0)
    held = await _head_fold(origin, hops=4)
    pending = audit(await holder.rehydrate("v", [held]), cluster.correct_ids())
    assert single(pending).outcome is Outcome.PENDING
    assert await origin.store.reconcile(now_ms=origin.now_ms()) >= 1
    served = audit(await holder.rehydrate("v", [held]), cluster.correct_ids())
    assert single(served).outcome is Outcome.SERVED
    assert len(served.hops) == 4


async def test_folds_served_again_in_the_same_bytes_are_compared_not_hashed_again(
    cluster: MemCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    import contracts.lazy
    import contracts.merkle

    origin = await cluster.add("origin")
    node = await cluster.add("holder")
    holder = Holder(node.identity, node.transport, cache=False, reasks=0)
    alone = await _head_fold(origin, "v", hops=5)
    pair = [await _head_fold(origin, "w", hops=3), await _head_fold(origin, "x", hops=4)]
    hashed: list[int] = []
    original = contracts.merkle.merkle_root

    def counting(leaves: Any) -> bytes:
        items = list(leaves)
        hashed.append(len(items))
        return original(items)

    monkeypatch.setattr(contracts.merkle, "merkle_root", counting)
    monkeypatch.setattr(contracts.lazy, "merkle_root", counting)
    for _ in range(3):  # one fold on its own demand, two under one demand batch
        for value, folds in (("v", [alone]), ("w", pair)):
            report = audit(await holder.rehydrate(value, folds), cluster.correct_ids())
            assert single(report).outcome is Outcome.SERVED
    assert sorted(hashed) == [3, 4, 5]  # each fold's bytes hashed the first time only
    # The same folds served in other bytes are hashed and judged as ever: bad_data.
    origin.behaviour = Tamper(origin.identity)
    correct = set(cluster.correct_ids()) - {origin.node_id}  # a tampering origin from here on
    for value, folds in (("v", [alone]), ("w", pair)):
        outcome = single(audit(await holder.rehydrate(value, folds), correct))
        assert outcome.outcome is Outcome.BAD_DATA, outcome.detail
        verdict = verify_evidence(outcome.evidence, now=origin.now_ms())
        assert (verdict.kind, verdict.accused) == (EvidenceKind.BAD_DATA, origin.node_id)


async def test_a_faithful_receipt_for_one_fold_is_recognised_by_its_bytes_not_parsed(
    cluster: MemCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    import contracts.lazy
    import contracts.signed
    import nodes.client

    origin = await cluster.add("origin")
    node = await cluster.add("holder")
    holder = Holder(node.identity, node.transport, cache=False, reasks=0, unsigned_first=False)
    held = await _head_fold(origin, hops=5)
    parsed: list[object] = []
    original = contracts.signed.parse_statement

    def counting(data: Any, *args: Any, **kwargs: Any) -> Any:
        parsed.append(data)
        return original(data, *args, **kwargs)

    def decoding(payload: bytes) -> Any:
        parsed.append(payload)
        return decode_receipt_batch(payload)

    monkeypatch.setattr(contracts.lazy, "parse_statement", counting)
    monkeypatch.setattr(nodes.client, "decode_receipt_batch", decoding)
    with ed25519_counts() as counts:
        for _ in range(3):
            report = audit(await holder.rehydrate("v", [held]), cluster.correct_ids())
            assert single(report).outcome is Outcome.SERVED
            assert [h.leaf_index for h in report.hops] == [0, 1, 2, 3, 4]
    assert parsed == []
    assert counts == {"sign": 6, "verify": 0}
    # A receipt other than the faithful one is parsed and judged as before.
    origin.behaviour = Tamper(origin.identity)
    correct = set(cluster.correct_ids()) - {origin.node_id}  # a tampering origin from here on
    outcome = single(audit(await holder.rehydrate("v", [held]), correct))
    assert outcome.outcome is Outcome.BAD_DATA, outcome.detail
    assert len(parsed) == 1
