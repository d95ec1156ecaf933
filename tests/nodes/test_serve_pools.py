"""No pool on the serve and deliver paths that a stranger can drain or use as an amplifier.

Issue 23's attacks 2, 3 and 8, each against real ``provnet node`` processes
(the command ``provnet cluster up`` runs), plus the pools' own rules in
process (:mod:`nodes.replay`, :mod:`nodes.held`):

* **A2** one signed bearer demand under a head, copied with random nonces
  (its signature is not checked on that path), no longer fills the node's
  nonce memory: only demands whose signature was verified are recorded, so
  after 200 000 copies an honest holder is still served; and signed demands
  from many keys cannot lock an honest holder out either (a full memory
  forgets its lowest-dated nonces, a signer at its share is refused alone).
* **A3** a replayed call of 256 signed demands is refused before any
  signature is verified (the node's ``demand_verifications`` counter does not
  move), not after all 256.
* **A8** 4 100 one-byte deliveries from one fresh key no longer evict the
  operator's held value, and a stranger cannot replace it under its
  ``value_ref``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from contracts.batch import build_demand_batch, demand_payload
from contracts.envelope import Envelope
from contracts.errors import ReplayedNonce
from contracts.heads import FoldProof, HeadCache
from contracts.identity import Identity
from contracts.serve import build_demand, new_nonce
from contracts.signed import Signed, open_statement
from contracts.statements import Demand, Obligation, Receipt, ReceiptStatus
from nodes import wire
from nodes._pb.provnet.v1 import (
    deliver_pb2,
    deliver_pb2_grpc,
    evidence_pb2,
    hoplog_pb2,
    hoplog_pb2_grpc,
    node_pb2,
    node_pb2_grpc,
    serve_pb2,
    serve_pb2_grpc,
)
from nodes.app import load_or_create_identity
from nodes.auth import (
    ControlAuth,
    ControlCredentials,
    NotAuthenticated,
    PermissionDenied,
    control_channel,
    signed_metadata,
)
from nodes.config import NodeConfig
from nodes.errors import DemandPredatesFloor, HeldConflict, RequestTooLarge
from nodes.held import HeldValues
from nodes.messages import Delivery
from nodes.replay import DemandNonces
from nodes.services import DEMAND_VERIFICATIONS, MAX_NONCES, NodeCore
from nodes.transport import MAX_CHANNELS, GrpcTransport, InMemoryTransport
from tests.nodes.node_process import node_process
from tests.nodes.rpc_support import TEST_OPERATOR, hop_json, operator_channel

pytestmark = pytest.mark.timeout(300)

_BROKEN = {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN}


def now_ms() -> int:
    return int(time.time() * 1000)


@pytest.fixture
def origin(tmp_path: Path) -> Iterator[str]:
    with node_process(
        tmp_path, "origin", PROVNET_OPERATOR_KEYS=TEST_OPERATOR.key_id, PROVNET_DEADLINE_MS="2000"
    ) as (address, _):
        yield address


async def _append(stub: Any, hops: int = 3) -> list[int]:
    appended = await stub.Append(
        hoplog_pb2.AppendRequest(hops=[hop_json(i + 1) for i in range(hops)]), timeout=10
    )
    return list(appended.seqs)


async def _legacy_obligation(address: str, value: bytes = b"") -> tuple[bytes, bytes]:
    """As the operator: a fold committed with its own commitment and obligation."""
    async with operator_channel(address) as chan:
        stub: Any = hoplog_pb2_grpc.HopLogStub(chan)
        seqs = await _append(stub)
        reply = await stub.CommitFold(
            hoplog_pb2.CommitFoldRequest(value_ref=f"v{time.time_ns()}", seqs=seqs, value=value),
            timeout=10,
        )
    return bytes(reply.commitment), bytes(reply.obligation)


async def _head_obligation(address: str) -> Signed[Obligation]:
    """As the operator: a fold committed under a signed head, verified as a holder would."""
    async with operator_channel(address) as chan:
        stub: Any = hoplog_pb2_grpc.HopLogStub(chan)
        seqs = await _append(stub)
        reply = await stub.CommitCompaction(
            hoplog_pb2.CommitCompactionRequest(
                folds=[hoplog_pb2.CompactionFold(value_ref="headed", seqs=seqs)]
            ),
            timeout=10,
        )
    fold = HeadCache().verify_fold(
        FoldProof.from_bytes(bytes(reply.fold_proofs[0])), now=now_ms(), head=bytes(reply.head)
    )
    return fold.obligation


async def _stats(address: str) -> dict[str, int]:
    async with control_channel(address, None) as chan:
        stub: Any = node_pb2_grpc.NodeStub(chan)
        reply = await stub.Stats(node_pb2.StatsRequest(), timeout=10)
    return dict(reply.counters)


def _served(reply: Any) -> bool:
    receipt = open_statement(bytes(reply.answers[0].receipt), Receipt).statement
    return receipt.status is ReceiptStatus.SERVED


def _copy_with_nonce(demand: Signed[Demand], nonce: str) -> bytes:
    """The demand's envelope with another nonce in its payload and the old signature."""
    payload = demand_payload(dataclasses.replace(demand.statement, nonce=nonce))
    env = demand.envelope
    return Envelope(payload, env.payload_type, env.signatures).to_bytes()


# --------------------------------------------------------------------------- A2 (real process)


async def _flood_copies(origin: str, calls: int, top_up: int = 0) -> dict[str, int]:
    """Issue 23's attack 2: one signed bearer demand under a head, copied with random
    nonces, 256 to a call, from 6 tasks, then ``top_up`` calls of one copy; then an
    honest holder's two demands (one bearer, one verified). Returns the codes the
    flood's calls got."""
    headed = await _head_obligation(origin)
    _, legacy_bytes = await _legacy_obligation(origin)
    legacy = open_statement(legacy_bytes, Obligation)
    one = build_demand(Identity.generate(), headed, now=now_ms())
    codes: dict[str, int] = {}
    async with control_channel(origin, None) as chan:
        stub: Any = serve_pb2_grpc.ServeStub(chan)
        todo = iter(range(calls))

        async def flood(size: int) -> None:
            for _ in todo:
                # Dated now, as a fresh copy would be: inside the window throughout.
                signed = Signed(one.envelope, dataclasses.replace(one.statement, time=now_ms()))
                copies = [_copy_with_nonce(signed, new_nonce()) for _ in range(size)]
                try:
                    await stub.Demand(serve_pb2.DemandRequest(demands=copies), timeout=30)
                    codes["OK"] = codes.get("OK", 0) + 1
                except grpc.aio.AioRpcError as exc:
                    codes[exc.code().name] = codes.get(exc.code().name, 0) + 1

        await asyncio.gather(*(flood(256) for _ in range(6)))
        todo = iter(range(top_up))
        await flood(1)  # the last places, one copy at a time
        # Right after the flood, inside the minute its nonces would have lasted:
        holder = Identity.generate()
        for obligation in (headed, legacy):  # a bearer demand and a verified one
            demand = build_demand(holder, obligation, now=now_ms()).to_bytes()
            reply = await stub.Demand(serve_pb2.DemandRequest(demands=[demand]), timeout=10)
            assert _served(reply)
    return codes


async def test_a2_copies_of_one_bearer_demand_leave_no_nonce_in_the_memory(origin: str) -> None:
    codes = await _flood_copies(origin, 24)
    assert codes == {"OK": 24}
    stats = await _stats(origin)
    # Before: 6 144 nonces remembered, a thirtieth of the node-wide memory.
    assert stats["demand_nonces"] == 1  # the honest holder's verified demand only
    assert stats["serves"] >= 24 * 256


@pytest.mark.long
async def test_a2_copies_of_one_bearer_demand_cannot_fill_the_memory_honest_holders_served(
    origin: str,
) -> None:
    calls = MAX_NONCES // 256  # enough copies to fill the memory of before, with the top-up
    codes = await _flood_copies(origin, calls, top_up=300)
    # Before: the top-up's last calls and both honest demands were RESOURCE_EXHAUSTED.
    assert codes == {"OK": calls + 300}
    assert (await _stats(origin))["demand_nonces"] == 1


def _signed_demand(holder: Identity, obligation: Signed[Obligation], at: int) -> bytes:
    return build_demand(holder, obligation, now=at).to_bytes()


async def test_a2_signed_demands_from_many_keys_cannot_lock_out_an_honest_holder(
    tmp_path: Path,
) -> None:
    clock = [time.time()]
    config = NodeConfig(name="o", data_dir=tmp_path / "o", listen="o.mem:1")
    core = await NodeCore.open(
        config,
        load_or_create_identity(config.data_dir),
        transport=InMemoryTransport(),
        clock=lambda: clock[0],
    )
    try:
        _, seqs = await core.append([hop_json(1), hop_json(2)])
        committed = await core.commit_fold("v", seqs)
        obligation = open_statement(committed.obligation, Obligation)
        # A small memory, so the flood is short: the rule is the node's own. The
        # flood is validly signed, from many keys, one demand per millisecond
        # (the real memory's size over a rate the node can verify spans far more
        # than the 500 ms a demand may be dated ahead), each dated 400 ms ahead.
        core.origin.replay.nonces = DemandNonces(capacity=512, per_signer=64, keep_ms=60_000)
        heavy, *keys = [Identity.generate() for _ in range(16)]
        refused = 0
        refusals: set[str] = set()
        for i in range(2_000):
            clock[0] += 0.001
            key = heavy if i % 2 else keys[i % len(keys)]
            try:
                await core.answer_demands([_signed_demand(key, obligation, core.now_ms() + 400)])
            except RequestTooLarge as exc:
                refusals.add(str(exc).split("signer ", 1)[1][:16])  # the signer at its share
                refused += 1
        assert refused > 0
        assert refusals == {heavy.node_id[:16]}  # it alone
        assert len(core.origin.replay.nonces) <= 512
        # An honest holder's demand, made 50 ms ago, is served, and so is its next.
        honest = Identity.generate()
        for _ in range(2):
            demand = _signed_demand(honest, obligation, core.now_ms() - 50)
            (answer,) = await core.answer_demands([demand])
            receipt = open_statement(answer.receipt, Receipt).statement
            assert receipt.status is ReceiptStatus.SERVED
    finally:
        await core.close()


def test_a_full_nonce_memory_forgets_the_lowest_dated_and_refuses_below_its_floor() -> None:
    memory = DemandNonces(capacity=4, per_signer=2, keep_ms=60_000)
    memory.claim([("a", "n1", 100), ("b", "n2", 300)])
    memory.claim([("c", "n3", 200), ("d", "n4", 400)])
    memory.claim([("e", "n5", 500)])  # full: the lowest-dated (100) is forgotten
    assert len(memory) == 4
    assert memory.floor_ms == 100
    assert memory.evicted == 1
    with pytest.raises(DemandPredatesFloor):
        memory.check_floor("a", 100)  # its replay could not be recognised: refused
    memory.check_floor("a", 101)
    with pytest.raises(ReplayedNonce):
        memory.check("c", "n3")
    memory.check("a", "n1")  # forgotten, but below the floor (above)
    memory.claim([("e", "n6", 600)])  # e holds 2 = its share of a full memory
    with pytest.raises(RequestTooLarge, match="its share"):
        memory.claim([("e", "n7", 700)])
    memory.prune(600 + 60_001)
    assert len(memory) == 0
    memory.release([("x", "y", 1)])  # nothing claimed: nothing changes
    memory.claim([("x", "y", 1)])
    memory.release([("x", "y", 1)])
    assert len(memory) == 0
    assert memory.held_by("x") == 0


# --------------------------------------------------------------------------- A3 (real process)


async def test_a3_a_replayed_call_of_256_signed_demands_is_refused_before_any_signature(
    origin: str,
) -> None:
    _, o_bytes = await _legacy_obligation(origin)
    obligation = open_statement(o_bytes, Obligation)
    holder = Identity.generate()
    at = now_ms()
    demands = [_signed_demand(holder, obligation, at) for _ in range(256)]
    envelope, _ = build_demand_batch(
        holder,
        [(obligation.statement, obligation.digest, None)],
        origin=obligation.statement.origin,
        nonce=new_nonce(),
        now=at,
    )
    batch = [envelope.to_bytes()]
    replays = 64
    async with control_channel(origin, None) as chan:
        stub: Any = serve_pb2_grpc.ServeStub(chan)
        for call in (demands, batch):
            reply = await stub.Demand(serve_pb2.DemandRequest(demands=call), timeout=30)
            assert len(reply.answers) == len(call)
        before = (await _stats(origin)).get(DEMAND_VERIFICATIONS, 0)
        assert before == 256 + 1  # each demand verified once, and the batch

        async def replay(chan: grpc.aio.Channel, call: list[bytes]) -> grpc.StatusCode:
            stub: Any = serve_pb2_grpc.ServeStub(chan)
            try:
                await stub.Demand(serve_pb2.DemandRequest(demands=call), timeout=30)
            except grpc.aio.AioRpcError as exc:
                return exc.code()
            return grpc.StatusCode.OK

        # 128 callers, 32 to a connection (a connection carries 64 streams at once).
        own = (("grpc.use_local_subchannel_pool", 1),)
        channels = [control_channel(origin, None, own) for _ in range(4)]
        started = time.monotonic()
        codes = await asyncio.gather(
            *(replay(channels[i % 4], demands if i % 2 else batch) for i in range(2 * replays))
        )
        replay_s = time.monotonic() - started
        for extra in channels:
            await extra.close(None)
        assert set(codes) == {grpc.StatusCode.ALREADY_EXISTS}
        after = (await _stats(origin))[DEMAND_VERIFICATIONS]
        # Before: 256 verifications per replayed call (and 1 per replayed batch).
        assert after - before == 0, (after - before, replay_s)
        # An honest demand is still served.
        fresh = _signed_demand(Identity.generate(), obligation, now_ms())
        assert _served(await stub.Demand(serve_pb2.DemandRequest(demands=[fresh]), timeout=10))


# --------------------------------------------------------------------------- A8 (real processes)


async def _deliver(stub: Any, request: Any) -> grpc.StatusCode:
    for _ in range(100):  # bounded: shed bulk calls are retried after their pushback
        try:
            await stub.Deliver(request, timeout=30)
            return grpc.StatusCode.OK
        except grpc.aio.AioRpcError as exc:
            if exc.code() is not grpc.StatusCode.RESOURCE_EXHAUSTED or "shed" not in (
                exc.details() or ""
            ):
                return exc.code()
            await asyncio.sleep(0.05)
    return grpc.StatusCode.RESOURCE_EXHAUSTED


async def test_a8_one_fresh_keys_deliveries_do_not_evict_the_operators_held_value(
    tmp_path: Path,
) -> None:
    env = {"PROVNET_OPERATOR_KEYS": TEST_OPERATOR.key_id, "PROVNET_DEADLINE_MS": "2000"}
    with (
        node_process(tmp_path, "origin", **env) as (origin, _),
        node_process(tmp_path, "holder", **env) as (holder, _),
    ):
        c_bytes, o_bytes = await _legacy_obligation(origin, b"payload")
        kept = Delivery("op", b"payload", (c_bytes,), (o_bytes,), "")
        async with operator_channel(holder) as chan:
            operator: Any = deliver_pb2_grpc.DeliverStub(chan)
            assert await _deliver(operator, wire.deliver_request(kept)) is grpc.StatusCode.OK
        stranger = Identity.generate()
        codes: dict[str, int] = {}
        async with control_channel(holder, ControlCredentials(stranger)) as chan:
            stub: Any = deliver_pb2_grpc.DeliverStub(chan)
            # The same value_ref: a stranger may not replace the operator's value.
            same = wire.deliver_request(Delivery("op", b"x", (), (), stranger.node_id))
            assert await _deliver(stub, same) is grpc.StatusCode.ALREADY_EXISTS
            todo = iter(range(4_100))

            async def flood() -> None:
                for i in todo:
                    request = wire.deliver_request(
                        Delivery(f"s{i}", b"x", (), (), stranger.node_id)
                    )
                    code = await _deliver(stub, request)
                    assert code not in _BROKEN
                    codes[code.name] = codes.get(code.name, 0) + 1

            await asyncio.gather(*(flood() for _ in range(8)))
        assert codes == {"OK": 4_100}
        stats = await _stats(holder)
        assert stats["held_evicted"] >= 4_100 + 1 - 4_096
        async with operator_channel(holder) as chan:
            operator = deliver_pb2_grpc.DeliverStub(chan)
            reply = await operator.Rehydrate(
                deliver_pb2.RehydrateRequest(value_ref="op"), timeout=30
            )
        # Before: NOT_FOUND (the operator's value was the oldest, evicted first).
        assert [o.outcome for o in reply.outcomes] == ["served"]


def test_held_values_are_evicted_from_the_key_holding_the_most_strangers_first() -> None:
    gone: list[str] = []
    held: HeldValues[str] = HeldValues(
        max_values=4, max_bytes=100, on_evict=lambda ref, _: gone.append(ref)
    )
    held.put("op", "v", 10, by="operator", reserved=True)
    held.put("p1", "v", 10, by="peer", reserved=False)
    for i in range(5):
        held.put(f"s{i}", "v", 1, by="flood", reserved=False)
    # The flooding key evicted its own oldest values; the others kept theirs.
    assert gone == ["s0", "s1", "s2"]
    assert held.get("op") == "v"
    assert held.get("p1") == "v"
    # A reserved delivery evicts strangers first, the one holding the most.
    held.put("op2", "v", 10, by="operator", reserved=True)
    assert gone[-1] == "s3"
    assert held.held_by("operator") == 2
    with pytest.raises(HeldConflict):
        held.put("op", "x", 1, by="flood", reserved=False)
    held.put("op3", "v", 10, by="operator", reserved=True)
    held.put("op4", "v", 10, by="operator", reserved=True)
    # Only reserved values left to evict: a stranger is refused, nothing evicted.
    before = list(gone)
    with pytest.raises(RequestTooLarge, match="full of deliveries"):
        held.put("s9", "v", 1, by="flood", reserved=False)
    assert gone == before
    assert held.get("s9") is None
    # Over the byte cap: the key holding the most bytes gives way.
    held.put("big", "v", 75, by="operator", reserved=True)
    assert held.bytes <= 100
    assert held.get("big") == "v"


# --------------------------------------------------------------------------- control nonces


_NODE = Identity.generate().node_id


def _signed(creds: ControlCredentials, method: str, request: Any) -> tuple[bytes, Any]:
    return request.SerializeToString(), signed_metadata(creds, method, request, target=_NODE)


async def test_a_strangers_signed_control_calls_cannot_fill_the_nonces_the_operator_needs() -> None:
    auth = ControlAuth([TEST_OPERATOR.key_id], node_id=_NODE, max_nonces=64, max_nonces_per_key=16)
    report = "/provnet.v1.Evidence/Report"
    deliver = "/provnet.v1.Deliver/Deliver"
    stranger = ControlCredentials(Identity.generate())
    # Signed with a key the node does not authorise: refused, and nothing recorded.
    for _ in range(100):
        body, meta = _signed(stranger, report, evidence_pb2.ReportRequest(evidence=b"x"))
        with pytest.raises(PermissionDenied):
            await auth.authenticate(report, body, meta)
    # A key delivering as itself may sign Deliver: its share of the memory, then refused.
    refused = 0
    for _ in range(100):
        body, meta = _signed(stranger, deliver, deliver_pb2.DeliverRequest())
        try:
            await auth.authenticate(deliver, body, meta)
        except RequestTooLarge:
            refused += 1
    assert refused == 100 - 16
    # Fresh keys fill what every key the node does not know shares, and no more.
    refused = 0
    for _ in range(60):
        body, meta = _signed(
            ControlCredentials(Identity.generate()), deliver, deliver_pb2.DeliverRequest()
        )
        try:
            await auth.authenticate(deliver, body, meta)
        except RequestTooLarge:
            refused += 1
    assert refused == 60 - (64 - 16)
    # The operator's calls keep their own memory (before: RESOURCE_EXHAUSTED).
    for _ in range(10):
        body, meta = _signed(TEST_OPERATOR, report, evidence_pb2.ReportRequest(evidence=b"x"))
        assert await auth.authenticate(report, body, meta) == TEST_OPERATOR.key_id
    # A replay is refused before its signature is checked, and still refused.
    with pytest.raises(NotAuthenticated, match="replayed"):
        await auth.authenticate(report, body, meta)


# --------------------------------------------------------------------------- witness channels


async def test_a_witness_dialling_strangers_endpoints_keeps_a_bounded_number_of_channels() -> None:
    # A challenge makes the witness dial the endpoints of any obligation it cites, and
    # anyone can sign one naming any address: before, every address got a channel,
    # kept (and reconnecting) for the life of the node.
    transport = GrpcTransport()
    try:
        first = transport.channel("127.0.0.1:1")
        for port in range(2, MAX_CHANNELS + 101):
            transport.channel(f"127.0.0.1:{port}")
        assert len(transport._channels) == MAX_CHANNELS
        assert len(transport._closing) > 0  # the oldest, closing once their calls end
        again = transport.channel("127.0.0.1:1")
        assert again is not first  # made again when used again
    finally:
        await transport.close()
    assert not transport._channels
