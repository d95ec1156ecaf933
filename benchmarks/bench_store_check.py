"""Benchmark: what the start-up store check (``HopStore.check_stored``) costs a node.

Builds hop logs (durable mode, synthetic hops of the experiment's shape) of a
given number of hops folded in folds of a given size — disjoint folds, or
cumulative ones (each fold extends the one before, as a value's folds do) —
then opens each one and times, best of ``--repeat``: the whole check, and for
comparison ``PRAGMA quick_check`` and ``PRAGMA integrity_check`` alone.

Usage::

    .venv/bin/python benchmarks/bench_store_check.py [--dir DIR] [--repeat 3]
                                                     [--case HOPS:FOLD[:cumulative]] ...
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from pathlib import Path

from contracts.identity import Identity
from nodes._store_signing import fold_signer, synthetic_hop
from nodes.store import HopInput, HopStore

_DEFAULT_CASES = ("10000:10", "10000:100", "10000:500:cumulative", "100000:100")


async def _build(path: Path, hops: int, fold: int, cumulative: bool) -> None:
    identity = Identity.from_seed(b"provnet-bench-store-check-seed!!")
    store = await HopStore.open(path, identity.node_id)
    try:
        sign = fold_signer(identity, serve_until_ms=2**40, issued_at_ms=1)
        epoch = store.epoch
        every = [HopInput(s, synthetic_hop(identity.node_id, epoch, s)) for s in range(1, hops + 1)]
        for start in range(0, hops, 1000):
            await store.append_hops(epoch, every[start : start + 1000], now_ms=1)
        for n, start in enumerate(range(0, hops, fold)):
            part = every[: start + fold] if cumulative else every[start : start + fold]
            await store.commit_fold(
                epoch=epoch,
                value_ref="v" if cumulative else f"v{n}",
                fold_seq=n if cumulative else 0,
                hops=part,
                sign=sign,
                now_ms=1,
            )
    finally:
        await store.close()


async def _time(path: Path, repeat: int) -> tuple[int, int, float, float, float]:
    best: tuple[int, int, float, float, float] | None = None
    for _ in range(repeat):
        store = await HopStore.open(path, None)
        try:
            t = time.perf_counter()
            checked = await store.check_stored()
            whole = time.perf_counter() - t
            t = time.perf_counter()
            await store.integrity_check()
            integrity = time.perf_counter() - t
        finally:
            await store.close()
        quick = await asyncio.to_thread(_quick_check, path)
        row = (checked.hops, checked.folds, whole, quick, integrity)
        if best is None or row[2] < best[2]:
            best = row
    assert best is not None
    return best


def _quick_check(path: Path) -> float:
    import sqlite3

    conn = sqlite3.connect(path / "hops.sqlite3")
    try:
        t = time.perf_counter()
        conn.execute("PRAGMA quick_check").fetchall()
        return time.perf_counter() - t
    finally:
        conn.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None, help="where to build (default: temp)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--case", action="append", default=None, help="HOPS:FOLD[:cumulative]")
    args = parser.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="provnet-store-check-"))
    try:
        for case in args.case or _DEFAULT_CASES:
            hops_s, fold_s, *rest = case.split(":")
            hops, fold, cumulative = int(hops_s), int(fold_s), rest == ["cumulative"]
            path = root / case.replace(":", "-")
            shutil.rmtree(path, ignore_errors=True)
            await _build(path, hops, fold, cumulative)
            size = (path / "hops.sqlite3").stat().st_size
            n_hops, folds, whole, quick, integrity = await _time(path, args.repeat)
            print(
                f"{case:>22}: {n_hops} hops, {folds} folds, {size / 1e6:.1f} MB —"
                f" check_stored {whole * 1000:.0f} ms"
                f" ({whole * 1000 * 10_000 / n_hops:.0f} ms per 10k hops);"
                f" quick_check alone {quick * 1000:.0f} ms,"
                f" integrity_check {integrity * 1000:.0f} ms"
            )
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
