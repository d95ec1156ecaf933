"""The attestation role: the pool of attestations a node keeps, and the node as attester.

What this role promises. An attestation is kept only if it verifies, has not
expired, and its lifetime is within an attester's longest
(:data:`MAX_ATTESTATION_LIFETIME_MS`); a stranger's may not be dated ahead of
this node's clock by more than the demand window. Attestations of attesters the
node knows (itself, its operator keys, its pinned peers, attesters that answered
its own ``Restore``) use a reserved pool that is refused when full, never
evicted; every other key shares a stranger pool whose expired, then oldest,
entries go first (:meth:`nodes.store.HopStore.keep_attestation`). ``List``
answers within half a message, the reserved pool first. As attester
(:class:`nodes.attester.Attester`) the node issues attestations only to a caller
that cites proofs whose demands it signed (or an operator), and logs each one in
its own hop log (A6, :class:`nodes.attest_log.AttestLedger`), committed through
the origin role.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from contracts._lru import BoundedCache
from contracts.attest import RehydrationProof
from contracts.envelope import Envelope
from contracts.errors import ContractError, Expired
from contracts.identity import Identity
from contracts.rules import DEMAND_WINDOW_MS, expired
from contracts.signed import Signed, open_statement
from contracts.statements import Attestation
from nodes import store as st
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
from nodes.context import NodeContext
from nodes.errors import PromiseOutOfRange, RequestTooLarge
from nodes.logging import get_logger
from nodes.messages import CommittedFold
from nodes.restore import restore as restore_value
from nodes.transport import CallFailed

__all__ = [
    "MAX_ASKED_ATTESTERS",
    "MAX_ATTESTATIONS",
    "MAX_ATTESTATIONS_PER_ATTESTER",
    "MAX_ATTESTATION_BYTES",
    "MAX_ATTESTATION_LIFETIME_MS",
    "MAX_ATTESTATION_POOL_BYTES",
    "MAX_STRANGER_ATTESTATIONS",
    "MAX_STRANGER_ATTESTATION_BYTES",
    "Attestations",
]

log = get_logger(__name__)

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
#: The demand window (contracts.rules), in seconds.
DEMAND_WINDOW_S = DEMAND_WINDOW_MS / 1000


class Attestations:
    """The attestation role of one node; see the module docstring.

    ``append`` and ``commit_fold`` are the origin role's: the attester's A6 log is
    this node's own hop log.
    """

    def __init__(
        self,
        ctx: NodeContext,
        *,
        append: Callable[[Sequence[bytes], Sequence[int]], Awaitable[tuple[str, tuple[int, ...]]]],
        commit_fold: Callable[[str, Sequence[int]], Awaitable[CommittedFold]],
    ) -> None:
        self.ctx = ctx
        self.config = ctx.config
        self.store = ctx.store
        self._append = append
        self._commit_fold = commit_fold
        #: Attesters that answered this node's Restore (the latest answers kept).
        self._asked_attesters: BoundedCache[str, None] = BoundedCache(MAX_ASKED_ATTESTERS)
        #: This node's attester (:mod:`nodes.attester`), made on first request.
        self._attester: Attester | None = None
        #: Its A6 log as a ledger (:mod:`nodes.attest_log`): seqs and repeats from the log.
        self._attest_ledger: AttestLedger | None = None

    # What the attester and its ledger use of their node (nodes.attester, nodes.attest_log).

    @property
    def identity(self) -> Identity:
        return self.ctx.identity

    def now_ms(self) -> int:
        return self.ctx.now_ms()

    async def append(
        self, hops: Sequence[bytes], seqs: Sequence[int] = ()
    ) -> tuple[str, tuple[int, ...]]:
        return await self._append(hops, seqs)

    async def commit_fold(self, value_ref: str, seqs: Sequence[int]) -> CommittedFold:
        return await self._commit_fold(value_ref, seqs)

    def reserved_attesters(self) -> frozenset[str]:
        """Attester keys whose attestations use the reserved pool: this node,
        its operator keys, its peers' pinned node ids, and attesters that
        answered this node's own ``Attest.Restore``."""
        keys = {self.identity.node_id, *self.config.operator_keys, *self._asked_attesters}
        keys.update(p.node_id for p in self.config.peers if p.node_id)
        return frozenset(keys)

    def remember_attesters(self, answer: AttestationAnswer) -> None:
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
        now_ms = self.ctx.now_ms()
        if expired(a.expires_at, now_ms):
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
            now_ms=self.ctx.now_ms(),
            reserved=self.reserved_attesters(),
            # half a message: room for each envelope's framing, however many there are
            max_bytes=self.config.max_message_bytes // 2,
        )

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
            check_attest_issue_time(ask, self.ctx.now_ms(), DEMAND_WINDOW_S)
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
        obligation, demand = leaf0_demand(self.identity, proof, self.ctx.now_ms())
        try:
            answers = await self.ctx.transport.demand(
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
        """``Attest.Restore``: this node as holder (:func:`nodes.restore.restore`);
        ``attester`` is a peer name or host:port."""
        ask.check()
        address = self.config.peer(attester)
        result = await restore_value(
            self.identity,
            self.ctx.transport,
            now_ms=self.ctx.now_ms(),
            folds=folds,
            ask=ask,
            attester=address,
            timeout=self.ctx.timeout(deadline, 30.0),
        )
        self.remember_attesters(result.answer)
        return result
