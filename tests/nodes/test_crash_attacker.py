"""The crash campaign with an attacker interleaved: 0 unresolvable, 0 honest origins accused.

Three real node processes (``python -m nodes.app``) on loopback: the origin
**A**, an honest holder node **B** and a witness **C**; plus, in this process,
an honest holder client **H** (:class:`nodes.client.Holder`, own key, no
cache, witnesses B and C, its own evidence directory) and an attacker
(:class:`tests.nodes.attacker.Attacker`, own key, no operator key). Every
trial:

1. A is (re)started on its data dir and fixed port (the attacker's two
   workers keep calling all along, through restarts and kills);
2. H re-demands **every** acknowledged commitment whose obligation is live
   (batches of 128 folds) and checks each one: SERVED, verified by H's own
   checks, and the hops hash to the committed root — anything else is
   *unresolvable*. B re-rehydrates every value it did not get served;
3. the operator appends and commits folds on A (fresh hops, sometimes
   re-folding hops of earlier folds; half live for an hour, half for a few
   seconds so they expire along the campaign); each commitment received is
   *acknowledged*: delivered to B, which rehydrates it (witness C) in the
   background, and handed to the attacker as a bearer obligation;
4. at a seeded random moment A is SIGKILLed — before, between or inside
   commits, while the attacker's and B's calls are in flight.

At the end A is started once more, H re-demands everything, every
background call is awaited, the nodes stop, and every honest evidence store
is read: B's, C's and A's hop logs and H's evidence directory. An honest
origin is *accused* by any record except an ``unanswered`` suspicion of B's
against A whose demand was in flight while A was down (A really did not
serve it) and that a later receipt cleared — or whose obligation ran out
before a receipt could be had; those are counted.
The attacker's calls must all get proper refusals (see
:data:`tests.nodes.attacker.EXPECTED`): no INTERNAL, no replay served twice.

Default: 20 trials, seed ``PROVNET_CRASH_ATTACK_SEED`` (else fixed).
``-m soak``: ``PROVNET_CRASH_ATTACK_TRIALS`` trials (default 500). Every
failure message names the seed and the command to run it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from contracts.evidence import Evidence
from contracts.identity import Identity
from contracts.merkle import merkle_root
from contracts.serve import verify_delivery
from contracts.signed import open_statement
from contracts.statements import Commitment, Demand, Obligation
from nodes import wire
from nodes._pb.provnet.v1 import (
    deliver_pb2,
    deliver_pb2_grpc,
    hoplog_pb2,
    hoplog_pb2_grpc,
)
from nodes.client import HeldFold, Holder
from nodes.cluster import free_ports
from nodes.messages import Delivery, Outcome
from nodes.store import HopStore
from nodes.transport import GrpcTransport
from tests.nodes.attacker import CHANNEL_OPTIONS, Attack, Attacker, Bearer, Targets
from tests.nodes.rpc_support import TEST_OPERATOR, hop_json, operator_channel

pytestmark = pytest.mark.timeout(3_600)

_REPO = Path(__file__).resolve().parents[2]
#: The deadline A promises (ms): generous, so a loaded box never makes A late.
DEADLINE_MS = 5_000
_LONG_MS = 3_600_000
_BATCH = 128
#: A fold is demanded only if its obligation runs this much longer (the call's deadline + slack).
_LIVE_MARGIN_MS = DEADLINE_MS + 2_000
#: Longest a trial's commit loop runs and the latest moment A is killed.
_KILL_WITHIN_S = (0.05, 0.8)
_MAX_FOLDS_PER_TRIAL = 6
#: Attacker workers (one call in flight each) and the bound on their calls.
_ATTACK_WORKERS = 2
_ATTACK_CALLS_PER_TRIAL = 400
_RPC_TIMEOUT_S = 30.0
_PHASES = ("restart", "redemand", "load")


def _now_ms() -> int:
    return int(time.time() * 1000)


class NodeProc:
    """One ``python -m nodes.app`` process on a fixed 127.0.0.1 port and data dir."""

    def __init__(self, name: str, port: int, root: Path, **env: str) -> None:
        self.name = name
        self.address = f"127.0.0.1:{port}"
        self.data_dir = root / name
        self.log = root / f"{name}.log"
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        #: Seen SERVING since the last start, and not killed since.
        self.up = False

    def start(self) -> None:
        self.up = False
        env = {
            **os.environ,
            "PROVNET_NAME": self.name,
            "PROVNET_LISTEN": self.address,
            "PROVNET_DATA_DIR": str(self.data_dir),
            "PROVNET_LOG_FORMAT": "json",
            "PROVNET_OPERATOR_KEYS": TEST_OPERATOR.key_id,
            "PROVNET_SHUTDOWN_GRACE_S": "1",
            "PROVNET_DEADLINE_MS": str(DEADLINE_MS),
            "GRPC_VERBOSITY": "NONE",
            **self.env,
        }
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "nodes.app"], env=env, stdout=out, stderr=out, cwd=_REPO
            )
        self.starts += 1

    async def serving(self, timeout: float = 90.0) -> None:
        """Wait until the health service says SERVING (bounded)."""
        give_up = time.monotonic() + timeout
        async with grpc.aio.insecure_channel(self.address, options=CHANNEL_OPTIONS) as chan:
            stub: Any = health_pb2_grpc.HealthStub(chan)
            while True:
                assert self.proc is not None
                if self.proc.poll() is not None:
                    tail = self.log.read_text(errors="replace")[-2000:]
                    raise AssertionError(
                        f"node {self.name} exited ({self.proc.returncode}): {tail}"
                    )
                with contextlib.suppress(grpc.aio.AioRpcError):
                    reply = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=1)
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        self.up = True
                        return
                if time.monotonic() > give_up:
                    raise AssertionError(f"node {self.name} not SERVING within {timeout} s")
                await asyncio.sleep(0.02)

    def kill(self) -> None:
        self.up = False
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        self.up = False
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=15)


@dataclass(frozen=True, slots=True)
class Ack:
    """A commitment the origin returned to the operator: from here on it owes the hops."""

    index: int
    held: HeldFold
    seqs: tuple[int, ...]

    @property
    def serve_until(self) -> int:
        return self.held.obligation.statement.serve_until


@dataclass(slots=True)
class BRun:
    """One rehydration B made of a delivered value, and when."""

    value_ref: str
    started_ms: int
    ended_ms: int
    outcome: str


@dataclass(slots=True)
class Campaign:
    seed: int
    rng: random.Random
    a: NodeProc
    b: NodeProc
    c: NodeProc
    holder: Holder
    attacker: Attacker
    acks: list[Ack] = field(default_factory=list)
    next_seq: int = 1
    #: (killed at, SERVING again at) wall-clock ms, per kill.
    outages: list[tuple[int, int]] = field(default_factory=list)
    kill_points: Counter[str] = field(default_factory=Counter)
    b_runs: list[BRun] = field(default_factory=list)
    #: Per value: the outcome of B's rehydration started last (not the one that
    #: ended last: a served call can end after a later one that went unanswered,
    #: whose suspicion then still waits for a later receipt).
    b_last: dict[str, str] = field(default_factory=dict)
    b_started: dict[str, int] = field(default_factory=dict)
    b_starts: int = 0
    background: set[asyncio.Task[None]] = field(default_factory=set)
    redemanded: int = 0
    #: Acknowledgements H got served and verified at least once after a restart.
    verified: set[int] = field(default_factory=set)
    expired_skipped: int = 0
    unresolvable: list[str] = field(default_factory=list)
    holder_evidence: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    commit_errors: Counter[str] = field(default_factory=Counter)
    #: Wall time per phase (s): restarting A, H's re-demands, the load until the kill.
    phase_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(_PHASES, 0.0))

    # ----------------------------------------------------------------- honest holder H

    async def redemand_all(self, when: str) -> None:
        """H demands every live acknowledged commitment; each must be served and verified."""
        pending = list(self.acks)
        for start in range(0, len(self.acks), _BATCH):
            # Chosen right before the call: a fold whose obligation could run out
            # while the call is due is not asked (one expired demand fails the call).
            now = _now_ms()
            batch = [a for a in pending[:_BATCH] if a.serve_until > now + _LIVE_MARGIN_MS]
            self.expired_skipped += min(_BATCH, len(pending)) - len(batch)
            pending = pending[_BATCH:]
            if not batch:
                continue
            report = await self.holder.rehydrate(
                f"redemand-{when}-{start}",
                [a.held for a in batch],
                witnesses=[self.b.address, self.c.address],
                deadline=time.monotonic() + _RPC_TIMEOUT_S,
            )
            hops: dict[str, list[bytes]] = {}
            for hop in report.hops:
                hops.setdefault(hop.commitment, []).append(hop.hop)
            for ack in batch:
                c = ack.held.commitment
                got = hops.get(c.digest, [])
                if len(got) != c.statement.leaf_count or merkle_root(got).hex() != c.statement.root:
                    outcome = report.outcomes[0] if report.outcomes else None
                    self.unresolvable.append(
                        f"{when}: fold #{ack.index} {c.digest[:16]} seqs {list(ack.seqs)}:"
                        f" {len(got)} of {c.statement.leaf_count} hops;"
                        f" {outcome.outcome if outcome else '-'}"
                        f" {outcome.detail[:200] if outcome else ''}"
                    )
                else:
                    self.verified.add(ack.index)
            self.redemanded += len(batch)
            for outcome in report.outcomes:
                if outcome.outcome is not Outcome.SERVED:
                    self.failures.append(
                        f"{when}: H got {outcome.outcome} from A while up: {outcome.detail[:300]}"
                    )

    # ----------------------------------------------------------------- holder node B

    def b_rehydrate(self, value_ref: str) -> None:
        task = asyncio.create_task(self._b_rehydrate(value_ref))
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    async def _b_rehydrate(self, value_ref: str) -> None:
        started = _now_ms()
        self.b_starts += 1
        mine = self.b_started[value_ref] = self.b_starts
        try:
            async with operator_channel(self.b.address) as chan:
                stub: Any = deliver_pb2_grpc.DeliverStub(chan)
                reply = await stub.Rehydrate(
                    deliver_pb2.RehydrateRequest(value_ref=value_ref, witnesses=[self.c.address]),
                    timeout=_RPC_TIMEOUT_S,
                )
            outcome = ",".join(o.outcome for o in reply.outcomes) or "none"
        except grpc.aio.AioRpcError as exc:
            outcome = f"rpc:{exc.code().name}"
        self.b_runs.append(BRun(value_ref, started, _now_ms(), outcome))
        if self.b_started[value_ref] == mine:
            self.b_last[value_ref] = outcome

    async def deliver_to_b(self, ack: Ack) -> None:
        delivery = Delivery(
            f"f{ack.index}",
            b"",
            (ack.held.commitment_bytes,),
            (ack.held.obligation_bytes,),
            "",
        )
        async with operator_channel(self.b.address) as chan:
            stub: Any = deliver_pb2_grpc.DeliverStub(chan)
            await stub.Deliver(wire.deliver_request(delivery), timeout=_RPC_TIMEOUT_S)
        self.b_last[delivery.value_ref] = "delivered"
        self.b_rehydrate(delivery.value_ref)

    def b_unserved(self) -> list[str]:
        now = _now_ms()
        live = {f"f{a.index}" for a in self.acks if a.serve_until > now + _LIVE_MARGIN_MS}
        return [ref for ref, out in self.b_last.items() if ref in live and out != "served"]

    # ----------------------------------------------------------------- the origin's load

    async def load(self, kill_at: float) -> None:
        """Commit folds on A until it is killed (or the trial's folds are done)."""
        async with operator_channel(self.a.address) as chan:
            stub: Any = hoplog_pb2_grpc.HopLogStub(chan)
            for _ in range(self.rng.randint(0, _MAX_FOLDS_PER_TRIAL)):
                if time.monotonic() >= kill_at:
                    return
                rng = self.rng
                fresh = list(range(self.next_seq, self.next_seq + rng.randint(1, 4)))
                self.next_seq = fresh[-1] + 1
                now = _now_ms()
                long_lived = [a for a in self.acks if a.serve_until > now + 600_000]
                shared = (
                    list(rng.choice(long_lived).seqs[:2])
                    if long_lived and rng.random() < 0.3
                    else []
                )
                serve_for = _LONG_MS if rng.random() < 0.5 else rng.randint(2_000, 8_000)
                seqs = [*shared, *fresh]
                try:
                    await stub.Append(
                        hoplog_pb2.AppendRequest(hops=[hop_json(s) for s in fresh], seqs=fresh),
                        timeout=_RPC_TIMEOUT_S,
                    )
                    reply = await stub.CommitFold(
                        hoplog_pb2.CommitFoldRequest(
                            value_ref=f"v{self.next_seq}",
                            seqs=seqs,
                            serve_for_ms=serve_for,
                            deadline_ms=DEADLINE_MS,
                        ),
                        timeout=_RPC_TIMEOUT_S,
                    )
                except grpc.aio.AioRpcError as exc:
                    self.commit_errors[exc.code().name] += 1
                    if exc.code() is not grpc.StatusCode.UNAVAILABLE:
                        self.failures.append(
                            f"operator commit on A: {exc.code().name} {exc.details()}"
                        )
                    return
                c_bytes, o_bytes = bytes(reply.commitment), bytes(reply.obligation)
                commitment, obligation = verify_delivery(
                    open_statement(c_bytes, Commitment),
                    open_statement(o_bytes, Obligation),
                    now=_now_ms(),
                )
                ack = Ack(
                    len(self.acks), HeldFold(commitment, obligation, c_bytes, o_bytes), tuple(seqs)
                )
                self.acks.append(ack)
                if serve_for == _LONG_MS:
                    self.attacker.bearers.append(Bearer(commitment, obligation, c_bytes, o_bytes))
                await self.deliver_to_b(ack)

    async def killer(self, kill_at: float, commits: asyncio.Task[None]) -> None:
        await asyncio.sleep(max(0.0, kill_at - time.monotonic()))
        self.kill_points["mid_commit" if not commits.done() else "after_commits"] += 1
        self.a.kill()
        self.outages.append((_now_ms(), 0))

    # ----------------------------------------------------------------- one trial

    async def trial(self, index: int) -> None:
        t0 = time.monotonic()
        self.a.start()
        await self.a.serving()
        t1 = time.monotonic()
        self.phase_s["restart"] += t1 - t0
        if self.outages:
            killed, _ = self.outages[-1]
            self.outages[-1] = (killed, _now_ms())
        await self.redemand_all(f"trial {index}")
        for ref in self.b_unserved():
            self.b_rehydrate(ref)
        t2 = time.monotonic()
        self.phase_s["redemand"] += t2 - t1
        kill_at = time.monotonic() + self.rng.uniform(*_KILL_WITHIN_S)
        commits = asyncio.create_task(self.load(kill_at))
        await self.killer(kill_at, commits)
        await asyncio.wait_for(commits, _RPC_TIMEOUT_S)
        self.phase_s["load"] += time.monotonic() - t2

    async def finish(self) -> None:
        """A up once more; everything re-demanded; every background call done."""
        self.a.start()
        await self.a.serving()
        killed, _ = self.outages[-1]
        self.outages[-1] = (killed, _now_ms())
        await self.redemand_all("final")
        for _ in range(3):  # bounded: B's calls started in a kill window may still run
            if self.background:
                await asyncio.wait_for(asyncio.gather(*self.background), 4 * _RPC_TIMEOUT_S)
            unserved = self.b_unserved()
            if not unserved:
                break
            for ref in unserved:
                self.b_rehydrate(ref)
        if self.background:
            await asyncio.wait_for(asyncio.gather(*self.background), 4 * _RPC_TIMEOUT_S)

    def b_unexplained(self) -> list[str]:
        """B's rehydrations that did not end served, with A up all along (or a proof)."""
        until = {f"f{a.index}": a.serve_until for a in self.acks}
        out = []
        for run in self.b_runs:
            if run.outcome == "served":
                continue
            ran_out = until.get(run.value_ref, 0) <= run.ended_ms + 2_000
            if run.outcome in {"expired", "unanswered"} and ran_out:
                continue  # the obligation ran out during the call (reaped: NOT_FOUND)
            overlaps = any(
                killed <= run.ended_ms and (up == 0 or up >= run.started_ms)
                for killed, up in self.outages
            )
            if run.outcome != "unanswered" or not overlaps:
                out.append(f"B {run.value_ref}: {run.outcome} (A down meanwhile: {overlaps})")
        return out

    def in_outage(self, demand_ms: int) -> bool:
        """Was A down at some moment while a demand made at ``demand_ms`` was due?"""
        return any(
            killed <= demand_ms + DEADLINE_MS + 1_000 and (up == 0 or up >= demand_ms - 1_000)
            for killed, up in self.outages
        )


async def _accusations(campaign: Campaign, origin: str) -> tuple[list[str], Counter[bool]]:
    """Every evidence record in the honest nodes' stores (every node here is honest).

    Returns the accusations, and B's suspicions against A made while A was
    really down, by whether a later receipt cleared them (``True``) or their
    obligation ran out first (``False``).
    """
    accusations: list[str] = []
    outage: Counter[bool] = Counter()
    for node in (campaign.a, campaign.b, campaign.c):
        store = await HopStore.open(node.data_dir, None)
        try:
            for record in await store.evidence():
                evidence = Evidence.from_bytes(record.body)
                demand_ms = -1
                if evidence.demand is not None:
                    demand_ms = open_statement(evidence.demand, Demand).statement.time
                serve_until = 0
                if evidence.obligation is not None:
                    serve_until = open_statement(
                        evidence.obligation, Obligation
                    ).statement.serve_until
                is_cleared = await store.clearing_receipt(record.digest) is not None
                in_outage = campaign.in_outage(demand_ms)
                ran_out = serve_until <= _now_ms()
                if (
                    node is campaign.b
                    and record.accused == origin
                    and record.kind == "unanswered"
                    and in_outage
                    and (is_cleared or ran_out)
                ):
                    # A was really down: a suspicion, cleared by a later receipt — or
                    # standing because the obligation ran out before one could be had.
                    outage[is_cleared] += 1
                    continue
                accusations.append(
                    f"{node.name}: {record.kind} against {record.accused[:16]}"
                    f" {record.digest[:16]} demand at {demand_ms} cleared={is_cleared}"
                    f" in_outage={in_outage} serve_until={serve_until}"
                )
        finally:
            await store.close()
    return accusations, outage


async def _foreign(c: NodeProc) -> Bearer:
    """An obligation C issues (the attacker demands it from A, which did not)."""
    async with operator_channel(c.address) as chan:
        stub: Any = hoplog_pb2_grpc.HopLogStub(chan)
        await stub.Append(hoplog_pb2.AppendRequest(hops=[hop_json(1)], seqs=[1]), timeout=30)
        reply = await stub.CommitFold(
            hoplog_pb2.CommitFoldRequest(value_ref="foreign", seqs=[1], serve_for_ms=_LONG_MS),
            timeout=30,
        )
    c_bytes, o_bytes = bytes(reply.commitment), bytes(reply.obligation)
    commitment, obligation = verify_delivery(
        open_statement(c_bytes, Commitment), open_statement(o_bytes, Obligation), now=_now_ms()
    )
    return Bearer(commitment, obligation, c_bytes, o_bytes)


async def _node_id(node: NodeProc) -> str:
    from nodes._pb.provnet.v1 import node_pb2, node_pb2_grpc

    async with grpc.aio.insecure_channel(node.address) as chan:
        reply = await node_pb2_grpc.NodeStub(chan).Info(node_pb2.InfoRequest(), timeout=30)
    return str(reply.node_id)


def _key_seed(seed: int, who: str) -> bytes:
    return hashlib.sha256(f"provnet crash+attacker {seed} {who}".encode()).digest()


async def run_campaign(root: Path, trials: int, seed: int) -> dict[str, Any]:
    root.mkdir(parents=True, exist_ok=True)
    pa, pb, pc = free_ports(3)
    a = NodeProc("a", pa, root)
    b = NodeProc("b", pb, root, PROVNET_REAP_INTERVAL_S="0")
    c = NodeProc("c", pc, root, PROVNET_REAP_INTERVAL_S="0")
    transport = GrpcTransport()
    started = time.monotonic()
    campaign: Campaign | None = None
    try:
        for node in (b, c, a):
            node.start()
        for node in (b, c, a):
            await node.serving()
        origin = await _node_id(a)
        b_id, c_id = await _node_id(b), await _node_id(c)
        foreign = await _foreign(c)
        a.kill()  # the first trial starts it again
        holder_id = Identity.from_seed(_key_seed(seed, "holder"))
        holder_evidence: list[str] = []

        async def keep(kind: str, accused: str, body: bytes, path: str) -> None:
            holder_evidence.append(f"{kind} against {accused[:16]} ({path})")

        attacker = Attacker(
            Identity.from_seed(_key_seed(seed, "attacker")),
            Targets(a.address, b.address, c.address, (holder_id.node_id, b_id, c_id), foreign),
            origin_state=lambda: (a.starts, a.up),
        )
        campaign = Campaign(
            seed,
            random.Random(seed),
            a,
            b,
            c,
            Holder(
                holder_id,
                transport,
                evidence_dir=root / "holder-evidence",
                reasks=1,
                cache=False,
                on_evidence=keep,
            ),
            attacker,
            holder_evidence=holder_evidence,
        )
        campaign.outages.append((_now_ms(), 0))
        # The attacker runs all along: through restarts, re-demands, commits and kills.
        stop = asyncio.Event()
        workers = [
            asyncio.create_task(
                attacker.run(
                    random.Random(f"{seed}:attacker:{w}"), stop, _ATTACK_CALLS_PER_TRIAL * trials
                )
            )
            for w in range(_ATTACK_WORKERS)
        ]
        try:
            for i in range(trials):
                await campaign.trial(i)
            await campaign.finish()
        finally:
            stop.set()
            await asyncio.wait_for(asyncio.gather(*workers), 2 * _RPC_TIMEOUT_S)
    finally:
        for task in list(campaign.background if campaign else ()):
            task.cancel()
        if campaign is not None:
            await campaign.attacker.close()
        await transport.close()
        for node in (a, b, c):
            node.stop()
    elapsed = time.monotonic() - started
    accusations, outage = await _accusations(campaign, origin)
    holder_files = sorted(p.name for p in (root / "holder-evidence").glob("*.json"))
    store = await HopStore.open(a.data_dir, None)
    try:
        integrity = await store.integrity_check()
        counters = await store.counters()
    finally:
        await store.close()
    return {
        "campaign": campaign,
        "trials": trials,
        "seed": seed,
        "seconds": round(elapsed, 1),
        "acks": len(campaign.acks),
        "redemanded": campaign.redemanded,
        "unresolvable": len(campaign.unresolvable) + int(counters["provenance_unresolvable"]),
        "accusations": accusations + campaign.holder_evidence + holder_files,
        "outage_suspicions_cleared": outage[True],
        "outage_suspicions_ran_out": outage[False],
        "kill_points": dict(campaign.kill_points),
        "attack_calls": campaign.attacker.total,
        "attack_violations": campaign.attacker.violations,
        "replays_refused": campaign.attacker.replays_refused,
        "integrity": integrity,
        "b_rehydrations": dict(Counter(r.outcome for r in campaign.b_runs)),
        "b_unexplained": campaign.b_unexplained(),
        "phase_s": {k: round(v, 1) for k, v in campaign.phase_s.items()},
    }


def _check(report: dict[str, Any], trials: int) -> None:
    """Every invariant at once, so a failure shows all that broke (and the seed)."""
    campaign: Campaign = report["campaign"]
    seed = report["seed"]
    problems: list[str] = []
    if report["integrity"] != "ok":
        problems.append(f"A's hop log integrity: {report['integrity']}")
    if campaign.unresolvable or report["unresolvable"]:
        problems.append(
            f"{report['unresolvable']} unresolvable commitment(s): {campaign.unresolvable[:3]}"
        )
    if report["accusations"]:
        problems.append(
            f"honest origin accused {len(report['accusations'])} time(s):"
            f" {report['accusations'][:3]}"
        )
    if report["b_unexplained"]:
        problems.append(
            f"{len(report['b_unexplained'])} of B's rehydrations failed while A served:"
            f" {report['b_unexplained'][:3]}"
        )
    if campaign.failures:
        problems.append(f"{len(campaign.failures)} honest call(s) failed: {campaign.failures[:3]}")
    if report["attack_violations"]:
        problems.append(
            f"{len(report['attack_violations'])} attacker call(s) not properly refused:"
            f" {report['attack_violations'][:5]}"
        )
    # The campaign did what it claims: kills, acknowledgements, attacks of every kind.
    if len(campaign.outages) != trials + 1:
        problems.append(f"{len(campaign.outages)} outages for {trials} trials")
    if report["acks"] < trials // 2:
        problems.append(f"only {report['acks']} acknowledgements in {trials} trials")
    long_lived = {a.index for a in campaign.acks if a.serve_until > _now_ms() + 60_000}
    never = long_lived - campaign.verified
    if never:
        problems.append(f"acknowledged, long-lived, never served back: {sorted(never)[:10]}")
    missing = {a.value for a in Attack} - set(campaign.attacker.calls)
    if missing:
        problems.append(f"attacks never made: {sorted(missing)}")
    assert not problems, (
        f"crash+attacker campaign, seed={seed} (run again: PROVNET_CRASH_ATTACK_SEED={seed}):\n- "
        + "\n- ".join(problems)
    )


def _print(report: dict[str, Any]) -> None:
    shown = {k: v for k, v in report.items() if k != "campaign"}
    shown["attacks"] = report["campaign"].attacker.summary()
    print(f"crash+attacker campaign: {shown}")


async def _run(root: Path, trials: int, seed: int) -> dict[str, Any]:
    try:
        return await run_campaign(root, trials, seed)
    except BaseException as exc:
        exc.add_note(f"crash+attacker campaign seed={seed} trials={trials}")
        raise


def _seed(default: int) -> int:
    return int(os.environ.get("PROVNET_CRASH_ATTACK_SEED", default))


async def test_killed_origin_under_attack_serves_every_commitment_and_is_never_accused(
    tmp_path: Path,
) -> None:
    seed, trials = _seed(20261130), 20
    report = await _run(tmp_path, trials, seed)
    _print(report)
    _check(report, trials)


@pytest.mark.soak
@pytest.mark.timeout(3 * 3_600)
async def test_soak_killed_origin_under_attack(tmp_path: Path) -> None:
    seed = _seed(500)
    trials = int(os.environ.get("PROVNET_CRASH_ATTACK_TRIALS", "500"))
    report = await _run(tmp_path, trials, seed)
    _print(report)
    _check(report, trials)
