"""Verify where it carries information (design revision 2): the lazy judge.

:func:`judge_fold_answer` classifies an origin's answer to a demand for a
fold proven under an already verified head (:class:`~contracts.heads.VerifiedFold`):

1. **Hot path, no signature.** A SERVED receipt for this demand whose hop
   bytes reproduce the fold's root — the root the origin signed in the head,
   reached by the fold's inclusion proof — is served: the bytes are the
   committed bytes whoever sent them, so the receipt's signature decides
   nothing and is not checked (``served.receipt_verified`` is False). The
   receipt is parsed (bounded, strict) only to read its status, binding and,
   for a partial serve, the audit paths, which are verified by hashing.
2. **Only when it decides something is the receipt verified**: bytes that do
   not reproduce the root, or a receipt that is not SERVED, go to
   :func:`contracts.evidence.judge_answer`, which verifies the origin's
   signature and returns ``bad_data`` (signed leaves that miss the root),
   ``refused`` (a signed refusal before ``serve_until``), a legitimate
   non-answer, or an unattributable one (bad signature, bytes altered after
   signing). Evidence is re-cited as head + fold proof
   (:func:`contracts.evidence.cite_head`), so it verifies standalone.

Nothing weaker is accepted: the served hops are checked against a signed root
in both paths; only the *second* signature (the receipt's) is skipped when
it carries no information.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from contracts.envelope import Envelope
from contracts.errors import ContractError
from contracts.evidence import Answer, AnswerKind, cite_head, judge_answer
from contracts.heads import VerifiedFold
from contracts.merkle import leaf_hash, merkle_root, root_from_inclusion
from contracts.serve import ServedFold
from contracts.signed import Signed, parse_statement
from contracts.statements import Demand, Receipt, ReceiptStatus

__all__ = ["judge_fold_answer", "served_without_signature"]


def served_without_signature(
    receipt: bytes | Envelope | Signed[Receipt],
    hops: Sequence[bytes],
    *,
    demand: Signed[Demand],
    fold: VerifiedFold,
) -> ServedFold | None:
    """Step 1 of :func:`judge_fold_answer`: the served fold, or None if the bytes decide nothing."""
    try:
        r = receipt if isinstance(receipt, Signed) else parse_statement(receipt, Receipt)
    except ContractError:
        return None
    rs, ds = r.statement, demand.statement
    # (1) a SERVED answer to this demand (binding by digest and nonce: no signature)
    if (
        rs.status is not ReceiptStatus.SERVED
        or rs.demand != demand.digest
        or rs.nonce != ds.nonce
        or rs.leaves != ds.leaves
    ):
        return None
    record = fold.record
    root = bytes.fromhex(record.root)
    # (2) the bytes reproduce the root proven under the verified head
    if ds.leaves is None:
        if len(hops) != record.leaf_count or merkle_root(hops) != root:
            return None
        leaves: tuple[int, ...] = tuple(range(record.leaf_count))
    else:
        if not len(hops) == len(ds.leaves) == len(rs.proofs):
            return None
        try:
            for index, hop, path in zip(ds.leaves, hops, rs.proofs, strict=True):
                if root_from_inclusion(leaf_hash(hop), index, record.leaf_count, path) != root:
                    return None
        except ContractError:
            return None
        leaves = ds.leaves
    return ServedFold(receipt=r, leaves=leaves, hops=tuple(hops), receipt_verified=False)


def judge_fold_answer(
    receipt: bytes | Envelope | Signed[Receipt],
    hops: Sequence[bytes],
    *,
    demand: Signed[Demand],
    fold: VerifiedFold,
    reported_at: int,
) -> Answer:
    """Classify an answer for a fold under a verified head, verifying signatures lazily."""
    # (1) hot path: served bytes that reproduce the signed root need no signature
    served = served_without_signature(receipt, hops, demand=demand, fold=fold)
    if served is not None:
        return Answer(
            AnswerKind.SERVED,
            f"served {len(served.hops)} hop(s) reproducing the root under head"
            f" {fold.head.digest[:12]}…",
            served=served,
        )
    # (2) the receipt decides: verify it (from its envelope, even if it came
    # parsed), and cite the head in any evidence
    answer = judge_answer(
        receipt.envelope if isinstance(receipt, Signed) else receipt,
        hops,
        demand=demand,
        obligation=fold.obligation,
        commitment=fold.commitment,
        reported_at=reported_at,
    )
    if answer.evidence is not None:
        answer = dataclasses.replace(answer, evidence=cite_head(answer.evidence, fold))
    return answer
