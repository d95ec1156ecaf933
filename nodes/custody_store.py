"""A custodian's durable side: the folds of other origins it holds (docs/custody.md).

Ordering guarantee (seed 000, the same bar as :meth:`nodes.store.HopStore.commit_fold`)::

    BEGIN IMMEDIATE
      (1) insert the fold's hop bytes (by record leaf hash, leaf index)
      (2) insert or extend the hold: head, fold proof, root, serve_until
    COMMIT   -- WAL + synchronous=FULL: fsync'd before COMMIT returns
    (3) only now does the caller sign the custody statement (serve_until
        at most the hold's)
    BEGIN IMMEDIATE
      (4) keep the statement (one per take: the head's) and the folds it promises
    COMMIT
    (5) only now is the statement returned to anyone

A crash between (2) and (4) leaves hops held that no statement promises:
nothing was promised, and the hold expires like any other. There is no state
in which a statement exists and its hops do not.

The reaper (:func:`reap_custody`, called from :mod:`nodes.reaper`) deletes a
fold's hops in the same transaction as the holds that protected them, and
only when **every** hold of that leaf hash expired (S5 for custodians).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from contracts.custody import SignedCustody
from contracts.merkle import merkle_root
from contracts.rules import expired

#: The hop store (:class:`nodes.store.HopStore`); typed loosely so that the store
#: can call :func:`resolve_held` without an import cycle.
HopStore = Any

__all__ = [
    "CustodyRow",
    "HeldCustodyFold",
    "HeldResolution",
    "HeldStatus",
    "custody_counts",
    "custody_row",
    "hold_folds",
    "keep_statement",
    "kept_statement",
    "reap_custody",
    "resolve_held",
]


@dataclass(frozen=True, slots=True)
class HeldCustodyFold:
    """One fold to hold: its record leaf hash, hops root, proof and verified hops."""

    leaf_hash: str
    root: str
    proof: bytes
    hops: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class CustodyRow:
    """What serving a fold as custodian needs: the origin's head, the fold proof,
    and the statement this node signed for it."""

    head_note: bytes
    proof: bytes
    statement: bytes


async def hold_folds(
    store: HopStore,
    *,
    head_digest: str,
    head_note: bytes,
    origin: str,
    folds: Sequence[HeldCustodyFold],
    serve_until: int,
    now_ms: int,
) -> None:
    """Steps (1)-(2): the hops and the hold, durable when this returns."""
    async with store._write(f"hold custody of {len(folds)} fold(s)") as db:
        for fold in folds:
            await db.executemany(
                # the hops are verified against the fold's root: they replace a row
                # that differs (damaged on disk), and rewrite nothing that does not
                "INSERT INTO custody_hops (leaf_hash, leaf_index, hop_bytes) VALUES (?, ?, ?)"
                " ON CONFLICT (leaf_hash, leaf_index) DO UPDATE SET hop_bytes = excluded.hop_bytes"
                " WHERE custody_hops.hop_bytes IS NOT excluded.hop_bytes",
                [(fold.leaf_hash, i, hop) for i, hop in enumerate(fold.hops)],
            )
            await db.execute(
                "INSERT INTO custody_holds (leaf_hash, head_digest, origin, root, leaf_count,"
                " head_note, proof, serve_until, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (head_digest, leaf_hash) DO UPDATE SET"
                " serve_until = MAX(serve_until, excluded.serve_until)",
                (
                    fold.leaf_hash,
                    head_digest,
                    origin,
                    fold.root,
                    len(fold.hops),
                    head_note,
                    fold.proof,
                    serve_until,
                    now_ms,
                ),
            )


async def keep_statement(
    store: HopStore, custody: SignedCustody, leaf_hashes: Sequence[str], *, now_ms: int
) -> None:
    """Step (4): the signed statement — one per take, for every fold of ``leaf_hashes``
    (the folds it promises under its head) — after their hops are durable (step 2).
    One transaction, one durable write, however many folds."""
    s = custody.statement
    if not leaf_hashes or any(not s.covers(leaf) for leaf in leaf_hashes):
        raise ValueError(
            f"custody statement {custody.digest[:12]}… does not promise every fold kept with it"
        )
    async with store._write(f"keep custody statement {custody.digest[:16]}…") as db:
        # (4a) every fold it names is held, at least until its serve_until (one read)
        marks = ",".join("?" * len(leaf_hashes))
        held = {
            str(row[0])
            for row in await db.execute_fetchall(
                f"SELECT leaf_hash FROM custody_holds WHERE head_digest = ?"
                f" AND serve_until >= ? AND leaf_hash IN ({marks})",
                (s.head, s.serve_until, *leaf_hashes),
            )
        }
        missing = [leaf for leaf in leaf_hashes if leaf not in held]
        if missing:
            raise ValueError(
                f"custody statement {custody.digest[:12]}… names fold {missing[0][:12]}…"
                " that is not held until its serve_until: hold it first (seed 000)"
            )
        await db.execute(
            "INSERT OR IGNORE INTO custody_statements (digest, head_digest, note, serve_until,"
            " created_at) VALUES (?, ?, ?, ?, ?)",
            (custody.digest, s.head, custody.note, s.serve_until, now_ms),
        )
        await db.executemany(
            "INSERT OR IGNORE INTO custody_statement_folds (leaf_hash, head_digest, digest)"
            " VALUES (?, ?, ?)",
            [(leaf, s.head, custody.digest) for leaf in leaf_hashes],
        )


async def kept_statement(
    store: HopStore, *, head_digest: str, leaf_hashes: Sequence[str], now_ms: int
) -> bytes | None:
    """The newest unexpired statement kept for ``head_digest`` that promises every fold
    of ``leaf_hashes`` (what a second take of the same folds returns), or None."""
    if not leaf_hashes:
        return None
    marks = ",".join("?" * len(leaf_hashes))
    async with store._read(f"read custody of head {head_digest[:16]}…") as db:
        rows = list(
            await db.execute_fetchall(
                "SELECT s.note FROM custody_statement_folds f"
                " JOIN custody_statements s ON s.digest = f.digest"
                f" WHERE f.head_digest = ? AND s.serve_until > ? AND f.leaf_hash IN ({marks})"
                " GROUP BY s.digest HAVING COUNT(DISTINCT f.leaf_hash) = ?"
                " ORDER BY s.serve_until DESC LIMIT 1",
                (head_digest, now_ms, *leaf_hashes, len(set(leaf_hashes))),
            )
        )
    return bytes(rows[0][0]) if rows else None


async def custody_row(
    store: HopStore, *, head_digest: str, leaf_hash: str, now_ms: int
) -> CustodyRow | None:
    """The newest unexpired statement for a fold, by origin head digest **or** custody
    statement digest (what an unsigned ask and a signed demand name), with its hold."""
    async with store._read(f"read custody of {leaf_hash[:16]}…") as db:
        rows = list(
            await db.execute_fetchall(
                "SELECT h.head_note, h.proof, s.note FROM custody_statement_folds f"
                " JOIN custody_statements s ON s.digest = f.digest"
                " JOIN custody_holds h ON h.head_digest = f.head_digest"
                " AND h.leaf_hash = f.leaf_hash"
                " WHERE f.leaf_hash = ? AND (f.head_digest = ? OR f.digest = ?)"
                " AND s.serve_until > ? ORDER BY s.serve_until DESC LIMIT 1",
                (leaf_hash, head_digest, head_digest, now_ms),
            )
        )
    if not rows:
        return None
    head_note, proof, note = rows[0]
    return CustodyRow(bytes(head_note), bytes(proof), bytes(note))


class HeldStatus(StrEnum):
    """How a fold held as custodian resolves (the store maps it to its own statuses)."""

    FOUND = "found"
    EXPIRED = "expired"
    UNRESOLVABLE = "unresolvable"
    CORRUPTED = "corrupted"


@dataclass(frozen=True, slots=True)
class HeldResolution:
    status: HeldStatus
    reason: str
    leaves: tuple[bytes, ...] = ()


async def resolve_held(
    db: Any, leaf_hash: str, *, now_ms: int, root: str | None
) -> HeldResolution | None:
    """:meth:`nodes.store.HopStore.resolve` for a fold held as custodian (None: none).

    FOUND only with every leaf present and hashing to ``root`` (the root the
    custodian's statement names, from the caller's verified fold); missing hops
    are EXPIRED once every hold expired, UNRESOLVABLE before; bytes that miss the
    root are CORRUPTED (never served: the answer is a signed STORE_CORRUPTED
    refusal, an admitted loss).
    """
    holds = list(
        await db.execute_fetchall(
            "SELECT root, leaf_count, serve_until FROM custody_holds WHERE leaf_hash = ?",
            (leaf_hash,),
        )
    )
    if not holds:
        return None
    rows = list(
        await db.execute_fetchall(
            "SELECT hop_bytes FROM custody_hops WHERE leaf_hash = ? ORDER BY leaf_index",
            (leaf_hash,),
        )
    )
    held_root, count = str(holds[0][0]), int(holds[0][1])
    latest = max(int(h[2]) for h in holds)
    leaves = tuple(bytes(r[0]) for r in rows)
    if len(leaves) != count:
        status = HeldStatus.EXPIRED if expired(latest, now_ms) else HeldStatus.UNRESOLVABLE
        return HeldResolution(status, f"custody: {count - len(leaves)} of {count} hops absent")
    want = root if root is not None else held_root
    if merkle_root(leaves).hex() != want:
        return HeldResolution(
            HeldStatus.CORRUPTED,
            f"custody: hops of {leaf_hash[:12]}… miss root {want[:12]}…",
            leaves,
        )
    return HeldResolution(HeldStatus.FOUND, "", leaves)


async def reap_custody(store: HopStore, *, now_ms: int, limit: int = 10_000) -> int:
    """Delete expired holds and statements, and the hops no unexpired hold protects.

    One transaction: a leaf hash's hops go only when no hold of it runs at
    ``now_ms`` — the reaper reads the holds as its precondition (S5, seed 000).
    Returns the hops deleted.
    """
    async with store._write("reap expired custody") as db:
        cursor = await db.execute(_REAP_CUSTODY_HOPS, (now_ms, now_ms, limit))
        evicted = max(int(cursor.rowcount), 0)
        await db.execute(
            "DELETE FROM custody_statement_folds WHERE digest IN"
            " (SELECT digest FROM custody_statements WHERE serve_until < ?)",
            (now_ms,),
        )
        await db.execute("DELETE FROM custody_statements WHERE serve_until < ?", (now_ms,))
        await db.execute(
            "DELETE FROM custody_holds WHERE serve_until < ? AND leaf_hash NOT IN"
            " (SELECT leaf_hash FROM custody_hops)",
            (now_ms,),
        )
    return evicted


async def custody_counts(store: HopStore) -> dict[str, int]:
    """Gauges: folds held as custodian, their hops, statements kept."""
    async with store._read("count custody") as db:
        out: dict[str, int] = {}
        for name, sql in (
            ("custody_folds", "SELECT COUNT(*) FROM custody_holds"),
            ("custody_hops", "SELECT COUNT(*) FROM custody_hops"),
            ("custody_statements", "SELECT COUNT(*) FROM custody_statements"),
        ):
            rows = list(await db.execute_fetchall(sql))
            out[name] = int(rows[0][0])
    return out


_REAP_CUSTODY_HOPS: Final = """
DELETE FROM custody_hops
WHERE leaf_hash IN (
    SELECT h.leaf_hash FROM custody_holds h
    WHERE h.serve_until < ?
      AND NOT EXISTS (
          SELECT 1 FROM custody_holds o
          WHERE o.leaf_hash = h.leaf_hash AND o.serve_until >= ?
      )
    LIMIT ?
)
"""
