"""An attester's A6 log read as a ledger (durable sequence numbers, idempotent
issue), and who may ask it to sign (``Attest.Request``).

**Who may ask.** An operator key of the attester may ask anything (it speaks
for the attester, dating included). Any other key is a holder: it must cite
at least one rehydration proof, every cited proof's demand must name it as
holder and be signed by it (:func:`check_attest_caller`), and its
``issued_at`` (0: the attester's now) must lie within the demand window,
the project's clock skew, of the attester's clock
(:func:`check_attest_issue_time`).

Every attestation an attester signs is a hop in its own log (A6), at a seq
from :data:`nodes.attester.ATTEST_SEQ_BASE` on, committed as a fold. This
module keeps two promises about that log, both derived from the log itself
so that they hold across restarts (the epoch survives a restart, so a seq
once used in it can never be used again):

1. **Sequence numbers.** The next attestation hop's seq is read from the
   store the first time it is needed in a process (and again whenever the
   epoch changes or a write failed): one past every own hop and fold member
   of the current epoch at or above the base. A restarted attester continues
   where its log ends.
2. **Idempotent issue.** An attestation is identified by what it says apart
   from its times — value digest, axis, floor, the cited receipts and the
   discharged taints, as sets — its *key*. Asked again for a key it has
   logged, the attester answers the logged attestation, with the fold that
   commits it, and writes nothing: no hop, no fold. The answer's bytes are
   the logged attestation's own: re-signed from the hop's fields (Ed25519
   signatures are deterministic) and checked against the digest the hop
   names. Only once the logged attestation has expired at the new one's
   issue time (or its hop has been evicted, which the reaper does only when
   no unexpired obligation protects it, S5) is a new one signed and logged,
   like a first request; with :data:`nodes.attester.MIN_LIFETIME_MS` that is
   at most one write per key per such lifetime.

One issue runs at a time (a lock), so two equal requests at once give one
attestation. The key index (key → where it is logged) is read from the log
once per process.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from contracts.attest import build_attestation
from contracts.canonical import canonical_bytes, sha256_hex
from contracts.envelope import Envelope
from contracts.errors import ContractError
from contracts.hops import parse_hop
from contracts.identity import Identity
from contracts.signed import Signed, open_statement, parse_statement
from contracts.statements import Attestation, Axis, Demand
from nodes.attester import ATTEST_SEQ_BASE, AttestationAsk, LoggedAttestation, attestation_hops
from nodes.auth import PermissionDenied
from nodes.errors import MalformedRequest, PromiseOutOfRange
from nodes.messages import CommittedFold
from nodes.methods import method_name
from nodes.store import HopStore

__all__ = ["AttestLedger", "attestation_key", "check_attest_caller", "check_attest_issue_time"]

_METHOD = method_name("Attest", "Request")


def check_attest_caller(ask: AttestationAsk, caller: str, node: str) -> None:
    """A non-operator caller must cite at least one proof, and have signed the
    demand of every proof it cites (checked: holder named first, no crypto,
    then each demand's signature); :class:`PermissionDenied` naming what failed."""
    who = f"{_METHOD}: key {caller[:16]}… is not an operator key of node {node!r}"
    if not ask.proofs:
        raise PermissionDenied(
            f"{who}, and cites no rehydration proof: a holder must cite at least one proof"
            " whose demand it signed"
        )
    demands: list[Envelope] = []
    for i, proof in enumerate(ask.proofs):
        try:
            holder = parse_statement(proof.demand, Demand).statement.holder
        except (ContractError, ValueError) as exc:
            raise MalformedRequest(f"attest request: the demand of proof {i}: {exc}") from exc
        if holder != caller:
            raise PermissionDenied(
                f"{who}, nor the holder {holder[:16]}… that signed the demands the request"
                f" cites (proof {i}): a holder may cite only proofs of demands it signed"
            )
        demands.append(proof.demand)
    for i, demand in enumerate(demands):
        try:
            open_statement(demand, Demand, signer=caller)
        except ContractError as exc:
            raise PermissionDenied(
                f"{who}, and the demand of proof {i} naming it is not signed by it: {exc}"
            ) from exc


def check_attest_issue_time(ask: AttestationAsk, now_ms: int, window_s: float) -> None:
    """A holder's ``issued_at`` (0: now) must lie within ``window_s`` of the
    attester's clock either way: an attestation speaks about now, and one dated
    ahead would be valid long after its lifetime (:class:`PromiseOutOfRange`)."""
    if ask.issued_at == 0:
        return
    skew_ms = ask.issued_at - now_ms
    if abs(skew_ms) > window_s * 1000:
        way = "ahead of" if skew_ms > 0 else "behind"
        raise PromiseOutOfRange(
            f"attest request: issued_at {ask.issued_at} ms is {abs(skew_ms) / 1000:.0f} s"
            f" {way} this attester's clock ({now_ms} ms); the accepted clock skew is"
            f" ±{window_s:g} s"
        )


def attestation_key(
    value_digest: str,
    axis: Axis | str,
    floor: float,
    cites: Sequence[str],
    discharged: Sequence[str],
) -> str:
    """SHA-256 over the RFC 8785 bytes of what an attestation says apart from its times."""
    return sha256_hex(
        canonical_bytes(
            {
                "value_digest": value_digest,
                "axis": axis.value if isinstance(axis, Axis) else axis,
                "floor": float(floor),
                "cites": sorted(set(cites)),
                "discharged": sorted(set(discharged)),
            }
        )
    )


def _key_of(a: Attestation) -> str:
    return attestation_key(a.value_digest, a.axis, a.floor, a.cites, a.discharged)


@dataclass(frozen=True, slots=True)
class _Entry:
    """Where one attestation is logged (its hop holds the fields to re-sign it from)."""

    epoch: str
    seq: int
    digest: str
    expires_at: int


def _entry(epoch: str, seq: int, fields: Mapping[str, Any]) -> tuple[str, _Entry] | None:
    """The key and entry of one attestation hop's fields, or None if it is none."""
    try:
        if fields.get("op") != "ATTEST":
            return None
        key = attestation_key(
            str(fields["value_digest"]),
            str(fields["axis"]),
            float(fields["floor"]),
            [str(c) for c in fields["cites"]],
            [str(t) for t in fields["discharged"]],
        )
        int(fields["issued_at"])
        expires_at = int(fields["expires_at"])
    except (KeyError, TypeError, ValueError):
        return None
    return key, _Entry(epoch, seq, str(fields["attestation"]), expires_at)


class _LedgerCore(Protocol):
    """What the ledger uses of its node."""

    @property
    def identity(self) -> Identity: ...

    @property
    def store(self) -> HopStore: ...

    async def append(
        self, hops: Sequence[bytes], seqs: Sequence[int] = ()
    ) -> tuple[str, tuple[int, ...]]: ...

    async def commit_fold(self, value_ref: str, seqs: Sequence[int]) -> CommittedFold: ...


class AttestLedger:
    """One node's A6 log as a ledger (module docstring)."""

    def __init__(self, core: _LedgerCore) -> None:
        self._core = core
        self._lock = asyncio.Lock()
        self._index: dict[str, _Entry] | None = None
        self._epoch = ""
        self._next = ATTEST_SEQ_BASE

    async def _load(self) -> dict[str, _Entry]:
        store = self._core.store
        index: dict[str, _Entry] = {}
        for epoch, seq, raw in await store.own_hops_from(ATTEST_SEQ_BASE):
            try:
                fields = parse_hop(raw)
            except (ContractError, ValueError):
                continue
            found = _entry(epoch, seq, fields)
            if found is not None:
                key, entry = found
                old = index.get(key)
                if old is None or entry.expires_at >= old.expires_at:
                    index[key] = entry  # the latest renewal answers
        self._epoch = store.epoch
        self._next = await store.next_own_seq(self._epoch, ATTEST_SEQ_BASE)
        self._index = index
        return index

    async def log(self, signed: Sequence[Signed[Attestation]]) -> tuple[LoggedAttestation, ...]:
        """Log what is new in ``signed`` (one fold), answer the rest from the log;
        one :class:`LoggedAttestation` per attestation asked, in order."""
        async with self._lock:
            index = self._index
            if index is None or self._core.store.epoch != self._epoch:
                index = await self._load()
            out: list[LoggedAttestation | None] = []
            fresh: list[tuple[int, str, Signed[Attestation]]] = []
            for s in signed:
                key = _key_of(s.statement)
                entry = index.get(key)
                if entry is not None and s.statement.issued_at < entry.expires_at:
                    recalled = await self._recall(entry)
                    if recalled is not None:
                        out.append(recalled)
                        continue
                fresh.append((len(out), key, s))
                out.append(None)
            if fresh:
                try:
                    await self._write(fresh, out, index)
                except BaseException:
                    self._index = None  # read the log again before the next issue
                    raise
            return tuple(o for o in out if o is not None)

    async def _write(
        self,
        fresh: Sequence[tuple[int, str, Signed[Attestation]]],
        out: list[LoggedAttestation | None],
        index: dict[str, _Entry],
    ) -> None:
        first = self._next
        seqs = list(range(first, first + len(fresh)))
        hops = attestation_hops([s for _, _, s in fresh], first)
        epoch, _ = await self._core.append(hops, seqs)
        self._next = first + len(fresh)
        for seq, (_, key, s) in zip(seqs, fresh, strict=True):
            index[key] = _Entry(epoch, seq, s.digest, s.statement.expires_at)
        committed = await self._core.commit_fold(f"attestations/{seqs[0]}-{seqs[-1]}", seqs)
        for i, _, s in fresh:
            out[i] = LoggedAttestation(s.to_bytes(), committed.commitment, committed.obligation)

    async def _recall(self, entry: _Entry) -> LoggedAttestation | None:
        """The logged attestation's bytes and fold; None if they cannot be
        reproduced (another key signed it), so a new one is issued instead."""
        store = self._core.store
        raw = await store.hop(entry.epoch, entry.seq)
        if raw is None:
            return None  # evicted with its expired fold: a new attestation is logged
        try:
            f = parse_hop(raw)
            again = build_attestation(
                self._core.identity,
                value_digest=str(f["value_digest"]),
                axis=Axis(str(f["axis"])),
                floor=float(f["floor"]),
                discharged=[str(t) for t in f["discharged"]],
                cites=[str(c) for c in f["cites"]],
                issued_at=int(f["issued_at"]),
                expires_at=int(f["expires_at"]),
            )
        except (ContractError, KeyError, TypeError, ValueError):
            return None
        if again.digest != entry.digest:
            return None
        fold = await store.own_fold_of_hop(entry.epoch, entry.seq)
        if fold is None and entry.epoch == store.epoch:
            # appended, then stopped before its fold was committed: commit it now
            committed = await self._core.commit_fold(
                f"attestations/{entry.seq}-{entry.seq}", [entry.seq]
            )
            fold = committed.commitment, committed.obligation
        commitment, obligation = fold if fold is not None else (b"", b"")
        return LoggedAttestation(again.to_bytes(), commitment, obligation, repeated=True)
