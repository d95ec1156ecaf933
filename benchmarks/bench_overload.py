"""Overload: many concurrent callers delivering large values to one node process.

    .venv/bin/python benchmarks/bench_overload.py [--callers 1000] [--payload-mib 3]
        [--duration 10] [--rounds 1] [--max-concurrent N] [--max-bulk N]
        [--max-bulk-bytes N] [--max-pending N] [--shed-lag-ms 0] [--load-procs 4]
        [--load-nice 0] [--probe-callers 50] [--layout split|shared] [--no-probe-rt]
        [--rss-bound-mib 1024] [--eager-body] [--no-pushback]

Four kinds of process, so none steals another's event loop: one ``provnet
node`` (the command ``provnet cluster up`` runs; the node's admission
settings default to its own defaults) with an operator key; a **serve
probe** process (its own channel: one holder demanding one committed fold,
one call at a time, every 10 ms); ``--load-procs`` **load** processes whose
``--callers`` tasks (split between them) each deliver a ``--payload-mib``
value (operator-signed ``Deliver``, a valid commitment + obligation;
``--pool`` distinct values, built before the clock starts) in a loop over
``--connections`` HTTP/2 connections; and a **delivery probe**,
``--probe-callers`` (50) of the callers in a process of their own, light
enough that their latency is the node's doing (a load process's callers
also wait for their own busy process). A caller sends its body once the node has
admitted the call (the node answers an admitted bulk call with response
headers before it reads the body; ``--eager-body``: with the headers, as a
plain unary call). A caller that is shed (``RESOURCE_EXHAUSTED``,
``UNAVAILABLE``, or ``CANCELLED`` from gRPC's pending-call limit) retries the
same delivery, as a gRPC client's retry policy would: after the node's
``grpc-retry-pushback-ms`` if the refusal carries one (the node's appointment,
``nodes.overload.Pushback``; ``--no-pushback``: ignored, as by a client
without a retry policy), else after an exponential backoff with jitter
(100 ms × 1.6ⁿ, at most 2 s, ±20 %); an admitted caller sends its next value
at once. Every caller stays in its loop for the whole run, whether it is
sending, waiting for its answer or waiting to retry.

Process layout (``--layout``, printed): **split** (the default) pins the
node to the first CPU and every other process (probes and load) to the
rest, as a deployed node has a CPU of its own and its callers are on other
machines; **shared** leaves every process on every CPU, so the callers'
CPU use is in the node's latency (the layout before there was a choice).
Split needs two CPUs; with one it falls back to shared and says so. The
serve probe runs real-time (``SCHED_FIFO``) where the process may
(root or ``CAP_SYS_NICE``; ``--no-probe-rt``: never), so the load
processes on its CPU cannot delay it and its latency is the node's alone,
as for a holder on a machine of its own; only then is the **minimum
promise** judged: the slowest loaded demand against ``MIN_DEADLINE_MS``,
the smallest deadline a node signs (every demand answered, none slower).

Each round: the serve probe alone for ``--unloaded`` seconds, the delivery
probe's ``--solo`` deliveries one at a time (once the load processes are
built and idle), then everything together for ``--duration`` seconds.
Printed per round, side by side: unloaded and loaded p50/p99 and the p99
ratio (target ≤ 10) for the serve probe and for admitted deliveries (all
admitted under load, against the delivery probe's unloaded ones; the
probe callers' own admitted calls and their ratio are shown apart, and so
are the calls sent in the round's first second, the opening burst, and
those sent after it; an admitted call's time runs from its first byte sent
to its answer, the wait to be admitted included and shown apart), the shed calls (status codes,
time to be refused, the pushback honoured), the node's peak RSS (``VmHWM``, over the whole run so
far) against ``--rss-bound-mib``, each with PASS/FAIL, the load average,
the CPU seconds the node and the load processes got and the minor page
faults the node took (fresh pages touched: a node's first round faults in
the memory later rounds reuse). Exit 0 when every
round passes all three, 1 otherwise. Loopback only; every loop is bounded by
``--duration``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from _procs import cpu_seconds, minor_faults, stop, wait_serving

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from nodes.config import (  # noqa: E402  (after the path insert)
    DEFAULT_MAX_BULK_BYTES,
    DEFAULT_MAX_BULK_RPCS,
    DEFAULT_MAX_CONCURRENT_RPCS,
    DEFAULT_MAX_PENDING_RPCS,
    MIN_DEADLINE_MS,
)
from nodes.methods import method_name  # noqa: E402

DELIVER = method_name("Deliver", "Deliver")
_CHANNEL_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.max_send_message_length", 8 << 20),
    ("grpc.max_receive_message_length", 8 << 20),
    # Every channel its own connection (in one process grpc would share them).
    ("grpc.use_local_subchannel_pool", 1),
]


def _rss_mib(pid: int, field: str) -> float:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    for line in text.splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def _p(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# --------------------------------------------------------------------------- probe process


async def _probe(args: argparse.Namespace) -> dict[str, Any]:
    import grpc

    from contracts.identity import Identity
    from contracts.serve import build_demand
    from contracts.signed import open_statement
    from contracts.statements import Obligation
    from nodes._pb.provnet.v1 import serve_pb2, serve_pb2_grpc
    from nodes.auth import control_channel

    obligation = open_statement(Path(args.obligation).read_bytes(), Obligation)
    holder = Identity.generate()
    chan = control_channel(args.address, None, _CHANNEL_OPTIONS)
    serve: Any = serve_pb2_grpc.ServeStub(chan)
    samples: list[float] = []
    errors: dict[str, int] = {}
    until = time.monotonic() + args.duration
    while time.monotonic() < until:
        demand = build_demand(holder, obligation, now=int(time.time() * 1000))
        start = time.perf_counter()
        try:
            await serve.Demand(serve_pb2.DemandRequest(demands=[demand.to_bytes()]), timeout=10)
            samples.append((time.perf_counter() - start) * 1000)
        except grpc.aio.AioRpcError as exc:
            errors[exc.code().name] = errors.get(exc.code().name, 0) + 1
        await asyncio.sleep(0.01)
    await chan.close(None)
    return {"samples": samples, "errors": errors}


# --------------------------------------------------------------------------- load process


def _pushback_s(exc: Any) -> float | None:
    """The node's ``grpc-retry-pushback-ms`` on a refused call, in seconds (None: none sent)."""
    for key, value in exc.trailing_metadata() or ():
        if key == "grpc-retry-pushback-ms":
            try:
                return max(0.0, int(value) / 1000)
            except ValueError:
                return None
    return None


class LocallyCancelled(Exception):
    """grpc.aio cancelled a call itself (its body could not be written: the call had ended)."""


async def _load(args: argparse.Namespace) -> dict[str, Any]:
    import grpc

    from contracts.identity import Identity, load_identity
    from contracts.serve import build_commitment, build_obligation
    from nodes import wire
    from nodes.auth import ControlCredentials, request_digest
    from nodes.messages import Delivery

    operator = ControlCredentials(load_identity(Path(args.operator_key)))
    origin = Identity.generate()
    now = int(time.time() * 1000)
    commitment = build_commitment(
        origin, epoch="e", value_ref="big", fold_seq=0, hops=[b"{}"], issued_at=now
    )
    ob = build_obligation(
        origin, commitment, serve_until=now + 3_600_000, deadline_ms=2000,
        endpoints=["127.0.0.1:1"], issued_at=now,
    )  # fmt: skip
    payload = os.urandom(int(args.payload_mib * 1024 * 1024))
    # A pool of distinct deliveries (distinct values fill the node's held-value
    # cache as real traffic would), built and hashed before the clock starts.
    pool: list[tuple[bytes, str]] = []
    for k in range(args.pool):
        value = (args.offset + k).to_bytes(8, "big") + payload[8:]
        body = wire.deliver_request(
            Delivery(f"v{args.offset + k}", value, (commitment.to_bytes(),), (ob.to_bytes(),), "")
        ).SerializeToString()
        pool.append((body, request_digest(body)))
    chans = [
        grpc.aio.insecure_channel(args.address, options=[*_CHANNEL_OPTIONS])
        for _ in range(args.connections)
    ]
    admitted: list[float] = []
    shed: list[float] = []
    shed_codes: dict[str, int] = {}
    # Refusals a caller backs off from and retries: the node's RESOURCE_EXHAUSTED
    # (admission), UNAVAILABLE, and CANCELLED (gRPC's own pending-call limit).
    shed_as = {
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.CANCELLED,
    }
    other: dict[str, int] = {}
    # Unloaded: one delivery at a time, before the load starts.
    alone: list[float] = []
    unary = [chan.unary_unary(DELIVER) for chan in chans]  # bytes in, bytes out
    streams = [chan.stream_unary(DELIVER) for chan in chans]
    from nodes.auth import node_id_at

    target = await node_id_at(chans[0])  # the node the deliveries are signed for

    to_admit: list[float] = []
    pushed: list[float] = []
    shed_by: dict[str, list[float]] = {code.name: [] for code in shed_as}
    shed_retries: list[float] = []
    settled: list[float] = []
    opening: list[float] = []

    async def send(
        k: int, body: bytes, meta: Any, timeout: float, marks: list[float] | None = None
    ) -> None:
        if args.eager_body:  # the body goes out with the headers, admitted or not
            await unary[k % len(chans)](body, timeout=timeout, metadata=meta)
            return
        # Headers first: the body is sent once the node has admitted the call
        # (its response headers), so a refused attempt costs no 3 MiB copy.
        held: list[Any] = []

        async def request() -> AsyncIterator[bytes]:
            # An admitted call gets headers (with its request id); a refused one
            # only a status, with no headers.
            if await held[0].initial_metadata():
                if marks is not None:
                    marks.append(time.perf_counter())
                yield body

        call = streams[k % len(chans)](request(), timeout=timeout, metadata=meta)
        held.append(call)
        try:
            await call
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # this caller is being cancelled, not just its call
            # grpc.aio cancels a call whose body could not be written because the
            # call had ended (its deadline passed as the node admitted it): that
            # is a failed attempt, not the end of this caller.
            raise LocallyCancelled from None

    for k in range(args.solo):
        body, digest = pool[k % len(pool)]
        start = time.perf_counter()
        await send(0, body, operator.metadata(DELIVER, body, target=target, digest=digest), 30)
        alone.append((time.perf_counter() - start) * 1000)
    args.ready.write_text("ready")
    while not args.go.exists():  # every load process starts at once
        await asyncio.sleep(0.01)
    until = time.monotonic() + args.duration
    began = time.perf_counter()
    rng = random.Random(7)

    async def caller(i: int) -> None:
        n, backoff, calls = i, 0.1, 0
        while time.monotonic() < until:
            body, digest = pool[n % len(pool)]
            meta = operator.metadata(DELIVER, body, target=target, digest=digest)
            start = time.perf_counter()
            first, calls = calls == 0, calls + 1
            try:
                mine: list[float] = []
                await send(i, body, meta, max(0.1, until - time.monotonic()), mine)
                end = time.perf_counter()
                admitted.append((end - start) * 1000)
                # After the opening burst, or in its first second.
                (settled if start - began >= 1.0 else opening).append(admitted[-1])
                if mine:
                    to_admit.append((mine[0] - start) * 1000)
                n, backoff = n + args.callers, 0.1
            except LocallyCancelled:
                if time.monotonic() < until:
                    other["CANCELLED (locally)"] = other.get("CANCELLED (locally)", 0) + 1
            except grpc.aio.AioRpcError as exc:
                code = exc.code()
                if code in shed_as and time.monotonic() < until:
                    shed_codes[code.name] = shed_codes.get(code.name, 0) + 1
                    shed.append((time.perf_counter() - start) * 1000)
                    shed_by[code.name].append(shed[-1])
                    if not first:  # not this caller's first call of the run
                        shed_retries.append(shed[-1])
                    after = _pushback_s(exc) if args.pushback else None
                    if after is not None:
                        # As gRPC's retry policy: the node's pushback, exactly, and
                        # the backoff starts over.
                        pushed.append(after * 1000)
                        await asyncio.sleep(after)
                        backoff = 0.1
                    else:
                        await asyncio.sleep(backoff * rng.uniform(0.8, 1.2))
                        backoff = min(2.0, backoff * 1.6)
                elif time.monotonic() >= until:
                    pass  # cut off by the end of the run
                else:
                    other[code.name] = other.get(code.name, 0) + 1

    await asyncio.gather(*(caller(i) for i in range(args.callers)))
    for chan in chans:
        await chan.close(None)
    return {
        "admitted": admitted, "shed": shed, "other": other, "alone": alone,
        "shed_codes": shed_codes, "to_admit": to_admit,
        "pushed": pushed, "shed_by": shed_by, "shed_retries": shed_retries,
        "settled": settled,
        "opening": opening,
    }  # fmt: skip


# --------------------------------------------------------------------------- driver


def _pinned(cpus: set[int] | None) -> Any:
    """A ``preexec_fn`` that pins the child (and every thread it starts) to ``cpus``."""
    if not cpus:
        return None

    def pin() -> None:
        os.sched_setaffinity(0, cpus)

    return pin


def _layout(name: str) -> tuple[set[int] | None, set[int] | None, str]:
    """CPUs for the node and for the callers (probes and load), and how to print it."""
    cpus = sorted(os.sched_getaffinity(0))
    if name == "shared" or len(cpus) < 2:
        why = "" if name == "shared" else f" (split needs 2 CPUs, have {len(cpus)})"
        return None, None, f"shared: node and callers on CPUs {cpus}{why}"
    node, callers = {cpus[0]}, set(cpus[1:])
    return node, callers, f"split: node on CPU {cpus[0]}, callers on CPUs {sorted(callers)}"


#: Every child process started, so a run that stops early (a child failed) ends them all:
#: a load process left waiting for its start signal would poll for it for ever.
_CHILDREN: list[subprocess.Popen[bytes]] = []


def _child(role: str, args: argparse.Namespace, out: Path, **extra: Any) -> subprocess.Popen[bytes]:
    argv = [sys.executable, __file__, "--role", role, "--out", str(out)]
    if args.eager_body:
        argv.append("--eager-body")
    if not args.pushback:
        argv.append("--no-pushback")
    for key, value in extra.items():
        flag = f"--{key.replace('_', '-')}"
        argv += [flag] if value is True else [flag, str(value)]
    proc = subprocess.Popen(argv, preexec_fn=_pinned(args.caller_cpus))
    _CHILDREN.append(proc)
    return proc


def _wait(proc: subprocess.Popen[bytes], out: Path, timeout: float) -> dict[str, Any]:
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise SystemExit(f"bench child {proc.args!r} did not finish in {timeout:.0f} s") from None
    if proc.returncode != 0:
        raise SystemExit(f"bench child {proc.args!r} exited {proc.returncode}")
    result: dict[str, Any] = json.loads(out.read_text())
    return result


async def _setup(address: str, operator_key: Path, obligation_out: Path) -> None:
    from contracts.identity import load_identity
    from nodes.auth import ControlCredentials
    from nodes.control import NodeClient

    operator = ControlCredentials(load_identity(operator_key))
    async with NodeClient(address, operator, timeout=10.0) as origin:
        await origin.append([b'{"step": 1, "op": "x"}'], [1])
        fold = await origin.commit_fold("p", [1])
    obligation_out.write_bytes(fold.obligation)


def _drive(args: argparse.Namespace) -> int:
    from contracts.identity import Identity, save_identity
    from nodes.cluster import child_env, free_ports, provnet_argv

    work = Path(tempfile.mkdtemp(prefix="provnet-overload-"))
    operator_key = work / "operator.key"
    operator = Identity.generate()
    save_identity(operator, operator_key)
    obligation = work / "obligation.bin"
    (port,) = free_ports(1)
    address = f"127.0.0.1:{port}"
    env = child_env()
    env.update(
        PROVNET_OPERATOR_KEYS=operator.node_id,
        PROVNET_MAX_CONCURRENT_RPCS=str(args.max_concurrent),
        PROVNET_MAX_BULK_RPCS=str(args.max_bulk),
        PROVNET_MAX_BULK_BYTES=str(args.max_bulk_bytes),
        PROVNET_MAX_PENDING_RPCS=str(args.max_pending),
        PROVNET_BULK_SHED_LAG_MS=str(args.shed_lag_ms),
        PROVNET_REAP_INTERVAL_S="0",
        PROVNET_LOG_LEVEL="warning",
    )
    env.update(dict(kv.split("=", 1) for kv in args.node_env))
    argv = provnet_argv(
        "node", "--name", "load", "--listen", address, "--data-dir", str(work / "node"),
        "--log-format", "json",
    )  # fmt: skip
    node_cpus, args.caller_cpus, layout = _layout(args.layout)
    log = (work / "node.log").open("wb")
    node = subprocess.Popen(
        argv, stdout=log, stderr=subprocess.STDOUT, env=env, preexec_fn=_pinned(node_cpus)
    )
    rounds: list[dict[str, Any]] = []
    try:
        wait_serving(node, address, work / "node.log", 60)
        asyncio.run(_setup(address, operator_key, obligation))
        print(
            f"callers {args.callers}  payload {args.payload_mib} MiB  duration {args.duration} s"
            f"  connections {args.connections}  max-concurrent-rpcs {args.max_concurrent}"
            f"  max-bulk-rpcs {args.max_bulk}  max-bulk-bytes {args.max_bulk_bytes}"
            f"  max-pending-rpcs {args.max_pending}  bulk-shed-lag-ms {args.shed_lag_ms}"
            f"  load processes {args.load_procs}  load-nice {args.load_nice}"
            f"  probe callers {args.probe_callers}"
            f"  bodies {'with the headers' if args.eager_body else 'once admitted'}"
            f"  pushback {'honoured' if args.pushback else 'ignored'}",
            flush=True,
        )
        print(f"layout {layout}", flush=True)
        common = {"address": address, "obligation": obligation}
        for r in range(args.rounds):
            out_u = work / f"probe-unloaded-{r}.json"
            unloaded = _wait(
                _child("probe", args, out_u, duration=args.unloaded, **common),
                out_u,
                args.unloaded + 60,
            )
            out_p = work / f"probe-loaded-{r}.json"
            go = work / f"go-{r}"
            loads_out, loaders = [], []
            loaded_callers = args.callers - args.probe_callers
            for k in range(args.load_procs):
                out_l = work / f"load-{r}-{k}.json"
                share = loaded_callers // args.load_procs + (k < loaded_callers % args.load_procs)
                loaders.append(
                    _child(
                        "load", args, out_l, duration=args.duration, callers=share,
                        payload_mib=args.payload_mib, pool=args.pool // args.load_procs,
                        connections=max(1, args.connections // args.load_procs),
                        solo=0, offset=k * args.pool,
                        operator_key=operator_key, ready=work / f"ready-{r}-{k}", go=go,
                        nice=args.load_nice, **common,
                    )
                )  # fmt: skip
                loads_out.append(out_l)
            deadline = time.monotonic() + 300
            # The load processes build their requests first, then start together.
            while not all((work / f"ready-{r}-{k}").exists() for k in range(args.load_procs)):
                if any(p.poll() is not None for p in loaders) or time.monotonic() > deadline:
                    raise SystemExit("a load process did not get ready")
                time.sleep(0.05)
            # The delivery probe: --probe-callers of the callers in their own,
            # lightly loaded process (so their latency is the node's doing, not a
            # busy load process's), its unloaded deliveries measured once the load
            # processes are built and idle.
            out_d = work / f"dprobe-{r}.json"
            dprobe = _child(
                "load", args, out_d, duration=args.duration, callers=args.probe_callers,
                payload_mib=args.payload_mib, pool=min(16, max(4, args.probe_callers)),
                connections=max(1, args.probe_callers // 25), solo=args.solo,
                offset=args.load_procs * args.pool, operator_key=operator_key,
                ready=work / f"ready-{r}-d", go=go, **common,
            )  # fmt: skip
            while not (work / f"ready-{r}-d").exists():
                if dprobe.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("the delivery probe did not get ready")
                time.sleep(0.05)
            go.write_text("go")
            rt = {"rt": True} if args.probe_rt else {}
            probe = _child("probe", args, out_p, duration=args.duration, **common, **rt)
            peak = 0.0
            loads: list[float] = []
            cpu0, t0, faults0 = cpu_seconds(node.pid), time.monotonic(), minor_faults(node.pid)
            load_cpu = dict.fromkeys(range(args.load_procs), 0.0)
            while (
                probe.poll() is None
                or dprobe.poll() is None
                or any(p.poll() is None for p in loaders)
            ):
                peak = max(peak, _rss_mib(node.pid, "VmRSS"))
                for k, p in enumerate(loaders):
                    load_cpu[k] = max(load_cpu[k], cpu_seconds(p.pid))
                loads.append(os.getloadavg()[0])
                time.sleep(0.2)
            cpu = (cpu_seconds(node.pid) - cpu0, sum(load_cpu.values()), time.monotonic() - t0)
            faults = minor_faults(node.pid) - faults0
            loaded = _wait(probe, out_p, 5)
            deliveries = _wait(dprobe, out_d, 5)
            parts = [_wait(p, out, 5) for p, out in zip(loaders, loads_out, strict=True)]
            loadres: dict[str, Any] = {
                "admitted": [x for part in parts for x in part["admitted"]],
                "shed": [x for part in parts for x in part["shed"]],
                "alone": [x for part in parts for x in part["alone"]],
                "to_admit": [x for part in parts for x in part["to_admit"]],
                "pushed": [x for part in parts for x in part["pushed"]],
                "shed_retries": [x for part in parts for x in part["shed_retries"]],
                "settled": [x for part in parts for x in part["settled"]],
                "opening": [x for part in parts for x in part["opening"]],
                "shed_by": {
                    code: [x for part in parts for x in part["shed_by"].get(code, [])]
                    for code in ("RESOURCE_EXHAUSTED", "UNAVAILABLE", "CANCELLED")
                },
                "other": {
                    code: sum(part["other"].get(code, 0) for part in parts)
                    for part in parts
                    for code in part["other"]
                },
                "shed_codes": {
                    code: sum(part["shed_codes"].get(code, 0) for part in parts)
                    for part in parts
                    for code in part["shed_codes"]
                },
            }
            result = _report(
                r, args, unloaded, loaded, deliveries, loadres, node.pid, peak, loads, cpu, faults
            )
            rounds.append(result)
        ok = all(r["ok"] for r in rounds)
        if len(rounds) > 1:
            ratios = [r["ratio"] for r in rounds]
            d_ratios = [r["d_ratio"] for r in rounds]
            p_ratios = [r["p_ratio"] for r in rounds]
            print(
                f"over {len(rounds)} rounds: serve probe p99 ratio {min(ratios):.1f}"
                f"–{max(ratios):.1f}; admitted deliveries p99 ratio {min(d_ratios):.1f}"
                f"–{max(d_ratios):.1f} (the probe's {min(p_ratios):.1f}–{max(p_ratios):.1f});"
                f" RSS peak {max(r['hwm'] for r in rounds):.0f} MiB"
                f" (bound {args.rss_bound_mib}); slowest loaded demand"
                f" {min(r['slowest'] for r in rounds):.0f}–{max(r['slowest'] for r in rounds):.0f}"
                f" ms; rounds passing {sum(r['ok'] for r in rounds)}"
                f" of {len(rounds)}"
            )
            # What the node does for every shed caller, whether it honours the
            # appointments or not: how soon it is refused, and how many of the
            # refusals were gRPC's resets (CANCELLED, no appointment) rather
            # than the node's RESOURCE_EXHAUSTED with one.
            print(
                f"shed callers ({'honouring' if args.pushback else 'ignoring'} the pushback):"
                f" refused in p50 {min(r['shed_p50'] for r in rounds):.0f}"
                f"–{max(r['shed_p50'] for r in rounds):.0f} ms, p99"
                f" {min(r['shed_p99'] for r in rounds):.0f}"
                f"–{max(r['shed_p99'] for r in rounds):.0f}"
                f" ms; reset by gRPC (CANCELLED) {sum(r['reset'] for r in rounds)} of"
                f" {sum(r['shed_n'] for r in rounds)}"
            )
        return 0 if ok else 1
    finally:
        for child in _CHILDREN:
            if child.poll() is None:
                child.kill()
                child.wait()
        stop(node, 15)
        log.close()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def _report(
    r: int,
    args: argparse.Namespace,
    unloaded: dict[str, Any],
    loaded: dict[str, Any],
    deliveries: dict[str, Any],
    load: dict[str, Any],
    pid: int,
    peak: float,
    loads: list[float],
    cpu: tuple[float, float, float],
    faults: int,
) -> dict[str, Any]:
    u, lo = unloaded["samples"], loaded["samples"]
    u99, l99 = _p(u, 0.99), _p(lo, 0.99)
    ratio = l99 / u99 if u99 and lo else float("inf")
    alone, probed = deliveries["alone"], deliveries["admitted"]
    # Every delivery admitted under load, the load processes' and the probe's,
    # against the probe's own deliveries one at a time before the load.
    admitted = load["admitted"] + probed
    a99, d99 = _p(alone, 0.99), _p(admitted, 0.99)
    d_ratio = d99 / a99 if alone and admitted else float("inf")
    p99 = _p(probed, 0.99)
    p_ratio = p99 / a99 if alone and probed else float("inf")
    shed = load["shed"]
    hwm = _rss_mib(pid, "VmHWM")
    rss_ok = hwm <= args.rss_bound_mib

    def verdict(ok: bool) -> str:
        return "PASS" if ok else "FAIL"

    # The smallest promise a node signs, judged on the slowest loaded demand,
    # only where that latency is the node's alone (a real-time probe).
    slowest = max(lo, default=float("inf"))
    promise_kept: bool | None = None
    if loaded.get("rt"):
        promise_kept = not loaded["errors"] and slowest <= MIN_DEADLINE_MS

    print(
        f"round {r + 1}: load average max {max(loads, default=0):.2f},"
        f" mean {statistics.fmean(loads) if loads else 0:.2f} (1-min);"
        f" CPU over {cpu[2]:.1f} s: node {cpu[0]:.1f} s, load generator {cpu[1]:.1f} s;"
        f" node minor page faults {faults}"
    )
    print(f"  {'':22} {'unloaded p50 / p99 ms':>24} {'loaded p50 / p99 ms':>24}  p99 ratio")
    print(
        f"  {'serve probe':22} {_p(u, 0.5):>10.1f} / {u99:>8.1f} (n={len(u):>4})"
        f" {_p(lo, 0.5):>8.1f} / {l99:>8.1f} (n={len(lo):>4})"
        f"  {ratio:6.1f} (<= 10: {verdict(ratio <= 10)})  errors {loaded['errors'] or 0}"
        f"  loaded max {max(lo, default=0):.1f} ms"
    )
    print(
        f"  {'  minimum promise':22} slowest loaded demand {slowest:.1f} ms vs"
        f" MIN_DEADLINE_MS {MIN_DEADLINE_MS} ms: {verdict(bool(promise_kept))}"
        if promise_kept is not None
        else f"  {'  minimum promise':22} not judged: the serve probe did not run real-time"
    )
    print(
        f"  {'admitted deliveries':22} {_p(alone, 0.5):>10.1f} / {a99:>8.1f} (n={len(alone):>4})"
        f" {_p(admitted, 0.5):>8.1f} / {d99:>8.1f} (n={len(admitted):>4})"
        f"  {d_ratio:6.1f} (<= 10: {verdict(d_ratio <= 10)})"
    )
    print(
        f"  {'  of which the probe':22} {'':>24} {_p(probed, 0.5):>8.1f} / {p99:>8.1f}"
        f" (n={len(probed):>4})  {p_ratio:6.1f}  {args.probe_callers} callers in their own"
        f" process; shed {len(deliveries['shed'])}"
    )
    opening = load["opening"] + deliveries["opening"]
    print(
        f"  {'  sent in the first 1 s':22} {'':>24} {_p(opening, 0.5):>8.1f} /"
        f" {_p(opening, 0.99):>8.1f} (n={len(opening):>4})"
        f"  {_p(opening, 0.99) / a99 if alone and opening else 0:6.1f}"
        f"  (admitted out of the opening burst)"
    )
    settled = load["settled"] + deliveries["settled"]
    print(
        f"  {'  sent after 1 s':22} {'':>24} {_p(settled, 0.5):>8.1f} / {_p(settled, 0.99):>8.1f}"
        f" (n={len(settled):>4})  {_p(settled, 0.99) / a99 if alone and settled else 0:6.1f}"
        f"  (the first second: the burst of every caller starting at once)"
    )
    to_admit = load["to_admit"] + deliveries["to_admit"]
    pushed = load["pushed"] + deliveries["pushed"]
    print(
        f"  admitted deliveries' wait to be admitted p50 {_p(to_admit, 0.5):.1f} ms,"
        f" p99 {_p(to_admit, 0.99):.1f} ms (the probe's p50 {_p(deliveries['to_admit'], 0.5):.1f},"
        f" p99 {_p(deliveries['to_admit'], 0.99):.1f})"
    )
    print(
        f"  shed {len(shed)} {load['shed_codes'] or ''} (time to be refused p50"
        f" {_p(shed, 0.5):.1f} ms, p99 {_p(shed, 0.99):.1f} ms); other errors {load['other'] or 0}"
    )
    later = load["shed_retries"]
    print(
        f"    after each caller's first call (the start of the run is a burst of"
        f" {args.callers - args.probe_callers} at once): {len(later)}, refused in p50"
        f" {_p(later, 0.5):.1f} ms, p99 {_p(later, 0.99):.1f} ms"
    )
    for code, times in load["shed_by"].items():
        if times:
            print(
                f"    {code}: {len(times)}, refused in p50 {_p(times, 0.5):.1f} ms,"
                f" p99 {_p(times, 0.99):.1f} ms"
            )
    print(
        f"  pushback honoured {len(pushed)} times (p50 {_p(pushed, 0.5):.0f} ms,"
        f" max {max(pushed, default=0):.0f} ms)"
        if args.pushback
        else "  pushback ignored (--no-pushback): every shed caller backs off on its own"
    )
    print(
        f"  node RSS peak {hwm:.0f} MiB (sampled max {peak:.0f}) vs bound {args.rss_bound_mib}"
        f" MiB: {verdict(rss_ok)}",
        flush=True,
    )
    return {
        "ratio": ratio,
        "d_ratio": d_ratio,
        "p_ratio": p_ratio,
        "hwm": hwm,
        "ok": ratio <= 10 and d_ratio <= 10 and rss_ok and promise_kept is not False,
        "slowest": slowest,
        "shed_p50": _p(shed, 0.5),
        "shed_p99": _p(shed, 0.99),
        "reset": load["shed_codes"].get("CANCELLED", 0),
        "shed_n": len(shed),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--role", choices=("drive", "probe", "load"), default="drive")
    parser.add_argument("--callers", type=int, default=1000)
    parser.add_argument("--payload-mib", type=float, default=3.0)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--unloaded", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--max-concurrent", type=int, default=DEFAULT_MAX_CONCURRENT_RPCS)
    parser.add_argument("--max-bulk", type=int, default=DEFAULT_MAX_BULK_RPCS)
    parser.add_argument("--max-bulk-bytes", type=int, default=DEFAULT_MAX_BULK_BYTES)
    parser.add_argument("--max-pending", type=int, default=DEFAULT_MAX_PENDING_RPCS)
    parser.add_argument("--rss-bound-mib", type=int, default=1024)
    parser.add_argument("--shed-lag-ms", type=int, default=0, help="the node's --bulk-shed-lag-ms")
    parser.add_argument("--keep", action="store_true", help="keep the work dir (node log)")
    parser.add_argument(
        "--pushback", action=argparse.BooleanOptionalAction, default=True,
        help="a shed caller waits the node's grpc-retry-pushback-ms when it sends one (as"
        " gRPC's retry policy does); --no-pushback: always its own exponential backoff",
    )  # fmt: skip
    parser.add_argument(
        "--eager-body", action="store_true",
        help="callers send the body with the headers (not after the node admits the call)",
    )  # fmt: skip
    # child roles
    parser.add_argument("--out", type=Path)
    parser.add_argument("--address")
    parser.add_argument("--obligation")
    parser.add_argument("--operator-key")
    parser.add_argument("--ready", type=Path)
    parser.add_argument("--nice", type=int, default=0)
    parser.add_argument("--rt", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--no-probe-rt", dest="probe_rt", action="store_false",
        help="run the serve probe at normal priority (by default it runs real-time,"
        " SCHED_FIFO, on the callers' CPU where permitted, so the load processes"
        " cannot delay it and its latency is the node's alone)",
    )  # fmt: skip
    parser.add_argument("--go", type=Path)
    parser.add_argument("--offset", type=int, default=0)
    parser.add_argument(
        "--load-procs", type=int, default=4,
        help="load processes the callers are split over (one event loop cannot copy"
        " 1,000 bodies of 3 MiB fast enough to measure the node)",
    )  # fmt: skip
    parser.add_argument(
        "--load-nice", type=int, default=0,
        help="niceness of the load process (models callers on other machines)",
    )  # fmt: skip
    parser.add_argument(
        "--layout", choices=("split", "shared"), default="split",
        help="split (default): the node pinned to one CPU, the probes and load processes"
        " to the others, as a deployed node has its own CPU and its callers are"
        " elsewhere; shared: every process on every CPU (the callers' CPU use is then"
        " in the node's latency)",
    )  # fmt: skip
    parser.add_argument("--node-env", action="append", default=[], help="KEY=VALUE for the node")
    parser.add_argument("--pool", type=int, default=128, help="distinct deliveries sent")
    parser.add_argument("--solo", type=int, default=20, help="unloaded deliveries first")
    parser.add_argument(
        "--probe-callers", type=int, default=50,
        help="callers (of --callers) in the delivery probe's own process, their latency"
        " shown apart: the load processes' callers wait for their own busy process too",
    )  # fmt: skip
    args = parser.parse_args()
    if args.role == "drive":
        if not 1 <= args.probe_callers < args.callers:
            parser.error(f"--probe-callers must be 1 to --callers - 1, got {args.probe_callers}")
        return _drive(args)
    if args.nice:
        os.nice(args.nice)
    rt = False
    if args.rt:
        # A real-time serve probe on the callers' CPU: it runs as soon as it is
        # runnable, so its latency is the node's doing, as for a holder on a
        # machine of its own (needs root or CAP_SYS_NICE).
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
            rt = True
        except PermissionError:
            print(
                "serve probe: cannot run real-time (needs root or CAP_SYS_NICE); its latency"
                " includes its own waits for the CPU the load runs on",
                file=sys.stderr,
                flush=True,
            )
    result = asyncio.run(_probe(args) if args.role == "probe" else _load(args))
    if args.role == "probe":
        result["rt"] = rt
    args.out.write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
