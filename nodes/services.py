"""What a node does, independent of gRPC: :class:`NodeCore`, the honest node.

``NodeCore`` is the node: its identity, its hop log (:class:`nodes.store.HopStore`),
the values it holds, its fault plan, and a :class:`~nodes.transport.Transport`
to reach peers. Every method takes and returns bytes and plain values and
raises typed errors (``contracts`` errors, store errors, :mod:`nodes.errors`);
the gRPC servicers (:mod:`nodes.servicers`) only convert messages, and
:mod:`nodes.interceptors` maps the errors to status codes. The in-memory
transport calls ``NodeCore`` directly, so both paths run the same code. This
module imports no gRPC and no generated code. A fault mode's misbehaviour is
not written here: the core calls its :class:`nodes.faults.Behaviour` at the
points a fault can act (before serving, after a commit, per answer).

Serving a demand (``answer_demands``), per demand, in this order — nothing
is written before every demand of the call passed (1)-(5):

1. sizes bounded (:class:`RequestTooLarge`);
2. the demand envelope parses and is signed by the holder it names — checked
   only where it carries information: a bearer demand for a fold under one of
   our signed heads is answered the same whoever signed it, so its signature
   is not verified on this path (whoever cites the demand in evidence does);
3. it is fresh (``time`` within ``DEMAND_WINDOW_S`` of now, the documented
   clock skew; else :class:`ClockSkew` → OUT_OF_RANGE naming both times);
4. it names an obligation and commitment this node issued, addressed to it;
5. the obligation has not expired (``Expired`` → FAILED_PRECONDITION);
6. its nonce is new in this run (ALREADY_EXISTS otherwise) and it is not
   dated below the replay floor found at start (ABORTED: a previous run may
   have answered it) — the nonce looked up as soon as the demand is parsed,
   the floors before its signature is verified, so a replay costs a lookup;
   only a demand whose signature was verified has its nonce recorded (a
   bearer demand's holder and nonce are the caller's to choose), per signer,
   in a memory no stranger can fill for others (:mod:`nodes.replay`); see
   ``_accept_nonces``;
7. the fold is resolved from the store and the receipt signed by
   :func:`contracts.serve.answer_demand` — SERVED with the stored bytes,
   PENDING while the cold copy lags, never other bytes: bytes read back that
   miss the signed commitment's root are hashed before anything is signed
   and refused ABSENT / STORE_CORRUPTED (the node's own disk damaged them).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import gc
import os
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from contracts._answer_rule import refusal_for
from contracts._fields import is_digest
from contracts._lru import BoundedCache
from contracts.ask import ASK_BYTES, MAX_OPEN_LEAVES, FoldAsk, unpack_asks
from contracts.attest import RehydrationProof
from contracts.batch import (
    DEMAND_BATCH_TYPE,
    RECEIPT_BATCH_TYPE,
    batch_receipt_item,
    decode_demand_batch,
    receipt_batch_payload,
    receipt_item_bytes,
    served_whole_item,
)
from contracts.binary import DEMAND_BINARY_TYPE, decode_demand
from contracts.canonical import format_ms, parse_json_object, sha256_hex
from contracts.custody import CustodyFold
from contracts.envelope import Envelope, EnvelopeSigner
from contracts.errors import ContractError, EncodingError, Expired, NotEvidence, ReplayedNonce
from contracts.evidence import (
    EvidenceLevel,
    EvidenceStatus,
    equivocation_evidence,
    split_view_evidence,
    verify_clearing,
    verify_evidence,
)
from contracts.head_note import SignedHead, open_head
from contracts.heads import (
    FoldInput,
    FoldProof,
    FoldRecord,
    HeadCache,
    HeadLog,
    VerifiedFold,
    verify_fold,
)
from contracts.hops import MAX_HOP_BYTES, hop_bytes
from contracts.identity import Identity, PublicKey
from contracts.merkle import leaf_hash
from contracts.rules import (
    DEMAND_WINDOW_MS,
    FUTURE_SLACK_MS,
    MAX_DEADLINE_MS,
    MAX_SERVE_FOR_MS,
    MIN_DEADLINE_MS,
    MIN_SERVE_FOR_MS,
    demand_is_fresh,
    expired,
    holder_signature_decides,
    promise_refusal,
    serves_unsigned,
)
from contracts.serve import (
    WholeFoldReceipts,
    answer_demand,
    build_commitment,
    build_obligation,
    verify_delivery,
    verify_demand,
)
from contracts.signed import (
    Signed,
    open_statement,
    parse_statement,
    sign_statement,
    verify_parsed,
)
from contracts.statements import (
    Attestation,
    Commitment,
    DeliveryReceipt,
    Demand,
    Head,
    Obligation,
    Receipt,
    ReceiptStatus,
    RefusalReason,
    Statement,
)
from nodes import store as st
from nodes._disk import disk_full, is_disk_full
from nodes._disk import reporter as disk_reporter
from nodes.attest_log import AttestLedger, check_attest_caller, check_attest_issue_time
from nodes.attester import (
    MAX_LIFETIME_MS,
    AttestationAnswer,
    AttestationAsk,
    Attester,
    FoldBytes,
    LoggedAttestation,
    RestoreResult,
    leaf0_demand,
)
from nodes.client import HeldFold, Holder
from nodes.config import NodeConfig
from nodes.cosigner import Witnessing
from nodes.custodian import (
    Custodian,
    custody_folds,
    rehydrate_with_custody,
    statements_for,
    take_custody,
)
from nodes.custody_store import custody_counts
from nodes.elision import HeadElision
from nodes.errors import (
    ClockSkew,
    DemandPredatesRestart,
    MalformedRequest,
    PeerUnavailable,
    PromiseOutOfRange,
    RequestTooLarge,
    UnknownCommitment,
    UnknownPeer,
    UnknownValue,
)
from nodes.faults import Behaviour, FaultPlan
from nodes.future_floors import (
    FutureFloors,
    RestartFloors,
    append_lines,
    read_floors,
    rewrite_lines,
)
from nodes.held import HeldValues
from nodes.logging import get_logger
from nodes.messages import (
    Answer,
    ChallengeResult,
    CommittedCompaction,
    CommittedFold,
    Delivery,
    NodeInfo,
    Outcome,
    RehydrationReport,
    WitnessReply,
    select_hops,
)
from nodes.replay import DemandNonces
from nodes.restore import restore as restore_value
from nodes.transport import CallFailed, Transport

__all__ = [
    "DEMAND_WINDOW_S",
    "FUTURE_NONCES_FILENAME",
    "MAX_APPEND_HOPS",
    "MAX_ASKED_ATTESTERS",
    "MAX_ATTESTATIONS",
    "MAX_ATTESTATIONS_PER_ATTESTER",
    "MAX_ATTESTATION_BYTES",
    "MAX_ATTESTATION_LIFETIME_MS",
    "MAX_ATTESTATION_POOL_BYTES",
    "MAX_DEADLINE_MS",
    "MAX_DEMANDS_PER_CALL",
    "MAX_FOLD_HOPS",
    "MAX_FUTURE_HOLDERS",
    "MAX_HELD_BYTES",
    "MAX_HELD_VALUES",
    "MAX_NONCES",
    "MAX_NONCES_PER_HOLDER",
    "MAX_SERVE_FOR_MS",
    "MAX_STRANGER_ATTESTATIONS",
    "MAX_STRANGER_ATTESTATION_BYTES",
    "MIN_DEADLINE_MS",
    "MIN_SERVE_FOR_MS",
    "REPLAY_FLOOR_FILENAME",
    "REPLAY_FLOOR_LEASE_MS",
    "CommittedFold",
    "HeldValue",
    "NodeCore",
]

log = get_logger(__name__)

#: A demand is accepted only if its ``time`` is this close to now
#: (:func:`contracts.rules.demand_is_fresh`); its nonce is remembered at least
#: this long, so a replay is always caught.
DEMAND_WINDOW_S = DEMAND_WINDOW_MS / 1000
#: A demand dated more than FUTURE_SLACK_MS (contracts.rules) ahead of the node's
#: clock does not move the replay floor: a floor of its holder's own is kept
#: durably instead (``FUTURE_NONCES_FILENAME``), so no caller can push the node's
#: floor ahead and make a restarted node refuse everyone.
FUTURE_NONCES_FILENAME = "future_nonces"
#: Open holders (any key) with a durable floor of their own at once, each until
#: its latest demand dated ahead is stale; beyond it the lowest-dated are folded
#: into one global floor (nodes.future_floors). Holders of this node's own
#: obligations have as many again, reserved.
MAX_FUTURE_HOLDERS = 4096
#: Lines the holder-floor file may hold beyond twice its live entries before
#: it is rewritten (each raise appends one line).
_FUTURE_FILE_SLACK_LINES = 1024
#: Evidence kinds stored as suspicions (cleared by a later receipt, re-tested):
#: ``unanswered``, and ``busy``, the holder's record of an origin that answered
#: RESOURCE_EXHAUSTED (an ``unanswered`` record naming that status, nodes.noanswer).
_SUSPICION_KINDS = ("unanswered", "busy")
#: Promises this node signs (``CommitFold``): deadline and lifetime bounds are
#: contracts.rules' (MIN/MAX_DEADLINE_MS, MIN/MAX_SERVE_FOR_MS), the same on every route.
#: Sequence numbers are SQLite integers.
MAX_SEQ = 2**63 - 1
#: Held (delivered) values kept in memory: count and bytes; oldest evicted.
MAX_HELD_VALUES = 4096
MAX_HELD_BYTES = 256 * 1024 * 1024
#: Attestations kept: per attester key, and the largest envelope.
MAX_ATTESTATIONS_PER_ATTESTER = 1024
MAX_ATTESTATION_BYTES = 64 * 1024
#: The reserved pool (attesters the node knows or asked): count and bytes;
#: when full, refused (RESOURCE_EXHAUSTED), nothing evicted.
MAX_ATTESTATIONS = 100_000
MAX_ATTESTATION_POOL_BYTES = 1024 * 1024 * 1024
#: The stranger pool (every other attester key): count and bytes; when full,
#: its expired, then oldest, attestations are evicted.
MAX_STRANGER_ATTESTATIONS = 4096
MAX_STRANGER_ATTESTATION_BYTES = 64 * 1024 * 1024
#: Longest attestation lifetime accepted (``expires_at - issued_at``), as an
#: attester's longest (:data:`nodes.attester.MAX_LIFETIME_MS`). A stranger's
#: ``issued_at`` may also be at most :data:`DEMAND_WINDOW_S` ahead of the node's
#: clock, so its ``expires_at`` is at most this long plus the skew after now.
MAX_ATTESTATION_LIFETIME_MS = MAX_LIFETIME_MS
#: Attester keys remembered from this node's own Restore answers (oldest forgotten).
MAX_ASKED_ATTESTERS = 1024
#: Nonces of signed (verified) demands remembered at once, each until its demand
#: is twice the window old; full: the lowest-dated are forgotten (nodes.replay).
MAX_NONCES = 200_000
#: A signer's share of a full nonce memory: beyond it, only its demands are refused.
MAX_NONCES_PER_HOLDER = MAX_NONCES // 8
#: Counter: holder signatures on demands verified (one per demand, or per batch).
DEMAND_VERIFICATIONS = "demand_verifications"
#: How far above the latest accepted demand the durable replay floor is set.
REPLAY_FLOOR_LEASE_MS = 1_000
REPLAY_FLOOR_FILENAME = "replay_floor"
#: Digits of the floor file (fixed, so it can be overwritten in place on a full disk).
_FLOOR_WIDTH = 20
MAX_DEMANDS_PER_CALL = 256
MAX_APPEND_HOPS = 10_000
MAX_FOLD_HOPS = 100_000
MAX_VALUE_REF = 256
MAX_COMMITMENTS_PER_VALUE = 256
_STATEMENT_CACHE = 4096
#: Full method name → its ``rpc_<Method>`` counter name (bounded: names are the
#: methods a node serves, but a caller can send any).
_RPC_COUNTER: dict[str, str] = {}
_RPC_COUNTER_NAMES = 256
_OWN_CACHE = 100_000
#: The honest behaviour's hooks: a node whose behaviour does not override one
#: skips awaiting it on every demand.
_HONEST_BEFORE_SERVING = Behaviour.before_serving
_HONEST_ANSWER = Behaviour.answer
_HONEST_UNSIGNED = Behaviour.unsigned_hops
#: In-memory counters of unsigned asks (folds served, folds answered empty): kept
#: apart from the store's counters, so an ask writes nothing, not even a counter.
OPEN_SERVES = "open_serves"
OPEN_DECLINED = "open_declined"
_LEAF_CACHE_BYTES = 64 * 1024 * 1024
#: A delivery's budget when its caller sets none (the servicer passes the call's own).
DELIVER_TIMEOUT_S = 30.0
#: Receipts kept per origin (and origins kept) to check a suspicion stored after them.
_RECENT_RECEIPTS = 32
_RECENT_RECEIPT_ORIGINS = 256
_DEFAULT_CHUNK_BYTES = 1024 * 1024

S = TypeVar("S", bound=Statement)


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


def _check_skew(what: str, time_ms: int, now: float) -> None:
    """Step (3): ``what``, dated ``time_ms``, is within ±DEMAND_WINDOW_S of ``now``;
    else :class:`ClockSkew` naming both times, the gap and the allowed skew."""
    if not demand_is_fresh(time_ms, now * 1000.0):
        gap_s = time_ms / 1000.0 - now
        way = "ahead of" if gap_s > 0 else "behind"
        raise ClockSkew(
            f"{what} issued_at {format_ms(time_ms)} is {abs(gap_s):.1f} s {way} this node's"
            f" clock ({format_ms(_ms(now))}); allowed skew ±{DEMAND_WINDOW_S:.0f} s"
        )


def _read_floor(path: Path) -> int:
    """The durable replay floor (ms); 0 for a node that never accepted a demand."""
    try:
        text = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        return 0
    if not text.isdigit():
        raise st.StoreCorrupt(f"replay floor {path}: expected an integer (ms), got {text[:40]!r}")
    return int(text)


def _write_floor(path: Path, floor_ms: int) -> None:
    """Replace the floor file atomically and durably (fsync file, rename, fsync dir).

    The floor is written at a fixed width, so on a full disk (no block for a
    new file) it is overwritten in place instead: the same bytes of the same
    block, one write, fsync'd — a node with a full disk keeps raising its
    floor, and so keeps answering demands for what it holds. Only when even
    that is refused does the demand fail, RESOURCE_EXHAUSTED naming the disk.
    """
    text = f"{floor_ms:0{_FLOOR_WIDTH}d}\n".encode("ascii")
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if not is_disk_full(exc) or not path.exists():
            if is_disk_full(exc):
                raise disk_full(exc, f"raise replay floor to {floor_ms} ms", path) from exc
            raise
        try:
            _overwrite_floor(path, text)
        except OSError as again:
            if is_disk_full(again):
                raise disk_full(again, f"raise replay floor to {floor_ms} ms", path) from again
            raise
        return
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _overwrite_floor(path: Path, text: bytes) -> None:
    """Write the floor over the existing file's first bytes (no new block needed)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        if os.pwrite(fd, text, 0) != len(text):
            raise OSError(errno.ENOSPC, f"short write of the replay floor to {path}")
        os.ftruncate(fd, len(text))
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True, slots=True)
class HeldValue:
    """A compacted value this node holds, as delivered (statements verbatim)."""

    delivery: Delivery
    folds: tuple[HeldFold, ...]
    #: Custodians' stand-ins for the folds (nodes.custodian), in statement order.
    custody: tuple[HeldFold, ...] = ()


@dataclass(frozen=True, slots=True)
class _Own:
    """An obligation this node issued, its commitment, and the commitment's stored bytes."""

    obligation: Signed[Obligation]
    commitment: Signed[Commitment]
    commitment_bytes: bytes
    fold: VerifiedFold | None = None


def _leaves_size(leaves: tuple[bytes, ...]) -> int:
    """The weight of a fold's hop bytes in the leaf cache: their length."""
    return sum(len(x) for x in leaves)


def _own_key(head_digest: str, leaf_hash: str) -> str:
    """The own-cache key of a fold under a head: head digest ‖ leaf hash (128 hex
    characters, so never a per-fold obligation digest). Looked up on every
    demand, so a concatenation rather than the store's hashed binding."""
    return head_digest + leaf_hash


def _held_fold(fold: VerifiedFold, proof: bytes, head: bytes) -> HeldFold:
    """A head-form fold as the holder client keeps it: stand-ins plus the proof."""
    return HeldFold(fold.commitment, fold.obligation, proof, head, fold)


def _held_size(value: HeldValue) -> int:
    d = value.delivery
    return (
        len(d.value)
        + sum(map(len, d.commitments))
        + sum(map(len, d.obligations))
        + sum(map(len, d.custody))
    )


def _claimed_holder(demands: Sequence[bytes]) -> str:
    """The holder the first demand names (unverified: for a log line only)."""
    try:
        envelope = Envelope.from_bytes(demands[0])
        if envelope.payload_type == DEMAND_BATCH_TYPE:
            return decode_demand_batch(envelope.payload).holder
        return parse_statement(envelope, Demand).statement.holder
    except (ContractError, ValueError, IndexError):
        return ""


def _signature_decides(d: Demand, own: _Own, now: float) -> bool:
    """Whether a demand's holder signature is verified, and so its nonce recorded.

    A bearer demand for a fold under one of our own heads is answered without
    its signature (design: verify where it carries information): the answer
    does not depend on who asks, and nothing it moves is charged to the holder
    it names — not even a nonce (nodes.replay): its holder and nonce are the
    caller's to choose. Except a demand dated ahead of our clock: it raises the
    named holder's durable floor, so an unsigned one could make that holder's
    next demands ABORTED after a restart; it is verified like any other.
    """
    return holder_signature_decides(
        d.time,
        _ms(now),
        bearer_under_own_head=own.fold is not None and own.obligation.statement.holder is None,
    )


def _named_holders(checked: Iterable[tuple[Signed[Demand], _Own]]) -> frozenset[str]:
    """Holders of these demands that the obligation demanded under names (its
    holder: only an obligation this node signed, at its operator's word, names one)."""
    return frozenset(
        d.statement.holder
        for d, own in checked
        if own.obligation.statement.holder == d.statement.holder
    )


def _future_raises(future: Sequence[Signed[Demand]]) -> dict[str, int]:
    """Per holder, the latest time of its demands dated ahead in ``future``."""
    raises: dict[str, int] = {}
    for d in future:
        h, t = d.statement.holder, d.statement.time
        if t > raises.get(h, -1):
            raises[h] = t
    return raises


def _check_value_ref(value_ref: str) -> None:
    if not value_ref or len(value_ref) > MAX_VALUE_REF:
        raise MalformedRequest(f"value_ref must be 1..{MAX_VALUE_REF} chars, got {value_ref!r:.80}")


class NodeCore:
    """One node's behaviour; see the module docstring. Open with :meth:`open`."""

    def __init__(
        self,
        config: NodeConfig,
        identity: Identity,
        store: st.HopStore,
        transport: Transport,
        *,
        clock: Callable[[], float] | None = None,
        fault: FaultPlan | None = None,
        restart_floor_ms: int = 0,
    ) -> None:
        self.config = config
        self.identity = identity
        self.store = store
        #: Attesters that answered this node's Restore (the latest answers kept).
        self._asked_attesters: BoundedCache[str, None] = BoundedCache(MAX_ASKED_ATTESTERS)
        self.transport = transport
        self.clock: Callable[[], float] = clock if clock is not None else time.time
        self.fault = fault if fault is not None else FaultPlan(config.fault, config.fault_delay_ms)
        self.behaviour = self.fault.behaviour(identity)
        self.crashed = False
        self._advertised = config.advertise or config.listen
        self._held: HeldValues[HeldValue] = HeldValues(
            max_values=MAX_HELD_VALUES, max_bytes=MAX_HELD_BYTES, on_evict=self._evicted
        )
        self._cache: BoundedCache[tuple[str, bytes], Signed[Any] | SignedHead] = BoundedCache(
            _STATEMENT_CACHE
        )
        # (commitment, obligation) digests already checked for equivocation and kept
        # in the store: delivered again (every decision re-delivers a value's
        # statements), they need neither the check nor the no-op write again.
        self._kept_pairs: BoundedCache[tuple[str, str], None] = BoundedCache(_STATEMENT_CACHE)
        # Fold proofs already proved under a head this node verified, by the proof
        # bytes' digest: delivered again, the proof is not parsed and hashed again
        # (its head is still checked unexpired, which costs no signature).
        self._kept_folds: BoundedCache[str, tuple[str, HeldFold]] = BoundedCache(_STATEMENT_CACHE)
        self._rpc_counts: dict[str, int] = {}
        self.open_counts: dict[str, int] = {OPEN_SERVES: 0, OPEN_DECLINED: 0}
        self._holder: Holder | None = None  # created on first use
        self._own: BoundedCache[str, _Own] = BoundedCache(_OWN_CACHE)
        #: Hop bytes of folds read back under their committed roots, bounded in bytes.
        self._leaves: BoundedCache[str, tuple[bytes, ...]] = BoundedCache(
            None, maxweight=_LEAF_CACHE_BYTES, weigh=_leaves_size
        )
        #: Receipt batch items of whole folds served (obligation ‖ commitment digest →
        #: packed item, :func:`contracts.batch.served_whole_item`): immutable per fold.
        self._served_items: BoundedCache[str, bytes] = BoundedCache(_OWN_CACHE)
        #: Receipt templates of whole folds served to lone demands (obligation ‖
        #: commitment digest → :class:`contracts.serve.WholeFoldReceipts`).
        self._served_receipts: BoundedCache[str, WholeFoldReceipts] = BoundedCache(_OWN_CACHE)
        #: Signs receipt batches straight to envelope bytes (the bytes of
        #: :func:`contracts.batch.sign_receipt_batch`, envelope text packed once).
        self._receipt_batches = EnvelopeSigner(identity, RECEIPT_BATCH_TYPE)
        # Replay protection (see _accept_nonces): nonces of this run's signed demands
        # in memory, and a durable floor every demand ever recorded is dated below.
        self._nonces = DemandNonces(
            capacity=MAX_NONCES, per_signer=MAX_NONCES_PER_HOLDER, keep_ms=_ms(2 * DEMAND_WINDOW_S)
        )
        self._floor_path = config.data_dir / REPLAY_FLOOR_FILENAME
        self._restart_floor_ms = restart_floor_ms
        self._floor_ms = restart_floor_ms
        self._floor_lock = asyncio.Lock()
        self._commit_lock = asyncio.Lock()
        self.floor_writes = 0
        # Demands dated ahead of the clock: per holder, the latest time accepted
        # (durable, this run and runs before), and as the previous run left it.
        self._future_path = config.data_dir / FUTURE_NONCES_FILENAME
        # Holders whose floors are reserved besides those an obligation names: the
        # configured peers and the operator's keys (fixed for the run).
        self._known_holders = frozenset(
            [p.node_id for p in config.peers if p.node_id] + list(config.operator_keys)
        )
        self._future_floors = FutureFloors(
            capacity=MAX_FUTURE_HOLDERS, window_ms=_ms(DEMAND_WINDOW_S), known=self._known_holders
        )
        self._restart_future_floors = RestartFloors()
        self._future_lock = asyncio.Lock()
        self._future_lines = 0
        self._suspects: set[str] | None = None  # origins with stored suspicions (lazy)
        # Suspicions stored so far (a receipt check that read the store before one
        # landed must not drop its origin from ``_suspects``), and the last receipts
        # checked per origin: a suspicion stored after a receipt that clears it (two
        # rehydrations of one value, the later one served first) is checked at once.
        self._suspicions_stored = 0
        self._recent_receipts: BoundedCache[str, deque[tuple[bytes, bytes]]] = BoundedCache(
            _RECENT_RECEIPT_ORIGINS
        )
        # Signed tree heads: this origin's log of heads for the current epoch
        # (rebuilt from the store when missing), the heads this node verified
        # as a receiver (each signature checked once), and the heads each peer
        # acknowledged in a signed delivery receipt (sent as digests after), with
        # their origins (a peer holds their keys: named by key id after).
        self._head_log: HeadLog | None = None
        self.heads = HeadCache()
        self._elision = HeadElision()
        # custody hook (nodes.custodian): this node's custodian role
        self.custodian = Custodian(self)
        # Witness-cosigned heads (nodes.cosigner): this node's witness role, the
        # witnesses it asks as an origin, the quorum it requires as a holder.
        self.witnessing = Witnessing(self)

    @classmethod
    async def open(
        cls,
        config: NodeConfig,
        identity: Identity,
        *,
        transport: Transport,
        clock: Callable[[], float] | None = None,
        fault: FaultPlan | None = None,
        store_mode: st.StoreMode = st.StoreMode.DURABLE,
    ) -> NodeCore:
        """Open the node's store and state; ``store_mode`` scratch only for a node
        whose log is not meant to outlive its process (:class:`nodes.store.StoreMode`)."""
        floor_path = config.data_dir / REPLAY_FLOOR_FILENAME
        floor = _read_floor(floor_path)
        store = await st.HopStore.open(
            config.data_dir,
            identity.node_id,
            provenance_pending=config.provenance_pending,
            mode=store_mode,
        )
        try:  # a setting refused here (a bad --witness-policy file) closes the store
            core = cls(
                config, identity, store, transport, clock=clock, fault=fault, restart_floor_ms=floor
            )
        except BaseException:
            await store.close()
            raise
        try:
            # What this node would sign receipts over must be what it committed: a
            # damaged store is refused here, before any demand, naming the damage.
            checked = await store.check_stored()
        except BaseException:
            await store.close()
            raise
        log.info("store_checked", hops=checked.hops, folds=checked.folds, seconds=checked.seconds)
        if not floor_path.exists():
            # Made now, at its fixed width, so a disk that fills later still has
            # its block to overwrite (see _write_floor).
            try:
                await asyncio.to_thread(_write_floor, floor_path, 0)
            except BaseException:
                await store.close()
                raise
        core._load_future_floors()
        await core._outwait_restart_floor()
        return core

    def _load_future_floors(self) -> None:
        restart = read_floors(self._future_path, self.now_ms() - _ms(DEMAND_WINDOW_S))
        table = FutureFloors.loaded(
            restart,
            capacity=MAX_FUTURE_HOLDERS,
            window_ms=_ms(DEMAND_WINDOW_S),
            known=self._known_holders,
        )
        lines = table.lines()
        if lines or self._future_path.exists():
            rewrite_lines(self._future_path, lines)
        self._future_floors = table
        self._restart_future_floors = restart
        self._future_lines = len(lines)

    async def _outwait_restart_floor(self) -> None:
        """Start serving only once the floor a previous run left is in the past.

        The floor runs up to ``REPLAY_FLOOR_LEASE_MS`` ahead of the clock. A
        node back at once would otherwise turn away even demands made after
        it came back (ABORTED), and a holder or witness asking in that moment
        would record a correct origin as ``unanswered``. Waiting out the lease
        (at most that long, plus a margin; a floor further ahead means the
        clock went back, and demands below it stay refused) makes every demand
        dated after the start acceptable.
        """
        give_up = time.monotonic() + (REPLAY_FLOOR_LEASE_MS + FUTURE_SLACK_MS) / 1000 + 0.25
        while self._restart_floor_ms > _ms(self.clock()) and time.monotonic() < give_up:
            ahead_s = (self._restart_floor_ms - _ms(self.clock())) / 1000
            await asyncio.sleep(min(0.05, max(0.001, ahead_s)))

    async def flush(self) -> None:
        """Persist what is kept write-behind (counters)."""
        await self.store.flush_counters()

    async def close(self) -> None:
        with contextlib.suppress(st.StoreError):
            await self.store.flush_counters()
        await self.store.close()
        await self.transport.close()

    # ----------------------------------------------------------------- identity, counters

    @property
    def node_id(self) -> str:
        return self.identity.node_id

    @property
    def advertised(self) -> str:
        return self._advertised

    def set_advertised(self, address: str) -> None:
        self._advertised = address

    def now_ms(self) -> int:
        return _ms(self.clock())

    def count_rpc(self, method: str) -> None:
        key = _RPC_COUNTER.get(method)
        if key is None:  # the counter's name, made once per method name (a few dozen)
            key = "rpc_" + method.rsplit("/", 1)[-1]
            if len(_RPC_COUNTER) < _RPC_COUNTER_NAMES:
                _RPC_COUNTER[method] = key
        self._rpc_counts[key] = self._rpc_counts.get(key, 0) + 1

    def bump(self, name: str, n: int = 1) -> None:
        self.store.bump(name, n)

    async def stats(self) -> dict[str, int]:
        counters = await self.store.counters()
        counters.update(self._rpc_counts)
        counters.update(self.open_counts)
        counters["held_values"] = len(self._held)
        counters["demand_nonces"] = len(self._nonces)
        counters["demand_nonces_evicted"] = self._nonces.evicted
        # Writes this process refused for a full disk (RESOURCE_EXHAUSTED, nodes._disk).
        counters["disk_full_refusals"] = disk_reporter.refusals
        # Objects kept out of the garbage collector's full collections (a node
        # process freezes what exists once it serves: nodes.app.run_node).
        counters["gc_frozen_objects"] = gc.get_freeze_count()
        # custody hook: folds, hops and statements held as custodian (nodes.custodian)
        counters.update(await custody_counts(self.store))
        return counters

    def info(self) -> NodeInfo:
        return NodeInfo(
            name=self.config.name,
            node_id=self.node_id,
            public_key=self.identity.public.raw,
            epoch=self.store.epoch,
            fault=str(self.fault.mode),
            listen=self._advertised,
        )

    def open_cached(self, data: bytes, cls: type[S], *, signer: str | None = None) -> Signed[S]:
        """``open_statement`` with a cache keyed by the exact bytes (statements are immutable)."""
        key = (cls.KIND.value, data)
        hit = self._cache.get(key)
        if isinstance(hit, Signed) and (signer is None or hit.signer == signer):
            return hit
        signed = open_statement(data, cls, signer=signer)
        self._cache.put(key, signed)
        return signed

    def _open_own_head(self, note: bytes) -> SignedHead:
        """One of this node's heads as stored: verified once, then cached by its bytes."""
        key = (Head.KIND.value, note)
        hit = self._cache.get(key)
        if isinstance(hit, SignedHead):
            return hit
        head = open_head(note, origin=self.node_id)
        self._cache.put(key, head)
        return head

    # ----------------------------------------------------------------- hop log

    async def append(
        self, hops: Sequence[bytes], seqs: Sequence[int] = ()
    ) -> tuple[str, tuple[int, ...]]:
        """Append hops (JSON objects of hop fields); seqs explicit or each hop's ``step``."""
        if not hops:
            raise MalformedRequest("append: no hops given")
        if len(hops) > MAX_APPEND_HOPS:
            raise RequestTooLarge(f"append: {len(hops)} hops exceeds {MAX_APPEND_HOPS} per call")
        if seqs and len(seqs) != len(hops):
            raise MalformedRequest(f"append: {len(seqs)} seqs for {len(hops)} hops")
        epoch = self.store.epoch
        inputs: list[st.HopInput] = []
        for i, raw in enumerate(hops):
            if len(raw) > MAX_HOP_BYTES:
                raise RequestTooLarge(f"append: hop {i} is {len(raw)} bytes, limit {MAX_HOP_BYTES}")
            fields = parse_json_object(raw, what=f"hop {i}", max_bytes=MAX_HOP_BYTES)
            if seqs:
                seq = int(seqs[i])
                if not 0 <= seq <= MAX_SEQ:
                    raise MalformedRequest(f"append: seq {seq} of hop {i} is outside 0..2^63-1")
            else:
                step = fields.get("step")
                if not isinstance(step, int) or isinstance(step, bool) or not 0 <= step <= MAX_SEQ:
                    raise MalformedRequest(
                        f"append: hop {i} has no seq and no integer 'step' in 0..2^63-1"
                    )
                seq = step
            try:
                data = hop_bytes(fields, self.node_id, epoch)
            except ValueError as exc:
                raise MalformedRequest(f"append: hop {i}: {exc}") from exc
            inputs.append(st.HopInput(seq=seq, hop_bytes=data))
        if len({h.seq for h in inputs}) != len(inputs):
            raise MalformedRequest("append: a seq appears twice in one call")
        await self.store.append_hops(epoch, inputs, now_ms=self.now_ms())
        return epoch, tuple(h.seq for h in inputs)

    async def commit_fold(
        self,
        value_ref: str,
        seqs: Sequence[int],
        *,
        serve_for_ms: int = 0,
        deadline_ms: int = 0,
        value: bytes = b"",
    ) -> CommittedFold:
        """Fold stored hops (current epoch) into a signed commitment + obligation.

        The store makes the hops durable, then calls our signer inside the
        same transaction, and returns only after COMMIT (seed 000 ordering).
        """
        _check_value_ref(value_ref)
        if not seqs:
            raise MalformedRequest(f"commit {value_ref}: no hops to fold")
        if len(seqs) > MAX_FOLD_HOPS:
            raise RequestTooLarge(f"commit {value_ref}: {len(seqs)} hops exceeds {MAX_FOLD_HOPS}")
        if len(set(seqs)) != len(seqs):
            raise MalformedRequest(f"commit {value_ref}: a seq appears twice")
        bad = next((q for q in seqs if not 0 <= int(q) <= MAX_SEQ), None)
        if bad is not None:
            raise MalformedRequest(f"commit {value_ref}: seq {bad} is outside 0..2^63-1")
        self._check_promise(value_ref, serve_for_ms, deadline_ms)
        epoch = self.store.epoch
        stored = await self.store.hops(epoch, seqs)
        inputs: list[st.HopInput] = []
        for seq in seqs:
            data = stored.get(int(seq))
            if data is None:
                raise st.MissingHop(
                    f"commit {value_ref}: hop seq {seq} of epoch {epoch} is not in the log"
                )
            inputs.append(st.HopInput(seq=int(seq), hop_bytes=data))
        async with self._commit_lock:  # fold_seq is next-free per value ref
            return await self._commit(epoch, value_ref, inputs, serve_for_ms, deadline_ms, value)

    def _check_promise(self, value_ref: str, serve_for_ms: int, deadline_ms: int) -> None:
        """Sign only promises this node can keep: the promise as it would be signed (0 =
        this node's configured default), by the rule every route applies."""
        refusal = promise_refusal(
            deadline_ms=deadline_ms or self.config.deadline_ms,
            serve_for_ms=serve_for_ms or self.config.serve_for_ms,
        )
        if refusal:
            raise PromiseOutOfRange(f"commit {value_ref}: {refusal}")

    async def _commit(
        self,
        epoch: str,
        value_ref: str,
        inputs: list[st.HopInput],
        serve_for_ms: int,
        deadline_ms: int,
        value: bytes,
    ) -> CommittedFold:
        fold_seq = await self.store.next_fold_seq(self.node_id, epoch, value_ref)
        serve_for = serve_for_ms or self.config.serve_for_ms
        deadline = deadline_ms or self.config.deadline_ms
        now = self.clock()
        pending = self.store.provenance_pending
        made: list[_Own] = []

        def sign(draft: st.FoldDraft) -> st.SignedFold:
            issued = _ms(now)
            commitment = build_commitment(
                self.identity,
                epoch=draft.epoch,
                value_ref=draft.value_ref,
                fold_seq=draft.fold_seq,
                hops=draft.leaves,
                issued_at=issued,
                provenance_pending=pending,
            )
            obligation = build_obligation(
                self.identity,
                commitment,
                serve_until=issued + serve_for,
                deadline_ms=deadline,
                endpoints=(self._advertised,),
                issued_at=issued,
            )
            commitment_bytes = commitment.to_bytes()
            made.append(_Own(obligation, commitment, commitment_bytes))
            return st.SignedFold(
                commitment_digest=commitment.digest,
                commitment_envelope=commitment_bytes,
                root=commitment.statement.root,
                obligation_digest=obligation.digest,
                obligation_envelope=obligation.to_bytes(),
                serve_until_ms=issued + serve_for,
            )

        signed = await self.store.commit_fold(
            epoch=epoch,
            value_ref=value_ref,
            fold_seq=fold_seq,
            hops=inputs,
            sign=sign,
            now_ms=_ms(now),
        )
        # Only now, after COMMIT, may the fold be served from memory.
        ours = next((o for o in made if o.commitment.digest == signed.commitment_digest), None)
        if ours is not None:
            self._remember_own(ours)
        result = CommittedFold(signed.commitment_envelope, signed.obligation_envelope, pending)
        self.behaviour.after_commit(
            signed.commitment_digest,
            epoch=epoch,
            value_ref=value_ref,
            fold_seq=fold_seq,
            hops=[h.hop_bytes for h in inputs],
            issued_at=_ms(now),
            provenance_pending=pending,
        )
        if value:
            # Statements signed just now need no second verification; a fold the
            # store already had (an identical re-commit) is opened from its bytes.
            if ours is not None:
                commitment, obligation = ours.commitment, ours.obligation
            else:
                commitment = self.open_cached(result.commitment, Commitment)
                obligation = self.open_cached(result.obligation, Obligation)
            delivery = Delivery(
                value_ref, value, (result.commitment,), (result.obligation,), self.node_id
            )
            self._hold(
                value_ref,
                HeldValue(
                    delivery,
                    (HeldFold(commitment, obligation, result.commitment, result.obligation),),
                ),
            )
        log.info(
            "fold_committed",
            value_ref=value_ref,
            fold_seq=fold_seq,
            hops=len(inputs),
            commitment=signed.commitment_digest[:16],
            pending=pending,
        )
        return result

    async def commit_compaction(
        self,
        folds: Sequence[tuple[str, Sequence[int], bytes]],
        *,
        serve_for_ms: int = 0,
        deadline_ms: int = 0,
    ) -> CommittedCompaction:
        """Fold several values' stored hops at once under ONE signed tree head.

        ``folds`` are ``(value_ref, seqs, value)``: at most one per value. The
        store makes every hop durable, then the head is signed over the fold
        records inside the same transaction (one signature, however many
        values), and only after COMMIT are head and fold proofs returned.
        """
        if not folds:
            raise MalformedRequest("commit compaction: no folds given")
        if len(folds) > MAX_DEMANDS_PER_CALL:
            raise RequestTooLarge(
                f"commit compaction: {len(folds)} folds exceeds {MAX_DEMANDS_PER_CALL}"
            )
        if len({ref for ref, _, _ in folds}) != len(folds):
            raise MalformedRequest("commit compaction: a value_ref appears twice")
        self._check_promise("compaction", serve_for_ms, deadline_ms)
        epoch = self.store.epoch
        for value_ref, seqs, _ in folds:
            _check_value_ref(value_ref)
            if not seqs or len(seqs) > MAX_FOLD_HOPS or len(set(seqs)) != len(seqs):
                raise MalformedRequest(
                    f"commit {value_ref}: 1..{MAX_FOLD_HOPS} distinct seqs, got {len(seqs)}"
                )
            bad = next((q for q in seqs if not 0 <= int(q) <= MAX_SEQ), None)
            if bad is not None:
                raise MalformedRequest(f"commit {value_ref}: seq {bad} is outside 0..2^63-1")
        # Every fold's hops in one read (folds of one compaction share most of them).
        stored = await self.store.hops(
            epoch, list(dict.fromkeys(int(q) for _, seqs, _ in folds for q in seqs))
        )
        wanted: list[tuple[str, list[st.HopInput], bytes]] = []
        for value_ref, seqs, value in folds:
            inputs: list[st.HopInput] = []
            for seq in seqs:
                data = stored.get(int(seq))
                if data is None:
                    raise st.MissingHop(
                        f"commit {value_ref}: hop seq {seq} of epoch {epoch} is not in the log"
                    )
                inputs.append(st.HopInput(seq=int(seq), hop_bytes=data))
            wanted.append((value_ref, inputs, value))
        async with self._commit_lock:
            out = await self._commit_compaction(epoch, wanted, serve_for_ms, deadline_ms)
        # custody hook (nodes.custodian): custodians asked once the commit stands
        if self.config.custody_k:
            out = await self._with_custody(out, wanted)
        return out

    async def _with_custody(
        self, out: CommittedCompaction, wanted: list[tuple[str, list[st.HopInput], bytes]]
    ) -> CommittedCompaction:
        """``out`` with custodians' statements; the values held here carry them too."""
        custody = await take_custody(self, out)
        if not custody:
            return out
        for (ref, _, value), proof in zip(wanted, out.fold_proofs, strict=True):
            held = self._held.get(ref) if value else None
            if held is not None:
                notes = statements_for(custody, proof)
                delivery = dataclasses.replace(held.delivery, custody=notes)
                extra = custody_folds(notes, held.folds, now_ms=self.now_ms())
                self._hold(ref, HeldValue(delivery, held.folds, extra))
        return dataclasses.replace(out, custody=custody)

    async def take_custody(
        self, head: bytes, fold_proofs: Sequence[bytes], *, by: str | None = None
    ) -> tuple[bytes, ...]:
        """``Custody.Take``: hold an origin's folds and sign custody statements."""
        return await self.custodian.take(head, fold_proofs, by=by)

    async def _epoch_head_log(self, epoch: str) -> HeadLog:
        """This origin's log of heads for ``epoch``, rebuilt from the store if needed."""
        log_ = self._head_log
        if log_ is not None and log_.epoch == epoch:
            return log_
        batches, last = await self.store.head_log_state(epoch)
        log_ = HeadLog(self.identity, epoch, batches=batches, last_folds=last)
        self._head_log = log_
        return log_

    async def _commit_compaction(
        self,
        epoch: str,
        wanted: list[tuple[str, list[st.HopInput], bytes]],
        serve_for_ms: int,
        deadline_ms: int,
    ) -> CommittedCompaction:
        head_log = await self._epoch_head_log(epoch)
        fold_seqs = await self.store.next_fold_seqs(
            self.node_id, epoch, [ref for ref, _, _ in wanted]
        )
        inputs = [st.CompactionInput(ref, fold_seqs[ref], tuple(hops)) for ref, hops, _ in wanted]
        serve_for = serve_for_ms or self.config.serve_for_ms
        deadline = deadline_ms or self.config.deadline_ms
        issued = _ms(self.clock())
        pending = self.store.provenance_pending
        made: list[tuple[SignedHead, dict[str, FoldProof]]] = []
        #: the exact bytes each fold's root was computed over (durable folds only)
        signed_leaves: dict[str, tuple[bytes, ...]] = {}

        def sign(drafts: Sequence[st.FoldDraft]) -> st.SignedCompaction:
            compaction = head_log.compact(
                [FoldInput(d.value_ref, d.fold_seq, d.leaves) for d in drafts],
                serve_until=issued + serve_for,
                deadline_ms=deadline,
                endpoints=(self._advertised,),
                issued_at=issued,
                pending=pending,
            )
            made.append((compaction.head, dict(compaction.proofs)))
            signed_leaves.clear()
            signed_leaves.update(
                (d.value_ref, d.leaves) for d in drafts if not d.provenance_pending
            )
            folds: list[st.SignedHeadFold] = []
            for draft, record in zip(drafts, compaction.records, strict=True):
                proof = compaction.proofs[draft.value_ref]
                folds.append(
                    st.SignedHeadFold(
                        leaf_hash(record).hex(),
                        record,
                        FoldRecord.from_bytes(record).root,
                        proof.to_bytes(),
                    )
                )
            return st.SignedCompaction(
                compaction.head.digest,
                compaction.head.to_bytes(),
                compaction.head.statement.seq,
                issued + serve_for,
                tuple(folds),
            )

        try:
            signed = await self.store.commit_compaction(
                epoch=epoch, folds=inputs, sign=sign, now_ms=issued
            )
        except BaseException:
            self._head_log = None  # the in-memory log ran ahead of the store: rebuild
            raise
        head, proofs = made[-1]
        # Our own head and folds, committed just now: served from memory, no re-verification.
        self._cache.put((Head.KIND.value, signed.head_note), head)
        for (ref, _, _), fold_row in zip(wanted, signed.folds, strict=True):
            verified = verify_fold(proofs[ref], head)
            self._own.put(
                _own_key(head.digest, fold_row.leaf_hash),
                _Own(verified.obligation, verified.commitment, b"", verified),
            )
            leaves = signed_leaves.get(ref)
            if leaves is not None:
                # Durable now, and exactly the bytes the root was signed over: the
                # first demand for this fold is served from memory, not read back.
                self._keep_leaves(verified.commitment.digest, leaves)
        self.behaviour.after_compaction(head, [f.record for f in signed.folds], inputs)
        # The witnesses' cosignatures ride on the note delivered (same head digest).
        note = await self.witnessing.cosign_head(signed.head_note, head_log)
        out = CommittedCompaction(note, tuple(f.proof for f in signed.folds), pending)
        for (ref, _, value), fold in zip(wanted, signed.folds, strict=True):
            if value:
                verified = verify_fold(proofs[ref], head)
                self._hold(
                    ref,
                    HeldValue(
                        Delivery(ref, value, (), (), self.node_id, (fold.proof,), (out.head,)),
                        (_held_fold(verified, fold.proof, out.head),),
                    ),
                )
        log.info(
            "compaction_committed",
            folds=len(inputs),
            head=signed.head_digest[:16],
            seq=signed.seq,
            pending=pending,
        )
        return out

    # ----------------------------------------------------------------- serve

    def _remember_own(self, own: _Own) -> None:
        self._own.put(own.obligation.digest, own)

    async def _own_statements(self, demand: Signed[Demand]) -> _Own:
        d = demand.statement
        own = self._own.peek(_own_key(d.obligation, d.commitment)) or self._own.peek(d.obligation)
        if own is not None:
            return own
        record = await self.store.obligation(d.obligation)
        if record is None:
            own = await self._own_head_fold(demand)
            if own is not None:
                return own
        if record is None or not record.local:
            raise UnknownCommitment(
                f"demand {demand.digest[:12]}… names obligation {d.obligation[:12]}…,"
                " which this node did not issue"
            )
        fold = await self.store.commitment(record.commitment_digest)
        if fold is None:
            raise UnknownCommitment(
                f"obligation {d.obligation[:12]}… names commitment"
                f" {record.commitment_digest[:12]}…, which this node does not hold"
            )
        own = _Own(
            self.open_cached(record.envelope, Obligation, signer=self.node_id),
            self.open_cached(fold.envelope, Commitment, signer=self.node_id),
            fold.envelope,
        )
        self._remember_own(own)
        return own

    async def _own_head_fold(self, demand: Signed[Demand]) -> _Own | None:
        """A demand naming one of our heads and a fold record under it (no signature checked:
        the head is our own, opened once and cached; the fold proof is hashed)."""
        d = demand.statement
        if not (is_digest(d.obligation) and is_digest(d.commitment)):
            return None
        return await self._own_under_head(d.obligation, d.commitment)

    async def _own_under_head(self, head_digest: str, leaf: str) -> _Own | None:
        """One of our heads (by digest) and a fold record under it (by leaf hash), if we
        signed them; kept in the own-cache when found, never when not."""
        row = await self.store.head_fold(head_digest, leaf)
        if row is None:
            # custody hook: a fold this node promised as custodian (nodes.custodian)
            held = await self.custodian.fold_for(head_digest, leaf)
            if held is None:
                return None
            own = _Own(held.obligation, held.commitment, b"", held)
            self._own.put(_own_key(head_digest, leaf), own)
            return own
        head = self._open_own_head(row.head_note)
        fold = verify_fold(FoldProof.from_bytes(row.proof), head)
        own = _Own(fold.obligation, fold.commitment, b"", fold)
        self._own.put(_own_key(row.head_digest, row.leaf_hash), own)
        return own

    def _fresh_demand(self, data: bytes | Envelope, now: float) -> Signed[Demand]:
        """Steps (2)-(3) of a demand: parsed (``data``: the bytes, or the envelope
        already read from them; its signature not yet checked) and fresh."""
        if type(data) is Envelope and data.payload_type == DEMAND_BINARY_TYPE:
            # what parse_statement reads for this payload type, without its dispatch
            demand = Signed(data, decode_demand(data.payload))
        else:
            demand = parse_statement(data, Demand)
        _check_skew(f"demand {demand.digest[:12]}…", demand.statement.time, now)
        return demand

    def _bound_demand(self, demand: Signed[Demand], own: _Own, now: float) -> Signed[Demand]:
        """Steps (2) and (4)-(5) of a fresh demand for ``own``: signed where that carries
        information, bound to our obligation and commitment, the obligation unexpired."""
        d = demand.statement
        obligation, commitment = own.obligation, own.commitment
        if _signature_decides(d, own, now):
            # (6) a demand to be recorded: refused below a floor before its
            # signature costs anything
            self._refuse_below_floors(d, demand.digest)
            self.bump(DEMAND_VERIFICATIONS)
            demand = open_statement(demand.envelope, Demand)
            self._refuse_below_holder_floor(d, demand.digest)
        verify_demand(demand, obligation=obligation, commitment=commitment)
        # (5) unexpired obligation
        o = obligation.statement
        if expired(o.serve_until, _ms(now)):
            raise Expired(
                f"obligation {obligation.digest[:12]}… expired at {o.serve_until} ms"
                f" (now {_ms(now)} ms)"
            )
        return demand

    def _refuse_replay(self, d: Demand) -> None:
        """Step (6): a remembered nonce, refused as soon as the demand is parsed."""
        try:
            self._nonces.check(d.holder, d.nonce)
        except ReplayedNonce:
            self.bump(st.CounterName.NONCE_REPLAYS)
            raise

    def _refuse_below_floors(self, d: Demand, digest: str) -> None:
        """Step (6) for a demand to be recorded, before its signature is verified:
        dated below the restart floor, or at or below the nonces a full memory forgot."""
        if d.time < self._restart_floor_ms:
            raise DemandPredatesRestart(
                f"demand {digest[:12]}… is dated {d.time} ms, before this node's"
                f" restart floor {self._restart_floor_ms} ms; issue a fresh demand"
            )
        self._nonces.check_floor(d.holder, d.time)

    def _refuse_below_holder_floor(self, d: Demand, digest: str) -> None:
        """Step (6), once the holder's signature is verified (the floor is that holder's
        own): dated at or below its latest demand dated ahead a previous run accepted."""
        why = self._restart_future_floors.refusal(d.holder, d.time)
        if why is not None:
            raise DemandPredatesRestart(
                f"demand {digest[:12]}… is dated {d.time} ms, {why}; issue a fresh demand"
            )

    async def _check_demand(
        self, data: bytes | Envelope, now: float
    ) -> tuple[Signed[Demand], _Own]:
        """Steps (2)-(5) of one demand: the demand, checked, and the fold it is for."""
        demand = self._fresh_demand(data, now)
        self._refuse_replay(demand.statement)
        return await self._checked_own(demand, now)

    async def _checked_own(self, demand: Signed[Demand], now: float) -> tuple[Signed[Demand], _Own]:
        """Steps (2), (4)-(5) of a fresh demand not seen before."""
        d = demand.statement
        # (4) ours (a coroutine only for a fold not cached)
        own = self._own.get(_own_key(d.obligation, d.commitment))
        if own is None:
            own = await self._own_statements(demand)
        return self._bound_demand(demand, own, now), own

    async def answer_demands(self, demands: Sequence[bytes]) -> list[Answer]:
        """Answer every demand of one call (see module docstring for the order)."""
        behaviour = type(self.behaviour)
        if behaviour.before_serving is not _HONEST_BEFORE_SERVING:  # a fault acts here
            await self.behaviour.before_serving(lambda: _claimed_holder(demands))
        if not demands:
            raise MalformedRequest("demand: no demands given")
        if len(demands) > MAX_DEMANDS_PER_CALL:
            raise RequestTooLarge(
                f"demand: {len(demands)} demands exceeds {MAX_DEMANDS_PER_CALL} per call"
            )
        now = self.clock()
        if len(demands) == 1:  # nearly every call: the envelope is read once
            envelope = Envelope.from_bytes(demands[0])
            if envelope.payload_type == DEMAND_BATCH_TYPE:
                return await self._answer_batch(envelope, now)
            demand, own = await self._check_demand(envelope, now)
            # (6) nonces: the only write before answering (a signed demand's only)
            if _signature_decides(demand.statement, own, now):
                await self._accept_nonces((demand,), now, _named_holders(((demand, own),)))
            if type(self.behaviour).answer is _HONEST_ANSWER:
                served = self._served_alone(demand, own, _ms(now))
                if served is not None:  # the hot path: no coroutine, a receipt template
                    return [served]
            return [await self._answer(demand, own, now)]
        # Plain loops, not async comprehensions: each of those is one more
        # coroutine per call, and nearly every call carries one demand.
        # Every demand parsed, fresh and not a replay before any signature is
        # checked: a replayed call is refused at its first demand, for a lookup.
        fresh: list[Signed[Demand]] = []
        seen: set[tuple[str, str]] = set()
        for data in demands:
            demand = self._fresh_demand(data, now)
            key = (demand.statement.holder, demand.statement.nonce)
            if key in seen:
                raise MalformedRequest("demand: the same nonce appears twice in one call")
            seen.add(key)
            self._refuse_replay(demand.statement)
            fresh.append(demand)
        checked: list[tuple[Signed[Demand], _Own]] = []
        for demand in fresh:
            checked.append(await self._checked_own(demand, now))
        # (6) nonces: the only write before answering (signed demands' only)
        await self._accept_nonces(
            [d for d, own in checked if _signature_decides(d.statement, own, now)],
            now,
            _named_holders(checked),
        )
        answers: list[Answer] = []
        for d, own in checked:
            answers.append(await self._answer(d, own, now))
        return answers

    async def answer_asks(self, asks: bytes) -> list[Answer]:
        """Unsigned first asks (:mod:`contracts.ask`; design revision 3), one answer per
        fold in order: the fold's hops when this node serves all of them now, under one
        of its own unexpired heads, from bytes read back under the committed root; an
        empty answer (no hops: "ask signed") for anything else — unknown, expired,
        pending, damaged, too large for this path.

        No signature is made or verified and nothing is written: no nonce is claimed,
        no replay floor or future-nonce floor moves (an ask names no holder, no time,
        no nonce), so a flood of asks leaves the node as it found it. Sizes are checked
        before anything is looked up; an answer is bounded like a signed one (whole
        folds of at most :data:`MAX_OPEN_LEAVES` hops, the response within half the
        message bound: the rest answered empty, to be demanded signed or streamed).
        """
        behaviour = type(self.behaviour)
        if behaviour.before_serving is not _HONEST_BEFORE_SERVING:  # a fault acts here
            await self.behaviour.before_serving(lambda: "")
        # (1) sizes, before anything is read from the bytes
        if len(asks) > MAX_DEMANDS_PER_CALL * ASK_BYTES:
            raise RequestTooLarge(
                f"demand: {len(asks)} bytes of asks exceeds {MAX_DEMANDS_PER_CALL} folds per call"
            )
        try:
            parsed = unpack_asks(asks, max_folds=MAX_DEMANDS_PER_CALL)
        except EncodingError as exc:
            raise MalformedRequest(f"demand: {exc}") from exc
        now_ms = self.now_ms()
        room = self.config.max_message_bytes // 2
        answers: list[Answer] = []
        for ask in parsed:
            hops = await self._open_hops(ask, now_ms)
            size = sum(map(len, hops))
            if size > room:
                hops, size = (), 0
            room -= size
            if hops:
                self.open_counts[OPEN_SERVES] += 1
            else:
                self.open_counts[OPEN_DECLINED] += 1
            answers.append(Answer(b"", b"", hops))
        return answers

    async def _open_hops(self, ask: FoldAsk, now_ms: int) -> tuple[bytes, ...]:
        """The hops an unsigned ask for one fold is answered with (``()``: ask signed)."""
        own = self._own.get(_own_key(ask.head, ask.fold))
        if own is None:
            own = await self._own_under_head(ask.head, ask.fold)
        if own is None or own.fold is None or own.obligation.statement.holder is not None:
            return ()
        commitment = own.commitment
        if not serves_unsigned(
            own.obligation.statement.serve_until,
            now_ms,
            leaf_count=commitment.statement.leaf_count,
            max_leaves=MAX_OPEN_LEAVES,
        ):
            return ()
        leaves = self._cached_leaves(commitment.digest)
        if leaves is None:
            # Read as the signed path reads (FOUND: every hop, hashing to our root), but
            # counted and logged nowhere: the signed demand a failure leads to does that.
            resolution = await self.store.resolve(
                commitment.digest, now_ms=now_ms, root=commitment.statement.root, count=False
            )
            if resolution.status is not st.ResolveStatus.FOUND:
                return ()  # PENDING, STORE_CORRUPTED, …: answered signed, never unsigned
            leaves = tuple(resolution.leaves)
            self._keep_leaves(commitment.digest, leaves)
        if type(self.behaviour).unsigned_hops is not _HONEST_UNSIGNED:  # a fault may lie
            return self.behaviour.unsigned_hops(commitment.digest, leaves)
        return leaves

    async def _answer_batch(self, envelope: Envelope, now: float) -> list[Answer]:
        """A demand batch (:mod:`contracts.batch`): the same checks as for one demand per
        fold, one nonce, and ONE signed receipt batch; it travels in the first answer,
        the others carry their fold's commitment bytes and hops."""
        # (2) parse; the holder's one signature is checked below unless it carries
        # no information (bearer demands for folds under our own heads)
        batch = decode_demand_batch(envelope.payload)
        if len(batch.items) > MAX_DEMANDS_PER_CALL:
            raise RequestTooLarge(
                f"demand: a batch of {len(batch.items)} folds exceeds {MAX_DEMANDS_PER_CALL}"
            )
        # (3) fresh
        _check_skew(f"demand batch {envelope.digest[:12]}…", batch.time, now)
        # (6) a replayed batch is refused here, before its signature
        if batch.items:
            self._refuse_replay(batch.demand(0))
        # (4) ours, and bound correctly
        now_ms = _ms(now)
        # the holder's one signature carries information unless every fold is a
        # bearer fold under one of our heads and the batch is not dated ahead
        bearer = True
        demands: list[Signed[Demand]] = []
        owns: list[_Own] = []
        cached = self._own.get
        for i, item in enumerate(batch.items):  # a coroutine only for a fold not cached
            d = Signed(envelope, batch.demand(i))
            demands.append(d)
            own = cached(_own_key(item.obligation, item.commitment))
            if own is None:
                own = await self._own_statements(d)
            owns.append(own)
            if own.fold is None or own.obligation.statement.holder is not None:
                bearer = False
        unsigned_ok = not holder_signature_decides(batch.time, now_ms, bearer_under_own_head=bearer)
        if not unsigned_ok:
            self._refuse_below_floors(demands[0].statement, envelope.digest)
            self.bump(DEMAND_VERIFICATIONS)
            envelope.verify(PublicKey.from_node_id(batch.holder))
            self._refuse_below_holder_floor(demands[0].statement, envelope.digest)
        honest = type(self.behaviour).answer is _HONEST_ANSWER
        # Each fold checked, and its packed answer found when the answer rule serves
        # the whole fold from bytes in memory (nothing is counted or sent before the
        # nonce is accepted below).
        packs: list[tuple[bytes, tuple[bytes, ...]] | None] = []
        for demand, own in zip(demands, owns, strict=True):
            verify_demand(demand, obligation=own.obligation, commitment=own.commitment)
            # (5) unexpired obligation
            if expired(own.obligation.statement.serve_until, now_ms):
                raise Expired(
                    f"obligation {own.obligation.digest[:12]}… expired at"
                    f" {own.obligation.statement.serve_until} ms (now {now_ms} ms)"
                )
            packs.append(self._served_whole(demand, own, now_ms) if honest else None)
        # (6) one nonce for a signed batch: the only write before answering
        if not unsigned_ok:
            named = _named_holders(zip(demands, owns, strict=True))
            await self._accept_nonces(demands[:1], now, named)
        items: list[bytes] = []
        answers: list[Answer] = []
        served = 0
        for demand, own, packed in zip(demands, owns, packs, strict=True):
            if packed is not None:  # the hot path: no coroutine, no receipt built
                items.append(packed[0])
                answers.append(Answer(b"", own.commitment_bytes, packed[1]))
                served += 1
                continue
            receipt, sent, hops = await self._answer_item(demand, own, now_ms)
            items.append(receipt if isinstance(receipt, bytes) else receipt_item_bytes(receipt))
            answers.append(Answer(b"", sent, hops))
        if served:
            self.bump(st.CounterName.SERVES, served)
            if log.enabled("info"):  # the fields cost a demand's CPU even when filtered
                for demand, own, answer, packed in zip(demands, owns, answers, packs, strict=True):
                    if packed is not None:
                        log.info(
                            "demand_served",
                            peer=demand.statement.holder,
                            demand=demand.digest[:16],
                            commitment=own.commitment.digest[:16],
                            hops=len(answer.hops),
                        )
        # One signature over every item (an item's own origin, demand, nonce and
        # time are the batch's): contracts.batch.sign_receipt_batch's bytes.
        payload = receipt_batch_payload(
            items, origin=self.node_id, demand=envelope.digest, nonce=batch.nonce, issued_at=now_ms
        )
        first = answers[0]
        answers[0] = Answer(self._receipt_batches.sign(payload), first.commitment, first.hops)
        return answers

    def _whole_in_memory(self, d: Demand, own: _Own, now_ms: int) -> tuple[bytes, ...] | None:
        """The hops of ``own``'s whole fold when ``d`` asks all of it, its bytes are in
        memory (read back under the committed root, see :meth:`_resolve`) and the
        answer rule serves it; None otherwise (a leaf subset, a fold to read from the
        store, a refusal)."""
        if d.leaves is not None:
            return None
        leaves = self._cached_leaves(own.commitment.digest)
        c = own.commitment.statement
        if leaves is None or refusal_for(own.obligation.statement, c, d, leaves, now_ms, c.root):
            return None
        return leaves

    def _served_whole(
        self, demand: Signed[Demand], own: _Own, now_ms: int
    ) -> tuple[bytes, tuple[bytes, ...]] | None:
        """An honest batch item for a whole fold whose bytes are in memory (read back
        under the committed root, see :meth:`_resolve`) and that the answer rule
        serves: its packed item and the hops, not yet counted. None: anything else
        (a leaf subset, a fold to read from the store, a refusal) takes
        :meth:`_answer_item`. The item is the same bytes for every demand for the
        fold (:func:`contracts.batch.served_whole_item`), packed once."""
        leaves = self._whole_in_memory(demand.statement, own, now_ms)
        if leaves is None:
            return None
        commitment = own.commitment
        c = commitment.statement
        key = own.obligation.digest + commitment.digest
        packed = self._served_items.peek(key)
        if packed is None:
            packed = served_whole_item(
                own.obligation.digest, commitment.digest, c.leaf_count, c.root
            )
            self._served_items.put(key, packed)
        return packed, leaves

    def _served_alone(self, demand: Signed[Demand], own: _Own, now_ms: int) -> Answer | None:
        """An honest answer to a lone binary demand for a whole fold whose bytes are in
        memory (read back under the committed root, see :meth:`_resolve`) and that the
        answer rule serves: its receipt signed from the fold's template
        (:class:`contracts.serve.WholeFoldReceipts`, the bytes :func:`answer_demand`
        signs), counted and logged. None: anything else takes :meth:`_answer`."""
        if demand.envelope.payload_type != DEMAND_BINARY_TYPE:
            return None
        leaves = self._whole_in_memory(demand.statement, own, now_ms)
        if leaves is None:
            return None
        commitment = own.commitment
        key = own.obligation.digest + commitment.digest
        receipts = self._served_receipts.peek(key)
        if receipts is None:
            receipts = WholeFoldReceipts(
                self.identity, obligation=own.obligation, commitment=commitment
            )
            self._served_receipts.put(key, receipts)
        receipt = receipts.sign(demand, now_ms)
        self._log_served(demand, commitment, leaves)
        return Answer(receipt, own.commitment_bytes, leaves)

    async def _answer_item(
        self, demand: Signed[Demand], own: _Own, now_ms: int
    ) -> tuple[Receipt | bytes, bytes, tuple[bytes, ...]]:
        """One fold of a demand batch: its receipt item (unsigned; packed when a whole
        fold is served), the commitment bytes answered against and the hops served —
        as :meth:`_answer` decides them."""
        d = demand.statement
        obligation, commitment = own.obligation, own.commitment
        if type(self.behaviour).answer is not _HONEST_ANSWER:  # a fault may answer instead
            faulty, leaves = await self._fault_answer(demand, own, now_ms)
            if faulty is not None:
                # What the fault signed for this fold, signed again as its batch item.
                item = parse_statement(faulty.receipt, Receipt).statement
                return item, faulty.commitment, faulty.hops
        else:
            leaves = await self._honest_leaves(commitment, now_ms)
        item = batch_receipt_item(
            self.node_id,
            d,
            demand.digest,
            obligation=obligation.statement,
            obligation_digest=obligation.digest,
            commitment=commitment.statement,
            commitment_digest=commitment.digest,
            hops=leaves,
            now=now_ms,
            hops_root=self._verified_root(commitment, leaves),
        )
        hops = self._counted(demand, commitment, item.status, item.reason, leaves)
        return item, own.commitment_bytes, hops

    async def _accept_nonces(
        self, demands: Sequence[Signed[Demand]], now: float, named: Collection[str] = ()
    ) -> None:
        """Replay protection, exact across restarts, without a write per demand.

        ``demands``: those whose holder signature was verified (only they are
        recorded: :func:`_signature_decides`, :mod:`nodes.replay`).

        Invariant: every demand this node ever recorded is dated below the
        durable *replay floor* (``<data_dir>/replay_floor``). Before recording
        a demand dated at or above it, the floor is raised — to the demand's
        time (or now) plus ``REPLAY_FLOOR_LEASE_MS`` — and fsync'd, so the
        write happens about once per lease, not per demand. Within a run every
        accepted nonce is remembered until the demand is stale, so a replay is
        ALREADY_EXISTS. A restarted node rejects demands dated below the floor
        it found on disk with ABORTED (:class:`DemandPredatesRestart`): a
        previous run may have answered them, and the holder simply issues a
        fresh demand.

        A demand dated more than ``FUTURE_SLACK_MS`` ahead of the clock does
        not move that floor (nobody can push it ahead and make a restarted
        node refuse everyone): it raises, durably, a floor of its own holder's
        instead (``FUTURE_NONCES_FILENAME``), and a restarted node answers that
        holder's demands dated at or before it ABORTED. One entry per holder,
        not per demand, so a holder whose clock runs ahead (inside the window)
        is served as often as any. ``named``: holders an obligation of this node's
        names; their floors are reserved, as the configured peers' and the
        operator keys' are, and other holders' floors are never refused
        for room, the lowest-dated folded into one global floor instead
        (:mod:`nodes.future_floors`).
        """
        if not demands:
            return
        now_ms = _ms(now)
        self._prune_nonces(now_ms)
        ahead = now_ms + FUTURE_SLACK_MS
        entries: list[tuple[str, str, int]] = []
        future: list[Signed[Demand]] = []
        latest: int | None = None  # the latest time of a demand not dated ahead
        for demand in demands:  # one pass: checks (again: a concurrent call may have
            d = demand.statement  # claimed the nonce since), and which are dated ahead
            self._refuse_replay(d)
            self._refuse_below_floors(d, demand.digest)
            self._refuse_below_holder_floor(d, demand.digest)
            entries.append((d.holder, d.nonce, d.time))
            if d.time > ahead:
                future.append(demand)
            elif latest is None or d.time > latest:
                latest = d.time
        raises = _future_raises(future) if future else None
        # Claim the nonces before the first await, so a concurrent call with the
        # same nonce sees it; give them back if they cannot be made durable.
        self._nonces.claim(entries)
        try:
            if raises:
                # Dated ahead of our clock: its holder's own floor, made durable, so
                # the node's floor never runs ahead of the clock by more than its lease.
                await self._raise_future_floors(raises, named, now_ms)
            if latest is not None and latest >= self._floor_ms:
                await self._raise_floor(max(latest, now_ms) + REPLAY_FLOOR_LEASE_MS)
        except BaseException:
            self._nonces.release(entries)
            raise

    async def _raise_future_floors(
        self, raises: dict[str, int], named: Collection[str], now_ms: int
    ) -> None:
        """Append the raised holder floors (and the global fold, if open floors are
        evicted for room), fsync'd, before any demand under them is answered; rewrite
        the file once it holds many more lines than live floors."""
        async with self._future_lock:
            table = self._future_floors
            table.prune(now_ms)
            lines, evict = table.plan(raises, {h for h in raises if h in named})
            if not lines:
                return
            await asyncio.to_thread(append_lines, self._future_path, lines)
            table.apply(lines, evict)
            self._future_lines += len(lines)
            if self._future_lines > 2 * len(table) + _FUTURE_FILE_SLACK_LINES:
                live = table.lines()
                await asyncio.to_thread(rewrite_lines, self._future_path, live)
                self._future_lines = len(live)

    async def _raise_floor(self, floor_ms: int) -> None:
        async with self._floor_lock:
            if floor_ms <= self._floor_ms:
                return
            await asyncio.to_thread(_write_floor, self._floor_path, floor_ms)
            self._floor_ms = floor_ms
            self.floor_writes += 1

    def _prune_nonces(self, now_ms: int) -> None:
        self._nonces.prune(now_ms)

    async def _fault_answer(
        self, demand: Signed[Demand], own: _Own, now_ms: int
    ) -> tuple[Answer | None, tuple[bytes, ...] | None]:
        """Under a fault mode: the fault's own answer (counted and logged), or None and
        the fold's leaves when the fault leaves the answer to the honest path."""
        commitment = own.commitment
        resolved: list[tuple[bytes, ...] | None] = []

        async def resolve() -> tuple[bytes, ...] | None:
            # At most once per answer, whoever asks first (a fault or the honest path).
            if not resolved:
                resolved.append(await self._resolve(commitment, now_ms))
            return resolved[0]

        faulty = await self.behaviour.answer(
            demand, own.obligation, commitment, own.commitment_bytes, resolve, now_ms
        )
        if faulty is None:
            return None, await resolve()
        self.bump(st.CounterName.SERVES if faulty.served else st.CounterName.REFUSALS)
        log.info(
            "demand_served" if faulty.served else "demand_not_served",
            peer=demand.statement.holder,
            demand=demand.digest[:16],
            commitment=commitment.digest[:16],
            fault=str(self.fault.mode),
        )
        return faulty.answer, None

    async def _answer(self, demand: Signed[Demand], own: _Own, now: float) -> Answer:
        obligation, commitment = own.obligation, own.commitment
        now_ms = _ms(now)

        if type(self.behaviour).answer is not _HONEST_ANSWER:  # a fault may answer instead
            faulty, leaves = await self._fault_answer(demand, own, now_ms)
            if faulty is not None:
                return faulty
        else:
            leaves = await self._honest_leaves(commitment, now_ms)
        signed = answer_demand(
            self.identity,
            demand,
            obligation=obligation,
            commitment=commitment,
            hops=leaves,
            now=now_ms,
            hops_root=self._verified_root(commitment, leaves),
        )
        r = signed.statement
        served_hops = self._counted(demand, commitment, r.status, r.reason, leaves)
        return Answer(signed.to_bytes(), own.commitment_bytes, served_hops)

    async def _honest_leaves(
        self, commitment: Signed[Commitment], now_ms: int
    ) -> tuple[bytes, ...] | None:
        """The fold's leaves for an honest answer: a fold already read back under its
        root is in memory (see _resolve); only a miss goes to the store."""
        leaves = self._cached_leaves(commitment.digest)
        if leaves is None:
            leaves = await self._resolve(commitment, now_ms)
        return leaves

    def _counted(
        self,
        demand: Signed[Demand],
        commitment: Signed[Commitment],
        status: ReceiptStatus,
        reason: RefusalReason | None,
        leaves: tuple[bytes, ...] | None,
    ) -> tuple[bytes, ...]:
        """One fold's honest answer counted and logged (served or not, naming the
        peer); the hops it serves, none when it refuses."""
        d = demand.statement
        if status is ReceiptStatus.SERVED and leaves is not None:
            served_hops = select_hops(leaves, d.leaves)
            self._log_served(demand, commitment, served_hops)
            return served_hops
        self.bump(st.CounterName.REFUSALS)
        log.info(
            "demand_not_served",
            peer=d.holder,
            demand=demand.digest[:16],
            commitment=commitment.digest[:16],
            status=str(status),
            reason=str(reason),
        )
        return ()

    def _log_served(
        self, demand: Signed[Demand], commitment: Signed[Commitment], hops: tuple[bytes, ...]
    ) -> None:
        """One fold served: counted, and logged naming the peer."""
        self.bump(st.CounterName.SERVES)
        if log.enabled("info"):  # the fields cost a demand's CPU even when filtered
            log.info(
                "demand_served",
                peer=demand.statement.holder,
                demand=demand.digest[:16],
                commitment=commitment.digest[:16],
                hops=len(hops),
            )

    async def _resolve(
        self, commitment: Signed[Commitment], now_ms: int
    ) -> tuple[bytes, ...] | None:
        """The whole fold's stored bytes, or None (then the receipt says why not).

        A FOUND resolution (every leaf present, hashing to the committed root)
        is kept in a bounded cache: those bytes are immutable for the digest.
        Anything else is asked of the store every time, so PENDING turns into
        SERVED as soon as the cold copy lands.
        """
        cached = self._cached_leaves(commitment.digest)
        if cached is not None:
            return cached
        resolution = await self.store.resolve(
            commitment.digest, now_ms=now_ms, root=commitment.statement.root
        )
        if resolution.status is st.ResolveStatus.CORRUPTED:
            # The bytes read miss our own root: handed on (never kept) so the answer
            # rule recomputes their root and refuses STORE_CORRUPTED, signed.
            log.error(
                "store_corrupted",
                commitment=commitment.digest[:16],
                path=str(self.store.path),
                reason=resolution.reason,
            )
            return resolution.damaged
        if not resolution:
            log.info(
                "fold_not_resolved",
                commitment=commitment.digest[:16],
                status=str(resolution.status),
                reason=resolution.reason,
            )
            return None
        leaves = tuple(resolution.leaves)
        self._keep_leaves(commitment.digest, leaves)
        return leaves

    def _verified_root(
        self, commitment: Signed[Commitment], leaves: tuple[bytes, ...] | None
    ) -> str | None:
        """The committed root when ``leaves`` are the bytes kept in memory after the
        store read them back under it (see :meth:`_resolve`); None otherwise, and
        the answer rule hashes them before anything is signed over them."""
        if leaves is not None and self._leaves.peek(commitment.digest) is leaves:
            return commitment.statement.root
        return None

    def _cached_leaves(self, digest: str) -> tuple[bytes, ...] | None:
        """A fold's hop bytes if kept in memory (then most recently used), else None."""
        return self._leaves.get(digest)

    def _keep_leaves(self, digest: str, leaves: tuple[bytes, ...]) -> None:
        """Remember a fold's hop bytes (immutable for its digest), bounded in bytes."""
        if not self._leaves.touch(digest):
            self._leaves.put(digest, leaves)

    async def answer_demand_stream(
        self, demand: bytes, *, max_chunk_bytes: int = 0
    ) -> AsyncIterator[Answer]:
        """One demand, answered as chunks: the first carries receipt + commitment."""
        answers = await self.answer_demands([demand])
        if len(answers) != 1:
            raise MalformedRequest("demand stream: one demand per stream, not a batch")
        (answer,) = answers
        limit = max_chunk_bytes or min(_DEFAULT_CHUNK_BYTES, self.config.max_message_bytes // 2)
        chunk: list[bytes] = []
        size = 0
        first = True
        for hop in answer.hops:
            if chunk and size + len(hop) > limit:
                yield Answer(
                    answer.receipt if first else b"",
                    answer.commitment if first else b"",
                    tuple(chunk),
                )
                first, chunk, size = False, [], 0
            chunk.append(hop)
            size += len(hop)
        yield Answer(
            answer.receipt if first else b"", answer.commitment if first else b"", tuple(chunk)
        )

    # ----------------------------------------------------------------- deliver, hold, forward

    async def deliver(
        self, delivery: Delivery, *, value_digest: str | None = None, by: str | None = None
    ) -> bytes:
        """Verify and hold a delivered value; return our signed delivery receipt.

        ``value_digest`` is ``sha256_hex(delivery.value)`` when the caller has
        already computed it (off the event loop, for a large value). ``by``: the
        key that signed the call (None: an in-process caller), whose account
        the value is held on (:mod:`nodes.held`).
        """
        _check_value_ref(delivery.value_ref)
        if len(delivery.commitments) != len(delivery.obligations):
            raise MalformedRequest(
                f"deliver {delivery.value_ref}: {len(delivery.commitments)} commitments but"
                f" {len(delivery.obligations)} obligations"
            )
        if len(delivery.commitments) > MAX_COMMITMENTS_PER_VALUE:
            raise RequestTooLarge(
                f"deliver {delivery.value_ref}: {len(delivery.commitments)} commitments exceeds"
                f" {MAX_COMMITMENTS_PER_VALUE}"
            )
        if delivery.sender and (
            len(delivery.sender) != 64 or delivery.sender.strip("0123456789abcdef")
        ):
            raise MalformedRequest(f"deliver: sender {delivery.sender!r:.80} is not a node id")
        now = self.clock()
        pairs = [
            verify_delivery(
                self.open_cached(c, Commitment),
                self.open_cached(o, Obligation),
                now=_ms(now),
                holder=self.node_id,
            )
            for c, o in zip(delivery.commitments, delivery.obligations, strict=True)
        ]
        # Verified: keep the statements verbatim (the bytes received, not re-encoded),
        # all pairs in one transaction.
        kept: list[tuple[st.KeptCommitment, st.ObligationRecord]] = []
        for (commitment, obligation), c_bytes, o_bytes in zip(
            pairs, delivery.commitments, delivery.obligations, strict=True
        ):
            if self._kept_pairs.touch((commitment.digest, obligation.digest)):
                continue
            c = commitment.statement
            await self._check_equivocation(commitment)
            kept.append(
                (
                    st.KeptCommitment(
                        commitment.digest,
                        c.origin,
                        c.epoch,
                        c.value_ref,
                        c.fold_seq,
                        c.leaf_count,
                        c.root,
                        c_bytes,
                    ),
                    st.ObligationRecord(
                        obligation.digest,
                        commitment.digest,
                        obligation.statement.serve_until,
                        o_bytes,
                        obligation.statement.origin == self.node_id,
                    ),
                )
            )
        head_folds = await self._verify_head_folds(delivery, _ms(now))
        # custody hook: statements verified and bound to the folds (nodes.custodian)
        custody = custody_folds(delivery.custody, head_folds, now_ms=_ms(now))
        if kept:
            await self.store.put_delivered(kept, now_ms=_ms(now))
            for c_kept, o_kept in kept:
                self._kept_pairs.put((c_kept.digest, o_kept.digest), None)
        first_origin = (
            pairs[0][0].statement.origin
            if pairs
            else head_folds[0].commitment.statement.origin
            if head_folds
            else self.node_id
        )
        sender = delivery.sender or first_origin
        folds = (
            *(
                HeldFold(c, o, c_bytes, o_bytes)
                for (c, o), c_bytes, o_bytes in zip(
                    pairs, delivery.commitments, delivery.obligations, strict=True
                )
            ),
            *head_folds,
        )
        self._hold(
            delivery.value_ref,
            HeldValue(
                Delivery(
                    delivery.value_ref,
                    delivery.value,
                    delivery.commitments,
                    delivery.obligations,
                    sender,
                    delivery.fold_proofs,
                    tuple(dict.fromkeys(f.obligation_bytes for f in head_folds)),
                    tuple(
                        f.fold.custody.note
                        for f in custody
                        if isinstance(f.fold, CustodyFold) and f.fold.custody
                    ),
                ),
                folds,
                custody,
            ),
            by=by,
        )
        # For a head-form fold the obligation digest is the head digest: the
        # signed receipt acknowledges every head this node now holds verified.
        receipt = sign_statement(
            self.identity,
            DeliveryReceipt(
                holder=self.node_id,
                sender=sender,
                value_digest=value_digest or sha256_hex(delivery.value),
                commitments=tuple(f.commitment.digest for f in folds),
                obligations=tuple(f.obligation.digest for f in folds),
                received_at=_ms(now),
            ),
        )
        log.info(
            "value_delivered",
            value_ref=delivery.value_ref,
            commitments=len(pairs),
            sender=sender[:16],
        )
        return receipt.to_bytes()

    async def _verify_head_folds(self, delivery: Delivery, now_ms: int) -> tuple[HeldFold, ...]:
        """Head form: each head's signature once (cached by digest), each fold proof hashed.

        A fold proof naming a head that is neither in the delivery nor verified
        here before is ``NOT_FOUND`` (the sender then sends the head itself).
        Two heads of one (origin, epoch, seq) with different trees are a split
        view: recorded as evidence, the delivery is still accepted.
        """
        if len(delivery.fold_proofs) + len(delivery.commitments) > MAX_COMMITMENTS_PER_VALUE:
            raise RequestTooLarge(
                f"deliver {delivery.value_ref}: {len(delivery.fold_proofs)} fold proofs exceeds"
                f" {MAX_COMMITMENTS_PER_VALUE}"
            )
        if len(delivery.heads) > len(delivery.fold_proofs):
            raise MalformedRequest(
                f"deliver {delivery.value_ref}: {len(delivery.heads)} heads for"
                f" {len(delivery.fold_proofs)} fold proofs"
            )
        heads: dict[str, SignedHead] = {}
        for data in delivery.heads:
            await self.witnessing.admit_head(data, now_ms, self.heads)  # the witness quorum
            known = self.heads.verify(data, now=now_ms)
            heads[known.digest] = known
            await self._check_split_view(known)
        held: list[HeldFold] = []
        for data in delivery.fold_proofs:
            key = sha256_hex(data)
            kept = self._kept_folds.peek(key)
            kept_head = self.heads.get(kept[0]) if kept is not None else None
            if kept is not None and kept_head is not None:
                self.heads.verify(kept_head, now=now_ms)  # still unexpired
                self._kept_folds.touch(key)
                held.append(kept[1])
                continue
            proof = FoldProof.from_bytes(data)
            head = heads.get(proof.head) or self.heads.get(proof.head)
            if head is None:
                raise UnknownCommitment(
                    f"deliver {delivery.value_ref}: fold proof names head {proof.head[:12]}…,"
                    " which this node has not verified; send the head"
                )
            head = self.heads.verify(head, now=now_ms)
            fold = verify_fold(proof, head)
            held_fold = _held_fold(fold, data, head.to_bytes())
            self._kept_folds.put(key, (head.digest, held_fold))
            held.append(held_fold)
        return tuple(held)

    async def _check_split_view(self, head: SignedHead) -> None:
        """Two heads of one compaction slot with different trees: split-view evidence."""
        other = self.heads.conflicting(head)
        if other is None:
            return
        try:
            evidence = split_view_evidence(other, head, reported_at=self.now_ms())
        except ContractError:
            return
        origin = head.statement.origin
        await self.holder.record_evidence(Outcome.SPLIT_VIEW, origin, evidence.to_bytes())
        log.warning("split_view_on_delivery", origin=origin[:16], seq=head.statement.seq)

    async def _check_equivocation(self, commitment: Signed[Commitment]) -> None:
        """Two commitments by one origin for one fold, different roots: record the proof.

        The delivery itself is still accepted (the value is what it is); the
        origin is named by an ``equivocation`` evidence file.
        """
        c = commitment.statement
        for kept in await self.store.commitments_for(c.origin, c.epoch, c.value_ref, c.fold_seq):
            if kept.digest == commitment.digest:
                continue
            other = self.open_cached(kept.envelope, Commitment, signer=c.origin)
            try:
                evidence = equivocation_evidence(other, commitment, reported_at=self.now_ms())
            except ContractError:
                continue
            await self.holder.record_evidence(Outcome.EQUIVOCATION, c.origin, evidence.to_bytes())
            log.warning(
                "equivocation_on_delivery",
                origin=c.origin[:16],
                value_ref=c.value_ref,
                fold_seq=c.fold_seq,
            )
            return

    def _hold(self, value_ref: str, value: HeldValue, *, by: str | None = None) -> None:
        """Keep a held value on ``by``'s account: beyond MAX_HELD_VALUES/BYTES the
        oldest of the key holding the most is evicted, strangers' first, and a
        stranger never evicts a reserved key's value (:mod:`nodes.held`)."""
        self._held.put(
            value_ref, value, _held_size(value), by=by, reserved=self._reserved_deliverer(by)
        )

    def _reserved_deliverer(self, by: str | None) -> bool:
        """In-process callers, this node, its operator keys and its pinned peers."""
        return (
            by is None
            or by == self.node_id
            or by in self.config.operator_keys
            or any(p.node_id == by for p in self.config.peers)
        )

    def _evicted(self, value_ref: str, value: HeldValue) -> None:
        self.bump("held_evicted")
        log.info("held_value_evicted", value_ref=value_ref, peer=value.delivery.sender)

    def held(self, value_ref: str) -> HeldValue:
        value = self._held.get(value_ref)
        if value is None:
            raise UnknownValue(f"no held value {value_ref!r:.80} on node {self.config.name}")
        return value

    async def forward(
        self,
        value_ref: str,
        peer: str,
        *,
        deadline: float | None = None,
        verify_receipt: bool = True,
    ) -> bytes:
        """Deliver a held value unchanged to a peer; return its verified delivery receipt.

        ``verify_receipt=False`` for a caller that discards the receipt (the
        experiment's relays): its fields are still checked, its signature is
        not, and the bytes returned must not be relied on (design, "Verify
        where it carries information").
        """
        held = self.held(value_ref)
        try:
            address = self.config.peer(peer)
        except ValueError as exc:
            raise UnknownPeer(f"forward {value_ref}: {exc}") from exc
        # Not the serve deadline (deadline_ms: what obligations promise for a demand):
        # a delivery costs the peer a check of every statement and a durable write.
        timeout = self._timeout(deadline, DELIVER_TIMEOUT_S)
        outgoing = Delivery(
            held.delivery.value_ref,
            held.delivery.value,
            held.delivery.commitments,
            held.delivery.obligations,
            self.node_id,
            held.delivery.fold_proofs,
            held.delivery.heads,
            held.delivery.custody,
        )
        try:
            data, receipt, _ = await self.send(
                address, outgoing, timeout, signer=self.config.pinned_key(peer)
            )
        except CallFailed as exc:
            # The peer's failure, not ours: never INTERNAL.
            raise PeerUnavailable(f"forward {value_ref}: peer {peer}: {exc}") from exc
        if verify_receipt:
            # What Forward returns is the peer's word that it holds the value: checked.
            verify_parsed(receipt)
        r = receipt.statement
        if (
            r.sender != self.node_id
            or r.value_digest != sha256_hex(held.delivery.value)
            or r.commitments != tuple(f.commitment.digest for f in held.folds)
            or r.obligations != tuple(f.obligation.digest for f in held.folds)
        ):
            raise EncodingError(
                f"forward {value_ref}: peer {peer} acknowledged another sender, value,"
                " commitments or obligations"
            )
        return data

    async def send(
        self, address: str, delivery: Delivery, timeout: float, *, signer: str | None = None
    ) -> tuple[bytes, Signed[DeliveryReceipt], Delivery]:
        """Deliver to ``address``, sending only the digests of heads it acknowledged before.

        Returns the peer's receipt (bytes, parsed and bound to ``signer``, its
        signature **not** verified: :func:`contracts.signed.verify_parsed` it
        before relying on it) and the delivery as sent.

        The peer's signed delivery receipt lists, for a head-form fold, the head
        digest: a head it lists is held verified there, so later deliveries to
        that address carry the fold proof (which names the head) without the
        head. A peer that no longer holds it answers ``NOT_FOUND``; the
        delivery is then repeated once with every head
        (:class:`nodes.elision.HeadElision`).
        """
        return await self._elision.send(
            self.transport.deliver, address, delivery, timeout, signer=signer
        )

    def _timeout(self, deadline: float | None, default: float) -> float:
        if deadline is None:
            return default
        return max(0.0, deadline - time.monotonic())

    # ----------------------------------------------------------------- holder side

    @property
    def holder(self) -> Holder:
        if self._holder is None:
            self._holder = Holder(
                self.identity,
                self.transport,
                evidence_dir=self.config.evidence_path,
                clock=self.clock,
                reasks=self.config.reasks,
                resolve_address=self._resolve_peer,
                on_evidence=self.keep_evidence,
                on_receipt=self.clear_suspicions,
                min_witnesses=self.config.min_witnesses,
                suspected=self._suspected,
            )
        return self._holder

    def _suspected(self, origin: str) -> bool:
        """A suspicion against ``origin`` is stored here (as far as this run knows)."""
        return self._suspects is not None and origin in self._suspects

    def _resolve_peer(self, name_or_address: str) -> str:
        return self.config.peer(name_or_address)

    async def add_checkpoint(self, body: bytes) -> WitnessReply:
        """``Witness.AddCheckpoint``: this node's witness role (nodes.cosigner)."""
        return await self.witnessing.cosigner.add_checkpoint(body)

    async def keep_evidence(self, kind: str, accused: str, body: bytes, path: str) -> None:
        """Store an evidence record (and where its file is) in the node's log.

        A suspicion (``unanswered``) is checked right after against the origin's
        receipts this node checked lately: a rehydration of the same value may
        have been served while this one waited out the deadline, and its receipt
        (issued after the suspected demand) clears it.
        """
        log.info("evidence_recorded", peer=accused, kind=kind, path=path or None)
        await self.store.add_evidence(
            digest=sha256_hex(body),
            kind=kind,
            accused=accused,
            body=body,
            now_ms=self.now_ms(),
            file_path=path,
        )
        if kind in _SUSPICION_KINDS:
            # Suspected once stored, not before: a receipt checked while the write
            # was in flight read the store without it.
            self._suspicions_stored += 1
            if self._suspects is not None:
                self._suspects.add(accused)
            for receipt, demand in tuple(self._recent_receipts.peek(accused) or ()):
                await self.clear_suspicions(accused, receipt, demand, remember=False)

    async def rehydrate(
        self, value_ref: str, witnesses: Sequence[str] = (), *, deadline: float | None = None
    ) -> RehydrationReport:
        """Demand the folded hops of a held value from its origins (nodes.client.Holder)."""
        held = self.held(value_ref)
        if not witnesses:
            witnesses = tuple(p.name for p in self.config.peers)
        if held.custody:  # custody hook: custodians after the origins (nodes.custodian)
            return await rehydrate_with_custody(
                self.holder,
                value_ref,
                held.folds,
                held.custody,
                witnesses=witnesses,
                deadline=deadline,
            )
        report: RehydrationReport = await self.holder.rehydrate(
            value_ref, held.folds, witnesses=witnesses, deadline=deadline
        )
        return report

    async def challenge(
        self,
        *,
        commitment: bytes,
        obligation: bytes,
        demand: bytes,
        origin_address: str,
        deadline: float | None = None,
    ) -> ChallengeResult:
        """Witness: re-issue a demand of our own to the origin; sign what happened."""
        if len(demand) > self.config.max_message_bytes:
            raise RequestTooLarge("challenge: demand too large")
        result: ChallengeResult = await self.holder.witness(
            commitment, obligation, demand, origin_address, deadline=deadline
        )
        return result

    # ----------------------------------------------------------------- attest, evidence

    def reserved_attesters(self) -> frozenset[str]:
        """Attester keys whose attestations use the reserved pool: this node,
        its operator keys, its peers' pinned node ids, and attesters that
        answered this node's own ``Attest.Restore``."""
        keys = {self.identity.node_id, *self.config.operator_keys, *self._asked_attesters}
        keys.update(p.node_id for p in self.config.peers if p.node_id)
        return frozenset(keys)

    def _remember_attesters(self, answer: AttestationAnswer) -> None:
        for issued in answer.issued:
            try:
                attester = open_statement(issued.attestation, Attestation).statement.attester
            except ContractError:
                continue
            self._asked_attesters.put(attester, None)

    async def submit_attestation(self, data: bytes) -> str:
        if len(data) > MAX_ATTESTATION_BYTES:
            raise RequestTooLarge(f"attestation: {len(data)} bytes exceeds {MAX_ATTESTATION_BYTES}")
        attestation = open_statement(data, Attestation)
        a = attestation.statement
        now_ms = self.now_ms()
        if now_ms >= a.expires_at:
            raise Expired(
                f"attestation {attestation.digest[:12]}… expired at {a.expires_at} ms"
                f" (now {now_ms} ms)"
            )
        if a.expires_at - a.issued_at > MAX_ATTESTATION_LIFETIME_MS:
            raise PromiseOutOfRange(
                f"attestation: expires_at {a.expires_at} ms is more than"
                f" {MAX_ATTESTATION_LIFETIME_MS} ms after issued_at ({a.issued_at} ms)"
            )
        reserved = self.reserved_attesters()
        if a.attester not in reserved and a.issued_at > now_ms + DEMAND_WINDOW_S * 1000:
            raise PromiseOutOfRange(
                f"attestation: issued_at {a.issued_at} ms is more than"
                f" {DEMAND_WINDOW_S:g} s after now ({now_ms} ms) for an attester this node"
                " does not know"
            )
        kept = await self.store.keep_attestation(
            digest=attestation.digest,
            value_digest=a.value_digest,
            attester=a.attester,
            expires_at_ms=a.expires_at,
            envelope=data,
            now_ms=now_ms,
            reserved=reserved,
            caps=st.AttestationCaps(
                per_attester=MAX_ATTESTATIONS_PER_ATTESTER,
                reserved_count=MAX_ATTESTATIONS,
                reserved_bytes=MAX_ATTESTATION_POOL_BYTES,
                stranger_count=MAX_STRANGER_ATTESTATIONS,
                stranger_bytes=MAX_STRANGER_ATTESTATION_BYTES,
            ),
        )
        if kept.evicted:
            log.info(
                "attestation_evicted",
                peer=a.attester,
                evicted=kept.evicted,
                pool="stranger",
            )
        return attestation.digest

    async def list_attestations(self, value_digest: str) -> tuple[bytes, ...]:
        """``Attest.List``: what fits one answer, the reserved pool's attestations first
        (strangers may submit any number for any value digest: theirs get what is left)."""
        return await self.store.attestations_for(
            value_digest,
            now_ms=self.now_ms(),
            reserved=self.reserved_attesters(),
            # half a message: room for each envelope's framing, however many there are
            max_bytes=self.config.max_message_bytes // 2,
        )

    # ----------------------------------------------------------------- attest role

    #: This node's attester (:mod:`nodes.attester`), made on first request.
    _attester: Attester | None = None
    #: Its A6 log as a ledger (:mod:`nodes.attest_log`): seqs and repeats from the log.
    _attest_ledger: AttestLedger | None = None

    async def request_attestation(
        self, ask: AttestationAsk, *, caller: str | None = None
    ) -> AttestationAnswer:
        """``Attest.Request``: this node as attester (:class:`nodes.attester.Attester`).

        ``caller`` is the verified signer of a gRPC call (None in-process): an
        operator key, or a holder citing at least one proof and having signed
        the demand of every proof it cites (:class:`nodes.auth.PermissionDenied`
        otherwise); a holder's ``issued_at`` (0: now) must be within
        ``DEMAND_WINDOW_S`` of this node's clock (:class:`PromiseOutOfRange`).
        An operator speaks for the attester and may date it as it likes.
        """
        ask.check()  # bounds first: the caller check below costs a signature per proof
        if caller is not None and caller not in self.config.operator_keys:
            check_attest_caller(ask, caller, self.config.name)
            check_attest_issue_time(ask, self.now_ms(), DEMAND_WINDOW_S)
        if self._attester is None:
            self._attester = Attester(self, self.config.attest_fault)
        return await self._attester.request(ask)

    async def log_attestations(
        self, signed: Sequence[Signed[Attestation]]
    ) -> tuple[LoggedAttestation, ...]:
        """A6: one hop per new attestation in this node's log, committed as one
        fold; a repeat is answered from the log (:class:`nodes.attest_log.AttestLedger`)."""
        if self._attest_ledger is None:
            self._attest_ledger = AttestLedger(self)
        return await self._attest_ledger.log(signed)

    async def demand_leaf0(self, proof: RehydrationProof) -> RehydrationProof | None:
        """A demand of leaf 0 only under ``proof``'s fold, answered by its origin
        (the ``partial_receipts`` attester's proof); None if not served."""
        obligation, demand = leaf0_demand(self.identity, proof, self.now_ms())
        try:
            answers = await self.transport.demand(
                obligation.statement.endpoints[0],
                [demand],
                obligation.statement.deadline_ms / 1000.0,
            )
        except (CallFailed, IndexError):
            return None
        if not answers or not answers[0].receipt:
            return None
        return RehydrationProof(
            proof.commitment,
            proof.obligation,
            Envelope.from_bytes(demand),
            Envelope.from_bytes(answers[0].receipt),
            answers[0].hops,
            proof.fold,
        )

    async def restore(
        self,
        ask: AttestationAsk,
        folds: Sequence[FoldBytes],
        attester: str,
        *,
        deadline: float | None = None,
    ) -> RestoreResult:
        """``Attest.Restore``: this node as holder (:func:`nodes.attester.restore`);
        ``attester`` is a peer name or host:port."""
        ask.check()
        address = self.config.peer(attester)
        result = await restore_value(
            self.identity,
            self.transport,
            now_ms=self.now_ms(),
            folds=folds,
            ask=ask,
            attester=address,
            timeout=self._timeout(deadline, 30.0),
        )
        self._remember_attesters(result.answer)
        return result

    async def report_evidence(self, data: bytes) -> tuple[str, str, str]:
        """Accept evidence only if it verifies with the accused origin's own key.

        A suspicion (``unanswered``) is accepted only with the witness
        confirmations this node's policy requires (``min_witnesses``).
        """
        verdict = verify_evidence(data, now=self.now_ms(), min_witnesses=self.config.min_witnesses)
        if not verdict.accuses:
            raise NotEvidence(
                f"evidence against {verdict.accused[:16]}… was cleared: {verdict.reason}"
            )
        if verdict.level is EvidenceLevel.SUSPICION and (
            verdict.status is not EvidenceStatus.WITNESS_CONFIRMED
        ):
            raise NotEvidence(
                f"unanswered suspicion against {verdict.accused[:16]}… has"
                f" {len(verdict.witnesses)} of {self.config.min_witnesses} witness"
                " confirmation(s) this node requires; not stored"
            )
        kind, accused = verdict.kind.value, verdict.accused
        digest = sha256_hex(data)
        await self.store.add_evidence(
            digest=digest, kind=kind, accused=accused, body=data, now_ms=self.now_ms()
        )
        if self._suspects is not None and kind == "unanswered":
            self._suspects.add(accused)
        log.info("evidence_reported", peer=accused, kind=kind, digest=digest[:16])
        return kind, accused, digest

    async def _suspected_origins(self) -> set[str]:
        """Origins any stored suspicion (cleared or not) names: read when first needed."""
        return {
            r.accused for kind in _SUSPICION_KINDS for r in await self.store.evidence(kind=kind)
        }

    async def standing_suspicions(self) -> tuple[st.EvidenceRecord, ...]:
        """Stored suspicions not cleared yet, of every origin suspected (nodes.retest);
        no store read while nothing is suspected."""
        stored = self._suspicions_stored
        suspects = self._suspects
        if suspects is None:
            suspects = await self._suspected_origins()
            if stored == self._suspicions_stored and self._suspects is None:
                self._suspects = suspects
        records: list[st.EvidenceRecord] = []
        for origin in tuple(suspects):
            records += await self.store.uncleared_suspicions(origin)
        return tuple(records)

    async def clear_suspicions(
        self, origin: str, receipt: bytes, demand: bytes = b"", *, remember: bool = True
    ) -> int:
        """Mark stored suspicions against ``origin`` cleared by a later receipt of it.

        Each stored ``unanswered`` record is checked with
        :func:`contracts.evidence.verify_clearing`: the receipt, signed by the
        origin for the same obligation, answers ``demand`` (this node's, dated at
        or after the suspected demand on this node's clock; skew between the
        two clocks does not enter), or else is issued at or after the suspected
        demand by the origin's clock. The receipt is kept beside the record (and
        beside its file, with the demand when that decided), so a third party can
        check the clearing with ``provnet evidence verify FILE --cleared-by``.
        """
        if remember:  # kept for a suspicion stored after it (keep_evidence)
            recent = self._recent_receipts.get(origin)
            if recent is None:
                recent = deque(maxlen=_RECENT_RECEIPTS)
                self._recent_receipts.put(origin, recent)
            recent.append((receipt, demand))
        # A suspicion stored while this call reads the store is not in what it
        # read; it is checked against this receipt once stored (keep_evidence).
        stored = self._suspicions_stored
        suspects = self._suspects
        if suspects is None:
            suspects = await self._suspected_origins()
            if stored == self._suspicions_stored and self._suspects is None:
                self._suspects = suspects
        if origin not in suspects:
            return 0  # the hot path: nothing suspected of this origin
        cleared = settled = 0
        records = await self.store.uncleared_suspicions(origin)
        for record in records:
            answering = _clearing_demand(record.body, receipt, demand, self.now_ms() + 3_600_000)
            if answering is None:
                continue
            settled += 1
            if not await self.store.mark_cleared(
                record.digest, receipt=receipt, now_ms=self.now_ms()
            ):
                continue  # cleared meanwhile by another receipt
            cleared += 1
            if record.file_path:
                with contextlib.suppress(OSError):
                    Path(record.file_path + ".cleared-by").write_bytes(receipt)
                    if answering:
                        Path(record.file_path + ".cleared-by-demand").write_bytes(answering)
            log.info(
                "suspicion_cleared",
                peer=origin,
                evidence=record.digest[:16],
                receipt=sha256_hex(receipt)[:16],
            )
        if settled == len(records) and stored == self._suspicions_stored:
            suspects.discard(origin)  # nothing stands against it (its folds may be cached)
        return cleared


def _clearing_demand(body: bytes, receipt: bytes, demand: bytes, now: int) -> bytes | None:
    """How ``receipt`` clears the record ``body``: the demand it answers (the rule
    that holds whatever the clocks read), ``b""`` by the receipt alone, or None if
    it does not clear it (:func:`contracts.evidence.verify_clearing`)."""
    if demand:
        with contextlib.suppress(ContractError, ValueError):
            verify_clearing(body, receipt, now=now, demand=demand)
            return demand
    try:
        verify_clearing(body, receipt, now=now)
    except (ContractError, ValueError):
        return None
    return b""
