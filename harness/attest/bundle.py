"""An attestation with the receipts it cites: what travels to the holder, and a file.

Binding (A2). A ``reconstruction`` attestation speaks about the folded
lineage of one held value: it binds the *restoration digest*
:func:`restoration_digest` — SHA-256 over the RFC 8785 bytes of
``{"type": "restored-value", "value_ref": …, "commitments": [sorted
commitment digests]}``. The digest changes when the value gains a fold (a
new commitment needs its own rehydration, A4) and differs between two
values carrying the same folds under different refs, so an attestation
cannot be replayed on another value.

A bundle is the attestation envelope plus one
:class:`contracts.attest.RehydrationProof` per cited receipt (commitment,
obligation, demand, receipt envelopes and the served hop bytes). As a file
(``type: attestation-bundle``) it also carries the value's commitments and
the trust policy, so :func:`verify_bundle` — and ``provnet attest verify
FILE`` — checks it with nothing but the file: signature, binding, policy,
and for ``reconstruction`` every proof (A4), all through
:func:`contracts.attest.verify_attestation`.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from contracts.attest import RehydrationProof, TrustPolicy, verify_attestation
from contracts.canonical import canonical_bytes, sha256_hex
from contracts.envelope import Envelope
from contracts.errors import EncodingError
from contracts.signed import Signed, open_statement
from contracts.statements import Attestation, Commitment

__all__ = [
    "AttestationBundle",
    "BundleFile",
    "proof_from_json",
    "proof_to_json",
    "restoration_digest",
    "verify_bundle",
]


def restoration_digest(value_ref: str, commitment_digests: Sequence[str]) -> str:
    """What a ``reconstruction`` attestation binds (module docstring)."""
    return sha256_hex(
        canonical_bytes(
            {
                "type": "restored-value",
                "value_ref": value_ref,
                "commitments": sorted(set(commitment_digests)),
            }
        )
    )


@dataclass(frozen=True, slots=True)
class AttestationBundle:
    """An attestation envelope and the rehydration proofs for the receipts it cites."""

    attestation: bytes
    proofs: tuple[RehydrationProof, ...] = ()

    @property
    def size(self) -> int:
        return len(self.attestation) + sum(
            len(p.commitment.to_bytes())
            + len(p.obligation.to_bytes())
            + len(p.demand.to_bytes())
            + len(p.receipt.to_bytes())
            + sum(len(h) for h in p.hops)
            for p in self.proofs
        )


def proof_to_json(p: RehydrationProof) -> dict[str, Any]:
    return {
        "commitment": p.commitment.to_json(),
        "obligation": p.obligation.to_json(),
        "demand": p.demand.to_json(),
        "receipt": p.receipt.to_json(),
        "hops": [base64.b64encode(h).decode("ascii") for h in p.hops],
    }


def proof_from_json(obj: Any) -> RehydrationProof:
    if not isinstance(obj, dict) or set(obj) != {
        "commitment",
        "obligation",
        "demand",
        "receipt",
        "hops",
    }:
        raise EncodingError(
            "rehydration proof: expected commitment, obligation, demand, receipt, hops"
        )
    hops = obj["hops"]
    if not isinstance(hops, list) or not all(isinstance(h, str) for h in hops):
        raise EncodingError("rehydration proof: hops must be base64 strings")
    try:
        decoded = tuple(base64.b64decode(h, validate=True) for h in hops)
    except ValueError as exc:
        raise EncodingError(f"rehydration proof: a hop is not base64: {exc}") from exc
    return RehydrationProof(
        Envelope.from_json(obj["commitment"]),
        Envelope.from_json(obj["obligation"]),
        Envelope.from_json(obj["demand"]),
        Envelope.from_json(obj["receipt"]),
        decoded,
    )


@dataclass(frozen=True, slots=True)
class BundleFile:
    """Everything a third party needs to check one attestation (module docstring)."""

    bundle: AttestationBundle
    value_ref: str
    commitments: tuple[bytes, ...]
    policy: TrustPolicy
    at_ms: int

    def to_bytes(self) -> bytes:
        obj = {
            "type": "attestation-bundle",
            "attestation": json.loads(self.bundle.attestation),
            "proofs": [proof_to_json(p) for p in self.bundle.proofs],
            "value_ref": self.value_ref,
            "commitments": [json.loads(c) for c in self.commitments],
            "policy": self.policy.to_json(),
            "at": self.at_ms,
        }
        return json.dumps(obj, indent=1, sort_keys=True).encode("utf-8") + b"\n"

    @classmethod
    def from_bytes(cls, data: bytes) -> BundleFile:
        try:
            obj = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise EncodingError(f"not JSON: {exc}") from exc
        want = {"type", "attestation", "proofs", "value_ref", "commitments", "policy", "at"}
        if not isinstance(obj, dict) or obj.get("type") != "attestation-bundle":
            raise EncodingError("expected an object with type 'attestation-bundle'")
        if set(obj) != want:
            raise EncodingError(f"expected exactly the keys {', '.join(sorted(want))}")
        at = obj["at"]
        if isinstance(at, bool) or not isinstance(at, int) or at < 0:
            raise EncodingError("at: expected a time in ms")
        if not isinstance(obj["value_ref"], str):
            raise EncodingError("value_ref: expected a string")
        if not isinstance(obj["proofs"], list) or not isinstance(obj["commitments"], list):
            raise EncodingError("proofs and commitments: expected lists")
        attestation = Envelope.from_json(obj["attestation"]).to_bytes()
        return cls(
            AttestationBundle(attestation, tuple(proof_from_json(p) for p in obj["proofs"])),
            obj["value_ref"],
            tuple(Envelope.from_json(c).to_bytes() for c in obj["commitments"]),
            TrustPolicy.from_json(obj["policy"]),
            at,
        )


def verify_bundle(f: BundleFile) -> Signed[Attestation]:
    """Raise a :class:`contracts.errors.ContractError` unless the file's attestation
    may raise its axis of the value it names, at the file's time, under its policy."""
    commitments = [open_statement(c, Commitment) for c in f.commitments]
    digests = [c.digest for c in commitments]
    return verify_attestation(
        f.bundle.attestation,
        value_digest=restoration_digest(f.value_ref, digests),
        policy=f.policy,
        now=f.at_ms,
        rehydrations=f.bundle.proofs,
        value_commitments=digests,
    )
