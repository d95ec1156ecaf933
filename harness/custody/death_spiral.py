"""The death-spiral row: after the origin is gone, is reconstruction restored?

Part 6's way out of the death spiral is an attestation (docs/attest.md): the
holder rehydrates every fold of a value in full, verifies it, and shows the
receipts to an attester; the attester signs ``reconstruction ≥ 1.0`` citing
them; the holder's trust policy decides whether that word counts, and only
then does the axis go up (A1, :func:`contracts.attest.apply_attestations`).
When the origin has departed for good, the full rehydration needs the hops
from someone else: the value's custodians.

One row per ``k``, on real in-process nodes over the in-memory transport:

1. an origin ``o`` commits a fold of 12 hops with ``k`` custodians taking
   custody, and delivers the value to a holder ``h``;
2. the value is in the death spiral: its reconstruction (0.3) is below the
   policy's ``restore_below`` and the reconstruction-coupled gates block on
   it (blind mode, as after the hop);
3. the origin departs for good (closed, off the network, data directory
   removed);
4. ``h`` restores (``Attest.Restore``, the path of Part 6): a full verified
   rehydration from the value's custodians in statement order (the next one
   when one fails), else — at ``k`` = 0 — from the origin's fold, and the
   request to the attester node ``attester``;
5. every attestation that comes back goes through ``apply_attestations``
   under the attest experiment's default trust policy (``attester`` may raise
   reconstruction to 1.0), and the gates decide again on the raised view;
6. the accepted attestation is written as a bundle file and checked with
   ``provnet attest verify`` — under that policy (it must be VALID) and under
   the default verify policy, which trusts no attester (it must be INVALID:
   the raise is on the attester's authority, not the file's).
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from contracts.attest import apply_attestations, restoration_digest
from contracts.statements import Axis
from harness.attest.bundle import AttestationBundle, BundleFile, HeldFoldBytes
from harness.attest.policy import AttestPolicy
from harness.custody.trials import _fields, _make_hops
from harness.events import AXES
from harness.gates import GATES, GateClass, GateView, Mode, evaluate
from harness.lineage import FoldedPrefix
from nodes.app import load_or_create_identity
from nodes.attester import AttestationAsk, FoldBytes, RestoreResult
from nodes.config import NodeConfig, Peer
from nodes.services import NodeCore
from nodes.transport import InMemoryTransport, LocalNode

__all__ = ["DeathSpiralRow", "play_death_spiral"]

_REF = "death-spiral/v0"
#: The value's reconstruction when it needs restoring: decayed past every
#: reconstruction-coupled gate's threshold, as in the death spiral.
_DECAYED = 0.3
_ATTESTER = "attester"
_RECON_GATES = tuple(g for g in GATES if g.gate_class is GateClass.RECONSTRUCTION)
_AXES = tuple(Axis(a) for a in AXES)


@dataclass(frozen=True, slots=True)
class DeathSpiralRow:
    k: int
    #: the holder verified the whole fold (from whichever party served)
    rehydrated: bool
    #: who served it: ``custodian 2 of 3``, ``origin``, or ``nobody``
    served_by: str
    #: attestations the attester issued
    issued: int
    #: reconstruction of the holder's view before and after the policy applied them
    reconstruction_before: float
    reconstruction_after: float
    #: reconstruction-coupled gates blocking before and after (of ``gates``)
    blocking_before: int
    blocking_after: int
    gates: int
    #: ``provnet attest verify`` exit codes: under the attest policy, and under the
    #: default verify policy (no attester trusted); -1 when there was nothing to verify
    verify_exit: int
    verify_untrusted_exit: int
    #: the verdict line under the attest policy, or why nothing was verified
    detail: str
    #: the accepted attestation as a bundle file (empty without one)
    bundle: bytes = b""


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


def _blocking(view: GateView) -> int:
    return sum(not evaluate(g, view, Mode.BLIND, None).proceed for g in _RECON_GATES)


def _verify(bundle: Path, policy: Path | None, attester_id: str) -> tuple[int, str]:
    """``provnet attest verify`` on ``bundle``, parsed and handled as the command line
    does (exit code, first line printed; 2 for a usage error)."""
    import argparse

    from harness.attest.cli import register
    from harness.cli_errors import UsageError

    parser = argparse.ArgumentParser(prog="provnet")
    register(parser.add_subparsers(dest="command"))
    argv = ["attest", "verify", str(bundle)]
    if policy is not None:
        argv += ["--policy", str(policy), "--node", f"{_ATTESTER}={attester_id}"]
    args = parser.parse_args(argv)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            rc = int(args.handler(args))
    except UsageError as exc:
        return 2, str(exc)
    return rc, (out.getvalue().splitlines() or [""])[0]


async def _row(k: int, root: Path) -> DeathSpiralRow:
    registry: dict[str, LocalNode] = {}
    nodes: list[NodeCore] = []
    try:
        names = tuple(f"c{i + 1}" for i in range(k))
        for i, name in enumerate(names):
            nodes.append(await _node(root, name, registry, ("o",), operator=f"op-{i + 1}"))
        attester = await _node(root, _ATTESTER, registry, names)
        nodes.append(attester)
        holder = await _node(root, "h", registry, ("o", *names, _ATTESTER))
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
        folded = FoldedPrefix(len(hops), (), 0, tuple(h.hop_id for h in hops))
        scores = {a: 1.0 for a in _AXES} | {Axis.RECONSTRUCTION: _DECAYED}
        before = GateView([scores[a] for a in _AXES], frozenset(), (), folded, True)
        policy = AttestPolicy()
        resolved = policy.resolve({_ATTESTER: attester.identity.node_id})
        lifetime_ms = policy.lifetime_steps * 1000
        digests = tuple(f.commitment.digest for f in held.folds)
        # the custodians' stand-ins in statement order, else (k = 0) the origin's fold
        sources = [
            (f"custodian {i + 1} of {len(held.custody)}", c) for i, c in enumerate(held.custody)
        ] or [("origin", held.folds[0])]
        result = RestoreResult(detail="no party to restore from")
        served_by = "nobody"
        for label, source in sources:
            fold = FoldBytes(source.commitment_bytes, source.obligation_bytes, under_head=True)
            ask = AttestationAsk(_REF, digests, (), True, 0, lifetime_ms)
            result = await holder.restore(ask, [fold], _ATTESTER)
            if result.rehydrated:
                served_by = label
                break
        issued = result.answer.issued if result.answer is not None else ()
        now = holder.ctx.now_ms()
        value_digest = restoration_digest(_REF, digests)
        bundle = b""
        for item in issued:
            out = apply_attestations(
                scores,
                [item.attestation],
                value_digest=value_digest,
                policy=resolved.trust,
                now=now,
                rehydrations=item.proofs,
                value_commitments=digests,
            )
            if out.applied and not bundle:
                scores = dict(out.scores)
                folds = tuple(
                    HeldFoldBytes(f.commitment_bytes, f.obligation_bytes if f.fold else None)
                    for f in held.folds
                )
                bundle = BundleFile(
                    AttestationBundle(item.attestation, item.proofs),
                    _REF,
                    folds,
                    resolved.trust,
                    now,
                ).to_bytes()
        after = GateView([scores[a] for a in _AXES], frozenset(), (), folded, True)
        verify_exit = untrusted_exit = -1
        detail = result.detail or "rehydrated; the attester issued nothing"
        if bundle:
            path = root / "attestation.json"
            path.write_bytes(bundle)
            policy_file = root / "attest-policy.yaml"
            policy_file.write_text(json.dumps(policy.to_json(), indent=1), encoding="utf-8")
            verify_exit, detail = _verify(path, policy_file, attester.identity.node_id)
            detail = detail.replace(str(policy_file), policy_file.name)
            untrusted_exit, _ = _verify(path, None, attester.identity.node_id)
        return DeathSpiralRow(
            k,
            result.rehydrated,
            served_by,
            len(issued),
            before.scores[_AXES.index(Axis.RECONSTRUCTION)],
            scores[Axis.RECONSTRUCTION],
            _blocking(before),
            _blocking(after),
            len(_RECON_GATES),
            verify_exit,
            untrusted_exit,
            detail,
            bundle,
        )
    finally:
        for core in reversed(nodes):
            await core.close()


async def play_death_spiral(
    ks: tuple[int, ...] = (0, 1), *, root: Path | None = None
) -> list[DeathSpiralRow]:
    """One row per ``k`` (module docstring), each on its own nodes."""
    with tempfile.TemporaryDirectory(prefix="provnet-death-spiral-", dir=root) as tmp:
        rows = []
        for k in ks:
            (Path(tmp) / f"k{k}").mkdir()
            rows.append(await _row(k, Path(tmp) / f"k{k}"))
        return rows
