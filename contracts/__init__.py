"""provnet contracts: pure, synchronous verification of the serve and attest contracts.

No I/O beyond key files, no clock: every check takes ``now`` (integer ms
since the Unix epoch, UTC). Nothing here imports ``nodes`` or ``harness``.

Internal: the supported interfaces are :mod:`nodes.api` and the ``provnet``
command line (docs/api.md); this package may change.

Module map (main entry points)::

    errors      ContractError tree; CheckResult (falsy on failure) for check_*
    canonical   canonical_bytes (RFC 8785), parse_json (bounded), format_ms
    identity    Identity (Ed25519 signing key), PublicKey; node id = raw public
                key hex; save_identity / load_identity (0600) / rotate_identity
    envelope    Envelope (DSSE JSON: to_bytes/from_bytes, digest, verify),
                pae, sign_envelope
    merkle      RFC 6962: leaf_hash, node_hash, merkle_root, MerkleTree.proof,
                root_from_inclusion, verify_inclusion; consistency_proof /
                MerkleTree.consistency, verify_consistency, consistency_roots
                (RFC 9162 §2.1.3/§2.1.4 input checks on every verification)
    note        C2SP signed notes: parse_note / encode_note (bounded,
                canonical), VerifierKey (vkeys), NoteKey (sign, cosign),
                key_id, open_note (name + key id select the key)
    checkpoint  C2SP tlog-checkpoint (one layout table) and cosignature/v1:
                Checkpoint, sign_checkpoint, cosign_checkpoint,
                verify_checkpoint (imported as modules, not re-exported)
    hops        hop_bytes(fields, origin, epoch): the one byte string per hop
    statements  Commitment, Obligation, Demand, Receipt, DeliveryReceipt,
                WitnessReport, Attestation, Head; Axis, ReceiptStatus,
                RefusalReason
    binary      the compact binary payloads (version 2) of Demand and Receipt:
                encode_/decode_demand, encode_/decode_receipt, payload types
                …demand.v2+bin / …receipt.v2+bin (the JSON form stays valid)
    batch       batched demands and receipts (version 3): one signed demand
                naming several folds of one origin, one signed receipt
                answering them; open_statement(..., fold=) reads one fold's
                item as its own Demand / Receipt
    head_note   a head as a C2SP tlog-checkpoint signed note (revision 3):
                sign_head, open_head (verify_checkpoint on the note's bytes),
                parse_head (unverified), SignedHead (note verbatim, digest
                of its text), head_digest
    heads       signed tree heads (revision 2): HeadLog (origin: one
                signature per compaction), FoldRecord, FoldProof,
                verify_fold, VerifiedFold (stands in for commitment +
                obligation), HeadCache (holder: a head verified once, by
                digest)
    lazy        judge_fold_answer: served bytes that reproduce a root under a
                verified head need no receipt signature
    signed      Signed[S] (envelope + statement, digest), sign_statement,
                open_statement (parse + verify), open_any
    rules       the origin's rules, once and pure: demand_is_fresh, expired,
                demand_due_ms, promise_refusal, holder_signature_decides
                (imported as a module)
    serve       origin: build_commitment, build_obligation,
                verify_demand / check_demand, NonceRegistry, answer_demand
                (what a correct origin answers), sign_served (sign exactly
                what is served), eviction_blockers (S5);
                holder: verify_delivery / check_delivery, build_demand,
                verify_served / check_served, build_delivery_receipt;
                witness: build_witness_report
    evidence    Evidence (standalone file), verify_evidence / check_evidence,
                judge_answer (classify a receipt), unanswered_evidence,
                equivocation_evidence, EquivocationDetector,
                split_view_evidence, judge_head_extension, cite_head
                (head-bound records)
    attest      TrustPolicy, build_attestation, verify_attestation /
                check_attestation, RehydrationProof, apply_attestations (the
                only way an axis goes up), remaining_taints,
                attestation_hop_fields
    witness     C2SP tlog-witness add-checkpoint as a pure state machine:
                parse_add_checkpoint / encode_add_checkpoint, add_checkpoint
                (cosignature | conflict | named rejection; split-view
                material), witness_vkey (imported as a module)
    witness_policy  C2SP tlog-policy file and quorum: parse_policy,
                check_quorum / verify_quorum (imported as a module)
    cli         provnet keys new|show, provnet evidence verify FILE

Digests ("commitment digest", "obligation digest", "receipt digest" …) are
the hex SHA-256 of a statement envelope's payload, which is the RFC 8785
canonical statement (or, for demands and receipts, its binary form):
``Signed.digest`` / ``Envelope.digest``. A value digest
is whatever the caller hashes to name a value (``sha256_hex`` of its
canonical bytes); attestations bind to it.

A holder's round trip::

    c, o = verify_delivery(commitment_bytes, obligation_bytes, now=now)
    d = build_demand(me, o, now=now)                # leaves=None: all
    answer = judge_answer(receipt_bytes, hops, demand=d, obligation=o,
                          commitment=c, reported_at=now)
    # answer.kind: served | legitimate | evidence | unattributable
"""

from __future__ import annotations

from contracts.attest import (
    AttestationOutcome,
    RehydrationProof,
    TrustPolicy,
    apply_attestations,
    attestation_hop_fields,
    build_attestation,
    check_attestation,
    remaining_taints,
    verify_attestation,
    verify_rehydration,
)
from contracts.canonical import (
    MAX_DEPTH,
    MAX_DOCUMENT_BYTES,
    canonical_bytes,
    format_ms,
    parse_json,
    parse_json_object,
    sha256_hex,
)
from contracts.envelope import (
    MAX_ENVELOPE_BYTES,
    MAX_SIGNATURES,
    Envelope,
    EnvelopeSignature,
    pae,
    sign_envelope,
)
from contracts.errors import (
    BadSignature,
    BindingMismatch,
    CheckResult,
    ContractError,
    DigestMismatch,
    EncodingError,
    Expired,
    KeyFileError,
    NotAuthorized,
    NotEvidence,
    NotServed,
    ReplayedNonce,
    Revoked,
    RootMismatch,
    VerificationError,
    run_check,
)
from contracts.evidence import (
    EVIDENCE_FORMAT,
    Answer,
    AnswerKind,
    EquivocationDetector,
    Evidence,
    EvidenceKind,
    EvidenceLevel,
    EvidenceStatus,
    EvidenceVerdict,
    check_evidence,
    cite_head,
    equivocation_evidence,
    judge_answer,
    judge_head_extension,
    split_view_evidence,
    unanswered_evidence,
    verify_evidence,
)
from contracts.head_note import (
    SignedHead,
    head_digest,
    open_head,
    parse_head,
    sign_head,
)
from contracts.heads import (
    FOLD_RECORD_TYPE,
    Compaction,
    FoldInput,
    FoldProof,
    FoldRecord,
    HeadCache,
    HeadLog,
    VerifiedFold,
    batch_record,
    build_head,
    verify_fold,
)
from contracts.hops import (
    MAX_HOP_BYTES,
    hop_bytes,
    parse_hop,
)
from contracts.identity import (
    NODE_ID_HEX_LEN,
    Identity,
    PublicKey,
    load_identity,
    rotate_identity,
    save_identity,
)
from contracts.lazy import judge_fold_answer, served_without_signature
from contracts.merkle import (
    EMPTY_ROOT,
    HASH_LEN,
    MerkleTree,
    consistency_proof,
    consistency_roots,
    inclusion_proof,
    leaf_hash,
    leaf_hashes,
    merkle_root,
    node_hash,
    root_from_inclusion,
    root_from_leaf_hashes,
    verify_consistency,
    verify_inclusion,
)
from contracts.serve import (
    NonceRegistry,
    ServedFold,
    answer_demand,
    build_commitment,
    build_delivery_receipt,
    build_demand,
    build_obligation,
    build_witness_report,
    check_delivery,
    check_demand,
    check_served,
    eviction_blockers,
    new_nonce,
    sign_served,
    verify_delivery,
    verify_demand,
    verify_receipt_binding,
    verify_served,
    verify_signed_leaves,
)
from contracts.signed import (
    AnySigned,
    Signed,
    open_any,
    open_statement,
    parse_statement,
    sign_statement,
    verify_parsed,
)
from contracts.statements import (
    AXES,
    PAYLOAD_TYPE_PREFIX,
    Attestation,
    Axis,
    Commitment,
    DeliveryReceipt,
    Demand,
    Head,
    Obligation,
    Receipt,
    ReceiptStatus,
    RefusalReason,
    Statement,
    StatementKind,
    WitnessOutcome,
    WitnessReport,
    payload_type_for,
)

__all__ = [
    "AXES",
    "EMPTY_ROOT",
    "EVIDENCE_FORMAT",
    "FOLD_RECORD_TYPE",
    "HASH_LEN",
    "MAX_DEPTH",
    "MAX_DOCUMENT_BYTES",
    "MAX_ENVELOPE_BYTES",
    "MAX_HOP_BYTES",
    "MAX_SIGNATURES",
    "NODE_ID_HEX_LEN",
    "PAYLOAD_TYPE_PREFIX",
    "Answer",
    "AnswerKind",
    "AnySigned",
    "Attestation",
    "AttestationOutcome",
    "Axis",
    "BadSignature",
    "BindingMismatch",
    "CheckResult",
    "Commitment",
    "Compaction",
    "ContractError",
    "DeliveryReceipt",
    "Demand",
    "DigestMismatch",
    "EncodingError",
    "Envelope",
    "EnvelopeSignature",
    "EquivocationDetector",
    "Evidence",
    "EvidenceKind",
    "EvidenceLevel",
    "EvidenceStatus",
    "EvidenceVerdict",
    "Expired",
    "FoldInput",
    "FoldProof",
    "FoldRecord",
    "Head",
    "HeadCache",
    "HeadLog",
    "Identity",
    "KeyFileError",
    "MerkleTree",
    "NonceRegistry",
    "NotAuthorized",
    "NotEvidence",
    "NotServed",
    "Obligation",
    "PublicKey",
    "Receipt",
    "ReceiptStatus",
    "RefusalReason",
    "RehydrationProof",
    "ReplayedNonce",
    "Revoked",
    "RootMismatch",
    "ServedFold",
    "Signed",
    "SignedHead",
    "Statement",
    "StatementKind",
    "TrustPolicy",
    "VerificationError",
    "VerifiedFold",
    "WitnessOutcome",
    "WitnessReport",
    "answer_demand",
    "apply_attestations",
    "attestation_hop_fields",
    "batch_record",
    "build_attestation",
    "build_commitment",
    "build_delivery_receipt",
    "build_demand",
    "build_head",
    "build_obligation",
    "build_witness_report",
    "canonical_bytes",
    "check_attestation",
    "check_delivery",
    "check_demand",
    "check_evidence",
    "check_served",
    "cite_head",
    "consistency_proof",
    "consistency_roots",
    "equivocation_evidence",
    "eviction_blockers",
    "format_ms",
    "head_digest",
    "hop_bytes",
    "inclusion_proof",
    "judge_answer",
    "judge_fold_answer",
    "judge_head_extension",
    "leaf_hash",
    "leaf_hashes",
    "load_identity",
    "merkle_root",
    "new_nonce",
    "node_hash",
    "open_any",
    "open_head",
    "open_statement",
    "pae",
    "parse_head",
    "parse_hop",
    "parse_json",
    "parse_json_object",
    "parse_statement",
    "payload_type_for",
    "remaining_taints",
    "root_from_inclusion",
    "root_from_leaf_hashes",
    "rotate_identity",
    "run_check",
    "save_identity",
    "served_without_signature",
    "sha256_hex",
    "sign_envelope",
    "sign_head",
    "sign_served",
    "sign_statement",
    "split_view_evidence",
    "unanswered_evidence",
    "verify_attestation",
    "verify_consistency",
    "verify_delivery",
    "verify_demand",
    "verify_evidence",
    "verify_fold",
    "verify_inclusion",
    "verify_parsed",
    "verify_receipt_binding",
    "verify_rehydration",
    "verify_served",
    "verify_signed_leaves",
]
