"""What carrying a delegation over A2A costs next to provnet's own Deliver.

    .venv/bin/python benchmarks/bench_a2a.py [--rounds 40] [--hops 8]

One process, two agents (each a node with the A2A service on its own gRPC
port, 127.0.0.1): A compacts a fresh value per round (one signed head over
one fold of ``--hops`` hops, made before the clock starts) and delegates it
to B three ways, interleaved round by round so all three meet the same
machine state:

* ``deliver`` — provnet's own ``Deliver.Deliver`` (A's signed call, the value
  with its head and fold proof), then B rehydrates from A;
* ``a2a-grpc`` — an A2A ``SendMessage`` over gRPC with the SDK's client, the
  delivery in a raw part; B admits, rehydrates from A and answers;
* ``a2a-jsonrpc`` — the same over JSON-RPC through ``httpx.ASGITransport``
  (no socket: its latency leaves out the HTTP stack's network half).

B's work is the same in all three (verify the head once, demand the fold
from A over Serve, verify the hops). Bytes are the delegation's request and
answer as the binding carries them: the protobuf messages for gRPC (what
gRPC's message-size options bound; no HTTP/2 framing), the HTTP bodies for
JSON-RPC; the rehydration's own bytes (B ⇄ A over Serve) are the same in
every mode and not counted. Prints one table: bytes, latency p50/p90 and the
ratios to ``deliver``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402
from a2a.types import a2a_pb2  # noqa: E402

from examples.a2a.scenario import compacted_value, start_agent  # noqa: E402
from nodes import wire  # noqa: E402
from nodes.a2a.agent import Decision  # noqa: E402
from nodes.a2a.delegate import Delegate  # noqa: E402
from nodes.a2a.extension import delegation_message  # noqa: E402
from nodes.config import LogFormat  # noqa: E402
from nodes.logging import configure_logging  # noqa: E402
from nodes.messages import Delivery  # noqa: E402

MODES = ("deliver", "a2a-grpc", "a2a-jsonrpc")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run(rounds: int, hops: int) -> dict[str, dict[str, float]]:
    configure_logging(LogFormat.JSON, "error")
    latency: dict[str, list[float]] = {m: [] for m in MODES}
    sizes: dict[str, list[tuple[int, int]]] = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        async with AsyncExitStack() as stack:
            a = await start_agent(stack, root, "a")
            b = await start_agent(stack, root, "b")
            http_sizes: list[int] = []

            async def on_request(request: httpx.Request) -> None:
                http_sizes.append(len(request.content))

            async def on_response(response: httpx.Response) -> None:
                await response.aread()
                http_sizes.append(len(response.content))

            http = httpx.AsyncClient(
                transport=httpx.ASGITransport(app=b.asgi_app()),
                base_url=b.jsonrpc_url,
                event_hooks={"request": [on_request], "response": [on_response]},
            )
            stack.push_async_callback(http.aclose)
            over_grpc = Delegate(b.card, binding="GRPC", trusted_node_id=b.node_id)
            over_http = Delegate(
                b.card, binding="JSONRPC", trusted_node_id=b.node_id, httpx_client=http
            )
            stack.push_async_callback(over_grpc.close)
            stack.push_async_callback(over_http.close)

            async def deliver(value: Delivery) -> tuple[int, int]:
                sent = Delivery(
                    value.value_ref,
                    value.value,
                    (),
                    (),
                    a.node_id,
                    value.fold_proofs,
                    value.heads,
                )
                # signed, as the A2A answer carries it: like for like
                ack, outgoing = await a.node.core.send(b.node.address, sent, 30.0, signed=True)
                report = await b.node.core.rehydrate(value.value_ref)
                if not report.complete:
                    raise SystemExit(f"deliver: rehydration failed: {report.outcomes}")
                return wire.deliver_request_size(outgoing, signed=True), len(
                    wire.deliver_response(ack).SerializeToString()
                )

            async def via_grpc(value: Delivery) -> tuple[int, int]:
                result = await over_grpc.delegate(value, "act")
                if result.decision != Decision.ACTED:
                    raise SystemExit(f"a2a-grpc: {result.text}")
                request = a2a_pb2.SendMessageRequest(
                    message=delegation_message(
                        value, action="act", message_id="0" * 36, text="please act"
                    )
                )
                answer = (
                    a2a_pb2.SendMessageResponse(task=result.task)
                    if result.task is not None
                    else a2a_pb2.SendMessageResponse(message=result.message)
                )
                return request.ByteSize(), answer.ByteSize()

            async def via_jsonrpc(value: Delivery) -> tuple[int, int]:
                http_sizes.clear()
                result = await over_http.delegate(value, "act")
                if result.decision != Decision.ACTED:
                    raise SystemExit(f"a2a-jsonrpc: {result.text}")
                return http_sizes[0], http_sizes[1]

            calls = {"deliver": deliver, "a2a-grpc": via_grpc, "a2a-jsonrpc": via_jsonrpc}
            # One warm-up round per mode (channels, caches of the code paths).
            for i in range(rounds + 1):
                for mode in MODES:
                    value = await compacted_value(a.node, f"r{i}-{mode}", hops)
                    start = time.perf_counter()
                    size = await calls[mode](value)
                    elapsed = time.perf_counter() - start
                    if i > 0:
                        latency[mode].append(elapsed)
                        sizes[mode].append(size)
    out: dict[str, dict[str, float]] = {}
    for mode in MODES:
        out[mode] = {
            "request_bytes": statistics.mean(s[0] for s in sizes[mode]),
            "answer_bytes": statistics.mean(s[1] for s in sizes[mode]),
            "p50_ms": _pct(latency[mode], 0.5) * 1e3,
            "p90_ms": _pct(latency[mode], 0.9) * 1e3,
        }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--hops", type=int, default=8)
    args = parser.parse_args()
    figures = asyncio.run(run(args.rounds, args.hops))
    base = figures["deliver"]
    base_bytes = base["request_bytes"] + base["answer_bytes"]
    print(f"one delegation, {args.hops} folded hops, {args.rounds} rounds per mode (interleaved)")
    print(
        f"{'mode':<12} {'request B':>10} {'answer B':>9} {'total ×':>8}"
        f" {'p50 ms':>8} {'p90 ms':>8} {'p50 ×':>6}"
    )
    for mode, f in figures.items():
        total = f["request_bytes"] + f["answer_bytes"]
        print(
            f"{mode:<12} {f['request_bytes']:>10.0f} {f['answer_bytes']:>9.0f}"
            f" {total / base_bytes:>8.2f} {f['p50_ms']:>8.2f} {f['p90_ms']:>8.2f}"
            f" {f['p50_ms'] / base['p50_ms']:>6.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
