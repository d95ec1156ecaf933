"""What a stranger's replays and nonce floods cost a node, and what honest holders get meanwhile.

    .venv/bin/python benchmarks/bench_serve_pools.py [--replays 128] [--flood-s 20]
        [--flood-tasks 6]

One ``provnet node`` (pinned to the first CPU, this process to the others
when there are two or more) with an operator key. Two phases:

1. **Replays** (issue 23, attack 3): one ``Serve.Demand`` call of 256 signed
   demands (a fold with its own obligation: the holder signature is
   verified) is served, then replayed byte for byte by ``--replays`` callers
   over 4 connections. Printed: their codes, the wall time, the node's CPU
   seconds per refused replay (``/proc``) and the node's
   ``demand_verifications`` counter per refused replay.
2. **Nonce flood** (attack 2): ``--flood-tasks`` tasks send, for ``--flood-s``
   seconds, calls of 256 copies of one signed bearer demand under a head,
   each with a random nonce (its signature is not checked on that path),
   one copy to a call once a call is refused (so the memory is topped up);
   meanwhile an honest probe makes a fresh demand every 50 ms, alternating a
   bearer demand and a verified one. Printed: the flood's demands sent and
   codes, the probe's codes and latency (p50/p99), and the nonces the node
   remembers at the end (``demand_nonces``, where the node reports it).

Loopback only; every loop is bounded by its count or ``--flood-s``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

from _procs import cpu_seconds, one_node_setup, pinned_node

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _measure(args: argparse.Namespace, address: str, pid: int, key: Path) -> None:
    import grpc

    from contracts.batch import demand_payload
    from contracts.envelope import Envelope
    from contracts.heads import FoldProof, HeadCache
    from contracts.identity import Identity, load_identity
    from contracts.serve import build_demand, new_nonce
    from contracts.signed import Signed, open_statement
    from contracts.statements import Obligation
    from nodes._pb.provnet.v1 import serve_pb2, serve_pb2_grpc
    from nodes.auth import ControlCredentials, control_channel
    from nodes.control import NodeClient

    operator = ControlCredentials(load_identity(key))
    hops = [
        json.dumps(
            {
                "hop_id": f"h{i:06d}",
                "step": i,
                "op": "CACHE_READ",
                "axis_deltas": {"freshness": 0.95},
                "taints_added": [],
                "parent_hop_ids": [f"h{i - 1:06d}"] if i > 1 else [],
            }
        ).encode()
        for i in range(1, 4)
    ]
    async with NodeClient(address, operator, timeout=10.0) as log:
        own = await log.commit_fold("own", await log.append(hops))
        compacted = await log.commit_compaction([("headed", await log.append(hops), b"")])
    legacy = open_statement(own.obligation, Obligation)
    headed = (
        HeadCache()
        .verify_fold(
            FoldProof.from_bytes(compacted.fold_proofs[0]),
            now=int(time.time() * 1000),
            head=compacted.head,
        )
        .obligation
    )

    async def stats() -> dict[str, int]:
        async with NodeClient(address, timeout=10.0) as node:
            return await node.stats()

    # ------------------------------------------------------------------ replays
    holder = Identity.generate()
    at = int(time.time() * 1000)
    call = [build_demand(holder, legacy, now=at).to_bytes() for _ in range(256)]
    options = (("grpc.use_local_subchannel_pool", 1),)
    channels = [control_channel(address, None, options) for _ in range(4)]
    stubs: list[Any] = [serve_pb2_grpc.ServeStub(c) for c in channels]
    await stubs[0].Demand(serve_pb2.DemandRequest(demands=call), timeout=30)
    before = await stats()

    async def replay(stub: Any) -> str:
        try:
            await stub.Demand(serve_pb2.DemandRequest(demands=call), timeout=60)
        except grpc.aio.AioRpcError as exc:
            return exc.code().name
        return "OK"

    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    codes = await asyncio.gather(*(replay(stubs[i % 4]) for i in range(args.replays)))
    wall = time.perf_counter() - t0
    await asyncio.sleep(0.3)
    cpu = cpu_seconds(pid) - cpu0
    after = await stats()
    verified = after.get("demand_verifications", 0) - before.get("demand_verifications", 0)
    tally = {c: codes.count(c) for c in sorted(set(codes))}
    print(
        f"replays of one 256-demand call: {args.replays} callers, codes {tally}, wall {wall:.2f} s,"
        f" node CPU {cpu * 1000 / args.replays:.2f} ms per replay,"
        f" {verified / args.replays:.1f} signatures verified per replay",
        flush=True,
    )
    for c in channels:
        await c.close(None)

    # ------------------------------------------------------------------ nonce flood
    one = build_demand(Identity.generate(), headed, now=int(time.time() * 1000))
    flood_codes: dict[str, int] = {}
    probe_codes: dict[str, int] = {}
    latencies: list[float] = []
    sent = 0
    until = time.monotonic() + args.flood_s

    def copies(n: int) -> list[bytes]:
        base = dataclasses.replace(one.statement, time=int(time.time() * 1000))
        env = one.envelope
        return [
            Envelope(
                demand_payload(dataclasses.replace(base, nonce=new_nonce())),
                env.payload_type,
                env.signatures,
            ).to_bytes()
            for _ in range(n)
        ]

    async with control_channel(address, None, options) as flood_chan:
        flood_stub: Any = serve_pb2_grpc.ServeStub(flood_chan)

        async def flood() -> None:
            nonlocal sent
            size = 256
            while time.monotonic() < until:
                batch = copies(size)
                try:
                    await flood_stub.Demand(serve_pb2.DemandRequest(demands=batch), timeout=30)
                    name = "OK"
                except grpc.aio.AioRpcError as exc:
                    name = exc.code().name
                # Refused for a full memory: top it up one copy at a time from now on.
                size = 1 if name == "RESOURCE_EXHAUSTED" else size
                flood_codes[name] = flood_codes.get(name, 0) + 1
                sent += len(batch)

        async def probe() -> None:
            async with control_channel(address, None, options) as probe_chan:
                stub: Any = serve_pb2_grpc.ServeStub(probe_chan)
                honest = Identity.generate()
                i = 0
                while time.monotonic() < until + 2:
                    obligation: Signed[Obligation] = headed if i % 2 else legacy
                    i += 1
                    demand = build_demand(honest, obligation, now=int(time.time() * 1000))
                    start = time.perf_counter()
                    try:
                        await stub.Demand(
                            serve_pb2.DemandRequest(demands=[demand.to_bytes()]), timeout=10
                        )
                        name = "OK"
                        latencies.append((time.perf_counter() - start) * 1000)
                    except grpc.aio.AioRpcError as exc:
                        name = exc.code().name
                    probe_codes[name] = probe_codes.get(name, 0) + 1
                    await asyncio.sleep(0.05)

        await asyncio.gather(probe(), *(flood() for _ in range(args.flood_tasks)))
    remembered = (await stats()).get("demand_nonces", "not reported")
    print(
        f"nonce flood: {sent} copies in {args.flood_s:.0f} s ({args.flood_tasks} tasks),"
        f" codes {flood_codes}; honest probe codes {probe_codes},"
        f" p50 {_pct(latencies, 0.5):.1f} ms p99 {_pct(latencies, 0.99):.1f} ms;"
        f" nonces remembered at the end: {remembered}",
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replays", type=int, default=128)
    parser.add_argument("--flood-s", type=float, default=20.0)
    parser.add_argument("--flood-tasks", type=int, default=6)
    args = parser.parse_args()
    if args.replays < 1 or args.flood_s <= 0 or args.flood_tasks < 1:
        parser.error("--replays and --flood-tasks must be >= 1, --flood-s > 0")

    work, _operator_id, address, env = one_node_setup("provnet-pools-")
    with pinned_node("pools", work, address, env) as (node, cpu):
        print(f"node on CPU {'any' if cpu is None else cpu}, code at {REPO}", flush=True)
        asyncio.run(_measure(args, address, node.pid, work / "operator.key"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
