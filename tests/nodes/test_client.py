"""The holder's client: one Serve RPC per origin, verified-hop cache, deadlines, classification."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from nodes.client import Outcome
from nodes.faults import FaultMode
from nodes.transport import Answer, CallFailed, InMemoryTransport
from tests.nodes.rpc_support import MemCluster, accusation_audit, single

__all__ = ["accusation_audit"]


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[MemCluster]:
    mem = MemCluster(tmp_path, deadline_ms=750, reasks=1)
    try:
        yield mem
    finally:
        await mem.close()


class Recording(InMemoryTransport):
    """Records each Serve call's address, demand count and timeout."""

    def __init__(self, inner: InMemoryTransport, fail_with: str = "") -> None:
        super().__init__(registry=inner._nodes)
        self.demand_calls: list[tuple[str, int, float]] = []
        self.fail_with = fail_with

    async def demand(self, address: str, demands: Sequence[bytes], timeout: float) -> list[Answer]:
        self.demand_calls.append((address, len(demands), timeout))
        if self.fail_with:
            raise CallFailed(self.fail_with, "injected", address)
        return await super().demand(address, demands, timeout)


class AbortOnce(Recording):
    """Answers the first Serve call ABORTED, as an origin that just restarted would."""

    def __init__(self, inner: InMemoryTransport) -> None:
        super().__init__(inner)
        self.sent: list[bytes] = []

    async def demand(self, address: str, demands: Sequence[bytes], timeout: float) -> list[Answer]:
        self.sent.extend(demands)
        if len(self.sent) == 1:
            self.demand_calls.append((address, len(demands), timeout))
            raise CallFailed("ABORTED", "demand predates restart", address)
        return await super().demand(address, demands, timeout)


class SilentThenAbort(Recording):
    """Silent at the first ask (the origin is down), ABORTED at the second (it came back
    and the demand predates its restart), then the origin as it is."""

    async def demand(self, address: str, demands: Sequence[bytes], timeout: float) -> list[Answer]:
        self.demand_calls.append((address, len(demands), timeout))
        if len(self.demand_calls) == 1:
            raise CallFailed("UNAVAILABLE", "connection refused", address)
        if len(self.demand_calls) == 2:
            raise CallFailed("ABORTED", "demand predates restart", address)
        return await InMemoryTransport.demand(self, address, demands, timeout)


def _record(cluster: MemCluster, holder: str, fail_with: str = "") -> Recording:
    core = cluster.nodes[holder]
    recording = Recording(core.transport, fail_with)  # type: ignore[arg-type]
    core.holder.transport = recording
    return recording


async def test_one_serve_rpc_per_origin_however_many_folds_and_hops(cluster: MemCluster) -> None:
    await cluster.add("a")
    await cluster.add("b")
    await cluster.add("holder")
    recording = _record(cluster, "holder")
    folds = [
        await cluster.fold("a", "merged", 1, first_step=1),
        await cluster.fold("a", "merged", 5, first_step=10),
        await cluster.fold("a", "merged", 50, first_step=100),
        await cluster.fold("b", "merged", 5, first_step=1),
        await cluster.fold("b", "merged", 7, first_step=20),
    ]
    report = await cluster.rehydrate("holder", "merged", folds)
    assert report.complete
    assert len(report.hops) == 1 + 5 + 50 + 5 + 7
    assert sorted((addr, n) for addr, n, _ in recording.demand_calls) == [
        (cluster.address("a"), 3),
        (cluster.address("b"), 2),
    ]
    assert report.demand_rpcs == 2


async def test_verified_hops_are_served_from_cache_without_a_second_rpc(
    cluster: MemCluster,
) -> None:
    await cluster.add("a")
    await cluster.add("holder")
    recording = _record(cluster, "holder")
    fold = await cluster.fold("a", "v", 5)
    first = await cluster.rehydrate("holder", "v", [fold])
    second = await cluster.rehydrate("holder", "v", [fold])
    assert single(first).outcome is Outcome.SERVED
    assert single(second).outcome is Outcome.SERVED
    assert [h.hop for h in first.hops] == [h.hop for h in second.hops]
    assert len(recording.demand_calls) == 1


async def test_demand_deadline_is_the_one_the_obligation_promises(cluster: MemCluster) -> None:
    await cluster.add("a")
    await cluster.add("holder")
    recording = _record(cluster, "holder")
    fold = await cluster.fold("a", "v", 2, deadline_ms=1234)
    await cluster.rehydrate("holder", "v", [fold])
    ((_, _, timeout),) = recording.demand_calls
    assert timeout == pytest.approx(1.234)


async def test_expired_obligation_is_not_demanded_and_not_evidence(cluster: MemCluster) -> None:
    await cluster.add("a")
    await cluster.add("holder")
    recording = _record(cluster, "holder")
    fold = await cluster.fold("a", "v", 2, serve_for_ms=50)
    await asyncio.sleep(0.1)
    outcome = single(await cluster.rehydrate("holder", "v", [fold]))
    assert outcome.outcome is Outcome.EXPIRED
    assert not outcome.accuses
    assert recording.demand_calls == []


async def test_pending_origin_answers_pending_then_serves_once_hops_land(
    cluster: MemCluster,
) -> None:
    origin = await cluster.add("a", provenance_pending=True)
    await cluster.add("holder")
    fold = await cluster.fold("a", "v", 3)
    pending = single(await cluster.rehydrate("holder", "v", [fold]))
    assert pending.outcome is Outcome.PENDING
    assert not pending.accuses
    landed = await origin.store.reconcile(now_ms=origin.now_ms())
    assert landed >= 1
    served = await cluster.rehydrate("holder", "v", [fold])
    assert single(served).outcome is Outcome.SERVED
    assert len(served.hops) == 3


async def test_unsigned_error_status_is_rejected_never_evidence(cluster: MemCluster) -> None:
    await cluster.add("a")
    await cluster.add("holder")
    _record(cluster, "holder", fail_with="INVALID_ARGUMENT")
    fold = await cluster.fold("a", "v", 2)
    outcome = single(await cluster.rehydrate("holder", "v", [fold]))
    assert outcome.outcome is Outcome.REJECTED
    assert outcome.evidence == b""


async def test_failed_precondition_from_origin_reads_as_expired(cluster: MemCluster) -> None:
    await cluster.add("a")
    await cluster.add("holder")
    _record(cluster, "holder", fail_with="FAILED_PRECONDITION")
    fold = await cluster.fold("a", "v", 2)
    outcome = single(await cluster.rehydrate("holder", "v", [fold]))
    assert outcome.outcome is Outcome.EXPIRED
    assert not outcome.accuses


async def test_unreachable_origin_is_suspected_only_once_its_deadline_passed(
    cluster: MemCluster,
) -> None:
    origin = await cluster.add("a")
    await cluster.add("holder")
    fold = await cluster.fold("a", "v", 2)
    cluster.registry.pop(cluster.address("a"))  # the origin is gone: fails fast
    cluster.faults["a"] = FaultMode.CRASH
    started = asyncio.get_running_loop().time()
    outcome = single(await cluster.rehydrate("holder", "v", [fold]))
    waited = asyncio.get_running_loop().time() - started
    cluster.registry[cluster.address("a")] = origin
    assert outcome.outcome is Outcome.UNANSWERED
    assert outcome.asks == 2
    assert not outcome.witness_confirmed
    assert outcome.accuses  # a suspicion, recorded once the demand was due
    assert waited >= 0.75  # the obligation's deadline_ms


async def test_fold_over_stream_threshold_is_streamed_in_its_own_call(
    cluster: MemCluster,
) -> None:
    await cluster.add("a")
    await cluster.add("holder")
    holder = cluster.holder("holder")
    holder.stream_leaves = 10
    transport = holder.transport
    assert isinstance(transport, InMemoryTransport)
    folds = [
        await cluster.fold("a", "v", 5, first_step=1),
        await cluster.fold("a", "v", 8, first_step=10),
        await cluster.fold("a", "v", 50, first_step=100),
    ]
    before = transport.calls
    report = await cluster.rehydrate("holder", "v", folds)
    assert report.complete
    assert len(report.hops) == 5 + 8 + 50
    assert transport.calls - before == 2  # small folds batched, the large one streamed
    assert report.demand_rpcs == 2


async def test_aborted_demand_is_reissued_fresh_and_served(cluster: MemCluster) -> None:
    await cluster.add("a")
    core = await cluster.add("holder")
    aborting = AbortOnce(core.transport)  # type: ignore[arg-type]
    core.holder.transport = aborting
    fold = await cluster.fold("a", "v", 3)
    outcome = single(await cluster.rehydrate("holder", "v", [fold]))
    assert outcome.outcome is Outcome.SERVED
    assert outcome.asks == 2
    first, second = aborting.sent
    assert first != second  # a new demand (new nonce), not the aborted one again


async def test_an_origin_back_from_a_restart_on_the_last_ask_is_asked_once_more(
    cluster: MemCluster,
) -> None:
    # Re-asks spent on an origin that was down, the last one refused ABORTED
    # because the demand predates the restart: that refusal says nothing of the
    # demand, so the holder asks fresh once more instead of ending "rejected".
    await cluster.add("a")
    await cluster.add("holder")
    core = cluster.nodes["holder"]
    transport = SilentThenAbort(core.transport)  # type: ignore[arg-type]
    core.holder.transport = transport
    fold = await cluster.fold("a", "v", 3)
    outcome = single(await cluster.rehydrate("holder", "v", [fold]))
    assert outcome.outcome is Outcome.SERVED, outcome.detail
    assert len(transport.demand_calls) == 3


class AlwaysAbort(Recording):
    """Every ask ABORTED: an origin back from a restart whose floor is still ahead of
    the holder's fresh demands (nodes.future_floors: a global floor after a flood)."""

    async def demand(self, address: str, demands: Sequence[bytes], timeout: float) -> list[Answer]:
        self.demand_calls.append((address, len(demands), timeout))
        raise CallFailed("ABORTED", "demand predates restart; issue a fresh demand", address)


async def test_an_origin_that_only_answers_aborted_answered_a_status_it_is_not_silent(
    cluster: MemCluster,
) -> None:
    # Nothing but ABORTED, fresh demands included: explicit statuses, each an answer
    # (nodes.noanswer), so the holder records what the origin said, never "unanswered".
    await cluster.add("a")
    await cluster.add("holder")
    core = cluster.nodes["holder"]
    transport = AlwaysAbort(core.transport)  # type: ignore[arg-type]
    core.holder.transport = transport
    fold = await cluster.fold("a", "v", 3)
    outcome = single(await cluster.rehydrate("holder", "v", [fold]))
    assert outcome.outcome is Outcome.REJECTED, outcome.detail
    assert "ABORTED" in outcome.detail
    assert len(transport.demand_calls) >= 2  # asked fresh after the first refusal
