"""The reaper's grace binds custody holds as it binds obligations (S5)."""

from __future__ import annotations

from pathlib import Path

from contracts.identity import Identity
from nodes.custody_store import HeldCustodyFold, custody_counts, hold_folds
from nodes.reaper import Reaper
from nodes.store import HopStore

UNTIL_MS = 1_000_000
GRACE_MS = 5_000


async def test_a_custody_hold_inside_the_grace_survives_a_reap(tmp_path: Path) -> None:
    store = await HopStore.open(tmp_path, Identity.generate().node_id)
    try:
        fold = HeldCustodyFold(leaf_hash="ab" * 32, root="cd" * 32, proof=b"p", hops=(b"h0", b"h1"))
        await hold_folds(
            store,
            head_digest="ef" * 32,
            head_note=b"note",
            origin="origin",
            folds=(fold,),
            serve_until=UNTIL_MS,
            now_ms=0,
        )
        now = [UNTIL_MS + GRACE_MS // 2]
        reaper = Reaper(store, grace_ms=GRACE_MS, clock=lambda: now[0])
        report = await reaper.run_once()
        assert report.hops_evicted == 0
        assert (await custody_counts(store))["custody_hops"] == 2
        now[0] = UNTIL_MS + GRACE_MS + 1
        report = await reaper.run_once()
        assert report.hops_evicted == 2
        assert (await custody_counts(store))["custody_hops"] == 0
    finally:
        await store.close()
