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
import functools
from collections.abc import Sequence

from contracts._fields import MAX_TIME_MS
from contracts.batch import receipt_batch_head, served_whole_item
from contracts.envelope import Envelope
from contracts.errors import ContractError
from contracts.evidence import Answer, AnswerKind, cite_head, judge_answer
from contracts.heads import VerifiedFold
from contracts.merkle import KnownRoots, leaf_hash, merkle_root, root_from_inclusion
from contracts.serve import ServedFold
from contracts.signed import Signed, parse_statement
from contracts.statements import Demand, Receipt, ReceiptStatus

__all__ = [
    "judge_fold_answer",
    "served_batch_without_signature",
    "served_without_signature",
]


def _reproduces(leaves: Sequence[bytes], root: bytes, known: KnownRoots | None) -> bool:
    """``merkle_root(leaves) == root``, through ``known`` when given."""
    return known.reproduces(leaves, root) if known is not None else merkle_root(leaves) == root


def served_without_signature(
    receipt: bytes | Envelope | Signed[Receipt],
    hops: Sequence[bytes],
    *,
    demand: Signed[Demand],
    fold: VerifiedFold,
    known: KnownRoots | None = None,
) -> ServedFold | None:
    """Step 1 of :func:`judge_fold_answer`: the served fold, or None if the bytes decide nothing.

    ``known``: the roots whole folds were already seen to reproduce (bytes served
    again are compared with those instead of hashed: :class:`~contracts.merkle.KnownRoots`)."""
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
        if len(hops) != record.leaf_count or not _reproduces(hops, root, known):
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


#: A fold's faithful item, packed once per fold (its fields are immutable).
_whole_item = functools.lru_cache(maxsize=4096)(served_whole_item)


def served_batch_without_signature(
    payload: bytes,
    hops: Sequence[Sequence[bytes]],
    *,
    origin: str,
    demand: str,
    nonce: str,
    folds: Sequence[VerifiedFold],
    known: KnownRoots | None = None,
) -> bool:
    """Step 1 of :func:`judge_fold_answer` for every fold of a whole-fold demand batch at once.

    True when ``payload`` (a receipt's) is exactly what a faithful origin
    signs for the demand ``demand`` / ``nonce`` of whole folds ``folds`` (in
    the demand's order; a demand for one fold is a batch of one) — the origin's id, that
    demand's digest and nonce, any ``issued_at`` in range, item ``i`` SERVED
    for fold ``i`` with the fold's tree size and committed root, nothing
    else — and ``hops[i]`` reproduces fold ``i``'s root proven under its
    verified head. The items are compared as bytes with the ones the holder
    packs itself (:func:`contracts.batch.served_whole_item`) instead of being
    parsed: equal bytes decode to exactly those fields. Then the hops are the
    committed bytes and the receipt's signature decides nothing, as in
    :func:`served_without_signature`.

    False decides nothing either: the caller judges each fold on its own
    (:func:`judge_fold_answer`), verifying the receipt where it decides.
    ``known`` as for :func:`served_without_signature`.
    """
    if len(hops) != len(folds) or not folds:
        return False
    try:
        head = receipt_batch_head(origin, demand, nonce, 0, len(folds))
        items = [
            _whole_item(
                f.obligation.digest, f.commitment.digest, f.record.leaf_count, f.record.root
            )
            for f in folds
        ]
    except ValueError:
        return False
    # The head's bytes up to issued_at (u8 version, u8 kind, origin, demand), then
    # issued_at itself (u64, any value in range), then the nonce and item count.
    at = 66
    if (
        len(payload) != len(head) + sum(len(i) for i in items)
        or payload[:at] != head[:at]
        or int.from_bytes(payload[at : at + 8], "big") > MAX_TIME_MS
        or payload[at + 8 : len(head)] != head[at + 8 :]
        or payload[len(head) :] != b"".join(items)
    ):
        return False
    for fold, served in zip(folds, hops, strict=True):
        record = fold.record
        if len(served) != record.leaf_count or not _reproduces(
            served, bytes.fromhex(record.root), known
        ):
            return False
    return True


def judge_fold_answer(
    receipt: bytes | Envelope | Signed[Receipt],
    hops: Sequence[bytes],
    *,
    demand: Signed[Demand],
    fold: VerifiedFold,
    reported_at: int,
    known: KnownRoots | None = None,
) -> Answer:
    """Classify an answer for a fold under a verified head, verifying signatures lazily
    (``known`` as for :func:`served_without_signature`)."""
    # (1) hot path: served bytes that reproduce the signed root need no signature
    served = served_without_signature(receipt, hops, demand=demand, fold=fold, known=known)
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
