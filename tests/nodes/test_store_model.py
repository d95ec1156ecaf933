"""Model-based test of the hop log: random operation sequences against a plain model.

Commits (fresh and shared hops), reaper passes at random times, extra
obligations, new epochs that restart seqs at 1, and lookups interleave; the
model says which folds are owed. Invariants after every step: a fold under a
live obligation resolves byte-exact; any other fold resolves byte-exact or
EXPIRED; nothing ever resolves to other bytes or UNRESOLVABLE.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import pytest

from contracts.identity import Identity
from contracts.merkle import merkle_root
from nodes._store_signing import fold_signer, synthetic_hop
from nodes.store import CounterName, HopInput, HopStore, MissingHop, ResolveStatus

IDENTITY = Identity.from_seed(bytes(range(1, 33)))
ORIGIN = IDENTITY.node_id
T0 = 1_900_000_000_000


@dataclass
class Owed:
    leaves: tuple[bytes, ...]
    serve_until: int


async def _check(store: HopStore, owed: dict[str, Owed], now: int, counts: dict[str, int]) -> None:
    for digest, fold in owed.items():
        res = await store.resolve(digest, now_ms=now)
        if res.status is ResolveStatus.FOUND:
            assert res.leaves == fold.leaves, f"{digest[:16]} resolved to other bytes"
            counts["found"] += 1
        else:
            assert res.status is ResolveStatus.EXPIRED, (digest[:16], res.status, res.reason)
            assert fold.serve_until <= now, f"{digest[:16]} evicted under a live obligation"
            counts["expired"] += 1


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_random_histories_never_lose_owed_folds_or_return_other_bytes(
    tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    store = await HopStore.open(tmp_path, ORIGIN)
    owed: dict[str, Owed] = {}
    counts = {"found": 0, "expired": 0, "epochs": 1, "evicted": 0, "refused_renewals": 0}
    now = T0
    next_seq = 1
    folded: list[int] = []
    try:
        for step in range(250):
            op = rng.random()
            if op < 0.45:
                fresh = list(range(next_seq, next_seq + rng.randint(1, 4)))
                next_seq = fresh[-1] + 1
                shared = rng.sample(folded, min(len(folded), rng.randint(0, 2)))
                seqs = [*shared, *fresh]
                hops = [HopInput(s, synthetic_hop(ORIGIN, store.epoch, s)) for s in seqs]
                until = now + rng.choice([1, 5, 20, 200, 10_000])
                signed = await store.commit_fold(
                    epoch=store.epoch,
                    value_ref=f"v{step}",
                    fold_seq=0,
                    hops=hops,
                    sign=fold_signer(IDENTITY, serve_until_ms=until, issued_at_ms=now),
                    now_ms=now,
                )
                owed[signed.commitment_digest] = Owed(tuple(h.hop_bytes for h in hops), until)
                folded.extend(fresh)
            elif op < 0.65:
                counts["evicted"] += (await store.reap(now_ms=now)).hops_evicted
            elif op < 0.8:
                now += rng.randint(1, 60)
            elif op < 0.88 and owed:
                digest = rng.choice(sorted(owed))
                until = now + rng.choice([10, 300])
                try:
                    await store.put_obligation(
                        digest=f"{step:064x}",
                        commitment_digest=digest,
                        serve_until_ms=until,
                        envelope=b"{}",
                        local=True,
                        now_ms=now,
                    )
                except MissingHop:
                    # Only after eviction: a promise over hops already gone is refused.
                    assert (await store.resolve(digest, now_ms=now)).status is (
                        ResolveStatus.EXPIRED
                    )
                    counts["refused_renewals"] += 1
                else:
                    owed[digest].serve_until = max(owed[digest].serve_until, until)
            elif op < 0.92:
                await store.new_epoch()
                counts["epochs"] += 1
                next_seq, folded = 1, []  # hop ids restart: h000001…
            else:
                await _check(store, owed, now, counts)
        await _check(store, owed, now, counts)
        assert (await store.counters())[CounterName.UNRESOLVABLE] == 0
        assert await store.integrity_check() == "ok"
    finally:
        await store.close()
    # The history exercised eviction, expiry and seq reuse across epochs.
    assert counts["evicted"] > 0
    assert counts["expired"] > 0
    assert counts["epochs"] > 1
    for fold in owed.values():
        assert merkle_root(fold.leaves)  # every owed fold had leaves
