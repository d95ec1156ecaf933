"""The library facade (:mod:`nodes.api`): each call, and the errors bad input gets.

Nodes are opened in this process with their gRPC servers on loopback, as a
user's agent would open them; a tampering origin is the node's own ``tamper``
fault. Bad input — garbage bytes, a value for another origin, a broken or
expired head, an evidence file that does not verify — must end in the
facade's own error naming what failed, and must leave nothing held.
"""

from __future__ import annotations

import base64
import json
import random
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest

from contracts.identity import Identity, save_identity
from nodes import api
from nodes.api import (
    Evidence,
    InvalidEvidence,
    MalformedValue,
    Node,
    NodeUnavailable,
    NotRehydrated,
    ProvnetError,
    Rehydrated,
    RequestRejected,
    ValueRejected,
    WrongOrigin,
    connect,
    open_node,
    verify_evidence,
)
from nodes.messages import Delivery, OriginOutcome, Outcome, RehydrationReport


@dataclass
class Trio:
    a: Node  # an honest origin
    b: Node  # the receiver
    t: Node  # a tampering origin
    root: Path


@pytest.fixture
async def trio(tmp_path: Path) -> AsyncIterator[Trio]:
    async with AsyncExitStack() as stack:
        a = await stack.enter_async_context(open_node(tmp_path / "a", name="a", deadline_ms=250))
        b = await stack.enter_async_context(open_node(tmp_path / "b", name="b"))
        t = await stack.enter_async_context(open_node(tmp_path / "t", name="t", fault="tamper"))
        yield Trio(a, b, t, tmp_path)


def _hops(n: int) -> list[dict[str, object]]:
    return [{"step": i, "op": "READ", "taints_added": [f"t{i}"]} for i in range(1, n + 1)]


async def _value(origin: Node, ref: str = "memory-1", n: int = 4) -> api.Value:
    seqs = await origin.append(_hops(n))
    return await origin.compact(ref, seqs, b"summary of " + ref.encode())


# ------------------------------------------------------------------ append, compact


async def test_append_gives_each_hop_its_step_as_seq(trio: Trio) -> None:
    assert await trio.a.append(_hops(3)) == (1, 2, 3)
    # bytes are accepted as they are
    assert await trio.a.append([b'{"step": 9, "op": "WRITE"}']) == (9,)


async def test_append_a_hop_without_step_is_rejected_naming_the_hop(trio: Trio) -> None:
    with pytest.raises(RequestRejected, match="hop 1 has no seq and no integer 'step'") as info:
        await trio.a.append([{"step": 1}, {"op": "READ"}])
    assert info.value.code == "INVALID_ARGUMENT"


async def test_append_one_mapping_instead_of_a_list_is_a_type_error(trio: Trio) -> None:
    with pytest.raises(TypeError, match="a sequence of hops"):
        await trio.a.append({"step": 1})  # type: ignore[arg-type]


async def test_compact_a_seq_never_appended_is_rejected_naming_it(trio: Trio) -> None:
    await trio.a.append(_hops(2))
    with pytest.raises(RequestRejected, match=r"hop seq 7 .* is not in the log"):
        await trio.a.compact("m", [1, 7], b"x")


async def test_compact_signs_one_head_naming_the_origin(trio: Trio) -> None:
    value = await _value(trio.a)
    assert value.ref == "memory-1"
    assert value.payload == b"summary of memory-1"
    assert value.origins == (trio.a.node_id,)
    # the statements are bytes on top of the payload
    assert value.statement_bytes == len(value.to_bytes()) - len(value.payload) > 0


# ------------------------------------------------------------------ receive, rehydrate


async def test_receive_then_rehydrate_returns_every_hop_verified(trio: Trio) -> None:
    value = await _value(trio.a, n=4)
    got = await trio.b.receive(value.to_bytes(), origin=trio.a.node_id)
    assert got.value.ref == value.ref
    assert got.value.payload == value.payload
    assert got.value.origins == (trio.a.node_id,)
    assert got.receipt  # the receiver's signed delivery receipt
    result = await trio.b.rehydrate(got)
    assert isinstance(result, Rehydrated)
    assert [h.leaf_index for h in result.hops] == [0, 1, 2, 3]
    assert {h.origin for h in result.hops} == {trio.a.node_id}
    fields = [h.fields for h in result.hops]
    assert [f["taints_added"] for f in fields] == [["t1"], ["t2"], ["t3"], ["t4"]]
    assert {f["origin"] for f in fields} == {trio.a.node_id}


async def test_rehydrate_by_ref_and_by_value_alike(trio: Trio) -> None:
    value = await _value(trio.a)
    await trio.b.receive(value.to_bytes())
    by_ref = await trio.b.rehydrate(value.ref)
    by_value = await trio.b.rehydrate(value)
    assert isinstance(by_ref, Rehydrated)
    assert isinstance(by_value, Rehydrated)
    assert by_ref.hops == by_value.hops


async def test_receive_garbage_is_malformed_value_and_holds_nothing(trio: Trio) -> None:
    value = (await _value(trio.a)).to_bytes()
    rng = random.Random(26)
    garbage = [
        b"",
        value[:-5],  # truncated inside the head
        b"\n\x02v1",  # a ref alone: well-formed protobuf, no statements
        b"\x12\x03abc",  # a payload without a ref
        b"\xff" * 64,
        *(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300))) for _ in range(200)),
    ]
    for data in garbage:
        with pytest.raises(MalformedValue, match=r"^value"):
            await trio.b.receive(data)
    with pytest.raises(RequestRejected, match="no held value") as info:
        await trio.b.rehydrate("v1")
    assert info.value.code == "NOT_FOUND"


async def test_receive_more_than_a_deliver_call_carries_is_malformed(trio: Trio) -> None:
    with pytest.raises(MalformedValue, match="exceeds the limit"):
        await trio.b.receive(b"\n" * (api.MAX_VALUE_BYTES + 1))


async def test_receive_a_value_for_another_origin_is_wrong_origin(trio: Trio) -> None:
    value = await _value(trio.t)
    with pytest.raises(WrongOrigin, match=f"statements by {trio.t.node_id[:16]}") as info:
        await trio.b.receive(value.to_bytes(), origin=trio.a.node_id)
    assert info.value.expected == trio.a.node_id
    assert info.value.found == (trio.t.node_id,)
    with pytest.raises(RequestRejected, match="no held value"):
        await trio.b.rehydrate(value.ref)  # refused before anything was held


async def test_receive_a_fold_under_a_head_it_does_not_carry_is_malformed(trio: Trio) -> None:
    # B verified T's head before; a value with A's per-fold statements and a
    # fold proof naming T's head by digest alone would pass origin=A unseen.
    t_value = await _value(trio.t, "t-value")
    await trio.b.receive(t_value.to_bytes())
    core = trio.a._backend.running.core  # type: ignore[attr-defined]
    _, seqs = await core.append([b'{"step": 50}'])
    fold = await core.commit_fold("mixed", seqs)
    mixed = Delivery(
        "mixed",
        b"x",
        (fold.commitment,),
        (fold.obligation,),
        "",
        t_value._delivery.fold_proofs,
        (),
    )
    with pytest.raises(MalformedValue, match=r"fold proof 0 is proven under head .* not carry"):
        await trio.b.receive(api._encode(mixed), origin=trio.a.node_id)
    with pytest.raises(RequestRejected, match="no held value"):
        await trio.b.rehydrate("mixed")


async def test_a_receiver_whose_own_store_fails_does_not_blame_the_value(trio: Trio) -> None:
    core = trio.a._backend.running.core  # type: ignore[attr-defined]
    _, seqs = await core.append([b'{"step": 60}'])
    fold = await core.commit_fold("per-fold", seqs)  # kept in the receiver's store
    value = Delivery("per-fold", b"x", (fold.commitment,), (fold.obligation,))
    await trio.b._backend.core.store.close()  # type: ignore[attr-defined]
    with pytest.raises(RequestRejected, match="receive 'per-fold'") as info:
        await trio.b.receive(api._encode(value))
    assert not isinstance(info.value, ValueRejected)
    assert info.value.code == "UNAVAILABLE"


async def test_rehydrate_a_value_replaced_under_its_ref_is_rejected(trio: Trio) -> None:
    first = await trio.b.receive((await _value(trio.a, "m")).to_bytes())
    await trio.b.receive((await _value(trio.t, "m")).to_bytes())  # same ref, later
    with pytest.raises(RequestRejected, match="now holds another value under this ref"):
        await trio.b.rehydrate(first)
    # by ref: whatever is held now (the tampering origin's)
    assert isinstance(await trio.b.rehydrate("m"), Evidence)


def _flip_head_signature(data: bytes) -> bytes:
    """``data`` with one bit of its head note's signature flipped, the note otherwise
    intact (the signature line: "— <name> <base64 key id + signature>")."""
    start = data.index("\n\n\u2014 ".encode()) + 2
    end = data.index(b"\n", start)
    name, sig = data[start:end].rsplit(b" ", 1)
    raw = bytearray(base64.b64decode(sig))
    raw[-1] ^= 0x01
    return data[:start] + name + b" " + base64.b64encode(bytes(raw)) + data[end:]


async def test_receive_a_head_whose_signature_fails_is_value_rejected(trio: Trio) -> None:
    data = (await _value(trio.a)).to_bytes()
    broken = _flip_head_signature(data)
    with pytest.raises(ValueRejected, match=r"signature by .* does not verify"):
        await trio.b.receive(broken)
    with pytest.raises(RequestRejected, match="no held value"):
        await trio.b.rehydrate("memory-1")


async def test_receive_an_expired_promise_is_value_rejected(trio: Trio) -> None:
    seqs = await trio.a.append(_hops(2))
    value = await trio.a.compact("short", seqs, b"x", serve_for_ms=1)
    # past serve_until as soon as a millisecond has gone
    rejected: ValueRejected | None = None
    for _ in range(1000):  # bounded: each receive takes well over a millisecond
        try:
            await trio.b.receive(value.to_bytes())
        except ValueRejected as exc:
            rejected = exc
            break
    assert rejected is not None
    assert "expired at" in str(rejected)


async def test_tampering_origin_yields_bad_data_evidence_that_verifies(trio: Trio) -> None:
    value = await _value(trio.t, "memory-2")
    got = await trio.b.receive(value.to_bytes())
    result = await trio.b.rehydrate(got)
    assert isinstance(result, Evidence), result
    assert (result.kind, result.level, result.confirmed) == ("bad_data", "proof", True)
    assert result.origin == trio.t.node_id
    assert result.ref == "memory-2"
    assert Path(result.path).read_bytes() == result.data
    for given in (result.path, Path(result.path), result.data, result):
        verdict = verify_evidence(given)
        assert (verdict.kind, verdict.level, verdict.status) == ("bad_data", "proof", "proven")
        assert verdict.accused == trio.t.node_id
        assert verdict.accuses


async def test_gone_origin_is_an_unconfirmed_suspicion_never_a_proof(trio: Trio) -> None:
    value = await _value(trio.a)
    got = await trio.b.receive(value.to_bytes())
    await trio.a.close()  # the origin's box is gone (no witnesses named)
    result = await trio.b.rehydrate(got)
    assert isinstance(result, Evidence), result
    assert (result.kind, result.level, result.confirmed) == ("unanswered", "suspicion", False)
    assert result.path == ""  # not kept: silence alone is never proof
    verdict = verify_evidence(result)
    assert (verdict.level, verdict.status) == ("suspicion", "suspected")
    assert "0 of 1 witness confirmation" in verdict.reason


async def test_a_node_without_a_server_receives_and_rehydrates_but_never_promises(
    trio: Trio,
) -> None:
    async with open_node(trio.root / "quiet", name="quiet", listen=None) as quiet:
        assert quiet.address == ""
        got = await quiet.receive((await _value(trio.a)).to_bytes(), origin=trio.a.node_id)
        result = await quiet.rehydrate(got)
        assert isinstance(result, Rehydrated)
        assert len(result.hops) == 4
        seqs = await quiet.append(_hops(2))
        with pytest.raises(RequestRejected, match="has no server") as info:
            await quiet.compact("mine", seqs)
        assert info.value.code == "FAILED_PRECONDITION"
        await quiet.close()  # closing twice (here, then the block) is one close


async def test_a_crashing_origin_stops_answering_and_this_process_lives_on(trio: Trio) -> None:
    async with open_node(trio.root / "c", name="c", fault="crash", deadline_ms=250) as c:
        got = await trio.b.receive((await _value(c)).to_bytes())
        result = await trio.b.rehydrate(got)
        assert isinstance(result, Evidence), result
        assert (result.kind, result.origin) == ("unanswered", c.node_id)


async def test_fault_slow_without_a_delay_and_an_unknown_fault_are_value_errors(
    tmp_path: Path,
) -> None:
    with pytest.raises(ValueError, match="'slow' needs"):
        async with open_node(tmp_path / "s", fault="slow"):
            pass
    with pytest.raises(ValueError, match="fault 'melt' is not one of none, refuse"):
        async with open_node(tmp_path / "s", fault="melt"):
            pass


# ------------------------------------------------------------------ verify_evidence


async def test_verify_evidence_rejects_a_file_that_does_not_verify(trio: Trio) -> None:
    got = await trio.b.receive((await _value(trio.t)).to_bytes())
    evidence = await trio.b.rehydrate(got)
    assert isinstance(evidence, Evidence)
    doc = json.loads(evidence.data)
    # (1) the accused swapped for a correct origin: its key signed none of it
    framed = dict(doc, accused=trio.a.node_id)
    with pytest.raises(InvalidEvidence, match=r"bad_data against .* does not verify"):
        verify_evidence(json.dumps(framed).encode())
    # (2) the receipt's signature broken
    receipt = dict(doc["receipt"])
    sig = bytearray(base64.b64decode(receipt["signatures"][0]["sig"]))
    sig[0] ^= 1
    receipt["signatures"] = [dict(receipt["signatures"][0], sig=base64.b64encode(sig).decode())]
    with pytest.raises(InvalidEvidence, match="does not verify"):
        verify_evidence(json.dumps(dict(doc, receipt=receipt)).encode())
    # (3) not evidence at all, (4) no such file
    with pytest.raises(InvalidEvidence, match="not an evidence file"):
        verify_evidence(b"\x00garbage")
    with pytest.raises(InvalidEvidence, match="cannot read"):
        verify_evidence(trio.root / "missing.json")


# ------------------------------------------------------------------ connect


def _operator_key(root: Path) -> tuple[Path, str]:
    identity = Identity.generate()
    return save_identity(identity, root / "operator.key"), identity.node_id


async def test_connect_drives_a_running_node_like_a_local_one(tmp_path: Path) -> None:
    key, key_id = _operator_key(tmp_path)
    async with (
        open_node(tmp_path / "o", name="o", operator_keys=[key_id]) as served,
        open_node(tmp_path / "h", name="h", operator_keys=[key_id]) as held,
    ):
        async with await connect(served.address, key) as origin:
            assert origin.node_id == served.node_id
            value = await _value(origin)
            assert value.origins == (served.node_id,)
        async with await connect(held.address, key) as holder:
            got = await holder.receive(value.to_bytes(), origin=served.node_id)
            result = await holder.rehydrate(got)
            assert isinstance(result, Rehydrated)
            assert len(result.hops) == 4
            with pytest.raises(MalformedValue):
                await holder.receive(b"\xff" * 16)
            data = value.to_bytes()
            with pytest.raises(ValueRejected, match="does not verify"):
                await holder.receive(_flip_head_signature(data))


async def test_connect_with_a_key_the_node_does_not_authorise_is_rejected(
    tmp_path: Path,
) -> None:
    key, _ = _operator_key(tmp_path)
    async with (
        open_node(tmp_path / "o", name="o") as served,
        await connect(served.address, key) as stranger,
    ):
        with pytest.raises(RequestRejected) as info:
            await stranger.append(_hops(1))
        assert info.value.code in {"UNAUTHENTICATED", "PERMISSION_DENIED"}


async def test_connect_to_nothing_is_node_unavailable(tmp_path: Path) -> None:
    key, _ = _operator_key(tmp_path)
    with pytest.raises(NodeUnavailable, match=r"connect 127\.0\.0\.1:9"):
        await connect("127.0.0.1:9", key, timeout=0.5)


# ------------------------------------------------------------------ the result mapping


class _Reports:
    """A backend that answers rehydrate with a fixed report (the mapping alone)."""

    node_id = "0" * 64
    address = "fixed"

    def __init__(self, report: RehydrationReport) -> None:
        self.report = report

    async def rehydrate(self, ref: str, witnesses: object, expect: object) -> RehydrationReport:
        return self.report


@pytest.mark.parametrize("outcome", [Outcome.PENDING, Outcome.EXPIRED, Outcome.BUSY])
async def test_an_answer_that_accuses_nobody_is_not_rehydrated(outcome: Outcome) -> None:
    origin = "a" * 64
    report = RehydrationReport("m", (OriginOutcome(origin, outcome, "said so"),), (), 1, 1)
    node = Node(_Reports(report))  # type: ignore[arg-type]
    with pytest.raises(NotRehydrated, match=f"answered {outcome.value}: said so") as info:
        await node.rehydrate("m")
    assert (info.value.origin, info.value.outcome) == (origin, outcome.value)


def test_every_error_is_a_provnet_error() -> None:
    errors = [getattr(api, n) for n in api.__all__ if isinstance(getattr(api, n), type)]
    raised = [e for e in errors if issubclass(e, Exception)]
    assert raised
    assert all(issubclass(e, ProvnetError) for e in raised)
