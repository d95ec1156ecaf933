"""Crash-consistency driver: an origin that commits folds until it is killed.

Run as ``python -m tests.nodes.crash_driver --data-dir DIR --seed N``. Each start
is a new run of the origin on the same data dir:

1. load (or create, first start) the node key ``DIR/node.key``;
2. open the hop log, run ``PRAGMA integrity_check``, start a new epoch (seqs
   restart at 1, so hop ids ``h000001``… are recycled across runs — the
   seed-000 hazard) and print a ``start`` line;
3. start an aggressive reaper (every ``--reaper-interval-ms``; in
   ``--pending`` mode each pass also lands pending folds);
4. commit folds in a loop: fresh hops, sometimes re-folding hops of earlier
   folds (which the reaper may have evicted), sometimes appending hops before
   folding them; about half the folds get a short obligation so the reaper
   keeps evicting. After :meth:`HopStore.commit_fold` returns — and only
   then — print a ``commit`` line with the signed statements: that line is
   the acknowledgement a client would have received.

Lines are JSON objects, one per line, flushed immediately. The test kills the
process at random moments and later checks every acknowledged commitment.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import random
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["main"]

_LONG_TTL_MS = 3_600_000


def _emit(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def _now_ms() -> int:
    return int(time.time() * 1000)


def _load_identity(data_dir: Path) -> Any:
    from contracts.identity import Identity, load_identity, save_identity

    key = data_dir / "node.key"
    if not key.exists():
        with contextlib.suppress(FileExistsError):
            save_identity(Identity.generate(), key)
    return load_identity(key)


def _killing(sign: Any) -> Any:
    """A signer that dies mid-transaction: hops inserted, nothing committed."""

    def die(draft: Any) -> Any:
        _emit("dying", where="signer", fold_seq=draft.fold_seq, seqs=list(draft.seqs))
        os.kill(os.getpid(), signal.SIGKILL)
        return sign(draft)  # not reached

    return die


def _configure_logging() -> None:
    # stdout carries only the JSON acknowledgement lines; logs go to stderr.
    import logging

    import structlog

    structlog.configure(
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
    )


async def _run(args: argparse.Namespace) -> int:
    from nodes._store_signing import fold_signer, synthetic_hop
    from nodes.reaper import Reaper
    from nodes.store import HopInput, HopStore

    data_dir = Path(args.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    identity = _load_identity(data_dir)
    origin: str = identity.node_id
    store = await HopStore.open(data_dir, origin, provenance_pending=args.pending)
    integrity = await store.integrity_check()
    previous = store.epoch
    epoch = await store.new_epoch()
    _emit(
        "start",
        pid=os.getpid(),
        origin=origin,
        epoch=epoch,
        previous_epoch=previous,
        integrity=integrity,
        pending=args.pending,
    )
    rng = random.Random(f"{args.seed}:{epoch}")
    reaper = Reaper(store, interval_s=args.reaper_interval_ms / 1000)
    reaper.start()

    next_seq = 1
    folded: list[int] = []
    try:
        for fold_seq in range(1, args.max_folds + 1):
            now = _now_ms()
            fresh = list(range(next_seq, next_seq + rng.randint(1, 6)))
            next_seq = fresh[-1] + 1
            shared = rng.sample(folded, min(2, len(folded))) if rng.random() < 0.3 else []
            seqs = [*shared, *fresh]
            hops = [HopInput(s, synthetic_hop(origin, epoch, s)) for s in seqs]
            if rng.random() < args.append_ratio:
                # Hops logged before the fold exists: never evictable until folded.
                await store.append_hops(epoch, hops[len(shared) :], now_ms=now)
            short = rng.random() < 0.5
            serve_until = now + (args.short_ttl_ms if short else _LONG_TTL_MS)
            sign = fold_signer(identity, serve_until_ms=serve_until, issued_at_ms=now)
            if fold_seq == args.kill_in_signer:
                sign = _killing(sign)
            _emit("begin", fold_seq=fold_seq)  # lets the test see kills mid-commit
            signed = await store.commit_fold(
                epoch=epoch,
                value_ref=f"v{fold_seq % 7}",
                fold_seq=fold_seq,
                hops=hops,
                sign=sign,
                now_ms=now,
            )
            if fold_seq == args.kill_after_commit:
                os.kill(os.getpid(), signal.SIGKILL)
            # Acknowledged only now, after commit_fold returned.
            _emit(
                "commit",
                digest=signed.commitment_digest,
                origin=origin,
                epoch=epoch,
                fold_seq=fold_seq,
                seqs=seqs,
                root=signed.root,
                serve_until=signed.serve_until_ms,
                commitment=base64.b64encode(signed.commitment_envelope).decode("ascii"),
                obligation=base64.b64encode(signed.obligation_envelope).decode("ascii"),
            )
            folded.extend(fresh)
            await asyncio.sleep(0)
    finally:
        await reaper.stop()
        counters = await store.counters()
        await store.close()
    _emit("done", folds=args.max_folds, counters=counters, reaper_evicted=reaper.stats.hops_evicted)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.nodes.crash_driver", description=__doc__)
    parser.add_argument("--data-dir", required=True, help="node data directory (reused)")
    parser.add_argument("--seed", type=int, default=0, help="seed for fold shapes")
    parser.add_argument("--max-folds", type=int, default=100_000, help="stop after N folds")
    parser.add_argument("--reaper-interval-ms", type=float, default=1.0, help="reaper period")
    parser.add_argument(
        "--short-ttl-ms", type=int, default=20, help="serve window of short obligations"
    )
    parser.add_argument(
        "--pending", action="store_true", help="provenance_pending mode (hops land later)"
    )
    parser.add_argument(
        "--append-ratio",
        type=float,
        default=0.2,
        help="share of folds whose hops are appended before the fold commits",
    )
    parser.add_argument(
        "--kill-in-signer",
        type=int,
        default=0,
        metavar="N",
        help="SIGKILL itself inside fold N's commit transaction (after its hops were written)",
    )
    parser.add_argument(
        "--kill-after-commit",
        type=int,
        default=0,
        metavar="N",
        help="SIGKILL itself after fold N's commit_fold returned, before acknowledging it",
    )
    args = parser.parse_args(argv)
    _configure_logging()
    return asyncio.run(_run(args))


if __name__ == "__main__":
    sys.exit(main())
