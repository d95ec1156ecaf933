"""Every fault mode yields the right outcome, and a correct origin is never accused (S2–S4, S8).

In-process nodes over the in-memory transport (the same NodeCore code the
gRPC server runs); a few modes are repeated over real gRPC in test_server.
"""

from __future__ import annotations

import asyncio

from contracts.evidence import EvidenceStatus, verify_evidence
from nodes.client import Outcome
from nodes.faults import Equivocate, FaultMode
from tests.nodes.rpc_support import AUDIT, MemCluster, accusation_audit, single

__all__ = ["accusation_audit"]


async def _value_from(cluster: MemCluster, fault: FaultMode, delay_ms: int = 0) -> Outcome:
    await cluster.add("origin", fault, delay_ms)
    await cluster.add("holder")
    await cluster.add("witness")
    fold = await cluster.fold("origin", "v1", 5)
    report = await cluster.rehydrate("holder", "v1", [fold], witnesses=["witness"])
    return single(report).outcome


async def test_correct_origin_serves_verified_hops_and_is_not_accused(cluster: MemCluster) -> None:
    await cluster.add("origin")
    await cluster.add("holder")
    fold = await cluster.fold("origin", "v1", 5)
    report = await cluster.rehydrate("holder", "v1", [fold])
    outcome = single(report)
    assert outcome.outcome is Outcome.SERVED
    assert not outcome.accuses
    assert [h.leaf_index for h in report.hops] == [0, 1, 2, 3, 4]
    assert report.demand_rpcs == 1


async def test_tamper_yields_bad_data_proof_written_as_file(cluster: MemCluster) -> None:
    assert await _value_from(cluster, FaultMode.TAMPER) is Outcome.BAD_DATA
    files = list((cluster.root / "holder" / "evidence").glob("bad_data-*.json"))
    assert len(files) == 1
    verdict = verify_evidence(files[0].read_bytes(), now=cluster.nodes["holder"].now_ms())
    assert verdict.is_proof
    assert verdict.accused == cluster.nodes["origin"].node_id


async def test_refuse_before_expiry_yields_refused_proof(cluster: MemCluster) -> None:
    assert await _value_from(cluster, FaultMode.REFUSE) is Outcome.REFUSED


async def test_equivocate_yields_equivocation_proof(cluster: MemCluster) -> None:
    assert await _value_from(cluster, FaultMode.EQUIVOCATE) is Outcome.EQUIVOCATION


async def test_drop_is_unanswered_then_confirmed_by_witness(cluster: MemCluster) -> None:
    await cluster.add("origin", FaultMode.DROP)
    await cluster.add("holder")
    await cluster.add("witness")
    fold = await cluster.fold("origin", "v1", 5)
    outcome = single(await cluster.rehydrate("holder", "v1", [fold], witnesses=["witness"]))
    assert outcome.outcome is Outcome.UNANSWERED
    assert outcome.asks == 2  # the first ask and one re-ask
    assert outcome.witness_confirmed
    assert outcome.witnesses_unanswered == 1
    verdict = verify_evidence(outcome.evidence, now=cluster.nodes["holder"].now_ms())
    assert verdict.status is EvidenceStatus.WITNESS_CONFIRMED
    assert not verdict.is_proof  # silence is a suspicion, never proof


async def test_drop_without_witness_stays_an_unconfirmed_suspicion(cluster: MemCluster) -> None:
    await cluster.add("origin", FaultMode.DROP)
    await cluster.add("holder")
    fold = await cluster.fold("origin", "v1", 3)
    outcome = single(await cluster.rehydrate("holder", "v1", [fold]))
    assert outcome.outcome is Outcome.UNANSWERED
    assert not outcome.witness_confirmed
    verdict = verify_evidence(outcome.evidence, now=cluster.nodes["holder"].now_ms())
    assert verdict.status is EvidenceStatus.SUSPECTED


async def test_slow_within_deadline_is_served(cluster: MemCluster) -> None:
    assert await _value_from(cluster, FaultMode.SLOW, delay_ms=60) is Outcome.SERVED


async def test_slow_past_deadline_is_unanswered(cluster: MemCluster) -> None:
    assert await _value_from(cluster, FaultMode.SLOW, delay_ms=600) is Outcome.UNANSWERED


async def test_crash_on_demand_is_unanswered_and_witness_confirmed(cluster: MemCluster) -> None:
    await cluster.add("origin", FaultMode.CRASH)
    await cluster.add("holder")
    await cluster.add("witness")
    fold = await cluster.fold("origin", "v1", 2)
    outcome = single(await cluster.rehydrate("holder", "v1", [fold], witnesses=["witness"]))
    assert cluster.nodes["origin"].crashed
    assert outcome.outcome is Outcome.UNANSWERED
    assert outcome.witness_confirmed


async def test_partitioned_correct_origin_is_cleared_by_witness_answer(
    cluster: MemCluster,
) -> None:
    # The holder cannot reach a correct origin; a witness can, and its receipt
    # clears the suspicion: no accusation, no evidence file.
    await cluster.add("origin")
    holder = await cluster.add("holder")
    await cluster.add("witness")
    holder.transport.blocked.add(cluster.address("origin"))  # type: ignore[attr-defined]
    fold = await cluster.fold("origin", "v1", 4)
    outcome = single(await cluster.rehydrate("holder", "v1", [fold], witnesses=["witness"]))
    assert outcome.outcome is Outcome.UNANSWERED
    assert outcome.cleared
    assert not outcome.accuses
    assert outcome.evidence_path == ""
    assert not (cluster.root / "holder" / "evidence").exists()


async def test_served_after_faulty_peer_in_same_decision_keeps_outcomes_per_origin(
    cluster: MemCluster,
) -> None:
    await cluster.add("good")
    await cluster.add("bad", FaultMode.TAMPER)
    await cluster.add("holder")
    folds = [await cluster.fold("good", "merged", 3), await cluster.fold("bad", "merged", 3)]
    report = await cluster.rehydrate("holder", "merged", folds)
    by_origin = {o.origin: o.outcome for o in report.outcomes}
    assert by_origin == {
        cluster.nodes["good"].node_id: Outcome.SERVED,
        cluster.nodes["bad"].node_id: Outcome.BAD_DATA,
    }
    assert report.demand_rpcs == 2  # one per origin


async def test_two_commitments_for_one_fold_delivered_to_a_holder_are_equivocation(
    cluster: MemCluster,
) -> None:
    from contracts.serve import build_obligation
    from nodes.transport import Delivery

    origin = await cluster.add("origin", FaultMode.EQUIVOCATE)
    holder = await cluster.add("holder")
    fold = await cluster.fold("origin", "v1", 3)
    assert isinstance(origin.behaviour, Equivocate)
    (alt,) = origin.behaviour._second.values()
    alt_obligation = build_obligation(
        origin.identity,
        alt.commitment,
        serve_until=origin.now_ms() + 60_000,
        deadline_ms=300,
        endpoints=(origin.advertised,),
        issued_at=origin.now_ms(),
    )
    first = Delivery("v1", b"x", (fold.commitment_bytes,), (fold.obligation_bytes,))
    second = Delivery("v1-copy", b"x", (alt.commitment.to_bytes(),), (alt_obligation.to_bytes(),))
    await holder.deliver(first)
    await holder.deliver(second)
    (path,) = (cluster.root / "holder" / "evidence").glob("equivocation-*.json")
    verdict = verify_evidence(path.read_bytes(), now=holder.now_ms())
    assert verdict.is_proof
    assert verdict.accused == origin.node_id
    assert (await holder.stats())["evidence_equivocation"] == 1


async def test_equivocation_is_caught_after_the_first_commitment_was_delivered_again_and_again(
    cluster: MemCluster,
) -> None:
    # A holder skips re-checking pairs it has kept; a second commitment for the
    # same fold is a new pair and must still be checked against the kept one.
    from contracts.serve import build_obligation
    from nodes.transport import Delivery

    origin = await cluster.add("origin", FaultMode.EQUIVOCATE)
    holder = await cluster.add("holder")
    fold = await cluster.fold("origin", "v1", 3)
    assert isinstance(origin.behaviour, Equivocate)
    (alt,) = origin.behaviour._second.values()
    alt_obligation = build_obligation(
        origin.identity,
        alt.commitment,
        serve_until=origin.now_ms() + 60_000,
        deadline_ms=300,
        endpoints=(origin.advertised,),
        issued_at=origin.now_ms(),
    )
    first = Delivery("v1", b"x", (fold.commitment_bytes,), (fold.obligation_bytes,))
    for _ in range(3):
        assert (await holder.deliver(first)).received_at > 0
    assert (await holder.stats()).get("evidence_equivocation", 0) == 0
    second = Delivery("v1-copy", b"x", (alt.commitment.to_bytes(),), (alt_obligation.to_bytes(),))
    await holder.deliver(second)
    await holder.deliver(second)  # kept now: not reported twice
    assert (await holder.stats())["evidence_equivocation"] == 1
    assert len(list((cluster.root / "holder" / "evidence").glob("equivocation-*.json"))) == 1


async def test_audit_counts_faulty_accusations_and_no_correct_ones(cluster: MemCluster) -> None:
    before = AUDIT.accusations
    await cluster.add("good")
    await cluster.add("bad", FaultMode.REFUSE)
    await cluster.add("holder")
    folds = [await cluster.fold("good", "v", 2), await cluster.fold("bad", "v", 2)]
    await cluster.rehydrate("holder", "v", folds)
    assert AUDIT.accusations == before + 1
    assert AUDIT.correct_accused == []


async def test_concurrent_commits_of_one_value_get_consecutive_fold_seqs(
    cluster: MemCluster,
) -> None:
    from contracts.signed import open_statement
    from contracts.statements import Commitment
    from tests.nodes.rpc_support import hop_json

    origin = await cluster.add("origin")
    _, seqs = await origin.append([hop_json(i) for i in range(1, 9)])
    folds = await asyncio.gather(
        *(origin.commit_fold("v", seqs[i : i + 2]) for i in range(0, 8, 2))
    )
    fold_seqs = sorted(open_statement(f.commitment, Commitment).statement.fold_seq for f in folds)
    assert fold_seqs == [0, 1, 2, 3]
