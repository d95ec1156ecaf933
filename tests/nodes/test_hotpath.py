"""The verified demand → receipt hot path keeps every check while doing less work.

* the origin hashes a served fold once: the root it checks against its
  commitment is the root it signs, and stored bytes that miss the committed
  root are still refused (ABSENT/EVICTED), never signed;
* ``sign_served`` (what a lying origin uses) still signs the root of exactly
  the bytes given, so a holder turns that into ``bad_data``;
* a restarted origin still refuses demands dated below the replay floor its
  previous run left when that floor is further ahead than a lease (the clock
  went back), its start waiting no longer than a lease; that an origin back
  at once serves fresh demands unaccused is in ``test_restart_accuracy``.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from contracts.errors import BadSignature
from contracts.evidence import AnswerKind, judge_answer
from contracts.identity import Identity
from contracts.merkle import merkle_root
from contracts.serve import (
    answer_demand,
    build_commitment,
    build_demand,
    build_obligation,
    sign_served,
    verify_served,
)
from contracts.signed import Signed, open_statement
from contracts.statements import Commitment, Obligation, Receipt, ReceiptStatus, RefusalReason
from nodes.app import load_or_create_identity
from nodes.config import NodeConfig
from nodes.errors import DemandPredatesRestart
from nodes.services import REPLAY_FLOOR_FILENAME, REPLAY_FLOOR_LEASE_MS, NodeCore
from nodes.transport import InMemoryTransport
from tests.nodes.rpc_support import accusation_audit, hop_json

__all__ = ["accusation_audit"]

NOW = 1_795_946_400_000
ORIGIN = Identity.from_seed(b"o" * 32)
HOLDER = Identity.from_seed(b"h" * 32)
HOPS = [hop_json(step) for step in range(1, 6)]


def _statements() -> tuple[Signed[Commitment], Signed[Obligation]]:
    commitment = build_commitment(
        ORIGIN, epoch="e1", value_ref="v", fold_seq=0, hops=HOPS, issued_at=NOW
    )
    obligation = build_obligation(
        ORIGIN,
        commitment,
        serve_until=NOW + 60_000,
        deadline_ms=500,
        endpoints=["origin.mem:1"],
        issued_at=NOW,
    )
    return commitment, obligation


def test_served_receipt_signs_the_root_the_origin_checked_and_the_holder_verifies_it() -> None:
    commitment, obligation = _statements()
    demand = build_demand(HOLDER, obligation, now=NOW)
    receipt = answer_demand(
        ORIGIN,
        demand,
        obligation=obligation,
        commitment=commitment,
        hops=HOPS,
        now=NOW,
    )
    assert receipt.statement.status is ReceiptStatus.SERVED
    assert receipt.statement.served_root == merkle_root(HOPS).hex()
    served = verify_served(
        receipt.to_bytes(),
        HOPS,
        demand=demand,
        obligation=obligation,
        commitment=commitment,
    )
    assert served.hops == tuple(HOPS)


def test_stored_bytes_missing_the_committed_root_are_refused_store_corrupted_not_signed() -> None:
    commitment, obligation = _statements()
    demand = build_demand(HOLDER, obligation, now=NOW)
    for stored in ([*HOPS[:4], b'{"altered":true}'], HOPS[:4]):
        receipt = answer_demand(
            ORIGIN,
            demand,
            obligation=obligation,
            commitment=commitment,
            hops=stored,
            now=NOW,
        )
        assert receipt.statement.status is ReceiptStatus.ABSENT
        assert receipt.statement.reason is RefusalReason.STORE_CORRUPTED
        assert receipt.statement.served_root is None


def test_receipt_signed_over_altered_bytes_is_bad_data_and_a_flipped_bit_unattributable() -> None:
    commitment, obligation = _statements()
    demand = build_demand(HOLDER, obligation, now=NOW)
    altered = [*HOPS[:4], b'{"altered":true}']
    lying = sign_served(
        ORIGIN,
        demand,
        obligation=obligation,
        commitment=commitment,
        hops=altered,
        now=NOW,
    )
    assert lying.statement.served_root == merkle_root(altered).hex()
    verdict = judge_answer(
        lying.to_bytes(),
        altered,
        demand=demand,
        obligation=obligation,
        commitment=commitment,
        reported_at=NOW,
    )
    assert verdict.kind is AnswerKind.EVIDENCE
    # The directly written envelope bytes still carry a signature that is checked.
    honest = answer_demand(
        ORIGIN,
        demand,
        obligation=obligation,
        commitment=commitment,
        hops=HOPS,
        now=NOW,
    ).to_bytes()
    cut = honest.index(b'"sig":"') + len(b'"sig":"')
    flipped = honest[:cut] + (b"B" if honest[cut : cut + 1] == b"A" else b"A") + honest[cut + 1 :]
    with pytest.raises(BadSignature):
        open_statement(flipped, Receipt)
    verdict = judge_answer(
        flipped,
        HOPS,
        demand=demand,
        obligation=obligation,
        commitment=commitment,
        reported_at=NOW,
    )
    assert verdict.kind is AnswerKind.UNATTRIBUTABLE


async def test_floor_far_ahead_of_the_clock_bounds_the_start_and_keeps_refusing(
    tmp_path: Path,
) -> None:
    config = NodeConfig(name="o", data_dir=tmp_path / "o", listen="o.mem:1")
    identity = load_or_create_identity(config.data_dir)
    floor_ms = int(time.time() * 1000) + 3_600_000  # the clock went back an hour
    (config.data_dir / REPLAY_FLOOR_FILENAME).write_text(f"{floor_ms}\n", encoding="ascii")
    started = time.monotonic()
    core = await NodeCore.open(config, identity, transport=InMemoryTransport())
    try:
        assert time.monotonic() - started < REPLAY_FLOOR_LEASE_MS / 1000 + 1.0
        _, seqs = await core.append(HOPS)
        committed = await core.commit_fold("v", seqs)
        held_obligation = open_statement(committed.obligation, Obligation)
        demand = build_demand(HOLDER, held_obligation, now=int(core.clock() * 1000))
        with pytest.raises(DemandPredatesRestart):
            await core.answer_demands([demand.to_bytes()])
    finally:
        await core.close()
