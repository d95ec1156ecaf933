"""A holder's demands from a per-fold template are ``build_demand``'s, byte for byte.

:class:`contracts.serve.DemandTemplate` packs what does not change between
two demands for one fold once; what it signs must be exactly what
``build_demand`` signs (same statement, same envelope, same bytes), for a
fold of its own and for each fold under one head (whose obligations share
the head's digest), and a nonce it is given is checked as ``build_demand``
checks one.
"""

from __future__ import annotations

import pytest

from contracts.envelope import EnvelopeSigner, sign_envelope
from contracts.heads import FoldInput, HeadLog, VerifiedFold, verify_fold
from contracts.identity import Identity
from contracts.serve import DemandTemplate, build_commitment, build_demand, build_obligation
from contracts.signed import Signed, open_statement
from contracts.statements import Demand, Obligation

NOW = 1_795_946_400_123
ORIGIN = Identity.from_seed(b"o" * 32)
HOLDER = Identity.from_seed(b"h" * 32)
HOPS = [b'{"hop": %d}' % i for i in range(5)]


def _head_folds() -> list[VerifiedFold]:
    folds = [FoldInput(value_ref=f"v{i}", fold_seq=0, hops=HOPS[i:]) for i in range(3)]
    compaction = HeadLog(ORIGIN, "e1").compact(
        folds, serve_until=NOW + 60_000, deadline_ms=500, endpoints=["o:1"], issued_at=NOW
    )
    return [verify_fold(compaction.proofs[f"v{i}"], compaction.head) for i in range(3)]


def _per_fold_obligation() -> Signed[Obligation]:
    commitment = build_commitment(
        ORIGIN, epoch="e1", value_ref="v", fold_seq=0, hops=HOPS, issued_at=NOW
    )
    return build_obligation(
        ORIGIN,
        commitment,
        serve_until=NOW + 60_000,
        deadline_ms=500,
        endpoints=["o:1"],
        issued_at=NOW,
    )


def test_a_templated_demand_is_build_demand_byte_for_byte() -> None:
    obligations = [_per_fold_obligation(), *(f.obligation for f in _head_folds())]
    for obligation in obligations:
        template = DemandTemplate(HOLDER, obligation)
        for now, nonce in ((NOW, "ab" * 16), (NOW + 1, "n" * 16), (0, "~" * 128)):
            signed, data = template.sign(now, nonce=nonce)
            expected = build_demand(HOLDER, obligation, now=now, nonce=nonce)
            assert signed.statement == expected.statement
            assert signed.envelope == expected.envelope
            assert data == expected.to_bytes()
            assert open_statement(data, Demand, signer=HOLDER.node_id) == expected


def test_folds_under_one_head_get_demands_for_their_own_commitments() -> None:
    folds = _head_folds()
    assert len({f.obligation.digest for f in folds}) == 1  # the head's digest, shared
    statements = [DemandTemplate(HOLDER, f.obligation).sign(NOW)[0].statement for f in folds]
    assert [s.commitment for s in statements] == [f.commitment.digest for f in folds]


def test_fresh_nonces_differ_and_a_bad_nonce_is_refused() -> None:
    template = DemandTemplate(HOLDER, _per_fold_obligation())
    a, b = template.sign(NOW)[0], template.sign(NOW)[0]
    assert a.statement.nonce != b.statement.nonce
    for bad in ("short", "has space in it ok", "x" * 129, "é" * 16):
        with pytest.raises(ValueError, match="nonce"):
            template.sign(NOW, nonce=bad)
        with pytest.raises(ValueError, match="nonce"):
            build_demand(HOLDER, _per_fold_obligation(), now=NOW, nonce=bad).to_bytes()


def test_envelope_signer_gives_the_envelope_with_its_bytes() -> None:
    signer = EnvelopeSigner(ORIGIN, "application/vnd.provnet.test+bin")
    for payload in (b"", b"x", bytes(range(256)) * 3):
        envelope, data = signer.sign_envelope(payload)
        expected = sign_envelope(ORIGIN, "application/vnd.provnet.test+bin", payload)
        assert envelope == expected
        assert data == expected.to_bytes() == signer.sign(payload)


def test_a_demand_batch_signed_from_a_template_is_build_demand_batch_byte_for_byte() -> None:
    from contracts.batch import DEMAND_BATCH_TYPE, build_demand_batch, sign_demand_batch

    folds = [(f.obligation.statement, f.obligation.digest, None) for f in _head_folds()]
    origin = ORIGIN.node_id
    expected_envelope, expected_batch = build_demand_batch(
        HOLDER, folds, origin=origin, nonce="cd" * 16, now=NOW
    )
    signer = EnvelopeSigner(HOLDER, DEMAND_BATCH_TYPE)
    envelope, batch, data = sign_demand_batch(
        signer, folds, origin=origin, nonce="cd" * 16, now=NOW
    )
    assert (envelope, batch) == (expected_envelope, expected_batch)
    assert data == expected_envelope.to_bytes()
    with pytest.raises(ValueError, match="demand batches"):
        sign_demand_batch(
            EnvelopeSigner(HOLDER, "application/vnd.provnet.test+bin"),
            folds,
            origin=origin,
            nonce="cd" * 16,
            now=NOW,
        )
