"""Sign where it carries information (design revision 3): the unsigned first ask.

* a faithful rehydration signs and verifies nothing, in either node, in
  process and over gRPC;
* an origin whose unsigned answer is wrong but whose signed answer is right
  is never accused, and is asked signed first for ``SIGNED_FIRST_S``;
* evidence is built from signed statements only: an unsigned answer never
  reaches an evidence file;
* an unsigned ask moves no persistent state (no nonce, no replay floor, no
  future-nonce floor, no counter written), whatever is asked and how often;
* asks are sized before anything is looked up, and an origin answers empty
  (no hops, no receipt) whatever it will not serve unsigned.
"""

from __future__ import annotations

import base64
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from contracts.ask import ASK_BYTES, FoldAsk, pack_asks
from contracts.evidence import EvidenceKind, verify_evidence
from contracts.heads import FoldProof, HeadCache, VerifiedFold
from contracts.serve import build_demand
from contracts.signed import open_statement
from contracts.statements import Receipt, ReceiptStatus
from nodes import client
from nodes.client import HeldFold, Holder, Outcome
from nodes.errors import MalformedRequest, RequestTooLarge
from nodes.faults import Honest, Refuse, tamper_bytes
from nodes.messages import Answer
from nodes.services import FUTURE_NONCES_FILENAME, REPLAY_FLOOR_FILENAME, NodeCore
from tests.nodes.rpc_support import (
    MemCluster,
    audit,
    ed25519_counts,
    grpc_holder,
    grpc_node,
    hop_json,
    single,
    stop_all,
)


class _LiesUnsigned(Honest):
    """Serves altered bytes to unsigned asks, the stored bytes to signed demands."""

    def unsigned_hops(self, commitment_digest: str, leaves: tuple[bytes, ...]) -> tuple[bytes, ...]:
        return tuple(tamper_bytes(leaf) for leaf in leaves)


#: Bytes no honest hop has: if they show up in an evidence file, an unsigned answer did.
_FORGED = b'{"forged":"unsigned answer"}'


class _ForgesUnsignedRefusesSigned(Refuse):
    """Forged hops to unsigned asks; a signed refusal to signed demands."""

    def unsigned_hops(self, commitment_digest: str, leaves: tuple[bytes, ...]) -> tuple[bytes, ...]:
        return tuple(_FORGED for _ in leaves)


#: The shared ``cluster`` fixture (tests/nodes/conftest.py) with no re-ask: a
#: failed ask is judged at once.
CLUSTER_REASKS = 0


async def _head_fold(core: NodeCore, ref: str = "v", hops: int = 5, first: int = 1) -> HeldFold:
    """One fold committed under a signed head, verified once as a holder would."""
    _, seqs = await core.append([hop_json(first + i) for i in range(hops)])
    out = await core.commit_compaction([(ref, list(seqs), b"")])
    fold: VerifiedFold = HeadCache().verify_fold(
        FoldProof.from_bytes(out.fold_proofs[0]), now=core.now_ms(), head=out.head
    )
    return HeldFold(fold.commitment, fold.obligation, out.fold_proofs[0], out.head, fold)


def _ask_bytes(held: HeldFold) -> bytes:
    assert held.fold is not None
    return pack_asks([FoldAsk.for_fold(held.fold)])


def _shared_clock(*cores: NodeCore) -> tuple[Callable[[], float], list[float]]:
    """A clock the holder and ``cores`` share, moved on by adding to ``offset[0]``."""
    offset = [0.0]

    def clock() -> float:
        return time.time() + offset[0]

    for core in cores:
        core.clock = clock
    return clock, offset


async def test_a_faithful_rehydration_over_grpc_signs_and_verifies_nothing(
    tmp_path: Path,
) -> None:
    origin = await grpc_node(tmp_path, "origin")
    holder = grpc_holder(tmp_path, origin.core.transport, reasks=0)  # type: ignore[arg-type]
    try:
        held = await _head_fold(origin.core)
        with ed25519_counts() as counts:  # the origin's server runs in this process
            for _ in range(10):
                report = audit(await holder.rehydrate("v", [held]), {origin.core.node_id})
                outcome = single(report)
                assert outcome.outcome is Outcome.SERVED, outcome.detail
        assert counts == {"sign": 0, "verify": 0}
        stored = await origin.core.store.resolve(
            held.commitment.digest, now_ms=origin.core.now_ms()
        )
        assert [h.hop for h in report.hops] == list(stored.leaves)
        assert holder.unsigned_asks == 1  # then from the holder's hop cache
        assert (await origin.core.stats())["open_serves"] == 1
    finally:
        await stop_all([origin])


async def test_an_origin_lying_unsigned_but_right_signed_is_not_accused_and_asked_signed_first(
    cluster: MemCluster, tmp_path: Path
) -> None:
    origin = await cluster.add("origin")
    node = await cluster.add("holder")
    origin.behaviour = _LiesUnsigned()  # still a correct origin: its signed answers are right
    clock, offset = _shared_clock(origin, node)
    evidence = tmp_path / "evidence"
    holder = Holder(
        node.identity, node.transport, cache=False, reasks=0, evidence_dir=evidence, clock=clock
    )
    held = await _head_fold(origin)
    stored = await origin.store.resolve(held.commitment.digest, now_ms=origin.now_ms())
    with ed25519_counts() as counts:
        report = audit(await holder.rehydrate("v", [held]), cluster.correct_ids())
    outcome = single(report)
    assert outcome.outcome is Outcome.SERVED, outcome.detail
    assert outcome.evidence == b""
    assert [h.hop for h in report.hops] == list(stored.leaves)  # the signed answer's bytes
    assert counts == {"sign": 2, "verify": 0}  # the signed re-ask and its receipt
    assert report.demand_rpcs == 2  # the unsigned ask, then the signed demand
    assert not evidence.exists() or not any(evidence.iterdir())
    # Asked signed first from now on: one round trip per decision, not two.
    for _ in range(3):
        again = audit(await holder.rehydrate("v", [held]), cluster.correct_ids())
        assert single(again).outcome is Outcome.SERVED
        assert again.demand_rpcs == 1
    assert holder.unsigned_asks == 1
    # Once SIGNED_FIRST_S has passed, the origin is asked unsigned again.
    offset[0] = client.SIGNED_FIRST_S + 1
    later = audit(await holder.rehydrate("v", [held]), cluster.correct_ids())
    assert single(later).outcome is Outcome.SERVED
    assert holder.unsigned_asks == 2
    assert not evidence.exists() or not any(evidence.iterdir())


async def test_unsigned_answers_never_reach_an_evidence_file(
    cluster: MemCluster, tmp_path: Path
) -> None:
    origin = await cluster.add("origin")
    node = await cluster.add("holder")
    origin.behaviour = _ForgesUnsignedRefusesSigned(origin.identity)
    evidence = tmp_path / "evidence"
    holder = Holder(node.identity, node.transport, cache=False, reasks=0, evidence_dir=evidence)
    held = await _head_fold(origin)
    report = await holder.rehydrate("v", [held])
    outcome = single(report)
    # The proof is the signed refusal the signed re-ask got, not the forged bytes.
    assert outcome.outcome is Outcome.REFUSED, outcome.detail
    verdict = verify_evidence(outcome.evidence, now=origin.now_ms())
    assert (verdict.kind, verdict.accused) == (EvidenceKind.REFUSED, origin.node_id)
    files = list(evidence.iterdir())
    assert len(files) == 1
    body = files[0].read_bytes()
    assert body == outcome.evidence
    for form in (_FORGED, base64.b64encode(_FORGED), base64.urlsafe_b64encode(_FORGED)):
        assert form not in body
    assert report.hops == ()


async def test_a_flood_of_unsigned_asks_moves_no_persistent_state(cluster: MemCluster) -> None:
    origin = await cluster.add("origin")
    held = await _head_fold(origin)
    valid = _ask_bytes(held)
    data_dir = origin.config.data_dir
    files = (data_dir / REPLAY_FLOOR_FILENAME, data_dir / FUTURE_NONCES_FILENAME)
    before = [p.read_bytes() if p.exists() else None for p in files]
    counters = await origin.store.counters()
    with ed25519_counts() as counts:
        for i in range(300):
            strangers = pack_asks(
                [FoldAsk(os.urandom(32).hex(), os.urandom(32).hex()) for _ in range(8)]
            )
            asks = valid + strangers if i % 2 else strangers + valid
            answers = await origin.answer_asks(asks)
            assert len(answers) == 9
            assert sum(1 for a in answers if a.hops) == 1
            assert all(a.receipt == b"" and a.commitment == b"" for a in answers)
    assert counts == {"sign": 0, "verify": 0}
    assert [p.read_bytes() if p.exists() else None for p in files] == before
    assert len(origin.origin.replay.nonces) == 0
    assert origin.floor_writes == 0
    assert await origin.store.counters() == counters  # not even a counter to persist
    stats = await origin.stats()
    assert (stats["open_serves"], stats["open_declined"]) == (300, 2400)
    # The flood left nothing behind that refuses an honest holder's signed demand.
    holder = await cluster.add("holder")
    demand = build_demand(holder.identity, held.obligation, now=origin.now_ms())
    (answer,) = await origin.answer_demands([demand.to_bytes()])
    receipt = open_statement(answer.receipt, Receipt, signer=origin.node_id).statement
    assert receipt.status is ReceiptStatus.SERVED


async def test_asks_are_sized_before_anything_is_looked_up(
    cluster: MemCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    origin = await cluster.add("origin")
    held = await _head_fold(origin)
    looked: list[str] = []
    real = origin.store.head_fold

    async def counted(head: str, leaf: str) -> object:
        looked.append(head)
        return await real(head, leaf)

    monkeypatch.setattr(origin.store, "head_fold", counted)
    valid = _ask_bytes(held)
    with pytest.raises(MalformedRequest, match="not a multiple"):
        await origin.answer_asks(valid + b"\x00")
    with pytest.raises(MalformedRequest, match="empty"):
        await origin.answer_asks(b"")
    with pytest.raises(MalformedRequest, match="twice"):
        await origin.answer_asks(valid + valid)
    with pytest.raises(RequestTooLarge):
        await origin.answer_asks(bytes(ASK_BYTES * 257))
    assert looked == []


async def test_what_an_origin_will_not_serve_unsigned_is_answered_empty(
    cluster: MemCluster,
) -> None:
    pending = await cluster.add("pending", provenance_pending=True)
    held = await _head_fold(pending)
    counters = await pending.store.counters()
    (answer,) = await pending.answer_asks(_ask_bytes(held))
    assert answer.hops == ()  # PENDING comes signed, if asked signed
    assert answer.receipt == b""
    assert await pending.store.counters() == counters  # no pending_answers counted
    origin = await cluster.add("origin")
    held = await _head_fold(origin)
    _, offset = _shared_clock(origin)
    offset[0] = (held.obligation.statement.serve_until - origin.now_ms()) / 1000 + 1
    (answer,) = await origin.answer_asks(_ask_bytes(held))
    assert answer.hops == ()  # expired: the signed answer says EXPIRED
    # Another origin's head is not ours to answer for.
    (answer,) = await pending.answer_asks(_ask_bytes(held))
    assert answer.hops == ()


async def test_a_holder_whose_unsigned_ask_is_refused_demands_signed_and_remembers(
    cluster: MemCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    origin = await cluster.add("origin")
    node = await cluster.add("holder")
    held = await _head_fold(origin)

    async def unread(asks: bytes) -> list[object]:  # an origin that cannot read an ask
        raise MalformedRequest("demand: no demands given")

    monkeypatch.setattr(origin, "answer_asks", unread)
    holder = Holder(node.identity, node.transport, cache=False, reasks=0)
    report = audit(await holder.rehydrate("v", [held]), cluster.correct_ids())
    assert single(report).outcome is Outcome.SERVED
    assert report.demand_rpcs == 2
    report = audit(await holder.rehydrate("v", [held]), cluster.correct_ids())
    assert report.demand_rpcs == 1  # signed first


async def _answered_once(cluster: MemCluster) -> tuple[NodeCore, HeldFold, bytes, Answer]:
    """An origin with one fold under a head, its ask, and the ask answered once."""
    origin = await cluster.add("origin")
    held = await _head_fold(origin)
    asks = _ask_bytes(held)
    (answer,) = await origin.answer_asks(asks)
    return origin, held, asks, answer


async def test_an_ask_is_answered_again_from_memory_only_while_the_promise_runs(
    cluster: MemCluster,
) -> None:
    origin, held, asks, first = await _answered_once(cluster)
    (again,) = await origin.answer_asks(asks)
    assert again is first  # kept, not read and built again
    assert len(first.hops) == 5
    _, offset = _shared_clock(origin)
    offset[0] = (held.obligation.statement.serve_until - origin.now_ms()) / 1000 + 1
    (late,) = await origin.answer_asks(asks)
    assert late.hops == ()  # the kept answer ends with the promise
    stats = await origin.stats()
    assert (stats["open_serves"], stats["open_declined"]) == (2, 1)


async def test_a_fault_set_after_an_honest_answer_answers_for_itself(
    cluster: MemCluster,
) -> None:
    origin, held, asks, honest = await _answered_once(cluster)
    origin.behaviour = _LiesUnsigned()
    (lied,) = await origin.answer_asks(asks)
    assert lied.hops == tuple(tamper_bytes(h) for h in honest.hops)
    origin.behaviour = Honest()
    (restored,) = await origin.answer_asks(_ask_bytes(held))
    assert restored is honest  # what the fault answered was never kept
