"""The attest contract (A1–A7): attestations, the trust policy, and the only
path by which a provenance axis may go up.

Part 6: everything can only lower an axis, except attest. An attestation is
signed by an attester and

* binds one value by digest — it cannot be replayed on another (A2);
* raises one axis to a floor, within the ceiling the trust policy grants that
  attester for that axis; attesters and axes outside the policy are rejected
  (A3);
* for ``reconstruction`` counts only with proof of a full verified
  rehydration of the value's commitments — the receipts it cites, each a
  SERVED full fold whose bytes reproduce the committed root; the fold is
  either a per-fold commitment or a fold record proven under a signed tree
  head (:class:`RehydrationProof`); no trust policy can raise
  reconstruction otherwise (A4);
* names the taint ids it discharges; a blocklist gate ignores exactly those
  (A5, :func:`remaining_taints`);
* is itself a hop: :func:`attestation_hop_fields` gives the hop appended to
  the attester's log, naming the attestation digest (A6);
* stops counting when it expires or its key is revoked (A7).

:func:`apply_attestations` is the one function that raises scores (A1).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from contracts._fields import MAX_TIME_MS, is_digest
from contracts.canonical import (
    JsonObject,
    canonical_bytes,
    format_ms,
    parse_json_object,
    sha256_hex,
)
from contracts.custody import open_fold, split_custody_bundle
from contracts.envelope import Envelope
from contracts.errors import (
    BadSignature,
    BindingMismatch,
    CheckResult,
    ContractError,
    DigestMismatch,
    EncodingError,
    Expired,
    NotAuthorized,
    Revoked,
    run_check,
)
from contracts.head_note import SignedHead, head_digest
from contracts.heads import FoldProof
from contracts.identity import Identity
from contracts.serve import verify_served
from contracts.signed import Signed, open_statement, sign_statement
from contracts.statements import (
    Attestation,
    Axis,
    Commitment,
    Demand,
    Obligation,
    Receipt,
)

__all__ = [
    "PROOF_VERSION",
    "AttestationOutcome",
    "RehydrationProof",
    "TrustPolicy",
    "apply_attestations",
    "attestation_hop_fields",
    "build_attestation",
    "check_attestation",
    "remaining_taints",
    "restoration_digest",
    "verify_attestation",
    "verify_rehydration",
]

_MAX_POLICY_ENTRIES = 10_000


@dataclass(frozen=True, slots=True)
class TrustPolicy:
    """Which attester may raise which axis, up to which ceiling; revocations.

    ``grants[node_id][axis] = ceiling``; ``revocations[node_id] = revoked_at``
    (ms): from that time on the key's attestations stop counting, whenever
    they were issued. JSON form::

        {"type": "trust-policy",
         "grants": {"<node id>": {"verification": 0.9}},
         "revocations": {"<node id>": 1796000000000}}
    """

    grants: Mapping[str, Mapping[Axis, float]] = field(default_factory=dict)
    revocations: Mapping[str, int] = field(default_factory=dict)

    def ceiling(self, attester: str, axis: Axis) -> float | None:
        return self.grants.get(attester, {}).get(axis)

    def revoked_at(self, attester: str) -> int | None:
        return self.revocations.get(attester)

    def to_json(self) -> JsonObject:
        return {
            "type": "trust-policy",
            "grants": {
                k: {a.value: c for a, c in sorted(v.items())}
                for k, v in sorted(self.grants.items())
            },
            "revocations": dict(sorted(self.revocations.items())),
        }

    def to_bytes(self) -> bytes:
        return canonical_bytes(self.to_json())

    @classmethod
    def from_json(cls, obj: Any) -> TrustPolicy:
        if not isinstance(obj, dict) or obj.get("type") != "trust-policy":
            raise EncodingError("trust policy: expected an object with type 'trust-policy'")
        if set(obj) - {"type", "grants", "revocations"}:
            raise EncodingError("trust policy: unknown fields")
        raw_grants = obj.get("grants", {})
        raw_revs = obj.get("revocations", {})
        if not isinstance(raw_grants, dict) or not isinstance(raw_revs, dict):
            raise EncodingError("trust policy: grants and revocations must be objects")
        if len(raw_grants) + len(raw_revs) > _MAX_POLICY_ENTRIES:
            raise EncodingError(f"trust policy: more than {_MAX_POLICY_ENTRIES} entries")
        grants: dict[str, dict[Axis, float]] = {}
        for key, axes in raw_grants.items():
            if not is_digest(key) or not isinstance(axes, dict):
                raise EncodingError(f"trust policy: grant {key!r:.70} must map a node id to axes")
            granted: dict[Axis, float] = {}
            for name, ceiling in axes.items():
                try:
                    axis = Axis(name)
                except ValueError as exc:
                    raise EncodingError(f"trust policy: unknown axis {name!r:.40}") from exc
                if (
                    isinstance(ceiling, bool)
                    or not isinstance(ceiling, int | float)
                    or not 0.0 <= ceiling <= 1.0
                ):
                    raise EncodingError(f"trust policy: ceiling for {name} must be in [0, 1]")
                granted[axis] = float(ceiling)
            grants[key] = granted
        revocations: dict[str, int] = {}
        for key, at in raw_revs.items():
            if not is_digest(key):
                raise EncodingError(f"trust policy: revocation key {key!r:.70} is not a node id")
            if isinstance(at, bool) or not isinstance(at, int) or not 0 <= at <= MAX_TIME_MS:
                raise EncodingError(f"trust policy: revocation time for {key[:16]}… must be ms")
            revocations[key] = at
        return cls(grants=grants, revocations=revocations)

    @classmethod
    def from_bytes(cls, data: bytes) -> TrustPolicy:
        return cls.from_json(parse_json_object(data, what="trust policy"))


def restoration_digest(value_ref: str, commitment_digests: Iterable[str]) -> str:
    """The value digest a ``reconstruction`` attestation binds (A2).

    SHA-256 over the RFC 8785 bytes of ``{"type": "restored-value",
    "value_ref": …, "commitments": [sorted commitment digests]}``: it changes
    when the value gains a fold (the new fold needs its own rehydration, A4)
    and differs between two values carrying the same folds under different
    refs, so an attestation cannot be replayed on another value.
    """
    return sha256_hex(
        canonical_bytes(
            {
                "type": "restored-value",
                "value_ref": value_ref,
                "commitments": sorted(set(commitment_digests)),
            }
        )
    )


def build_attestation(
    identity: Identity,
    *,
    value_digest: str,
    axis: Axis,
    floor: float,
    discharged: Sequence[str] = (),
    cites: Sequence[str] = (),
    issued_at: int,
    expires_at: int,
) -> Signed[Attestation]:
    if expires_at <= issued_at:
        raise ValueError("an attestation must expire after it is issued")
    statement = Attestation(
        attester=identity.node_id,
        value_digest=value_digest,
        axis=axis,
        floor=float(floor),
        discharged=tuple(discharged),
        cites=tuple(cites),
        issued_at=issued_at,
        expires_at=expires_at,
    )
    return sign_statement(identity, statement)


EnvelopeInput = bytes | Envelope | dict[str, Any]


def _cited_bytes(value: Envelope | bytes) -> bytes:
    """The bytes a proof part travels as: a head note as it is, an envelope's DSSE JSON."""
    return value if isinstance(value, bytes) else value.to_bytes()


#: Version of the JSON form of a :class:`RehydrationProof` (``"v"``): 3 is the head
#: form (a fold proven under a signed tree head), its fold proof cited as base64 of
#: its one binary encoding; a form without ``"v"`` is version 1, the per-fold form,
#: and still reads. Version 2 (the fold proof as a JSON object) is refused by name.
PROOF_VERSION = 3
_OLD_HEAD_FORM = 2
_PROOF_KEYS_V1 = frozenset({"commitment", "obligation", "demand", "receipt", "hops"})
_PROOF_KEYS_HEAD = frozenset({"v", "head", "fold_proof", "demand", "receipt", "hops"})
_MAX_PROOF_HOPS = 1_000_000


@dataclass(frozen=True, slots=True)
class RehydrationProof:
    """One fold fetched in full and verified: the statements and bytes that show it.

    Two forms, one meaning (A4):

    * **per-fold** (``fold`` is None): ``commitment`` and ``obligation`` are the
      origin's signed per-fold statements;
    * **under a signed tree head** (design revision 2): ``obligation`` is the
      origin's signed head (its note, bytes as signed) and ``fold`` the fold
      proof (fold record, audit path to the head's root, chain) — what a holder of a head-form value
      already has; ``commitment`` is None. The fold's commitment digest is
      the fold record's RFC 6962 leaf hash, as everywhere heads are used
      (:class:`contracts.heads.VerifiedFold`).

    The demand, the origin's SERVED receipt and the hop bytes are the same in
    both forms. JSON (:meth:`to_json`): the per-fold form keeps its version-1
    keys; the head form is ``{"v": 3, "head", "fold_proof", "demand",
    "receipt", "hops"}`` (envelopes as JSON objects, the head note as a JSON
    string, verbatim; the fold proof's bytes and the hops in standard base64).
    """

    commitment: Envelope | None
    #: the per-fold obligation's envelope, or (head form) the head's note
    obligation: Envelope | bytes
    demand: Envelope
    receipt: Envelope
    hops: tuple[bytes, ...]
    fold: FoldProof | None = None

    def __post_init__(self) -> None:
        if (self.commitment is None) == (self.fold is None):
            raise ValueError(
                "a rehydration proof has either a per-fold commitment or a fold proof under a head"
            )
        if isinstance(self.obligation, bytes) != (self.fold is not None):
            raise ValueError("a rehydration proof's head is a note exactly in the head form")

    @classmethod
    def of(
        cls,
        *,
        commitment: Signed[Commitment],
        obligation: Signed[Obligation],
        demand: Signed[Demand],
        receipt: Signed[Receipt],
        hops: Sequence[bytes],
    ) -> RehydrationProof:
        return cls(
            commitment.envelope, obligation.envelope, demand.envelope, receipt.envelope, tuple(hops)
        )

    @classmethod
    def under_head(
        cls,
        *,
        head: bytes | SignedHead,
        fold: FoldProof,
        demand: Envelope | Signed[Demand],
        receipt: Envelope | Signed[Receipt],
        hops: Sequence[bytes],
    ) -> RehydrationProof:
        """The head form: the signed head and fold proof the holder already keeps."""

        def env(x: Envelope | Signed[Any]) -> Envelope:
            return x if isinstance(x, Envelope) else x.envelope

        note = head.note if isinstance(head, SignedHead) else bytes(head)
        return cls(None, note, env(demand), env(receipt), tuple(hops), fold)

    @property
    def size(self) -> int:
        """Bytes of the proof's parts as they travel (envelopes, fold proof, hops)."""
        first = (
            len(self.commitment.to_bytes())
            if self.commitment is not None
            else len(self.fold.to_bytes())
            if self.fold is not None
            else 0
        )
        return (
            first
            + len(_cited_bytes(self.obligation))
            + len(self.demand.to_bytes())
            + len(self.receipt.to_bytes())
            + sum(len(h) for h in self.hops)
        )

    def to_json(self) -> JsonObject:
        hops = [base64.standard_b64encode(h).decode("ascii") for h in self.hops]
        if self.fold is not None:
            return {
                "v": PROOF_VERSION,
                "head": _cited_bytes(self.obligation).decode("utf-8"),
                "fold_proof": self.fold.to_text(),
                "demand": self.demand.to_json(),
                "receipt": self.receipt.to_json(),
                "hops": hops,
            }
        if self.commitment is None:  # pragma: no cover - excluded by __post_init__
            raise ValueError("rehydration proof without commitment or fold proof")
        if isinstance(self.obligation, bytes):  # pragma: no cover - excluded by __post_init__
            raise ValueError("per-fold rehydration proof with a head note")
        return {
            "commitment": self.commitment.to_json(),
            "obligation": self.obligation.to_json(),
            "demand": self.demand.to_json(),
            "receipt": self.receipt.to_json(),
            "hops": hops,
        }

    def to_bytes(self) -> bytes:
        return canonical_bytes(self.to_json())

    @classmethod
    def from_json(cls, obj: Any) -> RehydrationProof:
        """Strict parse of either form; an unknown ``"v"`` is rejected naming it."""
        if type(obj) is not dict:
            raise EncodingError("rehydration proof: expected a JSON object")
        version = obj.get("v", 1)
        if version == _OLD_HEAD_FORM:
            raise EncodingError(
                f"rehydration proof v{_OLD_HEAD_FORM}: the earlier head form (its fold proof a"
                f" JSON object) is not read; this code reads 1 and {PROOF_VERSION}"
            )
        if version == 1 and obj.keys() == _PROOF_KEYS_V1:
            head_form = False
        elif version == PROOF_VERSION and obj.keys() == _PROOF_KEYS_HEAD:
            head_form = True
        elif version in (1, PROOF_VERSION):
            want = _PROOF_KEYS_V1 if version == 1 else _PROOF_KEYS_HEAD
            raise EncodingError(f"rehydration proof v{version}: fields must be {sorted(want)}")
        else:
            raise EncodingError(
                f"rehydration proof: unknown version {version!r:.20} (this code reads 1 and"
                f" {PROOF_VERSION})"
            )
        hops = obj["hops"]
        if (
            type(hops) is not list
            or len(hops) > _MAX_PROOF_HOPS
            or not all(type(h) is str for h in hops)
        ):
            raise EncodingError("rehydration proof: hops must be a list of base64 strings")
        try:
            decoded = tuple(binascii.a2b_base64(h, strict_mode=True) for h in hops)
        except (binascii.Error, ValueError) as exc:
            raise EncodingError(f"rehydration proof: a hop is not base64 ({exc})") from exc
        demand = Envelope.from_json(obj["demand"])
        receipt = Envelope.from_json(obj["receipt"])
        if head_form:
            if type(obj["head"]) is not str:
                raise EncodingError("rehydration proof: head must be the head's signed note")
            return cls(
                None,
                obj["head"].encode("utf-8"),
                demand,
                receipt,
                decoded,
                FoldProof.from_text(obj["fold_proof"]),
            )
        return cls(
            Envelope.from_json(obj["commitment"]),
            Envelope.from_json(obj["obligation"]),
            demand,
            receipt,
            decoded,
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> RehydrationProof:
        return cls.from_json(parse_json_object(data, what="rehydration proof"))


def _proof_statements(
    proof: RehydrationProof,
) -> tuple[Signed[Commitment], Signed[Obligation]]:
    """The commitment and obligation a proof stands on (signatures checked)."""
    if proof.fold is None:
        if proof.commitment is None:  # pragma: no cover - excluded by __post_init__
            raise EncodingError("rehydration proof without commitment or fold proof")
        c = open_statement(proof.commitment, Commitment)
        if isinstance(proof.obligation, bytes):  # pragma: no cover - excluded by __post_init__
            raise EncodingError("per-fold rehydration proof with a head note")
        return c, open_statement(proof.obligation, Obligation, signer=c.signer)
    # head form: the head signed by the origin it names, the fold proven under it
    if not isinstance(proof.obligation, bytes):  # pragma: no cover - excluded by __post_init__
        raise EncodingError("head-form rehydration proof without a head note")
    # (a custody bundle: served by a custodian, its statement bound to the fold and its
    # receipt in place of the origin's — contracts.custody.open_fold)
    try:
        fold = open_fold(proof.obligation, proof.fold)
    except ContractError as exc:
        try:
            head = head_digest(split_custody_bundle(proof.obligation)[0])[:12] + "…"
        except ContractError:
            head = "(unreadable)"
        # the error's own class where it takes a message alone; a bad signature line
        # (which also names its key) is reported as the bad signature it is
        kind = BadSignature if isinstance(exc, BadSignature) else type(exc)
        raise kind(f"inclusion proof under head {head} rejected: {exc}") from exc
    return fold.commitment, fold.obligation


def verify_rehydration(proof: RehydrationProof) -> tuple[str, str]:
    """Check one full rehydration; return (commitment digest, receipt digest).

    Per-fold form: the commitment and obligation are the origin's. Head form:
    the head is signed by its origin and the fold proof's record is included
    under the head's root (:func:`contracts.heads.verify_fold`); the fold's
    commitment digest is the record's leaf hash. Both: the demand asked for
    all leaves of that fold, under that obligation (head); the receipt is the
    origin's SERVED answer to it and the hop bytes reproduce the fold's root
    (:func:`verify_served`).
    """
    c, o = _proof_statements(proof)
    d = open_statement(proof.demand, Demand)
    if o.statement.origin != c.statement.origin:
        raise BindingMismatch(f"rehydration of {c.digest[:12]}…: obligation by another origin")
    if d.statement.obligation != o.digest or d.statement.commitment != c.digest:
        raise BindingMismatch(f"rehydration of {c.digest[:12]}…: statements do not chain")
    if d.statement.leaves is not None:
        raise NotAuthorized(
            f"rehydration of {c.digest[:12]}… fetched {len(d.statement.leaves)} leaves,"
            f" not the full fold of {c.statement.leaf_count}"
        )
    served = verify_served(proof.receipt, proof.hops, demand=d, obligation=o, commitment=c)
    return c.digest, served.receipt.digest


def verify_attestation(
    attestation: EnvelopeInput | Signed[Attestation],
    *,
    value_digest: str,
    policy: TrustPolicy,
    now: int,
    rehydrations: Sequence[RehydrationProof] = (),
    value_commitments: Collection[str] = (),
) -> Signed[Attestation]:
    """Raise unless ``attestation`` may raise an axis of this value at ``now``.

    For ``reconstruction`` pass the value's commitment digests and one
    :class:`RehydrationProof` per commitment; the attestation must cite
    exactly those proofs' receipts.
    """
    # (1) signed by the attester it names
    signed = (
        attestation if isinstance(attestation, Signed) else open_statement(attestation, Attestation)
    )
    a, tag = signed.statement, f"attestation {signed.digest[:12]}…"
    # (2) A2: bound to this value
    if a.value_digest != value_digest:
        raise DigestMismatch(f"{tag} is for value {a.value_digest[:12]}…, not {value_digest[:12]}…")
    # (3) A7: within its validity window
    if now >= a.expires_at:
        raise Expired(f"{tag} expired at {format_ms(a.expires_at)} (now {format_ms(now)})")
    if now < a.issued_at:
        raise Expired(f"{tag} is not valid before {format_ms(a.issued_at)} (now {format_ms(now)})")
    # (4) A7: key not revoked
    revoked = policy.revoked_at(a.attester)
    if revoked is not None and now >= revoked:
        raise Revoked(
            f"{tag}: attester {a.attester[:16]}… was revoked at {format_ms(revoked)}"
            f" (now {format_ms(now)})"
        )
    # (5) A3: the policy lets this attester raise this axis this far
    ceiling = policy.ceiling(a.attester, a.axis)
    if ceiling is None:
        raise NotAuthorized(f"{tag}: attester {a.attester[:16]}… may not raise {a.axis.value}")
    if a.floor > ceiling:
        raise NotAuthorized(
            f"{tag}: raises {a.axis.value} to {a.floor:g}, above the ceiling {ceiling:g}"
            f" for attester {a.attester[:16]}…"
        )
    # (6) A4: reconstruction only with a full verified rehydration, cited
    if a.axis is Axis.RECONSTRUCTION:
        _verify_reconstruction(signed, rehydrations, value_commitments)
    return signed


def _verify_reconstruction(
    signed: Signed[Attestation],
    rehydrations: Sequence[RehydrationProof],
    value_commitments: Collection[str],
) -> None:
    tag = f"attestation {signed.digest[:12]}…"
    needed = set(value_commitments)
    if not needed or not rehydrations:
        raise NotAuthorized(
            f"{tag}: reconstruction is raised only with receipts of a full verified rehydration"
        )
    covered: set[str] = set()
    receipts: set[str] = set()
    for proof in rehydrations:
        try:
            commitment, receipt = verify_rehydration(proof)
        except ContractError as exc:
            raise NotAuthorized(f"{tag}: rehydration proof does not verify: {exc}") from exc
        covered.add(commitment)
        receipts.add(receipt)
    missing = needed - covered
    if missing:
        raise NotAuthorized(
            f"{tag}: {len(missing)} commitment(s) of the value not rehydrated,"
            f" e.g. {sorted(missing)[0][:12]}…"
        )
    if set(signed.statement.cites) != receipts:
        raise NotAuthorized(f"{tag}: cites receipts other than the verified rehydration's")


def check_attestation(
    attestation: EnvelopeInput | Signed[Attestation],
    *,
    value_digest: str,
    policy: TrustPolicy,
    now: int,
    rehydrations: Sequence[RehydrationProof] = (),
    value_commitments: Collection[str] = (),
) -> CheckResult[Signed[Attestation]]:
    """:func:`verify_attestation` returning a falsy result instead of raising."""
    return run_check(
        lambda: verify_attestation(
            attestation,
            value_digest=value_digest,
            policy=policy,
            now=now,
            rehydrations=rehydrations,
            value_commitments=value_commitments,
        )
    )


@dataclass(frozen=True, slots=True)
class AttestationOutcome:
    """Scores after applying attestations, and what counted or did not."""

    scores: Mapping[Axis, float]
    applied: tuple[Signed[Attestation], ...]
    rejected: tuple[tuple[str, str], ...]
    discharged: frozenset[str]


def apply_attestations(
    scores: Mapping[Axis, float],
    attestations: Iterable[EnvelopeInput | Signed[Attestation]],
    *,
    value_digest: str,
    policy: TrustPolicy,
    now: int,
    rehydrations: Sequence[RehydrationProof] = (),
    value_commitments: Collection[str] = (),
) -> AttestationOutcome:
    """A1: the only way a score goes up. Each valid attestation lifts its axis
    to at least its floor; invalid ones are listed with the reason and change
    nothing. ``rejected`` holds (digest or "?", reason)."""
    result = dict(scores)
    applied: list[Signed[Attestation]] = []
    rejected: list[tuple[str, str]] = []
    discharged: set[str] = set()
    for item in attestations:
        check = check_attestation(
            item,
            value_digest=value_digest,
            policy=policy,
            now=now,
            rehydrations=rehydrations,
            value_commitments=value_commitments,
        )
        if check.value is None:
            ident = item.digest if isinstance(item, Signed | Envelope) else "?"
            rejected.append((ident, check.reason))
            continue
        a = check.value.statement
        result[a.axis] = max(result.get(a.axis, 0.0), a.floor)
        discharged.update(a.discharged)
        applied.append(check.value)
    return AttestationOutcome(
        scores=result,
        applied=tuple(applied),
        rejected=tuple(rejected),
        discharged=frozenset(discharged),
    )


def remaining_taints(tainted_by: Iterable[str], discharged: Collection[str]) -> frozenset[str]:
    """A5: the taints a blocklist gate still sees — all but exactly the discharged ones."""
    return frozenset(t for t in tainted_by if t not in discharged)


def attestation_hop_fields(attestation: Signed[Attestation], *, hop_id: str) -> dict[str, Any]:
    """A6: the hop recording an attestation in the attester's append-only log.

    Pass the result to :func:`contracts.hops.hop_bytes` with the attester's
    node id and epoch; the hop names the attestation by digest.
    """
    a = attestation.statement
    return {
        "hop_id": hop_id,
        "op": "ATTEST",
        "attestation": attestation.digest,
        "attester": a.attester,
        "value_digest": a.value_digest,
        "axis": a.axis.value,
        "floor": a.floor,
        "discharged": list(a.discharged),
        "cites": list(a.cites),
        "issued_at": a.issued_at,
        "expires_at": a.expires_at,
    }
