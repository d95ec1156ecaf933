"""Golden vectors: one file per statement kind, from fixed keys and a fixed clock.

Demands and receipts have one form (``contracts.batch``, payload version 3):
a demand naming one fold is a batch of one (``demand.json``,
``receipt-*.json``, the evidence citing them); the ``*-batch-v3.json`` files
(:func:`build_v3_vectors`) name several folds under one signature.

Regenerate on purpose (after a deliberate format change) with::

    .venv/bin/python -m tests.contracts.vectors_gen --write

``test_vectors.py`` rebuilds them in memory and compares byte for byte.
Ed25519 signatures are deterministic (RFC 8032), so the same keys, clock
and statements always give the same bytes.
"""

from __future__ import annotations

import argparse
import base64
import sys
from collections.abc import Callable
from pathlib import Path

from contracts import (
    Axis,
    Receipt,
    ReceiptStatus,
    RefusalReason,
    RehydrationProof,
    TrustPolicy,
    attestation_hop_fields,
    build_attestation,
    build_commitment,
    build_delivery_receipt,
    build_demand,
    build_witness_report,
    canonical_bytes,
    cite_head,
    equivocation_evidence,
    hop_bytes,
    judge_answer,
    sha256_hex,
    sign_served,
    sign_statement,
    split_view_evidence,
    unanswered_evidence,
)
from contracts.batch import receipt_item
from contracts.evidence import Evidence, EvidenceKind
from contracts.heads import FoldInput, HeadLog
from contracts.lazy import judge_fold_answer
from contracts.signed import Signed
from tests.contracts._support import (
    DAY,
    EPOCH,
    HOUR,
    NOW,
    HeadWorld,
    fixed_identity,
    make_batch_world,
    make_head_world,
    make_hops,
    make_world,
)

__all__ = ["VECTOR_DIR", "build_vectors", "main"]

VECTOR_DIR = Path(__file__).with_name("vectors")
KEY_NAMES = ("origin", "holder", "witness", "witness2", "attester", "stranger")


def _head_demand_vectors(put: Callable[[str, bytes], None], w: HeadWorld, suffix: str) -> None:
    """A demand under a head and what answers it: the served receipt, the A4
    rehydration proof citing it, and head-cited ``bad_data``/``refused`` evidence
    (file names ending in ``suffix``: the statements' form is the world's)."""
    put(f"demand-head{suffix}.json", w.demand.to_bytes())
    hops = w.hops["value:42"]
    served = w.answer(w.demand, hops, now=NOW + 2_000)
    put(f"receipt-head-served{suffix}.json", served.to_bytes())
    # A4 under heads (rehydration proof JSON version 2): what a holder of a
    # head-form value cites for a reconstruction attestation
    put(
        f"rehydration-proof-head{suffix}.json",
        RehydrationProof.under_head(
            head=w.head, fold=w.fold.proof, demand=w.demand, receipt=served, hops=hops
        ).to_bytes(),
    )
    tampered = [hops[0].replace(b'"step":', b'"step":9'), *hops[1:]]
    lying = sign_served(
        w.origin,
        w.demand,
        obligation=w.fold.obligation,
        commitment=w.fold.commitment,
        hops=tampered,
        now=NOW + 2_000,
    )
    refused = w.answer(w.demand, None, now=NOW + 2_000)
    for kind, receipt, served_hops in (("bad_data", lying, tampered), ("refused", refused, [])):
        name = f"evidence-{kind}-head{suffix}.json"
        judged = judge_answer(
            receipt,
            served_hops,
            demand=w.demand,
            obligation=w.fold.obligation,
            commitment=w.fold.commitment,
            reported_at=NOW + 4_000,
        )
        if judged.evidence is None:
            raise RuntimeError(f"golden head evidence for {name} not produced: {judged.reason}")
        put(name, cite_head(judged.evidence, w.fold).to_bytes())


def build_vectors() -> dict[str, bytes]:
    """File name → exact file content."""
    w = make_world(n_hops=8, serve_until=NOW + DAY)
    out: dict[str, bytes] = {}

    def put(name: str, data: bytes) -> None:
        out[name] = data + b"\n"

    put(
        "keys.json",
        canonical_bytes(
            {
                "clock_ms": NOW,
                "seed_rule": "sha256('provnet test key ' + name)",
                "node_ids": {n: fixed_identity(n).node_id for n in KEY_NAMES},
            }
        ),
    )
    put(
        "hops.json",
        canonical_bytes(
            {
                "origin": w.origin.node_id,
                "epoch": EPOCH,
                "hops_b64": [base64.standard_b64encode(h).decode() for h in w.hops],
                "root": w.commitment.statement.root,
            }
        ),
    )
    put("commitment.json", w.commitment.to_bytes())
    put("obligation.json", w.obligation.to_bytes())
    put("demand.json", w.demand.to_bytes())

    served = w.answer(w.demand, now=NOW + 2_000)
    put("receipt-served.json", served.to_bytes())
    partial_demand = build_demand(
        w.holder, w.obligation, now=NOW + 1_000, leaves=[1, 6], nonce="b2" * 16
    )
    put("demand-partial.json", partial_demand.to_bytes())
    partial = w.answer(partial_demand, now=NOW + 2_000)
    put("receipt-partial.json", partial.to_bytes())
    expired = w.answer(w.demand, now=NOW + DAY)
    put("receipt-expired.json", expired.to_bytes())
    refused = sign_statement(
        w.origin,
        Receipt(
            origin=w.origin.node_id,
            obligation=w.obligation.digest,
            commitment=w.commitment.digest,
            demand=w.demand.digest,
            nonce=w.demand.statement.nonce,
            status=ReceiptStatus.REFUSED,
            reason=RefusalReason.OVERLOADED,
            tree_size=len(w.hops),
            issued_at=NOW + 2_000,
        ),
    )
    put("receipt-refused.json", refused.to_bytes())
    pending_world = make_world(n_hops=8, provenance_pending=True)
    pending = pending_world.answer(pending_world.demand, now=NOW + 2_000, serve=False)
    put("receipt-pending.json", pending.to_bytes())

    value_digest = sha256_hex(b"provnet golden value")
    put(
        "delivery-receipt.json",
        build_delivery_receipt(
            w.holder,
            sender=w.origin.node_id,
            value_digest=value_digest,
            commitments=[w.commitment],
            obligations=[w.obligation],
            received_at=NOW + 500,
        ).to_bytes(),
    )
    witness_demand = build_demand(w.witness, w.obligation, now=NOW + 3_000, nonce="c3" * 16)
    put("demand-witness.json", witness_demand.to_bytes())
    silent = build_witness_report(
        w.witness, witness_demand, at=NOW + 9_000, address="127.0.0.1:50051"
    )
    put("witness-report.json", silent.to_bytes())
    attestation = build_attestation(
        w.attester,
        value_digest=value_digest,
        axis=Axis.RECONSTRUCTION,
        floor=1.0,
        discharged=["taint:unverified_web:3"],
        cites=[served.digest],
        issued_at=NOW + 3_000,
        expires_at=NOW + HOUR,
    )
    put("attestation.json", attestation.to_bytes())
    put(
        "attestation-hop.json",
        hop_bytes(attestation_hop_fields(attestation, hop_id="a000001"), w.attester.node_id, EPOCH),
    )
    put(
        "trust-policy.json",
        TrustPolicy(
            grants={w.attester.node_id: {Axis.RECONSTRUCTION: 1.0, Axis.VERIFICATION: 0.9}},
            revocations={w.stranger.node_id: NOW},
        ).to_bytes(),
    )

    # Evidence, one file per kind.
    tampered = [h.replace(b'"step":2', b'"step":20') for h in w.hops]
    lying = sign_served(
        w.origin,
        w.demand,
        obligation=w.obligation,
        commitment=w.commitment,
        hops=tampered,
        now=NOW + 2_000,
    )
    bad = judge_answer(
        lying,
        tampered,
        demand=w.demand,
        obligation=w.obligation,
        commitment=w.commitment,
        reported_at=NOW + 4_000,
    )
    if bad.evidence is None or bad.evidence.kind is not EvidenceKind.BAD_DATA:
        raise RuntimeError(f"golden bad_data evidence not produced: {bad.reason}")
    put("evidence-bad_data.json", bad.evidence.to_bytes())
    ref = judge_answer(
        refused,
        [],
        demand=w.demand,
        obligation=w.obligation,
        commitment=w.commitment,
        reported_at=NOW + 4_000,
    )
    if ref.evidence is None:
        raise RuntimeError(f"golden refused evidence not produced: {ref.reason}")
    put("evidence-refused.json", ref.evidence.to_bytes())
    other = build_commitment(
        w.origin,
        epoch=EPOCH,
        value_ref="value:42",
        fold_seq=3,
        hops=tampered,
        issued_at=NOW + 5_000,
    )
    put(
        "evidence-equivocation.json",
        equivocation_evidence(w.commitment, other, reported_at=NOW + 6_000).to_bytes(),
    )
    unanswered: Evidence = unanswered_evidence(
        w.demand,
        obligation=w.obligation,
        commitment=w.commitment,
        re_asks=3,
        reported_at=NOW + 10_000,
        witness_demands=[witness_demand],
        witness_reports=[silent],
    )
    put("evidence-unanswered.json", unanswered.to_bytes())
    cleared_by = w.answer(witness_demand, now=NOW + 20_000)
    put("evidence-unanswered-cleared.json", unanswered.with_answer(cleared_by).to_bytes())
    out.update(build_head_vectors())
    out.update(build_v3_vectors())
    return out


def build_head_vectors() -> dict[str, bytes]:
    """Design revision 2: a signed head, a fold proof, and the evidence that cites heads."""
    out: dict[str, bytes] = {}

    def put(name: str, data: bytes) -> None:
        out[name] = data + b"\n"

    w = make_head_world(values=3, compactions=2)
    out["head.note"] = w.head.note  # a signed note ends in its own newline
    out["fold-proof.bin"] = w.fold.proof.to_bytes()  # binary: its one encoding, as it is
    _head_demand_vectors(put, w, "")

    # Two views of one epoch's log, diverging at compaction 1.
    origin = fixed_identity("origin")
    x, y = HeadLog(origin, EPOCH), HeadLog(origin, EPOCH)
    for c in range(4):
        for view, shift in ((x, 0), (y, 1000 if c >= 1 else 0)):
            fold_hops = make_hops(origin.node_id, 3, start=1 + 10 * c + shift)
            folds = [FoldInput("value:7", c, fold_hops)]
            view.compact(
                folds,
                serve_until=NOW + DAY,
                deadline_ms=2_000,
                endpoints=["127.0.0.1:50051"],
                issued_at=NOW + c,
            )
    put(
        "evidence-split_view.json",
        split_view_evidence(x.heads[1], y.heads[1], reported_at=NOW + 6_000).to_bytes(),
    )
    put(
        "evidence-split_view-consistency.json",
        split_view_evidence(
            x.heads[1], y.heads[3], reported_at=NOW + 6_000, path=y.consistency_path(1, 3)
        ).to_bytes(),
    )
    return out


def build_v3_vectors() -> dict[str, bytes]:
    """A demand batch and its receipt batch (``contracts.batch``), and per-fold evidence
    citing them: ``bad_data`` for one fold of three, ``refused`` for another, and an
    ``unanswered`` suspicion cleared by the batch receipt."""
    out: dict[str, bytes] = {}

    def put(name: str, data: bytes) -> None:
        out[name] = data + b"\n"

    b = make_batch_world(values=3)
    put("demand-batch-v3.json", b.demand.to_bytes())
    served = b.answer(now=NOW + 2_000)
    put("receipt-batch-v3.json", served.to_bytes())
    tampered = (b.hops[1][0].replace(b'"step":', b'"step":9'), *b.hops[1][1:])
    lying = b.answer([b.hops[0], tampered, None], now=NOW + 2_000)
    for kind, i, hops in (("bad_data", 1, tampered), ("refused", 2, ())):
        judged = judge_fold_answer(
            Signed(lying, receipt_item(lying.payload, b.key(i))),
            hops,
            demand=b.demands[i],
            fold=b.folds[i],
            reported_at=NOW + 4_000,
        )
        if judged.evidence is None:
            raise RuntimeError(f"golden batch evidence {kind} not produced: {judged.reason}")
        put(f"evidence-{kind}-batch-v3.json", judged.evidence.to_bytes())
    suspicion = unanswered_evidence(
        b.demands[0],
        obligation=b.folds[0].obligation,
        commitment=b.folds[0].commitment,
        re_asks=1,
        reported_at=NOW + 10_000,
    )
    put(
        "evidence-unanswered-cleared-batch-v3.json",
        cite_head(suspicion, b.folds[0]).with_answer(served).to_bytes(),
    )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the committed vector files")
    args = parser.parse_args(argv)
    vectors = build_vectors()
    if not args.write:
        stale = [
            n
            for n, d in vectors.items()
            if not (VECTOR_DIR / n).is_file() or (VECTOR_DIR / n).read_bytes() != d
        ]
        print("\n".join(stale) if stale else "vectors up to date")
        return 1 if stale else 0
    VECTOR_DIR.mkdir(exist_ok=True)
    for name, data in sorted(vectors.items()):
        (VECTOR_DIR / name).write_bytes(data)
    print(f"wrote {len(vectors)} vector files to {VECTOR_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
