"""Crash consistency through the wire: a real node process as the origin.

The client appends hops and commits folds over gRPC (``HopLog``), keeping
each commitment + obligation it received. A standalone reaper process
(``python -m nodes.reaper``) evicts expired folds from the same hop log all
along. The node is SIGKILLed at seeded random moments and restarted on the
same data dir. At the end a fresh node process must serve every received
commitment whose obligation is live, verified by the holder's checks
(``contracts.evidence.judge_answer``: origin's signature, binding to the
demand, hops hashing to the committed root); expired ones may be absent,
never other bytes.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from contracts.evidence import AnswerKind, judge_answer
from contracts.identity import Identity
from contracts.merkle import merkle_root
from contracts.serve import build_demand
from contracts.signed import Signed, open_statement
from contracts.statements import Commitment, Obligation
from nodes._pb.provnet.v1 import hoplog_pb2, hoplog_pb2_grpc
from nodes.store import HopStore, ResolveStatus
from nodes.transport import GrpcTransport
from tests.nodes.rpc_support import operator_channel
from tests.nodes.storage_support import OriginProcess

_REPO = Path(__file__).resolve().parents[2]
_LONG_MS = 3_600_000
_SHORT_MS = 30


@dataclass
class Ack:
    commitment: Signed[Commitment]
    obligation: Signed[Obligation]
    seqs: tuple[int, ...]


@dataclass
class Client:
    rng: random.Random
    next_seq: int = 1
    folds: int = 0
    acks: list[Ack] = field(default_factory=list)
    failed_calls: int = 0


def _hop_fields(seq: int) -> bytes:
    return json.dumps(
        {
            "hop_id": f"h{seq:06d}",
            "step": seq,
            "op": "TOOL_CALL",
            "axis_deltas": {},
            "taints_added": [f"taint:tool:{seq}"] if seq % 3 == 0 else [],
            "parent_hop_ids": [f"h{seq - 1:06d}"] if seq > 1 else [],
        }
    ).encode()


async def _commit_until_failure(address: str, client: Client) -> None:
    """Append + commit folds until a call fails (the node was killed)."""
    async with operator_channel(address) as channel:
        stub = hoplog_pb2_grpc.HopLogStub(channel)
        while True:
            rng = client.rng
            fresh = list(range(client.next_seq, client.next_seq + rng.randint(1, 5)))
            client.next_seq = fresh[-1] + 1
            long_lived = [a for a in client.acks if a.obligation.statement.serve_until > _now_ms()]
            shared = (
                list(rng.choice(long_lived).seqs[:2]) if long_lived and rng.random() < 0.3 else []
            )
            short = rng.random() < 0.5
            try:
                await stub.Append(
                    hoplog_pb2.AppendRequest(hops=[_hop_fields(s) for s in fresh], seqs=fresh),
                    timeout=5,
                )
                client.folds += 1
                reply = await stub.CommitFold(
                    hoplog_pb2.CommitFoldRequest(
                        value_ref=f"v{client.folds}",
                        seqs=[*shared, *fresh],
                        serve_for_ms=_SHORT_MS if short else _LONG_MS,
                    ),
                    timeout=5,
                )
            except grpc.aio.AioRpcError:
                client.failed_calls += 1
                return
            # Received: from here on the origin owes these hops.
            commitment = open_statement(bytes(reply.commitment), Commitment)
            obligation = open_statement(
                bytes(reply.obligation), Obligation, signer=commitment.signer
            )
            assert obligation.statement.commitment == commitment.digest
            client.acks.append(Ack(commitment, obligation, (*shared, *fresh)))


def _now_ms() -> int:
    return int(time.time() * 1000)


async def _trial(data_dir: Path, log: Path, client: Client) -> None:
    node = OriginProcess(data_dir, log)
    try:
        address = await node.address()
        work = asyncio.create_task(_commit_until_failure(address, client))
        await asyncio.sleep(client.rng.uniform(0.02, 0.4))
        node.kill()
        await asyncio.wait_for(work, timeout=30)
    finally:
        node.kill()


async def _serve_all(address: str, acks: list[Ack], holder: Identity) -> tuple[int, list[str]]:
    """Demand every live commitment from the node; return (served, failures)."""
    transport = GrpcTransport()
    served, failures = 0, []
    try:
        for start in range(0, len(acks), 16):
            batch = acks[start : start + 16]
            now = _now_ms()
            demands = [build_demand(holder, a.obligation, now=now) for a in batch]
            answers = await transport.demand(address, [d.to_bytes() for d in demands], 10.0)
            assert len(answers) == len(batch)
            for ack, demand, answer in zip(batch, demands, answers, strict=True):
                verdict = judge_answer(
                    answer.receipt,
                    answer.hops,
                    demand=demand,
                    obligation=ack.obligation,
                    commitment=ack.commitment,
                    reported_at=now,
                )
                root = merkle_root(answer.hops).hex()
                if verdict.kind is AnswerKind.SERVED and root == ack.commitment.statement.root:
                    served += 1
                else:
                    failures.append(
                        f"{ack.commitment.digest[:16]}: {verdict.kind} {verdict.reason}"
                    )
    finally:
        await transport.close()
    return served, failures


async def run_rpc_campaign(tmp_path: Path, trials: int, seed: int) -> dict[str, int]:
    data_dir = tmp_path / "origin"
    log = tmp_path / "node.log"
    client = Client(random.Random(seed))
    reaper: subprocess.Popen[bytes] | None = None
    reaper_log = (tmp_path / "reaper.log").open("ab")
    try:
        for i in range(trials):
            await _trial(data_dir, log, client)
            if reaper is None and i == 0:
                reaper = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "nodes.reaper",
                        "--data-dir",
                        str(data_dir),
                        "--interval-ms",
                        "2",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=reaper_log,
                    cwd=_REPO,
                )
        # Let short obligations expire and the reaper evict them.
        await asyncio.sleep(0.3)
    finally:
        if reaper is not None:
            reaper.send_signal(signal.SIGTERM)
            try:
                reaper.wait(timeout=30)
            except subprocess.TimeoutExpired:
                reaper.kill()
                reaper.wait(timeout=10)
        reaper_log.close()
    assert reaper is not None
    assert reaper.returncode == 0, (tmp_path / "reaper.log").read_text()

    node = OriginProcess(data_dir, log)
    holder = Identity.generate()
    now = _now_ms()
    live = [a for a in client.acks if a.obligation.statement.serve_until > now + 5_000]
    expired = [a for a in client.acks if a.obligation.statement.serve_until <= now]
    try:
        address = await node.address()
        served, failures = await _serve_all(address, live, holder)
    finally:
        node.stop()
    assert failures == [], failures[:5]

    store = await HopStore.open(data_dir, None)
    try:
        integrity = await store.integrity_check()
        absent = wrong = 0
        for ack in expired:
            res = await store.resolve(ack.commitment.digest, now_ms=_now_ms())
            if res.status is ResolveStatus.EXPIRED:
                absent += 1
            elif not (
                res.status is ResolveStatus.FOUND
                and merkle_root(res.leaves).hex() == ack.commitment.statement.root
            ):
                wrong += 1
        counters = await store.counters()
    finally:
        await store.close()
    return {
        "trials": trials,
        "acks": len(client.acks),
        "served_live": served,
        "live": len(live),
        "expired": len(expired),
        "expired_absent": absent,
        "expired_wrong": wrong,
        "failed_calls": client.failed_calls,
        "unresolvable": counters["provenance_unresolvable"],
        "integrity_ok": int(integrity == "ok"),
    }


def _assert_sound(report: dict[str, int], trials: int) -> None:
    assert report["integrity_ok"] == 1
    assert report["served_live"] == report["live"] > 0
    assert report["expired_wrong"] == 0
    assert report["unresolvable"] == 0
    assert report["acks"] >= trials
    assert report["expired_absent"] > 0, "the external reaper evicted nothing"
    # Every trial ended in a kill that the client noticed.
    assert report["failed_calls"] == trials


async def test_killed_node_serves_every_commitment_it_returned_over_grpc(tmp_path: Path) -> None:
    trials = 10
    report = await run_rpc_campaign(tmp_path, trials, seed=10)
    print(f"rpc crash campaign: {report}")
    _assert_sound(report, trials)


@pytest.mark.soak
async def test_soak_killed_node_over_grpc(tmp_path: Path) -> None:
    trials = int(os.environ.get("PROVNET_RPC_CRASH_TRIALS", "100"))
    report = await run_rpc_campaign(tmp_path, trials, seed=100)
    print(f"rpc soak: {report}")
    _assert_sound(report, trials)
