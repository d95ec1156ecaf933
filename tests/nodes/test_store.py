"""Unit tests of the hop log store (nodes.store): ordering, pending, reaper, nonces."""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from contracts.identity import Identity
from contracts.merkle import merkle_root
from nodes._store_signing import fold_signer, synthetic_hop
from nodes.reaper import Reaper
from nodes.store import (
    AttestationCaps,
    CounterName,
    FoldConflict,
    FoldDraft,
    FoldRecord,
    FoldStatus,
    HopConflict,
    HopInput,
    HopStore,
    KeptCommitment,
    MissingHop,
    ObligationRecord,
    ResolveStatus,
    SignedFold,
    SignerMismatch,
    StaleEpoch,
    StoreClosed,
    StoreCorrupt,
    StoreError,
    StoreMode,
    UnknownCommitment,
    _begin,
)

NOW = 1_800_000_000_000
HOUR = 3_600_000
SEC = 1_000
IDENTITY = Identity.from_seed(bytes(range(32)))
ORIGIN = IDENTITY.node_id


def hops_for(epoch: str, seqs: range | list[int], tag: str = "") -> list[HopInput]:
    return [HopInput(seq, synthetic_hop(ORIGIN, epoch, seq, tag=tag)) for seq in seqs]


@pytest.fixture(params=list(StoreMode))
async def store(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[HopStore]:
    # Every test on this fixture holds in both modes: scratch changes where the
    # statements run and what a COMMIT promises to the disk, not their order.
    s = await HopStore.open(tmp_path / "node", ORIGIN, mode=request.param)
    try:
        yield s
    finally:
        await s.close()


@pytest.mark.parametrize(
    ("mode", "synchronous", "threaded"),
    [(StoreMode.DURABLE, 2, True), (StoreMode.SCRATCH, 0, False)],
)
async def test_store_mode_sets_the_durability_it_claims_and_where_statements_run(
    tmp_path: Path, mode: StoreMode, synchronous: int, threaded: bool
) -> None:
    import threading

    s = await HopStore.open(tmp_path / "node", ORIGIN, mode=mode)
    try:
        writer = s._writer
        assert writer is not None
        rows = list(await writer.execute_fetchall("PRAGMA synchronous"))
        assert int(rows[0][0]) == synchronous  # FULL = 2 (fsync per COMMIT), OFF = 0
        journal = list(await writer.execute_fetchall("PRAGMA journal_mode"))
        assert str(journal[0][0]).lower() == "wal"
        seen: list[int] = []
        await writer.set_trace_callback(lambda _sql: seen.append(threading.get_ident()))
        await s.append_hops(s.epoch, hops_for(s.epoch, [1]), now_ms=NOW)
        assert seen
        assert all((t != threading.get_ident()) is threaded for t in seen)
    finally:
        await s.close()
    with pytest.raises(StoreClosed):
        await s.hops(s.epoch, [1])


async def commit(
    store: HopStore,
    value_ref: str,
    fold_seq: int,
    hops: list[HopInput],
    *,
    serve_until_ms: int = NOW + HOUR,
    now_ms: int = NOW,
) -> SignedFold:
    sign = fold_signer(IDENTITY, serve_until_ms=serve_until_ms, issued_at_ms=now_ms)
    return await store.commit_fold(
        epoch=store.epoch,
        value_ref=value_ref,
        fold_seq=fold_seq,
        hops=hops,
        sign=sign,
        now_ms=now_ms,
    )


async def test_committed_fold_resolves_byte_exact_to_its_root(store: HopStore) -> None:
    hops = hops_for(store.epoch, range(1, 6))
    signed = await commit(store, "v1", 1, hops)
    res = await store.resolve(signed.commitment_digest, now_ms=NOW)
    assert res.status is ResolveStatus.FOUND
    assert res.leaves == tuple(h.hop_bytes for h in hops)
    assert merkle_root(res.leaves).hex() == signed.root
    assert res.fold is not None
    assert res.fold.envelope == signed.commitment_envelope
    assert [o.envelope for o in res.obligations] == [signed.obligation_envelope]


async def test_commit_order_is_hops_then_sign_then_pointer_then_commit_then_return(
    store: HopStore,
) -> None:
    trace: list[str] = []
    base = fold_signer(IDENTITY, serve_until_ms=NOW + HOUR, issued_at_ms=NOW)

    def traced_signer(draft: FoldDraft) -> SignedFold:
        trace.append("SIGN")
        return base(draft)

    def on_sql(statement: str) -> None:
        words = statement.split()
        head = " ".join(words[:3]).upper()
        if head.startswith(("BEGIN", "COMMIT", "ROLLBACK", "INSERT INTO")):
            trace.append(head)

    writer = store._writer
    assert writer is not None
    await writer.set_trace_callback(on_sql)
    await store.commit_fold(
        epoch=store.epoch,
        value_ref="v",
        fold_seq=1,
        hops=hops_for(store.epoch, range(1, 3)),
        sign=traced_signer,
        now_ms=NOW,
    )
    trace.append("RETURNED")
    assert trace == [
        "BEGIN IMMEDIATE",
        "INSERT INTO HOPS",
        "INSERT INTO HOPS",
        "SIGN",
        "INSERT INTO COMMITMENTS",
        "INSERT INTO FOLD_MEMBERS",
        "INSERT INTO FOLD_MEMBERS",
        "INSERT INTO OBLIGATIONS",
        "INSERT INTO COUNTERS",
        "COMMIT",
        "RETURNED",
    ]


async def test_fold_becomes_visible_to_other_connections_only_at_commit(tmp_path: Path) -> None:
    store = await HopStore.open(tmp_path, ORIGIN)
    seen: list[bytes | None] = []
    base = fold_signer(IDENTITY, serve_until_ms=NOW + HOUR, issued_at_ms=NOW)

    def spying_signer(draft: FoldDraft) -> SignedFold:
        # Another connection cannot see the uncommitted hops; the writer can.
        other = sqlite3.connect(store.path)
        try:
            rows = other.execute("SELECT COUNT(*) FROM hops").fetchone()
            seen.append(bytes(str(rows[0]), "ascii"))
        finally:
            other.close()
        return base(draft)

    try:
        signed = await store.commit_fold(
            epoch=store.epoch,
            value_ref="v",
            fold_seq=1,
            hops=hops_for(store.epoch, range(1, 4)),
            sign=spying_signer,
            now_ms=NOW,
        )
    finally:
        await store.close()
    # Nothing was visible outside the transaction while signing: hops, pointer and
    # obligation become visible together, at COMMIT.
    assert seen == [b"0"]
    reopened = await HopStore.open(tmp_path, ORIGIN)
    try:
        assert (await reopened.resolve(signed.commitment_digest, now_ms=NOW)).status is (
            ResolveStatus.FOUND
        )
    finally:
        await reopened.close()


async def test_failing_signer_leaves_no_hops_and_no_pointer(store: HopStore) -> None:
    before = await store.table_digest()

    def broken(draft: FoldDraft) -> SignedFold:
        raise RuntimeError("key unavailable")

    with pytest.raises(RuntimeError, match="key unavailable"):
        await store.commit_fold(
            epoch=store.epoch,
            value_ref="v",
            fold_seq=1,
            hops=hops_for(store.epoch, range(1, 3)),
            sign=broken,
            now_ms=NOW,
        )
    assert await store.table_digest() == before


async def test_signer_root_over_other_bytes_is_rejected_and_nothing_stored(
    store: HopStore,
) -> None:
    before = await store.table_digest()
    honest = fold_signer(IDENTITY, serve_until_ms=NOW + HOUR, issued_at_ms=NOW)

    def lying(draft: FoldDraft) -> SignedFold:
        altered = FoldDraft(
            draft.origin,
            draft.epoch,
            draft.value_ref,
            draft.fold_seq,
            draft.seqs,
            (*draft.leaves[:-1], draft.leaves[-1] + b" "),
        )
        return honest(altered)

    with pytest.raises(SignerMismatch, match="not the Merkle root"):
        await store.commit_fold(
            epoch=store.epoch,
            value_ref="v",
            fold_seq=1,
            hops=hops_for(store.epoch, range(1, 3)),
            sign=lying,
            now_ms=NOW,
        )
    assert await store.table_digest() == before


async def test_recommit_same_fold_returns_stored_statements(store: HopStore) -> None:
    hops = hops_for(store.epoch, range(1, 4))
    first = await commit(store, "v", 1, hops)
    again = await commit(store, "v", 1, hops, serve_until_ms=NOW + 2 * HOUR, now_ms=NOW + 5)
    assert again == first
    assert (await store.counters())[CounterName.COMMITS] == 1


async def test_second_root_for_same_fold_slot_is_refused_as_equivocation(
    store: HopStore,
) -> None:
    await commit(store, "v", 1, hops_for(store.epoch, range(1, 4)))
    before = await store.table_digest()
    with pytest.raises(FoldConflict, match="equivocation"):
        await commit(store, "v", 1, hops_for(store.epoch, range(4, 6)))
    assert await store.table_digest() == before


async def test_appended_hop_with_other_bytes_is_a_conflict(store: HopStore) -> None:
    await store.append_hops(store.epoch, hops_for(store.epoch, [1]), now_ms=NOW)
    await store.append_hops(store.epoch, hops_for(store.epoch, [1]), now_ms=NOW)  # idempotent
    with pytest.raises(HopConflict, match="seq 1"):
        await store.append_hops(store.epoch, hops_for(store.epoch, [1], tag="other"), now_ms=NOW)


async def test_hops_built_for_an_old_epoch_are_refused(store: HopStore) -> None:
    old = store.epoch
    await store.new_epoch()
    with pytest.raises(StaleEpoch, match=f"epoch {old}"):
        await store.append_hops(old, hops_for(old, [1]), now_ms=NOW)


async def test_epoch_is_persisted_across_reopen(tmp_path: Path) -> None:
    store = await HopStore.open(tmp_path, ORIGIN)
    assert store.epoch.startswith("1-")
    second = await store.new_epoch()
    assert second.startswith("2-")
    await store.close()
    reopened = await HopStore.open(tmp_path, ORIGIN)
    try:
        assert reopened.epoch == second
    finally:
        await reopened.close()


async def test_epoch_after_restore_from_backup_is_not_reused(tmp_path: Path) -> None:
    live, backup = tmp_path / "live", tmp_path / "backup"
    store = await HopStore.open(live, ORIGIN)
    await store.close()
    backup.mkdir()
    for f in live.iterdir():
        (backup / f.name).write_bytes(f.read_bytes())
    store = await HopStore.open(live, ORIGIN)
    after_backup = await store.new_epoch()
    await store.close()
    restored = await HopStore.open(backup, ORIGIN)
    try:
        # The counter rolls back with the restore; the epoch does not repeat.
        again = await restored.new_epoch()
        assert again.split("-")[0] == after_backup.split("-")[0]
        assert again != after_backup
    finally:
        await restored.close()


async def test_recycled_seqs_in_new_epoch_never_resolve_old_commitment(store: HopStore) -> None:
    old_hops = hops_for(store.epoch, range(1, 6))
    old = await commit(store, "v", 1, old_hops, serve_until_ms=NOW + 1)
    report = await store.reap(now_ms=NOW + 2)
    assert report.hops_evicted == 5
    epoch = await store.new_epoch()
    # Same seqs (h000001…), same value_ref and fold_seq, new epoch.
    new_hops = hops_for(epoch, range(1, 6))
    new = await commit(store, "v", 1, new_hops, now_ms=NOW + 3)
    old_res = await store.resolve(old.commitment_digest, now_ms=NOW + 3)
    assert old_res.status is ResolveStatus.EXPIRED
    assert old_res.leaves == ()
    new_res = await store.resolve(new.commitment_digest, now_ms=NOW + 3)
    assert new_res.leaves == tuple(h.hop_bytes for h in new_hops)
    assert (await store.counters())[CounterName.UNRESOLVABLE] == 0


async def test_altered_hop_row_resolves_corrupted_never_wrong_bytes(store: HopStore) -> None:
    signed = await commit(store, "v", 1, hops_for(store.epoch, range(1, 4)))
    raw = sqlite3.connect(store.path)
    try:
        raw.execute("UPDATE hops SET hop_bytes = ? WHERE seq = 2", (b'{"forged":true}',))
        raw.commit()
    finally:
        raw.close()
    res = await store.resolve(signed.commitment_digest, now_ms=NOW)
    assert res.status is ResolveStatus.CORRUPTED
    assert not res
    # The damage is named: the hop whose bytes miss the digest stored beside them.
    assert "store corrupted: hop seq 2: stored bytes hash to" in res.reason
    assert res.leaves == ()
    assert res.damaged[1] == b'{"forged":true}'
    counters = await store.counters()
    assert counters[CounterName.STORE_CORRUPTED] == 1
    assert counters[CounterName.UNRESOLVABLE] == 0
    with pytest.raises(StoreCorrupt, match=r"hop \(epoch .*, seq 2\) damaged"):
        await store.check_stored()


async def test_check_stored_passes_an_intact_log_and_names_a_fold_whose_root_was_damaged(
    store: HopStore,
) -> None:
    first = await commit(store, "v", 1, hops_for(store.epoch, range(1, 4)))
    await commit(store, "v", 2, hops_for(store.epoch, range(1, 6)))  # cumulative
    await commit(store, "w", 1, hops_for(store.epoch, range(6, 8)), serve_until_ms=NOW + 1)
    await store.reap(now_ms=NOW + 2)  # w's hops evicted: not a damage
    checked = await store.check_stored()
    assert (checked.hops, checked.folds) == (5, 2)
    damaged = ("0" if first.root[0] != "0" else "1") + first.root[1:]
    raw = sqlite3.connect(store.path)
    try:
        raw.execute(
            "UPDATE commitments SET root = ? WHERE digest = ?", (damaged, first.commitment_digest)
        )
        raw.commit()
    finally:
        raw.close()
    with pytest.raises(StoreCorrupt, match=r"fold v#1 \(commitment .*\) damaged: its hops hash to"):
        await store.check_stored()
    # Against the root stored beside it the fold is corrupted, never found; against
    # the signed commitment's root (what a node signs receipts for) its hops still hold.
    res = await store.resolve(first.commitment_digest, now_ms=NOW)
    assert res.status is ResolveStatus.CORRUPTED
    assert res.leaves == ()
    signed = await store.resolve(first.commitment_digest, now_ms=NOW, root=first.root)
    assert signed.status is ResolveStatus.FOUND


async def test_hop_missing_under_live_obligation_is_unresolvable_and_counted(
    store: HopStore,
) -> None:
    signed = await commit(store, "v", 1, hops_for(store.epoch, range(1, 4)))
    raw = sqlite3.connect(store.path)
    try:
        raw.execute("DELETE FROM hops WHERE seq = 3")
        raw.commit()
    finally:
        raw.close()
    res = await store.resolve(signed.commitment_digest, now_ms=NOW)
    assert res.status is ResolveStatus.UNRESOLVABLE
    assert "1 of 3 hops absent" in res.reason
    assert (await store.counters())[CounterName.UNRESOLVABLE] == 1


async def test_unknown_commitment_is_reported_unknown(store: HopStore) -> None:
    res = await store.resolve("ab" * 32, now_ms=NOW)
    assert res.status is ResolveStatus.UNKNOWN
    assert not res


# ----------------------------------------------------------------------- reaper (S5)


async def test_reaper_never_evicts_hop_under_unexpired_obligation(store: HopStore) -> None:
    kept = await commit(
        store, "keep", 1, hops_for(store.epoch, range(1, 4)), serve_until_ms=NOW + 10
    )
    gone = await commit(
        store, "drop", 1, hops_for(store.epoch, range(4, 7)), serve_until_ms=NOW + 1
    )
    report = await store.reap(now_ms=NOW + 5, count_protected=True)
    assert report.hops_evicted == 3
    assert report.protected_hops == 3
    assert (await store.resolve(kept.commitment_digest, now_ms=NOW + 5)).status is (
        ResolveStatus.FOUND
    )
    assert (await store.resolve(gone.commitment_digest, now_ms=NOW + 5)).status is (
        ResolveStatus.EXPIRED
    )
    assert (await store.counters())[CounterName.HOPS_EVICTED] == 3


async def test_hop_shared_with_live_fold_survives_expiry_of_other_fold(store: HopStore) -> None:
    shared = hops_for(store.epoch, [1, 2, 3])
    expired = await commit(store, "a", 1, shared, serve_until_ms=NOW + 1)
    live = await commit(store, "b", 1, shared[1:], serve_until_ms=NOW + HOUR)
    report = await store.reap(now_ms=NOW + 2)
    assert report.hops_evicted == 1  # only seq 1 is in no live fold
    assert (await store.resolve(live.commitment_digest, now_ms=NOW + 2)).status is (
        ResolveStatus.FOUND
    )
    assert (await store.resolve(expired.commitment_digest, now_ms=NOW + 2)).status is (
        ResolveStatus.EXPIRED
    )


async def test_extra_obligation_extends_protection(store: HopStore) -> None:
    signed = await commit(store, "v", 1, hops_for(store.epoch, range(1, 3)), serve_until_ms=NOW + 1)
    await store.put_obligation(
        digest="cd" * 32,
        commitment_digest=signed.commitment_digest,
        serve_until_ms=NOW + HOUR,
        envelope=b"{}",
        local=True,
        now_ms=NOW,
    )
    assert (await store.reap(now_ms=NOW + 2)).hops_evicted == 0
    with pytest.raises(UnknownCommitment, match="does not hold"):
        await store.put_obligation(
            digest="ef" * 32,
            commitment_digest="00" * 32,
            serve_until_ms=NOW,
            envelope=b"{}",
            local=False,
            now_ms=NOW,
        )


async def test_unfolded_hops_are_never_evicted(store: HopStore) -> None:
    await store.append_hops(store.epoch, hops_for(store.epoch, range(1, 4)), now_ms=NOW)
    assert (await store.reap(now_ms=NOW + 10 * HOUR)).hops_evicted == 0
    assert await store.hop(store.epoch, 2) == hops_for(store.epoch, [2])[0].hop_bytes


async def test_hops_reads_many_seqs_at_once_leaving_out_absent_ones(store: HopStore) -> None:
    stored = hops_for(store.epoch, range(1, 6))
    await store.append_hops(store.epoch, stored, now_ms=NOW)
    got = await store.hops(store.epoch, [5, 2, 9, 2])
    assert got == {5: stored[4].hop_bytes, 2: stored[1].hop_bytes}
    assert await store.hops(store.epoch, []) == {}
    assert await store.hop(store.epoch, 9) is None


async def test_grace_delays_eviction_past_serve_until(store: HopStore) -> None:
    await commit(store, "v", 1, hops_for(store.epoch, range(1, 3)), serve_until_ms=NOW + 1)
    assert (await store.reap(now_ms=NOW + 2, grace_ms=5)).hops_evicted == 0
    assert (await store.reap(now_ms=NOW + 7, grace_ms=5)).hops_evicted == 2


async def test_a_reaper_pass_stopped_after_its_eviction_committed_still_counts_it(
    store: HopStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await commit(store, "v", 1, hops_for(store.epoch, range(1, 4)), serve_until_ms=NOW + 1)
    reached = asyncio.Event()

    async def stuck(**_: object) -> int:
        reached.set()
        await asyncio.Event().wait()  # the stop arrives here, after the hops went
        return 0

    monkeypatch.setattr(store, "reap_attestations", stuck)
    reaper = Reaper(store, interval_s=60, clock=lambda: NOW + 2)
    pass_ = asyncio.ensure_future(reaper.run_once())
    await asyncio.wait_for(reached.wait(), 5)
    pass_.cancel()
    with pytest.raises(asyncio.CancelledError):
        await pass_
    assert reaper.stats.hops_evicted == 3


async def test_concurrent_reaper_and_commits_never_lose_a_protected_hop(
    store: HopStore,
) -> None:
    clock = {"now": NOW}
    reaper = Reaper(store, interval_s=0.001, clock=lambda: clock["now"])
    reaper.start()
    live: list[SignedFold] = []
    try:
        for fold in range(40):
            clock["now"] += 500
            hops = hops_for(store.epoch, range(fold * 3 + 1, fold * 3 + 4))
            short = fold % 2 == 0
            signed = await commit(
                store,
                f"v{fold}",
                1,
                hops,
                serve_until_ms=clock["now"] + (200 if short else HOUR),
                now_ms=clock["now"],
            )
            if not short:
                live.append(signed)
            await asyncio.sleep(0)
    finally:
        await reaper.stop()
    assert reaper.stats.hops_evicted > 0
    for signed in live:
        res = await store.resolve(signed.commitment_digest, now_ms=clock["now"])
        assert res.status is ResolveStatus.FOUND
        assert merkle_root(res.leaves).hex() == signed.root


# ----------------------------------------------------------------------- pending mode


async def test_pending_fold_answers_pending_until_reconciled(tmp_path: Path) -> None:
    store = await HopStore.open(tmp_path, ORIGIN, provenance_pending=True)
    try:
        hops = hops_for(store.epoch, range(1, 4))
        signed = await commit(store, "v", 1, hops)
        res = await store.resolve(signed.commitment_digest, now_ms=NOW)
        assert res.status is ResolveStatus.PENDING
        assert res.leaves == ()
        counters = await store.counters()
        assert counters["provenance_pending"] == 1
        # The reaper must not touch a pending fold's members (none landed yet anyway).
        assert (await store.reap(now_ms=NOW + 10 * HOUR)).hops_evicted == 0
        assert await store.reconcile(now_ms=NOW) == 1
        res = await store.resolve(signed.commitment_digest, now_ms=NOW)
        assert res.status is ResolveStatus.FOUND
        assert res.leaves == tuple(h.hop_bytes for h in hops)
        counters = await store.counters()
        assert counters["provenance_pending"] == 0
        assert counters[CounterName.RECONCILED] == 1
        assert counters[CounterName.PENDING_ANSWERS] == 1
    finally:
        await store.close()


async def test_pending_fold_lost_in_crash_resolves_unresolvable_not_wrong(
    tmp_path: Path,
) -> None:
    store = await HopStore.open(tmp_path, ORIGIN, provenance_pending=True)
    signed = await commit(store, "v", 1, hops_for(store.epoch, range(1, 4)))
    await store.close()  # the in-memory cold-copy queue dies with the process
    reopened = await HopStore.open(tmp_path, ORIGIN, provenance_pending=True)
    try:
        fold = await reopened.commitment(signed.commitment_digest)
        assert fold is not None
        assert fold.status is FoldStatus.LOST
        res = await reopened.resolve(signed.commitment_digest, now_ms=NOW)
        assert res.status is ResolveStatus.UNRESOLVABLE
        assert "lost before landing" in res.reason
    finally:
        await reopened.close()


async def test_pending_fold_whose_hops_were_appended_lands_on_reopen(tmp_path: Path) -> None:
    store = await HopStore.open(tmp_path, ORIGIN, provenance_pending=True)
    hops = hops_for(store.epoch, range(1, 4))
    await store.append_hops(store.epoch, hops, now_ms=NOW)
    signed = await commit(store, "v", 1, hops)
    await store.close()
    reopened = await HopStore.open(tmp_path, ORIGIN)
    try:
        res = await reopened.resolve(signed.commitment_digest, now_ms=NOW)
        assert res.status is ResolveStatus.FOUND
    finally:
        await reopened.close()


# ----------------------------------------------------------------------- counters


async def test_counters_persist_across_reopen_and_count_evidence_by_kind(tmp_path: Path) -> None:
    store = await HopStore.open(tmp_path, ORIGIN)
    store.bump(CounterName.SERVES, 3)
    store.bump(CounterName.REFUSALS)
    for i, kind in enumerate(["bad_data", "bad_data", "unanswered"]):
        await store.add_evidence(
            digest=f"{i:064x}", kind=kind, accused="ab" * 32, body=b"{}", now_ms=NOW
        )
    assert not await store.add_evidence(
        digest=f"{0:064x}", kind="bad_data", accused="ab" * 32, body=b"{}", now_ms=NOW
    )
    await store.close()
    reopened = await HopStore.open(tmp_path, ORIGIN)
    try:
        counters = await reopened.counters()
        assert counters[CounterName.SERVES] == 3
        assert counters[CounterName.REFUSALS] == 1
        assert counters["evidence_bad_data"] == 2
        assert counters["evidence_unanswered"] == 1
        assert counters["evidence_total"] == 3
        assert len(await reopened.evidence(kind="bad_data")) == 2
    finally:
        await reopened.close()


async def test_attestations_are_kept_verbatim_and_expire(store: HopStore) -> None:
    envelope = b'{"payload":"x","payloadType":"t","signatures":[]}'
    kept = await store.keep_attestation(
        digest="aa" * 32,
        value_digest="bb" * 32,
        attester="cc" * 32,
        expires_at_ms=NOW + 10,
        envelope=envelope,
        now_ms=NOW,
        reserved=frozenset(),
        caps=AttestationCaps(
            per_attester=4,
            reserved_count=4,
            reserved_bytes=1 << 20,
            stranger_count=4,
            stranger_bytes=1 << 20,
        ),
    )
    assert kept.stored
    assert await store.attestations_for("bb" * 32, now_ms=NOW) == (envelope,)
    assert await store.attestations_for("bb" * 32, now_ms=NOW + 11) == ()


async def test_peer_commitments_may_equivocate_in_holder_store(store: HopStore) -> None:
    peer = "ee" * 32
    for i, root in enumerate(["01" * 32, "02" * 32]):
        assert await store.put_commitment(
            digest=f"{i + 7:064x}",
            origin=peer,
            epoch="1-peer",
            value_ref="v",
            fold_seq=1,
            leaf_count=2,
            root=root,
            envelope=b"env%d" % i,
            now_ms=NOW,
        )
    both = await store.commitments_for(peer, "1-peer", "v", 1)
    assert [c.root for c in both] == ["01" * 32, "02" * 32]
    assert all(not c.local for c in both)


# ----------------------------------------------------------------------- errors


async def test_data_dir_of_another_origin_is_refused(tmp_path: Path) -> None:
    store = await HopStore.open(tmp_path, ORIGIN)
    await store.close()
    with pytest.raises(StoreCorrupt, match="belongs to origin"):
        await HopStore.open(tmp_path, "ff" * 32)


async def test_unknown_schema_version_is_refused(tmp_path: Path) -> None:
    store = await HopStore.open(tmp_path, ORIGIN)
    await store.close()
    raw = sqlite3.connect(store.path)
    try:
        raw.execute("UPDATE meta SET value = '999' WHERE key = 'schema_version'")
        raw.commit()
    finally:
        raw.close()
    with pytest.raises(StoreCorrupt, match="schema version '999'"):
        await HopStore.open(tmp_path, ORIGIN)


async def test_use_after_close_raises_store_closed(tmp_path: Path) -> None:
    store = await HopStore.open(tmp_path, ORIGIN)
    await store.close()
    await store.close()  # idempotent
    with pytest.raises(StoreClosed, match="closed"):
        await store.resolve("00" * 32, now_ms=NOW)


async def test_locked_database_is_reported_as_store_error_naming_operation(
    tmp_path: Path,
) -> None:
    store = await HopStore.open(tmp_path, ORIGIN)
    blocker = sqlite3.connect(store.path, timeout=0.1)
    try:
        blocker.execute("BEGIN IMMEDIATE")
        await store._writer.execute("PRAGMA busy_timeout = 50")  # type: ignore[union-attr]
        started = time.monotonic()
        with pytest.raises(
            StoreError, match=r"append 1 hops at epoch 1-[0-9a-f]{16}: database locked"
        ):
            await store.append_hops(store.epoch, hops_for(store.epoch, [1]), now_ms=NOW)
        assert time.monotonic() - started < 5
    finally:
        blocker.rollback()
        blocker.close()
        await store.close()


async def test_unwritable_data_dir_is_store_unavailable(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_bytes(b"")
    with pytest.raises(StoreError, match="cannot create data dir"):
        await HopStore.open(blocked / "sub", ORIGIN)


async def test_empty_fold_is_caller_misuse(store: HopStore) -> None:
    with pytest.raises(ValueError, match="has no hops"):
        await commit(store, "v", 1, [])
    with pytest.raises(ValueError, match="seq must be >= 0"):
        HopInput(-1, b"x")


async def test_integrity_check_reports_ok(store: HopStore) -> None:
    await commit(store, "v", 1, hops_for(store.epoch, range(1, 3)))
    assert await store.integrity_check() == "ok"


# ----------------------------------------------------------------------- standalone reaper


def test_standalone_reaper_refuses_a_dir_without_hop_log(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "nodes.reaper", "--data-dir", str(tmp_path), "--interval-ms", "5"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert "no hop log here to open" in proc.stderr
    assert "Traceback" not in proc.stderr


async def test_standalone_reaper_evicts_expired_and_leaves_live_pending_alone(
    tmp_path: Path,
) -> None:
    now = int(time.time() * 1000)
    store = await HopStore.open(tmp_path, ORIGIN, provenance_pending=True)
    try:
        await store.append_hops(store.epoch, hops_for(store.epoch, range(1, 4)), now_ms=now)
        expired = await commit(
            store, "old", 1, hops_for(store.epoch, range(1, 4)), serve_until_ms=now - 1, now_ms=now
        )
        assert await store.reconcile(now_ms=now) == 1
        pending = await commit(store, "new", 1, hops_for(store.epoch, range(4, 6)), now_ms=now)
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "nodes.reaper",
                "--data-dir",
                str(tmp_path),
                "--interval-ms",
                "5",
            ],
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                res = await store.resolve(expired.commitment_digest, now_ms=now)
                if res.status is ResolveStatus.EXPIRED:
                    break
                await asyncio.sleep(0.05)
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert "hops_evicted=3" in err
        assert res.status is ResolveStatus.EXPIRED
        # The node's pending fold was not declared lost by the other process.
        fold = await store.commitment(pending.commitment_digest)
        assert fold is not None
        assert fold.status is FoldStatus.PENDING
        assert await store.reconcile(now_ms=now) == 1
        assert (await store.resolve(pending.commitment_digest, now_ms=now)).status is (
            ResolveStatus.FOUND
        )
    finally:
        await store.close()


async def test_writer_cancelled_while_waiting_for_the_lock_leaves_store_usable(
    tmp_path: Path,
) -> None:
    # Durable mode only: waiting on another connection's lock is what the
    # threaded connection is for. A scratch store runs its statements on the
    # loop, so a lock held elsewhere blocks the loop for the busy timeout —
    # which is why scratch is for a store nothing else opens (StoreMode).
    store = await HopStore.open(tmp_path / "node", ORIGIN, mode=StoreMode.DURABLE)
    try:
        await _cancelled_lock_waiter_leaves_store_usable(store)
    finally:
        await store.close()


async def _cancelled_lock_waiter_leaves_store_usable(store: HopStore) -> None:
    blocker = sqlite3.connect(store.path, timeout=0.1)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        task = asyncio.create_task(
            store.append_hops(store.epoch, hops_for(store.epoch, [1]), now_ms=NOW)
        )
        await asyncio.sleep(0.2)  # the BEGIN IMMEDIATE is now waiting on the lock
        task.cancel()
        await asyncio.sleep(0)
    finally:
        blocker.rollback()
        blocker.close()
    with pytest.raises(asyncio.CancelledError):
        await task
    signed = await commit(store, "v", 1, hops_for(store.epoch, range(1, 3)))
    assert (await store.resolve(signed.commitment_digest, now_ms=NOW)).status is (
        ResolveStatus.FOUND
    )


async def test_random_cancellations_of_reads_and_writes_leave_store_consistent(
    store: HopStore,
) -> None:
    rng = random.Random(7)
    base = await commit(store, "base", 1, hops_for(store.epoch, range(1, 4)))
    tasks: list[asyncio.Task[object]] = []
    for i in range(60):
        if i % 3 == 0:
            seqs = range(100 + i * 4, 104 + i * 4)
            task: asyncio.Task[object] = asyncio.create_task(
                commit(store, f"c{i}", 1, hops_for(store.epoch, seqs))
            )
        else:
            task = asyncio.create_task(store.resolve(base.commitment_digest, now_ms=NOW))
        tasks.append(task)
    for _ in range(40):
        await asyncio.sleep(rng.choice([0, 0, 0.001]))
        victim = rng.choice(tasks)
        victim.cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    failures = [
        r
        for r in results
        if isinstance(r, BaseException) and not isinstance(r, asyncio.CancelledError)
    ]
    assert not failures, [f"{type(r).__name__}: {r}" for r in failures[:3]]
    committed = [r for r in results if isinstance(r, SignedFold)]
    assert 0 < sum(isinstance(r, asyncio.CancelledError) for r in results) < len(results)
    for signed in committed:
        res = await store.resolve(signed.commitment_digest, now_ms=NOW)
        assert res.status is ResolveStatus.FOUND
    assert await store.integrity_check() == "ok"
    assert (await store.resolve(base.commitment_digest, now_ms=NOW)).status is ResolveStatus.FOUND


async def test_writer_connection_is_wal_with_synchronous_full_when_durable(store: HopStore) -> None:
    writer = store._writer
    assert writer is not None
    mode = await (await writer.execute("PRAGMA journal_mode")).fetchone()
    sync = await (await writer.execute("PRAGMA synchronous")).fetchone()
    fks = await (await writer.execute("PRAGMA foreign_keys")).fetchone()
    assert mode == ("wal",)
    if store.mode is StoreMode.DURABLE:
        assert sync == (2,)  # FULL: the WAL is fsync'd at every COMMIT
    else:
        assert sync == (0,)  # scratch claims no durability: no fsync
    assert fks == (1,)


async def test_file_that_is_not_a_database_is_store_corrupt(tmp_path: Path) -> None:
    (tmp_path / "hops.sqlite3").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreCorrupt, match=r"open store .*hops\.sqlite3: database corrupt"):
        await HopStore.open(tmp_path, ORIGIN)


async def test_pending_fold_over_conflicting_hop_fails_at_commit_not_at_landing(
    tmp_path: Path,
) -> None:
    store = await HopStore.open(tmp_path, ORIGIN, provenance_pending=True)
    try:
        await store.append_hops(store.epoch, hops_for(store.epoch, [1]), now_ms=NOW)
        before = await store.table_digest()
        with pytest.raises(HopConflict, match="seq 1"):
            await commit(store, "v", 1, hops_for(store.epoch, [1, 2], tag="other"))
        assert await store.table_digest() == before
    finally:
        await store.close()


async def test_commit_racing_new_epoch_is_refused_as_stale(store: HopStore) -> None:
    old = store.epoch
    hops = hops_for(old, range(1, 3))
    results = await asyncio.gather(
        store.new_epoch(),
        store.commit_fold(
            epoch=old,
            value_ref="v",
            fold_seq=1,
            hops=hops,
            sign=fold_signer(IDENTITY, serve_until_ms=NOW + HOUR, issued_at_ms=NOW),
            now_ms=NOW,
        ),
        return_exceptions=True,
    )
    assert isinstance(results[1], StaleEpoch)
    assert await store.commitments_for(ORIGIN, old, "v", 1) == ()


async def test_renewing_obligation_over_evicted_hops_is_refused(store: HopStore) -> None:
    signed = await commit(store, "v", 1, hops_for(store.epoch, range(1, 3)), serve_until_ms=NOW + 1)
    assert (await store.reap(now_ms=NOW + 2)).hops_evicted == 2
    before = await store.table_digest()
    with pytest.raises(MissingHop, match=r"2 of 2 hops .* no longer in the log"):
        await store.put_obligation(
            digest="ab" * 32,
            commitment_digest=signed.commitment_digest,
            serve_until_ms=NOW + HOUR,
            envelope=b"{}",
            local=True,
            now_ms=NOW + 2,
        )
    assert await store.table_digest() == before


async def test_delivered_pairs_land_together_or_not_at_all(store: HopStore) -> None:
    signed = await commit(store, "v", 1, hops_for(store.epoch, range(1, 3)), serve_until_ms=NOW + 1)
    assert (await store.reap(now_ms=NOW + 2)).hops_evicted == 2
    peer = KeptCommitment("12" * 32, "ee" * 32, "1-peer", "w", 1, 3, "34" * 32, b"env")
    peer_duty = ObligationRecord("56" * 32, "12" * 32, NOW + HOUR, b"{}", local=False)
    # A fresh promise of ours over evicted hops is refused: the peer's pair goes too.
    ours = await store.commitment(signed.commitment_digest)
    assert ours is not None
    ours_again = ObligationRecord("ab" * 32, signed.commitment_digest, NOW + HOUR, b"{}", True)
    before = await store.table_digest()
    with pytest.raises(MissingHop):
        await store.put_delivered([(peer, peer_duty), (_kept(ours), ours_again)], now_ms=NOW + 2)
    assert await store.table_digest() == before
    await store.put_delivered([(peer, peer_duty)], now_ms=NOW + 2)
    assert await store.commitment("12" * 32) is not None
    assert await store.table_digest() != before


def _kept(fold: FoldRecord) -> KeptCommitment:
    return KeptCommitment(
        fold.digest,
        fold.origin,
        fold.epoch,
        fold.value_ref,
        fold.fold_seq,
        fold.leaf_count,
        fold.root,
        fold.envelope,
    )


async def test_own_obligation_received_again_after_eviction_is_a_no_op(store: HopStore) -> None:
    signed = await commit(store, "v", 1, hops_for(store.epoch, range(1, 3)), serve_until_ms=NOW + 1)
    await store.reap(now_ms=NOW + 2)
    assert not await store.put_obligation(
        digest=signed.obligation_digest,
        commitment_digest=signed.commitment_digest,
        serve_until_ms=signed.serve_until_ms,
        envelope=signed.obligation_envelope,
        local=True,
        now_ms=NOW + 2,
    )


async def test_peer_commitment_is_not_served_here_and_not_counted_unresolvable(
    store: HopStore,
) -> None:
    await store.put_commitment(
        digest="12" * 32,
        origin="ee" * 32,
        epoch="1-peer",
        value_ref="v",
        fold_seq=1,
        leaf_count=3,
        root="34" * 32,
        envelope=b"env",
        now_ms=NOW,
    )
    res = await store.resolve("12" * 32, now_ms=NOW)
    assert res.status is ResolveStatus.UNKNOWN
    assert "does not serve it" in res.reason
    assert (await store.counters())[CounterName.UNRESOLVABLE] == 0


async def test_begin_after_a_cancelled_readers_queued_commit_starts_cleanly(tmp_path: Path) -> None:
    # A reader cancelled in its clean-up leaves its COMMIT queued on the
    # connection's thread; the connection still says in_transaction until it
    # runs. The next BEGIN must neither roll back a transaction that is
    # about to close (sqlite: "cannot rollback - no transaction is active")
    # nor start inside it.
    import aiosqlite

    db = await aiosqlite.connect(tmp_path / "t.db", isolation_level=None)
    try:
        await db.execute("CREATE TABLE t (x INTEGER)")
        for _ in range(20):
            await _begin(db, "BEGIN")
            pending_commit = asyncio.ensure_future(db.execute("COMMIT"))
            assert db.in_transaction  # the COMMIT has not run yet
            await _begin(db, "BEGIN")
            await pending_commit
            assert db.in_transaction
            await db.execute("INSERT INTO t VALUES (1)")
            await db.execute("COMMIT")
        # A transaction truly left open is closed and the BEGIN issued again.
        await db.execute("BEGIN")
        await db.execute("INSERT INTO t VALUES (2)")
        await _begin(db, "BEGIN")
        await db.execute("COMMIT")
        rows = await db.execute_fetchall("SELECT x, count(*) FROM t GROUP BY x")
        assert list(rows) == [(1, 20)]
    finally:
        await db.close()


async def test_counted_gauges_are_counted_again_only_after_a_write(store: HopStore) -> None:
    # Node.Stats is open to anyone: a loop of calls with nothing written in
    # between must not scan the tables each time (an out-of-band row is not
    # seen), and every write the store makes is seen by the next call.
    assert (await store.counters())["evidence_total"] == 0
    raw = sqlite3.connect(store.path)
    try:
        raw.execute(
            "INSERT INTO evidence (digest, kind, accused, commitment_digest, file_path, body,"
            " created_at) VALUES ('d0', 'unanswered', 'x', NULL, NULL, x'00', 1)"
        )
        raw.commit()
    finally:
        raw.close()
    assert (await store.counters())["evidence_total"] == 0  # no write since: not counted
    added = await store.add_evidence(
        digest="d1", kind="unanswered", accused="x", body=b"\x00", now_ms=NOW
    )
    assert added
    counted = await store.counters()
    assert counted["evidence_total"] == 2
    assert counted["evidence_unanswered"] == 2


async def test_next_fold_sequences_are_read_through_an_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A value's next fold sequence is read at every compaction, over a table that
    grows with every fold the node holds: both reads search an index, neither
    scans the commitments table."""
    statements: list[str] = []
    real_connect = sqlite3.connect

    def tracing(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn: sqlite3.Connection = real_connect(*args, **kwargs)
        conn.set_trace_callback(statements.append)  # the statements, parameters bound
        return conn

    monkeypatch.setattr(sqlite3, "connect", tracing)
    s = await HopStore.open(tmp_path / "node", ORIGIN, mode=StoreMode.SCRATCH)
    try:
        statements.clear()
        assert await s.next_fold_seqs(ORIGIN, s.epoch, ["a", "b"]) == {"a": 0, "b": 0}
        assert await s.next_fold_seq(ORIGIN, s.epoch, "a") == 0
        path = s.path
    finally:
        await s.close()
    reads = [q for q in statements if q.lstrip().upper().startswith("SELECT")]
    assert len(reads) == 2, statements
    with contextlib.closing(real_connect(path)) as db:
        for q in reads:
            plan = [row[3] for row in db.execute("EXPLAIN QUERY PLAN " + q)]
            assert any("USING" in step and "INDEX" in step for step in plan), (q, plan)
            assert not any(step.startswith("SCAN commitments") for step in plan), (q, plan)
