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
the trust policy the holder judged it under, so :func:`verify_bundle` — and
``provnet attest verify FILE`` — checks it with nothing but the file and the
verifier's own trust policy: signature, binding, authority, and for
``reconstruction`` every proof (A4), all through
:func:`contracts.attest.verify_attestation`. The bundled policy is
information only: nothing signs it, so whoever holds the file can change it,
and it is never applied.

The file is untrusted input: it is read through
:func:`contracts.canonical.parse_json` (at most
:data:`contracts.canonical.MAX_DOCUMENT_BYTES` bytes and
:data:`contracts.canonical.MAX_DEPTH` levels of nesting), as evidence files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from contracts.attest import (
    RehydrationProof,
    TrustPolicy,
    restoration_digest,
    verify_attestation,
)
from contracts.canonical import parse_json
from contracts.envelope import Envelope
from contracts.errors import EncodingError
from contracts.head_note import open_head
from contracts.heads import FoldProof, verify_fold
from contracts.signed import Signed, open_statement
from contracts.statements import Attestation, Commitment

__all__ = [
    "BUNDLE_VERSION",
    "AttestationBundle",
    "BundleFile",
    "HeldFoldBytes",
    "proof_from_json",
    "proof_to_json",
    "restoration_digest",
    "verify_bundle",
]


@dataclass(frozen=True, slots=True)
class AttestationBundle:
    """An attestation envelope and the rehydration proofs for the receipts it cites."""

    attestation: bytes
    proofs: tuple[RehydrationProof, ...] = ()

    @property
    def size(self) -> int:
        return len(self.attestation) + sum(p.size for p in self.proofs)


def proof_to_json(p: RehydrationProof) -> dict[str, Any]:
    """A proof as the bundle file carries it (:meth:`RehydrationProof.to_json`)."""
    return dict(p.to_json())


def proof_from_json(obj: Any) -> RehydrationProof:
    """Either proof form (:meth:`RehydrationProof.from_json`)."""
    return RehydrationProof.from_json(obj)


#: Version of the bundle file: 2 added values whose folds travel under signed
#: tree heads (``folds`` entries with ``head`` and ``fold_proof``) and head-form
#: rehydration proofs; a file without ``version`` is version 1 and still reads.
BUNDLE_VERSION = 2
_V1_KEYS = frozenset({"type", "attestation", "proofs", "value_ref", "commitments", "policy", "at"})
_V2_KEYS = (_V1_KEYS - {"commitments"}) | {"version", "folds"}


@dataclass(frozen=True, slots=True)
class HeldFoldBytes:
    """One fold of the value as the holder received it: a per-fold commitment
    envelope, or (``head`` set) a fold proof and the signed head it is under."""

    commitment: bytes
    head: bytes | None = None

    def to_json(self) -> dict[str, Any]:
        if self.head is None:
            return {"commitment": json.loads(self.commitment)}
        # the head note verbatim, as a JSON string (as evidence cites it)
        proof = FoldProof.from_bytes(self.commitment).to_text()
        return {"head": self.head.decode("utf-8"), "fold_proof": proof}

    @classmethod
    def from_json(cls, obj: Any) -> HeldFoldBytes:
        if not isinstance(obj, dict) or set(obj) not in ({"commitment"}, {"head", "fold_proof"}):
            raise EncodingError("folds: each entry is {commitment} or {head, fold_proof}")
        if "commitment" in obj:
            return cls(Envelope.from_json(obj["commitment"]).to_bytes())
        if type(obj["head"]) is not str:
            raise EncodingError("folds: a head is its signed note, a JSON string")
        return cls(FoldProof.from_text(obj["fold_proof"]).to_bytes(), obj["head"].encode("utf-8"))

    def digest(self) -> str:
        """The fold's commitment digest (a head-form fold: its record's leaf hash),
        signatures and inclusion checked."""
        if self.head is None:
            return open_statement(self.commitment, Commitment).digest
        head = open_head(self.head)
        return verify_fold(FoldProof.from_bytes(self.commitment), head).leaf_hash.hex()


@dataclass(frozen=True, slots=True)
class BundleFile:
    """Everything a third party needs to check one attestation (module docstring)."""

    bundle: AttestationBundle
    value_ref: str
    folds: tuple[HeldFoldBytes, ...]
    policy: TrustPolicy
    at_ms: int

    def to_bytes(self) -> bytes:
        obj = {
            "type": "attestation-bundle",
            "version": BUNDLE_VERSION,
            "attestation": json.loads(self.bundle.attestation),
            "proofs": [proof_to_json(p) for p in self.bundle.proofs],
            "value_ref": self.value_ref,
            "folds": [f.to_json() for f in self.folds],
            "policy": self.policy.to_json(),
            "at": self.at_ms,
        }
        return json.dumps(obj, indent=1, sort_keys=True).encode("utf-8") + b"\n"

    @classmethod
    def from_bytes(cls, data: bytes) -> BundleFile:
        obj = parse_json(data, what="attestation bundle")
        if not isinstance(obj, dict) or obj.get("type") != "attestation-bundle":
            raise EncodingError("expected an object with type 'attestation-bundle'")
        version = obj.get("version", 1)
        if version not in (1, BUNDLE_VERSION):
            raise EncodingError(
                f"version: {version!r:.20} is not a bundle version this code reads"
                f" (1, {BUNDLE_VERSION})"
            )
        want = _V1_KEYS if version == 1 else _V2_KEYS
        if set(obj) != want:
            raise EncodingError(
                f"version {version}: expected exactly the keys {', '.join(sorted(want))}"
            )
        at = obj["at"]
        if isinstance(at, bool) or not isinstance(at, int) or at < 0:
            raise EncodingError("at: expected a time in ms")
        if not isinstance(obj["value_ref"], str):
            raise EncodingError("value_ref: expected a string")
        raw_folds = obj["commitments"] if version == 1 else obj["folds"]
        if not isinstance(obj["proofs"], list) or not isinstance(raw_folds, list):
            raise EncodingError("proofs and folds: expected lists")
        folds = (
            tuple(HeldFoldBytes(Envelope.from_json(c).to_bytes()) for c in raw_folds)
            if version == 1
            else tuple(HeldFoldBytes.from_json(f) for f in raw_folds)
        )
        attestation = Envelope.from_json(obj["attestation"]).to_bytes()
        return cls(
            AttestationBundle(attestation, tuple(proof_from_json(p) for p in obj["proofs"])),
            obj["value_ref"],
            folds,
            TrustPolicy.from_json(obj["policy"]),
            at,
        )


def verify_bundle(f: BundleFile, *, policy: TrustPolicy) -> Signed[Attestation]:
    """Raise a :class:`contracts.errors.ContractError` unless the file's attestation
    may raise its axis of the value it names, at the file's time, under ``policy``
    (the verifier's: the file's own ``policy`` is never applied, nothing signs it)."""
    digests = [fold.digest() for fold in f.folds]
    return verify_attestation(
        f.bundle.attestation,
        value_digest=restoration_digest(f.value_ref, digests),
        policy=policy,
        now=f.at_ms,
        rehydrations=f.bundle.proofs,
        value_commitments=digests,
    )
