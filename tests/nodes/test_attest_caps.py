"""Attestation storage is bounded, and strangers cannot crowd out attesters that matter.

``Attest.Submit`` is open to any network caller and keys are free. Kept
attestations are split into a reserved pool (this node, its operator keys,
peers' pinned keys, attesters that answered this node's own ``Restore``) and
a smaller stranger pool that evicts its expired, then oldest, entries when
full. ``expires_at`` is bounded and the reaper deletes expired attestations.

The pool caps are module constants; the in-process tests shrink them (the
real figures would take minutes of submissions to fill). The process tests
run a real ``provnet node``.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from contracts.attest import build_attestation
from contracts.identity import Identity
from contracts.signed import Signed
from contracts.statements import Attestation, Axis
from nodes import attestations
from nodes._pb.provnet.v1 import attest_pb2, attest_pb2_grpc
from nodes.app import load_or_create_identity
from nodes.attester import AttestationAnswer, IssuedAttestation
from nodes.config import NodeConfig, Peer
from nodes.errors import PromiseOutOfRange, RequestTooLarge
from nodes.reaper import Reaper
from nodes.services import NodeCore
from nodes.store import DB_FILENAME
from nodes.transport import InMemoryTransport
from tests.nodes.node_process import node_process

pytestmark = pytest.mark.timeout(120)

NOW_MS = 1_900_000_000_000
HOUR_MS = 3_600_000


class Clock:
    def __init__(self) -> None:
        self.ms = NOW_MS

    def __call__(self) -> float:
        return self.ms / 1000


def attestation(
    who: Identity, n: int = 0, *, now_ms: int = NOW_MS, lifetime_ms: int = HOUR_MS
) -> Signed[Attestation]:
    return build_attestation(
        who,
        value_digest=f"{n:064x}",
        axis=Axis.VERIFICATION,
        floor=0.5,
        issued_at=now_ms,
        expires_at=now_ms + lifetime_ms,
    )


#: The stranger pool's documented count cap (``attestations.MAX_STRANGER_ATTESTATIONS``).
STRANGER_POOL = 4096
HONEST = Identity.from_seed(b"provnet-test-honest-attester-key")


@pytest.fixture
async def core(tmp_path: Path) -> AsyncIterator[tuple[NodeCore, Clock]]:
    clock = Clock()
    config = NodeConfig(
        name="h",
        data_dir=tmp_path / "h",
        listen="h.mem:1",
        peers=(Peer(name="att", address="att.mem:1", node_id=HONEST.node_id),),
    )
    node = await NodeCore.open(
        config, load_or_create_identity(config.data_dir), transport=InMemoryTransport(), clock=clock
    )
    try:
        yield node, clock
    finally:
        await node.close()


def _usage(node: NodeCore) -> tuple[int, int]:
    """Attestations in the node's database file and their bytes (read from outside)."""
    with sqlite3.connect(node.config.data_dir / DB_FILENAME, timeout=5) as db:
        row = db.execute(
            "SELECT COUNT(*), COALESCE(SUM(LENGTH(envelope)), 0) FROM attestations"
        ).fetchone()
    return int(row[0]), int(row[1])


@pytest.fixture
def small_pools(monkeypatch: pytest.MonkeyPatch) -> None:
    # on the old code only MAX_ATTESTATIONS exists: "all attestations" capped at 8
    monkeypatch.setattr(attestations, "MAX_ATTESTATIONS", 8)
    monkeypatch.setattr(attestations, "MAX_STRANGER_ATTESTATIONS", 4)


@pytest.mark.usefixtures("small_pools")
async def test_fresh_keys_filling_the_stranger_pool_do_not_refuse_a_known_attester(
    core: tuple[NodeCore, Clock],
) -> None:
    node, clock = core
    flood = [attestation(Identity.generate(), i) for i in range(20)]
    for signed in flood:
        clock.ms += 1
        with contextlib.suppress(RequestTooLarge):  # the old code refuses strangers at 8
            await node.submit_attestation(signed.to_bytes())
    honest = [attestation(HONEST, 100 + i) for i in range(3)]
    for signed in honest:
        assert await node.submit_attestation(signed.to_bytes()) == signed.digest
    for signed in honest:
        assert await node.list_attestations(signed.statement.value_digest) == (signed.to_bytes(),)
    # the stranger pool held its cap, keeping the newest strangers
    count, _ = _usage(node)
    assert count == 4 + len(honest)
    assert await node.list_attestations(flood[0].statement.value_digest) == ()
    assert await node.list_attestations(flood[-1].statement.value_digest) == (flood[-1].to_bytes(),)


@pytest.mark.usefixtures("small_pools")
async def test_an_attester_this_node_asked_uses_the_reserved_pool(
    core: tuple[NodeCore, Clock],
) -> None:
    node, clock = core
    asked = Identity.generate()
    for i in range(4):
        clock.ms += 1
        await node.submit_attestation(attestation(Identity.generate(), i).to_bytes())
    first = attestation(asked, 50)
    await node.submit_attestation(first.to_bytes())  # a stranger yet: evicts the oldest
    assert await node.list_attestations(first.statement.value_digest) == (first.to_bytes(),)
    node.attestations.remember_attesters(AttestationAnswer((IssuedAttestation(first.to_bytes()),)))
    assert asked.node_id in node.reserved_attesters()
    for i in range(10):
        clock.ms += 1
        await node.submit_attestation(attestation(Identity.generate(), 10 + i).to_bytes())
    # strangers kept flooding; the asked attester's attestation was never displaced
    assert await node.list_attestations(first.statement.value_digest) == (first.to_bytes(),)


@pytest.mark.usefixtures("small_pools")
async def test_a_full_reserved_pool_refuses_and_evicts_nothing(
    core: tuple[NodeCore, Clock],
) -> None:
    node, _ = core
    mine = [attestation(HONEST, i) for i in range(8)]
    for signed in mine:
        await node.submit_attestation(signed.to_bytes())
    with pytest.raises(RequestTooLarge, match="reserved pool holds 8 attestations"):
        await node.submit_attestation(attestation(HONEST, 99).to_bytes())
    assert await node.list_attestations(mine[0].statement.value_digest) == (mine[0].to_bytes(),)


async def test_stranger_pool_bytes_stay_under_the_cap(
    core: tuple[NodeCore, Clock], monkeypatch: pytest.MonkeyPatch
) -> None:
    node, clock = core
    size = len(attestation(Identity.generate()).to_bytes())
    cap = 5 * size + size // 2
    monkeypatch.setattr(attestations, "MAX_STRANGER_ATTESTATION_BYTES", cap)
    # on the old code nothing bounds bytes: a stranger's submissions are all kept
    for i in range(30):
        clock.ms += 1
        await node.submit_attestation(attestation(Identity.generate(), i).to_bytes())
        count, used = _usage(node)
        assert used <= cap, f"after {i + 1} submissions: {count} kept, {used} > {cap} bytes"
    assert count == 5


async def test_expires_at_beyond_the_longest_lifetime_is_out_of_range(
    core: tuple[NodeCore, Clock],
) -> None:
    node, _ = core
    bound = attestations.MAX_ATTESTATION_LIFETIME_MS
    ok = attestation(Identity.generate(), lifetime_ms=bound)
    assert await node.submit_attestation(ok.to_bytes()) == ok.digest
    far = attestation(Identity.generate(), 1, lifetime_ms=bound + 1)
    with pytest.raises(PromiseOutOfRange, match="expires_at"):
        await node.submit_attestation(far.to_bytes())
    assert await node.list_attestations(far.statement.value_digest) == ()
    # a stranger cannot move the bound by dating its attestation in the future
    later = attestation(Identity.generate(), 2, now_ms=NOW_MS + 365 * 24 * HOUR_MS)
    with pytest.raises(PromiseOutOfRange, match="issued_at"):
        await node.submit_attestation(later.to_bytes())
    # a known attester dates by its own clock (the reserved pool's caps bound it)
    known = attestation(HONEST, 3, now_ms=NOW_MS + 365 * 24 * HOUR_MS)
    assert await node.submit_attestation(known.to_bytes()) == known.digest


async def test_the_reaper_deletes_expired_attestations(core: tuple[NodeCore, Clock]) -> None:
    node, clock = core
    short = attestation(Identity.generate(), 1, lifetime_ms=1_000)
    long = attestation(Identity.generate(), 2)
    await node.submit_attestation(short.to_bytes())
    await node.submit_attestation(long.to_bytes())
    reaper = Reaper(node.store, clock=node.now_ms)
    await reaper.run_once()
    assert _usage(node)[0] == 2
    clock.ms += 1_000
    await reaper.run_once()
    count, used = _usage(node)
    assert (count, used) == (1, len(long.to_bytes()))
    assert reaper.stats.attestations_reaped == 1


# ---------------------------------------------------------------- a real node process


def _kept(data_dir: Path) -> int:
    with sqlite3.connect(data_dir / DB_FILENAME, timeout=5) as db:
        return int(db.execute("SELECT COUNT(*) FROM attestations").fetchone()[0])


def _node_process(
    root: Path, **env_extra: str
) -> contextlib.AbstractContextManager[tuple[str, Path]]:
    """One ``provnet node`` process on loopback: its address and data dir."""
    return node_process(root, "solo", **env_extra)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A node process that reaps every 0.2 s."""
    with _node_process(tmp_path, PROVNET_REAP_INTERVAL_S="0.2") as running:
        yield running


async def test_a_node_process_refuses_far_expiry_and_reaps_expired(
    node: tuple[str, Path],
) -> None:
    address, data_dir = node
    stranger = Identity.generate()
    now = int(time.time() * 1000)
    async with grpc.aio.insecure_channel(address) as chan:
        stub: Any = attest_pb2_grpc.AttestStub(chan)
        far = attestation(stranger, 1, now_ms=now, lifetime_ms=10 * 365 * 24 * HOUR_MS)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.Submit(
                attest_pb2.SubmitAttestationRequest(attestation=far.to_bytes()), timeout=10
            )
        assert refused.value.code() is grpc.StatusCode.OUT_OF_RANGE
        assert "expires_at" in str(refused.value.details())
        short = attestation(stranger, 2, now_ms=now, lifetime_ms=2_000)
        await stub.Submit(
            attest_pb2.SubmitAttestationRequest(attestation=short.to_bytes()), timeout=10
        )
    assert _kept(data_dir) == 1
    give_up = time.monotonic() + 20
    while _kept(data_dir) and time.monotonic() < give_up:
        await asyncio.sleep(0.1)
    assert _kept(data_dir) == 0, "the expired attestation is still stored"


@pytest.mark.long
async def test_a_node_process_flooded_by_fresh_keys_keeps_a_known_attester(
    tmp_path: Path,
) -> None:
    """The real caps against a real process: 5 000 strangers, then a pinned peer's key."""
    honest_peer = f"att=127.0.0.1:1,{HONEST.node_id}"
    with _node_process(tmp_path, PROVNET_PEERS=honest_peer) as (address, data_dir):
        now = int(time.time() * 1000)
        flood = [
            attestation(Identity.generate(), i, now_ms=now).to_bytes()
            for i in range(STRANGER_POOL + 900)
        ]
        async with grpc.aio.insecure_channel(address) as chan:
            stub: Any = attest_pb2_grpc.AttestStub(chan)
            # two at a time: Submit is a bulk call and each reserves a message's
            # budget (8 MiB = two 4 MiB messages), so more would be shed
            for i in range(0, len(flood), 2):
                await asyncio.gather(
                    *(
                        stub.Submit(attest_pb2.SubmitAttestationRequest(attestation=d), timeout=60)
                        for d in flood[i : i + 2]
                    )
                )
            honest = attestation(HONEST, 10**6, now_ms=now)
            reply = await stub.Submit(
                attest_pb2.SubmitAttestationRequest(attestation=honest.to_bytes()), timeout=30
            )
            assert reply.digest == honest.digest
        # the stranger pool held its documented cap (the old code kept all 4 996)
        assert _kept(data_dir) == STRANGER_POOL + 1
