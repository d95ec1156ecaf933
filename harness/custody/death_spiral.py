"""The death-spiral row: after the origin is gone, is reconstruction restored?

Part 6's way out of the death spiral is an attestation, and an attester signs
reconstruction only over a full verified rehydration (docs/attest.md). When
the origin has departed for good that needs the hops from someone else. One
row, on real in-process nodes over the in-memory transport: an origin ``o``
commits a fold with ``k`` custodians taking custody, delivers the value to a
holder ``h``, and departs for good (closed, off the network, data directory
removed); ``h`` then asks an attester ``a`` to restore the value's
reconstruction (``Attest.Restore``), from the custodian's fold when the value
carries one (``HeldValue.custody``), else from the origin's.
"""

from __future__ import annotations

import json
import random
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from contracts.attest import verify_rehydration
from contracts.errors import ContractError
from harness.custody.trials import _fields, _make_hops
from nodes.app import load_or_create_identity
from nodes.attester import AttestationAsk, FoldBytes
from nodes.config import NodeConfig, Peer
from nodes.services import NodeCore
from nodes.transport import InMemoryTransport, LocalNode

__all__ = ["DeathSpiralRow", "play_death_spiral"]

_REF = "death-spiral/v0"


@dataclass(frozen=True, slots=True)
class DeathSpiralRow:
    k: int
    #: the holder verified the whole fold (from whichever party served)
    rehydrated: bool
    #: attestations the attester issued
    issued: int
    #: the issued proof verifies standalone and names the origin's fold exactly
    proof_ok: bool
    detail: str


def _address(name: str) -> str:
    return f"{name}.mem:1"


async def _node(
    root: Path,
    name: str,
    registry: dict[str, LocalNode],
    peers: tuple[str, ...],
    **settings: object,
) -> NodeCore:
    config = NodeConfig(
        name=name,
        data_dir=root / name,
        listen=_address(name),
        deadline_ms=250,
        reasks=0,
        peers=tuple(Peer(p, _address(p)) for p in peers),
        **settings,  # type: ignore[arg-type]
    )
    core = await NodeCore.open(
        config,
        load_or_create_identity(config.data_dir),
        transport=InMemoryTransport(registry=registry),
    )
    registry[config.listen] = core
    return core


async def _row(k: int, root: Path) -> DeathSpiralRow:
    registry: dict[str, LocalNode] = {}
    nodes: list[NodeCore] = []
    try:
        names = tuple(f"c{i + 1}" for i in range(k))
        for i, name in enumerate(names):
            nodes.append(await _node(root, name, registry, ("o",), operator=f"op-{i + 1}"))
        attester = await _node(root, "a", registry, names)
        nodes.append(attester)
        holder = await _node(root, "h", registry, ("o", *names, "a"))
        nodes.append(holder)
        origin = await _node(
            root,
            "o",
            registry,
            ("h", *names),
            custodians=names,
            custody_k=k,
            operator="op-o",
        )
        hops = _make_hops(random.Random(k), 12)
        _, seqs = await origin.append(
            [json.dumps(_fields(h)).encode("utf-8") for h in hops], [h.step for h in hops]
        )
        await origin.commit_compaction([(_REF, list(seqs), b"value:" + _REF.encode())])
        await origin.forward(_REF, "h")
        # the origin departs for good
        registry.pop(origin.config.listen, None)
        await origin.close()
        shutil.rmtree(origin.config.data_dir)
        held = holder.held(_REF)
        source = held.custody[0] if held.custody else held.folds[0]
        fold = FoldBytes(source.commitment_bytes, source.obligation_bytes, under_head=True)
        result = await holder.restore(AttestationAsk(_REF, (), (), True, 0, 600_000), [fold], "a")
        issued = result.answer.issued if result.answer is not None else ()
        proof_ok = False
        if issued:
            try:
                (proof,) = issued[0].proofs
                digest, _ = verify_rehydration(proof)
                proof_ok = digest == held.folds[0].commitment.digest
            except (ContractError, ValueError):
                proof_ok = False
        return DeathSpiralRow(k, result.rehydrated, len(issued), proof_ok, result.detail)
    finally:
        for core in reversed(nodes):
            await core.close()


async def play_death_spiral(
    ks: tuple[int, ...] = (0, 1), *, root: Path | None = None
) -> list[DeathSpiralRow]:
    """One row per ``k``: without custodians the restoration cannot rehydrate; with
    one, the custodian's hops make it (each row on its own nodes)."""
    with tempfile.TemporaryDirectory(prefix="provnet-death-spiral-", dir=root) as tmp:
        return [await _row(k, Path(tmp) / f"k{k}") for k in ks]
