"""Signed tree heads on the wire: one signature per compaction, lazy holder, head-cited evidence.

In-process nodes over the in-memory transport (the NodeCore code the gRPC
server runs). An origin commits a compaction of several values under ONE
head; a value is delivered with its fold proof and the head (or only the
head's digest once the receiver acknowledged that head in a signed delivery
receipt); the holder verifies the head once and judges faithful serves with
no signature verification at all; every fault still yields one verified
record naming the faulty origin.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import contracts.heads as heads_mod
import contracts.identity as identity_mod
from contracts.errors import BadSignature, EncodingError
from contracts.evidence import EvidenceKind, verify_evidence
from contracts.heads import FoldProof, VerifiedFold
from contracts.signed import Signed, open_statement
from contracts.statements import DeliveryReceipt, Head
from nodes._pb.provnet.v1 import common_pb2
from nodes.client import Outcome
from nodes.faults import FaultMode
from nodes.messages import Delivery
from nodes.services import HeldValue, NodeCore
from nodes.transport import CallFailed
from tests.nodes.rpc_support import MemCluster, audit, hop_json, single


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[MemCluster]:
    mem = MemCluster(tmp_path, deadline_ms=300, reasks=1)
    try:
        yield mem
    finally:
        await mem.close()


@contextmanager
def ed25519_counts() -> Iterator[dict[str, int]]:
    """Count Ed25519 signatures made and verified (every one passes through these)."""
    counts = {"sign": 0, "verify": 0}
    cls = identity_mod.Identity
    pub = identity_mod.PublicKey
    orig_sign, orig_verify = cls.sign, pub.verify

    def sign(self: identity_mod.Identity, data: bytes) -> bytes:
        counts["sign"] += 1
        return orig_sign(self, data)

    def verify(self: identity_mod.PublicKey, signature: bytes, data: bytes) -> None:
        counts["verify"] += 1
        orig_verify(self, signature, data)

    cls.sign = sign  # type: ignore[method-assign]
    pub.verify = verify  # type: ignore[method-assign]
    try:
        yield counts
    finally:
        cls.sign = orig_sign  # type: ignore[method-assign]
        pub.verify = orig_verify  # type: ignore[method-assign]


async def _compaction(core: NodeCore, refs: list[str], hops: int = 4) -> tuple[bytes, list[bytes]]:
    folds: list[tuple[str, list[int], bytes]] = []
    step = 1
    for ref in refs:
        _, seqs = await core.append([hop_json(step + i) for i in range(hops)])
        folds.append((ref, list(seqs), b""))
        step += hops
    out = await core.commit_compaction(folds)
    return out.head, list(out.fold_proofs)


async def _deliver(
    cluster: MemCluster, origin: str, holder: str, ref: str, proof: bytes, head: bytes
) -> tuple[HeldValue, DeliveryReceipt]:
    core = cluster.nodes[origin]
    delivery = Delivery(ref, b"value " + ref.encode(), (), (), core.node_id, (proof,), (head,))
    _, receipt, _ = await core.send(cluster.address(holder), delivery, 1.0)
    return cluster.nodes[holder].held(ref), receipt.statement


async def test_one_signature_per_compaction_however_many_values(cluster: MemCluster) -> None:
    origin = await cluster.add("origin")
    refs = [f"v{i}" for i in range(6)]
    with ed25519_counts() as counts:
        head, proofs = await _compaction(origin, refs)
    assert counts["sign"] == 1
    h = open_statement(head, Head, signer=origin.node_id).statement
    assert h.size == len(refs)
    assert h.endpoints == (cluster.address("origin"),)
    assert {FoldProof.from_bytes(p).head for p in proofs} == {open_statement(head, Head).digest}


async def test_faithful_serve_costs_the_holder_no_signature_verification(
    cluster: MemCluster,
) -> None:
    origin = await cluster.add("origin")
    holder = await cluster.add("holder")
    head, proofs = await _compaction(origin, ["a", "b"])
    held, _ = await _deliver(cluster, "origin", "holder", "a", proofs[0], head)
    (fold,) = held.folds
    assert fold.fold is not None
    with ed25519_counts() as counts:
        report = audit(await holder.holder.rehydrate("a", list(held.folds)), cluster.correct_ids())
    outcome = single(report)
    assert outcome.outcome is Outcome.SERVED, outcome.detail
    assert [h.leaf_index for h in report.hops] == [0, 1, 2, 3]
    # Neither side verifies a signature: the holder's served bytes reproduce the
    # root under the head it verified at delivery, and the origin answers a
    # bearer demand for its own head without checking who signed it.
    assert counts["verify"] == 0
    assert counts["sign"] == 2  # demand + receipt


async def test_a_head_the_receiver_acknowledged_travels_as_its_digest(
    cluster: MemCluster,
) -> None:
    origin = await cluster.add("origin")
    holder = await cluster.add("holder")
    head, proofs = await _compaction(origin, ["a", "b"])
    head_digest = open_statement(head, Head).digest
    _, receipt = await _deliver(cluster, "origin", "holder", "a", proofs[0], head)
    assert receipt.obligations == (head_digest,)  # the receipt acknowledges the head
    sent: list[Delivery] = []
    real = origin.transport.deliver

    async def spy(address: str, delivery: Delivery, timeout: float) -> bytes:
        sent.append(delivery)
        return await real(address, delivery, timeout)

    origin.transport.deliver = spy  # type: ignore[method-assign]
    checks = holder.heads.signature_checks
    held, _ = await _deliver(cluster, "origin", "holder", "b", proofs[1], head)
    assert sent[-1].heads == ()  # only the digest, inside the fold proof
    assert holder.heads.signature_checks == checks
    assert held.folds[0].obligation.digest == head_digest
    # A receiver that lost the head asks for it (NOT_FOUND): sent again in full.
    holder.heads = type(holder.heads)()
    held, _ = await _deliver(cluster, "origin", "holder", "a", proofs[0], head)
    assert [len(d.heads) for d in sent[-2:]] == [0, 1]


async def _faulty(cluster: MemCluster, fault: FaultMode) -> tuple[Outcome, bytes, str]:
    origin = await cluster.add("origin", fault)
    holder = await cluster.add("holder")
    await cluster.add("witness")
    head, proofs = await _compaction(origin, ["a", "b"])
    held, _ = await _deliver(cluster, "origin", "holder", "a", proofs[0], head)
    report = audit(
        await holder.holder.rehydrate(
            "a", list(held.folds), witnesses=[cluster.address("witness")]
        ),
        cluster.correct_ids(),
    )
    outcome = single(report)
    return outcome.outcome, outcome.evidence, origin.node_id


@pytest.mark.parametrize(
    ("fault", "outcome", "kind"),
    [
        (FaultMode.TAMPER, Outcome.BAD_DATA, EvidenceKind.BAD_DATA),
        (FaultMode.REFUSE, Outcome.REFUSED, EvidenceKind.REFUSED),
        (FaultMode.EQUIVOCATE, Outcome.SPLIT_VIEW, EvidenceKind.SPLIT_VIEW),
        (FaultMode.DROP, Outcome.UNANSWERED, EvidenceKind.UNANSWERED),
    ],
)
async def test_fault_under_a_head_yields_verified_head_cited_evidence(
    cluster: MemCluster, fault: FaultMode, outcome: Outcome, kind: EvidenceKind
) -> None:
    got, evidence, accused = await _faulty(cluster, fault)
    assert got is outcome
    verdict = verify_evidence(evidence, now=cluster.nodes["holder"].now_ms())
    assert verdict.kind is kind
    assert verdict.accused == accused
    assert verdict.accuses


async def test_a_restarted_origin_rebuilds_its_log_of_heads(tmp_path: Path) -> None:
    first = MemCluster(tmp_path)
    origin = await first.add("origin")
    head0, _ = await _compaction(origin, ["a"])
    await first.close()
    again = MemCluster(tmp_path)
    try:
        origin = await again.add("origin")
        _, seqs = await origin.append([hop_json(100 + i) for i in range(3)])
        head1 = (await origin.commit_compaction([("a", list(seqs), b"")])).head
        h0 = open_statement(head0, Head).statement
        h1 = open_statement(head1, Head).statement
        assert (h0.seq, h1.seq) == (0, 1)
        assert h1.log_root != h0.log_root
    finally:
        await again.close()


async def test_heads_and_fold_proofs_cross_protobuf_as_parts_and_come_back_byte_exact(
    cluster: MemCluster,
) -> None:
    from nodes import wire

    origin = await cluster.add("origin")
    head, proofs = await _compaction(origin, ["a", "b", "c"])
    pb = wire.signed_head_to_pb(head)
    assert len(pb.signature) == 64
    # compact: the payload's fields in binary, rebuilt to the very bytes signed
    assert not pb.payload
    assert len(pb.fields.root) == len(pb.fields.origin) == 32
    assert wire.signed_head_from_pb(pb) == head
    # the payload as signed is still accepted
    signed_payload = open_statement(head, Head).envelope.payload
    legacy = common_pb2.SignedHead(payload=signed_payload, signature=pb.signature)
    assert wire.signed_head_from_pb(legacy) == head
    for proof in proofs:
        binary = wire.fold_proof_to_pb(proof, "a")
        assert len(binary.head) == 32
        assert not binary.record
        assert wire.fold_proof_from_pb(binary, "a") == proof
    # what a value adds on first delivery, and once the receiver holds the head
    first = Delivery("a", b"v", (), (), "", (proofs[0],), (head,))
    later = Delivery("a", b"v", (), (), "", (proofs[0],), ())
    compact = wire.delivered_value(first)
    # the proof names the head by position; the head's root is implied by the proof
    assert compact.fold_proofs[0].head_part == 1
    assert not compact.fold_proofs[0].head
    assert not compact.heads[0].fields.root
    assert wire.delivery_statement_size(later) < wire.delivery_statement_size(first) < 400
    assert wire.delivery_from_pb(compact) == first
    assert wire.delivery_from_pb(wire.delivered_value(later)) == later
    # a tampered field no longer verifies under the signature that travelled
    pb.fields.size += 1
    with pytest.raises(BadSignature):
        open_statement(wire.signed_head_from_pb(pb), Head)
    # a path that implies another root makes the head's signature fail
    bad = wire.delivered_value(first)
    bad.fold_proofs[0].path = bytes(32) + bad.fold_proofs[0].path[32:]
    with pytest.raises(BadSignature):
        open_statement(wire.delivery_from_pb(bad).heads[0], Head)
    # a proof naming a head part that was not sent is malformed
    bad = wire.delivered_value(later)
    bad.fold_proofs[0].head, bad.fold_proofs[0].head_part = b"", 2
    with pytest.raises(EncodingError):
        wire.delivery_from_pb(bad)


def test_a_lone_first_delivery_of_a_value_from_a_20_value_compaction_in_bytes() -> None:
    """The figure docs/contracts.md quotes: a value folded twice (its record chains to the
    first fold), its compaction covering 20 values (a 5-hash audit path)."""
    from contracts.heads import FoldInput, HeadLog
    from contracts.identity import Identity
    from nodes import wire

    log = HeadLog(Identity.from_seed(bytes(32)), "7-0123456789abcdef")
    refs = [f"C25-med-s0/v0.{40 + i}" for i in range(20)]
    terms = {
        "serve_until": 1_764_503_600_000,
        "deadline_ms": 2000,
        "endpoints": ["127.0.0.1:50051"],
        "issued_at": 1_764_500_000_000,
    }
    for fold_seq in (0, 1):
        hops = [b"hop %d %d" % (fold_seq, i) for i in range(25)]
        compaction = log.compact([FoldInput(r, fold_seq, hops) for r in refs], **terms)  # type: ignore[arg-type]
    head, proof = compaction.head.to_bytes(), compaction.proofs[refs[0]].to_bytes()
    first = Delivery(refs[0], b"v", (), (), "", (proof,), (head,))
    later = Delivery(refs[0], b"v", (), (), "", (proof,), ())
    sizes = (wire.delivery_statement_size(first), wire.delivery_statement_size(later))
    # Before: the payload bytes as signed, the record as leaf data, the head digest.
    signed = compaction.head.envelope
    p = compaction.proofs[refs[0]]
    legacy_proof = common_pb2.FoldProof(
        head=bytes.fromhex(p.head), index=p.index, path=b"".join(p.path), record=p.record
    )
    legacy_head = common_pb2.SignedHead(payload=signed.payload, signature=signed.signatures[0].sig)

    def framed(msg: common_pb2.FoldProof | common_pb2.SignedHead) -> int:
        return (
            common_pb2.DeliveredValue(heads=[msg]).ByteSize()
            if isinstance(msg, common_pb2.SignedHead)
            else common_pb2.DeliveredValue(fold_proofs=[msg]).ByteSize()
        )

    legacy = (framed(legacy_proof) + framed(legacy_head), framed(legacy_proof))
    # Now: the payload's fields in binary (raw hashes, no JSON keys), the record field by
    # field, the head's root and digest implied by the proof travelling with it.
    assert sizes == (440, 275)
    assert legacy == (865, 382)
    assert wire.delivery_from_pb(wire.delivered_value(first)) == first


async def test_compact_head_and_record_fields_of_the_wrong_shape_are_malformed(
    cluster: MemCluster,
) -> None:
    from nodes import wire

    origin = await cluster.add("origin")
    head, proofs = await _compaction(origin, ["a", "b"])
    good = wire.delivered_value(Delivery("a", b"v", (), (), "", (proofs[0],), (head,)))
    cases: list[tuple[str, common_pb2.DeliveredValue]] = []
    short_origin = common_pb2.DeliveredValue()
    short_origin.CopyFrom(good)
    short_origin.heads[0].fields.origin = b"\x01" * 31
    cases.append(("must be 32 bytes each", short_origin))
    both = common_pb2.DeliveredValue()
    both.CopyFrom(good)
    both.heads[0].payload = b"{}"
    cases.append(("payload and fields are exclusive", both))
    bad_prev = common_pb2.DeliveredValue()
    bad_prev.CopyFrom(good)
    bad_prev.fold_proofs[0].record_fields.prev = b"\x02" * 5
    cases.append(("prev 32 bytes or empty", bad_prev))
    orphan = common_pb2.DeliveredValue()
    orphan.CopyFrom(good)
    del orphan.fold_proofs[:]
    cases.append(("no fold proof names it", orphan))
    for message, msg in cases:
        with pytest.raises(EncodingError, match=message):
            wire.delivery_from_pb(msg)


async def test_a_fold_proof_delivered_again_is_not_proved_again_yet_its_head_still_expires(
    cluster: MemCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every decision re-delivers a value's fold proofs: a proof already proved
    # under a head the holder verified is kept, not parsed and hashed again,
    # but the head's serving term is still checked on every delivery.
    origin = await cluster.add("origin")
    holder = await cluster.add("holder")
    head, proofs = await _compaction(origin, ["a"])
    proved = [0]
    real = heads_mod.verify_fold

    def counting(proof: FoldProof, signed: Signed[Head]) -> VerifiedFold:
        proved[0] += 1
        return real(proof, signed)

    monkeypatch.setattr("nodes.services.verify_fold", counting)
    first, _ = await _deliver(cluster, "origin", "holder", "a", proofs[0], head)
    again, _ = await _deliver(cluster, "origin", "holder", "a", proofs[0], head)
    assert proved[0] == 1
    assert again.folds == first.folds
    serve_until = open_statement(head, Head).statement.serve_until
    holder.clock = lambda: serve_until / 1000.0 + 1.0
    with pytest.raises(CallFailed, match="expired"):
        await _deliver(cluster, "origin", "holder", "a", proofs[0], head)
