"""Split-view rows: an origin shows two holders two heads; does a witness quorum stop it?

Design revision 3, "Witness-cosigned heads": with n witnesses of which f
collude (cosign anything the origin signed) and holders requiring q
cosignatures, two conflicting heads can both gather a quorum only when
2q <= n + f — an honest witness cosigns one of two heads for one size of a
log, never both.

One row (:func:`run_split_view`) runs real nodes in process over the
in-memory transport (:class:`nodes.transport.InMemoryTransport`): n witness
nodes (``--witness-logs *``; f of them colluding, ``--witness-fault collude``),
two holder nodes whose witness policy requires q of the n, and an origin
node whose key signs **two heads for its first compaction** (two forks of
its log of heads, each folding a different value). The origin gathers
cosignatures for head A from the colluders and the honest witnesses in order
(W1, W2, …) until it has q, and for head B from the colluders and the honest
witnesses in the reverse order — so the two heads go to different witnesses
wherever the numbers allow, and to an honest witness that already cosigned
A only when B cannot reach q otherwise (then the witness refuses it and
keeps ``split_view`` evidence). Each head is delivered, with the
cosignatures it got, to its holder. Last, the heads **meet**: each holder is
delivered the other's head (revision 2 detects a split view then, if the
head is accepted).

A row reports the cosignatures each head gathered, which holders accepted
their head, whether both did (conflicting heads accepted), the evidence
produced (by witnesses, by holders when the heads met), and honest parties
accused (always 0: evidence accuses only the origin). :func:`run_rows` runs
several rows, each in its own directory; the entry point takes no flags, so
the custody experiment and tests call it alike.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from contracts.heads import FoldInput, HeadLog
from contracts.witness import AddCheckpoint, witness_vkey
from nodes.app import load_or_create_identity
from nodes.config import NodeConfig, WitnessFault
from nodes.messages import Delivery
from nodes.services import NodeCore
from nodes.transport import CallFailed, InMemoryTransport, LocalNode

__all__ = [
    "DEFAULT_ROWS",
    "SplitViewRow",
    "bound_holds",
    "policy_text",
    "rows_csv",
    "rows_markdown",
    "run_rows",
    "run_split_view",
]

#: (n, q, f): the issue's rows, then rows where 2q <= n + f (the attack succeeds).
DEFAULT_ROWS: tuple[tuple[int, int, int], ...] = (
    (3, 2, 0),
    (3, 2, 1),
    (4, 3, 1),
    (3, 3, 1),
    (3, 1, 0),
    (4, 2, 0),
    (5, 3, 1),
    (5, 4, 2),
)
_TIMEOUT_S = 5.0
_SERVE_FOR_MS = 3_600_000


def bound_holds(n: int, q: int, f: int) -> bool:
    """Whether a quorum q of n witnesses, f colluding, prevents two conflicting heads."""
    return 2 * q > n + f


@dataclass(frozen=True, slots=True)
class SplitViewRow:
    """One (n, q, f) row's outcome."""

    n: int
    q: int
    f: int
    bound_holds: bool
    cosignatures_a: int
    cosignatures_b: int
    holder_a_accepted: bool
    holder_b_accepted: bool
    #: holders that accepted a head another holder's conflicts with (0 or 2)
    conflicting_accepted: int
    witness_evidence: int
    holder_evidence: int
    honest_accused: int

    def to_json(self) -> dict[str, object]:
        return dataclasses.asdict(self)


def policy_text(witness_ids: Sequence[str], q: int) -> str:
    """A policy: every witness node, one group requiring q of them, the quorum."""
    lines = [f"witness w{i} {witness_vkey(w).to_string()}" for i, w in enumerate(witness_ids, 1)]
    names = " ".join(f"w{i}" for i in range(1, len(witness_ids) + 1))
    lines += [f"group witnesses {q} {names}", "quorum witnesses"]
    return "\n".join(lines) + "\n"


async def _node(
    root: Path, name: str, registry: dict[str, LocalNode], **settings: object
) -> NodeCore:
    config = NodeConfig(name=name, data_dir=root / name, listen=f"{name}.mem:1", **settings)  # type: ignore[arg-type]
    core = await NodeCore.open(
        config,
        load_or_create_identity(config.data_dir),
        transport=InMemoryTransport(registry=registry),
    )
    registry[config.listen] = core
    return core


async def _gather(
    origin: NodeCore, note: bytes, witnesses: Sequence[str], q: int
) -> tuple[bytes, int]:
    """Ask witnesses in order until q cosignatures; the cosigned note and how many."""
    lines: list[bytes] = []
    for address in witnesses:
        if len(lines) >= q:
            break
        old = 0
        for _ in range(2):
            body = AddCheckpoint(old, (), note).to_bytes()
            try:
                reply = await origin.transport.add_checkpoint(address, body, _TIMEOUT_S)  # type: ignore[attr-defined]
            except CallFailed:
                break  # refused (an honest witness that cosigned the other head)
            if not reply.conflict:
                lines.append(reply.cosignatures)
                break
            old = reply.size
    return note + b"".join(lines), len(lines)


async def _deliver(origin: NodeCore, holder: NodeCore, ref: str, proof: bytes, note: bytes) -> bool:
    delivery = Delivery(ref, ref.encode(), (), (), origin.node_id, (proof,), (note,))
    try:
        await origin.transport.deliver(holder.config.listen, delivery, _TIMEOUT_S)
    except CallFailed:
        return False
    return True


async def _split_view_count(core: NodeCore) -> int:
    return len(await core.store.evidence(kind="split_view"))


async def run_split_view(n: int, q: int, f: int, *, root: Path) -> SplitViewRow:
    """One row on fresh in-process nodes under ``root`` (see the module docstring)."""
    if not (0 <= f <= n and 1 <= q <= n):
        raise ValueError(f"need 0 <= f <= n and 1 <= q <= n, got n={n} q={q} f={f}")
    registry: dict[str, LocalNode] = {}
    nodes: list[NodeCore] = []
    try:
        witnesses = [
            await _node(
                root,
                f"w{i}",
                registry,
                witness_logs="*",
                witness_fault=WitnessFault.COLLUDE if i < f else WitnessFault.NONE,
            )
            for i in range(n)
        ]
        nodes += witnesses
        policy = root / "policy.txt"
        policy.parent.mkdir(parents=True, exist_ok=True)
        policy.write_text(policy_text([w.node_id for w in witnesses], q))
        holders = [
            await _node(root, name, registry, witness_policy=policy) for name in ("ha", "hb")
        ]
        nodes += holders
        origin = await _node(root, "origin", registry)
        nodes.append(origin)
        # (1) two forks of the origin's log of heads: compaction 0 twice
        now = origin.now_ms()
        forks: list[tuple[bytes, bytes]] = []
        for i, ref in enumerate(("value-a", "value-b")):
            log = HeadLog(origin.identity, origin.store.epoch)
            compaction = log.compact(
                [FoldInput(ref, 0, [json.dumps({"step": i, "fork": ref}).encode()])],
                serve_until=now + _SERVE_FOR_MS,
                deadline_ms=2_000,
                endpoints=(origin.config.listen,),
                issued_at=now,
            )
            forks.append((compaction.head.note, compaction.proofs[ref].to_bytes()))
        (head_a, proof_a), (head_b, proof_b) = forks
        # (2) each head to its own witnesses: colluders first, honest ones from either end
        colluders = [w.config.listen for w in witnesses[:f]]
        honest = [w.config.listen for w in witnesses[f:]]
        note_a, cos_a = await _gather(origin, head_a, colluders + honest, q)
        note_b, cos_b = await _gather(origin, head_b, colluders + honest[::-1], q)
        # (3) each holder is shown its head
        ha, hb = holders
        accepted_a = await _deliver(origin, ha, "value-a", proof_a, note_a)
        accepted_b = await _deliver(origin, hb, "value-b", proof_b, note_b)
        # (4) the heads meet: each holder is shown the other's
        await _deliver(origin, ha, "value-b", proof_b, note_b)
        await _deliver(origin, hb, "value-a", proof_a, note_a)
        witness_evidence = sum([await _split_view_count(w) for w in witnesses[f:]])
        holder_evidence = sum([await _split_view_count(h) for h in holders])
        honest_ids = {c.node_id for c in nodes if c is not origin and c not in witnesses[:f]}
        accused = 0
        for core in nodes:
            for record in await core.store.evidence():
                accused += record.accused in honest_ids
        return SplitViewRow(
            n=n,
            q=q,
            f=f,
            bound_holds=bound_holds(n, q, f),
            cosignatures_a=cos_a,
            cosignatures_b=cos_b,
            holder_a_accepted=accepted_a,
            holder_b_accepted=accepted_b,
            conflicting_accepted=2 if accepted_a and accepted_b else 0,
            witness_evidence=witness_evidence,
            holder_evidence=holder_evidence,
            honest_accused=accused,
        )
    finally:
        for core in nodes:
            await core.close()


async def run_rows(
    rows: Sequence[tuple[int, int, int]] = DEFAULT_ROWS, *, root: Path
) -> list[SplitViewRow]:
    """Every row, each on its own nodes under ``root/n<n>-q<q>-f<f>``."""
    return [await run_split_view(n, q, f, root=root / f"n{n}-q{q}-f{f}") for n, q, f in rows]


def rows_markdown(rows: Sequence[SplitViewRow]) -> str:
    """The rows as a Markdown table (docs/custody.md, "Witness-cosigned heads")."""
    head = (
        "| n | q | f | 2q > n+f | cosignatures A / B | holders accepting | conflicting heads"
        " accepted | split_view evidence (witnesses / holders) | honest accused |\n"
        "|---|---|---|---|---|---|---|---|---|\n"
    )
    body = "".join(
        f"| {r.n} | {r.q} | {r.f} | {'yes' if r.bound_holds else 'no'}"
        f" | {r.cosignatures_a} / {r.cosignatures_b}"
        f" | {int(r.holder_a_accepted) + int(r.holder_b_accepted)} of 2"
        f" | {r.conflicting_accepted} | {r.witness_evidence} / {r.holder_evidence}"
        f" | {r.honest_accused} |\n"
        for r in rows
    )
    return head + body


def rows_csv(rows: Sequence[SplitViewRow]) -> str:
    """The rows as CSV, one column per :class:`SplitViewRow` field, in field order."""
    out = io.StringIO()
    names = [f.name for f in dataclasses.fields(SplitViewRow)]
    writer = csv.DictWriter(out, fieldnames=names, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow(row.to_json())
    return out.getvalue()
