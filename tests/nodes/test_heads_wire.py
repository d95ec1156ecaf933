"""Signed tree heads on the wire: one signature per compaction, lazy holder, head-cited evidence.

In-process nodes over the in-memory transport (the NodeCore code the gRPC
server runs). An origin commits a compaction of several values under ONE
head; a value is delivered with its fold proof and the head — a C2SP
checkpoint note, carried byte for byte — or only the head's digest once the
receiver acknowledged that head (an OK answer to a delivery naming it); the holder
verifies the head once and judges faithful serves with no signature
verification at all; every fault still yields one verified record naming the
faulty origin.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import contracts.heads as heads_mod
from contracts.errors import BadSignature, EncodingError, RootMismatch, VerificationError
from contracts.evidence import EvidenceKind, verify_evidence
from contracts.head_note import SignedHead, open_head
from contracts.heads import FoldProof, VerifiedFold
from contracts.signed import open_statement, parse_statement
from contracts.statements import DeliveryReceipt
from nodes._pb.provnet.v1 import common_pb2, deliver_pb2
from nodes.client import Outcome
from nodes.faults import FaultMode
from nodes.messages import Acknowledgement, Delivery
from nodes.services import HeldValue, NodeCore
from nodes.transport import CallFailed
from tests.nodes.rpc_support import MemCluster, audit, ed25519_counts, hop_json, single


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
    cluster: MemCluster,
    origin: str,
    holder: str,
    ref: str,
    proof: bytes,
    head: bytes,
    *,
    signed: bool = False,
) -> tuple[HeldValue, Acknowledgement]:
    core = cluster.nodes[origin]
    delivery = Delivery(ref, b"value " + ref.encode(), (), (), core.node_id, (proof,), (head,))
    ack, _ = await core.send(cluster.address(holder), delivery, 1.0, signed=signed)
    return cluster.nodes[holder].held(ref), ack


async def test_one_signature_per_compaction_however_many_values(cluster: MemCluster) -> None:
    origin = await cluster.add("origin")
    refs = [f"v{i}" for i in range(6)]
    with ed25519_counts() as counts:
        head, proofs = await _compaction(origin, refs)
    assert counts["sign"] == 1
    h = open_head(head, origin=origin.node_id).statement
    assert h.size == len(refs)
    assert h.endpoints == (cluster.address("origin"),)
    assert {FoldProof.from_bytes(p).head for p in proofs} == {open_head(head).digest}


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
    # Neither side signs or verifies: the holder asks unsigned, the origin answers
    # unsigned, and the served bytes reproduce the root under the head the holder
    # verified at delivery (design revision 3).
    assert counts == {"sign": 0, "verify": 0}


async def test_a_head_the_receiver_acknowledged_travels_as_its_digest(
    cluster: MemCluster,
) -> None:
    origin = await cluster.add("origin")
    holder = await cluster.add("holder")
    head, proofs = await _compaction(origin, ["a", "b"])
    head_digest = open_head(head).digest
    _, ack = await _deliver(cluster, "origin", "holder", "a", proofs[0], head, signed=True)
    receipt = open_statement(ack.receipt, DeliveryReceipt, signer=holder.node_id)
    assert receipt.statement.obligations == (head_digest,)  # a signed receipt names the head
    sent: list[Delivery] = []
    asked: list[bool] = []
    real = origin.transport.deliver

    async def spy(
        address: str, delivery: Delivery, timeout: float, signed: bool = False
    ) -> Acknowledgement:
        sent.append(delivery)
        asked.append(signed)
        return await real(address, delivery, timeout, signed)

    origin.transport.deliver = spy  # type: ignore[method-assign]
    checks = holder.heads.signature_checks
    held, ack = await _deliver(cluster, "origin", "holder", "b", proofs[1], head)
    assert sent[-1].heads == ()  # only the digest, inside the fold proof
    assert asked == [False]
    assert ack.receipt == b""  # no receipt asked, none signed
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
        h0 = open_head(head0).statement
        h1 = open_head(head1).statement
        assert (h0.seq, h1.seq) == (0, 1)
        assert h1.log_root != h0.log_root
    finally:
        await again.close()


def test_a_delivery_carries_its_head_notes_and_fold_proofs_verbatim() -> None:
    """Heads and fold proofs cross protobuf as the very bytes signed and hashed; a
    tampered note fails its signature, a tampered proof its root, not a rebuild."""
    from contracts.heads import verify_fold
    from nodes import wire
    from tests.nodes.wire_vectors import ORIGIN, lone_first_delivery

    first, later = lone_first_delivery()
    value = wire.delivered_value(first)
    assert list(value.heads) == list(first.heads)  # verbatim
    assert list(value.fold_proofs) == list(first.fold_proofs)  # verbatim
    assert wire.delivery_from_pb(value, first.sender) == first
    held = wire.delivered_value(later)
    assert not held.heads
    assert list(held.fold_proofs) == list(later.fold_proofs)
    assert wire.delivery_from_pb(held, later.sender) == later
    # a changed byte of the note travels as sent and fails verification at the receiver
    tampered = common_pb2.DeliveredValue()
    tampered.CopyFrom(value)
    tampered.heads[0] = first.heads[0].replace(b"serve 1764503600000", b"serve 1764503600001")
    got = wire.delivery_from_pb(tampered, first.sender)
    assert got.heads == (tampered.heads[0],)
    with pytest.raises(BadSignature):
        open_head(got.heads[0], origin=ORIGIN.node_id)
    # a changed byte of the proof's path travels as sent and misses the head's root
    tampered.CopyFrom(value)
    proof = first.fold_proofs[0]
    tampered.fold_proofs[0] = proof[:-1] + bytes([proof[-1] ^ 1])
    got = wire.delivery_from_pb(tampered, first.sender)
    assert got.fold_proofs == (tampered.fold_proofs[0],)
    with pytest.raises(RootMismatch):
        verify_fold(got.fold_proofs[0], open_head(first.heads[0]))
    bad = common_pb2.DeliveredValue()
    # a head without the blank line of a signed note travels as sent and is refused
    # as malformed when the receiver opens it
    bad.CopyFrom(value)
    bad.heads[0] = b"not a note"
    with pytest.raises(EncodingError, match="head"):
        open_head(wire.delivery_from_pb(bad).heads[0])


def _statement_fields(msg: common_pb2.DeliveredValue) -> int:
    """Bytes of a DeliveredValue's statement fields (fold proofs, heads) with framing."""
    bare = common_pb2.DeliveredValue()
    bare.CopyFrom(msg)
    del bare.heads[:], bare.fold_proofs[:]
    return msg.ByteSize() - bare.ByteSize()


def test_a_lone_first_delivery_of_a_value_from_a_20_value_compaction_in_bytes() -> None:
    """The figure docs/contracts.md quotes: a value folded twice (its record chains to the
    first fold), its compaction covering 20 values (a 5-hash audit path): its statements
    on first delivery — by its origin or forwarded, the same head note — and once held."""
    from nodes import wire
    from tests.nodes.wire_vectors import forwarded_first_delivery, lone_first_delivery

    first, later = lone_first_delivery()
    forwarded = forwarded_first_delivery()
    sizes = [wire.delivery_statement_size(d) for d in (first, forwarded, later)]
    note = len(first.heads[0])
    # the head is its note plus the field's framing (a tag and a 2-byte length), and
    # the fold proof is the same bytes either way (it names its head by digest)
    assert sizes[0] - sizes[2] == note + 3
    assert sizes[1] == sizes[0]  # forwarding adds nothing: the note is the note
    assert (note, sizes) == (454, [739, 739, 282])
    for delivery in (first, later, forwarded):
        request = wire.deliver_request(delivery)
        assert _statement_fields(request.value) + 1 in (sizes[0], sizes[2])
        assert wire.delivery_from_pb(request.value, request.sender) == delivery


def _vector(version: int, *, held: bool = False, forwarded: bool = False) -> bytes:
    from tests.nodes.wire_vectors import VECTOR_DIR, vector_name

    path = VECTOR_DIR / vector_name(version, held=held, forwarded=forwarded)
    if not path.is_file():
        pytest.fail(f"wire vector {path} is missing (see tests/nodes/wire_vectors.py)")
    return path.read_bytes()


def test_wire_vectors_decode_to_their_delivery_and_rebuild_byte_for_byte() -> None:
    from nodes import wire
    from tests.nodes.wire_vectors import (
        ORIGIN,
        VECTOR_DIR,
        build_wire_vectors,
        forwarded_first_delivery,
        lone_first_delivery,
    )

    first, later = lone_first_delivery()
    built = build_wire_vectors()
    # one wire version: the files on disk are exactly the current version's
    assert sorted(p.name for p in VECTOR_DIR.glob("*.binpb")) == sorted(built)
    for name, data in built.items():
        kind = {"held": "held" in name, "forwarded": "forwarded" in name}
        assert data == _vector(wire.WIRE_VERSION, **kind), name
    for kind, expected in (
        ({}, first),
        ({"held": True}, later),
        ({"forwarded": True}, forwarded_first_delivery()),
    ):
        request = deliver_pb2.DeliverRequest.FromString(_vector(wire.WIRE_VERSION, **kind))
        assert wire.delivery_from_pb(request.value, request.sender) == expected
    relayed = deliver_pb2.DeliverRequest.FromString(_vector(wire.WIRE_VERSION, forwarded=True))
    assert list(relayed.value.heads) == list(first.heads)  # the very note the origin signed
    open_head(relayed.value.heads[0], origin=ORIGIN.node_id)


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

    def counting(proof: FoldProof, signed: SignedHead) -> VerifiedFold:
        proved[0] += 1
        return real(proof, signed)

    monkeypatch.setattr("nodes.holding.verify_fold", counting)
    first, _ = await _deliver(cluster, "origin", "holder", "a", proofs[0], head)
    again, _ = await _deliver(cluster, "origin", "holder", "a", proofs[0], head)
    assert proved[0] == 1
    assert again.folds == first.folds
    serve_until = open_head(head).statement.serve_until
    holder.clock = lambda: serve_until / 1000.0 + 1.0
    with pytest.raises(CallFailed, match="expired"):
        await _deliver(cluster, "origin", "holder", "a", proofs[0], head)


_EPOCH = st.text(
    st.characters(blacklist_categories=("Cs", "Cc", "Zs", "Zl", "Zp"), blacklist_characters="/+"),
    min_size=1,
    max_size=40,
)
_ENDPOINT = st.text(
    st.characters(blacklist_categories=("Cs", "Cc", "Zs", "Zl", "Zp")), min_size=1, max_size=40
)


@settings(max_examples=60, deadline=None)
@given(
    epoch=_EPOCH,
    endpoints=st.lists(_ENDPOINT, max_size=3),
    issued_at=st.integers(0, 2**42),
    serve_until=st.integers(0, 2**42),
    compactions=st.integers(1, 2),
)
def test_every_head_crosses_the_wire_byte_exact_whoever_sends_it(
    epoch: str, endpoints: list[str], issued_at: int, serve_until: int, compactions: int
) -> None:
    from contracts.heads import FoldInput, HeadLog
    from contracts.identity import Identity
    from nodes import wire

    me = Identity.from_seed(bytes([9]) * 32)
    if any(c.isspace() for c in epoch + "".join(endpoints)):
        return  # (a head's epoch and endpoints hold no white space)
    log = HeadLog(me, epoch)
    for seq in range(compactions):
        compaction = log.compact(
            [FoldInput("a", seq, [b"x"])],
            serve_until=serve_until,
            deadline_ms=1,
            endpoints=endpoints,
            issued_at=issued_at,
        )
    head, proof = compaction.head.to_bytes(), compaction.proofs["a"].to_bytes()
    for sender in ("", me.node_id, "ab" * 32):
        delivery = Delivery("a", b"v", (), (), sender, (proof,), (head,))
        request = wire.deliver_request(delivery)
        got = wire.delivery_from_pb(request.value, request.sender)
        assert got == delivery
        assert open_head(got.heads[0], origin=me.node_id).statement == compaction.head.statement


async def test_a_relay_forwards_the_origins_head_note_unchanged_over_grpc(
    tmp_path: Path,
) -> None:
    """Origin → relay → holder over gRPC: the holder gets the note the origin signed,
    byte for byte; once it acknowledged the head, the relay sends only its digest; a
    holder that lost its heads answers NOT_FOUND and gets the head again."""
    from tests.nodes.rpc_support import grpc_node, stop_all

    origin = await grpc_node(tmp_path, "origin")
    relay = await grpc_node(tmp_path, "relay")
    holder = await grpc_node(tmp_path, "holder")
    nodes = (origin, relay, holder)
    try:
        sent: list[Delivery] = []
        real = relay.core.transport.deliver

        async def spy(
            address: str, delivery: Delivery, timeout: float, signed: bool = False
        ) -> Acknowledgement:
            sent.append(delivery)
            return await real(address, delivery, timeout, signed)

        relay.core.transport.deliver = spy  # type: ignore[method-assign]
        head, proofs = await _compaction(origin.core, ["a", "b"])
        for ref, proof in zip(("a", "b"), proofs, strict=True):
            delivery = Delivery(ref, b"v", (), (), origin.node_id, (proof,), (head,))
            ack, _ = await origin.core.send(relay.address, delivery, 5.0)
            assert ack.receipt == b""  # over gRPC too: none asked for, none signed
            assert ack.received_at > 0
        receipt = await relay.core.forward("a", holder.address)
        assert parse_statement(receipt, DeliveryReceipt).statement.sender == relay.node_id
        assert holder.core.held("a").delivery.heads == (head,)  # byte-exact, as signed
        await relay.core.forward("b", holder.address)
        assert [len(d.heads) for d in sent] == [1, 0]  # acknowledged: the digest only
        holder.core.heads = type(holder.core.heads)()
        await relay.core.forward("a", holder.address)
        assert [len(d.heads) for d in sent[2:]] == [0, 1]
        assert holder.core.held("a").delivery.heads == (head,)
    finally:
        await stop_all(nodes)


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=300), at=st.integers(0, 800), cut=st.booleans())
def test_any_delivered_bytes_decode_to_the_signed_delivery_or_are_refused(
    data: bytes, at: int, cut: bool
) -> None:
    from nodes import wire
    from tests.nodes.wire_vectors import ORIGIN, lone_first_delivery

    delivery, _ = lone_first_delivery()
    request = wire.deliver_request(delivery)
    for field in ("heads", "fold_proofs"):
        msg = common_pb2.DeliveredValue()
        msg.CopyFrom(request.value)
        items = getattr(msg, field)
        good = items[0]
        i = min(at, len(good))
        items[0] = good[:i] + data + (b"" if cut else good[i + len(data) :])
        try:
            got = wire.delivery_from_pb(msg, request.sender)
        except EncodingError:
            continue
        # what decodes is a delivery whose head either is the signed one or fails
        try:
            head = open_head(got.heads[0], origin=ORIGIN.node_id)
        except (VerificationError, EncodingError):
            continue
        assert head.text == open_head(delivery.heads[0]).text
