"""Signed tree heads (design revision 2): one signature per compaction.

Layout — the choice design revision 2 leaves to the implementer:

* **One RFC 6962 tree per compaction** over its *fold records*: one leaf per
  fold the compaction made (one per value it compacted). A fold record
  (:class:`FoldRecord`) names ``value_ref``, ``fold_seq``, ``leaf_count``,
  the RFC 6962 ``root`` over the fold's hop bytes, and ``prev``, the leaf
  hash of the same value's previous fold record (``None`` for its first).
* **The compactions of an epoch form a log of heads**: leaf ``k`` of that
  log is the batch record ``(size, root)`` of compaction ``k``
  (:func:`batch_record`), and head ``k`` signs the log's root at size
  ``k + 1`` (``log_root``). A later head proves that it extends an earlier
  one with an RFC 6962 consistency proof; two heads that no consistency proof
  reconciles are a split view (:func:`contracts.evidence.split_view_evidence`).
* **The serving terms** (``serve_until``, ``deadline_ms``, ``endpoints``) are
  signed in the head, once for every fold under it.

Why this layout: a value carries *one* fold proof per origin — its latest
fold record with the audit path in that compaction's tree — because ``prev``
chains the record to every earlier fold of the value (:attr:`FoldProof.chain`
proves an earlier one when it is rehydrated). The bytes a value carries are
therefore independent of how many folds it has, and its audit path grows with
the number of values folded by one compaction, not with the epoch. One tree
over the whole epoch would make every value carry ``log2(folds in the
epoch)`` hashes.

What is signed: only the :class:`~contracts.statements.Head`, as a C2SP
tlog-checkpoint signed note (:mod:`contracts.head_note`: the log of heads is
the checkpoint's tree, the compaction's tree and the serving terms its
extension lines). Fold records are leaf data (the record layout of
:mod:`contracts.fold_layout`, hashed ``SHA-256(0x00 ‖ bytes)``); fold proofs
(the proof layout there) and consistency paths are unsigned and verify
against a signed root.

Holder side: :class:`HeadCache` verifies a head's signature once and keeps
it by digest, the SHA-256 of its note text (a receiver that already verified
a head gets only its digest); :func:`verify_fold` proves a fold record under a head with no
signature at all. A :class:`VerifiedFold` stands in for the per-fold
commitment and obligation (:attr:`VerifiedFold.commitment`,
:attr:`VerifiedFold.obligation`), so demands, receipts and evidence keep
their meaning: a demand's ``obligation`` is the head digest and its
``commitment`` the fold record's leaf hash.

Origin side: :class:`HeadLog` (pure, in memory; the caller persists) builds
the records, the tree, the head and every fold proof of a compaction, and the
consistency paths between its heads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from contracts._fields import MAX_COUNT, is_digest
from contracts._lru import BoundedCache
from contracts.canonical import canonical_bytes, format_ms
from contracts.envelope import Envelope
from contracts.errors import (
    BindingMismatch,
    DigestMismatch,
    EncodingError,
    Expired,
    RootMismatch,
)
from contracts.fold_layout import PROOF_LAYOUT, RECORD_LAYOUT, decode, encode
from contracts.head_note import SignedHead, head_digest, open_head, sign_head
from contracts.identity import Identity
from contracts.merkle import (
    FoldRoots,
    MerkleTree,
    leaf_hash,
    merkle_root,
    verify_inclusion,
)
from contracts.note import decode_canonical_base64, encode_base64
from contracts.rules import expired
from contracts.signed import Signed
from contracts.statements import Commitment, Head, Obligation

__all__ = [
    "FOLD_RECORD_TYPE",
    "HEAD_TEXT_TYPE",
    "MAX_CHAIN",
    "Compaction",
    "FoldInput",
    "FoldProof",
    "FoldRecord",
    "HeadCache",
    "HeadLog",
    "VerifiedFold",
    "batch_record",
    "build_head",
    "verify_fold",
]

#: Payload type of the unsigned stand-in envelope of a fold record (never on the wire).
FOLD_RECORD_TYPE = "application/vnd.provnet.fold-record"
#: Payload type of the unsigned stand-in envelope of a head read as a fold's obligation:
#: its payload is the head's note text, so its digest is the head's (never on the wire).
HEAD_TEXT_TYPE = "application/vnd.provnet.head-text"
#: Most earlier fold records one proof may chain back through.
MAX_CHAIN = 4096
_MAX_PATH = 64
_MAX_PROOF_TEXT = 4 * (MAX_CHAIN + 1) * 1200 // 3

HeadInput = bytes | SignedHead


@dataclass(frozen=True, slots=True)
class FoldRecord:
    """One fold, as a leaf of its compaction's tree.

    Leaf data: the fold record layout of :mod:`contracts.fold_layout` (these
    bytes travel with every delivered value, are stored and cited as they
    are). ``root`` is the RFC 6962 root over the fold's hop bytes; ``prev``
    the hex leaf hash of the value's previous fold record.
    """

    value_ref: str
    fold_seq: int
    leaf_count: int
    root: str
    prev: str | None = None

    def __post_init__(self) -> None:
        if not is_digest(self.root):
            raise ValueError(f"fold record root must be a hex SHA-256, got {self.root!r:.80}")
        if self.prev is not None and not is_digest(self.prev):
            raise ValueError(f"fold record prev must be a hex SHA-256, got {self.prev!r:.80}")
        if not 0 <= self.fold_seq <= MAX_COUNT or not 0 <= self.leaf_count <= MAX_COUNT:
            raise ValueError("fold record fold_seq and leaf_count must be counts")
        if len(self.value_ref.encode("utf-8")) > 1024:
            raise ValueError("fold record value_ref longer than 1024 bytes")

    def to_bytes(self) -> bytes:
        """The leaf data (:data:`contracts.fold_layout.RECORD_LAYOUT`)."""
        return encode(
            RECORD_LAYOUT,
            {
                "prev": None if self.prev is None else bytes.fromhex(self.prev),
                "fold_seq": self.fold_seq,
                "leaf_count": self.leaf_count,
                "root": bytes.fromhex(self.root),
                "value_ref": self.value_ref,
            },
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> FoldRecord:
        """Strict parse of the leaf data; :class:`EncodingError` names the part."""
        v = decode(RECORD_LAYOUT, data, "fold record")
        try:
            return cls(
                value_ref=v["value_ref"],
                fold_seq=v["fold_seq"],
                leaf_count=v["leaf_count"],
                root=v["root"].hex(),
                prev=None if v["prev"] is None else v["prev"].hex(),
            )
        except ValueError as exc:
            raise EncodingError(f"fold record: {exc}") from exc


def batch_record(size: int, root: str) -> bytes:
    """Leaf data of a compaction in its epoch's log of heads: RFC 8785 ``{"root", "size"}``."""
    return canonical_bytes({"root": root, "size": size})


@dataclass(frozen=True, slots=True)
class FoldProof:
    """A fold record proven under a head: what a delivered value carries per origin.

    ``record`` (leaf data) is leaf ``index`` of the tree of head ``head``
    (digest), with audit path ``path``. ``chain`` lists earlier fold records
    of the same value, newest first, each the ``prev`` of the one before; the
    fold proven is the last of the chain (or ``record`` when it is empty).
    Unsigned: it is verified against the head's signed root.

    One encoding (:data:`contracts.fold_layout.PROOF_LAYOUT`): :meth:`to_bytes`
    is what a delivery carries, the store keeps and evidence and attestations
    cite (in base64, :meth:`to_text`). Its records are inside it verbatim.
    """

    head: str
    index: int
    path: tuple[bytes, ...]
    record: bytes
    chain: tuple[bytes, ...] = ()

    def __post_init__(self) -> None:
        if not is_digest(self.head):
            raise ValueError("fold proof: head must be a head digest (64 lower-case hex)")
        if not 0 <= self.index < MAX_COUNT:
            raise ValueError("fold proof: index must be a leaf index")
        if len(self.chain) > MAX_CHAIN or len(self.path) > _MAX_PATH:
            raise ValueError(f"fold proof: at most {MAX_CHAIN} chained records, {_MAX_PATH} hashes")

    @property
    def target(self) -> bytes:
        """Leaf data of the fold this proof proves."""
        return self.chain[-1] if self.chain else self.record

    def to_bytes(self) -> bytes:
        return encode(
            PROOF_LAYOUT,
            {
                "head": bytes.fromhex(self.head),
                "index": self.index,
                "record": self.record,
                "chain": self.chain,
                "path": self.path,
            },
        )

    def to_text(self) -> str:
        """The proof's bytes in standard base64: how JSON files cite it."""
        return encode_base64(self.to_bytes())

    @classmethod
    def from_bytes(cls, data: bytes) -> FoldProof:
        """Strict parse; its records are kept as the bytes they were read from."""
        v = decode(PROOF_LAYOUT, data, "fold proof")
        try:
            return cls(v["head"].hex(), v["index"], v["path"], v["record"], v["chain"])
        except ValueError as exc:
            raise EncodingError(str(exc)) from exc

    @classmethod
    def from_text(cls, text: object) -> FoldProof:
        """A proof cited in a JSON file: its bytes in standard base64 (:meth:`to_text`).
        The JSON object form of earlier files is refused by name."""
        if isinstance(text, dict):
            raise EncodingError(
                "fold proof: a JSON object is the earlier JSON form of a fold proof, not read;"
                " this version cites a fold proof as base64 of its bytes"
            )
        if type(text) is not str or len(text) > _MAX_PROOF_TEXT:
            raise EncodingError("fold proof: expected base64 of the fold proof's bytes")
        return cls.from_bytes(decode_canonical_base64(text, "fold proof"))


@dataclass(frozen=True, slots=True)
class VerifiedFold:
    """A fold record proven under a verified head.

    :attr:`commitment` and :attr:`obligation` stand in for the per-fold
    statements wherever those are expected (demands, receipts, evidence):

    * the commitment's digest is the fold record's RFC 6962 leaf hash (its
      envelope is unsigned, payload ``0x00 ‖ record``, so that ``digest`` is
      that leaf hash; it never goes on the wire: the head vouches for it);
    * the obligation is the head itself read as this fold's obligation: its
      digest is the head digest (its envelope is unsigned, payload the head's
      note text; it never goes on the wire either: :attr:`head` is the head).
    """

    head: SignedHead
    proof: FoldProof
    record: FoldRecord
    leaf_hash: bytes
    # Memoised stand-ins: every demand for the fold reads them.
    _commitment: Signed[Commitment] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    _obligation: Signed[Obligation] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    @property
    def commitment(self) -> Signed[Commitment]:
        if self._commitment is None:
            object.__setattr__(self, "_commitment", self._make_commitment())
        return self._commitment  # type: ignore[return-value]

    @property
    def obligation(self) -> Signed[Obligation]:
        if self._obligation is None:
            object.__setattr__(self, "_obligation", self._make_obligation())
        return self._obligation  # type: ignore[return-value]

    def _make_commitment(self) -> Signed[Commitment]:
        h, r = self.head.statement, self.record
        statement = Commitment(
            origin=h.origin,
            epoch=h.epoch,
            value_ref=r.value_ref,
            fold_seq=r.fold_seq,
            leaf_count=r.leaf_count,
            root=r.root,
            issued_at=h.issued_at,
            provenance_pending=h.pending,
        )
        envelope = Envelope(b"\x00" + self.proof.target, FOLD_RECORD_TYPE, ())
        return Signed(envelope, statement)

    def _make_obligation(self) -> Signed[Obligation]:
        h = self.head.statement
        statement = Obligation(
            origin=h.origin,
            commitment=self.leaf_hash.hex(),
            serve_until=h.serve_until,
            deadline_ms=h.deadline_ms,
            endpoints=h.endpoints,
            issued_at=h.issued_at,
        )
        return Signed(Envelope(self.head.text, HEAD_TEXT_TYPE, ()), statement)


def verify_fold(proof: FoldProof | bytes, head: SignedHead) -> VerifiedFold:
    """Prove a fold record under an (already verified) head; no signature is checked.

    Raises :class:`BindingMismatch` when the proof names another head or the
    chain is broken, :class:`RootMismatch` when the path misses the head's
    root, :class:`EncodingError` for malformed input.
    """
    p = proof if isinstance(proof, FoldProof) else FoldProof.from_bytes(proof)
    # (1) the proof is for this head
    if p.head != head.digest:
        raise BindingMismatch(f"fold proof names head {p.head[:12]}…, not {head.digest[:12]}…")
    # (2) the record is leaf ``index`` of the head's tree
    record = FoldRecord.from_bytes(p.record)
    h = leaf_hash(p.record)
    try:
        verify_inclusion(
            h, p.index, head.statement.size, p.path, bytes.fromhex(head.statement.root)
        )
    except RootMismatch as exc:
        raise RootMismatch(
            f"fold record of {record.value_ref!r:.60} under head {head.digest[:12]}…: {exc}"
        ) from exc
    # (3) each chained record is the ``prev`` of the one before
    for i, data in enumerate(p.chain):
        earlier = FoldRecord.from_bytes(data)
        if record.prev != leaf_hash(data).hex():
            raise BindingMismatch(
                f"fold proof chain[{i}] is not the record before fold {record.fold_seq}"
                f" of {record.value_ref!r:.60}"
            )
        if earlier.value_ref != record.value_ref or earlier.fold_seq >= record.fold_seq:
            raise BindingMismatch(f"fold proof chain[{i}] is not an earlier fold of the same value")
        record, h = earlier, leaf_hash(data)
    return VerifiedFold(head=head, proof=p, record=record, leaf_hash=h)


class HeadCache:
    """Heads this holder verified, by digest: each head's signature is checked once.

    Pure: a plain object the caller owns (no I/O, no clock; ``now`` is an
    argument). ``signature_checks`` counts the Ed25519 verifications made.
    Expiry is checked on every use (it costs no signature).
    """

    def __init__(self, capacity: int = 4096) -> None:
        if capacity <= 0:
            raise ValueError("capacity must be positive")
        # oldest verified first out (a hit does not refresh: a head's signature is
        # checked once while cached, and which head stays longest does not matter)
        self._heads: BoundedCache[str, SignedHead] = BoundedCache(capacity, on_evict=self._forget)
        self._by_key: dict[tuple[str, str, int], SignedHead] = {}
        self.signature_checks = 0

    def __len__(self) -> int:
        return len(self._heads)

    def __contains__(self, digest: object) -> bool:
        return digest in self._heads

    def get(self, digest: str) -> SignedHead | None:
        return self._heads.peek(digest)

    def verify(self, head: HeadInput, *, now: int, origin: str | None = None) -> SignedHead:
        """The verified head (from the cache when its digest is known); unexpired at ``now``.

        A head's digest covers its note text, so a copy with other signature
        lines (a witness's cosignature) is the same head; such a copy is
        verified as it came before it is returned.
        """
        digest = head.digest if isinstance(head, SignedHead) else head_digest(head)
        signed = self._heads.peek(digest)
        if signed is not None and not isinstance(head, SignedHead) and head != signed.note:
            # The same text under other signature lines: those bytes are what the
            # caller keeps and passes on, so they are verified as they came.
            signed = None
        if signed is None:
            # (1) signed by the origin it names — once per head
            signed = open_head(head.note if isinstance(head, SignedHead) else head, origin=origin)
            self.signature_checks += 1
            self._remember(signed)
        elif origin is not None and signed.statement.origin != origin:
            raise BindingMismatch(f"head {signed.digest[:12]}… is not by origin {origin[:16]}…")
        # (2) unexpired
        h = signed.statement
        if expired(h.serve_until, now):
            raise Expired(
                f"head {signed.digest[:12]}… expired at {format_ms(h.serve_until)}"
                f" (now {format_ms(now)})"
            )
        return signed

    def verify_fold(
        self,
        proof: FoldProof | bytes,
        *,
        now: int,
        head: HeadInput | None = None,
        origin: str | None = None,
    ) -> VerifiedFold:
        """A fold proof under ``head`` (bytes on first delivery) or under a cached head.

        With ``head=None`` the proof's head digest must name a head verified
        before (:class:`DigestMismatch` otherwise: ask for the head).
        """
        p = proof if isinstance(proof, FoldProof) else FoldProof.from_bytes(proof)
        if head is None:
            cached = self._heads.peek(p.head)
            if cached is None:
                raise DigestMismatch(f"fold proof names head {p.head[:12]}…, not verified here")
            head = cached
        return verify_fold(p, self.verify(head, now=now, origin=origin))

    def conflicting(self, head: SignedHead) -> SignedHead | None:
        """A cached head of the same (origin, epoch, seq) that says another tree, if any."""
        other = self._by_key.get(head.statement.log_key)
        if other is None or other.statement.tree == head.statement.tree:
            return None
        return other

    def _remember(self, signed: SignedHead) -> None:
        self._by_key.setdefault(signed.statement.log_key, signed)
        self._heads.put(signed.digest, signed)

    def _forget(self, _digest: str, old: SignedHead) -> None:
        """The index of a head evicted from the cache."""
        if self._by_key.get(old.statement.log_key) is old:
            del self._by_key[old.statement.log_key]


# ----------------------------------------------------------------- origin side


@dataclass(frozen=True, slots=True)
class FoldInput:
    """One fold of a compaction: a value's hops moved out of view, in fold order."""

    value_ref: str
    fold_seq: int
    hops: Sequence[bytes]


@dataclass(frozen=True, slots=True)
class Compaction:
    """What one compaction produced: the signed head and one fold proof per value."""

    head: SignedHead
    records: tuple[bytes, ...]
    proofs: Mapping[str, FoldProof]


def build_head(
    identity: Identity,
    *,
    epoch: str,
    seq: int,
    records: Sequence[bytes],
    log_root: bytes,
    serve_until: int,
    deadline_ms: int,
    endpoints: Sequence[str],
    issued_at: int,
    pending: bool = False,
) -> SignedHead:
    """Sign the head of compaction ``seq`` over its fold records (leaf data, in order).

    S6: sign only once the hops are durable, or pass ``pending=True``.
    """
    statement = Head(
        origin=identity.node_id,
        epoch=epoch,
        seq=seq,
        size=len(records),
        root=merkle_root(records).hex(),
        log_root=log_root.hex(),
        serve_until=serve_until,
        deadline_ms=deadline_ms,
        endpoints=tuple(endpoints),
        issued_at=issued_at,
        pending=pending,
    )
    return sign_head(identity, statement)


@dataclass
class _ValueFolds:
    records: list[bytes] = field(default_factory=list)
    heads: list[str] = field(default_factory=list)


class HeadLog:
    """An origin's log of heads for one epoch (pure, in memory; the caller persists).

    :meth:`compact` makes one signature per compaction however many values
    and folds it covers. ``batches`` restores the batch records of earlier
    compactions, ``last_folds`` each value's last fold record (leaf data).
    """

    def __init__(
        self,
        identity: Identity,
        epoch: str,
        *,
        batches: Sequence[bytes] = (),
        last_folds: Mapping[str, bytes] | None = None,
    ) -> None:
        self._identity = identity
        self.epoch = epoch
        self._batches = [leaf_hash(b) for b in batches]
        self._last = {v: leaf_hash(r).hex() for v, r in (last_folds or {}).items()}
        self._values: dict[str, _ValueFolds] = {}
        self._trees: dict[str, tuple[SignedHead, MerkleTree, tuple[bytes, ...]]] = {}
        # A value's folds are cumulative (each covers the hops of the one before
        # and more): its record roots are computed incrementally, same bytes.
        self._fold_roots = FoldRoots()
        self.heads: list[SignedHead] = []

    @property
    def size(self) -> int:
        """Compactions in the log so far (the next head's ``seq``)."""
        return len(self._batches)

    def compact(
        self,
        folds: Sequence[FoldInput],
        *,
        serve_until: int,
        deadline_ms: int,
        endpoints: Sequence[str],
        issued_at: int,
        pending: bool = False,
    ) -> Compaction:
        """Record one compaction's folds and sign its head (one signature)."""
        if not folds:
            raise ValueError("a compaction folds at least one value")
        if len({f.value_ref for f in folds}) != len(folds):
            raise ValueError("a compaction makes at most one fold per value")
        records = tuple(
            FoldRecord(
                value_ref=f.value_ref,
                fold_seq=f.fold_seq,
                leaf_count=len(f.hops),
                root=self._fold_roots.root(f.hops).hex(),
                prev=self._last.get(f.value_ref),
            ).to_bytes()
            for f in folds
        )
        tree = MerkleTree.from_leaves(records)
        seq = len(self._batches)
        batches = [*self._batches, leaf_hash(batch_record(tree.size, tree.root.hex()))]
        head = build_head(
            self._identity,
            epoch=self.epoch,
            seq=seq,
            records=records,
            log_root=MerkleTree(batches).root,
            serve_until=serve_until,
            deadline_ms=deadline_ms,
            endpoints=endpoints,
            issued_at=issued_at,
            pending=pending,
        )
        self._batches = batches
        self.heads.append(head)
        self._trees[head.digest] = (head, tree, records)
        proofs: dict[str, FoldProof] = {}
        for index, (f, record) in enumerate(zip(folds, records, strict=True)):
            self._last[f.value_ref] = leaf_hash(record).hex()
            folds_of = self._values.setdefault(f.value_ref, _ValueFolds())
            folds_of.records.append(record)
            folds_of.heads.append(head.digest)
            proofs[f.value_ref] = FoldProof(head.digest, index, tree.proof(index), record)
        return Compaction(head=head, records=records, proofs=proofs)

    def fold_proof(self, value_ref: str, *, back: int = 0) -> FoldProof:
        """The value's latest fold proof, chained ``back`` folds further (0: the latest)."""
        folds = self._values.get(value_ref)
        if folds is None or not 0 <= back < len(folds.records):
            raise KeyError(f"no fold {back} back of value {value_ref!r:.60} in this log")
        head, tree, records = self._trees[folds.heads[-1]]
        index = records.index(folds.records[-1])
        chain = tuple(reversed(folds.records[len(folds.records) - 1 - back : -1]))
        return FoldProof(head.digest, index, tree.proof(index), folds.records[-1], chain)

    def consistency_path(self, first_seq: int, second_seq: int) -> tuple[bytes, ...]:
        """Path proving head ``second_seq`` extends head ``first_seq`` (seeded form).

        The RFC 6962 consistency proof between log sizes ``first_seq + 1`` and
        ``second_seq + 1``, after step 2 of RFC 9162 §2.1.4.2: it always starts
        with the first log's root when that size is a power of two, so the path
        alone determines both roots (:func:`contracts.merkle.consistency_roots`).
        """
        first, second = first_seq + 1, second_seq + 1
        if not 0 < first < second <= len(self._batches):
            raise ValueError(f"no consistency path from head {first_seq} to {second_seq}")
        tree = MerkleTree(self._batches[:second])
        proof = tree.consistency(first)
        if first & (first - 1) == 0:
            return (tree.root_at(first), *proof)
        return proof
