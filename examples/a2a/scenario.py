"""Three agents over A2A: A's memory compacts, B gates an irreversible action, C is next.

Each run starts fresh agents (each a provnet node with the A2A service on its
own gRPC port) in a directory of its own:

* **faithful** — A compacts its lineage (one signed head), delegates
  "wire-transfer" to B with the compacted value; B rehydrates the folded hops
  from A, verifies them against A's head, acts, and forwards the value to C,
  which demands the hops from A (the duty travels with the value), verifies,
  and acts;
* **tamper** — A serves the hops with a flipped byte: B refuses and keeps
  ``bad_data`` evidence naming A (a signed receipt whose bytes miss the root);
* **gone** — A stops answering as soon as a demand arrives: B refuses and
  keeps an ``unanswered`` record naming A (a suspicion, not a proof).

The A2A binding is JSON-RPC through ``httpx.ASGITransport`` (no socket) or
gRPC on 127.0.0.1; rehydration is provnet's Serve service on A's port either way.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import httpx

from contracts.evidence import verify_evidence
from nodes.a2a.agent import ProvnetAgent
from nodes.a2a.delegate import Delegate, DelegationResult
from nodes.app import RunningNode
from nodes.config import NodeConfig, Peer
from nodes.faults import FaultMode, FaultPlan
from nodes.messages import Delivery

__all__ = ["Run", "Scenario", "compacted_value", "delegate_to", "run_scenario", "start_agent"]

ACTION = "wire-transfer"
#: A fold small enough to read, large enough to be a real compaction.
HOPS = 8


class Scenario(StrEnum):
    FAITHFUL = "faithful"
    TAMPER = "tamper"
    GONE = "gone"


@dataclass(frozen=True, slots=True)
class Run:
    scenario: Scenario
    binding: str
    origin: str
    b: DelegationResult
    evidence_files: tuple[Path, ...]
    #: Serve calls A answered or was sent (B's and, after a forward, C's demands).
    origin_demand_rpcs: int = 0

    def lines(self) -> list[str]:
        out = [f"[{self.scenario} over {self.binding}] A={self.origin[:12]}…"]
        out.append(f"  B {self.b.decision}: {self.b.reason}")
        if self.b.forwarded:
            out.append(f"  B then {self.b.forwarded}")
        for path in self.evidence_files:
            verdict = verify_evidence(path.read_bytes(), now=int(time.time() * 1000))
            out.append(
                f"  B kept evidence {path.name}: {verdict.kind} against"
                f" {verdict.accused[:12]}… ({verdict.level}, {verdict.status}): {verdict.reason}"
            )
        return out


def _hop(step: int) -> bytes:
    return json.dumps(
        {
            "hop_id": f"h{step:06d}",
            "step": step,
            "op": "TOOL_CALL" if step % 3 else "WEB_READ",
            "axis_deltas": {"freshness": 0.9},
            "taints_added": ["untrusted-web"] if step % 3 == 0 else [],
            "parent_hop_ids": [f"h{step - 1:06d}"] if step > 1 else [],
        }
    ).encode()


async def compacted_value(node: RunningNode, value_ref: str, hops: int = HOPS) -> Delivery:
    """A's memory compacts: hops appended, then folded under one signed head."""
    core = node.core
    _, seqs = await core.append([_hop(1 + i) for i in range(hops)])
    value = json.dumps({"summary": f"{hops} hops folded", "taint_count": hops // 3}).encode()
    out = await core.commit_compaction([(value_ref, list(seqs), value)])
    return Delivery(value_ref, value, (), (), "", out.fold_proofs, (out.head,))


def _config(
    root: Path, name: str, fault: FaultMode, peers: tuple[Peer, ...] = (), **extra: Any
) -> NodeConfig:
    # reasks 0 and a short deadline keep the "gone" run short; still signed
    # re-asks behind every failed unsigned demand (nodes.client).
    return NodeConfig(
        name=name,
        data_dir=root / name,
        listen="127.0.0.1:0",
        fault=fault,
        deadline_ms=300,
        reasks=0,
        reap_interval_s=0,
        peers=peers,
        **extra,
    )


async def start_agent(
    stack: AsyncExitStack,
    root: Path,
    name: str,
    fault: FaultMode = FaultMode.NONE,
    witnesses: tuple[ProvnetAgent, ...] = (),
    *,
    required: bool = True,
    **config: Any,
) -> ProvnetAgent:
    """Start agent ``name`` (its node and A2A service); ``stack`` stops it."""
    crashed: list[ProvnetAgent] = []

    def crash() -> None:
        # An in-process agent cannot exit: it stops answering, as a dead box would.
        crashed[0].node.core.crashed = True

    agent = await ProvnetAgent.start(
        _config(
            root,
            name,
            fault,
            tuple(Peer(w.node.config.name, w.node.address, w.node_id) for w in witnesses),
            **config,
        ),
        jsonrpc_url=f"http://{name}.agent/",
        fault=FaultPlan(fault, 0, crash=crash),
        required=required,
    )
    crashed.append(agent)
    stack.push_async_callback(agent.stop)
    return agent


@asynccontextmanager
async def delegate_to(agent: ProvnetAgent, binding: str, **options: Any) -> AsyncIterator[Delegate]:
    """A :class:`Delegate` to ``agent`` over ``binding`` (JSON-RPC: through ASGI, no socket)."""
    http = (
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=agent.asgi_app()), base_url=agent.jsonrpc_url
        )
        if binding == "JSONRPC"
        else None
    )
    delegate = Delegate(
        agent.card, binding=binding, trusted_node_id=agent.node_id, httpx_client=http, **options
    )
    try:
        yield delegate
    finally:
        await delegate.close()
        if http is not None:
            await http.aclose()


async def run_scenario(root: Path, scenario: Scenario, binding: str = "JSONRPC") -> Run:
    """Play one scenario in ``root`` (emptied first) and return what B answered."""
    shutil.rmtree(root, ignore_errors=True)
    fault = {
        Scenario.FAITHFUL: FaultMode.NONE,
        Scenario.TAMPER: FaultMode.TAMPER,
        Scenario.GONE: FaultMode.CRASH,
    }[scenario]
    async with AsyncExitStack() as stack:
        a = await start_agent(stack, root, "a", fault)
        c = await start_agent(stack, root, "c")
        # C is also B's witness: when A does not answer B, C re-asks A (design, S4).
        b = await start_agent(stack, root, "b", witnesses=(c,))
        to_b = await stack.enter_async_context(delegate_to(b, binding))
        to_c = await stack.enter_async_context(delegate_to(c, binding))
        b.connect("c", to_c.delegate)
        value = await compacted_value(a.node, f"plan-{scenario}")
        result = await to_b.delegate(value, ACTION, forward_to="c")
        evidence = tuple(sorted(b.node.config.evidence_path.glob("*.json")))
        counts = await a.node.core.stats()
        # signed demands, streamed demands and unsigned asks (calls on Serve.Ask streams)
        demands = (
            counts.get("rpc_Demand", 0)
            + counts.get("rpc_DemandStream", 0)
            + counts.get("open_asks", 0)
        )
        return Run(scenario, binding, a.node_id, result, evidence, demands)
