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

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import contracts.heads as heads_mod
from contracts.errors import BadSignature, EncodingError, VerificationError
from contracts.evidence import EvidenceKind, verify_evidence
from contracts.heads import FoldProof, VerifiedFold
from contracts.signed import Signed, open_statement
from contracts.statements import DeliveryReceipt, Head
from nodes._pb.provnet.v1 import common_pb2, deliver_pb2
from nodes.client import Outcome
from nodes.faults import FaultMode
from nodes.messages import Delivery
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
        packed_proof = wire.pack_fold_proof(binary)
        assert packed_proof is not None
        assert wire.unpack_fold_proof(packed_proof) == binary
    # what a value adds on first delivery, and once the receiver holds the head
    first = Delivery("a", b"v", (), (), "", (proofs[0],), (head,))
    later = Delivery("a", b"v", (), (), "", (proofs[0],), ())
    packed = wire.delivered_value(first)
    assert not packed.fold_proofs
    assert not packed.heads
    assert wire.delivery_from_pb(packed) == first
    compact = _messages(packed)
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
    bad = _messages(wire.delivered_value(first))
    bad.fold_proofs[0].path = bytes(32) + bad.fold_proofs[0].path[32:]
    with pytest.raises(BadSignature):
        open_statement(wire.delivery_from_pb(bad).heads[0], Head)
    # a proof naming a head part that was not sent is malformed
    bad = _messages(wire.delivered_value(later))
    bad.fold_proofs[0].head, bad.fold_proofs[0].head_part = b"", 2
    with pytest.raises(EncodingError):
        wire.delivery_from_pb(bad)


def _messages(value: common_pb2.DeliveredValue) -> common_pb2.DeliveredValue:
    """The same delivery with its packed fold proofs and heads (wire version 4) as the
    messages they carry (version 3): the form the tests below change field by field."""
    from nodes import wire

    assert value.packed_fold_proofs
    assert not value.fold_proofs
    assert not value.heads
    out = common_pb2.DeliveredValue()
    out.CopyFrom(value)
    del out.packed_fold_proofs[:], out.packed_heads[:]
    out.fold_proofs.extend(wire.unpack_fold_proof(p) for p in value.packed_fold_proofs)
    out.heads.extend(wire.unpack_head(h) for h in value.packed_heads)
    return out


#: Statement bytes a lone first delivery may add per value per origin (design revision 2).
FIRST_DELIVERY_LIMIT = 400


def _statement_fields(msg: common_pb2.DeliveredValue) -> int:
    """Bytes of a DeliveredValue's statement fields (fold proofs, heads) with framing."""
    bare = common_pb2.DeliveredValue()
    bare.CopyFrom(msg)
    del bare.fold_proofs[:], bare.heads[:], bare.packed_fold_proofs[:], bare.packed_heads[:]
    return msg.ByteSize() - bare.ByteSize()


def test_a_lone_first_delivery_of_a_value_from_a_20_value_compaction_in_bytes() -> None:
    """The figure docs/contracts.md quotes: a value folded twice (its record chains to the
    first fold), its compaction covering 20 values (a 5-hash audit path): at most 400 B of
    statements with the head on every first delivery — by its origin, forwarded to a
    receiver holding the origin's key, and forwarded on first contact, when the key itself
    travels — and a digest reference once held."""
    from nodes import wire
    from tests.nodes.wire_vectors import (
        ORIGIN,
        first_contact_delivery,
        forwarded_first_delivery,
        lone_first_delivery,
    )

    first, later = lone_first_delivery()
    forwarded = forwarded_first_delivery()  # origin named by key id
    first_contact = first_contact_delivery()  # origin's key in full
    for name, delivery in (
        ("lone", first),
        ("forwarded (key id)", forwarded),
        ("forwarded, first contact (full key)", first_contact),
    ):
        size = wire.delivery_statement_size(delivery)
        assert size <= FIRST_DELIVERY_LIMIT, f"{name} first delivery: {size} B of statements"
    sizes = (wire.delivery_statement_size(first), wire.delivery_statement_size(later))
    # wire version 4 (version 3: 387, 275)
    assert sizes == (360, 266)
    assert wire.delivery_statement_size(forwarded) == 369  # version 3: 397
    assert wire.delivery_statement_size(first_contact) == 393  # version 3: 421
    # once held, the head is a reference: no head travels, the fold proof names its digest
    held = _messages(wire.delivered_value(later))
    assert not held.heads
    named = FoldProof.from_bytes(later.fold_proofs[0]).head
    assert held.fold_proofs[0].head == bytes.fromhex(named)
    assert sizes[0] - sizes[1] == 94  # the head: signature, counters, terms, log root
    for delivery in (first, later, first_contact):
        request = wire.deliver_request(delivery)
        assert wire.delivery_from_pb(request.value, request.sender) == delivery
    request = wire.deliver_request(forwarded)
    assert wire.unpack_head(request.value.packed_heads[0]).fields.origin == (
        bytes.fromhex(ORIGIN.node_id)[:8]
    )
    assert (
        wire.delivery_from_pb(request.value, request.sender, lambda kid: ORIGIN.node_id)
        == forwarded
    )
    # Before (wire version 3): the same fields, each a protobuf field with its tag and
    # length (+1: the DeliverRequest's framing of the larger value)
    v3 = [
        _statement_fields(_messages(wire.delivered_value(d))) + 1
        for d in (first, forwarded, first_contact, later)
    ]
    assert v3 == [387, 397, 421, 275]
    lone_v3 = deliver_pb2.DeliverRequest.FromString(_vector(3)).value
    assert _statement_fields(lone_v3) + 1 == 387
    # Before that (wire version 1): every head field spelled out; before that, the payload
    # bytes as signed, the record as leaf data, the head digest.
    v1 = deliver_pb2.DeliverRequest.FromString(_vector(1))
    assert _statement_fields(v1.value) == 439  # 440 with the DeliverRequest's framing
    signed = open_statement(first.heads[0], Head).envelope
    p = FoldProof.from_bytes(first.fold_proofs[0])
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

    assert (framed(legacy_proof) + framed(legacy_head), framed(legacy_proof)) == (865, 382)


def _vector(
    version: int, *, held: bool = False, forwarded: bool = False, first_contact: bool = False
) -> bytes:
    from tests.nodes.wire_vectors import VECTOR_DIR, vector_name

    path = VECTOR_DIR / vector_name(
        version, held=held, forwarded=forwarded, first_contact=first_contact
    )
    if not path.is_file():
        pytest.fail(f"wire vector {path} is missing (see tests/nodes/wire_vectors.py)")
    return path.read_bytes()


def test_wire_vectors_of_every_version_decode_to_the_same_delivery() -> None:
    from nodes import wire
    from tests.nodes.wire_vectors import (
        ORIGIN,
        build_wire_vectors,
        first_contact_delivery,
        forwarded_first_delivery,
        lone_first_delivery,
    )

    first, later = lone_first_delivery()
    # the current version, rebuilt byte for byte
    for name, data in build_wire_vectors().items():
        held, forwarded, first_contact = "held" in name, "forwarded" in name, "contact" in name
        kind = {"held": held, "forwarded": forwarded, "first_contact": first_contact}
        assert data == _vector(wire.WIRE_VERSION, **kind), name
    # every version still reads
    for version in range(1, wire.WIRE_VERSION + 1):
        for held, expected in ((False, first), (True, later)):
            request = deliver_pb2.DeliverRequest.FromString(_vector(version, held=held))
            assert wire.delivery_from_pb(request.value, request.sender) == expected, version
    assert _vector(1) != _vector(wire.WIRE_VERSION)
    # from version 3: a forwarded head names its origin by key id, resolved by the receiver
    for version in range(3, wire.WIRE_VERSION + 1):
        request = deliver_pb2.DeliverRequest.FromString(_vector(version, forwarded=True))
        relayed = wire.delivery_from_pb(request.value, request.sender, lambda k: ORIGIN.node_id)
        assert relayed == forwarded_first_delivery(), version
        assert relayed.heads == first.heads  # the very envelope the origin signed
        open_statement(relayed.heads[0], Head, signer=ORIGIN.node_id)
    # version 4 (packed): the first-contact forward carries the key, and nothing else
    # (no key held: a resolver is never asked)
    request = deliver_pb2.DeliverRequest.FromString(_vector(4, first_contact=True))
    assert request.value.packed_heads
    assert not request.value.heads
    relayed = wire.delivery_from_pb(request.value, request.sender)
    assert relayed == first_contact_delivery()
    assert relayed.heads == first.heads
    open_statement(relayed.heads[0], Head, signer=ORIGIN.node_id)
    # version 4 packs the very fields version 3 sent as messages
    for held in (False, True):
        v3 = deliver_pb2.DeliverRequest.FromString(_vector(3, held=held))
        v4 = deliver_pb2.DeliverRequest.FromString(_vector(4, held=held))
        assert _messages(v4.value) == v3.value


def test_a_head_named_by_key_id_rebuilds_only_under_the_key_the_receiver_resolves() -> None:
    from contracts.identity import Identity
    from nodes import wire
    from tests.nodes.wire_vectors import ORIGIN, forwarded_first_delivery

    request = wire.deliver_request(forwarded_first_delivery())
    kid = bytes.fromhex(ORIGIN.node_id)[:8]
    # a receiver that holds no key: malformed for a bare decoder
    with pytest.raises(EncodingError, match="holds no keys"):
        wire.delivery_from_pb(request.value, request.sender)
    # a resolver answering a key of another id is refused before any signature check
    other = Identity.from_seed(bytes([5]) * 32).node_id
    with pytest.raises(EncodingError, match="resolved to another key"):
        wire.delivery_from_pb(request.value, request.sender, lambda k: other)
    # a key sharing the id but not the origin's: the rebuilt head names that key as
    # its origin, and the signature that travelled does not verify under it
    impostor = Identity.from_seed(bytes([6]) * 32).node_id
    same_id = kid.hex() + impostor[16:]
    delivery = wire.delivery_from_pb(request.value, request.sender, lambda k: same_id)
    assert delivery.key_id_origins == (same_id,)
    with pytest.raises((BadSignature, EncodingError)):
        open_statement(delivery.heads[0], Head)
    # an id of the wrong length is malformed
    bad = deliver_pb2.DeliverRequest(value=_messages(request.value), sender=request.sender)
    bad.value.heads[0].fields.origin = kid[:7]
    with pytest.raises(EncodingError, match=r"32 bytes \(its key\) or 8"):
        wire.delivery_from_pb(bad.value, bad.sender, lambda k: ORIGIN.node_id)


def test_the_head_cache_names_a_key_by_id_only_while_exactly_one_held_key_has_it() -> None:
    from contracts.heads import FoldInput, HeadCache, HeadLog, key_id
    from contracts.identity import Identity

    def head_of(me: Identity, epoch: str) -> Signed[Head]:
        log = HeadLog(me, epoch)
        c = log.compact(
            [FoldInput("a", 0, [b"x"])],
            serve_until=10_000,
            deadline_ms=1,
            endpoints=(),
            issued_at=1,
        )
        return c.head

    a, b = Identity.from_seed(bytes([1]) * 32), Identity.from_seed(bytes([2]) * 32)
    cache = HeadCache(capacity=2)
    assert cache.origin_for_key_id(key_id(a.node_id)) is None
    cache.verify(head_of(a, "1-0000000000000000").to_bytes(), now=0)
    assert cache.origin_for_key_id(key_id(a.node_id)) == a.node_id
    assert cache.origin_for_key_id(key_id(b.node_id)) is None
    # two held keys with one id (forged here by re-keying the index): ambiguous, None
    cache._by_key_id[key_id(a.node_id)]["ff" * 32] = 1
    assert cache.origin_for_key_id(key_id(a.node_id)) is None
    del cache._by_key_id[key_id(a.node_id)]["ff" * 32]
    # evicted with its last head: the key is no longer held
    cache.verify(head_of(a, "2-0000000000000000").to_bytes(), now=0)
    cache.verify(head_of(b, "1-0000000000000000").to_bytes(), now=0)
    assert cache.origin_for_key_id(key_id(a.node_id)) == a.node_id  # one head of a left
    cache.verify(head_of(b, "2-0000000000000000").to_bytes(), now=0)
    assert cache.origin_for_key_id(key_id(a.node_id)) is None
    assert cache.origin_for_key_id(key_id(b.node_id)) == b.node_id


@pytest.mark.parametrize(
    ("epoch", "endpoints", "compact_epoch", "compact_endpoints"),
    [
        ("7-0123456789abcdef", ("127.0.0.1:50051",), True, True),
        ("0-ffffffffffffffff", ("[::1]:7", "10.0.0.2:0"), True, True),
        ("18446744073709551615-0000000000000000", ("[2001:db8::1]:65535",), True, True),
        # not the store's form, or not a canonical address: sent as strings
        ("18446744073709551616-0000000000000000", ("node-a:50051",), False, False),
        ("07-0123456789abcdef", ("127.0.0.01:50051",), False, False),
        ("run-1", ("127.0.0.1:050051", "127.0.0.1:1"), False, False),
        ("7-0123456789ABCDEF", ("[0:0::1]:7",), False, False),
        ("", ("1.2.3.4:65536", "[::ffff:1.2.3.4]:9"), False, False),
        ("1-0123456789abcdef", (), True, False),
    ],
)
def test_head_fields_take_a_compact_form_only_when_it_rebuilds_the_signed_value(
    epoch: str, endpoints: tuple[str, ...], compact_epoch: bool, compact_endpoints: bool
) -> None:
    from contracts.heads import FoldInput, HeadLog
    from contracts.identity import Identity
    from nodes import wire

    me = Identity.from_seed(bytes([7]) * 32)
    log = HeadLog(me, epoch)
    for seq, (serve_until, issued_at) in enumerate(((10, 20), (5_000, 1_000))):
        c = log.compact(
            [FoldInput("a", seq, [b"x"])],
            serve_until=serve_until,
            deadline_ms=1,
            endpoints=endpoints,
            issued_at=issued_at,
        )
        head = c.head.to_bytes()
        for sender in ("", me.node_id):
            pb = wire.signed_head_to_pb(head, sender=sender)
            f = pb.fields
            assert (len(f.epoch_nonce) == 8) is compact_epoch
            assert bool(f.endpoint_addrs) is compact_endpoints
            assert f.HasField("serve_for_ms") is (serve_until >= issued_at)
            assert (not f.origin) is bool(sender)
            # an epoch's first head: its log root is the one-leaf log's
            assert (not f.log_root) is (seq == 0)
            assert wire.signed_head_from_pb(pb, sender=sender) == head
            open_statement(wire.signed_head_from_pb(pb, sender=sender), Head, signer=me.node_id)
    # an implied origin that is not the signer's: the rebuilt head fails its signature
    pb = wire.signed_head_to_pb(head, sender=me.node_id)
    with pytest.raises(BadSignature):
        open_statement(wire.signed_head_from_pb(pb, sender="ab" * 32), Head)


async def test_compact_head_and_record_fields_of_the_wrong_shape_are_malformed(
    cluster: MemCluster,
) -> None:
    from nodes import wire

    origin = await cluster.add("origin")
    head, proofs = await _compaction(origin, ["a", "b"])
    good = _messages(wire.delivered_value(Delivery("a", b"v", (), (), "", (proofs[0],), (head,))))
    # the compact forms the cases below break are the ones sent: a first head of an
    # epoch (no log root) over the memory transport, an IP endpoint in the vectors
    from tests.nodes.wire_vectors import lone_first_delivery

    first, _ = lone_first_delivery()
    ip = _messages(wire.delivered_value(dataclasses.replace(first, sender="")))
    fields, ip_fields = good.heads[0].fields, ip.heads[0].fields
    assert fields.origin
    assert fields.epoch_nonce
    assert fields.HasField("serve_for_ms")
    assert (fields.seq, fields.log_root) == (0, b"")
    assert ip_fields.endpoint_addrs
    assert not ip_fields.endpoints
    cases: list[tuple[str, common_pb2.DeliveredValue]] = []
    short_origin = common_pb2.DeliveredValue()
    short_origin.CopyFrom(good)
    short_origin.heads[0].fields.origin = b"\x01" * 31
    cases.append((r"origin must be 32 bytes \(its key\) or 8 \(its key id\), not 31", short_origin))
    short_root = common_pb2.DeliveredValue()
    short_root.CopyFrom(good)
    short_root.heads[0].fields.root = b"\x01" * 31
    cases.append(("root and log_root must be 32 bytes each", short_root))

    def head_case(
        message: str,
        change: Callable[[common_pb2.HeadFields], object],
        base: common_pb2.DeliveredValue = good,
    ) -> None:
        msg = common_pb2.DeliveredValue()
        msg.CopyFrom(base)
        change(msg.heads[0].fields)
        cases.append((message, msg))

    # wire version 2's implied and compact fields
    head_case("no origin, and the delivery names no sender", lambda f: f.ClearField("origin"))
    head_case("a nonce is 8 bytes", lambda f: setattr(f, "epoch_nonce", b"\x01" * 7))
    head_case("epoch and epoch_nonce are exclusive", lambda f: setattr(f, "epoch", "run-1"))

    def counter_alone(f: common_pb2.HeadFields) -> None:
        f.ClearField("epoch_nonce")
        f.epoch_counter = 3

    head_case("epoch_counter without epoch_nonce", counter_alone)
    head_case(
        "serve_until and serve_for_ms are exclusive", lambda f: setattr(f, "serve_until", 9)
    )
    head_case(
        "endpoint address of 5 bytes", lambda f: f.endpoint_addrs.__setitem__(0, b"12345"), ip
    )
    head_case(
        "endpoints and endpoint_addrs are exclusive", lambda f: f.endpoints.append("x:1"), ip
    )
    head_case("head 1 is not an epoch's first", lambda f: setattr(f, "seq", 1))
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


_PORT = st.integers(0, 70_000)
_ENDPOINT = st.one_of(
    st.tuples(st.ip_addresses(v=4), _PORT).map(lambda t: f"{t[0]}:{t[1]}"),
    st.tuples(st.ip_addresses(v=6), _PORT).map(lambda t: f"[{t[0]}]:{t[1]}"),
    st.sampled_from(["127.0.0.01:1", "[::FFFF:1.2.3.4]:5", "1.2.3.4:+5", "1.2.3.4:٣", ":1"]),
    st.text(max_size=40),
)
_EPOCH = st.one_of(
    st.from_regex(r"(0|[1-9][0-9]{0,20})-[0-9a-fA-F]{16}", fullmatch=True),
    st.text(max_size=40),
)


@settings(max_examples=60, deadline=None)
@given(
    epoch=_EPOCH,
    endpoints=st.lists(_ENDPOINT, max_size=3),
    issued_at=st.one_of(st.integers(0, 2**42), st.integers(0, 2**32).map(lambda s: s * 1000)),
    serve_until=st.one_of(st.integers(0, 2**42), st.integers(0, 2**32).map(lambda s: s * 1000)),
    compactions=st.integers(1, 2),
)
def test_every_head_crosses_the_wire_byte_exact_whoever_sends_it(
    epoch: str, endpoints: list[str], issued_at: int, serve_until: int, compactions: int
) -> None:
    from contracts.heads import FoldInput, HeadLog
    from contracts.identity import Identity
    from nodes import wire

    me = Identity.from_seed(bytes([9]) * 32)
    log = HeadLog(me, epoch)
    for seq in range(compactions):
        head = log.compact(
            [FoldInput("a", seq, [b"x"])],
            serve_until=serve_until,
            deadline_ms=1,
            endpoints=endpoints,
            issued_at=issued_at,
        ).head.to_bytes()
    for sender in ("", me.node_id, "ab" * 32):
        pb = wire.signed_head_to_pb(head, sender=sender)
        assert wire.signed_head_from_pb(pb, sender=sender) == head
        # wire version 4: the same fields packed, unpacked to the same message
        packed = wire.pack_head(pb)
        assert packed is not None
        assert wire.unpack_head(packed) == pb


async def test_a_relay_names_an_origin_the_holder_knows_by_key_id_over_grpc(
    tmp_path: Path,
) -> None:
    """Origin → relay → holder over gRPC: the relay's first forward of the origin's head
    names the origin in full; once the holder acknowledged a head of that origin, a new
    head names it by key id, the holder rebuilds the very envelope signed, and a holder
    that lost its keys answers NOT_FOUND and gets the full key."""
    from nodes import wire
    from tests.nodes.rpc_support import grpc_node, stop_all

    origin = await grpc_node(tmp_path, "origin")
    relay = await grpc_node(tmp_path, "relay")
    holder = await grpc_node(tmp_path, "holder")
    nodes = (origin, relay, holder)
    try:
        sent: list[Delivery] = []
        real = relay.core.transport.deliver

        async def spy(address: str, delivery: Delivery, timeout: float) -> bytes:
            sent.append(delivery)
            return await real(address, delivery, timeout)

        relay.core.transport.deliver = spy  # type: ignore[method-assign]

        async def relay_value(ref: str) -> bytes:
            head, proofs = await _compaction(origin.core, [ref])
            delivery = Delivery(ref, b"v", (), (), origin.node_id, (proofs[0],), (head,))
            await origin.core.send(relay.address, delivery, 5.0)
            await relay.core.forward(ref, holder.address)
            return head

        head = await relay_value("a")
        assert [d.key_id_origins for d in sent] == [()]  # first contact: the full key
        assert holder.core.held("a").delivery.heads == (head,)
        head = await relay_value("b")
        assert [d.key_id_origins for d in sent[1:]] == [(origin.node_id,)]
        assert holder.core.held("b").delivery.heads == (head,)  # byte-exact, as signed
        full = dataclasses.replace(sent[-1], key_id_origins=())
        assert wire.delivery_statement_size(full) - wire.delivery_statement_size(sent[-1]) == 24
        # the holder restarted its caches: the key id resolves to nothing there
        holder.core.heads = type(holder.core.heads)()
        head = await relay_value("c")
        assert [d.key_id_origins for d in sent[2:]] == [(origin.node_id,), ()]
        assert holder.core.held("c").delivery.heads == (head,)
    finally:
        await stop_all(nodes)


def _repacked(
    value: common_pb2.DeliveredValue, change: Callable[[common_pb2.SignedHead], object]
) -> common_pb2.DeliveredValue:
    """``value`` with its packed head unpacked, changed and packed again (wire version 4)."""
    from nodes import wire

    out = common_pb2.DeliveredValue()
    out.CopyFrom(value)
    head = wire.unpack_head(out.packed_heads[0])
    change(head)
    packed = wire.pack_head(head)
    assert packed is not None
    out.packed_heads[0] = packed
    return out


def test_a_packed_head_rebuilds_only_the_values_its_origin_signed() -> None:
    """Wire version 4, first contact: the head carries the origin's key; the receiver
    verifies the signature under that key, which is also the origin the rebuilt payload
    names. Every value the packed form implies or compacts (the origin, the root the
    audit path implies, the log root, whole seconds) rebuilds to the signed one, and a
    wrong one rebuilds another payload whose signature fails."""
    from contracts.identity import Identity
    from nodes import wire
    from tests.nodes.wire_vectors import ORIGIN, first_contact_delivery, lone_first_delivery

    delivery = first_contact_delivery()
    request = wire.deliver_request(delivery)
    value, sender = request.value, request.sender
    head = wire.unpack_head(value.packed_heads[0])
    assert head.fields.origin == bytes.fromhex(ORIGIN.node_id)  # the key travels
    assert not head.fields.root  # implied by the fold proof
    assert head.fields.issued_at % 1000 == 0  # coded in seconds
    assert head.fields.serve_for_ms % 1000 == 0
    assert head.fields.deadline_ms % 1000 == 0
    got = wire.delivery_from_pb(value, sender)
    assert got.heads == delivery.heads
    open_statement(got.heads[0], Head, signer=ORIGIN.node_id)

    other = Identity.from_seed(bytes([3]) * 32).node_id

    def fails(msg: common_pb2.DeliveredValue, from_sender: str = sender) -> None:
        with pytest.raises(BadSignature):
            open_statement(wire.delivery_from_pb(msg, from_sender).heads[0], Head)

    # another key in the origin's place: the payload names it, the signature fails
    fails(_repacked(value, lambda h: setattr(h.fields, "origin", bytes.fromhex(other))))
    # a duration or time one second off, in the seconds form
    for name, delta in (("serve_for_ms", 1000), ("issued_at", -1000), ("deadline_ms", 1000)):

        def shift(h: common_pb2.SignedHead, n: str = name, d: int = delta) -> None:
            setattr(h.fields, n, getattr(h.fields, n) + d)

        fails(_repacked(value, shift))
    # a byte of the epoch nonce, or the log root, changed
    fails(_repacked(value, lambda h: setattr(h.fields, "epoch_nonce", bytes(8))))
    fails(_repacked(value, lambda h: setattr(h.fields, "log_root", bytes(32))))
    # an audit path (the packed proof's tail) that implies another root
    bad = common_pb2.DeliveredValue()
    bad.CopyFrom(value)
    proof = bad.packed_fold_proofs[0]
    bad.packed_fold_proofs[0] = proof[:-1] + bytes([proof[-1] ^ 1])
    fails(bad)
    # a flipped bit of the signature
    bad.CopyFrom(value)
    packed = bad.packed_heads[0]
    bad.packed_heads[0] = packed[:1] + bytes([packed[1] ^ 1]) + packed[2:]
    fails(bad)
    # the lone delivery leaves the origin out: implied from a sender that did not sign
    lone, _ = lone_first_delivery()
    lone_request = wire.deliver_request(lone)
    assert not wire.unpack_head(lone_request.value.packed_heads[0]).fields.origin
    assert wire.delivery_from_pb(lone_request.value, lone_request.sender) == lone
    fails(lone_request.value, other)


def test_packed_heads_and_fold_proofs_of_the_wrong_shape_are_malformed() -> None:
    from nodes import wire
    from tests.nodes.wire_vectors import first_contact_delivery

    value = wire.delivered_value(first_contact_delivery())
    head, proof = value.packed_heads[0], value.packed_fold_proofs[0]
    # every truncation, and a byte too many
    for n in range(len(head)):
        with pytest.raises(EncodingError, match=r"packed head: (ends inside|1 endpoints in)"):
            wire.unpack_head(head[:n])
    with pytest.raises(EncodingError, match="packed head: 1 trailing bytes"):
        wire.unpack_head(head + b"\x00")
    for n in range(proof.index(b"\x00", 1)):  # up to the path (the rest of the bytes)
        with pytest.raises(EncodingError, match="packed fold proof: ends inside"):
            wire.unpack_fold_proof(proof[:n])
    # flags and varints outside the one form each value has
    cases = [
        (bytes([head[0] | 3]) + head[1:], "origin form 3"),
        (b"\x00" + bytes(64) + b"\x80\x00", "epoch counter is not a shortest-form varint"),
        (b"\x00" + bytes(64) + b"\xff" * 11, "more than 10 bytes"),
        (b"\x10" + bytes(64) + b"\x00\x00\x00\x01", "issued_at is 0 seconds"),
        (b"\x10" + bytes(64) + b"\x00\x00\x00" + b"\xd0\x0f", "issued_at is whole seconds coded"),
        (b"\x10" + bytes(64) + b"\x01\xff", "epoch is not UTF-8"),
        (b"\x10" + bytes(64) + b"\x00\x00\x00\x00\x00\x00\x05", "5 endpoints in the 0 bytes left"),
        (b"\x10" + bytes(64) + b"\x00\x00" + b"\xff" * 9 + b"\x7f", "Value out of range"),
    ]
    for data, message in cases:
        with pytest.raises(EncodingError, match=message):
            wire.unpack_head(data)
    record = b"\x00\x01\x01" + bytes(32)
    proof_cases = [
        (b"\x01\x00\x04\x01\x01" + bytes(32), "unknown record flags 0x04"),
        (b"\x01\x00\x02\x01\x01" + bytes(32) + b"\x00", "empty value_ref"),
        (b"\x01\x00" + record + b"\x81\x40", "chain of 8193 records"),
        (b"\x01\x00" + record + b"\x00" + bytes(31), "path must be whole 32-byte hashes"),
    ]
    for data, message in proof_cases:
        with pytest.raises(EncodingError, match=message):
            wire.delivery_from_pb(
                common_pb2.DeliveredValue(value_ref="x", packed_fold_proofs=[data])
            )
    # the two forms of one list are exclusive
    both = common_pb2.DeliveredValue()
    both.CopyFrom(value)
    both.heads.append(wire.unpack_head(head))
    with pytest.raises(EncodingError, match="heads and packed_heads are exclusive"):
        wire.delivery_from_pb(both)
    both.CopyFrom(value)
    both.fold_proofs.append(wire.unpack_fold_proof(proof))
    with pytest.raises(EncodingError, match="fold_proofs and packed_fold_proofs are exclusive"):
        wire.delivery_from_pb(both)


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=300), at=st.integers(0, 500), cut=st.booleans())
def test_any_packed_bytes_decode_to_the_signed_delivery_or_are_malformed(
    data: bytes, at: int, cut: bool
) -> None:
    from nodes import wire
    from tests.nodes.wire_vectors import ORIGIN, first_contact_delivery

    delivery = first_contact_delivery()
    request = wire.deliver_request(delivery)
    for field in ("packed_heads", "packed_fold_proofs"):
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
            open_statement(got.heads[0], Head, signer=ORIGIN.node_id)
        except (VerificationError, EncodingError):
            continue
        assert got.heads == delivery.heads


def test_a_packed_fold_proof_carries_its_chain_and_a_foreign_value_ref() -> None:
    from contracts.heads import FoldInput, HeadLog
    from nodes import wire
    from tests.nodes.wire_vectors import ORIGIN

    log = HeadLog(ORIGIN, "7-0123456789abcdef")
    for seq in range(3):
        log.compact(
            [FoldInput("a", seq, [b"a%d" % seq]), FoldInput("b", seq, [b"b"])],
            serve_until=5_000,
            deadline_ms=1,
            endpoints=(),
            issued_at=1,
        )
    proof = log.fold_proof("a", back=2).to_bytes()
    assert len(FoldProof.from_bytes(proof).chain) == 2
    for value_ref in ("a", "another value"):  # the record's ref left out, or sent
        pb = wire.fold_proof_to_pb(proof, value_ref)
        assert bool(pb.record_fields.value_ref) is (value_ref != "a")
        packed = wire.pack_fold_proof(pb)
        assert packed is not None
        assert wire.unpack_fold_proof(packed) == pb
        assert wire.fold_proof_from_pb(wire.unpack_fold_proof(packed), value_ref) == proof
