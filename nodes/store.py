"""A node's durable hop log: hops, commitments, obligations, evidence.

The store is the origin's side of the serve contract (design S5, S6) and the
write-ordering bar of seed 000: *a commitment that is issued must resolve*,
under crashes and eviction pressure.

Ordering guarantee of :meth:`HopStore.commit_fold` (default mode)::

    BEGIN IMMEDIATE
      (1) insert the fold's hops at (origin, epoch, seq)   -- or check identical
      (2) sign: the caller's signer builds commitment + obligation over exactly
          the stored hop bytes; the store checks the root before keeping them
      (3) insert commitment, fold membership, obligation
    COMMIT   -- WAL + synchronous=FULL: fsync'd before COMMIT returns
    (4) only now is the signed fold returned to the caller

Hops, pointer and obligation become durable in one transaction, so there is
no state in which a commitment exists and its hops do not; the reaper
(:mod:`nodes.reaper`) deletes hops with a single statement that reads the
obligation table, so it can never see a committed hop without the
obligation that protects it.

``provenance_pending`` mode (seed 000, "decouple"): step (1) is deferred; the
pointer (commitment, membership, obligation) is committed with status
``pending`` and the hop bytes land later through :meth:`HopStore.reconcile`.
Until they land, :meth:`HopStore.resolve` answers ``PENDING`` — never wrong
bytes. Pending hops are held in memory only: if the process dies before they
land, the fold becomes ``lost`` on the next open and resolves
``UNRESOLVABLE`` (counted; the origin is then rightly accused).

Errors: every sqlite/aiosqlite failure is translated at this boundary into
the :class:`StoreError` tree (part of the node's one tree, with status codes,
in :mod:`nodes.errors`), with a message naming the operation::

    StoreError
    ├── StoreUnavailable      cannot open / disk I/O / locked past the timeout
    │   └── StoreFull         no space left on the disk (nodes._disk: logged once per interval)
    ├── StoreCorrupt          integrity failure, schema or owner mismatch
    ├── StoreClosed           used after close()
    ├── StaleEpoch            caller built hops for an epoch that is not current
    ├── HopConflict           (origin, epoch, seq) already holds other bytes
    ├── MissingHop            a fold names a hop the log does not have
    ├── FoldConflict          a second, different fold for (epoch, value_ref, fold_seq)
    ├── SignerMismatch        the signer's commitment does not cover the stored bytes
    └── UnknownCommitment     obligation/evidence for a commitment not stored here

Misuse by the caller (empty fold, negative seq) is ``ValueError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import secrets
import sqlite3
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Final, TypeVar, assert_never

import aiosqlite

from contracts.canonical import sha256_hex
from contracts.head_note import head_digest, parse_head
from contracts.heads import batch_record
from contracts.rules import expired
from nodes._disk import disk_full, is_disk_full
from nodes._disk import reporter as _disk_reporter
from nodes._store_conn import Cursor, Db, InLoopConnection
from nodes._store_schema import DDL, SCHEMA_VERSION
from nodes.custody_store import HeldResolution, HeldStatus, resolve_held
from nodes.errors import (
    FoldConflict,
    HopConflict,
    MissingHop,
    RequestTooLarge,
    SignerMismatch,
    StaleEpoch,
    StoreClosed,
    StoreCorrupt,
    StoreError,
    StoreFull,
    StoreUnavailable,
    UnknownCommitment,
)

__all__ = [
    "DB_FILENAME",
    "AttestationCaps",
    "AttestationKept",
    "CompactionInput",
    "CompactionSigner",
    "CounterName",
    "EvidenceRecord",
    "FoldConflict",
    "FoldDraft",
    "FoldRecord",
    "FoldSigner",
    "FoldStatus",
    "HeadFoldRecord",
    "HopConflict",
    "HopInput",
    "HopStore",
    "KeptCommitment",
    "MissingHop",
    "ObligationRecord",
    "ReapReport",
    "Resolution",
    "ResolveStatus",
    "RootFunction",
    "SignedCompaction",
    "SignedFold",
    "SignedHeadFold",
    "SignerMismatch",
    "StaleEpoch",
    "StoreCheck",
    "StoreClosed",
    "StoreCorrupt",
    "StoreError",
    "StoreMode",
    "StoreUnavailable",
    "UnknownCommitment",
    "WitnessLogRow",
    "head_binding",
]

#: File name of the database inside a node's data directory.
DB_FILENAME: Final = "hops.sqlite3"

_BUSY_TIMEOUT_MS: Final = 10_000
#: Digests per ``IN (...)`` of one query: well below SQLite's host-parameter limit.
_IN_CHUNK: Final = 500


# --------------------------------------------------------------------------- errors


def _translate(exc: BaseException, what: str, path: Path | None = None) -> StoreError:
    """Map a sqlite/aiosqlite exception to the store's tree, naming ``what`` (and the
    database ``path`` when the disk holding it is full)."""
    text = str(exc) or type(exc).__name__
    if path is not None and is_disk_full(exc):
        return disk_full(exc, what, path)
    if isinstance(exc, sqlite3.OperationalError):
        lowered = text.lower()
        if "locked" in lowered or "busy" in lowered:
            return StoreUnavailable(f"{what}: database locked past {_BUSY_TIMEOUT_MS} ms ({text})")
        if "malformed" in lowered or "corrupt" in lowered:
            return StoreCorrupt(f"{what}: database corrupt ({text})")
        return StoreUnavailable(f"{what}: {text}")
    if isinstance(exc, sqlite3.DatabaseError) and (
        "malformed" in text.lower() or "not a database" in text.lower()
    ):
        return StoreCorrupt(f"{what}: database corrupt ({text})")
    if isinstance(exc, sqlite3.IntegrityError):
        return StoreCorrupt(f"{what}: constraint failed ({text})")
    if isinstance(exc, ValueError) and "closed" in text.lower():
        return StoreClosed(f"{what}: store is closed")
    return StoreUnavailable(f"{what}: {type(exc).__name__}: {text}")


# --------------------------------------------------------------------------- records


class StoreMode(StrEnum):
    """How a store keeps its promises: the deployed mode, or scratch for experiments.

    ``durable`` (every node a user runs): WAL with ``synchronous=FULL`` — a
    COMMIT is fsync'd before it returns, which is what the ordering bar of
    seed 000 rests on — and statements on aiosqlite's thread, so a slow
    disk never stalls the node's event loop.

    ``scratch``: claims NO durability. WAL with ``synchronous=OFF`` (COMMIT
    returns once SQLite handed the pages to the OS; a power loss or kernel
    crash may lose or corrupt the log) and statements on the event loop's
    own thread (:class:`nodes._store_conn.InLoopConnection`: no hand-off,
    but a slow statement blocks the loop). Only for nodes whose log dies
    with the process anyway — the boundary experiment's in-process nodes in
    a temporary directory — where the ordering within one process (hops,
    then signature, then COMMIT, then release) is all that is checked, and
    it is unchanged: the same transactions run in the same order.
    """

    DURABLE = "durable"
    SCRATCH = "scratch"


@functools.cache
def _scratch_template() -> bytes:
    """The bytes of a log file holding the schema (:data:`DDL`) and nothing else,
    in WAL mode: what every new scratch log starts from."""
    with tempfile.TemporaryDirectory(prefix="provnet-schema-") as tmp:
        path = Path(tmp) / DB_FILENAME
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("BEGIN IMMEDIATE")
            for statement in DDL:
                conn.execute(statement)
            conn.execute("COMMIT")
        finally:
            conn.close()  # the last connection: its WAL is checkpointed into the file
        return path.read_bytes()


class FoldStatus(StrEnum):
    """Where a commitment's hop bytes are."""

    DURABLE = "durable"
    PENDING = "pending"
    LOST = "lost"


class ResolveStatus(StrEnum):
    """Outcome of :meth:`HopStore.resolve` — explicit, never wrong bytes."""

    FOUND = "found"  # every leaf present and the leaves hash to the committed root
    PENDING = "pending"  # provenance_pending: hops not landed yet; ask again
    UNKNOWN = "unknown"  # no such commitment in this store
    EXPIRED = "expired"  # hops evicted after every obligation expired (legitimate absence)
    UNRESOLVABLE = "unresolvable"  # committed and not (entirely) resolvable: invariant breach
    CORRUPTED = "corrupted"  # every hop present, the bytes miss the committed root: a damaged disk


class CounterName(StrEnum):
    """Counters kept by the store (``counters()`` adds gauges and evidence)."""

    COMMITS = "commits"
    SERVES = "serves"
    REFUSALS = "refusals"
    PENDING_ANSWERS = "pending_answers"
    UNRESOLVABLE = "provenance_unresolvable"
    RECONCILED = "reconciled"
    HOPS_EVICTED = "hops_evicted"
    NONCE_REPLAYS = "nonce_replays"
    STORE_CORRUPTED = "store_corrupted"


@dataclass(frozen=True, slots=True)
class HopInput:
    """One hop to store: its sequence number and its canonical bytes."""

    seq: int
    hop_bytes: bytes

    def __post_init__(self) -> None:
        if self.seq < 0:
            raise ValueError(f"hop seq must be >= 0, got {self.seq}")
        if not self.hop_bytes:
            raise ValueError(f"hop seq {self.seq} has empty bytes")


@dataclass(frozen=True, slots=True)
class FoldDraft:
    """What the signer is asked to commit to: the exact stored hop bytes."""

    origin: str
    epoch: str
    value_ref: str
    fold_seq: int
    seqs: tuple[int, ...]
    leaves: tuple[bytes, ...]
    provenance_pending: bool = False

    @property
    def leaf_count(self) -> int:
        return len(self.leaves)


@dataclass(frozen=True, slots=True)
class SignedFold:
    """The signer's answer: commitment and obligation envelopes, stored verbatim."""

    commitment_digest: str
    commitment_envelope: bytes
    root: str
    obligation_digest: str
    obligation_envelope: bytes
    serve_until_ms: int


#: Builds and signs the commitment + obligation for a draft (holds the key).
FoldSigner = Callable[[FoldDraft], SignedFold]


@dataclass(frozen=True, slots=True)
class CompactionInput:
    """One value's fold in a compaction: its fold sequence and hops in fold order."""

    value_ref: str
    fold_seq: int
    hops: tuple[HopInput, ...]


@dataclass(frozen=True, slots=True)
class SignedHeadFold:
    """One fold under a signed head: record (leaf data), its leaf hash, proof bytes."""

    leaf_hash: str
    record: bytes
    root: str
    proof: bytes


@dataclass(frozen=True, slots=True)
class SignedCompaction:
    """The signer's answer for a compaction: ONE signed head and a fold per draft."""

    head_digest: str
    head_note: bytes
    seq: int
    serve_until_ms: int
    folds: tuple[SignedHeadFold, ...]


@dataclass(frozen=True, slots=True)
class HeadFoldRecord:
    """A stored own fold under a head: the head note, the fold proof, the record."""

    head_digest: str
    head_note: bytes
    leaf_hash: str
    proof: bytes
    binding: str


@dataclass(frozen=True, slots=True)
class WitnessLogRow:
    """A witness's state for one log: the latest checkpoint it cosigned (its note)."""

    origin: str
    size: int
    root: bytes
    note: bytes


T = TypeVar("T")


#: Builds the fold records, tree and head of a compaction and signs the head once.
CompactionSigner = Callable[[Sequence[FoldDraft]], SignedCompaction]


def head_binding(head_digest: str, leaf_hash: str) -> str:
    """Key of a fold's obligations row under a head: SHA-256(head digest ‖ leaf hash)."""
    return hashlib.sha256(bytes.fromhex(head_digest) + bytes.fromhex(leaf_hash)).hexdigest()


#: RFC 6962 Merkle root over leaf bytes (from ``contracts``).
RootFunction = Callable[[Sequence[bytes]], bytes]


@dataclass(frozen=True, slots=True)
class FoldRecord:
    """A stored commitment (own or a peer's) with its envelope bytes."""

    digest: str
    origin: str
    epoch: str
    value_ref: str
    fold_seq: int
    leaf_count: int
    root: str
    envelope: bytes
    local: bool
    status: FoldStatus


@dataclass(frozen=True, slots=True)
class ObligationRecord:
    """An obligation with its envelope bytes, as stored or to be kept verbatim.

    ``local`` when this node issued it.
    """

    digest: str
    commitment_digest: str
    serve_until_ms: int
    envelope: bytes
    local: bool


@dataclass(frozen=True, slots=True)
class EvidenceRecord:
    """A stored piece of evidence (body is the evidence file's bytes)."""

    digest: str
    kind: str
    accused: str
    commitment_digest: str | None
    file_path: str | None
    body: bytes
    created_at_ms: int


@dataclass(frozen=True, slots=True)
class Resolution:
    """Answer to "give me the hops of commitment X" — falsy unless FOUND.

    ``leaves`` is the whole fold in leaf order when FOUND (inclusion proofs
    need every leaf; the server picks the demanded ones), and empty otherwise.
    ``damaged`` only when CORRUPTED: the bytes read, which miss the committed
    root — never to be served; the node's answer rule hashes them and signs a
    STORE_CORRUPTED refusal instead.
    """

    status: ResolveStatus
    commitment_digest: str
    reason: str
    fold: FoldRecord | None = None
    obligations: tuple[ObligationRecord, ...] = ()
    leaves: tuple[bytes, ...] = ()
    damaged: tuple[bytes, ...] = ()

    def __bool__(self) -> bool:
        return self.status is ResolveStatus.FOUND


@dataclass(frozen=True, slots=True)
class KeptCommitment:
    """A verified commitment to keep verbatim (``envelope``: the bytes received)."""

    digest: str
    origin: str
    epoch: str
    value_ref: str
    fold_seq: int
    leaf_count: int
    root: str
    envelope: bytes


@dataclass(frozen=True, slots=True)
class AttestationCaps:
    """Caps on kept attestations: per attester key, and per pool (reserved, stranger)."""

    per_attester: int
    reserved_count: int
    reserved_bytes: int
    stranger_count: int
    stranger_bytes: int


@dataclass(frozen=True, slots=True)
class AttestationKept:
    """Whether an attestation was newly kept, and how many stranger ones it displaced."""

    stored: bool
    evicted: int


@dataclass(frozen=True, slots=True)
class StoreCheck:
    """What :meth:`HopStore.check_stored` read and found intact, and how long it took."""

    hops: int
    folds: int
    seconds: float


@dataclass(frozen=True, slots=True)
class ReapReport:
    """What one reaper pass did."""

    hops_evicted: int
    protected_hops: int  # hops under a live obligation; -1 when not counted


# --------------------------------------------------------------------------- store


async def _begin(db: Db, statement: str) -> None:
    """Start a transaction that a cancelled caller cannot leave open.

    A cancelled ``await`` does not stop a statement on the connection's
    thread: it still runs, in order. So the BEGIN runs shielded, and on
    cancellation it is waited for and rolled back before re-raising. The
    connection's ``in_transaction`` is not consulted — a COMMIT a cancelled
    caller queued may not have run yet, so it can read True for a
    transaction that is about to close. Instead the BEGIN itself says so:
    if a transaction was truly left open (a caller cancelled twice during its
    clean-up), it is rolled back and the BEGIN issued again.
    """
    for attempt in (1, 2):
        begin = asyncio.ensure_future(db.execute(statement))
        try:
            await asyncio.shield(begin)
            return
        except asyncio.CancelledError:
            with contextlib.suppress(BaseException):  # already leaving with CancelledError
                await begin
                await db.execute("ROLLBACK")
            raise
        except sqlite3.OperationalError as exc:
            if attempt == 2 or "within a transaction" not in str(exc):
                raise
            await db.execute("ROLLBACK")


async def _threaded_connection(path: Path) -> Db:
    conn: Db = await aiosqlite.connect(path, isolation_level=None)
    return conn


def _make_epoch(counter: int) -> str:
    """``<counter>-<64 random bits>``: the counter orders epochs for humans; the
    random part keeps an epoch unique even after a restore rolls the counter back.
    """
    return f"{counter}-{secrets.token_hex(8)}"


def _default_root_function() -> RootFunction:
    """``merkle_root``, incremental for cumulative folds (:class:`contracts.merkle.FoldRoots`:
    a fold that extends one this store checked hashes only its new hops)."""
    from contracts.merkle import FoldRoots

    fn: RootFunction = FoldRoots().root
    return fn


class HopStore:
    """Async hop log over one SQLite database (WAL, synchronous=FULL).

    One writer connection (all writes serialised by an ``asyncio.Lock`` and
    ``BEGIN IMMEDIATE``) and one reader connection (WAL readers do not block
    the writer). Open with :meth:`open`, close with :meth:`close` (or use
    ``async with``).
    """

    def __init__(
        self,
        path: Path,
        origin: str,
        writer: Db,
        reader: Db,
        epoch: str,
        *,
        provenance_pending: bool,
        root_of: RootFunction,
        mode: StoreMode = StoreMode.DURABLE,
    ) -> None:
        self._mode = mode
        self._path = path
        self._origin = origin
        self._writer: Db | None = writer
        self._reader: Db | None = reader
        self._epoch = epoch
        self._pending_mode = provenance_pending
        self._root_of = root_of
        self._write_lock = asyncio.Lock()
        self._read_lock = asyncio.Lock()
        self._counters: dict[str, int] = {}
        self._unflushed: dict[str, int] = {}
        # provenance_pending mode: hop bytes committed as a pointer but not landed.
        self._pending_hops: dict[str, tuple[tuple[int, bytes], ...]] = {}
        # In-memory effects of the open write transaction, undone if it rolls back.
        self._tx_undo: list[Callable[[], object]] = []
        # Write transactions committed so far, and the gauges counted at that
        # generation: Node.Stats is open to anyone, so it counts rows only when
        # something was written since it last did (a stranger's loop of calls
        # costs a dict copy each, not a scan).
        self._generation = 0
        self._gauges: tuple[int, dict[str, int]] | None = None

    # ----------------------------------------------------------------- lifecycle

    @classmethod
    async def open(
        cls,
        data_dir: Path | str,
        origin: str | None,
        *,
        provenance_pending: bool = False,
        root_of: RootFunction | None = None,
        settle_pending: bool = True,
        mode: StoreMode = StoreMode.DURABLE,
    ) -> HopStore:
        """Open (creating if needed) the hop log in ``data_dir`` for ``origin``.

        A data dir belongs to one origin: opening it for another raises
        :class:`StoreCorrupt`. ``origin=None`` opens an existing hop log as
        the origin recorded in it (tools such as a standalone reaper).
        Pending folds whose hops can no longer land (the process died first)
        are marked ``lost`` here — unless ``settle_pending`` is false, which a
        second process on a live node's log (a standalone reaper) must pass:
        the pending bytes are then in the node's memory, not lost. ``mode``
        is :class:`StoreMode` (``scratch`` claims no durability).
        """
        if origin == "":
            raise ValueError("origin must be a non-empty node id")
        directory = Path(data_dir)
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreUnavailable(
                f"open store: cannot create data dir {directory}: {exc}"
            ) from exc
        path = directory / DB_FILENAME
        if origin is None and not path.exists():
            raise StoreUnavailable(f"open store {path}: no hop log here to open")
        if mode is StoreMode.SCRATCH and not path.exists():
            # a new scratch log starts as the empty schema's file, built once per
            # process: the same tables and indexes its DDL makes, with no meta
            # row yet (written below, as for a log created here)
            try:
                with open(path, "xb") as fh:  # never over a log another opener made
                    fh.write(_scratch_template())
            except FileExistsError:
                pass
            except OSError as exc:
                raise StoreUnavailable(f"open store {path}: cannot create it: {exc}") from exc
        writer: Db | None = None
        reader: Db | None = None
        match mode:
            case StoreMode.DURABLE:
                connect: Callable[[Path], Awaitable[Db]] = _threaded_connection
                synchronous = "FULL"
            case StoreMode.SCRATCH:
                connect = InLoopConnection.connect
                synchronous = "OFF"
            case _:
                assert_never(mode)
        try:
            writer = await connect(path)
            await writer.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
            cursor = await writer.execute("PRAGMA journal_mode = WAL")
            journal = await cursor.fetchone()
            if journal is None or str(journal[0]).lower() != "wal":
                raise StoreUnavailable(f"open store {path}: WAL not available (got {journal})")
            await writer.execute(f"PRAGMA synchronous = {synchronous}")
            await writer.execute("PRAGMA foreign_keys = ON")
            origin, epoch = await cls._init_schema(writer, path, origin)
            reader = await connect(path)
            await reader.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
            await reader.execute("PRAGMA query_only = ON")
        except BaseException as exc:
            for conn in (reader, writer):
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await conn.close()
            if isinstance(exc, StoreError | ValueError):
                raise
            if isinstance(exc, sqlite3.Error):
                raise _translate(exc, f"open store {path}", path) from exc
            raise
        store = cls(
            path,
            origin,
            writer,
            reader,
            epoch,
            provenance_pending=provenance_pending,
            root_of=root_of if root_of is not None else _default_root_function(),
            mode=mode,
        )
        await store._load_counters()
        if settle_pending:
            await store._mark_lost_pending()
        return store

    @staticmethod
    async def _init_schema(db: Db, path: Path, origin: str | None) -> tuple[str, str]:
        await db.execute("BEGIN IMMEDIATE")
        try:
            # Read the version before creating anything: a log written by
            # another schema version is refused untouched.
            has_meta = await db.execute_fetchall(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
            )
            meta: dict[str, str] = {}
            if list(has_meta):
                rows = await db.execute_fetchall("SELECT key, value FROM meta")
                meta = {str(k): str(v) for k, v in rows}
            if meta and meta.get("schema_version") != str(SCHEMA_VERSION):
                raise StoreCorrupt(
                    f"open store {path}: schema version {meta.get('schema_version')!r}, "
                    f"this build reads {SCHEMA_VERSION}"
                )
            for statement in DDL:
                await db.execute(statement)
            if not meta and origin is None:
                raise StoreUnavailable(f"open store {path}: no hop log here to open")
            if origin is None:
                origin = meta.get("origin", "")
            if not meta:
                now = str(int(time.time() * 1000))
                first_epoch = _make_epoch(1)
                await db.executemany(
                    "INSERT INTO meta (key, value) VALUES (?, ?)",
                    [
                        ("schema_version", str(SCHEMA_VERSION)),
                        ("origin", origin),
                        ("epoch", first_epoch),
                        ("epoch_counter", "1"),
                        ("created_at", now),
                    ],
                )
                meta = {"schema_version": str(SCHEMA_VERSION), "origin": origin}
                meta["epoch"] = first_epoch
            if meta.get("schema_version") != str(SCHEMA_VERSION):
                raise StoreCorrupt(
                    f"open store {path}: schema version {meta.get('schema_version')!r}, "
                    f"this build reads {SCHEMA_VERSION}"
                )
            if meta.get("origin") != origin:
                raise StoreCorrupt(
                    f"open store {path}: data dir belongs to origin {meta.get('origin')!r}, "
                    f"not {origin!r}"
                )
            epoch = meta["epoch"]
            await db.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(Exception):
                await db.execute("ROLLBACK")
            raise
        return origin, epoch

    async def close(self) -> None:
        """Flush counters and close both connections (idempotent)."""
        if self._writer is None:
            return
        try:
            if self._unflushed:
                # Write-behind counters may be lost (see the module docs); on a full
                # disk they are, and closing still closes.
                with contextlib.suppress(StoreFull):
                    async with self._write("flush counters"):
                        pass
        finally:
            writer, reader = self._writer, self._reader
            self._writer = self._reader = None
            for conn in (reader, writer):
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await conn.close()

    async def __aenter__(self) -> HopStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # ----------------------------------------------------------------- plumbing

    @property
    def origin(self) -> str:
        return self._origin

    @property
    def epoch(self) -> str:
        """The current epoch (hop bytes must be built for it)."""
        return self._epoch

    @property
    def path(self) -> Path:
        return self._path

    @property
    def mode(self) -> StoreMode:
        """What this store promises (:class:`StoreMode`)."""
        return self._mode

    @property
    def provenance_pending(self) -> bool:
        return self._pending_mode

    def _conn(self, which: str) -> Db:
        conn = self._writer if which == "writer" else self._reader
        if conn is None:
            raise StoreClosed(f"hop log {self._path} is closed")
        return conn

    @contextlib.asynccontextmanager
    async def _write(self, what: str) -> AsyncIterator[Db]:
        """One write transaction: BEGIN IMMEDIATE … COMMIT (fsync'd) or ROLLBACK.

        Unflushed counters ride along in every write transaction.
        """
        async with self._write_lock:
            db = self._conn("writer")
            self._tx_undo.clear()
            try:
                await _begin(db, "BEGIN IMMEDIATE")
            except (sqlite3.Error, ValueError) as exc:
                raise _translate(exc, what, self._path) from exc
            try:
                yield db
                if self._unflushed:
                    await db.executemany(
                        "INSERT INTO counters (name, value) VALUES (?, ?) "
                        "ON CONFLICT (name) DO UPDATE SET value = value + excluded.value",
                        list(self._unflushed.items()),
                    )
                await db.execute("COMMIT")
                self._unflushed.clear()
                self._generation += 1
            except BaseException as exc:
                with contextlib.suppress(Exception):
                    await asyncio.shield(db.execute("ROLLBACK"))
                for undo in self._tx_undo:  # what the rolled-back transaction noted in memory
                    undo()
                self._tx_undo.clear()
                if isinstance(exc, sqlite3.Error):
                    raise _translate(exc, what, self._path) from exc
                raise
            if _disk_reporter.full:
                _disk_reporter.wrote(self._path)

    @contextlib.asynccontextmanager
    async def _read(self, what: str) -> AsyncIterator[Db]:
        """One consistent read snapshot on the reader connection."""
        async with self._read_lock:
            db = self._conn("reader")
            try:
                await _begin(db, "BEGIN")
            except (sqlite3.Error, ValueError) as exc:
                raise _translate(exc, what) from exc
            try:
                yield db
            except sqlite3.Error as exc:
                raise _translate(exc, what) from exc
            finally:
                with contextlib.suppress(Exception):
                    await db.execute("COMMIT")

    def _bump_in_tx(self, name: CounterName, n: int = 1) -> None:
        """:meth:`bump` for what the open write transaction does: taken back if it
        rolls back (a COMMIT refused for a full disk counts no commit)."""
        self.bump(name, n)
        self._tx_undo.append(lambda: self._unbump(str(name), n))

    def _unbump(self, key: str, n: int) -> None:
        self._counters[key] = self._counters.get(key, 0) - n
        left = self._unflushed.get(key, 0) - n
        if left:
            self._unflushed[key] = left
        else:
            self._unflushed.pop(key, None)

    def _pending_in_tx(self, digest: str, hops: tuple[tuple[int, bytes], ...]) -> None:
        """Queue a pending fold's bytes; dropped again if the transaction rolls back."""
        self._pending_hops[digest] = hops
        self._tx_undo.append(lambda: self._pending_hops.pop(digest, None))

    def bump(self, name: CounterName | str, n: int = 1) -> None:
        """Add ``n`` to a counter (persisted with the next write transaction)."""
        key = str(name)
        self._counters[key] = self._counters.get(key, 0) + n
        self._unflushed[key] = self._unflushed.get(key, 0) + n

    async def _load_counters(self) -> None:
        db = self._conn("writer")
        try:
            rows = await db.execute_fetchall("SELECT name, value FROM counters")
        except sqlite3.Error as exc:
            raise _translate(exc, "load counters") from exc
        self._counters = {str(name): int(value) for name, value in rows}

    async def flush_counters(self) -> None:
        """Persist counters now (they otherwise ride on the next write)."""
        if self._unflushed:
            async with self._write("flush counters"):
                pass

    # ----------------------------------------------------------------- epochs

    async def new_epoch(self) -> str:
        """Start a new epoch (reset, new run, restore) and persist it; returns it.

        Seqs may restart at 0/1 afterwards: old commitments keep naming the
        old epoch, so they never resolve to the new hops.
        """
        async with self._write("start new epoch") as db:
            rows = list(
                await db.execute_fetchall("SELECT value FROM meta WHERE key = 'epoch_counter'")
            )
            counter = (int(rows[0][0]) if rows else 0) + 1
            new = _make_epoch(counter)
            await db.executemany(
                "INSERT INTO meta (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                [("epoch", new), ("epoch_counter", str(counter))],
            )
        self._epoch = new
        return new

    # ----------------------------------------------------------------- hops

    async def append_hops(self, epoch: str, hops: Sequence[HopInput], *, now_ms: int) -> None:
        """Append hops to the log; durable (fsync'd) when this returns.

        Re-appending identical bytes is a no-op; different bytes at an
        existing (origin, epoch, seq) raise :class:`HopConflict`.
        """
        self._check_epoch(epoch, "append hops")
        if not hops:
            return
        async with self._write(f"append {len(hops)} hops at epoch {epoch}") as db:
            self._check_epoch(epoch, "append hops")
            await self._insert_hops(db, epoch, hops, now_ms)

    async def _insert_hops(
        self,
        db: Db,
        epoch: str,
        hops: Iterable[HopInput],
        now_ms: int,
        *,
        check_only: bool = False,
    ) -> None:
        # One query for what is already stored, one executemany for the rest.
        wanted: dict[int, tuple[str, bytes]] = {}
        for hop in hops:
            digest = sha256_hex(hop.hop_bytes)
            earlier = wanted.setdefault(hop.seq, (digest, hop.hop_bytes))
            if earlier[0] != digest:
                raise HopConflict(
                    f"hop ({self._origin[:12]}…, epoch {epoch}, seq {hop.seq}) given twice"
                    f" with digests {earlier[0][:16]}… and {digest[:16]}…"
                )
        stored = await db.execute_fetchall(
            "SELECT seq, digest FROM hops WHERE origin = ? AND epoch = ?"
            " AND seq IN (SELECT value FROM json_each(?))",
            (self._origin, epoch, json.dumps(list(wanted))),
        )
        for seq, have in stored:
            digest = wanted.pop(int(seq))[0]
            if have != digest:
                raise HopConflict(
                    f"hop ({self._origin[:12]}…, epoch {epoch}, seq {seq}) already "
                    f"holds digest {str(have)[:16]}…, refusing {digest[:16]}…"
                )
        if check_only or not wanted:
            return
        await db.executemany(
            "INSERT INTO hops (origin, epoch, seq, hop_bytes, digest, appended_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [
                (self._origin, epoch, seq, data, digest, now_ms)
                for seq, (digest, data) in wanted.items()
            ],
        )

    def _check_epoch(self, epoch: str, what: str) -> None:
        if epoch != self._epoch:
            raise StaleEpoch(
                f"{what}: hops built for epoch {epoch}, current epoch is {self._epoch}"
            )

    async def hop(self, epoch: str, seq: int) -> bytes | None:
        """Bytes of one hop, or None if absent (never appended or evicted)."""
        return (await self.hops(epoch, (seq,))).get(seq)

    async def hops(self, epoch: str, seqs: Sequence[int]) -> dict[int, bytes]:
        """Bytes of this origin's hops at ``seqs`` in ``epoch``: seq -> bytes, absent ones left out.

        One query in one read snapshot, however many seqs (they go in as a
        JSON array, so no bound on SQL variables applies).
        """
        async with self._read(f"read {len(seqs)} hops") as db:
            rows = await db.execute_fetchall(
                "SELECT seq, hop_bytes FROM hops WHERE origin = ? AND epoch = ?"
                " AND seq IN (SELECT value FROM json_each(?))",
                (self._origin, epoch, json.dumps([int(s) for s in seqs])),
            )
        return {int(r[0]): bytes(r[1]) for r in rows}

    # ----------------------------------------------------------------- commit

    async def commit_fold(
        self,
        *,
        epoch: str,
        value_ref: str,
        fold_seq: int,
        hops: Sequence[HopInput],
        sign: FoldSigner,
        now_ms: int,
    ) -> SignedFold:
        """Make a fold's hops durable, then sign and store its commitment + obligation.

        ``hops`` are in fold (leaf) order; hops already in the log must carry
        identical bytes. Returns only after COMMIT (hops, commitment,
        membership and obligation fsync'd together). In provenance_pending
        mode the hops are not written here: the fold is stored ``pending``
        and :meth:`reconcile` lands them.

        Committing the same fold again with the same bytes returns the
        stored signed fold (retry-safe); with other bytes raises
        :class:`FoldConflict`.
        """
        if not hops:
            raise ValueError(f"fold {value_ref}#{fold_seq} has no hops")
        seqs = tuple(h.seq for h in hops)
        if len(set(seqs)) != len(seqs):
            raise ValueError(f"fold {value_ref}#{fold_seq} names a seq twice: {seqs}")
        self._check_epoch(epoch, f"commit fold {value_ref}#{fold_seq}")
        leaves = tuple(h.hop_bytes for h in hops)
        what = f"commit fold {value_ref}#{fold_seq} (epoch {epoch}, {len(hops)} hops)"
        pending = self._pending_mode
        async with self._write(what) as db:
            # Re-checked under the write lock: a concurrent new_epoch() wins.
            self._check_epoch(epoch, f"commit fold {value_ref}#{fold_seq}")
            existing = await self._existing_fold(db, epoch, value_ref, fold_seq, leaves)
            if existing is not None:
                return existing
            # (1) hops durable first (same transaction as the pointer).
            if not pending:
                await self._insert_hops(db, epoch, hops, now_ms)
            else:
                # Not written yet, but a conflict must fail now, not at landing.
                await self._insert_hops(db, epoch, hops, now_ms, check_only=True)
            # (2) sign over exactly the bytes stored; verify before keeping.
            draft = FoldDraft(self._origin, epoch, value_ref, fold_seq, seqs, leaves, pending)
            signed = sign(draft)
            expected_root = self._root_of(leaves).hex()
            if signed.root != expected_root:
                raise SignerMismatch(
                    f"{what}: signer root {signed.root[:16]}… is not the Merkle root "
                    f"{expected_root[:16]}… of the stored hop bytes"
                )
            # (3) pointer + obligation.
            await db.execute(
                "INSERT INTO commitments (digest, origin, epoch, value_ref, fold_seq, leaf_count,"
                " root, envelope, local, status, created_at) VALUES (?,?,?,?,?,?,?,?,1,?,?)",
                (
                    signed.commitment_digest,
                    self._origin,
                    epoch,
                    value_ref,
                    fold_seq,
                    len(leaves),
                    signed.root,
                    signed.commitment_envelope,
                    str(FoldStatus.PENDING if pending else FoldStatus.DURABLE),
                    now_ms,
                ),
            )
            await db.executemany(
                "INSERT INTO fold_members (commitment_digest, leaf_index, origin, epoch, seq)"
                " VALUES (?, ?, ?, ?, ?)",
                [
                    (signed.commitment_digest, index, self._origin, epoch, seq)
                    for index, seq in enumerate(seqs)
                ],
            )
            await db.execute(
                "INSERT INTO obligations (digest, commitment_digest, serve_until, envelope,"
                " local, created_at) VALUES (?, ?, ?, ?, 1, ?)",
                (
                    signed.obligation_digest,
                    signed.commitment_digest,
                    signed.serve_until_ms,
                    signed.obligation_envelope,
                    now_ms,
                ),
            )
            self._bump_in_tx(CounterName.COMMITS)
            if pending:
                self._pending_in_tx(
                    signed.commitment_digest, tuple((h.seq, h.hop_bytes) for h in hops)
                )
        # (4) released only after COMMIT returned.
        return signed

    async def commit_compaction(
        self,
        *,
        epoch: str,
        folds: Sequence[CompactionInput],
        sign: CompactionSigner,
        now_ms: int,
    ) -> SignedCompaction:
        """Make a compaction's hops durable, then sign ONE head and store every fold.

        The ordering of :meth:`commit_fold`, once for the whole compaction:
        (1) every fold's hops, (2) the signer builds the fold records and the
        head over exactly the stored bytes (each record root re-checked here),
        (3) commitments rows (one per fold record), membership, one
        obligations row per fold naming the head, the head and the fold
        proofs — all in one transaction, returned only after COMMIT.
        """
        if not folds:
            raise ValueError("a compaction folds at least one value")
        if len({f.value_ref for f in folds}) != len(folds):
            raise ValueError("a compaction makes at most one fold per value")
        self._check_epoch(epoch, "commit compaction")
        what = f"commit compaction of {len(folds)} fold(s) (epoch {epoch})"
        pending = self._pending_mode
        drafts: list[FoldDraft] = []
        for f in folds:
            seqs = tuple(h.seq for h in f.hops)
            if not f.hops or len(set(seqs)) != len(seqs):
                raise ValueError(f"fold {f.value_ref}#{f.fold_seq}: no hops or a seq twice")
            leaves = tuple(h.hop_bytes for h in f.hops)
            drafts.append(
                FoldDraft(self._origin, epoch, f.value_ref, f.fold_seq, seqs, leaves, pending)
            )
        async with self._write(what) as db:
            self._check_epoch(epoch, "commit compaction")
            # (1) hops durable first: every fold's hops in one check and one insert
            # (a seq two folds give with different bytes is a HopConflict as before)
            await self._insert_hops(
                db, epoch, [h for f in folds for h in f.hops], now_ms, check_only=pending
            )
            # (2) one signature over every fold record
            signed = sign(drafts)
            if len(signed.folds) != len(drafts):
                raise SignerMismatch(f"{what}: signer returned {len(signed.folds)} folds")
            for draft, fold in zip(drafts, signed.folds, strict=True):
                expected = self._root_of(draft.leaves).hex()
                if fold.root != expected:
                    raise SignerMismatch(
                        f"{what}: record root {fold.root[:16]}… of {draft.value_ref} is not"
                        f" the Merkle root {expected[:16]}… of the stored hop bytes"
                    )
            # (3) head, records, membership, per-fold obligation rows, proofs
            await db.execute(
                "INSERT INTO heads (digest, origin, epoch, seq, serve_until, envelope, local,"
                " created_at) VALUES (?, ?, ?, ?, ?, ?, 1, ?)",
                (
                    signed.head_digest,
                    self._origin,
                    epoch,
                    signed.seq,
                    signed.serve_until_ms,
                    signed.head_note,
                    now_ms,
                ),
            )
            status = str(FoldStatus.PENDING if pending else FoldStatus.DURABLE)
            for draft, fold, f in zip(drafts, signed.folds, folds, strict=True):
                binding = head_binding(signed.head_digest, fold.leaf_hash)
                await db.execute(
                    "INSERT INTO commitments (digest, origin, epoch, value_ref, fold_seq,"
                    " leaf_count, root, envelope, local, status, created_at)"
                    " VALUES (?,?,?,?,?,?,?,?,1,?,?)",
                    (
                        fold.leaf_hash,
                        self._origin,
                        epoch,
                        draft.value_ref,
                        draft.fold_seq,
                        draft.leaf_count,
                        fold.root,
                        fold.record,
                        status,
                        now_ms,
                    ),
                )
                await db.executemany(
                    "INSERT INTO fold_members (commitment_digest, leaf_index, origin, epoch, seq)"
                    " VALUES (?, ?, ?, ?, ?)",
                    [
                        (fold.leaf_hash, index, self._origin, epoch, seq)
                        for index, seq in enumerate(draft.seqs)
                    ],
                )
                await db.execute(
                    "INSERT INTO obligations (digest, commitment_digest, serve_until, envelope,"
                    " local, created_at) VALUES (?, ?, ?, ?, 1, ?)",
                    (binding, fold.leaf_hash, signed.serve_until_ms, signed.head_note, now_ms),
                )
                await db.execute(
                    "INSERT INTO head_folds (head_digest, leaf_hash, binding, proof)"
                    " VALUES (?, ?, ?, ?)",
                    (signed.head_digest, fold.leaf_hash, binding, fold.proof),
                )
                self._bump_in_tx(CounterName.COMMITS)
                if pending:
                    self._pending_in_tx(fold.leaf_hash, tuple((h.seq, h.hop_bytes) for h in f.hops))
        # (4) released only after COMMIT returned.
        return signed

    async def head_fold(self, head_digest: str, leaf_hash: str) -> HeadFoldRecord | None:
        """An own fold under an own head, by head digest and record leaf hash."""
        async with self._read("read head fold") as db:
            rows = list(
                await db.execute_fetchall(
                    "SELECT h.envelope, f.proof, f.binding FROM head_folds f"
                    " JOIN heads h ON h.digest = f.head_digest"
                    " WHERE f.head_digest = ? AND f.leaf_hash = ? AND h.local = 1",
                    (head_digest, leaf_hash),
                )
            )
        if not rows:
            return None
        envelope, proof, binding = rows[0]
        return HeadFoldRecord(head_digest, bytes(envelope), leaf_hash, bytes(proof), str(binding))

    async def cosigned_head(self, digest: str, note: bytes) -> bool:
        """Keep ``note``, an own head with witness cosignatures appended, in place of the
        stored one, so a restarted origin serves what it delivered.

        The head's digest (SHA-256 of its note text) is unchanged by cosignature
        lines; ``note`` must extend the stored note byte for byte (the text and
        this origin's signature kept, lines only appended) and name ``digest``,
        else :class:`ValueError` names what differs. Written with the head's
        obligation rows in one transaction. False when it adds nothing (the
        stored note is already as long) or the head is not an own head here.
        """
        if head_digest(note) != digest:
            raise ValueError(f"cosigned head: note is not head {digest[:16]}…")
        async with self._write(f"keep cosigned head {digest[:16]}") as db:
            rows = list(
                await db.execute_fetchall(
                    "SELECT envelope FROM heads WHERE digest = ? AND origin = ? AND local = 1",
                    (digest, self._origin),
                )
            )
            if not rows:
                return False
            stored = bytes(rows[0][0])
            if len(note) <= len(stored):
                return False
            if not note.startswith(stored):
                raise ValueError(
                    f"cosigned head {digest[:16]}…: note does not extend the stored note"
                    " (its text and the origin's signature must be kept, lines only appended)"
                )
            parse_head(note)  # within a head's own bounds
            await db.execute("UPDATE heads SET envelope = ? WHERE digest = ?", (note, digest))
            await db.execute(
                "UPDATE obligations SET envelope = ? WHERE local = 1 AND digest IN"
                " (SELECT binding FROM head_folds WHERE head_digest = ?)",
                (note, digest),
            )
        return True

    async def head_log_state(self, epoch: str) -> tuple[list[bytes], dict[str, bytes]]:
        """What rebuilds this origin's log of heads for ``epoch``.

        The batch record (:func:`contracts.heads.batch_record`) of every own
        head, in ``seq`` order, read from each signed head's payload, and each
        value's latest fold record under a head (leaf data).
        """
        async with self._read("read head log") as db:
            heads = list(
                await db.execute_fetchall(
                    "SELECT envelope FROM heads WHERE origin = ? AND epoch = ? AND local = 1"
                    " ORDER BY seq",
                    (self._origin, epoch),
                )
            )
            records = list(
                await db.execute_fetchall(
                    "SELECT c.value_ref, c.envelope FROM commitments c"
                    " JOIN head_folds f ON f.leaf_hash = c.digest"
                    " WHERE c.local = 1 AND c.origin = ? AND c.epoch = ?"
                    " ORDER BY c.value_ref, c.fold_seq",
                    (self._origin, epoch),
                )
            )
        batches: list[bytes] = []
        for (envelope,) in heads:
            head = parse_head(bytes(envelope)).statement  # our own, stored signed
            batches.append(batch_record(head.size, head.root))
        last = {str(ref): bytes(record) for ref, record in records}
        return batches, last

    async def head_seq_next(self, epoch: str) -> int:
        """The next own head sequence number in ``epoch`` (0 for the first compaction)."""
        async with self._read("read next head seq") as db:
            rows = list(
                await db.execute_fetchall(
                    "SELECT COALESCE(MAX(seq) + 1, 0) FROM heads"
                    " WHERE origin = ? AND epoch = ? AND local = 1",
                    (self._origin, epoch),
                )
            )
        return int(rows[0][0])

    async def own_hops_from(self, min_seq: int) -> tuple[tuple[str, int, bytes], ...]:
        """This node's own stored hops with ``seq >= min_seq``, every epoch, as
        (epoch, seq, hop bytes) in (epoch, seq) order: an attester's A6 log."""
        async with self._read("read own hops by seq") as db:
            rows = await db.execute_fetchall(
                "SELECT epoch, seq, hop_bytes FROM hops WHERE origin = ? AND seq >= ?"
                " ORDER BY epoch, seq",
                (self._origin, min_seq),
            )
        return tuple((str(r[0]), int(r[1]), bytes(r[2])) for r in rows)

    async def next_own_seq(self, epoch: str, min_seq: int) -> int:
        """The first seq ``>= min_seq`` past every own hop and fold member of
        ``epoch`` (an evicted hop's seq stays taken while a fold names it)."""
        async with self._read("read next own seq") as db:
            rows = list(
                await db.execute_fetchall(
                    "SELECT MAX(seq) FROM (SELECT seq FROM hops WHERE origin = ? AND epoch = ?"
                    " AND seq >= ? UNION ALL SELECT seq FROM fold_members WHERE origin = ?"
                    " AND epoch = ? AND seq >= ?)",
                    (self._origin, epoch, min_seq, self._origin, epoch, min_seq),
                )
            )
        top = rows[0][0] if rows else None
        return min_seq if top is None else int(top) + 1

    async def own_fold_of_hop(self, epoch: str, seq: int) -> tuple[bytes, bytes] | None:
        """(commitment, obligation) envelopes of the own fold that commits the
        own hop (epoch, seq), the obligation serving longest; None if no fold does."""
        async with self._read("read fold of hop") as db:
            rows = list(
                await db.execute_fetchall(
                    "SELECT c.envelope, (SELECT o.envelope FROM obligations o"
                    " WHERE o.commitment_digest = c.digest AND o.local = 1"
                    " ORDER BY o.serve_until DESC LIMIT 1)"
                    " FROM fold_members m JOIN commitments c ON c.digest = m.commitment_digest"
                    " WHERE m.origin = ? AND m.epoch = ? AND m.seq = ? AND c.local = 1"
                    " ORDER BY c.created_at LIMIT 1",
                    (self._origin, epoch, seq),
                )
            )
        if not rows or rows[0][1] is None:
            return None
        return bytes(rows[0][0]), bytes(rows[0][1])

    async def _existing_fold(
        self,
        db: Db,
        epoch: str,
        value_ref: str,
        fold_seq: int,
        leaves: tuple[bytes, ...],
    ) -> SignedFold | None:
        rows = list(
            await db.execute_fetchall(
                "SELECT c.digest, c.envelope, c.root, o.digest, o.envelope, o.serve_until"
                " FROM commitments c JOIN obligations o ON o.commitment_digest = c.digest"
                " WHERE c.local = 1 AND c.origin = ? AND c.epoch = ? AND c.value_ref = ?"
                " AND c.fold_seq = ? AND o.local = 1 ORDER BY o.created_at LIMIT 1",
                (self._origin, epoch, value_ref, fold_seq),
            )
        )
        if not rows:
            return None
        c_digest, c_env, root, o_digest, o_env, serve_until_ms = rows[0]
        if str(root) != self._root_of(leaves).hex():
            raise FoldConflict(
                f"fold {value_ref}#{fold_seq} of epoch {epoch} is already committed as "
                f"{str(c_digest)[:16]}… over other hops; a second root would be equivocation"
            )
        return SignedFold(
            str(c_digest),
            bytes(c_env),
            str(root),
            str(o_digest),
            bytes(o_env),
            int(serve_until_ms),
        )

    # ----------------------------------------------------------------- pending mode

    async def reconcile(self, *, now_ms: int) -> int:
        """Land pending folds' hops and flip them to durable; returns folds landed.

        A pending fold whose member hops are all already in the log (appended
        separately) is flipped as well. Each fold lands in its own transaction.
        """
        async with self._read("list pending folds") as db:
            rows = list(
                await db.execute_fetchall(
                    "SELECT digest, epoch FROM commitments WHERE status = 'pending' AND local = 1"
                )
            )
        landed = 0
        for digest_raw, epoch_raw in rows:
            digest, epoch = str(digest_raw), str(epoch_raw)
            queued = self._pending_hops.get(digest)
            async with self._write(f"land pending fold {digest[:16]}…") as db:
                if queued is not None:
                    await self._insert_hops(db, epoch, [HopInput(s, b) for s, b in queued], now_ms)
                missing = await self._missing_members(db, digest)
                if missing:
                    continue
                await db.execute(
                    "UPDATE commitments SET status = 'durable'"
                    " WHERE digest = ? AND status = 'pending'",
                    (digest,),
                )
                self._bump_in_tx(CounterName.RECONCILED)
            self._pending_hops.pop(digest, None)
            landed += 1
        return landed

    async def _missing_members(self, db: Db, digest: str) -> int:
        rows = list(
            await db.execute_fetchall(
                "SELECT COUNT(*) FROM fold_members m LEFT JOIN hops h"
                " ON h.origin = m.origin AND h.epoch = m.epoch AND h.seq = m.seq"
                " WHERE m.commitment_digest = ? AND h.seq IS NULL",
                (digest,),
            )
        )
        return int(rows[0][0])

    async def _mark_lost_pending(self) -> None:
        """On open: pending folds with no in-memory bytes can only land if present."""
        db = self._conn("reader")
        try:
            rows = list(
                await db.execute_fetchall(
                    "SELECT digest FROM commitments WHERE status = 'pending' AND local = 1"
                )
            )
        except sqlite3.Error as exc:
            raise _translate(exc, "scan pending folds") from exc
        for (digest_raw,) in rows:
            digest = str(digest_raw)
            async with self._write(f"settle pending fold {digest[:16]}… after restart") as wdb:
                missing = await self._missing_members(wdb, digest)
                status = FoldStatus.LOST if missing else FoldStatus.DURABLE
                await wdb.execute(
                    "UPDATE commitments SET status = ? WHERE digest = ?", (str(status), digest)
                )

    # ----------------------------------------------------------------- resolve

    async def resolve(
        self,
        commitment_digest: str,
        *,
        now_ms: int,
        root: str | None = None,
        count: bool = True,
    ) -> Resolution:
        """The hop bytes of a fold, or an explicit reason why not.

        FOUND only if every member hop is present at exactly the
        (origin, epoch, seq) the fold recorded *and* the leaves hash to the
        committed root (``root``: the root of the signed commitment the
        caller holds, checked instead of the one stored beside it): a recycled or
        altered hop can never be returned. Missing hops are EXPIRED when
        every obligation has expired (the reaper may evict them),
        UNRESOLVABLE otherwise (counted). Every hop present but bytes that
        miss the root are CORRUPTED — the disk changed them — counted in
        ``store_corrupted``, with the bytes read in ``damaged`` (never to be
        served: an answer built on them is a STORE_CORRUPTED refusal) and
        ``reason`` naming the damaged hop.

        ``count=False``: the same answer, counted nowhere and nothing written (an
        unsigned ask's read, which moves no state; the signed demand that follows a
        failed one counts what it finds).
        """
        async with self._read(f"resolve {commitment_digest[:16]}…") as db:
            fold = await self._fold(db, commitment_digest)
            if fold is None:
                # custody hook: a fold held as custodian (nodes.custody_store)
                held = await resolve_held(db, commitment_digest, now_ms=now_ms, root=root)
                if held is not None:
                    return self._held_resolution(commitment_digest, held, count)
                return Resolution(
                    ResolveStatus.UNKNOWN, commitment_digest, "no such commitment here"
                )
            if not fold.local:
                # A peer's commitment we hold as a holder: its origin serves it.
                return Resolution(
                    ResolveStatus.UNKNOWN,
                    commitment_digest,
                    f"commitment of origin {fold.origin[:16]}…; this node does not serve it",
                    fold,
                )
            obligations = await self._obligations(db, commitment_digest)
            rows = list(
                await db.execute_fetchall(
                    "SELECT m.leaf_index, h.hop_bytes, h.digest, m.seq FROM fold_members m"
                    " LEFT JOIN hops h"
                    " ON h.origin = m.origin AND h.epoch = m.epoch AND h.seq = m.seq"
                    " WHERE m.commitment_digest = ? ORDER BY m.leaf_index",
                    (commitment_digest,),
                )
            )
        latest = max((o.serve_until_ms for o in obligations), default=-1)
        under_obligation = not expired(latest, now_ms)
        if fold.status is FoldStatus.PENDING:
            if count:
                self.bump(CounterName.PENDING_ANSWERS)
            return Resolution(
                ResolveStatus.PENDING,
                commitment_digest,
                "provenance_pending: hops not landed yet",
                fold,
                obligations,
            )
        leaves = tuple(bytes(r[1]) for r in rows if r[1] is not None)
        reason = ""
        if fold.status is FoldStatus.LOST:
            reason = "pending hops lost before landing"
        elif len(rows) != fold.leaf_count and len(leaves) == len(rows):
            return await self._corrupted(
                fold,
                obligations,
                leaves,
                f"fold records {len(rows)} members, commitment says {fold.leaf_count}",
                count,
            )
        elif len(rows) != fold.leaf_count:
            reason = f"fold records {len(rows)} members, commitment says {fold.leaf_count}"
        elif len(leaves) != fold.leaf_count:
            reason = f"{fold.leaf_count - len(leaves)} of {fold.leaf_count} hops absent"
            if not under_obligation:
                return Resolution(
                    ResolveStatus.EXPIRED,
                    commitment_digest,
                    f"{reason}; every obligation expired"
                    f" (latest serve_until {latest} ms, now {now_ms} ms)",
                    fold,
                    obligations,
                )
        elif (found := self._root_of(leaves).hex()) != (root if root is not None else fold.root):
            damage = _damage(rows, found, fold.root, root)
            return await self._corrupted(fold, obligations, leaves, damage, count)
        if reason:
            if count:
                self.bump(CounterName.UNRESOLVABLE)
                with contextlib.suppress(StoreFull):  # counted; the answer does not wait on disk
                    await self.flush_counters()
            return Resolution(
                ResolveStatus.UNRESOLVABLE, commitment_digest, reason, fold, obligations
            )
        return Resolution(ResolveStatus.FOUND, commitment_digest, "", fold, obligations, leaves)

    def _held_resolution(self, digest: str, held: HeldResolution, count: bool) -> Resolution:
        """A custodian's fold (:func:`nodes.custody_store.resolve_held`) as a resolution."""
        match held.status:
            case HeldStatus.FOUND:
                return Resolution(ResolveStatus.FOUND, digest, "", leaves=held.leaves)
            case HeldStatus.EXPIRED:
                return Resolution(ResolveStatus.EXPIRED, digest, held.reason)
            case HeldStatus.UNRESOLVABLE:
                if count:
                    self.bump(CounterName.UNRESOLVABLE)
                return Resolution(ResolveStatus.UNRESOLVABLE, digest, held.reason)
            case HeldStatus.CORRUPTED:
                if count:
                    self.bump(CounterName.STORE_CORRUPTED)
                return Resolution(ResolveStatus.CORRUPTED, digest, held.reason, damaged=held.leaves)
            case _:
                assert_never(held.status)

    async def _corrupted(
        self,
        fold: FoldRecord,
        obligations: tuple[ObligationRecord, ...],
        damaged: tuple[bytes, ...],
        reason: str,
        count: bool = True,
    ) -> Resolution:
        if count:
            self.bump(CounterName.STORE_CORRUPTED)
            with contextlib.suppress(StoreFull):  # counted; the answer does not wait on disk
                await self.flush_counters()
        return Resolution(
            ResolveStatus.CORRUPTED,
            fold.digest,
            f"store corrupted: {reason}",
            fold,
            obligations,
            damaged=damaged,
        )

    @staticmethod
    def _fold_from_row(row: Sequence[Any]) -> FoldRecord:
        return FoldRecord(
            digest=str(row[0]),
            origin=str(row[1]),
            epoch=str(row[2]),
            value_ref=str(row[3]),
            fold_seq=int(row[4]),
            leaf_count=int(row[5]),
            root=str(row[6]),
            envelope=bytes(row[7]),
            local=bool(row[8]),
            status=FoldStatus(str(row[9])),
        )

    async def _fold(self, db: Db, digest: str) -> FoldRecord | None:
        rows = list(
            await db.execute_fetchall(
                "SELECT digest, origin, epoch, value_ref, fold_seq, leaf_count, root, envelope,"
                " local, status FROM commitments WHERE digest = ?",
                (digest,),
            )
        )
        return self._fold_from_row(rows[0]) if rows else None

    async def _obligations(self, db: Db, commitment_digest: str) -> tuple[ObligationRecord, ...]:
        rows = await db.execute_fetchall(
            "SELECT digest, commitment_digest, serve_until, envelope, local FROM obligations"
            " WHERE commitment_digest = ? ORDER BY serve_until DESC",
            (commitment_digest,),
        )
        return tuple(
            ObligationRecord(str(r[0]), str(r[1]), int(r[2]), bytes(r[3]), bool(r[4])) for r in rows
        )

    async def commitment(self, digest: str) -> FoldRecord | None:
        """A stored commitment (own or a peer's) by digest."""
        async with self._read("read commitment") as db:
            return await self._fold(db, digest)

    async def commitments_for(
        self, origin: str, epoch: str, value_ref: str, fold_seq: int
    ) -> tuple[FoldRecord, ...]:
        """Every stored commitment for one fold slot (more than one = equivocation)."""
        async with self._read("read commitments for fold") as db:
            rows = await db.execute_fetchall(
                "SELECT digest, origin, epoch, value_ref, fold_seq, leaf_count, root, envelope,"
                " local, status FROM commitments WHERE origin = ? AND epoch = ? AND"
                " value_ref = ? AND fold_seq = ? ORDER BY created_at",
                (origin, epoch, value_ref, fold_seq),
            )
        return tuple(self._fold_from_row(r) for r in rows)

    async def next_fold_seq(self, origin: str, epoch: str, value_ref: str) -> int:
        """One past the highest fold sequence stored for (origin, epoch, value ref); 0 if none."""
        async with self._read("read next fold sequence") as db:
            rows = list(
                await db.execute_fetchall(
                    "SELECT COALESCE(MAX(fold_seq) + 1, 0) FROM commitments"
                    " WHERE origin = ? AND epoch = ? AND value_ref = ?",
                    (origin, epoch, value_ref),
                )
            )
        return int(rows[0][0])

    async def next_fold_seqs(
        self, origin: str, epoch: str, value_refs: Sequence[str]
    ) -> dict[str, int]:
        """:meth:`next_fold_seq` of each of ``value_refs``, in one query and one snapshot."""
        refs = list(dict.fromkeys(value_refs))
        found: dict[str, int] = {}
        async with self._read(f"read next fold sequences of {len(refs)} refs") as db:
            # Bound parameters, not a JSON array: a ref is any string (NUL included),
            # compared exactly as next_fold_seq compares it.
            for start in range(0, len(refs), 500):
                chunk = refs[start : start + 500]
                rows = await db.execute_fetchall(
                    "SELECT value_ref, MAX(fold_seq) + 1 FROM commitments"
                    " WHERE origin = ? AND epoch = ?"
                    f" AND value_ref IN ({', '.join('?' * len(chunk))})"
                    " GROUP BY value_ref",
                    (origin, epoch, *chunk),
                )
                found.update({str(ref): int(n) for ref, n in rows})
        return {ref: found.get(ref, 0) for ref in refs}

    async def obligation(self, digest: str) -> ObligationRecord | None:
        """A stored obligation by its digest."""
        async with self._read("read obligation") as db:
            rows = list(
                await db.execute_fetchall(
                    "SELECT digest, commitment_digest, serve_until, envelope, local"
                    " FROM obligations WHERE digest = ?",
                    (digest,),
                )
            )
        if not rows:
            return None
        r = rows[0]
        return ObligationRecord(str(r[0]), str(r[1]), int(r[2]), bytes(r[3]), bool(r[4]))

    # ----------------------------------------------------------------- peers' statements

    async def put_commitment(
        self,
        *,
        digest: str,
        origin: str,
        epoch: str,
        value_ref: str,
        fold_seq: int,
        leaf_count: int,
        root: str,
        envelope: bytes,
        now_ms: int,
    ) -> bool:
        """Keep a peer's (already verified) commitment verbatim; False if already kept."""
        kept = KeptCommitment(
            digest, origin, epoch, value_ref, fold_seq, leaf_count, root, envelope
        )
        async with self._write(f"store commitment {digest[:16]}… of {origin[:12]}…") as db:
            return await self._insert_commitment(db, kept, now_ms)

    async def put_obligation(
        self,
        *,
        digest: str,
        commitment_digest: str,
        serve_until_ms: int,
        envelope: bytes,
        local: bool,
        now_ms: int,
    ) -> bool:
        """Keep an obligation verbatim (a peer's, or an extra one of ours).

        Its commitment must already be stored (:class:`UnknownCommitment`).
        An obligation of our own (``local``) is a promise to serve: it is
        accepted only while every hop of the fold is still in the log (or the
        fold is pending and will land) — checked in the same transaction, so
        the reaper cannot evict in between. Otherwise :class:`MissingHop`.
        """
        kept = ObligationRecord(digest, commitment_digest, serve_until_ms, envelope, local)
        async with self._write(f"store obligation {digest[:16]}…") as db:
            return await self._insert_obligation(db, kept, now_ms)

    async def put_delivered(
        self, pairs: Sequence[tuple[KeptCommitment, ObligationRecord]], *, now_ms: int
    ) -> None:
        """Keep a delivered value's commitments and obligations in one transaction.

        The same checks as :meth:`put_commitment` and :meth:`put_obligation`;
        all pairs land, or (on any error) none.
        """
        async with self._write(f"store {len(pairs)} delivered commitment(s)") as db:
            for commitment, obligation in pairs:
                await self._insert_commitment(db, commitment, now_ms)
                await self._insert_obligation(db, obligation, now_ms)

    @staticmethod
    async def _insert_commitment(db: Db, c: KeptCommitment, now_ms: int) -> bool:
        cursor = await db.execute(
            "INSERT INTO commitments (digest, origin, epoch, value_ref, fold_seq, leaf_count,"
            " root, envelope, local, status, created_at) VALUES (?,?,?,?,?,?,?,?,0,'durable',?)"
            " ON CONFLICT (digest) DO NOTHING",
            (
                c.digest,
                c.origin,
                c.epoch,
                c.value_ref,
                c.fold_seq,
                c.leaf_count,
                c.root,
                c.envelope,
                now_ms,
            ),
        )
        return cursor.rowcount == 1

    async def _insert_obligation(self, db: Db, o: ObligationRecord, now_ms: int) -> bool:
        fold = await self._fold(db, o.commitment_digest)
        if fold is None:
            raise UnknownCommitment(
                f"obligation {o.digest[:16]}… names commitment {o.commitment_digest[:16]}…, "
                "which this store does not hold"
            )
        known = await db.execute_fetchall("SELECT 1 FROM obligations WHERE digest = ?", (o.digest,))
        if list(known):
            return False  # already kept: receiving it again is not a new promise
        if o.local:
            missing = await self._missing_members(db, o.commitment_digest)
            if fold.status is FoldStatus.LOST or (
                missing and fold.status is not FoldStatus.PENDING
            ):
                raise MissingHop(
                    f"obligation {o.digest[:16]}…: {missing} of {fold.leaf_count} hops of "
                    f"commitment {o.commitment_digest[:16]}… are no longer in the log "
                    f"(status {fold.status}); refusing to promise to serve them"
                )
        cursor = await db.execute(
            "INSERT INTO obligations (digest, commitment_digest, serve_until, envelope,"
            " local, created_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (digest) DO NOTHING",
            (o.digest, o.commitment_digest, o.serve_until_ms, o.envelope, int(o.local), now_ms),
        )
        return cursor.rowcount == 1

    # ----------------------------------------------------------------- evidence, attestations

    async def add_evidence(
        self,
        *,
        digest: str,
        kind: str,
        accused: str,
        body: bytes,
        now_ms: int,
        commitment_digest: str | None = None,
        file_path: str | None = None,
    ) -> bool:
        """Record evidence (the file's bytes verbatim); False if already recorded."""
        async with self._write(f"record {kind} evidence {digest[:16]}…") as db:
            cursor = await db.execute(
                "INSERT INTO evidence (digest, kind, accused, commitment_digest, file_path, body,"
                " created_at) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (digest) DO NOTHING",
                (digest, kind, accused, commitment_digest, file_path, body, now_ms),
            )
            return cursor.rowcount == 1

    async def evidence(
        self, *, accused: str | None = None, kind: str | None = None
    ) -> tuple[EvidenceRecord, ...]:
        """Stored evidence, optionally filtered, oldest first."""
        clauses, params = [], []
        if accused is not None:
            clauses.append("accused = ?")
            params.append(accused)
        if kind is not None:
            clauses.append("kind = ?")
            params.append(kind)
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        async with self._read("read evidence") as db:
            rows = await db.execute_fetchall(
                "SELECT digest, kind, accused, commitment_digest, file_path, body, created_at"
                f" FROM evidence{where} ORDER BY created_at, digest",
                params,
            )
        return tuple(
            EvidenceRecord(
                str(r[0]),
                str(r[1]),
                str(r[2]),
                None if r[3] is None else str(r[3]),
                None if r[4] is None else str(r[4]),
                bytes(r[5]),
                int(r[6]),
            )
            for r in rows
        )

    async def uncleared_suspicions(self, accused: str) -> tuple[EvidenceRecord, ...]:
        """Stored suspicions (``unanswered``, and ``busy``: an unanswered record naming the
        origin's RESOURCE_EXHAUSTED) against ``accused`` not yet cleared, oldest first."""
        async with self._read("read suspicions") as db:
            rows = await db.execute_fetchall(
                "SELECT digest, kind, accused, commitment_digest, file_path, body, created_at"
                " FROM evidence WHERE accused = ? AND kind IN ('unanswered', 'busy')"
                " AND digest NOT IN (SELECT digest FROM evidence_cleared)"
                " ORDER BY created_at, digest",
                (accused,),
            )
        return tuple(
            EvidenceRecord(
                str(r[0]),
                str(r[1]),
                str(r[2]),
                None if r[3] is None else str(r[3]),
                None if r[4] is None else str(r[4]),
                bytes(r[5]),
                int(r[6]),
            )
            for r in rows
        )

    async def mark_cleared(self, digest: str, *, receipt: bytes, now_ms: int) -> bool:
        """Mark a stored suspicion cleared by ``receipt``; False if it already was."""
        async with self._write(f"clear suspicion {digest[:16]}…") as db:
            cursor = await db.execute(
                "INSERT INTO evidence_cleared (digest, receipt, cleared_at) VALUES (?, ?, ?)"
                " ON CONFLICT (digest) DO NOTHING",
                (digest, receipt, now_ms),
            )
            return cursor.rowcount == 1

    async def clearing_receipt(self, digest: str) -> bytes | None:
        """The receipt that cleared a stored suspicion, if one did."""
        async with self._read("read clearing receipt") as db:
            rows = list(
                await db.execute_fetchall(
                    "SELECT receipt FROM evidence_cleared WHERE digest = ?", (digest,)
                )
            )
        return bytes(rows[0][0]) if rows else None

    async def attestation_count(self, attester: str | None = None) -> int:
        """Attestations kept (by one attester, or all)."""
        async with self._read("count attestations") as db:
            if attester is None:
                rows = list(await db.execute_fetchall("SELECT COUNT(*) FROM attestations"))
            else:
                rows = list(
                    await db.execute_fetchall(
                        "SELECT COUNT(*) FROM attestations WHERE attester = ?", (attester,)
                    )
                )
        return int(rows[0][0])

    async def keep_attestation(
        self,
        *,
        digest: str,
        value_digest: str,
        attester: str,
        expires_at_ms: int,
        envelope: bytes,
        now_ms: int,
        reserved: frozenset[str],
        caps: AttestationCaps,
    ) -> AttestationKept:
        """Keep an (already verified) attestation within its pool's caps, in one transaction.

        Attesters in ``reserved`` (keys the node knows or asked) share the
        reserved pool: over its count or byte cap the attestation is refused
        (``RequestTooLarge``), nothing is evicted. Every other attester is a
        stranger: over the stranger pool's caps, expired stranger attestations
        go first, then the oldest live ones, so strangers can only displace
        each other. Any attester over ``caps.per_attester`` is refused.
        """
        size = len(envelope)
        keys = json.dumps(sorted(reserved))
        async with self._write(f"store attestation {digest[:16]}…") as db:
            found = list(
                await db.execute_fetchall("SELECT 1 FROM attestations WHERE digest = ?", (digest,))
            )
            if found:
                return AttestationKept(False, 0)
            mine = list(
                await db.execute_fetchall(
                    "SELECT COUNT(*) FROM attestations WHERE attester = ?", (attester,)
                )
            )
            if int(mine[0][0]) >= caps.per_attester:
                raise RequestTooLarge(
                    f"attestation: attester {attester[:16]}… already has"
                    f" {caps.per_attester} attestations kept here"
                )
            stranger = attester not in reserved
            where = "attester NOT IN" if stranger else "attester IN"
            pool = f"{where} (SELECT value FROM json_each(?))"
            usage = list(
                await db.execute_fetchall(
                    f"SELECT COUNT(*), COALESCE(SUM(LENGTH(envelope)), 0) FROM attestations"
                    f" WHERE {pool}",
                    (keys,),
                )
            )
            count, used = int(usage[0][0]), int(usage[0][1])
            max_count = caps.stranger_count if stranger else caps.reserved_count
            max_bytes = caps.stranger_bytes if stranger else caps.reserved_bytes
            evicted = 0
            if count + 1 > max_count or used + size > max_bytes:
                if not stranger:
                    raise RequestTooLarge(
                        f"attestation: the reserved pool holds {count} attestations,"
                        f" {used} bytes (caps {max_count}, {max_bytes} bytes)"
                    )
                # expired first, then oldest: one ordered pass over the stranger pool
                rows = await db.execute_fetchall(
                    f"SELECT digest, LENGTH(envelope) FROM attestations WHERE {pool}"
                    " ORDER BY expires_at > ?, created_at, digest",
                    (keys, now_ms),
                )
                drop: list[str] = []
                for victim, length in rows:
                    if count + 1 <= max_count and used + size <= max_bytes:
                        break
                    drop.append(str(victim))
                    count -= 1
                    used -= int(length)
                await db.executemany(
                    "DELETE FROM attestations WHERE digest = ?", [(d,) for d in drop]
                )
                evicted = len(drop)
            await db.execute(
                "INSERT INTO attestations (digest, value_digest, attester, expires_at, envelope,"
                " created_at) VALUES (?, ?, ?, ?, ?, ?)",
                (digest, value_digest, attester, expires_at_ms, envelope, now_ms),
            )
        return AttestationKept(True, evicted)

    async def attestation_usage(self) -> tuple[int, int]:
        """Attestations kept and the bytes of their envelopes."""
        async with self._read("count attestation bytes") as db:
            rows = list(
                await db.execute_fetchall(
                    "SELECT COUNT(*), COALESCE(SUM(LENGTH(envelope)), 0) FROM attestations"
                )
            )
        return int(rows[0][0]), int(rows[0][1])

    async def reap_attestations(self, *, now_ms: int, limit: int = 10_000) -> int:
        """Delete up to ``limit`` attestations that expired at or before ``now_ms``."""
        async with self._write("reap expired attestations") as db:
            cursor = await db.execute(
                "DELETE FROM attestations WHERE digest IN (SELECT digest FROM attestations"
                " WHERE expires_at <= ? LIMIT ?)",
                (now_ms, limit),
            )
            return max(cursor.rowcount, 0)

    async def attestations_for(
        self,
        value_digest: str,
        *,
        now_ms: int,
        reserved: frozenset[str] = frozenset(),
        max_bytes: int | None = None,
    ) -> tuple[bytes, ...]:
        """Envelopes of unexpired attestations bound to a value digest, oldest first.

        With ``max_bytes``, at most that many envelope bytes: those of ``reserved``
        attesters first, then strangers' while room is left. Any key may submit
        attestations for any value digest, so without the bound strangers' could
        make the list larger than one message (nobody would get it) and make every
        read of it load all of them.
        """
        if max_bytes is None:
            async with self._read("read attestations") as db:
                rows = await db.execute_fetchall(
                    "SELECT envelope FROM attestations WHERE value_digest = ? AND expires_at > ?"
                    " ORDER BY created_at, digest",
                    (value_digest, now_ms),
                )
            return tuple(bytes(r[0]) for r in rows)
        async with self._read("read attestations") as db:
            sizes = await db.execute_fetchall(
                "SELECT digest, attester, LENGTH(envelope) FROM attestations"
                " WHERE value_digest = ? AND expires_at > ? ORDER BY created_at, digest",
                (value_digest, now_ms),
            )
            ranked = [r for r in sizes if r[1] in reserved] + [
                r for r in sizes if r[1] not in reserved
            ]
            chosen: set[str] = set()
            room = max_bytes
            for digest, _, size in ranked:
                if int(size) <= room:
                    chosen.add(str(digest))
                    room -= int(size)
            wanted = [str(r[0]) for r in sizes if str(r[0]) in chosen]  # oldest first
            found: dict[str, bytes] = {}
            for i in range(0, len(wanted), _IN_CHUNK):
                part = wanted[i : i + _IN_CHUNK]
                marks = ",".join("?" * len(part))
                for digest, envelope in await db.execute_fetchall(
                    f"SELECT digest, envelope FROM attestations WHERE digest IN ({marks})",
                    part,
                ):
                    found[str(digest)] = bytes(envelope)
        return tuple(found[d] for d in wanted if d in found)

    # ----------------------------------------------------------------- reaper

    async def reap(
        self,
        *,
        now_ms: int,
        grace_ms: int = 0,
        limit: int = 10_000,
        count_protected: bool = False,
    ) -> ReapReport:
        """Evict hops no unexpired obligation protects (S5).

        One DELETE reads the obligation table and fold membership in the same
        statement: a hop is a candidate only if it belongs to at least one fold
        and *every* obligation on *every* fold containing it expired before
        ``now_ms - grace_ms``. Hops not yet folded are never evicted. Pending folds
        protect their members as well.
        """
        cutoff = now_ms - grace_ms
        async with self._write("reap expired hops") as db:
            cursor = await db.execute(_REAP_SQL, (self._origin, cutoff, limit))
            evicted = max(cursor.rowcount, 0)
            protected = -1
            if count_protected:
                rows = list(
                    await db.execute_fetchall(
                        "SELECT COUNT(DISTINCT m.epoch || ':' || m.seq) FROM fold_members m"
                        " JOIN obligations o ON o.commitment_digest = m.commitment_digest"
                        " WHERE m.origin = ? AND o.serve_until > ?",
                        (self._origin, cutoff),
                    )
                )
                protected = int(rows[0][0])
            if evicted:
                self._bump_in_tx(CounterName.HOPS_EVICTED, evicted)
        return ReapReport(evicted, protected)

    # ----------------------------------------------------------------- counters, checks

    async def counters(self) -> dict[str, int]:
        """Counters plus gauges: pending folds now, evidence by kind, commits.

        Keys: every :class:`CounterName` value, ``provenance_pending`` (folds
        whose hops have not landed), ``evidence_<kind>`` per kind and
        ``evidence_total``.
        """
        out = {str(name): 0 for name in CounterName}
        out.update(self._counters)
        out.update(await self._gauge_counts())
        return out

    async def _gauge_counts(self) -> dict[str, int]:
        """The counted gauges of :meth:`counters`, counted again only after a write."""
        generation = self._generation
        if self._gauges is not None and self._gauges[0] == generation:
            return dict(self._gauges[1])
        out: dict[str, int] = {}
        async with self._read("read counters") as db:
            pending = list(
                await db.execute_fetchall(
                    "SELECT COUNT(*) FROM commitments WHERE status = 'pending' AND local = 1"
                )
            )
            kinds = await db.execute_fetchall(
                "SELECT kind, COUNT(*) FROM evidence WHERE digest NOT IN"
                " (SELECT digest FROM evidence_cleared) GROUP BY kind ORDER BY kind"
            )
            cleared = list(await db.execute_fetchall("SELECT COUNT(*) FROM evidence_cleared"))
        out["provenance_pending"] = int(pending[0][0])
        total = 0
        for kind, count in kinds:
            out[f"evidence_{kind}"] = int(count)
            total += int(count)
        out["evidence_total"] = total
        out["evidence_cleared"] = int(cleared[0][0])
        # Counted in a snapshot at least as new as ``generation``: a write that
        # committed meanwhile makes the next call count again.
        self._gauges = (generation, dict(out))
        return out

    async def check_stored(self) -> StoreCheck:
        """Check that what this node would sign for is what it committed; raise if not.

        For a node's start (:class:`StoreCorrupt` naming the first damage):
        (1) ``PRAGMA quick_check`` (the database's pages and records are
        well-formed); (2) every hop's bytes hash to the digest stored with
        them; (3) every own durable fold whose hops are all present has as
        many members as leaves and its hops reproduce its committed root
        (cumulative folds hash only their new hops, :class:`contracts.merkle.FoldRoots`).
        One read snapshot, rows streamed; linear in the hops and fold members.
        """
        from contracts.merkle import FoldRoots

        started = time.monotonic()
        hops = folds = 0
        # On the writer, not the reader: pages read here stay in this connection's
        # cache, so what demands read later comes from the file as it is then.
        async with self._write(f"check the stored hop log {self._path}") as db:
            # (1) structure
            rows = list(await db.execute_fetchall("PRAGMA quick_check"))
            problems = [str(r[0]) for r in rows]
            if problems != ["ok"]:
                # One line: quick_check's own rows span several.
                first = "; ".join(p.strip() for p in problems[0].splitlines()[:3] if p.strip())
                raise StoreCorrupt(
                    f"hop log {self._path}: database damaged (quick_check: {first[:300]})"
                )
            # (2) each hop against its digest
            cursor = await db.execute("SELECT epoch, seq, hop_bytes, digest FROM hops")
            async for epoch, seq, data, digest in _chunked(cursor):
                hops += 1
                actual = sha256_hex(bytes(data))
                if actual != str(digest):
                    raise StoreCorrupt(
                        f"hop log {self._path}: hop (epoch {epoch}, seq {seq}) damaged: its"
                        f" bytes hash to {actual[:16]}…, the digest stored with them is"
                        f" {str(digest)[:16]}…"
                    )
            # (3) each own durable fold against its committed root
            roots = FoldRoots()
            cursor = await db.execute(
                "SELECT c.digest, c.value_ref, c.fold_seq, c.leaf_count, c.root, h.hop_bytes"
                " FROM commitments c JOIN fold_members m ON m.commitment_digest = c.digest"
                " LEFT JOIN hops h ON h.origin = m.origin AND h.epoch = m.epoch"
                " AND h.seq = m.seq WHERE c.local = 1 AND c.status = 'durable'"
                " ORDER BY c.epoch, c.value_ref, c.fold_seq, c.digest, m.leaf_index"
            )
            current: list[Any] | None = None
            leaves: list[bytes] = []
            complete = True

            def check(fold: list[Any]) -> None:
                digest, ref, fold_seq, count, root = fold
                name = f"fold {ref}#{fold_seq} (commitment {str(digest)[:16]}…)"
                if len(leaves) != int(count):
                    raise StoreCorrupt(
                        f"hop log {self._path}: {name} damaged: {len(leaves)} members"
                        f" recorded for {count} leaves"
                    )
                found = roots.root(leaves).hex()
                if found != str(root):
                    raise StoreCorrupt(
                        f"hop log {self._path}: {name} damaged: its hops hash to"
                        f" {found[:16]}…, the committed root is {str(root)[:16]}…"
                    )

            async for digest, ref, fold_seq, count, root, data in _chunked(cursor):
                if current is None or current[0] != digest:
                    if current is not None and complete:
                        check(current)
                        folds += 1
                    current, leaves, complete = [digest, ref, fold_seq, count, root], [], True
                if data is None:
                    complete = False  # evicted once every obligation expired
                else:
                    leaves.append(bytes(data))
            if current is not None and complete:
                check(current)
                folds += 1
        return StoreCheck(hops, folds, time.monotonic() - started)

    async def integrity_check(self) -> str:
        """``PRAGMA integrity_check`` on the database: "ok" or the problems found."""
        async with self._read("integrity check") as db:
            rows = await db.execute_fetchall("PRAGMA integrity_check")
        return "\n".join(str(r[0]) for r in rows)

    async def witness_log(self, origin: str) -> WitnessLogRow | None:
        """A witness's latest cosigned (size, root, note) for the log ``origin``, if any."""
        async with self._read("read witness state") as db:
            rows = list(
                await db.execute_fetchall(
                    "SELECT size, root, note FROM witness_logs WHERE origin = ?", (origin,)
                )
            )
        if not rows:
            return None
        size, root, note = rows[0]
        return WitnessLogRow(origin, int(size), bytes(root), bytes(note))

    async def witness_decide(
        self,
        origin: str,
        decide: Callable[[WitnessLogRow | None], tuple[WitnessLogRow | None, T]],
        *,
        now_ms: int,
        max_logs: int | None = None,
    ) -> T:
        """Read a log's witness state, decide on it, write what ``decide`` returns: one
        transaction, committed (fsync'd) before this returns (c2sp.org/tlog-witness:
        the check of the old size and the new state's write are atomic, and the new
        state is durable before the witness answers). ``decide`` is pure and
        synchronous; it returns the row to write (None: nothing changes) and what
        the caller gets back. ``max_logs``: a log not yet known is refused
        (``RequestTooLarge``) once that many are.
        """
        async with self._write(f"witness log {origin[:80]}") as db:
            rows = list(
                await db.execute_fetchall(
                    "SELECT size, root, note FROM witness_logs WHERE origin = ?", (origin,)
                )
            )
            current = (
                WitnessLogRow(origin, int(rows[0][0]), bytes(rows[0][1]), bytes(rows[0][2]))
                if rows
                else None
            )
            if current is None and max_logs is not None:
                counted = await db.execute_fetchall("SELECT COUNT(*) FROM witness_logs")
                known = int(next(iter(counted))[0])
                if known >= max_logs:
                    raise RequestTooLarge(
                        f"witness: already {known} logs witnessed, the limit; log"
                        f" {origin[:80]} is not taken on"
                    )
            row, result = decide(current)
            if row is not None:
                if row.origin != origin or (current is not None and row.size < current.size):
                    raise ValueError(f"witness state of {origin[:80]} may only move forward")
                await db.execute(
                    "INSERT INTO witness_logs (origin, size, root, note, updated_at)"
                    " VALUES (?, ?, ?, ?, ?) ON CONFLICT (origin) DO UPDATE SET"
                    " size = excluded.size, root = excluded.root, note = excluded.note,"
                    " updated_at = excluded.updated_at",
                    (origin, row.size, row.root, row.note, now_ms),
                )
        return result

    async def table_digest(self) -> str:
        """SHA-256 over every row of every table, for "nothing changed" checks."""
        h = hashlib.sha256()
        async with self._read("digest tables") as db:
            for table in _TABLES:
                h.update(table.encode() + b"\x00")
                cursor = await db.execute(f"SELECT * FROM {table} ORDER BY 1, 2")
                async for row in cursor:
                    h.update(repr(tuple(row)).encode() + b"\n")
        return h.hexdigest()


async def _chunked(cursor: Cursor, size: int = 4096) -> AsyncIterator[Any]:
    """A long result's rows, fetched ``size`` at a time (one thread hand-off per chunk)."""
    while True:
        rows = list(await cursor.fetchmany(size))
        if not rows:
            return
        for row in rows:
            yield row


def _damage(rows: Sequence[Any], found: str, stored_root: str, signed_root: str | None) -> str:
    """What is damaged in a fold whose hops miss its root: the first hop whose bytes
    miss the digest stored beside them, else the root stored or signed."""
    for _, data, digest, seq in rows:
        actual = sha256_hex(bytes(data))
        if actual != str(digest):
            return (
                f"hop seq {seq}: stored bytes hash to {actual[:16]}…, the digest stored"
                f" with them is {str(digest)[:16]}…"
            )
    committed = signed_root if signed_root is not None else stored_root
    return f"the hops hash to {found[:16]}…, the committed root is {committed[:16]}…"


_TABLES: Final = (
    "hops",
    "commitments",
    "fold_members",
    "obligations",
    "heads",
    "head_folds",
    "evidence",
    "evidence_cleared",
    "attestations",
    "witness_logs",
    "meta",
)

# A hop is evictable when it is a member of at least one fold and no fold it
# belongs to has an obligation with serve_until after the cutoff. The
# obligation table is read inside the same statement as the delete (S5).
_REAP_SQL: Final = """
DELETE FROM hops
WHERE (origin, epoch, seq) IN (
    SELECT h.origin, h.epoch, h.seq FROM hops h
    WHERE h.origin = ?1
      AND EXISTS (
        SELECT 1 FROM fold_members m
        WHERE m.origin = h.origin AND m.epoch = h.epoch AND m.seq = h.seq)
      AND NOT EXISTS (
        SELECT 1 FROM fold_members m
        JOIN commitments c ON c.digest = m.commitment_digest
        LEFT JOIN obligations o ON o.commitment_digest = m.commitment_digest
        WHERE m.origin = h.origin AND m.epoch = h.epoch AND m.seq = h.seq
          AND (o.digest IS NULL OR o.serve_until > ?2 OR c.status = 'pending'))
    LIMIT ?3
)
"""
