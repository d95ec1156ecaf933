"""Framing: can a stranger with no key get an honest, live origin accused?

    .venv/bin/python benchmarks/bench_framing.py [--attacks 1,2,3,4,7,8]
        [--attack-s 15] [--rounds 1] [--watch-s 60] [--out DIR]
        [--streams 160] [--callers 128] [--flood-callers 200] [--deliveries 4100]
        [--pool 40] [--keep]

Each round, for each attack of issue 23 in turn, a fresh cluster of real
``provnet node`` processes on 127.0.0.1 (started as ``provnet cluster up``
starts them, :func:`nodes.cluster.start_nodes`): an **origin**, two
**witnesses** and an honest **holder**, all accepting one operator key. This
process plays the operator: before the attack it has the origin commit a
*base* fold (``Append`` + ``CommitFold``, the default promise) and forward it
to the holder; through the attack and the watch after it, it keeps the
holder's work going — a new fold committed at the origin and forwarded, then
the holder's ``Rehydrate`` of it and of the base value, witnesses named, one
cycle at a time. A **stranger** (a process of its own, its own Ed25519 key,
configured on no node) holds the base fold's commitment and obligation, as
any bearer may (S7), and plays one attack for ``--attack-s`` seconds:

1. ``watch``: holds ``--streams`` ``Health.Watch`` streams open on the origin,
   and challenges the witnesses (``Evidence.Challenge``) with demands it
   builds and never sends;
2. ``nonces``: ``Serve.Demand`` calls of 256 copies of one signed demand,
   each with a random nonce (the signature left as it was), from 6 tasks;
   witnesses challenged as in 1;
3. ``replay``: one ``Serve.Demand`` of 256 signed demands, sent once, then
   replayed byte for byte by ``--callers`` callers; witnesses challenged;
4. ``min-deadline``: the base fold and every fold of the holder's work are
   committed with the smallest deadline the origin signs
   (``MIN_DEADLINE_MS``) while ``--flood-callers`` callers each demand the
   base fold, one fresh signed demand per call (issue 23 tried 1,000
   strangers' callers; one stranger process on a shared box is what is
   scaled down here); witnesses challenged;
7. ``bulk``: bodiless ``Attest.Submit`` streams (4, unauthenticated; each
   renewed when it ends) holding the origin's and the holder's bulk budget;
8. ``deliveries``: one-byte ``Deliver`` calls to the holder from a fresh key
   (signed as itself, values of an origin of its own) until the holder has
   taken ``--deliveries`` of them.

The stranger turns every ``UNANSWERED`` witness report it collects into an
``unanswered`` record (:func:`contracts.evidence.unanswered_evidence`), as
anyone could and hand it to an operator's ``Evidence.Report``, and writes it
to its own evidence folder. Then the attack stops and the run watches for up
to ``--watch-s`` seconds (60: the target) until no suspicion stands: the
holder's own records clear when the holder gets a later receipt of the
origin for the same obligation (it writes ``FILE.cleared-by``); the
stranger's clear once this process, as a third party, gets a receipt of the
origin for their obligation, issued after their demand, that
:func:`contracts.evidence.verify_clearing` accepts (asked once a second).

Evidence is judged only by the project's verifier: every file in the
holder's and the stranger's evidence folders is checked with
:func:`contracts.evidence.verify_evidence` (and ``verify_clearing`` with its
``.cleared-by`` receipt), then classified by kind and status. Per attack
(printed, and written to ``DIR/framing.csv`` and ``DIR/framing.md``): the
stranger's calls and rate and the status codes it got; the holder's demands
served / refused with a status / unanswered during the attack (a refused
workload step — ``CommitFold``, ``Forward``, ``Rehydrate`` — counts as
refused, with its code); and the three targets, each PASS/FAIL:

* proofs against an honest party (every node here is honest): must be 0;
* witness-confirmed suspicions against the live origin (cleared since or
  not): target 0; an origin process that did not survive the attack fails
  this target too (a node must stay up);
* seconds from the attack's end until every suspicion against the origin is
  cleared (the unconfirmed ones too): target ≤ 60; one still standing when
  the watch ends is reported as ``inf`` (FAIL).

The holder's ``Node.Stats`` evidence counters are printed beside the files
as a cross-check. Exit 0 when every attack passes every target, 1 otherwise.
Loopback only; every loop is bounded by ``--attack-s`` or ``--watch-s``;
every process started is stopped, whatever happens.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import dataclasses
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from contracts.errors import ContractError  # noqa: E402  (after the path insert)
from contracts.evidence import (  # noqa: E402
    Evidence,
    EvidenceLevel,
    EvidenceStatus,
    verify_clearing,
    verify_evidence,
)
from nodes.methods import method_name  # noqa: E402

__all__ = [
    "ATTACKS",
    "CLEAR_TARGET_S",
    "Judged",
    "Tally",
    "judge_file",
    "judge_folder",
    "tally",
    "verdicts",
]

#: The attacks of issue 23 this benchmark plays, by their number there.
ATTACKS: dict[int, str] = {
    1: "watch",
    2: "nonces",
    3: "replay",
    4: "min-deadline",
    7: "bulk",
    8: "deliveries",
}
#: Every suspicion against an honest origin cleared this long after the attack ends.
CLEAR_TARGET_S = 60.0
#: A status the verifier never gives: the file does not verify (accuses nobody).
INVALID = "invalid"
_RPC_S = 10.0
_REHYDRATE_S = 30.0
#: Most evidence files the stranger writes in one attack (the rest are counted).
_MAX_STRANGER_FILES = 64

# --------------------------------------------------------------------------- pure part


@dataclass(frozen=True, slots=True)
class Judged:
    """One evidence file as the verifier sees it.

    ``status`` is an :class:`~contracts.evidence.EvidenceStatus` value, or
    :data:`INVALID` when the file does not verify (``reason`` says why).
    ``confirmed``: witness-confirmed, whether cleared since or not (the
    record judged without the answers it holds). ``cleared_at``: when the
    clearing receipt beside the file was kept (epoch seconds).
    """

    name: str
    kind: str
    level: str
    status: str
    accused: str
    reason: str
    confirmed: bool = False
    cleared_at: float | None = None


def judge_file(
    name: str, data: bytes, cleared_by: bytes | None, *, now_ms: int, cleared_at: float | None
) -> Judged:
    """Verify one evidence file (and its clearing receipt, if any) with the project's verifier.

    A clearing receipt that does not verify leaves the record as it stands
    (the reason says so); a file that does not verify is :data:`INVALID`.
    """
    try:
        evidence = Evidence.from_bytes(data)
        verdict = verify_evidence(evidence, now=now_ms)
        # What it accused the origin of before any answer it holds cleared it.
        accused = verify_evidence(dataclasses.replace(evidence, answers=()), now=now_ms)
    except (ContractError, ValueError) as exc:
        return Judged(name, "?", "?", INVALID, "?", f"does not verify: {exc}")
    confirmed = accused.status is EvidenceStatus.WITNESS_CONFIRMED
    status, reason, at = verdict.status.value, verdict.reason, None
    if cleared_by is not None and verdict.status is not EvidenceStatus.CLEARED:
        try:
            cleared = verify_clearing(evidence, cleared_by, now=now_ms)
        except (ContractError, ValueError) as exc:
            reason = f"{reason}; its clearing receipt does not verify: {exc}"
        else:
            status, reason, at = cleared.status.value, cleared.reason, cleared_at
    return Judged(
        name, verdict.kind.value, verdict.level.value, status, verdict.accused, reason,
        confirmed, at,
    )  # fmt: skip


def judge_folder(folder: Path, *, now_ms: int) -> list[Judged]:
    """Every ``*.json`` evidence file under ``folder``, judged (``FILE.cleared-by`` beside it)."""
    out: list[Judged] = []
    if not folder.is_dir():
        return out
    for path in sorted(folder.rglob("*.json")):
        clearing = path.with_name(path.name + ".cleared-by")
        try:
            data = path.read_bytes()
            cleared_by = clearing.read_bytes() if clearing.is_file() else None
            cleared_at = clearing.stat().st_mtime if cleared_by is not None else None
        except OSError:
            continue  # being written; judged on the next look
        name = f"{folder.name}/{path.relative_to(folder)}"
        out.append(judge_file(name, data, cleared_by, now_ms=now_ms, cleared_at=cleared_at))
    return out


@dataclass(frozen=True, slots=True)
class Tally:
    """What the evidence of one attack says about the honest parties."""

    proofs_vs_honest: int
    #: Witness-confirmed suspicions against the origin, cleared since or not.
    confirmed_vs_live: int
    #: Suspicions against the origin no witness confirmed.
    unconfirmed: int
    cleared: int
    standing: int
    invalid: int
    #: Seconds from the attack's end until the last suspicion against the origin
    #: cleared (0: none, or all cleared by the end; inf: one still stands).
    clear_s: float
    by_kind: dict[str, int] = field(default_factory=dict)


def tally(
    judged: Iterable[Judged], *, honest: Iterable[str], origin: str, attack_end: float
) -> Tally:
    """Count ``judged`` against the targets: proofs against any of ``honest``, and the
    suspicions against the live ``origin`` (confirmed, unconfirmed, cleared, standing)."""
    honest_ids = set(honest)
    proofs = confirmed = unconfirmed = cleared = standing = invalid = 0
    clear_s = 0.0
    by_kind: Counter[str] = Counter()
    for j in judged:
        if j.status == INVALID:
            invalid += 1
            continue
        by_kind[f"{j.kind}:{j.status}"] += 1
        if j.level == EvidenceLevel.PROOF.value:
            proofs += j.accused in honest_ids
            continue
        if j.accused != origin:
            continue
        if j.confirmed:
            confirmed += 1
        else:
            unconfirmed += 1
        if j.status != EvidenceStatus.CLEARED.value:
            standing += 1
            clear_s = math.inf
        else:
            cleared += 1
            # Cleared by an answer inside the record itself: no time of its own,
            # the origin had answered before the record was written.
            if j.cleared_at is not None:
                clear_s = max(clear_s, j.cleared_at - attack_end)
    return Tally(proofs, confirmed, unconfirmed, cleared, standing, invalid, clear_s, dict(by_kind))


def verdicts(t: Tally, *, clear_target_s: float = CLEAR_TARGET_S) -> dict[str, bool]:
    """PASS (True) / FAIL per target of issue 23's "Goals, measured"."""
    return {
        "no_proof_vs_honest": t.proofs_vs_honest == 0,
        "no_confirmed_vs_live": t.confirmed_vs_live == 0,
        "cleared_in_time": t.clear_s <= clear_target_s,
    }


# --------------------------------------------------------------------------- the stranger

_DEMAND = method_name("Serve", "Demand")
_CHALLENGE = method_name("Evidence", "Challenge")
_WATCH = "/grpc.health.v1.Health/Watch"
_SUBMIT = method_name("Attest", "Submit")
_DELIVER = method_name("Deliver", "Deliver")
#: Every channel its own connection (grpc would share them within a process).
_OWN_CONNECTION: list[tuple[str, Any]] = [
    ("grpc.use_local_subchannel_pool", 1),
    ("grpc.enable_http_proxy", 0),
    ("grpc.max_send_message_length", 8 << 20),
    ("grpc.max_receive_message_length", 8 << 20),
]


@dataclass(slots=True)
class _Calls:
    """The stranger's calls, by what it called and the status it got."""

    codes: Counter[str] = field(default_factory=Counter)

    def add(self, what: str, code: str, n: int = 1) -> None:
        self.codes[f"{what} {code}"] += n

    @property
    def total(self) -> int:
        return sum(self.codes.values())


async def _unary(call: Any, body: bytes, timeout: float, **kw: Any) -> tuple[str, bytes]:
    import grpc

    try:
        reply: bytes = await call(body, timeout=max(0.1, timeout), **kw)
    except grpc.aio.AioRpcError as exc:
        return exc.code().name, b""
    return "OK", reply


async def _challenges(
    args: argparse.Namespace, until: float, calls: _Calls, written: list[int]
) -> None:
    """Challenge every witness with a demand built and never sent, every 0.5 s; keep
    each UNANSWERED report as an ``unanswered`` record in the stranger's folder."""
    import grpc

    from contracts.evidence import unanswered_evidence
    from contracts.identity import load_identity
    from contracts.serve import build_demand
    from contracts.signed import open_statement
    from contracts.statements import Commitment, Demand, Obligation, WitnessOutcome, WitnessReport
    from nodes import wire
    from nodes._pb.provnet.v1 import evidence_pb2

    me = load_identity(args.key)
    commitment = open_statement(args.commitment.read_bytes(), Commitment)
    obligation = open_statement(args.obligation.read_bytes(), Obligation)
    chans = [grpc.aio.insecure_channel(w, options=_OWN_CONNECTION) for w in args.witnesses]
    stubs = [c.unary_unary(_CHALLENGE) for c in chans]
    args.evidence_out.mkdir(parents=True, exist_ok=True)

    async def ask(stub: Any, demand: bytes) -> tuple[str, bytes]:
        request = wire.challenge_request(
            commitment=commitment.to_bytes(),
            obligation=obligation.to_bytes(),
            demand=demand,
            origin_address="",
        ).SerializeToString()
        return await _unary(stub, request, _RPC_S)

    try:
        while time.monotonic() < until:
            demand = build_demand(me, obligation, now=int(time.time() * 1000))
            replies = await asyncio.gather(*(ask(s, demand.to_bytes()) for s in stubs))
            w_demands, w_reports = [], []
            for code, raw in replies:
                calls.add("Evidence.Challenge", code)
                if code != "OK":
                    continue
                result = wire.challenge_result_from_pb(
                    evidence_pb2.ChallengeResponse.FromString(raw)
                )
                if not result.witness_report:
                    continue
                report = open_statement(result.witness_report, WitnessReport)
                if report.statement.outcome is WitnessOutcome.UNANSWERED:
                    w_reports.append(report)
                    w_demands.append(open_statement(result.witness_demand, Demand))
            if w_reports:
                written[0] += 1
                if written[0] <= _MAX_STRANGER_FILES:
                    evidence = unanswered_evidence(
                        demand, obligation=obligation, commitment=commitment, re_asks=0,
                        reported_at=int(time.time() * 1000),
                        witness_demands=w_demands, witness_reports=w_reports,
                    )  # fmt: skip
                    path = args.evidence_out / f"unanswered-stranger-{written[0]:03d}.json"
                    path.write_bytes(evidence.to_bytes())
            await asyncio.sleep(0.5)
    finally:
        for c in chans:
            await c.close(None)


def _copy_with_nonce(demand: Any, nonce: str) -> bytes:
    """The signed demand with ``nonce`` in its payload instead, the signature left as it was."""
    from contracts.envelope import Envelope

    env = demand.envelope
    payload = env.payload.replace(demand.statement.nonce.encode(), nonce.encode())
    return Envelope(payload, env.payload_type, env.signatures).to_bytes()


async def _stranger(args: argparse.Namespace) -> dict[str, Any]:
    import grpc

    from contracts.identity import Identity, load_identity
    from contracts.serve import build_commitment, build_demand, build_obligation, new_nonce
    from contracts.signed import open_statement
    from contracts.statements import Obligation
    from nodes import wire
    from nodes.auth import ControlCredentials, node_id_at
    from nodes.messages import Delivery

    me = load_identity(args.key)
    obligation = open_statement(args.obligation.read_bytes(), Obligation)
    calls = _Calls()
    written = [0]
    held_s: list[float] = []
    extra: dict[str, Any] = {}
    started = time.time()
    until = time.monotonic() + args.attack_s
    left = lambda: until - time.monotonic()  # noqa: E731
    chans = [grpc.aio.insecure_channel(args.origin, options=_OWN_CONNECTION) for _ in range(8)]
    tasks: list[Any] = []
    name = ATTACKS[args.attack]
    if name in ("watch", "nonces", "replay", "min-deadline"):
        tasks.append(_challenges(args, until, calls, written))

    if name == "watch":
        watch = [c.unary_stream(_WATCH) for c in chans]
        held: list[Any] = []
        refused = [0]

        async def hold(k: int) -> None:
            call = watch[k % len(watch)](b"", timeout=max(1.0, left()))
            held.append(call)
            try:
                async for _ in call:
                    pass
            except grpc.aio.AioRpcError as exc:
                if exc.code() is not grpc.StatusCode.CANCELLED:
                    refused[0] += 1
                    calls.add("Health.Watch", exc.code().name)
            except asyncio.CancelledError:
                pass

        holders = [asyncio.ensure_future(hold(k)) for k in range(args.streams)]

        async def release() -> None:
            await asyncio.sleep(max(0.0, left()))
            for call in held:
                call.cancel()
            await asyncio.gather(*holders, return_exceptions=True)
            calls.add("Health.Watch", "held to the end", len(held) - refused[0])

        tasks.append(release())
    elif name == "nonces":
        from contracts.head_note import open_head
        from contracts.heads import FoldProof, verify_fold

        # A fold under a signed head, when given: its bearer demands are answered
        # without their signature being checked.
        aimed = obligation
        if args.head is not None:
            head = open_head(args.head.read_bytes())
            aimed = verify_fold(FoldProof.from_bytes(args.fold_proof.read_bytes()), head).obligation
        extra["aimed_at"] = "a fold under a signed head" if args.head else "a per-fold obligation"
        template = [build_demand(me, aimed, now=int(time.time() * 1000))]

        async def fill(k: int) -> None:
            stub = chans[k % len(chans)].unary_unary(_DEMAND)
            while left() > 0:
                if k == 0 and time.time() * 1000 - template[0].statement.time > 10_000:
                    # Dated within the node's window, whatever the attack's length.
                    template[0] = build_demand(me, aimed, now=int(time.time() * 1000))
                copies = [_copy_with_nonce(template[0], new_nonce()) for _ in range(256)]
                body = wire.encode_demand_request(copies)
                code, _ = await _unary(stub, body, min(_RPC_S, left()))
                calls.add("Serve.Demand(256 copies)", code)
                if code == "OK":
                    extra["nonces_answered"] = extra.get("nonces_answered", 0) + 256

        tasks += [fill(k) for k in range(6)]
    elif name == "replay":
        now = int(time.time() * 1000)
        batch = wire.encode_demand_request(
            [build_demand(me, obligation, now=now).to_bytes() for _ in range(256)]
        )
        first, _ = await _unary(chans[0].unary_unary(_DEMAND), batch, _RPC_S)
        calls.add("Serve.Demand(256, first)", first)

        async def replay(k: int) -> None:
            stub = chans[k % len(chans)].unary_unary(_DEMAND)
            while left() > 0:
                code, _ = await _unary(stub, batch, min(_RPC_S, left()))
                calls.add("Serve.Demand(256, replayed)", code)

        tasks += [replay(k) for k in range(args.callers)]
    elif name == "min-deadline":

        async def flood(k: int) -> None:
            stub = chans[k % len(chans)].unary_unary(_DEMAND)
            while left() > 0:
                demand = build_demand(me, obligation, now=int(time.time() * 1000)).to_bytes()
                body = wire.encode_demand_request([demand])
                code, _ = await _unary(stub, body, min(_RPC_S, left()))
                calls.add("Serve.Demand", code)

        tasks += [flood(k) for k in range(args.flood_callers)]
    elif name == "bulk":
        targets = [args.origin, args.holder]
        bulk_chans = [grpc.aio.insecure_channel(t, options=_OWN_CONNECTION) for t in targets]
        chans += bulk_chans

        async def silent() -> AsyncIterator[bytes]:
            await asyncio.sleep(max(0.0, left()))
            return
            yield b""  # an async generator that never sends its body

        async def hog(k: int) -> None:
            stream = bulk_chans[k % len(bulk_chans)].stream_unary(_SUBMIT)
            while left() > 0.1:
                start = time.monotonic()
                call = stream(silent(), timeout=left())
                try:
                    await call
                    code = "OK"
                except grpc.aio.AioRpcError as exc:
                    code = exc.code().name
                except asyncio.CancelledError:
                    task = asyncio.current_task()
                    if task is not None and task.cancelling():
                        raise
                    # grpc.aio cancels a call the node ended while its body was due.
                    code = "CANCELLED (locally)"
                calls.add("Attest.Submit(bodiless)", code)
                held_s.append(time.monotonic() - start)
                if code != "DEADLINE_EXCEEDED" and time.monotonic() - start < 0.05:
                    await asyncio.sleep(0.05)  # refused at once: try again shortly

        tasks += [hog(k) for k in range(4)]
    elif name == "deliveries":
        fresh = ControlCredentials(Identity.generate())  # a key nobody configured
        mine = Identity.generate()
        now = int(time.time() * 1000)
        c = build_commitment(mine, epoch="e", value_ref="junk", fold_seq=0, hops=[b"{}"],
                             issued_at=now)  # fmt: skip
        o = build_obligation(mine, c, serve_until=now + 3_600_000, deadline_ms=2000,
                             endpoints=["127.0.0.1:1"], issued_at=now)  # fmt: skip
        holder_chans = [grpc.aio.insecure_channel(args.holder, options=_OWN_CONNECTION)
                        for _ in range(4)]  # fmt: skip
        chans += holder_chans
        sent, held = [0], [0]
        # Signed for the holder it calls (control calls name their target node).
        holder_id = await node_id_at(holder_chans[0], _RPC_S)

        async def deliver(k: int) -> None:
            stub = holder_chans[k % len(holder_chans)].unary_unary(_DELIVER)
            # Until --deliveries are held by the holder (a refused one is sent anew).
            while left() > 0 and held[0] < args.deliveries:
                sent[0] += 1
                d = Delivery(f"junk-{sent[0]}", b"x", (c.to_bytes(),), (o.to_bytes(),), "")
                body = wire.deliver_request(d).SerializeToString()
                signed = fresh.metadata(_DELIVER, body, target=holder_id)
                code, _ = await _unary(stub, body, min(_RPC_S, left()), metadata=signed)
                calls.add("Deliver(1 byte)", code)
                held[0] += code == "OK"

        tasks += [deliver(k) for k in range(16)]
    try:
        await asyncio.gather(*tasks)
    finally:
        for chan in chans:
            await chan.close(None)
    ended = time.time()
    extra["stranger_records"] = written[0]
    if held_s:
        extra["bulk_call_held_s_max"] = round(max(held_s), 1)
    return {
        "calls": calls.total,
        "codes": dict(sorted(calls.codes.items())),
        "started": started,
        "ended": ended,
        "extra": extra,
    }


# --------------------------------------------------------------------------- the cluster


@dataclass(slots=True)
class _Cluster:
    """The nodes of one attack, and the operator that drives the honest side."""

    work: Path
    started: list[tuple[Any, subprocess.Popen[bytes]]]
    address: dict[str, str]
    ids: dict[str, str] = field(default_factory=dict)

    @property
    def holder_evidence(self) -> Path:
        return self.work / "evidence" / "holder"

    @property
    def stranger_evidence(self) -> Path:
        return self.work / "evidence" / "stranger"

    def origin_alive(self) -> bool:
        return self.started[0][1].poll() is None


_NAMES = ("origin", "w1", "w2", "holder")


def _start_cluster(work: Path, operator_id: str) -> _Cluster:
    from nodes.cluster import NodeSpec, free_ports, peer_list, start_nodes

    ports = free_ports(len(_NAMES))
    base = [
        NodeSpec(
            name=n, port=p, data_dir=work / "nodes" / n, log_file=work / "logs" / f"{n}.log",
            evidence_dir=work / "evidence" / n, operator_keys=(operator_id,),
        )
        for n, p in zip(_NAMES, ports, strict=True)
    ]  # fmt: skip
    specs = [dataclasses.replace(s, peers=peer_list(base, s.name)) for s in base]
    started = start_nodes(specs, timeout=90)
    return _Cluster(work, list(started), {s.name: s.address for s in specs})


def _stop_cluster(cluster: _Cluster) -> None:
    from nodes.cluster import stop_all

    stop_all(cluster.started, grace=5.0)


@dataclass(slots=True)
class _Work:
    """The honest holder's work: what it got, while the attack ran or after it."""

    #: Demands the origin answered (the fold verified).
    served: int = 0
    unanswered: int = 0
    #: Refusals with a status: a workload step refused by a node (step and code),
    #: or a demand that got another outcome than served/unanswered.
    refused: Counter[str] = field(default_factory=Counter)
    #: Rehydrations served from the holder's cache (no demand made).
    cached: int = 0
    cycles: int = 0
    #: Cycles begun after the attack ended and finished.
    after: int = 0


class _Operator:
    """Signed control calls to the cluster's nodes (the operator key), through the one
    client (:class:`nodes.control.NodeClients`)."""

    def __init__(self, cluster: _Cluster, key: Any) -> None:
        from nodes.auth import ControlCredentials
        from nodes.control import NodeClients

        self.cluster = cluster
        self._clients = NodeClients(ControlCredentials(key), timeout=_RPC_S)
        self._seq = 0

    def _at(self, name: str) -> Any:
        return self._clients.at(self.cluster.address[name])

    async def close(self) -> None:
        await self._clients.close()

    async def ids(self) -> dict[str, str]:
        return {name: (await self._at(name).info()).node_id for name in self.cluster.address}

    async def stats(self, name: str) -> dict[str, int]:
        counters: dict[str, int] = await self._at(name).stats()
        return counters

    async def commit_and_forward(self, value_ref: str, deadline_ms: int) -> Any:
        """Append a hop at the origin, commit it as a fold, forward the value to the holder."""
        self._seq += 1
        origin = self._at("origin")
        hop = json.dumps({"step": self._seq, "op": "framing", "value": value_ref}).encode()
        seqs = await origin.append([hop], [self._seq])
        fold = await origin.commit_fold(
            value_ref, seqs, deadline_ms=deadline_ms, value=f"value {value_ref}".encode()
        )
        await origin.forward(value_ref, "holder")
        return fold

    async def compaction(self, value_ref: str) -> tuple[bytes, bytes]:
        """One fold committed under a signed head at the origin: (the head, its fold proof)."""
        self._seq += 1
        origin = self._at("origin")
        hop = json.dumps({"step": self._seq, "op": "framing", "value": value_ref}).encode()
        seqs = await origin.append([hop], [self._seq])
        compaction = await origin.commit_compaction([(value_ref, seqs, b"v")])
        return compaction.head, compaction.fold_proofs[0]

    async def rehydrate(self, value_ref: str) -> Any:
        witnesses = [self.cluster.address["w1"], self.cluster.address["w2"]]
        return await self._at("holder").rehydrate(value_ref, witnesses, timeout=_REHYDRATE_S)


async def _holder_work(
    op: _Operator,
    deadline_ms: int,
    pool: Sequence[str],
    during: _Work,
    state: dict[str, Any],
    stop: asyncio.Event,
) -> None:
    """Cycles of the honest work until ``stop``: a new fold committed at the origin and
    forwarded, then the holder's rehydration of it, of the next fold of ``pool``
    (forwarded before the attack, never rehydrated: its demand goes to the origin
    whatever the control plane does) and of the base value (its hops cached: it
    shows whether the holder still holds it). Counted in ``during`` while the
    attack runs (``state["attack_over"]`` unset), else in ``state["after_work"]``."""
    from nodes.messages import Outcome
    from nodes.transport import CallFailed

    k = 0
    while not stop.is_set():
        k += 1
        over_at_start = bool(state.get("attack_over"))
        into: _Work = state["after_work"] if over_at_start else during
        into.cycles += 1
        refs = [f"work-{k}"]
        try:
            await op.commit_and_forward(f"work-{k}", deadline_ms)
        except CallFailed as exc:
            into.refused[f"commit/forward {exc.code}"] += 1
            refs = []
        if k <= len(pool):
            refs.append(pool[k - 1])
        refs.append("base")
        for value_ref in refs:
            try:
                report = await op.rehydrate(value_ref)
            except CallFailed as exc:
                into.refused[f"rehydrate {exc.code}"] += 1
                continue
            for o in report.outcomes:
                if o.outcome is Outcome.SERVED and o.asks == 0:
                    into.cached += 1
                elif o.outcome is Outcome.SERVED:
                    into.served += 1
                elif o.outcome is Outcome.UNANSWERED:
                    into.unanswered += 1
                else:
                    into.refused[f"demand {o.outcome.value}"] += 1
        if over_at_start:
            into.after += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.2)


async def _referee(cluster: _Cluster, obligation: bytes, now_ms: int) -> int:
    """A third party's demand for ``obligation``; any receipt the origin signs for it
    that clears a standing stranger record is written beside it. Returns how many."""
    from contracts.identity import Identity
    from contracts.serve import build_demand
    from contracts.signed import open_statement
    from contracts.statements import Obligation
    from nodes.control import NodeClient
    from nodes.transport import CallFailed

    ob = open_statement(obligation, Obligation)
    demand = build_demand(Identity.generate(), ob, now=now_ms)
    origin = NodeClient(cluster.address["origin"], options=_OWN_CONNECTION, timeout=_RPC_S)
    async with origin:
        try:
            answers = await origin.demand([demand.to_bytes()])
        except CallFailed:
            return 0
    if not answers:
        return 0
    receipt = answers[0].receipt
    cleared = 0
    for path in sorted(cluster.stranger_evidence.glob("*.json")):
        beside = path.with_name(path.name + ".cleared-by")
        if beside.exists():
            continue
        try:
            verify_clearing(path.read_bytes(), receipt, now=now_ms)
        except (ContractError, ValueError):
            continue
        beside.write_bytes(receipt)
        cleared += 1
    return cleared


def _judge_all(cluster: _Cluster) -> list[Judged]:
    now_ms = int(time.time() * 1000)
    return judge_folder(cluster.holder_evidence, now_ms=now_ms) + judge_folder(
        cluster.stranger_evidence, now_ms=now_ms
    )


async def _one_attack(
    args: argparse.Namespace, attack: int, rnd: int, work: Path, operator: Any
) -> dict[str, Any]:
    from contracts.identity import Identity, save_identity
    from nodes.services import MIN_DEADLINE_MS

    name = ATTACKS[attack]
    cluster = _start_cluster(work, operator.node_id)
    op = _Operator(cluster, operator)
    stranger: subprocess.Popen[bytes] | None = None
    try:
        cluster.ids = await op.ids()
        deadline_ms = MIN_DEADLINE_MS if name == "min-deadline" else 0
        base = await op.commit_and_forward("base", deadline_ms)
        first = await op.rehydrate("base")
        pool = [f"pool-{n}" for n in range(args.pool)]
        for ref in pool:
            await op.commit_and_forward(ref, deadline_ms)
        (work / "commitment.bin").write_bytes(bytes(base.commitment))
        (work / "obligation.bin").write_bytes(bytes(base.obligation))
        head_args: list[str] = []
        if name == "nonces":
            # Bearer demands under a signed head are the ones answered unsigned.
            head, proof = await op.compaction("head-base")
            (work / "head.bin").write_bytes(head)
            (work / "fold-proof.bin").write_bytes(proof)
            head_args = [
                "--head",
                str(work / "head.bin"),
                "--fold-proof",
                str(work / "fold-proof.bin"),
            ]
        key = work / "stranger.key"
        save_identity(Identity.generate(), key)
        during, after = _Work(), _Work()
        state: dict[str, Any] = {"after_work": after}
        stop = asyncio.Event()
        worker = asyncio.ensure_future(_holder_work(op, deadline_ms, pool, during, state, stop))
        out = work / "stranger.json"
        argv = [
            sys.executable, __file__, "--role", "stranger", "--attack", str(attack),
            "--attack-s", str(args.attack_s), "--key", str(key),
            "--commitment", str(work / "commitment.bin"),
            "--obligation", str(work / "obligation.bin"),
            "--origin", cluster.address["origin"], "--holder", cluster.address["holder"],
            "--witnesses", cluster.address["w1"], cluster.address["w2"],
            "--evidence-out", str(cluster.stranger_evidence), "--result", str(out),
            "--streams", str(args.streams), "--callers", str(args.callers),
            "--flood-callers", str(args.flood_callers), "--deliveries", str(args.deliveries),
            *head_args,
        ]  # fmt: skip
        stranger = subprocess.Popen(argv)
        give_up = time.monotonic() + args.attack_s + 60
        while stranger.poll() is None and time.monotonic() < give_up:
            await asyncio.sleep(0.2)
        if stranger.poll() is None:
            stranger.kill()
            stranger.wait()
            raise SystemExit(f"the stranger of attack {name} did not stop")
        attack_end = time.time()
        state["attack_over"] = True
        if stranger.returncode != 0:
            raise SystemExit(f"the stranger of attack {name} exited {stranger.returncode}")
        result: dict[str, Any] = json.loads(out.read_text())
        attack_end = min(attack_end, float(result["ended"]))
        # Watch: until no suspicion stands (once the holder has worked a full cycle
        # since the attack ended, so what it had in flight is written) or the limit.
        watch_until = time.monotonic() + args.watch_s
        honest = cluster.ids.values()
        origin = cluster.ids["origin"]
        while time.monotonic() < watch_until:
            if any(
                not p.with_name(p.name + ".cleared-by").exists()
                for p in cluster.stranger_evidence.glob("*.json")
            ):
                await _referee(cluster, bytes(base.obligation), int(time.time() * 1000))
            t = tally(_judge_all(cluster), honest=honest, origin=origin, attack_end=attack_end)
            if t.standing == 0 and after.after >= 1:
                break
            await asyncio.sleep(1.0)
        stop.set()
        await asyncio.wait_for(worker, _REHYDRATE_S * 2 + _RPC_S * 3)
        judged = _judge_all(cluster)
        t = tally(judged, honest=honest, origin=origin, attack_end=attack_end)
        alive = cluster.origin_alive()
        stats = await op.stats("holder")
    finally:
        await op.close()
        if stranger is not None and stranger.poll() is None:
            stranger.kill()
            stranger.wait()
        _stop_cluster(cluster)
    seconds = max(1e-9, float(result["ended"]) - float(result["started"]))
    v = verdicts(t)
    return {
        "round": rnd + 1,
        "attack": f"{attack} {name}",
        "attack_s": round(seconds, 1),
        "stranger_calls": result["calls"],
        "stranger_rate_per_s": round(result["calls"] / seconds, 1),
        "stranger_codes": result["codes"],
        "stranger_extra": result["extra"],
        "first_rehydration": [o.outcome.value for o in first.outcomes],
        "holder_served": during.served,
        "holder_refused": sum(during.refused.values()),
        "holder_refused_codes": dict(sorted(during.refused.items())),
        "holder_unanswered": during.unanswered,
        "holder_cycles": during.cycles,
        "holder_cached": during.cached,
        "after_served": after.served,
        "after_refused_codes": dict(sorted(after.refused.items())),
        "after_unanswered": after.unanswered,
        "origin_alive": alive,
        "proofs_vs_honest": t.proofs_vs_honest,
        "confirmed_vs_live": t.confirmed_vs_live if alive else f"{t.confirmed_vs_live} (dead)",
        "unconfirmed": t.unconfirmed,
        "cleared": t.cleared,
        "standing": t.standing,
        "invalid_files": t.invalid,
        "clear_s": t.clear_s if math.isinf(t.clear_s) else round(t.clear_s, 1),
        "evidence_by_kind": t.by_kind,
        "holder_stats": {k: v for k, v in sorted(stats.items()) if k.startswith("evidence_")},
        "verdict_proofs": _pf(v["no_proof_vs_honest"]),
        "verdict_confirmed": _pf(v["no_confirmed_vs_live"] and alive),
        "verdict_cleared": _pf(v["cleared_in_time"]),
        "ok": all(v.values()) and alive,
    }


def _pf(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


_CSV_FIELDS = (
    "round", "attack", "attack_s", "stranger_calls", "stranger_rate_per_s", "holder_served",
    "holder_refused", "holder_unanswered", "proofs_vs_honest", "confirmed_vs_live",
    "unconfirmed", "cleared", "standing", "clear_s", "verdict_proofs", "verdict_confirmed",
    "verdict_cleared", "stranger_codes", "holder_refused_codes", "evidence_by_kind",
)  # fmt: skip


def _print_row(row: dict[str, Any]) -> None:
    print(
        f"attack {row['attack']} (round {row['round']}): stranger {row['stranger_calls']} calls"
        f" in {row['attack_s']} s = {row['stranger_rate_per_s']}/s {row['stranger_codes']}"
        f" {row['stranger_extra']}",
        flush=True,
    )
    print(
        f"  holder during the attack: served {row['holder_served']}, refused"
        f" {row['holder_refused']} {row['holder_refused_codes']}, unanswered"
        f" {row['holder_unanswered']} ({row['holder_cycles']} cycles, {row['holder_cached']}"
        f" from its cache); after: served"
        f" {row['after_served']}, refused {row['after_refused_codes']}, unanswered"
        f" {row['after_unanswered']}"
    )
    print(f"  evidence {row['evidence_by_kind']}; holder counters {row['holder_stats']}")
    print(
        f"  proofs against honest parties {row['proofs_vs_honest']} (= 0: {row['verdict_proofs']})"
        f"; witness-confirmed suspicions against the live origin {row['confirmed_vs_live']}"
        f" (= 0: {row['verdict_confirmed']}); unconfirmed {row['unconfirmed']}; cleared"
        f" {row['cleared']}, standing {row['standing']}; cleared {row['clear_s']} s after the"
        f" attack (<= {CLEAR_TARGET_S:g}: {row['verdict_cleared']})",
        flush=True,
    )


def _write(out: Path, rows: Sequence[dict[str, Any]], header: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with (out / "framing.csv").open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=_CSV_FIELDS, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow(
                {k: json.dumps(v) if isinstance(v, dict) else v for k, v in row.items()}
            )
    lines = [
        f"# Framing benchmark\n\n{header}\n",
        "| round | attack | stranger calls (/s) | holder served / refused / unanswered"
        " | proofs vs honest | confirmed vs live | unconfirmed | cleared after (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['round']} | {r['attack']} | {r['stranger_calls']} ({r['stranger_rate_per_s']})"
            f" | {r['holder_served']} / {r['holder_refused']} / {r['holder_unanswered']}"
            f" | {r['proofs_vs_honest']} {r['verdict_proofs']}"
            f" | {r['confirmed_vs_live']} {r['verdict_confirmed']}"
            f" | {r['unconfirmed']} | {r['clear_s']} {r['verdict_cleared']} |"
        )
    (out / "framing.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _drive(args: argparse.Namespace) -> int:
    from contracts.identity import Identity

    attacks = _parse_attacks(args.attacks)
    root = Path(tempfile.mkdtemp(prefix="provnet-framing-"))
    operator = Identity.generate()
    header = (
        f"attacks {', '.join(f'{a} {ATTACKS[a]}' for a in attacks)}; {args.attack_s:g} s each,"
        f" watch up to {args.watch_s:g} s; rounds {args.rounds}; streams {args.streams},"
        f" replay callers {args.callers}, flood callers {args.flood_callers},"
        f" deliveries {args.deliveries}"
    )
    print(header, flush=True)
    rows: list[dict[str, Any]] = []
    try:
        for rnd in range(args.rounds):
            for attack in attacks:
                work = root / f"r{rnd + 1}-{attack}"
                row = asyncio.run(_one_attack(args, attack, rnd, work, operator))
                rows.append(row)
                _print_row(row)
                _write(args.out, rows, header)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    passing = sum(r["ok"] for r in rows)
    print(f"attacks passing every target: {passing} of {len(rows)}; written to {args.out}")
    return 0 if passing == len(rows) else 1


def _parse_attacks(text: str) -> list[int]:
    try:
        picked = [int(a) for a in text.split(",") if a.strip()]
    except ValueError:
        picked = []
    if not picked or any(a not in ATTACKS for a in picked):
        raise SystemExit(
            f"--attacks {text!r}: expected a comma-separated list of {sorted(ATTACKS)}"
        )
    return picked


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--role", choices=("drive", "stranger"), default="drive")
    parser.add_argument("--attacks", default=",".join(str(a) for a in ATTACKS))
    parser.add_argument("--attack-s", type=float, default=15.0, help="seconds each attack runs")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--watch-s", type=float, default=CLEAR_TARGET_S,
        help="seconds to watch after an attack for every suspicion to clear",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("framing-results"))
    parser.add_argument("--streams", type=int, default=160, help="Health.Watch streams (1)")
    parser.add_argument("--callers", type=int, default=128, help="replaying callers (3)")
    parser.add_argument("--flood-callers", type=int, default=200, help="demanding callers (4)")
    parser.add_argument(
        "--deliveries", type=int, default=4100, help="one-byte deliveries the holder takes (8)"
    )
    parser.add_argument(
        "--pool", type=int, default=40,
        help="folds forwarded to the holder before the attack, one rehydrated a cycle",
    )  # fmt: skip
    parser.add_argument("--keep", action="store_true", help="keep the work dirs (node logs)")
    # the stranger's own
    parser.add_argument("--attack", type=int)
    parser.add_argument("--key", type=Path)
    parser.add_argument("--commitment", type=Path)
    parser.add_argument("--obligation", type=Path)
    parser.add_argument("--origin")
    parser.add_argument("--holder")
    parser.add_argument("--witnesses", nargs="*", default=[])
    parser.add_argument("--evidence-out", type=Path)
    parser.add_argument("--result", type=Path)
    parser.add_argument("--head", type=Path)
    parser.add_argument("--fold-proof", type=Path)
    args = parser.parse_args()
    if args.role == "stranger":
        result = asyncio.run(_stranger(args))
        args.result.write_text(json.dumps(result))
        return 0
    if args.attack_s <= 0 or args.watch_s < 0 or args.rounds < 1:
        parser.error("--attack-s must be > 0, --watch-s >= 0 and --rounds >= 1")
    return _drive(args)


if __name__ == "__main__":
    raise SystemExit(main())
