"""Retention reaper: evicts hops that no unexpired obligation protects (S5),
and attestations past their ``expires_at``.

The reaper never decides on its own what is safe to evict: each pass is one
write transaction in which a single DELETE reads the obligation table and
fold membership (:meth:`nodes.store.HopStore.reap`). A hop is evicted only if
it belongs to at least one fold and every obligation on every fold that
contains it has expired (minus an optional grace). Custody holds
(:func:`nodes.custody_store.reap_custody`) get the same grace. Hops not yet folded and
hops of ``provenance_pending`` folds are never candidates. This is option 1
of seed 000: the pointer is durable before eviction may consider the span,
and eviction reads the pointer table as a precondition.

Usage::

    reaper = Reaper(store, interval_s=1.0)
    reaper.start()
    ...
    await reaper.stop()

``python -m nodes.reaper --data-dir DIR`` runs a standalone reaper on a
node's existing hop log (its own connection; SQLite's ``BEGIN IMMEDIATE``
serialises it with the node's writer). The crash tests use it to put
eviction pressure on a node process from outside.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import structlog

from nodes._periodic import PeriodicTask
from nodes.custody_store import reap_custody
from nodes.store import HopStore, ReapReport, StoreError

__all__ = ["Reaper", "ReaperStats", "main"]

_log = structlog.get_logger("provnet.reaper")


@dataclass(frozen=True, slots=True)
class ReaperStats:
    """Totals over the reaper's lifetime."""

    passes: int
    hops_evicted: int
    errors: int
    folds_reconciled: int
    attestations_reaped: int = 0


class Reaper(PeriodicTask):
    """Runs :meth:`HopStore.reap` every ``interval_s`` seconds in a task.

    With ``reconcile`` (default: the store's provenance_pending mode) each
    pass also lands pending folds — the node's one background store task.

    ``clock`` returns ms since the Unix epoch (tests pass their own). Store errors in a
    pass are logged and counted; the next pass tries again.
    """

    def __init__(
        self,
        store: HopStore,
        *,
        interval_s: float = 1.0,
        grace_ms: int = 0,
        batch: int = 10_000,
        reconcile: bool | None = None,
        clock: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"reaper interval must be > 0 s, got {interval_s}")
        if grace_ms < 0:
            raise ValueError(f"reaper grace must be >= 0 ms, got {grace_ms}")
        super().__init__("hop-reaper", interval_s)
        self._store = store
        self._grace = grace_ms
        self._batch = batch
        self._reconcile = store.provenance_pending if reconcile is None else reconcile
        self._clock = clock
        self._passes = 0
        self._evicted = 0
        self._errors = 0
        self._landed = 0
        self._attestations = 0

    @property
    def stats(self) -> ReaperStats:
        return ReaperStats(
            self._passes, self._evicted, self._errors, self._landed, self._attestations
        )

    async def run_once(self) -> ReapReport:
        """One pass now; raises :class:`StoreError` if the pass failed.

        In provenance_pending mode the pass first lands pending folds
        (:meth:`HopStore.reconcile`); their members are protected anyway.
        """
        if self._reconcile:
            self._landed += await self._store.reconcile(now_ms=self._clock())
        report = await self._store.reap(
            now_ms=self._clock(), grace_ms=self._grace, limit=self._batch
        )
        # Each step counted once it committed: a stop that cancels the rest of the
        # pass does not lose what was already evicted.
        self._evicted += report.hops_evicted
        attestations = await self._store.reap_attestations(now_ms=self._clock(), limit=self._batch)
        self._attestations += attestations
        # custody holds bind the reaper like obligations (S5, nodes.custody_store),
        # with the same grace: a hold goes only once it expired grace_ms ago
        custody = await reap_custody(
            self._store, now_ms=self._clock() - self._grace, limit=self._batch
        )
        self._evicted += custody
        report = dataclasses.replace(report, hops_evicted=report.hops_evicted + custody)
        self._passes += 1
        if attestations:
            _log.debug("reaper_attestations", attestations_reaped=attestations)
        if report.hops_evicted:
            _log.debug("reaper_pass", hops_evicted=report.hops_evicted)
        return report

    def pass_failed(self, exc: StoreError) -> None:
        self._errors += 1
        _log.warning("reaper_pass_failed", error=str(exc))


async def _run_standalone(args: argparse.Namespace) -> int:
    # The node may be running in provenance_pending mode: its pending bytes
    # are in its memory, so this process must not declare them lost.
    store = await HopStore.open(args.data_dir, None, settle_pending=False)
    reaper = Reaper(store, interval_s=args.interval_ms / 1000, grace_ms=args.grace_ms)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    reaper.start()
    try:
        await stop.wait()
    finally:
        await reaper.stop()
        await store.close()
    stats = reaper.stats
    print(
        f"reaper: passes={stats.passes} hops_evicted={stats.hops_evicted} errors={stats.errors}",
        file=sys.stderr,
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m nodes.reaper``: reap a node's hop log until SIGTERM."""
    parser = argparse.ArgumentParser(prog="python -m nodes.reaper", description=__doc__)
    parser.add_argument("--data-dir", required=True, help="the node's data directory")
    parser.add_argument("--interval-ms", type=float, default=1000.0, help="pass period")
    parser.add_argument("--grace-ms", type=int, default=0, help="evict this long after expiry")
    args = parser.parse_args(argv)
    if args.interval_ms <= 0:
        print(f"provnet: error: --interval-ms must be > 0, got {args.interval_ms}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_run_standalone(args))
    except StoreError as exc:
        print(f"provnet: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
