"""The holder's side of ``Attest.Restore``: full verified rehydration, then
``Attest.Request`` to the attester (:mod:`nodes.attester` has the attester).

Given a value's folds, demand every leaf of every fold (one ``Serve.Demand``
per origin), verify each answer into a :class:`contracts.attest.RehydrationProof`
(per-fold, or under a signed head), and ask the attester over the transport.
What comes back is returned unjudged: whether it may raise an axis is the
trust policy's call, made where it is used.
"""

from __future__ import annotations

from collections.abc import Sequence

from contracts.attest import RehydrationProof, verify_rehydration
from contracts.envelope import Envelope
from contracts.errors import ContractError
from contracts.heads import FoldProof
from contracts.identity import Identity
from contracts.serve import build_demand
from contracts.signed import Signed
from contracts.statements import Commitment, Obligation
from nodes.attester import (
    MAX_PROOFS,
    AttestationAsk,
    AttestCarrier,
    FoldBytes,
    RestoreResult,
)
from nodes.errors import MalformedRequest, RequestTooLarge
from nodes.messages import Answer
from nodes.transport import CallFailed, Transport

__all__ = ["restore"]

_Opened = tuple[FoldBytes, Signed[Commitment], Signed[Obligation], FoldProof | None]


async def restore(
    identity: Identity,
    transport: Transport,
    *,
    now_ms: int,
    folds: Sequence[FoldBytes],
    ask: AttestationAsk,
    attester: str,
    timeout: float,
) -> RestoreResult:
    """Holder side (module docstring): full verified rehydration, then ``Attest.Request``.

    ``ask`` gives the binding and times; its commitments and proofs are
    filled in here from ``folds``.
    """
    if not folds:
        raise MalformedRequest("restore: no folds given")
    if len(folds) > MAX_PROOFS:
        raise RequestTooLarge(f"restore: more than {MAX_PROOFS} folds")
    if not isinstance(transport, AttestCarrier):
        raise MalformedRequest("restore: this node's transport does not carry Attest.Request")
    opened = []
    for f in folds:
        try:
            opened.append((f, *f.statements()))
        except ContractError as exc:
            raise MalformedRequest(f"restore: a fold does not verify: {exc}") from exc
    by_origin: dict[str, list[_Opened]] = {}
    for item in opened:
        by_origin.setdefault(item[1].statement.origin, []).append(item)
    proofs: list[RehydrationProof] = []
    rpcs = hops = 0
    for group in by_origin.values():
        demands = [build_demand(identity, o, now=now_ms) for _, _, o, _ in group]
        terms = group[0][2].statement
        try:
            answers: list[Answer] = await transport.demand(
                terms.endpoints[0],
                [d.to_bytes() for d in demands],
                max(o.statement.deadline_ms for _, _, o, _ in group) / 1000.0,
            )
        except CallFailed as exc:
            return RestoreResult(detail=f"demand: {exc}", demand_rpcs=rpcs + 1)
        rpcs += 1
        if len(answers) != len(group):
            return RestoreResult(
                detail="origin answered another number of demands", demand_rpcs=rpcs
            )
        for (f, _, _, fold), d, answer in zip(group, demands, answers, strict=True):
            try:
                receipt = Envelope.from_bytes(answer.receipt)
                proof = (
                    RehydrationProof(
                        Envelope.from_bytes(f.commitment),
                        Envelope.from_bytes(f.obligation),
                        d.envelope,
                        receipt,
                        answer.hops,
                    )
                    if fold is None
                    else RehydrationProof.under_head(
                        head=f.obligation,
                        fold=fold,
                        demand=d,
                        receipt=receipt,
                        hops=answer.hops,
                    )
                )
                verify_rehydration(proof)
            except ContractError as exc:
                return RestoreResult(detail=f"rehydration does not verify: {exc}", demand_rpcs=rpcs)
            hops += len(answer.hops)
            proofs.append(proof)
    full = AttestationAsk(
        ask.value_ref,
        tuple(c.digest for _, c, _, _ in opened),
        tuple(proofs),
        True,
        ask.issued_at,
        ask.lifetime_ms,
    )
    try:
        got = await transport.request_attestation(attester, full, timeout)
    except CallFailed as exc:
        return RestoreResult(
            rehydrated=True, detail=f"attester: {exc}", demand_rpcs=rpcs, hops=hops
        )
    return RestoreResult(
        got,
        True,
        got.refused,
        rpcs,
        hops,
        sum(p.size for p in proofs),
        got.size,
    )
