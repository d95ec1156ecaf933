"""The serve contract (S1–S7): building and checking commitments,
obligations, demands and receipts.

Origin side: :func:`build_commitment`, :func:`build_obligation`,
:func:`verify_demand` (an incoming demand), :func:`answer_demand` (the
receipt a correct origin gives, including the legitimate refusals).

Holder side: :func:`verify_delivery` (commitment + obligation handed over
with a value), :func:`build_demand`, :func:`verify_served` (a SERVED receipt
plus the hop bytes that came with it: one Ed25519 verification and the
Merkle root — no per-hop signatures).

Who is to blame when :func:`verify_served` fails matters (S8):

* failures on signed data (leaf hashes that miss the committed root, wrong
  tree size, leaves not demanded) are the origin's — :class:`RootMismatch`
  and :class:`BindingMismatch` raised *after* the signature check, and
  :func:`contracts.evidence.judge_answer` turns them into ``bad_data``;
* hop bytes that do not hash to their *signed* leaf hash were altered after
  signing (:class:`DigestMismatch`): nobody can prove who did it, so it is
  never evidence against the origin.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from contracts._answer_rule import refusal_for
from contracts._lru import BoundedCache
from contracts.canonical import format_ms
from contracts.entropy import random_bytes
from contracts.envelope import Envelope
from contracts.errors import (
    BindingMismatch,
    CheckResult,
    DigestMismatch,
    EncodingError,
    Expired,
    NotAuthorized,
    NotServed,
    ReplayedNonce,
    RootMismatch,
    run_check,
)
from contracts.identity import Identity
from contracts.merkle import (
    MerkleTree,
    leaf_hashes,
    merkle_root,
    root_from_inclusion,
)
from contracts.rules import expired
from contracts.signed import Signed, open_statement, sign_statement
from contracts.statements import (
    Commitment,
    DeliveryReceipt,
    Demand,
    Obligation,
    Receipt,
    ReceiptStatus,
    RefusalReason,
    WitnessOutcome,
    WitnessReport,
)

__all__ = [
    "NonceRegistry",
    "ServedFold",
    "answer_demand",
    "build_commitment",
    "build_delivery_receipt",
    "build_demand",
    "build_obligation",
    "build_witness_report",
    "check_delivery",
    "check_demand",
    "check_served",
    "eviction_blockers",
    "new_nonce",
    "refusal_for",
    "sign_served",
    "verify_delivery",
    "verify_demand",
    "verify_receipt_binding",
    "verify_served",
    "verify_served_bytes",
    "verify_signed_leaves",
]

EnvelopeInput = bytes | Envelope | dict[str, Any]


def new_nonce() -> str:
    """A fresh 128-bit demand nonce (hex), from the OS CSPRNG (:mod:`contracts.entropy`)."""
    return random_bytes(16).hex()


# ---------------------------------------------------------------- origin side


def build_commitment(
    identity: Identity,
    *,
    epoch: str,
    value_ref: str,
    fold_seq: int,
    hops: Sequence[bytes],
    issued_at: int,
    provenance_pending: bool = False,
) -> Signed[Commitment]:
    """Commit to the RFC 6962 root over ``hops`` (canonical hop bytes, fold order).

    S6: call this only once the hops are durable, or pass
    ``provenance_pending=True`` and answer demands PENDING until they are.
    """
    root = merkle_root(hops)
    statement = Commitment(
        origin=identity.node_id,
        epoch=epoch,
        value_ref=value_ref,
        fold_seq=fold_seq,
        leaf_count=len(hops),
        root=root.hex(),
        issued_at=issued_at,
        provenance_pending=provenance_pending,
    )
    return sign_statement(identity, statement)


def build_obligation(
    identity: Identity,
    commitment: Signed[Commitment],
    *,
    serve_until: int,
    deadline_ms: int,
    endpoints: Sequence[str],
    issued_at: int,
    holder: str | None = None,
) -> Signed[Obligation]:
    """The origin's duty to serve ``commitment`` to any bearer (or to ``holder``)."""
    if commitment.statement.origin != identity.node_id:
        raise ValueError("an obligation is issued by the origin of its commitment")
    statement = Obligation(
        origin=identity.node_id,
        commitment=commitment.digest,
        serve_until=serve_until,
        deadline_ms=deadline_ms,
        endpoints=tuple(endpoints),
        issued_at=issued_at,
        holder=holder,
    )
    return sign_statement(identity, statement)


class NonceRegistry:
    """Bounded memory of demand nonces already answered (per origin).

    ``remember`` raises :class:`ReplayedNonce` for a nonce seen before; the
    oldest entries are forgotten beyond ``capacity``.
    """

    def __init__(self, capacity: int = 100_000) -> None:
        if capacity <= 0:
            raise ValueError("capacity must be positive")
        self._seen: BoundedCache[tuple[str, str], None] = BoundedCache(capacity)

    def remember(self, demand: Demand) -> None:
        key = (demand.holder, demand.nonce)
        if key in self._seen:
            raise ReplayedNonce(
                f"demand nonce {demand.nonce[:16]}… from {demand.holder[:16]}… was already used"
            )
        self._seen.put(key, None)


def verify_demand(
    data: EnvelopeInput | Signed[Demand],
    *,
    obligation: Signed[Obligation],
    commitment: Signed[Commitment],
    nonces: NonceRegistry | None = None,
) -> Signed[Demand]:
    """Origin side: an incoming demand is signed by its holder and names our obligation."""
    # (1) signed by the holder it names
    demand = data if isinstance(data, Signed) else open_statement(data, Demand)
    d = demand.statement
    # (2) names this obligation, its commitment and this origin
    if d.obligation != obligation.digest:
        raise BindingMismatch(
            f"demand {demand.digest[:12]}… names obligation {d.obligation[:12]}…,"
            f" not {obligation.digest[:12]}…"
        )
    if d.commitment != commitment.digest or obligation.statement.commitment != commitment.digest:
        raise BindingMismatch(f"demand {demand.digest[:12]}… names another commitment")
    if d.origin != obligation.statement.origin:
        raise BindingMismatch(f"demand {demand.digest[:12]}… is addressed to another origin")
    # (3) leaves exist in the committed fold
    count = commitment.statement.leaf_count
    if d.leaves is not None and d.leaves and d.leaves[-1] >= count:
        raise BindingMismatch(
            f"demand {demand.digest[:12]}… asks for leaf {d.leaves[-1]} of a {count}-leaf fold"
        )
    # (4) not replayed
    if nonces is not None:
        nonces.remember(d)
    return demand


def check_demand(
    data: EnvelopeInput | Signed[Demand],
    *,
    obligation: Signed[Obligation],
    commitment: Signed[Commitment],
    nonces: NonceRegistry | None = None,
) -> CheckResult[Signed[Demand]]:
    """:func:`verify_demand` returning a falsy result instead of raising."""
    return run_check(
        lambda: verify_demand(data, obligation=obligation, commitment=commitment, nonces=nonces)
    )


def answer_demand(
    identity: Identity,
    demand: Signed[Demand],
    *,
    obligation: Signed[Obligation],
    commitment: Signed[Commitment],
    hops: Sequence[bytes] | None,
    now: int,
    hops_root: str | None = None,
) -> Signed[Receipt]:
    """The receipt a correct origin signs for a verified demand.

    ``hops_root``: the hex RFC 6962 root of exactly ``hops`` when the caller
    already computed it (an origin that checked its stored fold against the
    committed root when it read it); the hops are then not hashed again.
    Passing a root the hops do not have signs bytes that miss it: ``bad_data``
    against the caller, as with :func:`sign_served`.

    ``hops`` is the whole fold as stored (canonical bytes, fold order), or
    ``None`` when the origin cannot find it. Legitimate non-answers: EXPIRED
    at/after ``serve_until``; NOT_BOUND_HOLDER for a holder-bound obligation;
    PENDING while the commitment is ``provenance_pending``. Anything else that
    is not SERVED before ``serve_until`` is a ``refused`` proof against us.
    """
    o, c, d = obligation.statement, commitment.statement, demand.statement

    def refuse(status: ReceiptStatus, reason: RefusalReason) -> Signed[Receipt]:
        return sign_statement(
            identity,
            Receipt(
                origin=identity.node_id,
                obligation=obligation.digest,
                commitment=commitment.digest,
                demand=demand.digest,
                nonce=d.nonce,
                status=status,
                reason=reason,
                tree_size=c.leaf_count,
                issued_at=now,
            ),
        )

    why = refusal_for(o, c, d, hops, now, hops_root)
    if why is not None:
        return refuse(*why)
    if hops is None:  # pragma: no cover - refusal_for refuses a fold it cannot read
        raise AssertionError("no hops to serve")
    return _sign_served(identity, demand, obligation, commitment, hops, now, c.root)


def sign_served(
    identity: Identity,
    demand: Signed[Demand],
    *,
    obligation: Signed[Obligation],
    commitment: Signed[Commitment],
    hops: Sequence[bytes],
    now: int,
) -> Signed[Receipt]:
    """Sign a SERVED receipt over exactly ``hops`` (the whole fold as served).

    No check that the bytes match the commitment: :func:`answer_demand` does
    that first. Signing bytes that miss the committed root is what a faulty
    or lying origin does, and the receipt is then proof against it.
    """
    return _sign_served(identity, demand, obligation, commitment, hops, now, None)


def _sign_served(
    identity: Identity,
    demand: Signed[Demand],
    obligation: Signed[Obligation],
    commitment: Signed[Commitment],
    hops: Sequence[bytes],
    now: int,
    root: str | None,
) -> Signed[Receipt]:
    # ``root``: the hex root of ``hops`` if the caller has just computed it.
    d = demand.statement
    if d.leaves is None:
        served_root: str | None = merkle_root(hops).hex() if root is None else root
        signed_hashes: tuple[bytes, ...] = ()
        proofs: tuple[tuple[bytes, ...], ...] = ()
    else:
        tree = MerkleTree(leaf_hashes(hops))
        if d.leaves and d.leaves[-1] >= tree.size:
            raise ValueError(f"demand asks for leaf {d.leaves[-1]} of a {tree.size}-hop fold")
        served_root = None
        signed_hashes = tuple(tree.leaf_hash(i) for i in d.leaves)
        proofs = tuple(tree.proof(i) for i in d.leaves)
    receipt = Receipt(
        identity.node_id,
        obligation.digest,
        commitment.digest,
        demand.digest,
        d.nonce,
        ReceiptStatus.SERVED,
        now,
        None,
        commitment.statement.leaf_count,
        d.leaves,
        served_root,
        signed_hashes,
        proofs,
    )
    return sign_statement(identity, receipt)


def eviction_blockers(
    obligations: Iterable[Signed[Obligation]], *, commitment: str, now: int
) -> tuple[Signed[Obligation], ...]:
    """S5: the unexpired obligations that forbid evicting a commitment's hops.

    A reaper calls this with the obligation table as a precondition of every
    eviction and evicts only when it returns nothing (seed 000: eviction reads
    the pointer table first, never as an afterthought).
    """
    return tuple(
        o
        for o in obligations
        if o.statement.commitment == commitment and not expired(o.statement.serve_until, now)
    )


# ---------------------------------------------------------------- holder side


def verify_delivery(
    commitment: EnvelopeInput | Signed[Commitment],
    obligation: EnvelopeInput | Signed[Obligation],
    *,
    now: int,
    origin: str | None = None,
    holder: str | None = None,
) -> tuple[Signed[Commitment], Signed[Obligation]]:
    """Holder side: a commitment and its obligation, as handed over with a value.

    Both signed by the same origin (``origin`` if given); the obligation
    names the commitment; not expired at ``now``; bound to ``holder`` if the
    obligation names one.
    """
    # (1) both signed by the origin they name
    c = (
        commitment
        if isinstance(commitment, Signed)
        else open_statement(commitment, Commitment, signer=origin)
    )
    o = (
        obligation
        if isinstance(obligation, Signed)
        else open_statement(obligation, Obligation, signer=c.signer)
    )
    # (2) same origin, obligation names this commitment
    if o.statement.origin != c.statement.origin:
        raise BindingMismatch(
            f"obligation {o.digest[:12]}… is by {o.signer[:16]}…, commitment by {c.signer[:16]}…"
        )
    if origin is not None and c.statement.origin != origin:
        raise BindingMismatch(f"commitment {c.digest[:12]}… is not by origin {origin[:16]}…")
    if o.statement.commitment != c.digest:
        raise BindingMismatch(
            f"obligation {o.digest[:12]}… names commitment {o.statement.commitment[:12]}…,"
            f" not {c.digest[:12]}…"
        )
    # (3) unexpired
    if expired(o.statement.serve_until, now):
        raise Expired(
            f"obligation {o.digest[:12]}… expired at {format_ms(o.statement.serve_until)}"
            f" (now {format_ms(now)})"
        )
    # (4) bound holder
    bound = o.statement.holder
    if bound is not None and holder is not None and bound != holder:
        raise NotAuthorized(
            f"obligation {o.digest[:12]}… is bound to holder {bound[:16]}…, not {holder[:16]}…"
        )
    return c, o


def check_delivery(
    commitment: EnvelopeInput | Signed[Commitment],
    obligation: EnvelopeInput | Signed[Obligation],
    *,
    now: int,
    origin: str | None = None,
    holder: str | None = None,
) -> CheckResult[tuple[Signed[Commitment], Signed[Obligation]]]:
    """:func:`verify_delivery` returning a falsy result instead of raising."""
    return run_check(
        lambda: verify_delivery(commitment, obligation, now=now, origin=origin, holder=holder)
    )


def build_demand(
    identity: Identity,
    obligation: Signed[Obligation],
    *,
    now: int,
    leaves: Sequence[int] | None = None,
    nonce: str | None = None,
) -> Signed[Demand]:
    """A holder's signed demand for all leaves (``leaves=None``) or some, sorted:
    a demand naming this one fold (:mod:`contracts.batch`)."""
    picked = None if leaves is None else tuple(sorted(set(leaves)))
    o = obligation.statement
    statement = Demand(
        holder=identity.node_id,
        origin=o.origin,
        obligation=obligation.digest,
        commitment=o.commitment,
        leaves=picked,
        nonce=new_nonce() if nonce is None else nonce,
        time=now,
    )
    return sign_statement(identity, statement)


@dataclass(frozen=True, slots=True)
class ServedFold:
    """Hops verified against a commitment: ``hops[i]`` is leaf ``leaves[i]``.

    ``receipt_verified`` is False when the hops were accepted lazily (they
    reproduce a root proven under a verified head) without checking the
    receipt's signature; such a receipt must be opened before it is cited.
    """

    receipt: Signed[Receipt]
    leaves: tuple[int, ...]
    hops: tuple[bytes, ...]
    receipt_verified: bool = True


def verify_receipt_binding(
    receipt: Signed[Receipt],
    *,
    demand: Signed[Demand],
    obligation: Signed[Obligation],
    commitment: Signed[Commitment],
) -> None:
    """A verified receipt answers exactly this demand under this obligation."""
    r = receipt.statement
    if r.origin != commitment.statement.origin or r.origin != obligation.statement.origin:
        raise BindingMismatch(f"receipt {receipt.digest[:12]}… is not by the committing origin")
    if r.obligation != obligation.digest:
        raise BindingMismatch(
            f"receipt {receipt.digest[:12]}… names obligation {r.obligation[:12]}…,"
            f" not {obligation.digest[:12]}…"
        )
    if r.commitment != commitment.digest or obligation.statement.commitment != commitment.digest:
        raise BindingMismatch(f"receipt {receipt.digest[:12]}… names another commitment")
    if r.demand != demand.digest or r.nonce != demand.statement.nonce:
        raise BindingMismatch(
            f"receipt {receipt.digest[:12]}… answers demand {r.demand[:12]}… nonce"
            f" {r.nonce[:16]!r}, not {demand.digest[:12]}… nonce {demand.statement.nonce[:16]!r}"
        )


def verify_signed_leaves(receipt: Signed[Receipt], demand: Demand, commitment: Commitment) -> None:
    """The signed leaves of a SERVED receipt match the demand and the root.

    Everything checked here is signed by the origin, so a failure is the
    origin's own (``bad_data``): wrong tree size, leaves not demanded, or
    leaf hashes/proofs that do not lead to the committed root.
    """
    r = receipt.statement
    if r.tree_size != commitment.leaf_count:
        raise BindingMismatch(
            f"receipt {receipt.digest[:12]}… serves a {r.tree_size}-leaf tree,"
            f" commitment has {commitment.leaf_count} leaves"
        )
    if r.leaves != demand.leaves:
        raise BindingMismatch(f"receipt {receipt.digest[:12]}… serves leaves other than demanded")
    root = bytes.fromhex(commitment.root)
    if r.leaves is None:
        if r.served_root != commitment.root:
            raise RootMismatch(
                f"receipt {receipt.digest[:12]}… signs served root {str(r.served_root)[:12]}…,"
                f" committed root is {commitment.root[:12]}…"
            )
        return
    for index, leaf, path in zip(r.leaves, r.leaf_hashes, r.proofs, strict=True):
        try:
            got = root_from_inclusion(leaf, index, r.tree_size, path)
        except EncodingError as exc:  # malformed path shape, still signed by the origin
            raise RootMismatch(f"receipt {receipt.digest[:12]}…: leaf {index}: {exc}") from exc
        if got != root:
            raise RootMismatch(
                f"receipt {receipt.digest[:12]}…: leaf {index} proof leads to {got.hex()[:12]}…,"
                f" committed root is {commitment.root[:12]}…"
            )


def verify_served(
    receipt: EnvelopeInput | Signed[Receipt],
    hops: Sequence[bytes],
    *,
    demand: Signed[Demand],
    obligation: Signed[Obligation],
    commitment: Signed[Commitment],
) -> ServedFold:
    """Holder side: verify an origin's SERVED receipt and the hop bytes with it.

    Cost: one Ed25519 verification plus the RFC 6962 hashes over the served
    hops; no per-hop signature.
    """
    # (1) signed by the committing origin, over the payload bytes received
    origin = commitment.statement.origin
    signed = (
        receipt if isinstance(receipt, Signed) else open_statement(receipt, Receipt, signer=origin)
    )
    if signed.signer != origin:
        raise BindingMismatch(f"receipt {signed.digest[:12]}… is not signed by {origin[:16]}…")
    # (2) answers this demand, under this obligation and commitment
    verify_receipt_binding(signed, demand=demand, obligation=obligation, commitment=commitment)
    r = signed.statement
    # (3) actually served
    if r.status is not ReceiptStatus.SERVED:
        reason = "" if r.reason is None else f" ({r.reason.value})"
        raise NotServed(
            f"receipt {signed.digest[:12]}… from {origin[:16]}… is {r.status.value}{reason}"
            f" at {format_ms(r.issued_at)}"
        )
    # (4) the signed leaf hashes lead to the committed root
    verify_signed_leaves(signed, demand.statement, commitment.statement)
    # (5) the bytes received are the bytes signed
    return verify_served_bytes(signed, hops)


def verify_served_bytes(signed: Signed[Receipt], hops: Sequence[bytes]) -> ServedFold:
    """Step (5) of :func:`verify_served` alone: ``hops`` are the bytes ``signed`` signs.

    For a SERVED receipt already bound to its demand and checked by
    :func:`verify_signed_leaves`; a mismatch here is :class:`DigestMismatch`
    (altered after signing, not attributable to the origin).
    """
    r = signed.statement
    if r.leaves is None:
        got = merkle_root(hops)
        if got.hex() != r.served_root:
            raise DigestMismatch(
                f"{len(hops)} hops received hash to root {got.hex()[:12]}…; receipt"
                f" {signed.digest[:12]}… signs {str(r.served_root)[:12]}…"
            )
    elif (hashes := leaf_hashes(hops)) != list(r.leaf_hashes):
        if len(hashes) != len(r.leaf_hashes):
            raise DigestMismatch(
                f"receipt {signed.digest[:12]}… signs {len(r.leaf_hashes)} hops,"
                f" {len(hops)} arrived"
            )
        bad = next(i for i, (a, b) in enumerate(zip(hashes, r.leaf_hashes, strict=True)) if a != b)
        raise DigestMismatch(
            f"hop {r.leaves[bad]} of receipt {signed.digest[:12]}…"
            " does not hash to its signed leaf hash"
        )
    leaves = tuple(range(r.tree_size)) if r.leaves is None else r.leaves
    return ServedFold(receipt=signed, leaves=leaves, hops=tuple(hops))


def check_served(
    receipt: EnvelopeInput | Signed[Receipt],
    hops: Sequence[bytes],
    *,
    demand: Signed[Demand],
    obligation: Signed[Obligation],
    commitment: Signed[Commitment],
) -> CheckResult[ServedFold]:
    """:func:`verify_served` returning a falsy result instead of raising."""
    return run_check(
        lambda: verify_served(
            receipt, hops, demand=demand, obligation=obligation, commitment=commitment
        )
    )


def build_delivery_receipt(
    identity: Identity,
    *,
    sender: str,
    value_digest: str,
    commitments: Sequence[Signed[Commitment]],
    obligations: Sequence[Signed[Obligation]],
    received_at: int,
) -> Signed[DeliveryReceipt]:
    """Holder side: acknowledge a delivered value and the duties that came with it."""
    statement = DeliveryReceipt(
        holder=identity.node_id,
        sender=sender,
        value_digest=value_digest,
        commitments=tuple(c.digest for c in commitments),
        obligations=tuple(o.digest for o in obligations),
        received_at=received_at,
    )
    return sign_statement(identity, statement)


def build_witness_report(
    identity: Identity,
    demand: Signed[Demand],
    *,
    at: int,
    address: str,
    receipt: Signed[Receipt] | None = None,
) -> Signed[WitnessReport]:
    """Witness side: report the outcome of the witness's own re-issued ``demand``.

    ``address`` is the endpoint the witness asked; it must be one the origin
    signed into the obligation, or the report confirms nothing.
    """
    if demand.statement.holder != identity.node_id:
        raise ValueError("a witness reports on a demand it signed itself")
    statement = WitnessReport(
        witness=identity.node_id,
        origin=demand.statement.origin,
        obligation=demand.statement.obligation,
        demand=demand.digest,
        outcome=WitnessOutcome.UNANSWERED if receipt is None else WitnessOutcome.ANSWERED,
        receipt=None if receipt is None else receipt.digest,
        at=at,
        address=address,
    )
    return sign_statement(identity, statement)
