"""The floors of demands dated ahead of the clock: no table a stranger can fill.

Against real ``provnet node`` processes whose clock runs 20 s behind the
holders' (``PROVNET_CLOCK_OFFSET_S``), inside the ±30 s window: a stranger
with more fresh keys than the node keeps open floors for (each key one
verified demand dated ahead) no longer locks out an honest holder whose clock
is ahead (before: RESOURCE_EXHAUSTED for every new holder while the table was
full); the lowest-dated floors are folded into one global floor instead. And
after a restart every demand dated ahead that was answered — the flooding
stranger's evicted ones included — is still refused (ABORTED), while a
configured peer's floor, reserved, is not widened by the fold.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest

from contracts.identity import Identity
from contracts.serve import build_demand
from contracts.signed import Signed, open_statement
from contracts.statements import Obligation, Receipt, ReceiptStatus
from nodes._pb.provnet.v1 import hoplog_pb2, hoplog_pb2_grpc, serve_pb2, serve_pb2_grpc
from nodes.auth import control_channel
from nodes.services import FUTURE_NONCES_FILENAME, MAX_DEMANDS_PER_CALL, MAX_FUTURE_HOLDERS
from tests.nodes.node_process import node_process
from tests.nodes.rpc_support import TEST_OPERATOR, hop_json, operator_channel

pytestmark = pytest.mark.timeout(300)

#: The origin's clock runs this far behind its holders' (inside the 30 s window).
BEHIND_S = 20
#: How far ahead of the holders' clocks the stranger dates its demands (28 s
#: ahead of the origin's: as far as the window lets it, so its floors outlive
#: the honest holder's and a fold is as high as it can be).
STRANGER_AHEAD_MS = 8_000
#: Fresh keys the stranger uses: more than the node keeps open floors for.
STRANGER_KEYS = (MAX_FUTURE_HOLDERS // MAX_DEMANDS_PER_CALL + 1) * MAX_DEMANDS_PER_CALL


def now_ms() -> int:
    return int(time.time() * 1000)


def _env(**extra: str) -> dict[str, str]:
    return {
        "PROVNET_OPERATOR_KEYS": TEST_OPERATOR.key_id,
        "PROVNET_DEADLINE_MS": "5000",
        "PROVNET_CLOCK_OFFSET_S": str(-BEHIND_S),
        **extra,
    }


async def _obligation(address: str) -> Signed[Obligation]:
    """As the operator: a fold committed (a bearer obligation)."""
    async with operator_channel(address) as chan:
        stub: Any = hoplog_pb2_grpc.HopLogStub(chan)
        appended = await stub.Append(
            hoplog_pb2.AppendRequest(hops=[hop_json(i + 1) for i in range(3)]), timeout=10
        )
        reply = await stub.CommitFold(
            hoplog_pb2.CommitFoldRequest(
                value_ref=f"v{time.time_ns()}", seqs=list(appended.seqs), serve_for_ms=600_000
            ),
            timeout=10,
        )
    return open_statement(bytes(reply.obligation), Obligation)


async def _demand(address: str, demands: Sequence[bytes]) -> str:
    """The call's status name, or SERVED if every receipt says served."""
    async with control_channel(address, None) as chan:
        stub: Any = serve_pb2_grpc.ServeStub(chan)
        try:
            reply = await stub.Demand(serve_pb2.DemandRequest(demands=list(demands)), timeout=30)
        except grpc.aio.AioRpcError as exc:
            return f"{exc.code().name}: {exc.details()}"
    statuses = {open_statement(bytes(a.receipt), Receipt).statement.status for a in reply.answers}
    return "SERVED" if statuses == {ReceiptStatus.SERVED} else str(statuses)


async def _flood(address: str, obligation: Signed[Obligation]) -> tuple[list[bytes], list[str]]:
    """The stranger: ``STRANGER_KEYS`` fresh keys, one verified demand each dated ahead,
    ``MAX_DEMANDS_PER_CALL`` to a call, each call's dated 1 ms after the one before (so
    the first call's floors are the lowest). Returns the demands and each call's outcome."""
    at = now_ms() + STRANGER_AHEAD_MS
    demands = [
        build_demand(Identity.generate(), obligation, now=at + i // MAX_DEMANDS_PER_CALL)
        for i in range(STRANGER_KEYS)
    ]
    data = [d.to_bytes() for d in demands]
    outcomes: list[str] = []
    for start in range(0, len(data), MAX_DEMANDS_PER_CALL):
        outcomes.append(await _demand(address, data[start : start + MAX_DEMANDS_PER_CALL]))
    return data, outcomes


async def test_a_stranger_with_more_keys_than_floors_cannot_lock_out_a_holder_ahead(
    tmp_path: Path,
) -> None:
    with node_process(tmp_path, "origin", **_env()) as (address, _):
        obligation = await _obligation(address)
        _, outcomes = await _flood(address, obligation)
        # Before: every call past the first 4 096 keys was RESOURCE_EXHAUSTED ("cap 4096").
        assert outcomes == ["SERVED"] * len(outcomes), outcomes[-1]
        # Honest holders whose clocks run ahead of the origin's (their own clock:
        # 20 s ahead of it), each a key the node has never seen.
        for _ in range(3):
            holder = Identity.generate()
            demand = build_demand(holder, obligation, now=now_ms()).to_bytes()
            assert await _demand(address, [demand]) == "SERVED"
            again = build_demand(holder, obligation, now=now_ms() + 1).to_bytes()
            assert await _demand(address, [again]) == "SERVED"


async def test_after_a_restart_demands_dated_ahead_stay_refused_a_peers_floor_stays_its_own(
    tmp_path: Path,
) -> None:
    friend = Identity.generate()  # a configured peer: its floor is reserved
    quiet = Identity.generate()  # a configured peer with no floor (no demand dated ahead)
    peers = f"friend=127.0.0.1:9,{friend.node_id} quiet=127.0.0.1:9,{quiet.node_id}"
    honest = Identity.generate()  # any key: an open floor
    with node_process(tmp_path, "origin", **_env(PROVNET_PEERS=peers)) as (address, data_dir):
        obligation = await _obligation(address)
        friend_at = now_ms() - 5_000  # 15 s ahead of the origin
        friend_demand = build_demand(friend, obligation, now=friend_at).to_bytes()
        assert await _demand(address, [friend_demand]) == "SERVED"
        # Dated before the stranger's floors however long the flood takes on a
        # loaded machine, so the honest floor is among the lowest, which the fold takes.
        honest_demand = build_demand(honest, obligation, now=now_ms()).to_bytes()
        flood, outcomes = await _flood(address, obligation)
        assert outcomes == ["SERVED"] * len(outcomes), outcomes[-1]
        assert await _demand(address, [honest_demand]) == "SERVED"
        lines = (data_dir / FUTURE_NONCES_FILENAME).read_text(encoding="ascii").splitlines()
        folds = [int(line.split()[1]) for line in lines if line.startswith("* ")]
        assert folds, lines[-3:]
        fold_ms = max(folds)
    with node_process(tmp_path, "origin", **_env(PROVNET_PEERS=peers)) as (address, _):
        # Every demand dated ahead a previous run answered: refused, ABORTED.
        for replayed in (friend_demand, honest_demand, flood[0], flood[-1]):
            outcome = await _demand(address, [replayed])
            assert outcome.startswith("ABORTED: "), outcome
            assert "issue a fresh demand" in outcome, outcome
        # A fresh demand of the honest (open) holder is served once dated after the fold
        # (one dated at or below it is ABORTED: the holder issues a fresh one).
        below = build_demand(honest, obligation, now=fold_ms).to_bytes()
        assert "folded the floors" in await _demand(address, [below])
        above = build_demand(honest, obligation, now=fold_ms + 1).to_bytes()
        assert await _demand(address, [above]) == "SERVED"
        # The peer's floor is its own: served just after it, though below the fold.
        after = build_demand(friend, obligation, now=friend_at + 1).to_bytes()
        assert friend_at + 1 <= fold_ms
        assert await _demand(address, [after]) == "SERVED"
        # A peer the previous run knew was never folded: not refused under the fold,
        # while a key never seen (it may have been folded) is.
        under = build_demand(quiet, obligation, now=fold_ms).to_bytes()
        assert await _demand(address, [under]) == "SERVED"
        unseen = build_demand(Identity.generate(), obligation, now=fold_ms).to_bytes()
        assert "folded the floors" in await _demand(address, [unseen])
