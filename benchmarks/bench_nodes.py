"""Node wire benchmark: verified demand → receipt next to a bare grpc.aio round trip.

Run (loopback only; rerunnable; ~100 s with the default 30 s phases)::

    .venv/bin/python benchmarks/bench_nodes.py            # full run
    .venv/bin/python benchmarks/bench_nodes.py --duration 5 --samples 200   # quick
    .venv/bin/python benchmarks/bench_nodes.py --profile DIR   # cProfile both sides

One origin node runs in a child process (its own core on a 2-core box). The
same process and event loop also run a bare grpc.aio server with one
``/bench.Echo/Echo`` unary method (bytes in, the same bytes out; no
interceptor, no provnet code) with the same server options, so both are
measured side by side in one run. Latency samples are interleaved (bare,
1-hop, 5-hop, 50-hop, bare, …) and the throughput phases run in short
interleaved rounds, so background load drifts and bursts hit both.
The holder runs in this process with :class:`nodes.client.Holder` over the
real gRPC transport, its hop cache off, so every decision asks the origin
again. The targets are judged on folds under a signed tree head, asked
unsigned first (design revision 3): a faithful origin answers with the hops
and no receipt, the hops reproduce the root proven under the head the holder
verified once, and neither process signs or verifies anything. The signed
demand every other answer is followed by (two Ed25519 signatures, the
holder's demand and the origin's receipt, and no verification when the
receipt is faithful) is measured in the same run as ``signed 5-hop (head)``,
and per-fold statements (the first contract: four operations per demand,
both signatures verified) for comparison.

The bare server also serves two floors, measured alongside: the bare round
trip plus only the two Ed25519 signatures the revision-2 contract requires
of a faithful demand (``Sign2``; the first contract's floor was four
operations, two signatures and two verifications), and the bare round trip
plus only the ``contracts`` library calls of a 5-hop demand under a head
(``Contracts``: sign the demand with ``contracts.serve.build_demand``, as a
holder does; parse it, check its binding, apply the answer rule and sign
the receipt with ``contracts.serve.answer_demand``; judge the answer
lazily) — what no node built on the contract, or on this library, can go
below. Two
latency rows step from that floor towards a verified demand with the same
holder-side calls: ``step: + node core`` (the node's ``answer_demands`` —
checks, nonce memory, answer — served by the bare server) and ``step: +
node server`` (the node's own server: handler wrapper, auth, limits); the
rest up to ``verified 5-hop (head)`` is the holder's client. The unsigned
first ask a faithful demand under a head is rides a ``Serve.Ask`` stream
(:mod:`nodes.ask_stream`); its carrier alone is ``bare ask stream, 5 hops``
(the holder's :class:`nodes.ask_stream.AskStream` to a bare stream method
answering every call with the same five hops, encoded once), printed with
the verified demand's ratio to it. Two more rows take the ask's steps
(``ask step: bare + node core``: the holder's stream, the hops checked
against the verified root, served by the origin's stream loop and
``answer_asks`` on the bare server; ``ask step: + node server``: the same
stream to the node's own server); the rest up to ``verified 5-hop (head)``
is ``nodes.client.Holder``, whose own time before and after its call a
second, identical holder shows (``verified 5-hop (head), timed inside``:
its transport notes when the call starts and ends; the run prints the p50
of each part).

Printed:

1. latency p50/p99 of the bare unary round trip, of both floors and of a
   verified demand for 1-, 5- and 50-hop folds (per-fold and under a head),
   and the ratio verified-5-hop (head) p50 / bare p50 (target ≤ 1.15);
2. sustained demands/s with concurrent holders, errors counted (target:
   zero), next to bare unary calls/s, both floors and the signed demand
   under a head with the same concurrency, in ``--rounds`` interleaved rounds (each row runs
   ``--duration``/``--rounds`` seconds per round, bare next to the verified
   demand under a head, the order reversed every other round); the target
   (ratio ≥ 0.85) is judged on the median of the rounds' verified ÷ bare
   ratios, which are all printed with the pooled one;
3. Ed25519 signatures made and verified per 100 demands, both processes
   counted: faithful under a head (target 0 / 0) next to the fault path's
   signed re-ask, and per-fold statements;
4. Serve RPCs per decision for a value folded three times (1 + 5 + 50 hops)
   by one origin (target: exactly 1 per origin).

With ``--tls`` the origin's node server and the bare server also listen on
a TLS port each (certificates this run makes, :mod:`nodes.tls`), and the
run adds paired rows next to the plaintext ones in the same interleaving:
``bare unary (TLS)`` and ``verified 5-hop (head) (TLS)`` latency, and
``bare unary (TLS)`` and ``verified 5-hop, under a head (TLS)`` throughput,
with the TLS ÷ plaintext ratio of each; connections are set up before the
samples, so the rows measure TLS on established connections (record
encryption), not handshakes. The targets stay judged on plaintext.

Exit status 0 when every target is met, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import cProfile
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
from _procs import cpu_seconds, stop

from nodes.methods import method_name

if TYPE_CHECKING:
    from nodes.client import HeldFold, Holder

ECHO_METHOD = "/bench.Echo/Echo"
SIGN2_METHOD = "/bench.Echo/Sign2"
CONTRACTS_METHOD = "/bench.Echo/Contracts"
NODE_CORE_METHOD = "/bench.Echo/NodeCore"
ASK_CORE_METHOD = "/bench.Echo/AskCore"
ASK_ECHO_METHOD = "/bench.Echo/AskEcho"
SERVE_DEMAND_METHOD = method_name("Serve", "Demand")
FLOOR_CRYPTO = "floor: bare + 2 Ed25519 signs"
FLOOR_CONTRACTS = "floor: bare + contracts calls, 5-hop"
BARE = "bare unary"
BARE_ASK = "bare ask stream, 5 hops"
VERIFIED_FOLDS = "verified 5-hop, per-fold statements"
VERIFIED_HEAD = "verified 5-hop, under a head"
SIGNED_HEAD = "signed 5-hop (head)"
STEP_NODE_CORE = "step: + node core, 5-hop (head)"
STEP_NODE_SERVER = "step: + node server, 5-hop (head)"
STEP_ASK_CORE = "ask step: bare + node core, 5-hop (head)"
STEP_ASK_SERVER = "ask step: + node server, 5-hop (head)"
TIMED_HEAD = "verified 5-hop (head), timed inside"
STATS_METHOD = "/bench.Echo/SigStats"
FOLD_SIZES = (1, 5, 50)
TARGET_LATENCY_RATIO = 1.15
TARGET_THROUGHPUT_RATIO = 0.85
#: Set (to a file path) in the origin child's environment by ``--profile``.
PROFILE_ENV = "PROVNET_BENCH_PROFILE"
#: Set (to the directory of the run's CA and origin certificate) by ``--tls``.
TLS_ENV = "PROVNET_BENCH_TLS"
TLS_SUFFIX = " (TLS)"


def _identity(x: bytes) -> bytes:
    return x


def _fold_hops(first_step: int, count: int) -> list[bytes]:
    """``count`` hop records (JSON bytes) of a fallback-model chain from ``first_step``."""
    return [
        json.dumps(
            {
                "hop_id": f"h{step:06d}",
                "step": step,
                "op": "LLM_TRANSFORM",
                "axis_deltas": {"capability": 0.65},
                "taints_added": [f"taint:fallback_model:{step}"],
                "parent_hop_ids": [f"h{step - 1:06d}"],
            }
        ).encode()
        for step in range(first_step, first_step + count)
    ]


def _local_head_fold(origin: Any, hops: list[bytes], value_ref: str) -> tuple[Any, bytes]:
    """A signed head over one fold of ``hops`` and its fold proof (bytes), valid for a day."""
    from contracts.heads import FoldInput, HeadLog

    now = int(time.time() * 1000)
    compaction = HeadLog(origin, "e1").compact(
        [FoldInput(value_ref=value_ref, fold_seq=0, hops=hops)],
        serve_until=now + 24 * 3_600_000,
        deadline_ms=2000,
        endpoints=["127.0.0.1:1"],
        issued_at=now,
    )
    return compaction.head, compaction.proofs[value_ref].to_bytes()


#: Ed25519 signatures made and verified by this process (``_count_signatures``).
_SIGNATURES = {"sign": 0, "verify": 0}


class _CountedSignatures:
    """Adds every Ed25519 operation of this process to ``_SIGNATURES``."""

    def signed(self, seconds: float) -> None:
        _SIGNATURES["sign"] += 1

    def verified(self, seconds: float) -> None:
        _SIGNATURES["verify"] += 1


def _count_signatures() -> None:
    """Count every Ed25519 signature made and verified, for the rest of this process.

    ``contracts.identity`` reports each one to its observer; the observer is
    installed once and never removed (each bench process counts from start).
    """
    from contracts.identity import observe_signatures

    observe_signatures(_CountedSignatures()).__enter__()


# --------------------------------------------------------------------------- child: the origin


async def _serve(data_dir: Path, port_file: Path) -> None:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from grpc_health.v1 import health_pb2

    from contracts.heads import FoldProof, verify_fold
    from contracts.identity import Identity
    from contracts.serve import answer_demand, refusal_for, verify_demand
    from contracts.signed import parse_statement
    from contracts.statements import Demand
    from nodes import wire
    from nodes._pb.provnet.v1 import common_pb2, serve_pb2
    from nodes.app import load_or_create_identity
    from nodes.ask_stream import serve_asks
    from nodes.config import LogFormat, NodeConfig
    from nodes.logging import configure_logging
    from nodes.messages import Answer
    from nodes.server import build_server, server_options
    from nodes.services import NodeCore
    from nodes.transport import GrpcTransport

    configure_logging(LogFormat.JSON, "warning")
    _count_signatures()
    identity = load_or_create_identity(data_dir)
    # The bench's control calls (Append, CommitFold) are signed with the node's own key.
    config = NodeConfig(
        name="bench-origin",
        data_dir=data_dir,
        listen="127.0.0.1:0",
        operator_keys=(identity.node_id,),
    )
    core = await NodeCore.open(config, identity, transport=GrpcTransport())
    node = build_server(core, config.listen, config.max_message_bytes)

    async def echo(request: bytes, context: Any) -> bytes:
        return request

    # Floor 1: only the two Ed25519 signatures a faithful demand requires under
    # revision 2 (the holder signs its demand, the origin signs its answer;
    # nobody verifies); request = signature ‖ message.
    floor_key = Ed25519PrivateKey.generate()

    async def sign2(request: bytes, context: Any) -> bytes:
        message = request[64:]
        return floor_key.sign(message) + message

    # Floor 2: the contracts library's calls for a 5-hop demand under a head
    # and nothing else (no node, store, interceptor, nonce memory or holder
    # bookkeeping): parse the bearer demand, check its binding, answer, sign.
    floor_origin = Identity.generate()
    floor_hops = _fold_hops(1, 5)
    floor_head, floor_proof = _local_head_fold(floor_origin, floor_hops, "floor")
    floor_fold = verify_fold(FoldProof.from_bytes(floor_proof), floor_head)
    floor_root = floor_fold.commitment.statement.root

    async def contracts_only(request: Any, context: Any) -> Any:
        demand = parse_statement(bytes(request.demands[0]), Demand)
        verify_demand(demand, obligation=floor_fold.obligation, commitment=floor_fold.commitment)
        now = int(time.time() * 1000)
        o, c = floor_fold.obligation.statement, floor_fold.commitment.statement
        if refusal_for(o, c, demand.statement, floor_hops, now, floor_root) is None:
            # a whole fold served: the receipt answer_demand signs
            receipt = answer_demand(
                floor_origin,
                demand,
                obligation=floor_fold.obligation,
                commitment=floor_fold.commitment,
                hops=floor_hops,
                now=now,
                hops_root=floor_root,
            ).to_bytes()
        else:  # pragma: no cover - the floor's holder asks for what is served
            raise RuntimeError("the floor's demand is not served")
        return serve_pb2.DemandResponse(
            answers=[common_pb2.Answer(receipt=receipt, hops=floor_hops)]
        )

    async def node_core(request: Any, context: Any) -> Any:
        # The node's own Serve.Demand work (checks, nonce memory, answer) on
        # the bare server: no interceptor, no node server around it.
        return wire.demand_response(await core.answer_demands(list(request.demands)))

    encodings = wire.AnswerEncodings()

    async def ask_core(requests: Any, context: Any) -> None:
        # The origin's work for unsigned first asks on the bare server: the
        # node's stream loop and answer_asks, no node server around them.
        await serve_asks(context, core.answer_asks, encodings.response, config.max_message_bytes)

    async def ask_echo(requests: Any, context: Any) -> None:
        # The carrier alone: every call of every frame answered with the same
        # five hops, encoded once; no provnet code but the frame's encoding.
        canned = wire.demand_response([Answer(b"", b"", tuple(_fold_hops(1, 5)))])
        answers = canned.SerializeToString()
        async for frame in requests:
            await context.write(
                b"".join([wire.encode_ask_reply(c.id, answers) for c in frame.calls])
            )

    async def sig_stats(request: bytes, context: Any) -> bytes:
        return json.dumps(_SIGNATURES).encode()

    bare = grpc.aio.server(options=server_options(config.max_message_bytes))
    bare.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "bench.Echo",
                {
                    "Echo": grpc.unary_unary_rpc_method_handler(
                        echo, request_deserializer=_identity, response_serializer=_identity
                    ),
                    "Sign2": grpc.unary_unary_rpc_method_handler(
                        sign2, request_deserializer=_identity, response_serializer=_identity
                    ),
                    "SigStats": grpc.unary_unary_rpc_method_handler(
                        sig_stats, request_deserializer=_identity, response_serializer=_identity
                    ),
                    "NodeCore": grpc.unary_unary_rpc_method_handler(
                        node_core,
                        request_deserializer=serve_pb2.DemandRequest.FromString,
                        response_serializer=serve_pb2.DemandResponse.SerializeToString,
                    ),
                    "AskCore": grpc.stream_stream_rpc_method_handler(
                        ask_core,
                        request_deserializer=serve_pb2.AskFrame.FromString,
                        response_serializer=_identity,
                    ),
                    "AskEcho": grpc.stream_stream_rpc_method_handler(
                        ask_echo,
                        request_deserializer=serve_pb2.AskFrame.FromString,
                        response_serializer=_identity,
                    ),
                    "Contracts": grpc.unary_unary_rpc_method_handler(
                        contracts_only,
                        request_deserializer=serve_pb2.DemandRequest.FromString,
                        response_serializer=serve_pb2.DemandResponse.SerializeToString,
                    ),
                },
            ),
        )
    )
    bare_port = bare.add_insecure_port("127.0.0.1:0")
    tls_ports: dict[str, int] = {}
    tls_dir = os.environ.get(TLS_ENV)
    if tls_dir:
        from nodes.tls import TlsFiles

        tls = TlsFiles(
            Path(tls_dir) / "ca.pem", Path(tls_dir) / "origin.pem", Path(tls_dir) / "origin.key"
        ).server_credentials()
        assert tls is not None
        # The same servers on a second port each: TLS rows and plaintext rows
        # reach the same node and the same bare handlers.
        tls_ports["bare_tls_port"] = bare.add_secure_port("127.0.0.1:0", tls)
        tls_ports["tls_port"] = node.server.add_secure_port("127.0.0.1:0", tls)
    await bare.start()
    port = await node.start()
    core.set_advertised(f"127.0.0.1:{port}")
    await node.health.set("", health_pb2.HealthCheckResponse.SERVING)
    staged = port_file.with_suffix(".tmp")
    staged.write_text(
        json.dumps(
            {
                "port": port,
                "bare_port": bare_port,
                **tls_ports,
                "floor_key": floor_key.public_key().public_bytes_raw().hex(),
                "floor_head": floor_head.to_bytes().decode(),
                "floor_proof": base64.b64encode(floor_proof).decode("ascii"),
            }
        ),
        encoding="utf-8",
    )
    staged.replace(port_file)  # the parent sees the whole file or none
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    profile_out = os.environ.get(PROFILE_ENV)
    profiler = cProfile.Profile(time.process_time) if profile_out else None
    if profiler is not None:
        profiler.enable()
    await stop.wait()
    if profiler is not None and profile_out:
        profiler.disable()
        profiler.dump_stats(profile_out)
    await bare.stop(1.0)
    await node.stop(1.0)
    await core.close()


# --------------------------------------------------------------------------- parent: the holder


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


async def _latencies(
    calls: dict[str, Callable[[], Awaitable[object]]], samples: int
) -> dict[str, list[float]]:
    """Round-robin over the calls, so drift in background load hits each equally."""
    for call in calls.values():
        for _ in range(min(50, samples)):
            await call()
    out: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(samples):
        for name, call in calls.items():
            t0 = time.perf_counter()
            await call()
            out[name].append((time.perf_counter() - t0) * 1e3)
    return out


class _TimedAsks:
    """A transport that is ``inner``, noting when each ``ask`` starts and ends, so a
    holder's own time before and after its call can be told from the call."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._call: tuple[float, float] = (0.0, 0.0)
        self._split: list[tuple[float, float]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def ask(self, address: str, asks: bytes, timeout: float) -> Any:
        start = time.perf_counter()
        answers = await self._inner.ask(address, asks, timeout)
        self._call = (start, time.perf_counter())
        return answers

    def note(self, start: float, end: float) -> None:
        """One rehydration from ``start`` to ``end`` around the last ask."""
        self._split.append((self._call[0] - start, end - self._call[1]))

    def split(self) -> tuple[float, float]:
        """p50 (ms) of the holder's time before and after its call, warm-up excluded."""
        kept = self._split[len(self._split) // 10 :]
        if not kept:
            raise RuntimeError("no timed rehydration was sampled")
        return (
            statistics.median(b for b, _ in kept) * 1e3,
            statistics.median(a for _, a in kept) * 1e3,
        )


def _pooled(
    runs: list[tuple[int, int, float, float, float]],
) -> tuple[int, int, float, float, float]:
    """Rounds of one row summed: calls, errors, seconds, and both CPU shares time-weighted."""
    secs = sum(r[2] for r in runs)
    return (
        sum(r[0] for r in runs),
        sum(r[1] for r in runs),
        secs,
        sum(r[3] * r[2] for r in runs) / secs if secs else 0.0,
        sum(r[4] * r[2] for r in runs) / secs if secs else 0.0,
    )


def _per_op(cpu_share: float, rate: float) -> float:
    """CPU µs per operation from a CPU share (1.0 = one core) and operations/s."""
    return cpu_share / rate * 1e6 if rate else 0.0


def _stage_costs(hops: list[bytes]) -> dict[str, float]:
    """Best-of CPU µs of each contracts step of a verified demand for ``hops``, in this process.

    The steps of a faithful demand under a signed head (revision 2), with
    local keys, computed here with hot caches and no I/O: what the two
    processes cannot do with less, by contract. The two verifications the
    first contract made per demand are shown for comparison.
    """
    import timeit

    from contracts.heads import FoldProof, verify_fold
    from contracts.identity import Identity
    from contracts.lazy import judge_fold_answer
    from contracts.serve import (
        answer_demand,
        build_demand,
        refusal_for,
        verify_demand,
    )
    from contracts.signed import parse_statement
    from contracts.statements import Demand

    origin_identity, holder_identity = Identity.generate(), Identity.generate()
    now = int(time.time() * 1000)
    head, proof = _local_head_fold(origin_identity, hops, "bench-value")
    fold = verify_fold(FoldProof.from_bytes(proof), head)
    root = fold.commitment.statement.root

    demand = build_demand(holder_identity, fold.obligation, now=now)
    demand_bytes = demand.to_bytes()
    receipt = answer_demand(
        origin_identity,
        demand,
        obligation=fold.obligation,
        commitment=fold.commitment,
        hops=hops,
        now=now,
        hops_root=root,
    )
    receipt_bytes = receipt.to_bytes()
    pae = receipt.envelope.pae()
    sig = receipt.envelope.signatures[0].sig
    public = origin_identity.public

    def origin_answer() -> object:
        # what a node does for a whole fold it serves: the answer rule, then the receipt
        o, c = fold.obligation.statement, fold.commitment.statement
        if refusal_for(o, c, demand.statement, hops, now, root) is not None:
            raise RuntimeError("the stage's demand is not served")
        return answer_demand(
            origin_identity,
            demand,
            obligation=fold.obligation,
            commitment=fold.commitment,
            hops=hops,
            now=now,
            hops_root=root,
        ).to_bytes()

    def origin_check() -> object:
        parsed = parse_statement(demand_bytes, Demand)
        return verify_demand(parsed, obligation=fold.obligation, commitment=fold.commitment)

    steps: dict[str, Callable[[], object]] = {
        "holder: sign + encode demand": lambda: build_demand(
            holder_identity, fold.obligation, now=now
        ).to_bytes(),
        "origin: parse + bind demand (no verify)": origin_check,
        "origin: answer + sign + encode receipt": origin_answer,
        "holder: judge lazily (no verify)": lambda: judge_fold_answer(
            receipt_bytes, hops, demand=demand, fold=fold, reported_at=now
        ),
        "of which Ed25519 sign": lambda: origin_identity.sign(pae),
        "not made: Ed25519 verify (x2 before)": lambda: public.verify(sig, pae),
    }
    return {
        name: min(timeit.repeat(fn, number=300, repeat=5, timer=time.process_time)) / 300 * 1e6
        for name, fn in steps.items()
    }


def _rehydrating(
    holders: Sequence[Holder], ref: str, fold: HeldFold, hops: int
) -> Callable[[], Awaitable[bool]]:
    """One throughput call: the next of ``holders`` in turn rehydrates ``fold`` of
    ``ref``; True when it was served with ``hops`` hops."""
    from nodes.client import Outcome

    turn = 0

    async def call() -> bool:
        nonlocal turn
        turn += 1
        report = await holders[turn % len(holders)].rehydrate(ref, [fold])
        return report.outcomes[0].outcome is Outcome.SERVED and len(report.hops) == hops

    return call


async def _throughput(
    call: Callable[[], Awaitable[bool]], concurrency: int, duration: float, origin_pid: int
) -> tuple[int, int, float, float, float]:
    done = 0
    errors = 0
    stop_at = time.perf_counter() + duration

    async def worker() -> None:
        nonlocal done, errors
        while time.perf_counter() < stop_at:
            try:
                ok = await call()
            except Exception:
                ok = False
            if ok:
                done += 1
            else:
                errors += 1

    t0 = time.perf_counter()
    c0, o0 = time.process_time(), cpu_seconds(origin_pid)
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    secs = time.perf_counter() - t0
    client_cpu = (time.process_time() - c0) / secs
    origin_cpu = (cpu_seconds(origin_pid) - o0) / secs
    return done, errors, secs, client_cpu, origin_cpu


class _Floors:
    """Calls for the two floors served by the child's bare server (see ``_serve``)."""

    def __init__(self, channel: Any, started: dict[str, Any], payload: bytes) -> None:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        from contracts.evidence import AnswerKind
        from contracts.heads import FoldProof, HeadCache
        from contracts.identity import Identity
        from contracts.lazy import judge_fold_answer
        from contracts.serve import build_demand
        from nodes._pb.provnet.v1 import serve_pb2

        self._build, self._judge = build_demand, judge_fold_answer
        self._served = AnswerKind.SERVED
        self._payload = payload
        self._holder_key = Ed25519PrivateKey.generate()
        self._sign2 = channel.unary_unary(
            SIGN2_METHOD, request_serializer=_identity, response_deserializer=_identity
        )
        self._contracts = channel.unary_unary(
            CONTRACTS_METHOD,
            request_serializer=serve_pb2.DemandRequest.SerializeToString,
            response_deserializer=serve_pb2.DemandResponse.FromString,
        )
        self._request = serve_pb2.DemandRequest
        self._response = serve_pb2.DemandResponse
        self._identity = Identity.generate()
        # The holder verifies the floor's head once, as at delivery.
        self._fold = HeadCache().verify_fold(
            FoldProof.from_bytes(base64.b64decode(started["floor_proof"])),
            now=int(time.time() * 1000),
            head=started["floor_head"].encode(),
        )

    async def crypto(self) -> bool:
        """Bare round trip plus the two Ed25519 signatures, nothing else."""
        message = os.urandom(16) + self._payload  # a fresh nonce, like a demand's
        reply = await self._sign2(self._holder_key.sign(message) + message, timeout=2.0)
        return bool(reply[64:] == message)

    async def contracts(self) -> bool:
        """Bare round trip plus the contracts calls of a 5-hop demand under a head."""
        return await self.demand_via(self._contracts, self._fold)

    def method(self, channel: Any, name: str) -> Any:
        """A raw ``DemandRequest`` → ``DemandResponse`` call of ``name`` on ``channel``."""
        return channel.unary_unary(
            name,
            request_serializer=self._request.SerializeToString,
            response_deserializer=self._response.FromString,
        )

    async def demand_via(self, call: Any, fold: Any) -> bool:
        """The floor's holder side (build, sign; judge lazily) against ``call`` for ``fold``."""
        now = int(time.time() * 1000)
        demand = self._build(self._identity, fold.obligation, now=now)
        demand_bytes = demand.to_bytes()
        reply = await call(self._request(demands=[demand_bytes]), timeout=2.0)
        answer = reply.answers[0]
        verdict = self._judge(
            bytes(answer.receipt),
            [bytes(h) for h in answer.hops],
            demand=demand,
            fold=fold,
            reported_at=int(time.time() * 1000),
        )
        if verdict.kind is not self._served:
            raise RuntimeError(f"demand not served: {verdict.reason}")
        return True


async def _profile_demands(
    args: argparse.Namespace, holder: Any, held: Any, transport: Any, channel: Any
) -> int:
    """``--profile``: cProfile both sides of verified 5-hop demands under a head.

    The origin child profiles itself for its whole run (set-up is a handful of
    calls against thousands of demands) and writes ``origin.prof`` when it
    stops; this process profiles only the demands and writes ``holder.prof``.
    ``--samples`` sequential demands, then ``--duration`` seconds with
    ``--concurrency`` concurrent holders on the same held fold.
    """
    import pstats

    from contracts.identity import Identity
    from nodes.client import Holder, Outcome

    async def one(h: Any) -> bool:
        report = await h.rehydrate("bench-head-5", [held])
        return report.outcomes[0].outcome is Outcome.SERVED and len(report.hops) == 5

    for _ in range(50):
        await one(holder)
    holders = [
        Holder(Identity.generate(), transport, cache=False, reasks=0)
        for _ in range(args.concurrency)
    ]
    turn = 0

    async def rotating() -> bool:
        nonlocal turn
        turn += 1
        return await one(holders[turn % len(holders)])

    profiler = cProfile.Profile(time.process_time)
    profiler.enable()
    for _ in range(args.samples):
        await one(holder)
    done, errors, _, _, _ = await _throughput(rotating, args.concurrency, args.duration, 0)
    profiler.disable()
    out = Path(args.profile)
    out.mkdir(parents=True, exist_ok=True)
    profiler.dump_stats(out / "holder.prof")
    total = args.samples + done
    print(f"# profiled {total} verified 5-hop demands under a head ({errors} errors)")
    stats = pstats.Stats(profiler)
    stats.sort_stats("tottime").print_stats(args.profile_top)
    await transport.close()
    await channel.close()
    return 0 if errors == 0 else 1


async def _bench(args: argparse.Namespace, started: dict[str, Any], origin_pid: int) -> int:
    from contracts.ask import FoldAsk, pack_asks, reproduces_fold
    from contracts.heads import FoldProof, HeadCache
    from contracts.identity import Identity, load_identity
    from contracts.serve import verify_delivery
    from contracts.signed import open_statement
    from contracts.statements import Commitment, Obligation
    from nodes import wire
    from nodes.ask_stream import AskStream
    from nodes.auth import ControlCredentials
    from nodes.client import HeldFold, Holder, Outcome
    from nodes.config import LogFormat
    from nodes.control import NodeClient
    from nodes.logging import configure_logging
    from nodes.transport import GrpcTransport

    configure_logging(LogFormat.JSON, "warning")
    _count_signatures()
    address = f"127.0.0.1:{started['port']}"
    bare_address = f"127.0.0.1:{started['bare_port']}"
    options = [("grpc.max_receive_message_length", 4 << 20)]
    operator = ControlCredentials(load_identity(Path(started["data_dir"]) / "node.key"))
    # The control calls that set the origin up go through the one client; the
    # measured calls below speak raw gRPC on channels of their own.
    channel = NodeClient(address, operator, options=options, timeout=10.0)
    # Origin state: one value folded three times (1, 5, 50 hops).
    step = 0
    folds: dict[int, HeldFold] = {}
    head_folds: dict[int, HeldFold] = {}
    head_seqs: dict[int, list[int]] = {}
    now_ms = int(time.time() * 1000)
    for size in FOLD_SIZES:
        hops = _fold_hops(step + 1, size)
        step += size
        seqs = await channel.append(hops)
        fold = await channel.commit_fold("bench-value", seqs, deadline_ms=2000)
        c = open_statement(fold.commitment, Commitment)
        o = open_statement(fold.obligation, Obligation)
        verify_delivery(c, o, now=now_ms)
        folds[size] = HeldFold(c, o, fold.commitment, fold.obligation)

    # The same folds under ONE signed tree head (one compaction of three values):
    # the holder verifies the head once; a faithful serve then costs no verification.
    for size in FOLD_SIZES:
        hops = _fold_hops(step + 1, size)
        step += size
        head_seqs[size] = list(await channel.append(hops))
    compaction = await channel.commit_compaction(
        [(f"bench-head-{size}", head_seqs[size], b"") for size in FOLD_SIZES], deadline_ms=2000
    )
    heads = HeadCache()
    for size, proof in zip(FOLD_SIZES, compaction.fold_proofs, strict=True):
        proof_json, head_bytes = bytes(proof), bytes(compaction.head)
        fold = heads.verify_fold(FoldProof.from_bytes(proof_json), now=now_ms, head=head_bytes)
        head_folds[size] = HeldFold(fold.commitment, fold.obligation, proof_json, head_bytes, fold)

    transport = GrpcTransport()
    holder = Holder(Identity.generate(), transport, cache=False, reasks=0)
    # The fault path's second half on its own: the signed demand a holder sends
    # after any unsigned answer that does not reproduce the root.
    signer = Holder(Identity.generate(), transport, cache=False, reasks=0, unsigned_first=False)

    async def signed_head(size: int) -> bool:
        report = await signer.rehydrate(f"bench-head-{size}", [head_folds[size]])
        outcome = report.outcomes[0]
        if outcome.outcome is not Outcome.SERVED or len(report.hops) != size:
            raise RuntimeError(f"signed {size}-hop demand not served: {outcome.detail}")
        return True

    async def verified_head(size: int) -> bool:
        report = await holder.rehydrate(f"bench-head-{size}", [head_folds[size]])
        outcome = report.outcomes[0]
        if outcome.outcome is not Outcome.SERVED or len(report.hops) != size:
            raise RuntimeError(f"{size}-hop demand under a head not served: {outcome.detail}")
        return True

    async def verified(size: int) -> bool:
        report = await holder.rehydrate("bench-value", [folds[size]])
        outcome = report.outcomes[0]
        if outcome.outcome is not Outcome.SERVED or len(report.hops) != size:
            raise RuntimeError(f"{size}-hop demand not served: {outcome.detail}")
        return True

    if args.profile:
        return await _profile_demands(args, holder, head_folds[5], transport, channel)

    payload = os.urandom(args.payload)
    bare_channel = grpc.aio.insecure_channel(bare_address, options=options)
    echo = bare_channel.unary_unary(
        ECHO_METHOD, request_serializer=_identity, response_deserializer=_identity
    )
    floors = _Floors(bare_channel, started, payload)

    async def bare() -> bool:
        reply = await echo(payload, timeout=2.0)
        return len(reply) == len(payload)

    print(
        f"# bench_nodes: origin {address}, bare server {bare_address};"
        f" {args.samples} interleaved samples per latency row"
    )
    # Steps from the contracts floor to a verified demand, same holder-side
    # calls as the floor: the node's Serve.Demand work on the bare server, then
    # the node's own server (handler wrapper, auth, limits) — what is left up to
    # "verified 5-hop (head)" is the holder's client (nodes.client.Holder).
    via_core = floors.method(bare_channel, NODE_CORE_METHOD)
    node_channel = grpc.aio.insecure_channel(address, options=options)
    via_server = floors.method(node_channel, SERVE_DEMAND_METHOD)
    own_fold = head_folds[5].fold
    # The unsigned first ask in the same steps: the holder's own stream
    # (nodes.ask_stream.AskStream) with the hops checked against the verified
    # root and nothing else, to the origin's stream loop and answer_asks on the
    # bare server, then to the node's own server; the rest up to
    # "verified 5-hop (head)" is the holder's client.
    if own_fold is None:
        raise RuntimeError("the 5-hop fold under a head has no verified fold")
    asks = pack_asks([FoldAsk.for_fold(own_fold)])
    max_bytes = 4 << 20

    def ended(stream: AskStream) -> None:
        """A stream of the run that ends fails its row's next call with why."""

    ask_echo = AskStream(
        wire.ask_stream(bare_channel, ASK_ECHO_METHOD), bare_address, ended, max_bytes
    )
    ask_via_core = AskStream(
        wire.ask_stream(bare_channel, ASK_CORE_METHOD), bare_address, ended, max_bytes
    )
    ask_via_server = AskStream(wire.ask_stream(node_channel), address, ended, max_bytes)

    async def ask_via(stream: AskStream) -> bool:
        answers = await stream.ask(asks, 2.0)
        if not reproduces_fold(answers[0].hops, own_fold, None):
            raise RuntimeError("unsigned ask: the hops do not reproduce the fold's root")
        return True

    async def bare_ask() -> bool:
        answers = await ask_echo.ask(asks, 2.0)
        return len(answers[0].hops) == 5

    # The holder's own time around its call: a second holder, the same as the
    # first, over a transport that notes when its ask starts and ends; the row
    # judged (``verified 5-hop (head)``) runs without it.
    timing = _TimedAsks(transport)
    timed_holder = Holder(Identity.generate(), timing, cache=False, reasks=0)  # type: ignore[arg-type]

    async def timed_head() -> bool:
        start = time.perf_counter()
        report = await timed_holder.rehydrate("bench-head-5", [head_folds[5]])
        timing.note(start, time.perf_counter())
        if report.outcomes[0].outcome is not Outcome.SERVED:
            raise RuntimeError(f"timed 5-hop demand not served: {report.outcomes[0].detail}")
        return True

    calls: dict[str, Callable[[], Awaitable[object]]] = {
        "bare unary": bare,
        BARE_ASK: bare_ask,
        FLOOR_CRYPTO: floors.crypto,
        FLOOR_CONTRACTS: floors.contracts,
        STEP_NODE_CORE: lambda: floors.demand_via(via_core, own_fold),
        STEP_NODE_SERVER: lambda: floors.demand_via(via_server, own_fold),
        STEP_ASK_CORE: lambda: ask_via(ask_via_core),
        STEP_ASK_SERVER: lambda: ask_via(ask_via_server),
        TIMED_HEAD: timed_head,
    }
    for size in FOLD_SIZES:
        calls[f"verified {size}-hop"] = lambda s=size: verified(s)  # type: ignore[misc]
        calls[f"verified {size}-hop (head)"] = lambda s=size: verified_head(s)  # type: ignore[misc]
    calls[SIGNED_HEAD] = lambda: signed_head(5)
    tls_channels: list[Any] = []
    tls_transport: Any = None
    if args.tls:
        from nodes.tls import TlsFiles

        tls_files = TlsFiles(ca=Path(started["tls_dir"]) / "ca.pem")
        tls_address = f"127.0.0.1:{started['tls_port']}"
        credentials = tls_files.channel_credentials()
        if credentials is None:
            raise RuntimeError("--tls: no CA certificate")
        bare_tls = grpc.aio.secure_channel(
            f"127.0.0.1:{started['bare_tls_port']}", credentials, options=options
        )
        tls_channels.append(bare_tls)
        echo_tls = bare_tls.unary_unary(
            ECHO_METHOD, request_serializer=_identity, response_deserializer=_identity
        )
        tls_transport = GrpcTransport(tls=tls_files)
        tls_holder = Holder(
            Identity.generate(),
            tls_transport,
            cache=False,
            reasks=0,
            # The folds name the plaintext port; this holder dials the TLS one.
            resolve_address=lambda a: tls_address if a == address else a,
        )

        async def bare_over_tls() -> bool:
            reply = await echo_tls(payload, timeout=2.0)
            return len(reply) == len(payload)

        async def verified_head_over_tls() -> bool:
            report = await tls_holder.rehydrate("bench-head-5", [head_folds[5]])
            outcome = report.outcomes[0]
            if outcome.outcome is not Outcome.SERVED or len(report.hops) != 5:
                raise RuntimeError(f"5-hop demand over TLS not served: {outcome.detail}")
            return True

        calls["bare unary" + TLS_SUFFIX] = bare_over_tls
        calls["verified 5-hop (head)" + TLS_SUFFIX] = verified_head_over_tls
        # Handshakes before the samples: the rows compare established connections.
        await bare_over_tls()
        await verified_head_over_tls()
    lat = await _latencies(calls, args.samples)
    print(f"{'latency (ms)':<34}{'p50':>9}{'p99':>9}{'mean':>9}{'p50/bare':>10}")
    bare_p50 = _pct(lat["bare unary"], 0.5)
    for name, values in lat.items():
        p50 = _pct(values, 0.5)
        print(
            f"{name:<34}{p50:>9.3f}{_pct(values, 0.99):>9.3f}"
            f"{statistics.fmean(values):>9.3f}{p50 / bare_p50:>10.2f}"
        )
    for name in ("bare unary", "verified 5-hop (head)"):
        if name + TLS_SUFFIX in lat:
            plain, tls_p50 = _pct(lat[name], 0.5), _pct(lat[name + TLS_SUFFIX], 0.5)
            print(
                f"ratio p50 {name}: TLS / plaintext = {tls_p50 / plain:.2f}"
                f" (+{(tls_p50 - plain) * 1e3:.0f} µs)"
            )
    ratio5_folds = _pct(lat["verified 5-hop"], 0.5) / bare_p50
    ratio5 = _pct(lat["verified 5-hop (head)"], 0.5) / bare_p50
    print(f"ratio p50 verified 5-hop / bare unary, per-fold statements = {ratio5_folds:.2f}")
    ok_latency = ratio5 <= TARGET_LATENCY_RATIO
    budget_us = (TARGET_LATENCY_RATIO - 1) * bare_p50 * 1e3
    crypto_us = (_pct(lat[FLOOR_CRYPTO], 0.5) - bare_p50) * 1e3
    print(
        f"ratio p50 verified 5-hop / bare unary, under a signed head = {ratio5:.2f}"
        f" (target <= {TARGET_LATENCY_RATIO}) {'PASS' if ok_latency else 'FAIL'}"
    )
    print(
        f"  against its own carrier: verified 5-hop (head) / {BARE_ASK} p50 ="
        f" {_pct(lat['verified 5-hop (head)'], 0.5) / _pct(lat[BARE_ASK], 0.5):.2f}"
        " (what the node adds to the stream it asks on)"
    )
    ratio5_signed = _pct(lat[SIGNED_HEAD], 0.5) / bare_p50
    print(
        f"ratio p50 signed 5-hop (head) / bare unary, the fault path's re-ask = {ratio5_signed:.2f}"
    )
    print(
        f"  the target allows {budget_us:.0f} µs above a bare round trip; the two Ed25519"
        f" signatures a signed demand makes take {crypto_us:.0f} µs, which the unsigned"
        " first ask does not spend"
    )

    before, after = timing.split()
    print(
        f"  inside '{TIMED_HEAD}' (p50 over its samples): the holder's own time"
        f" {(before + after) * 1e3:.0f} µs around its call, {before * 1e3:.0f} µs before"
        f" the call and {after * 1e3:.0f} µs after it"
    )

    # Where a verified demand's time goes: the contracts steps alone, in this process.
    stages = _stage_costs(_fold_hops(1, 5))
    print(f"{'contracts step, 5-hop (CPU µs, no I/O)':<40}{'µs':>8}")
    for name, us in stages.items():
        print(f"{name:<40}{us:>8.1f}")
    critical = sum(
        us for name, us in stages.items() if not name.startswith(("of which", "not made"))
    )
    print(
        f"{'sum on the critical path':<40}{critical:>8.1f}"
        f"  (bare p50 {bare_p50 * 1e3:.0f} µs; verified 5-hop p50"
        f" {_pct(lat['verified 5-hop'], 0.5) * 1e3:.0f} µs)"
    )

    # Throughput: concurrent holders for the same duration, bare unary in the same run.
    holders = [
        Holder(Identity.generate(), transport, cache=False, reasks=0)
        for _ in range(args.concurrency)
    ]
    verified_5 = _rehydrating(holders, "bench-value", folds[5], 5)
    verified_5_head = _rehydrating(holders, "bench-head-5", head_folds[5], 5)
    signers = [
        Holder(Identity.generate(), transport, cache=False, reasks=0, unsigned_first=False)
        for _ in range(args.concurrency)
    ]
    signed_5_head = _rehydrating(signers, "bench-head-5", head_folds[5], 5)

    # Interleaved rounds: every row runs once per round for duration/rounds
    # seconds, bare next to the verified demand under a head and the order
    # reversed every other round, so a drift or a burst of load from outside
    # the run hits both arms of the target alike. Each round gives its own
    # verified ÷ bare ratio; the target is judged on their median.
    pid, conc, rounds = origin_pid, args.concurrency, args.rounds
    phase = args.duration / rounds
    order: list[tuple[str, Callable[[], Awaitable[bool]]]] = [
        (BARE, bare),
        (VERIFIED_HEAD, verified_5_head),
        (BARE_ASK, bare_ask),
        (SIGNED_HEAD, signed_5_head),
        (VERIFIED_FOLDS, verified_5),
        (FLOOR_CONTRACTS, floors.contracts),
        (FLOOR_CRYPTO, floors.crypto),
    ]
    if args.tls:
        tls_holders = [
            Holder(
                Identity.generate(),
                tls_transport,
                cache=False,
                reasks=0,
                resolve_address=lambda a: tls_address if a == address else a,
            )
            for _ in range(args.concurrency)
        ]
        verified_5_head_over_tls = _rehydrating(tls_holders, "bench-head-5", head_folds[5], 5)
        # Each TLS row right after its plaintext pair: what hits one hits the other.
        order.insert(1, (BARE + TLS_SUFFIX, calls["bare unary" + TLS_SUFFIX]))  # type: ignore[arg-type]
        order.insert(3, (VERIFIED_HEAD + TLS_SUFFIX, verified_5_head_over_tls))
    runs: dict[str, list[tuple[int, int, float, float, float]]] = {n: [] for n, _ in order}
    for k in range(rounds):
        for name, call in order if k % 2 == 0 else order[::-1]:
            runs[name].append(await _throughput(call, conc, phase, pid))
    print(
        f"{'throughput':<34}{'ok/s':>9}{'errors':>7}{'secs':>6}{'holder cpu':>11}"
        f"{'origin cpu':>11}{'holder µs/op':>13}{'origin µs/op':>13}{'/bare':>7}"
        f"  concurrency {conc}, {rounds} interleaved rounds"
    )
    pooled = {name: _pooled(r) for name, r in runs.items()}
    b_rate = pooled[BARE][0] / pooled[BARE][2]
    rows = [
        BARE,
        BARE_ASK,
        FLOOR_CRYPTO,
        FLOOR_CONTRACTS,
        VERIFIED_FOLDS,
        SIGNED_HEAD,
        VERIFIED_HEAD,
    ]
    if args.tls:
        rows += [BARE + TLS_SUFFIX, VERIFIED_HEAD + TLS_SUFFIX]
    for name in rows:
        done, err, secs, hc, oc = pooled[name]
        rate = done / secs
        print(
            f"{name:<34}{rate:>9.1f}{err:>7}{secs:>6.1f}{hc:>11.0%}{oc:>11.0%}"
            f"{_per_op(hc, rate):>13.0f}{_per_op(oc, rate):>13.0f}"
            f"{rate / b_rate if b_rate else 0.0:>7.2f}"
        )
    per_round = [
        (h[0] / h[2]) / (b[0] / b[2]) if b[0] and b[2] and h[2] else 0.0
        for b, h in zip(runs[BARE], runs[VERIFIED_HEAD], strict=True)
    ]
    t_ratio = statistics.median(per_round)
    errors = pooled[VERIFIED_HEAD][1]
    ok_tp = t_ratio >= TARGET_THROUGHPUT_RATIO and errors == 0
    pooled_ratio = pooled[VERIFIED_HEAD][0] / pooled[VERIFIED_HEAD][2] / b_rate if b_rate else 0.0
    print(
        "ratio verified (head) / bare throughput, per round: "
        + ", ".join(f"{r:.2f}" for r in per_round)
        + f"; pooled {pooled_ratio:.3f}"
    )
    print(
        f"ratio verified (head) / bare throughput = {t_ratio:.3f}, median of {rounds} rounds"
        f" (target >= {TARGET_THROUGHPUT_RATIO}, zero errors) {'PASS' if ok_tp else 'FAIL'}"
    )
    carrier = statistics.median(
        (h[0] / h[2]) / (b[0] / b[2]) if b[0] and b[2] and h[2] else 0.0
        for b, h in zip(runs[BARE_ASK], runs[VERIFIED_HEAD], strict=True)
    )
    print(
        f"  against its own carrier: verified (head) / {BARE_ASK} throughput = {carrier:.3f},"
        " median of the rounds (what the node adds to the stream it asks on)"
    )
    if args.tls:
        for name in (BARE, VERIFIED_HEAD):
            per_round_tls = [
                (t[0] / t[2]) / (p[0] / p[2]) if p[0] and p[2] and t[2] else 0.0
                for p, t in zip(runs[name], runs[name + TLS_SUFFIX], strict=True)
            ]
            print(
                f"ratio throughput {name}: TLS / plaintext = "
                f"{statistics.median(per_round_tls):.3f}, median of {rounds} rounds ("
                + ", ".join(f"{r:.2f}" for r in per_round_tls)
                + f"); TLS errors {pooled[name + TLS_SUFFIX][1]}"
            )

    # Signatures per 100 demands, both processes counted (the origin's via SigStats).
    sig_stats = bare_channel.unary_unary(
        STATS_METHOD, request_serializer=_identity, response_deserializer=_identity
    )

    async def signatures(call: Callable[[], Awaitable[bool]], n: int = 100) -> dict[str, int]:
        origin0 = json.loads(await sig_stats(b"", timeout=5.0))
        holder0 = dict(_SIGNATURES)
        for _ in range(n):
            await call()
        origin1 = json.loads(await sig_stats(b"", timeout=5.0))
        return {
            side: _SIGNATURES[side] - holder0[side] + origin1[side] - origin0[side]
            for side in ("sign", "verify")
        }

    per_fold = await signatures(lambda: verified(5))
    under_head = await signatures(lambda: verified_head(5))
    signed = await signatures(lambda: signed_head(5))
    ok_sigs = under_head == {"sign": 0, "verify": 0}
    print(
        "Ed25519 per 100 demands (holder + origin): faithful under a head"
        f" {under_head['sign']} signed / {under_head['verify']} verified (target 0 / 0)"
        f" {'PASS' if ok_sigs else 'FAIL'}; the fault path's signed re-ask"
        f" {signed['sign']} signed / {signed['verify']} verified; per-fold statements"
        f" {per_fold['sign']} signed / {per_fold['verify']} verified"
    )

    # RPCs per decision: one value, three folds by one origin → one Serve call.
    counter = Holder(Identity.generate(), transport, cache=False, reasks=0)
    decisions = 20
    for _ in range(decisions):
        report = await counter.rehydrate("bench-value", list(folds.values()))
        if not report.complete:
            raise RuntimeError(f"decision not served: {report.outcomes}")
    per = counter.demand_rpcs / decisions
    ok_rpcs = per == 1.0
    print(
        f"Serve RPCs per decision (1 origin, folds {'+'.join(map(str, FOLD_SIZES))} hops)"
        f" = {per:.2f} (target 1 per origin) {'PASS' if ok_rpcs else 'FAIL'}"
    )
    await transport.close()
    await channel.close()
    for stream in (ask_echo, ask_via_core, ask_via_server):
        await stream.close()
    await bare_channel.close(None)
    await node_channel.close(None)
    for tls_channel in tls_channels:
        await tls_channel.close(None)
    if tls_transport is not None:
        await tls_transport.close()
    ok = ok_latency and ok_tp and ok_rpcs and ok_sigs
    print(f"overall {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--duration",
        type=float,
        default=30.0,
        help="seconds of each throughput row, split over --rounds",
    )
    parser.add_argument("--samples", type=int, default=500, help="round trips per latency row")
    parser.add_argument("--concurrency", type=int, default=16, help="concurrent holders")
    parser.add_argument(
        "--rounds",
        type=int,
        default=6,
        help="interleaved throughput rounds; each row runs duration/rounds seconds per round",
    )
    parser.add_argument("--payload", type=int, default=512, help="bare echo payload bytes")
    parser.add_argument(
        "--profile",
        metavar="DIR",
        help="only profile verified 5-hop demands under a head (cProfile, both processes);"
        " writes DIR/holder.prof and DIR/origin.prof",
    )
    parser.add_argument("--profile-top", type=int, default=25, help="rows of each profile to print")
    parser.add_argument(
        "--tls",
        action="store_true",
        help="also measure bare and verified demands over TLS, paired with the plaintext rows",
    )
    parser.add_argument(
        "--serve", nargs=2, metavar=("DATA_DIR", "PORT_FILE"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.duration <= 0:
        parser.error("--rounds must be at least 1 and --duration positive")
    if args.serve:
        asyncio.run(_serve(Path(args.serve[0]), Path(args.serve[1])))
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-nodes-") as tmp:
        workdir = Path(tmp)
        port_file = workdir / "port"
        env = dict(os.environ)
        if args.profile:
            Path(args.profile).mkdir(parents=True, exist_ok=True)
            env[PROFILE_ENV] = str(Path(args.profile).resolve() / "origin.prof")
        if args.tls:
            import datetime as dt

            from nodes.tls import new_ca, new_node_certificate

            now = dt.datetime.now(dt.UTC)
            new_ca(workdir / "tls", now=now, days=1)
            new_node_certificate(workdir / "tls", "origin", ["127.0.0.1"], now=now, days=1)
            env[TLS_ENV] = str(workdir / "tls")
        child = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(workdir / "origin"), str(port_file)],
            stderr=subprocess.PIPE,
            env=env,
        )
        try:
            deadline = time.monotonic() + 30
            while not port_file.exists():
                if child.poll() is not None or time.monotonic() > deadline:
                    stop(child, 5)  # a child stuck after a failure would never close stderr
                    err = child.stderr.read().decode() if child.stderr else ""
                    print(f"bench_nodes: origin failed to start: {err[-2000:]}", file=sys.stderr)
                    return 2
                time.sleep(0.05)
            started = json.loads(port_file.read_text(encoding="utf-8"))
            started["data_dir"] = str(workdir / "origin")
            started["tls_dir"] = str(workdir / "tls")
            return asyncio.run(_bench(args, started, child.pid))
        finally:
            stop(child, 10)
            if args.profile and (Path(args.profile) / "origin.prof").exists():
                import pstats

                print(f"# origin process ({Path(args.profile) / 'origin.prof'})")
                origin_stats = pstats.Stats(str(Path(args.profile) / "origin.prof"))
                origin_stats.sort_stats("tottime").print_stats(args.profile_top)


if __name__ == "__main__":
    sys.exit(main())
