"""The attester node: what it signs for each row, and its own log of what it signed.

An :class:`AttesterNode` is a provnet node (its own key, its own SQLite hop
log) in the run's topology. The holder asks it for a ``reconstruction``
attestation with the proofs of a full verified rehydration
(:meth:`AttesterNode.request`); an honest attester checks every proof with
:func:`contracts.attest.verify_rehydration` and that they cover every
commitment of the value, then signs floor 1.0 citing exactly those
receipts. The adversarial rows (:mod:`harness.attest.rows`) sign what their
row says instead. Two rows attest unasked on every decision
(:meth:`AttesterNode.unsolicited`): ``taint_discharge`` and ``dishonest``.

A6: every attestation it signs becomes a hop in its own log —
:func:`contracts.attest.attestation_hop_fields`, appended, then committed
as a fold with a signed commitment and serving obligation like any other
(:meth:`AttesterNode.log_hops`), so a holder can demand it from the
attester and verify it (:attr:`AttesterNode.logged`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import assert_never

from contracts.attest import (
    RehydrationProof,
    attestation_hop_fields,
    build_attestation,
    verify_rehydration,
)
from contracts.envelope import sign_envelope
from contracts.errors import ContractError
from contracts.serve import build_demand
from contracts.signed import Signed
from contracts.statements import Attestation, Axis, Obligation
from harness.attest.bundle import AttestationBundle, restoration_digest
from harness.attest.policy import STEP_MS, taint_kind
from harness.attest.rows import TAINT_KIND, Row, RowSpec
from nodes.client import HeldFold
from nodes.services import NodeCore
from nodes.transport import CallFailed, Transport

__all__ = ["AttesterNode", "LoggedAttestation"]


@dataclass(frozen=True, slots=True)
class LoggedAttestation:
    """An attestation's hop in the attester's log (A6): the fold that commits it."""

    attestation: str
    seq: int
    commitment: bytes
    obligation: bytes


class AttesterNode:
    """One attester playing one row (module docstring)."""

    def __init__(
        self, core: NodeCore, spec: RowSpec, lifetime_steps: int, transport: Transport
    ) -> None:
        self.core = core
        self.spec = spec
        self.lifetime_ms = lifetime_steps * STEP_MS
        self.transport = transport
        self.logged: list[LoggedAttestation] = []
        self.refused = 0  # honest: requests whose proofs did not verify or cover the value
        self._seq = 0
        self._earlier: tuple[frozenset[str], tuple[RehydrationProof, ...]] | None = None

    @property
    def address(self) -> str:
        return self.core.config.listen

    def _sign(
        self,
        digest: str,
        axis: Axis,
        floor: float,
        now: int,
        *,
        cites: Sequence[str] = (),
        discharged: Sequence[str] = (),
        issued: int | None = None,
    ) -> Signed[Attestation]:
        issued_at = now if issued is None else issued
        return build_attestation(
            self.core.identity,
            value_digest=digest,
            axis=axis,
            floor=floor,
            discharged=discharged,
            cites=cites,
            issued_at=issued_at,
            expires_at=issued_at + self.lifetime_ms,
        )

    # ----------------------------------------------------------------- asked

    async def request(
        self,
        value_ref: str,
        folds: Sequence[HeldFold],
        proofs: Sequence[RehydrationProof],
        now: int,
    ) -> list[AttestationBundle]:
        """Answer a holder's request for a ``reconstruction`` attestation."""
        digests = [f.commitment.digest for f in folds]
        digest = restoration_digest(value_ref, digests)
        receipts = [p.receipt.digest for p in proofs]
        proofs = tuple(proofs)
        row = self.spec.row
        match row:
            case Row.NONE | Row.TAINT_DISCHARGE | Row.DISHONEST:
                return []
            case (
                Row.HONEST
                | Row.OUTSIDE_POLICY
                | Row.UNGRANTED_AXIS
                | Row.ABOVE_CEILING
                | Row.REVOKED
            ):
                # (1) every proof verifies, (2) together they cover every commitment
                try:
                    covered = {verify_rehydration(p)[0] for p in proofs}
                except ContractError:
                    self.refused += 1
                    return []
                if not set(digests) <= covered:
                    self.refused += 1
                    return []
                signed = self._sign(digest, Axis.RECONSTRUCTION, 1.0, now, cites=receipts)
            case Row.NO_PROOF:
                signed, proofs = self._sign(digest, Axis.RECONSTRUCTION, 1.0, now), ()
            case Row.OTHER_VALUE_RECEIPTS:
                earlier, self._earlier = self._earlier, (frozenset(digests), proofs)
                if earlier is None or set(digests) <= earlier[0]:
                    return []  # nothing of another value that would not also prove this one
                proofs = earlier[1]
                cites = [p.receipt.digest for p in proofs]
                signed = self._sign(digest, Axis.RECONSTRUCTION, 1.0, now, cites=cites)
            case Row.FORGED_RECEIPTS:
                ident = self.core.identity
                proofs = tuple(
                    RehydrationProof(
                        p.commitment,
                        p.obligation,
                        p.demand,
                        sign_envelope(ident, p.receipt.payload_type, p.receipt.payload),
                        p.hops,
                    )
                    for p in proofs
                )
                signed = self._sign(digest, Axis.RECONSTRUCTION, 1.0, now, cites=receipts)
            case Row.TAMPERED_RECEIPTS:
                first = proofs[0]
                hop = bytearray(first.hops[0])
                hop[-2] ^= 0x01
                tampered = RehydrationProof(
                    first.commitment,
                    first.obligation,
                    first.demand,
                    first.receipt,
                    (bytes(hop), *first.hops[1:]),
                )
                proofs = (tampered, *proofs[1:])
                signed = self._sign(digest, Axis.RECONSTRUCTION, 1.0, now, cites=receipts)
            case Row.PARTIAL_RECEIPTS:
                if len(proofs) > 1:
                    proofs = proofs[:-1]  # all commitments but one
                else:
                    partial = await self._demand_some(folds[0], now)
                    if partial is None:
                        return []
                    proofs = (partial,)
                cites = [p.receipt.digest for p in proofs]
                signed = self._sign(digest, Axis.RECONSTRUCTION, 1.0, now, cites=cites)
            case Row.REPLAYED:
                # a genuine attestation — of the same folds held as another value
                other = restoration_digest(f"{value_ref}#other", digests)
                signed = self._sign(other, Axis.RECONSTRUCTION, 1.0, now, cites=receipts)
            case Row.EXPIRED:
                issued = now - 2 * self.lifetime_ms
                signed = self._sign(
                    digest, Axis.RECONSTRUCTION, 1.0, now, cites=receipts, issued=issued
                )
            case _:
                assert_never(row)
        await self.log_hops([signed])
        return [AttestationBundle(signed.to_bytes(), proofs)]

    async def _demand_some(self, fold: HeldFold, now_ms: int) -> RehydrationProof | None:
        """A rehydration of leaf 0 only of ``fold`` (the partial-receipts row)."""
        obligation: Signed[Obligation] = fold.obligation
        demand = build_demand(self.core.identity, obligation, now=self.core.now_ms(), leaves=[0])
        try:
            answers = await self.transport.demand(
                obligation.statement.endpoints[0],
                [demand.to_bytes()],
                obligation.statement.deadline_ms / 1000.0,
            )
        except (CallFailed, IndexError):
            return None
        if not answers or not answers[0].receipt:
            return None
        from contracts.envelope import Envelope

        return RehydrationProof(
            fold.commitment.envelope,
            obligation.envelope,
            demand.envelope,
            Envelope.from_bytes(answers[0].receipt),
            answers[0].hops,
        )

    # ----------------------------------------------------------------- unasked

    async def unsolicited(
        self, value_ref: str, folds: Sequence[HeldFold], taints: Sequence[str], now: int
    ) -> list[AttestationBundle]:
        """What the row attests on every decision without being asked."""
        digest = restoration_digest(value_ref, [f.commitment.digest for f in folds])
        signed: list[Signed[Attestation]] = []
        row = self.spec.row
        if row is Row.TAINT_DISCHARGE:
            mine = sorted(t for t in taints if taint_kind(t) == TAINT_KIND)
            if mine:
                signed.append(self._sign(digest, Axis.VERIFICATION, 0.0, now, discharged=mine))
        elif row is Row.DISHONEST:
            signed.extend(self._sign(digest, axis, 1.0, now) for axis in Axis)
        if signed:
            await self.log_hops(signed)
        return [AttestationBundle(s.to_bytes()) for s in signed]

    # ----------------------------------------------------------------- A6

    async def log_hops(self, signed: Sequence[Signed[Attestation]]) -> None:
        """Append one hop per attestation to this node's log and commit them as a fold."""
        seqs = list(range(self._seq + 1, self._seq + 1 + len(signed)))
        self._seq += len(signed)
        hops = [
            json.dumps(attestation_hop_fields(s, hop_id=f"a{seq:08d}"), sort_keys=True).encode()
            for s, seq in zip(signed, seqs, strict=True)
        ]
        await self.core.append(hops, seqs)
        committed = await self.core.commit_fold(f"attestations/{seqs[0]}-{seqs[-1]}", seqs)
        for s, seq in zip(signed, seqs, strict=True):
            self.logged.append(
                LoggedAttestation(s.digest, seq, committed.commitment, committed.obligation)
            )
