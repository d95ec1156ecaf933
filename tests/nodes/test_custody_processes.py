"""Custody over real gRPC (docs/custody.md): the origin's signed ``Custody.Take``
call to a custodian that pins it, the custodian's fetch back from the origin, the
holder's fallback after the origin is gone — on gRPC servers in this process
(default run), and on three ``provnet node`` processes (``-m long``)."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from contracts.custody import open_custody
from nodes.app import load_or_create_identity, start_node
from nodes.cluster import HealthState, child_env, free_ports, probe_health, provnet_argv
from nodes.config import NodeConfig, Peer
from nodes.control import NodeClient
from nodes.custody_store import custody_counts
from nodes.messages import Outcome
from nodes.transport import CallFailed, GrpcTransport
from tests.nodes.rpc_support import TEST_OPERATOR, hop_json

REPO = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def _nodes(
    root: Path, specs: dict[str, dict[str, str]]
) -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    """Start every node at once (their addresses are in ``PROVNET_LISTEN``), wait
    until all are SERVING, stop them all after (SIGTERM, then kill)."""
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for name, env_extra in specs.items():
            env = child_env()
            env.update(PROVNET_SHUTDOWN_GRACE_S="1", **env_extra)
            argv = provnet_argv("node", "--name", name, "--data-dir", str(root / name))
            with (root / f"{name}.log").open("ab") as out:
                procs[name] = subprocess.Popen(
                    argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO
                )
        give_up = time.monotonic() + 60
        for name, proc in procs.items():
            address = specs[name]["PROVNET_LISTEN"]
            while probe_health(address, timeout=0.5) is not HealthState.SERVING:
                if proc.poll() is not None or time.monotonic() > give_up:
                    pytest.fail(
                        f"{name} did not start: {(root / f'{name}.log').read_text()[-2000:]}"
                    )
                time.sleep(0.05)
        yield procs
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


@pytest.mark.long  # three node processes: too slow for the default run
async def test_c4_custody_over_grpc_processes_survives_the_origin_process(
    tmp_path: Path,
) -> None:
    names = ("o", "c1", "h")
    ports = free_ports(len(names))
    addr = {n: f"127.0.0.1:{p}" for n, p in zip(names, ports, strict=True)}
    ids = {n: load_or_create_identity(tmp_path / n).node_id for n in names}

    def peers(*who: str) -> str:
        return ";".join(f"{w}={addr[w]},{ids[w]}" for w in who)

    common = {"PROVNET_OPERATOR_KEYS": TEST_OPERATOR.key_id, "PROVNET_DEADLINE_MS": "500"}
    specs = {
        "o": {
            **common,
            "PROVNET_LISTEN": addr["o"],
            "PROVNET_PEERS": peers("c1", "h"),
            "PROVNET_CUSTODIANS": "c1",
            "PROVNET_CUSTODY_K": "1",
            "PROVNET_OPERATOR": "op-o",
        },
        "c1": {
            **common,
            "PROVNET_LISTEN": addr["c1"],
            "PROVNET_PEERS": peers("o"),
            "PROVNET_OPERATOR": "op-a",
        },
        # no peers: no witnesses to wait for; no re-ask: one ask, then the custodian
        "h": {**common, "PROVNET_LISTEN": addr["h"], "PROVNET_REASKS": "0"},
    }
    with _nodes(tmp_path, specs) as procs:
        async with NodeClient(addr["o"], TEST_OPERATOR) as origin:
            seqs = await origin.append([hop_json(1 + i) for i in range(4)])
            committed = await origin.commit_compaction([("v", seqs, b"payload")])
            assert len(committed.custody) == 1
            assert open_custody(committed.custody[0]).statement.custodian == ids["c1"]
            await origin.forward("v", "h")
        procs["o"].send_signal(signal.SIGTERM)  # the origin leaves for good
        procs["o"].wait(timeout=10)
        async with NodeClient(addr["h"], TEST_OPERATOR, timeout=30) as holder:
            report = await holder.rehydrate("v")
        assert report.complete, report
        assert [o.outcome for o in report.outcomes] == [Outcome.UNANSWERED]
        assert [(o.origin, o.outcome) for o in report.parties] == [(ids["c1"], Outcome.SERVED)]
        assert len(report.hops) == 4


async def test_c4_custody_over_grpc_servers_and_a_stranger_cannot_make_a_node_take_custody(
    tmp_path: Path,
) -> None:
    names = ("o", "c1", "h", "x")
    addr = {n: f"127.0.0.1:{p}" for n, p in zip(names, free_ports(len(names)), strict=True)}
    ids = {n: load_or_create_identity(tmp_path / n).node_id for n in names}

    def config(name: str, **extra: object) -> NodeConfig:
        return NodeConfig(
            name=name,
            data_dir=tmp_path / name,
            listen=addr[name],
            deadline_ms=500,
            reasks=0,
            operator_keys=(TEST_OPERATOR.key_id,),
            **extra,  # type: ignore[arg-type]
        )

    def pinned(*who: str) -> tuple[Peer, ...]:
        return tuple(Peer(w, addr[w], ids[w]) for w in who)

    running = [
        await start_node(
            config("c1", peers=pinned("o"), operator="op-a"), transport=GrpcTransport()
        ),
        await start_node(config("h"), transport=GrpcTransport()),
        await start_node(
            config("x", peers=pinned("c1"), custodians=("c1",), custody_k=1),
            transport=GrpcTransport(),
        ),
        await start_node(
            config("o", peers=pinned("c1", "h"), custodians=("c1",), custody_k=1),
            transport=GrpcTransport(),
        ),
    ]
    try:
        o, x = running[3], running[2]
        _, seqs = await o.core.append([hop_json(1 + i) for i in range(4)])
        committed = await o.core.commit_compaction([("v", list(seqs), b"payload")])
        assert len(committed.custody) == 1
        await o.core.forward("v", "h")
        # a node c1 does not pin asks it to take custody of its folds: refused, nothing held
        _, xs = await x.core.append([hop_json(50)])
        refused = await x.core.commit_compaction([("w", list(xs), b"w")])
        assert refused.custody == ()
        transport = x.core.transport
        assert isinstance(transport, GrpcTransport)
        with pytest.raises(CallFailed, match="pinned peer") as failed:
            await transport.take_custody(addr["c1"], refused.head, refused.fold_proofs, 10.0)
        assert failed.value.code == "INVALID_ARGUMENT"
        assert (await custody_counts(running[0].core.store))["custody_statements"] == 1
        await o.stop(0.2)  # the origin leaves
        running.remove(o)
        report = await running[1].core.rehydrate("v")
        assert report.complete
        assert [(p.origin, p.outcome) for p in report.parties] == [(ids["c1"], Outcome.SERVED)]
    finally:
        for node in running:
            await node.stop(0.2)
