"""Benchmark: the experiment in-process next to across the boundary, one slice, one run.

For the default slice (C = 25, profile med, 2 seeds, 500 steps) it times:

1. the in-process replay alone (:func:`harness.replay.replay`, the engine of
   ``provnet experiment run``);
2. the boundary runner over the in-memory transport (real nodes, SQLite hop
   logs, Ed25519 signatures, no sockets);
3. the boundary runner over real grpc.aio servers on loopback.

It checks that all three decide identically (same overall decision-log
fingerprint) and prints, side by side: wall time, RPCs and bytes on the wire
per decision (delivery and rehydration separately), rehydrating-decision
latency p50/p99, hops fetched, signature/hash operations and their CPU time,
and the delivery bytes compaction saves (ground_truth's full lineage vs the
compacted structural value, with and without its signed statements).

The gRPC column's rehydrating decision p50 is set against a bare grpc.aio
round trip (a 256-byte echo, no provnet code) twice: measured side by side
inside the run (:class:`InRunEcho`: an echo server in the run's own process
and event loop, one call after each rehydrating decision, outside its timer;
the ≤ 1.3× target is judged on this ratio; the ``Serve.Ask`` call alone
and the holder's whole rehydration are timed in the same decisions and set
against the same echo), and, as before, in a fresh event
loop before and after the run.

Usage::

    .venv/bin/python benchmarks/bench_boundary.py [--seeds 2] [--steps 500] [--cadence 25]
                                                  [--transports memory,grpc,memory+cache,memory+w2]
                                                  [--full [--workers N]]
                                                  [--faults [--fault-deadline-ms 250]]

``memory+cache`` lets the holder keep the folds it verified (no second
demand for a fold it already holds); ``memory+w2`` shares the runs over two
worker processes (``--workers 2``), ``memory+w`` over the default (the
cores available, as ``provnet experiment boundary``). ``--full`` takes the
config's whole main matrix (180 runs) instead of the slice and times, side
by side in one run, the in-process matrix (the replay of the same 180 runs)
and the command itself, ``provnet experiment boundary --full`` in a child
process (default workers, or ``--workers N``), its wall and CPU time, the
ratio of the two wall times, the runs deciding exactly as in-process (from
the ``boundary_meta.json`` it writes) and the 31 s target as PASS/FAIL with
the load average; ``--transports`` adds columns as for the slice (none by
default with ``--full``). Every column also reports the CPU seconds it took (user + system, of
this process and its worker processes), which on a shared machine says more
than the wall time. ``--faults`` adds one slice per fault
of the origin: the rehydrate-mode flip rate of structural_min, fallbacks,
evidence by kind (all re-verified from the files alone), accusations of
correct nodes (must be 0) and the rehydrating-decision latency.

Exit status 1 if a boundary run decides differently from in-process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from contracts.rules import MIN_DEADLINE_MS
from harness.arms import STRUCTURAL_ARMS
from harness.boundary import topology
from harness.boundary.choices import BOUNDARY_FAULTS, TransportKind
from harness.boundary.cli import available_cores, default_workers
from harness.boundary.report import percentile
from harness.boundary.runner import (
    BoundaryOutcome,
    BoundarySettings,
    overall_fingerprints,
    run_boundary,
    slice_tasks,
)
from harness.config import ExperimentConfig
from harness.fingerprint import combine
from harness.replay import replay
from harness.trajectory import generate
from nodes.config import LogFormat
from nodes.faults import FaultMode
from nodes.logging import configure_logging

STRUCTURAL = tuple(a.value for a in STRUCTURAL_ARMS)
#: ``--full`` wall-time target (seconds): the lab's whole in-process matrix here
FULL_TARGET_S = 31.0
#: grpc rehydrating decision p50 ÷ the bare RTT side by side, issue #24's target
DECISION_TARGET = 1.3


def _cpu_seconds() -> float:
    """User + system CPU of this process and of its waited-for children so far."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _in_process(cfg: ExperimentConfig, s: BoundarySettings) -> tuple[float, str, float, float]:
    """(seconds, overall fingerprint, lookups and bytes read per rehydrate-mode decision)."""
    start = time.perf_counter()
    entries = []
    lookups = nbytes = decisions = 0
    for key, profile, params in slice_tasks(cfg, s):  # the boundary runner's own runs
        result = replay(generate(key.seed, s.steps, cfg.decision_every, profile), params)
        entries.append((key.label, result.fingerprint))
        decisions += result.n_decisions
        for row in result.gate_rows:
            if row[0] in STRUCTURAL and row[4] == "rehydrate":
                lookups += int(str(row[11]))
                nbytes += int(str(row[12]))
    wall = time.perf_counter() - start
    per = 2 * decisions
    return wall, combine(entries), lookups / per, nbytes / per


def _summary(o: BoundaryOutcome) -> dict[str, float]:
    decisions = sum(c.decisions for c in o.arm_costs.values())
    deliveries = sum(o.wire[(a, "delivery")]["rpcs"] for a, _ in o.wire if _ == "delivery")
    delivery_bytes = sum(
        v["request_bytes"] + v["response_bytes"] for (a, k), v in o.wire.items() if k == "delivery"
    )
    rehydrate = [v for (a, k), v in o.wire.items() if k == "rehydrate"]
    rehydrations = sum(o.arm_costs[a].rehydrations for a in STRUCTURAL)
    latencies = [x for a in STRUCTURAL for x in o.arm_costs[a].rehydration_latencies]
    crypto = [v for (a, k), v in o.wire.items() if a != "calls"]
    gt = o.arm_costs["ground_truth"]
    smin = o.arm_costs["structural_min"]
    return {
        "wall_s": o.wall_seconds,
        "decisions": decisions / 4,
        "rpcs_per_decision": (deliveries + sum(v["rpcs"] for v in rehydrate)) / (decisions / 4),
        "delivery_bytes_per_arm_decision": delivery_bytes / decisions,
        "rehydrations": rehydrations,
        "rehydrate_bytes_per_rehydration": sum(
            v["request_bytes"] + v["response_bytes"] for v in rehydrate
        )
        / max(1, rehydrations),
        "hops_fetched_per_rehydration": sum(v.get("hops_received", 0) for v in rehydrate)
        / max(1, rehydrations),
        "p50_ms": percentile(latencies, 50) * 1000,
        "p99_ms": percentile(latencies, 99) * 1000,
        "sign_ops": sum(v["sign_ops"] for v in crypto),
        "verify_ops": sum(v["verify_ops"] for v in crypto),
        "hash_leaves": sum(v["hash_leaves"] for v in crypto),
        "crypto_ms": sum(v["sig_ms"] + v["hash_ms"] for v in crypto),
        "gt_value_b": gt.value_bytes / max(1, gt.decisions),
        "smin_value_b": smin.value_bytes / max(1, smin.decisions),
        "smin_all_b": (smin.value_bytes + smin.statement_bytes) / max(1, smin.decisions),
        "inproc_p50_ms": percentile(
            [x for a in STRUCTURAL for x in o.arm_costs[a].inproc_latencies], 50
        )
        * 1000,
        "inproc_p99_ms": percentile(
            [x for a in STRUCTURAL for x in o.arm_costs[a].inproc_latencies], 99
        )
        * 1000,
    }


def _ident(x: bytes) -> bytes:
    return x


async def _echo(request: bytes, context: object) -> bytes:
    return request


def _echo_handler() -> Any:
    """The bare server's one method, ``/bench.Echo/Echo``: bytes in, the same bytes out."""
    import grpc

    return grpc.method_handlers_generic_handler(
        "bench.Echo",
        {"Echo": grpc.unary_unary_rpc_method_handler(_echo, _ident, _ident)},
    )


class InRunEcho:
    """The bare grpc.aio round trip measured inside a gRPC boundary run, side by side.

    A bare echo server (the same ``/bench.Echo/Echo`` as :func:`_bare_rtt_ms`)
    runs in the run's own process and event loop, next to the nodes; after
    every rehydrating decision, once its latency has been recorded (before
    the next delivery), one 256-byte echo call is timed. The bare round trip
    then meets the same loop, the same grpc poller thread and the same
    machine load as the decisions it is compared with, interleaved with
    them, instead of a fresh loop before and after the run. Installed around
    :class:`harness.boundary.topology.LocalOps` for one run (:meth:`install`
    / :meth:`uninstall`). A probe is never inside a rehydrating decision's
    timer (it falls in the next delivery's, which this benchmark does not
    report); the time probes take is taken off the run's wall time.
    """

    def __init__(self) -> None:
        self.samples_ms: list[float] = []
        #: Side by side with the echo, what a rehydrating decision spends inside it:
        #: the holder's whole rehydration (``LocalOps.rehydrate``: the Serve call and
        #: the holder's own work around it) and the ``Serve.Ask`` call alone (ms).
        self.rehydrate_ms: list[float] = []
        self.serve_call_ms: list[float] = []
        #: Seconds spent in probes (server start and stop included).
        self.spent_s = 0.0
        self._due = False
        self._server: Any = None
        self._channel: Any = None
        self._call: Any = None
        self._saved: dict[str, Any] = {}

    async def _probe(self) -> None:
        import grpc

        started = time.perf_counter()
        if self._call is None:
            server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
            server.add_generic_rpc_handlers((_echo_handler(),))
            port = server.add_insecure_port("127.0.0.1:0")
            await server.start()
            self._server = server
            channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
            self._channel = channel
            self._call = channel.unary_unary("/bench.Echo/Echo", _ident, _ident)
            for _ in range(20):  # connect and warm the channel (not sampled)
                await self._call(b"x" * 256, timeout=2.0)
        t0 = time.perf_counter()
        await self._call(b"x" * 256, timeout=2.0)
        self.samples_ms.append((time.perf_counter() - t0) * 1000)
        self.spent_s += time.perf_counter() - started

    async def _stop(self) -> None:
        started = time.perf_counter()
        if self._channel is not None:
            await self._channel.close()
        if self._server is not None:
            await self._server.stop(None)
        self._channel = self._server = self._call = None
        self.spent_s += time.perf_counter() - started

    def install(self) -> None:
        from nodes.transport import GrpcTransport

        ops = topology.LocalOps
        rehydrate, deliver = ops.rehydrate, ops.deliver
        close = topology.Topology.close
        ask = GrpcTransport.ask
        self._saved = {"rehydrate": rehydrate, "deliver": deliver, "close": close, "ask": ask}
        probe = self

        async def rehydrate_then_mark(self: topology.LocalOps, value_ref: str) -> Any:
            t0 = time.perf_counter()
            try:
                return await rehydrate(self, value_ref)
            finally:
                probe.rehydrate_ms.append((time.perf_counter() - t0) * 1000)
                probe._due = True  # probed before the next delivery, once the decision is timed

        async def timed_ask(self: GrpcTransport, *args: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return await ask(self, *args, **kw)
            finally:
                probe.serve_call_ms.append((time.perf_counter() - t0) * 1000)

        async def probe_then_deliver(self: topology.LocalOps, *args: Any) -> Any:
            if probe._due:
                probe._due = False
                await probe._probe()
            return await deliver(self, *args)

        async def stop_then_close(self: topology.Topology) -> None:
            await probe._stop()
            await close(self)

        ops.rehydrate = rehydrate_then_mark  # type: ignore[method-assign]
        ops.deliver = probe_then_deliver  # type: ignore[method-assign, assignment]
        topology.Topology.close = stop_then_close  # type: ignore[method-assign]
        GrpcTransport.ask = timed_ask  # type: ignore[method-assign]

    def uninstall(self) -> None:
        from nodes.transport import GrpcTransport

        GrpcTransport.ask = self._saved["ask"]  # type: ignore[method-assign]
        topology.LocalOps.rehydrate = self._saved["rehydrate"]  # type: ignore[method-assign]
        topology.LocalOps.deliver = self._saved["deliver"]  # type: ignore[method-assign]
        topology.Topology.close = self._saved["close"]  # type: ignore[method-assign]


async def _bare_rtt_ms(samples: int = 400) -> float:
    """p50 of a bare grpc.aio unary round trip on loopback (bytes echoed, no provnet code)."""
    import grpc

    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    server.add_generic_rpc_handlers((_echo_handler(),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.unary_unary("/bench.Echo/Echo", _ident, _ident)
            payload = b"x" * 256
            for _ in range(50):
                await call(payload, timeout=2.0)
            times: list[float] = []
            for _ in range(samples):
                t0 = time.perf_counter()
                await call(payload, timeout=2.0)
                times.append((time.perf_counter() - t0) * 1000)
    finally:
        await server.stop(None)
    return percentile([t / 1000 for t in times], 50) * 1000


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--cadence", type=int, default=25)
    ap.add_argument(
        "--transports",
        default=None,
        help="columns: memory, grpc, and memory+cache (holder keeps verified folds)",
    )
    ap.add_argument(
        "--faults",
        action="store_true",
        help="also play each fault of the first origin (deadline --fault-deadline-ms)",
    )
    ap.add_argument("--fault-deadline-ms", type=int, default=MIN_DEADLINE_MS)
    ap.add_argument(
        "--full",
        action="store_true",
        help="the config's whole main matrix, and `provnet experiment boundary --full` timed",
    )
    ap.add_argument(
        "--workers",
        type=int,
        default=None,
        help="with --full: the command's --workers (default: its own default)",
    )
    args = ap.parse_args(argv)
    if args.transports is None:
        args.transports = "" if args.full else "memory,grpc,memory+cache"
    if args.workers is not None and not args.full:
        ap.error("--workers goes with --full (columns take +wN)")
    configure_logging(LogFormat.JSON, "warning")
    cfg = ExperimentConfig()
    if args.full:
        base = BoundarySettings(
            cadences=cfg.compaction_cadence,
            profiles=tuple(cfg.degradation_profiles),
            seeds=cfg.seeds,
            steps=cfg.steps,
        )
    else:
        base = BoundarySettings(
            cadences=(args.cadence,), seeds=tuple(range(args.seeds)), steps=args.steps
        )
    cpu_start = _cpu_seconds()
    wall_in, fp_in, lookups, read = _in_process(cfg, base)
    cpu_in = _cpu_seconds() - cpu_start
    print(
        f"matrix: C={','.join(map(str, base.cadences))}, {','.join(base.profiles)},"
        f" {len(base.seeds)} seeds, {base.steps} steps"
        f" (structural arms: lookups {lookups:.2f} and {read:,.0f} B read"
        " per rehydrate-mode decision in-process)"
    )
    results: dict[str, dict[str, float]] = {}
    bare_rtt: list[float] = []
    in_run_rtt: list[float] = []
    in_run: InRunEcho | None = None
    ok = True
    full_command: dict[str, float] | None = None
    if args.full:
        full_command = _full_command(args.workers, fp_in)
        ok = ok and full_command["equal"] == full_command["runs"]
    for name in filter(None, args.transports.split(",")):
        transport, *extras = name.split("+")
        workers = [
            int(e[1:]) if e[1:] else default_workers(len(slice_tasks(cfg, base)))
            for e in extras
            if e.startswith("w") and (e[1:].isdigit() or not e[1:])
        ]
        settings = BoundarySettings(
            cadences=base.cadences,
            profiles=base.profiles,
            seeds=base.seeds,
            steps=base.steps,
            transport=TransportKind(transport),
            holder_cache="cache" in extras,
            workers=workers[0] if workers else 1,
        )
        grpc_column = name == TransportKind.GRPC.value
        if grpc_column:
            bare_rtt.append(asyncio.run(_bare_rtt_ms()))  # before and after the grpc run
            in_run = InRunEcho()
            in_run.install()
        cpu_start = _cpu_seconds()
        try:
            outcome = run_boundary(cfg, settings, progress=False)
        finally:
            if grpc_column:
                in_run.uninstall()
        cpu = _cpu_seconds() - cpu_start
        if grpc_column:
            bare_rtt.append(asyncio.run(_bare_rtt_ms()))
            in_run_rtt = in_run.samples_ms
            outcome.wall_seconds -= in_run.spent_s  # the probes are not the run's work
        _, fp = overall_fingerprints(outcome)
        same = fp == fp_in
        ok = ok and same
        results[name] = {**_summary(outcome), "cpu_s": cpu}
        print(f"{name}: fingerprint {'equal to' if same else 'DIFFERENT from'} in-process")
    rows = [
        ("wall time (s)", "wall_s", "{:.3f}"),
        ("CPU time, user + system (s)", "cpu_s", "{:.2f}"),
        ("RPCs per decision point (4 arms)", "rpcs_per_decision", "{:.2f}"),
        ("delivery B per arm decision", "delivery_bytes_per_arm_decision", "{:,.0f}"),
        ("rehydrating decisions (2 arms)", "rehydrations", "{:,.0f}"),
        ("rehydration B per rehydration", "rehydrate_bytes_per_rehydration", "{:,.0f}"),
        ("hops received per rehydration", "hops_fetched_per_rehydration", "{:.1f}"),
        ("rehydrating decision p50 (ms)", "p50_ms", "{:.3f}"),
        ("rehydrating decision p99 (ms)", "p99_ms", "{:.3f}"),
        ("signatures made", "sign_ops", "{:,.0f}"),
        ("signatures verified", "verify_ops", "{:,.0f}"),
        ("leaves hashed", "hash_leaves", "{:,.0f}"),
        ("signature + hash CPU (ms)", "crypto_ms", "{:.1f}"),
        ("ground_truth value B / decision", "gt_value_b", "{:,.0f}"),
        ("structural_min value B / decision", "smin_value_b", "{:,.0f}"),
        ("  … with its statements (heads)", "smin_all_b", "{:,.0f}"),
    ]
    names = list(results)
    header = f"{'':38}{'in-process':>14}" + "".join(f"{n:>14}" for n in names)
    if names:  # --full alone times the command only: no columns to compare
        print(header)
    first = results[names[0]] if names else {}
    inproc = {
        "wall_s": wall_in,
        "cpu_s": cpu_in,
        "rpcs_per_decision": 0.0,
        "delivery_bytes_per_arm_decision": 0.0,
        "rehydrations": first.get("rehydrations", 0.0),
        "rehydrate_bytes_per_rehydration": 0.0,
        "hops_fetched_per_rehydration": float("nan"),
        "p50_ms": first.get("inproc_p50_ms", 0.0),
        "p99_ms": first.get("inproc_p99_ms", 0.0),
        "sign_ops": 0.0,
        "verify_ops": 0.0,
        "hash_leaves": 0.0,
        "crypto_ms": 0.0,
        "gt_value_b": float("nan"),
        "smin_value_b": float("nan"),
        "smin_all_b": float("nan"),
    }
    for label, key, fmt in rows if names else ():
        cells = [inproc[key], *(results[n][key] for n in names)]
        print(
            f"{label:38}"
            + "".join(
                f"{'–':>14}" if c != c else f"{fmt.format(c):>14}"  # NaN: not applicable
                for c in cells
            )
        )
    for n in names:
        r = results[n]
        print(
            f"ratio {n}/in-process: wall {r['wall_s'] / wall_in:,.0f}x,"
            f" rehydrating decision p50 {r['p50_ms'] / max(1e-9, inproc['p50_ms']):,.0f}x"
        )
    if full_command is not None:
        r = full_command
        print(
            f"--full, side by side: in-process matrix {wall_in:.2f} s wall ({cpu_in:.2f} s CPU);"
            f" `provnet experiment boundary --full` (workers {r['workers']:.0f})"
            f" {r['wall_s']:.1f} s wall, {r['cpu_s']:.1f} s CPU"
            f" ({r['cpu_s'] / r['decisions'] * 1000:.2f} ms CPU per decision point);"
            f" ratio {r['wall_s'] / wall_in:,.1f}x;"
            f" runs deciding exactly as in-process {r['equal']:.0f}/{r['runs']:.0f}"
        )
        print(
            f"--full target <= {FULL_TARGET_S:.0f} s wall on 2 cores:"
            f" {'PASS' if r['wall_s'] <= FULL_TARGET_S else 'FAIL'}"
            f" ({r['wall_s']:.1f} s; load average {r['load_before']:.1f} before,"
            f" {r['load_after']:.1f} after; {available_cores()} cores available)"
        )
    if args.full:
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        for n in names:
            r = results[n]
            print(
                f"--full {n}: {r['wall_s']:.1f} s wall, {r['cpu_s']:.1f} s CPU"
                f" ({r['cpu_s'] / max(1.0, r['decisions']) * 1000:.2f} ms CPU per decision point),"
                f" target <= {FULL_TARGET_S:.0f} s wall on 2 cores:"
                f" {'PASS' if r['wall_s'] <= FULL_TARGET_S else 'FAIL'}"
                f" (load average {load:.1f}, {available_cores()} cores available)"
            )
    if names:
        r = results[names[0]]
        print(
            f"compaction saves {100 * (1 - r['smin_value_b'] / r['gt_value_b']):.1f}% of delivered"
            f" value bytes; with its signed statements the compacted value costs"
            f" {100 * (r['smin_all_b'] / r['gt_value_b'] - 1):+.1f}% vs shipping everything"
        )
    for n in names:
        r = results[n]
        per = 100 / max(1.0, r["decisions"])
        print(
            f"{n}: per 100 decision points, signatures made {r['sign_ops'] * per:,.0f},"
            f" verified {r['verify_ops'] * per:,.0f}"
        )
    if bare_rtt and "grpc" in results:
        p50 = results["grpc"]["p50_ms"]
        rtt = sum(bare_rtt) / len(bare_rtt)
        print(
            f"grpc rehydrating decision p50 {p50:.3f} ms / bare grpc.aio RTT p50 {rtt:.3f} ms"
            f" in a fresh event loop (mean of before and after the run) = {p50 / rtt:.2f}"
        )
        if in_run_rtt:
            side = percentile([t / 1000 for t in in_run_rtt], 50) * 1000
            ratio = p50 / side
            print(
                f"grpc rehydrating decision p50 {p50:.3f} ms / bare grpc.aio RTT p50 {side:.3f} ms"
                f" side by side (in the run's process and loop, one echo after each of the"
                f" {len(in_run_rtt)} rehydrating decisions) = {ratio:.2f}"
                f" (target <= {DECISION_TARGET}) {'PASS' if ratio <= DECISION_TARGET else 'FAIL'}"
                f" (load average {os.getloadavg()[0]:.1f})"
            )
            if in_run is not None and in_run.serve_call_ms and in_run.rehydrate_ms:
                call = percentile([t / 1000 for t in in_run.serve_call_ms], 50) * 1000
                whole = percentile([t / 1000 for t in in_run.rehydrate_ms], 50) * 1000
                print(
                    f"grpc, inside the rehydrating decision, p50 ÷ the same bare RTT:"
                    f" the Serve.Ask call alone {call:.3f} ms ({call / side:.2f}),"
                    f" the holder's rehydration (call + holder) {whole:.3f} ms"
                    f" ({whole / side:.2f}), the whole decision (+ hops as a log, the"
                    f" arm's gates) {p50:.3f} ms ({ratio:.2f})"
                )
    if args.faults:
        _faults(cfg, base, args.fault_deadline_ms)
    print("PASS: every transport decides as in-process" if ok else "FAIL: decisions differ")
    return 0 if ok else 1


def _full_command(workers: int | None, fp_in: str) -> dict[str, float]:
    """``provnet experiment boundary --full`` in a child process: wall, CPU, equal runs."""
    with tempfile.TemporaryDirectory(prefix="bench-boundary-full-") as tmp:
        out = Path(tmp) / "out"
        cmd = [sys.executable, "-m", "harness", "experiment", "boundary", "--full"]
        cmd += ["--out", str(out), "--no-progress"]
        if workers is not None:
            cmd += ["--workers", str(workers)]
        load_before = os.getloadavg()[0]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr[-2000:]}")
        meta = json.loads((out / "boundary_meta.json").read_text())
    runs = meta["runs"].values()
    equal = sum(1 for r in runs if r["fingerprints_equal"] and r["gate_rows_equal"])
    if meta["in_process_fingerprint"] != fp_in:
        raise SystemExit("the command's in-process fingerprint differs from this benchmark's")
    print(f"provnet experiment boundary --full: fingerprint {meta['boundary_fingerprint'][:16]}…")
    return {
        "wall_s": wall,
        "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "runs": float(meta["n_runs"]),
        "equal": float(equal),
        "decisions": float(sum(r["decisions"] for r in runs)),
        "workers": float(meta["settings"]["workers"]),
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
    }


def _faults(cfg: ExperimentConfig, base: BoundarySettings, deadline_ms: int) -> None:
    """What each fault of the origin does to the rehydrate mode, and what it leaves behind."""
    print(f"faults of the origin (deadline {deadline_ms} ms, witness on, 1 re-ask):")
    print(
        f"{'fault':12}{'rehydr. flip %':>15}{'fallbacks':>11}{'evidence':>22}"
        f"{'verified':>10}{'correct accused':>17}{'p50 ms':>9}{'p99 ms':>9}"
    )
    for fault in BOUNDARY_FAULTS:
        settings = BoundarySettings(
            cadences=base.cadences,
            seeds=base.seeds,
            steps=base.steps,
            fault=fault,
            deadline_ms=deadline_ms if fault in (FaultMode.SLOW, FaultMode.DROP) else 1000,
        )
        o = run_boundary(cfg, settings, progress=False)
        n = flips = fallbacks = 0
        for run in o.runs:
            for row in run.boundary_rows:
                if row[0] == "structural_min" and row[4] == "rehydrate":
                    n += int(str(row[5]))
                    flips += int(str(row[7])) + int(str(row[8]))
            fallbacks += sum(
                rec[4] for (a, _, m), rec in run.decisions.items() if a == "structural_min"
            )
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(o.evidence_by_kind.items())) or "none"
        latencies = o.arm_costs["structural_min"].rehydration_latencies
        print(
            f"{fault.value:12}{100 * flips / max(1, n):>15.2f}{fallbacks:>11}{kinds:>22}"
            f"{sum(e.verified for e in o.evidence):>10}{o.correct_accused:>17}"
            f"{1000 * percentile(latencies, 50):>9.1f}{1000 * percentile(latencies, 99):>9.1f}"
        )


if __name__ == "__main__":
    sys.exit(main())
