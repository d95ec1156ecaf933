"""A node's attest role (Part 6): the attester's ``Attest.Request`` and the
holder's ``Attest.Restore``.

**Attester** (:class:`Attester`). A holder that rehydrated every fold of a
value in full and verified each answer asks for a ``reconstruction``
attestation, citing those proofs (:class:`contracts.attest.RehydrationProof`,
per-fold or under a signed tree head). An honest attester (fault ``none``)

1. verifies every proof (:func:`contracts.attest.verify_rehydration`: origin
   signatures, the fold under its head, demand of all leaves, SERVED receipt,
   hop bytes reproducing the root);
2. checks that together they cover every commitment of the value the request
   names;
3. signs ``reconstruction ≥ 1.0`` binding
   :func:`contracts.attest.restoration_digest` of the value ref and those
   commitments, citing exactly the proofs' receipts — never backdated (issue
   time no earlier than its clock), lifetime within :data:`MIN_LIFETIME_MS` ..
   :data:`MAX_LIFETIME_MS`;
4. logs it (A6): one hop per attestation in its own log
   (:func:`contracts.attest.attestation_hop_fields`), committed as a fold
   with signed commitment and obligation, servable like any other; the answer
   names that fold so the holder can demand it back. Asked again for what it
   has logged (same value digest, axis, floor, cites, discharges) it answers
   the logged attestation and writes nothing, until that one has expired
   (:mod:`nodes.attest_log`, which also keeps the hops' seqs across restarts).

It signs nothing else: other axes and taint discharges asked for get no
attestation (it holds no evidence for them), and a request whose proofs do
not verify or cover the value is refused with the reason.

A faulty attester (``--attest-fault``, :class:`AttesterFault`) signs what its
mode says instead — the adversaries Part 6's authority table is played with.
Whatever an attester signs, whether it counts is decided where it is used,
by the trust policy (:func:`contracts.attest.apply_attestations`).

**Holder** (:func:`nodes.restore.restore`). Given a value's folds, demand every leaf of
every fold (one ``Serve.Demand`` per origin), verify each answer into a
proof, and ask the attester over the transport (``Attest.Request``). What
comes back is returned unjudged.

Bounds: at most :data:`MAX_PROOFS` proofs and commitments per request,
:data:`MAX_DISCHARGE` taint ids, each axis once; the message size is the
server's bound.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol, assert_never, runtime_checkable

from contracts._fields import MAX_TIME_MS, is_digest
from contracts.attest import (
    RehydrationProof,
    attestation_hop_fields,
    build_attestation,
    restoration_digest,
    verify_rehydration,
)
from contracts.custody import open_fold
from contracts.envelope import sign_envelope
from contracts.errors import ContractError
from contracts.head_note import open_head
from contracts.heads import FoldProof, verify_fold
from contracts.identity import Identity
from contracts.serve import build_demand
from contracts.signed import Signed, open_statement
from contracts.statements import Attestation, Axis, Commitment, Obligation
from nodes.errors import MalformedRequest, RequestTooLarge

__all__ = [
    "ATTEST_SEQ_BASE",
    "DEFAULT_LIFETIME_MS",
    "MAX_DISCHARGE",
    "MAX_LIFETIME_MS",
    "MAX_PROOFS",
    "MIN_LIFETIME_MS",
    "AttestCarrier",
    "AttestationAnswer",
    "AttestationAsk",
    "Attester",
    "AttesterFault",
    "FoldBytes",
    "IssuedAttestation",
    "LoggedAttestation",
    "RestoreResult",
    "attestation_hops",
    "leaf0_demand",
]

#: First seq of the attestation hops a node logs (A6), clear of step-numbered hops.
ATTEST_SEQ_BASE = 1 << 62
#: Longest lifetime an attester signs (30 days, as obligations).
MAX_LIFETIME_MS = 30 * 24 * 3600 * 1000
#: Shortest lifetime an attester signs: a logged attestation is renewed only
#: once expired (:mod:`nodes.attest_log`), so this bounds how often the same
#: proofs can make it write.
MIN_LIFETIME_MS = 1000
DEFAULT_LIFETIME_MS = 3600 * 1000
#: Proofs (and commitments) one request may cite.
MAX_PROOFS = 256
MAX_DISCHARGE = 1024


class AttesterFault(StrEnum):
    """What an attester signs when asked (``none``: the honest attester)."""

    NONE = "none"
    #: reconstruction citing no receipts
    NO_PROOF = "no_proof"
    #: cites the receipts of the previous request's value
    OTHER_VALUE_RECEIPTS = "other_value_receipts"
    #: the receipts re-signed with its own key
    FORGED_RECEIPTS = "forged_receipts"
    #: one served hop altered after the receipt
    TAMPERED_RECEIPTS = "tampered_receipts"
    #: proofs for all commitments but one; with one, a demand of leaf 0 only
    PARTIAL_RECEIPTS = "partial_receipts"
    #: a genuine attestation of the same folds held as another value (A2)
    REPLAYED = "replayed"
    #: attestations already past their expiry (A7)
    EXPIRED = "expired"
    #: signs every axis and discharge asked for, with no proof
    LAX = "lax"


@dataclass(frozen=True, slots=True)
class FoldBytes:
    """One fold of a value as its holder keeps it: per-fold commitment and
    obligation envelopes, or (``under_head``) a fold proof and its signed head."""

    commitment: bytes
    obligation: bytes
    under_head: bool = False

    def statements(self) -> tuple[Signed[Commitment], Signed[Obligation], FoldProof | None]:
        """Commitment and obligation (head form: the fold's stand-ins), signatures checked."""
        if not self.under_head:
            c = open_statement(self.commitment, Commitment)
            return c, open_statement(self.obligation, Obligation, signer=c.signer), None
        proof = FoldProof.from_bytes(self.commitment)
        # a head note, or a custodian's bundle (head + custody statement, docs/custody.md)
        fold = open_fold(self.obligation, proof)
        return fold.commitment, fold.obligation, proof


@dataclass(frozen=True, slots=True)
class AttestationAsk:
    """What a holder asks an attester (``Attest.Request``)."""

    value_ref: str
    commitments: tuple[str, ...]
    proofs: tuple[RehydrationProof, ...] = ()
    reconstruction: bool = True
    issued_at: int = 0
    lifetime_ms: int = 0
    axes: tuple[tuple[Axis, float], ...] = ()
    discharge: tuple[str, ...] = ()

    def check(self) -> None:
        """Bounds and shapes; raises :class:`MalformedRequest`/:class:`RequestTooLarge`."""
        if not self.value_ref or len(self.value_ref) > 1024:
            raise MalformedRequest("attest request: value_ref must be 1..1024 characters")
        if len(self.proofs) > MAX_PROOFS or len(self.commitments) > MAX_PROOFS:
            raise RequestTooLarge(f"attest request: more than {MAX_PROOFS} proofs or commitments")
        if len(self.discharge) > MAX_DISCHARGE:
            raise RequestTooLarge(f"attest request: more than {MAX_DISCHARGE} taints to discharge")
        bad = next((c for c in self.commitments if not is_digest(c)), None)
        if bad is not None:
            raise MalformedRequest(f"attest request: commitment {bad!r:.70} is not a digest")
        if len({a for a, _ in self.axes}) != len(self.axes):
            raise MalformedRequest("attest request: an axis appears twice")
        for axis, floor in self.axes:
            if not (math.isfinite(floor) and 0.0 <= floor <= 1.0):
                raise MalformedRequest(f"attest request: floor of {axis.value} must be in [0, 1]")
        if not 0 <= self.issued_at <= MAX_TIME_MS or not 0 <= self.lifetime_ms <= MAX_TIME_MS:
            raise MalformedRequest("attest request: issued_at and lifetime_ms must be ms")
        if self.lifetime_ms > MAX_LIFETIME_MS:
            raise MalformedRequest(
                f"attest request: lifetime {self.lifetime_ms} ms exceeds {MAX_LIFETIME_MS} ms"
            )
        if 0 < self.lifetime_ms < MIN_LIFETIME_MS:
            raise MalformedRequest(
                f"attest request: lifetime {self.lifetime_ms} ms is below {MIN_LIFETIME_MS} ms"
                " (0 asks for the default)"
            )


@dataclass(frozen=True, slots=True)
class IssuedAttestation:
    """One signed attestation, the proofs it cites, and its A6 fold."""

    attestation: bytes
    proofs: tuple[RehydrationProof, ...] = ()
    hop_commitment: bytes = b""
    hop_obligation: bytes = b""

    @property
    def size(self) -> int:
        return len(self.attestation) + sum(p.size for p in self.proofs)


@dataclass(frozen=True, slots=True)
class LoggedAttestation:
    """An attestation as its attester's A6 log holds it: the envelope and the
    (commitment, obligation) of the fold committing its hop (empty once that
    fold has been reaped); ``repeated``: answered from the log, nothing written."""

    attestation: bytes
    commitment: bytes
    obligation: bytes
    repeated: bool = False


@dataclass(frozen=True, slots=True)
class AttestationAnswer:
    """What an attester answered: the attestations it signed, or why none."""

    issued: tuple[IssuedAttestation, ...] = ()
    refused: str = ""

    @property
    def size(self) -> int:
        return sum(i.size for i in self.issued) + len(self.refused)


@dataclass(frozen=True, slots=True)
class RestoreResult:
    """A holder's restoration: the attester's answer, or why nothing was asked."""

    answer: AttestationAnswer = field(default_factory=AttestationAnswer)
    rehydrated: bool = False
    detail: str = ""
    demand_rpcs: int = 0
    hops: int = 0
    request_bytes: int = 0
    response_bytes: int = 0


@runtime_checkable
class AttestCarrier(Protocol):
    """A transport that carries ``Attest.Request`` to an attester."""

    async def request_attestation(
        self, address: str, ask: AttestationAsk, timeout: float
    ) -> AttestationAnswer: ...


class _AttesterCore(Protocol):
    """What :class:`Attester` uses of its node."""

    @property
    def identity(self) -> Identity: ...

    def now_ms(self) -> int: ...

    async def log_attestations(
        self, signed: Sequence[Signed[Attestation]]
    ) -> tuple[LoggedAttestation, ...]: ...

    async def demand_leaf0(self, proof: RehydrationProof) -> RehydrationProof | None: ...


class Attester:
    """One node's attester (module docstring); state: the previous request (one fault)."""

    def __init__(self, core: _AttesterCore, fault: AttesterFault = AttesterFault.NONE) -> None:
        self.core = core
        self.fault = fault
        self._earlier: tuple[frozenset[str], tuple[RehydrationProof, ...]] | None = None

    def _sign(
        self,
        digest: str,
        axis: Axis,
        floor: float,
        issued_at: int,
        lifetime_ms: int,
        *,
        cites: Sequence[str] = (),
        discharged: Sequence[str] = (),
    ) -> Signed[Attestation]:
        return build_attestation(
            self.core.identity,
            value_digest=digest,
            axis=axis,
            floor=floor,
            discharged=discharged,
            cites=cites,
            issued_at=issued_at,
            expires_at=issued_at + lifetime_ms,
        )

    async def request(self, ask: AttestationAsk) -> AttestationAnswer:
        """Answer one request (module docstring)."""
        ask.check()
        now = max(ask.issued_at, self.core.now_ms())  # never backdated
        lifetime = ask.lifetime_ms or DEFAULT_LIFETIME_MS
        digest = restoration_digest(ask.value_ref, ask.commitments)
        receipts = [p.receipt.digest for p in ask.proofs]
        proofs = ask.proofs
        fault = self.fault
        signed: list[tuple[Signed[Attestation], tuple[RehydrationProof, ...]]] = []
        if fault is AttesterFault.LAX:
            for axis, floor in ask.axes:
                discharged = ask.discharge if axis is ask.axes[0][0] else ()
                signed.append(
                    (self._sign(digest, axis, floor, now, lifetime, discharged=discharged), ())
                )
            return await self._issue(signed)
        if not ask.reconstruction:
            # no evidence could justify another axis or a discharge
            return AttestationAnswer(refused="only reconstruction is attested, with proof")

        def sign(d: str, cites: Sequence[str], issued: int = now) -> Signed[Attestation]:
            return self._sign(d, Axis.RECONSTRUCTION, 1.0, issued, lifetime, cites=cites)

        match fault:
            case AttesterFault.NONE:
                try:
                    covered = {verify_rehydration(p)[0] for p in proofs}
                except ContractError as exc:
                    return AttestationAnswer(refused=f"a rehydration proof does not verify: {exc}")
                missing = set(ask.commitments) - covered
                if not ask.commitments or missing:
                    return AttestationAnswer(
                        refused=f"{len(missing) or 'no'} commitment(s) of the value not rehydrated"
                    )
                signed.append((sign(digest, receipts), proofs))
            case AttesterFault.NO_PROOF:
                signed.append((sign(digest, ()), ()))
            case AttesterFault.OTHER_VALUE_RECEIPTS:
                earlier, self._earlier = self._earlier, (frozenset(ask.commitments), proofs)
                if earlier is None or set(ask.commitments) <= earlier[0]:
                    return AttestationAnswer(refused="no other value's receipts to cite yet")
                signed.append((sign(digest, [p.receipt.digest for p in earlier[1]]), earlier[1]))
            case AttesterFault.FORGED_RECEIPTS:
                ident = self.core.identity
                forged = tuple(
                    RehydrationProof(
                        p.commitment,
                        p.obligation,
                        p.demand,
                        sign_envelope(ident, p.receipt.payload_type, p.receipt.payload),
                        p.hops,
                        p.fold,
                    )
                    for p in proofs
                )
                signed.append((sign(digest, receipts), forged))
            case AttesterFault.TAMPERED_RECEIPTS:
                if not proofs or not proofs[0].hops:
                    return AttestationAnswer(refused="no served hop to alter")
                first = proofs[0]
                hop = bytearray(first.hops[0])
                hop[-2] ^= 0x01
                tampered = RehydrationProof(
                    first.commitment,
                    first.obligation,
                    first.demand,
                    first.receipt,
                    (bytes(hop), *first.hops[1:]),
                    first.fold,
                )
                signed.append((sign(digest, receipts), (tampered, *proofs[1:])))
            case AttesterFault.PARTIAL_RECEIPTS:
                if len(proofs) > 1:
                    some = proofs[:-1]  # all commitments but one
                elif proofs:
                    partial = await self.core.demand_leaf0(proofs[0])
                    if partial is None:
                        return AttestationAnswer(refused="the origin did not serve leaf 0")
                    some = (partial,)
                else:
                    return AttestationAnswer(refused="no proofs to take part of")
                signed.append((sign(digest, [p.receipt.digest for p in some]), some))
            case AttesterFault.REPLAYED:
                other = restoration_digest(f"{ask.value_ref}#other", ask.commitments)
                signed.append((sign(other, receipts), proofs))
            case AttesterFault.EXPIRED:
                signed.append((sign(digest, receipts, now - 2 * lifetime), proofs))
            case AttesterFault.LAX:  # pragma: no cover - answered above
                raise AssertionError("lax is answered before reconstruction")
            case _:
                assert_never(fault)
        return await self._issue(signed)

    async def _issue(
        self, signed: Sequence[tuple[Signed[Attestation], tuple[RehydrationProof, ...]]]
    ) -> AttestationAnswer:
        if not signed:
            return AttestationAnswer(refused="nothing asked that this attester signs")
        logged = await self.core.log_attestations([s for s, _ in signed])
        return AttestationAnswer(
            tuple(
                IssuedAttestation(entry.attestation, proofs, entry.commitment, entry.obligation)
                for entry, (_, proofs) in zip(logged, signed, strict=True)
            )
        )


def attestation_hops(signed: Sequence[Signed[Attestation]], first_seq: int) -> list[bytes]:
    """A6: the hop bytes (JSON fields) recording each attestation, seqs from ``first_seq``."""
    return [
        json.dumps(attestation_hop_fields(s, hop_id=f"a{seq:08d}"), sort_keys=True).encode()
        for seq, s in enumerate(signed, start=first_seq)
    ]


def leaf0_demand(
    identity: Identity, proof: RehydrationProof, now_ms: int
) -> tuple[Signed[Obligation], bytes]:
    """A demand of leaf 0 only under a proof's obligation (head form: its head)."""
    if proof.fold is None or not isinstance(proof.obligation, bytes):
        obligation = open_statement(proof.obligation, Obligation)
    else:
        obligation = verify_fold(proof.fold, open_head(proof.obligation)).obligation
    return obligation, build_demand(identity, obligation, now=now_ms, leaves=[0]).to_bytes()
