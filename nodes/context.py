"""What every role of a node shares: :class:`NodeContext`.

A node (:class:`nodes.services.NodeCore`) is five roles over one context: the
origin (:mod:`nodes.origin`), the holder (:mod:`nodes.holding`), the witness
(:mod:`nodes.witnessing`), the attestation pool (:mod:`nodes.attestations`) and
the suspicions it keeps (:mod:`nodes.suspicions`). The context is what they all
read: the node's identity, its clock, its store and counters, its
configuration, how a peer's name resolves, the statements it has opened, and
the holder client through which evidence is recorded. A role reaches another
role only through what the composition hands it (a callable, a public method),
never through the context.

What a test or an operator tool may swap while the node runs (the clock, the
fault behaviour, the transport, ``crashed``) lives here, so every role sees
the change at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from contracts._lru import BoundedCache
from contracts.head_note import SignedHead
from contracts.heads import VerifiedFold
from contracts.identity import Identity
from contracts.signed import Signed, open_statement
from contracts.statements import Statement
from nodes import store as st
from nodes.client import HeldFold, Holder
from nodes.config import NodeConfig
from nodes.errors import MalformedRequest
from nodes.faults import Behaviour, FaultPlan
from nodes.messages import Delivery
from nodes.transport import Transport

__all__ = [
    "MAX_VALUE_REF",
    "STATEMENT_CACHE",
    "EvidenceKeeping",
    "HeldValue",
    "NodeContext",
    "check_value_ref",
    "held_fold",
    "ms",
]

#: Statements (and this node's own heads) kept opened, by their exact bytes.
STATEMENT_CACHE = 4096
#: The longest value reference a node commits or holds.
MAX_VALUE_REF = 256
#: Full method name → its ``rpc_<Method>`` counter name (bounded: names are the
#: methods a node serves, but a caller can send any).
_RPC_COUNTER: dict[str, str] = {}
_RPC_COUNTER_NAMES = 256

S = TypeVar("S", bound=Statement)


def ms(seconds: float) -> int:
    """Seconds (a clock reading) as integer milliseconds."""
    return int(seconds * 1000)


def check_value_ref(value_ref: str) -> None:
    """A value reference a node commits or holds: 1..MAX_VALUE_REF characters."""
    if not value_ref or len(value_ref) > MAX_VALUE_REF:
        raise MalformedRequest(f"value_ref must be 1..{MAX_VALUE_REF} chars, got {value_ref!r:.80}")


def held_fold(fold: VerifiedFold, proof: bytes, head: bytes) -> HeldFold:
    """A head-form fold as the holder client keeps it: stand-ins plus the proof."""
    return HeldFold(fold.commitment, fold.obligation, proof, head, fold)


@dataclass(frozen=True, slots=True)
class HeldValue:
    """A compacted value this node holds, as delivered (statements verbatim)."""

    delivery: Delivery
    folds: tuple[HeldFold, ...]


class EvidenceKeeping(Protocol):
    """Where the holder client's evidence and receipts go (:mod:`nodes.suspicions`)."""

    async def keep_evidence(self, kind: str, accused: str, body: bytes, path: str) -> None: ...

    async def clear_suspicions(
        self, origin: str, receipt: bytes, demand: bytes = b"", *, remember: bool = True
    ) -> int: ...

    def suspected(self, origin: str) -> bool: ...


@dataclass(eq=False, slots=True)
class NodeContext:
    """The shared state of one node's roles; see the module docstring."""

    config: NodeConfig
    identity: Identity
    store: st.HopStore
    transport: Transport
    fault: FaultPlan
    behaviour: Behaviour
    clock: Callable[[], float] = time.time
    #: Set by a test or the in-memory transport's crash switch: calls to it fail.
    crashed: bool = False
    #: The address this node signs into its obligations and heads.
    advertised: str = ""
    rpc_counts: dict[str, int] = field(default_factory=dict)
    #: Statements opened (signature verified once), by kind and exact bytes.
    statements: BoundedCache[tuple[str, bytes], Signed[Any] | SignedHead] = field(
        default_factory=lambda: BoundedCache(STATEMENT_CACHE)
    )
    #: Where evidence the holder client records goes (the suspicions role).
    evidence: EvidenceKeeping | None = None
    _client: Holder | None = None

    @property
    def node_id(self) -> str:
        return self.identity.node_id

    def now_ms(self) -> int:
        return ms(self.clock())

    def bump(self, name: str, n: int = 1) -> None:
        self.store.bump(name, n)

    def count_rpc(self, method: str) -> None:
        key = _RPC_COUNTER.get(method)
        if key is None:  # the counter's name, made once per method name (a few dozen)
            key = "rpc_" + method.rsplit("/", 1)[-1]
            if len(_RPC_COUNTER) < _RPC_COUNTER_NAMES:
                _RPC_COUNTER[method] = key
        self.rpc_counts[key] = self.rpc_counts.get(key, 0) + 1

    def resolve_peer(self, name_or_address: str) -> str:
        """A configured peer's address by name (an address is returned as given)."""
        return self.config.peer(name_or_address)

    def open_cached(self, data: bytes, cls: type[S], *, signer: str | None = None) -> Signed[S]:
        """``open_statement`` with a cache keyed by the exact bytes (statements are immutable)."""
        key = (cls.KIND.value, data)
        hit = self.statements.get(key)
        if isinstance(hit, Signed) and (signer is None or hit.signer == signer):
            return hit
        signed = open_statement(data, cls, signer=signer)
        self.statements.put(key, signed)
        return signed

    def client(self) -> Holder:
        """The node's holder client (demands, witness challenges, evidence), made on first
        use with the clock and transport of that moment."""
        if self._client is None:
            evidence = self.evidence
            self._client = Holder(
                self.identity,
                self.transport,
                evidence_dir=self.config.evidence_path,
                clock=self.clock,
                reasks=self.config.reasks,
                resolve_address=self.resolve_peer,
                on_evidence=evidence.keep_evidence if evidence is not None else None,
                on_receipt=evidence.clear_suspicions if evidence is not None else None,
                min_witnesses=self.config.min_witnesses,
                suspected=evidence.suspected if evidence is not None else None,
            )
        return self._client

    @staticmethod
    def timeout(deadline: float | None, default: float) -> float:
        """Seconds left until ``deadline`` (a ``time.monotonic()`` reading), or ``default``."""
        if deadline is None:
            return default
        return max(0.0, deadline - time.monotonic())
