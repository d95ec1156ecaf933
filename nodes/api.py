"""The supported library API: a provnet node for your own agent.

This module and the ``provnet`` command line are provnet's supported
interfaces; every other module (``contracts.*``, ``nodes.*``, ``harness.*``)
is internal and may change without notice. Reference: ``docs/api.md``.

One typed object, :class:`Node`, whichever way it was obtained:

- :func:`open_node` — a node in this process (an async context manager): its
  own key and hop log under ``data_dir``, and its gRPC server on
  ``listen`` (loopback, a free port, by default), which it needs to serve
  the hops it promises to serve;
- :func:`connect` — a running node (``provnet node``), driven over its
  control plane with an operator key the node was started with.

Its calls reuse the node's own code and change none of its rules:

- :meth:`Node.append` stores hops (JSON objects) in the node's hop log;
- :meth:`Node.compact` folds stored hops into a :class:`Value`: the node
  signs one tree head over the fold and promises to serve its hops, and
  ``value.to_bytes()`` is everything a receiver needs;
- :meth:`Node.receive` verifies such bytes (the head's signature, the fold
  proof, the serving terms) and holds the value;
- :meth:`Node.rehydrate` demands the folded hops from the origin the value
  names and returns them verified against the signed root
  (:class:`Rehydrated`), or the :class:`Evidence` that names the origin
  that failed;
- :func:`verify_evidence` checks an evidence file with nothing but its
  content (:class:`Verdict`), as ``provnet evidence verify`` does.

Every failure is a :class:`ProvnetError`; the message names what failed::

    ProvnetError                  a facade call failed
    ├── MalformedValue            bytes that are not a provnet value
    ├── ValueRejected             a value whose statements failed a check
    │   └── WrongOrigin           statements by another origin than expected
    ├── NotRehydrated             neither verified hops nor evidence (pending,
    │                             expired, busy, an unattributable answer)
    ├── InvalidEvidence           an evidence file that does not verify
    ├── RequestRejected           the node refused a request (bad hops, unknown
    │                             seqs or value, a promise it cannot keep,
    │                             a caller it does not authorise)
    └── NodeUnavailable           the node could not be reached

The error a node or the contracts raised is kept as ``__cause__``.

**Value bytes** are the ``DeliveredValue`` message of ``proto/provnet/v1``
(what ``Deliver`` carries), encoded by :mod:`nodes.wire` with no sender, so
every head names its origin: the origin's signed statements travel inside it
verbatim or as the fields they are rebuilt and verified from.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from contracts.canonical import MAX_DOCUMENT_BYTES, parse_json_object
from contracts.errors import ContractError, EncodingError, KeyFileError
from contracts.evidence import Evidence as _EvidenceRecord
from contracts.evidence import EvidenceLevel, EvidenceVerdict
from contracts.evidence import verify_evidence as _verify_evidence
from contracts.head_note import head_digest, parse_head
from contracts.heads import FoldProof
from contracts.hops import MAX_HOP_BYTES
from contracts.identity import load_identity
from contracts.signed import parse_statement
from contracts.statements import Commitment
from nodes import wire
from nodes.app import RunningNode, load_or_create_identity, start_node
from nodes.auth import ControlCredentials
from nodes.config import DEFAULT_MAX_MESSAGE_BYTES, ConfigError, NodeConfig
from nodes.control import NodeClient
from nodes.errors import NodeError, PeerUnavailable, RequestTooLarge, StoreError
from nodes.faults import FaultMode, FaultPlan
from nodes.messages import CommittedCompaction, Delivery, Outcome, RehydrationReport
from nodes.services import NodeCore
from nodes.transport import CallFailed, GrpcTransport

__all__ = [
    "MAX_VALUE_BYTES",
    "Evidence",
    "FaultMode",
    "Hop",
    "InvalidEvidence",
    "MalformedValue",
    "Node",
    "NodeUnavailable",
    "NotRehydrated",
    "ProvnetError",
    "Received",
    "Rehydrated",
    "RequestRejected",
    "Value",
    "ValueRejected",
    "Verdict",
    "WrongOrigin",
    "connect",
    "open_node",
    "verify_evidence",
]

#: The largest value :meth:`Node.receive` parses: what one ``Deliver`` call may carry.
MAX_VALUE_BYTES = DEFAULT_MAX_MESSAGE_BYTES


# --------------------------------------------------------------------------- errors


class ProvnetError(Exception):
    """Root of every error this module raises (module docstring: the tree)."""


class MalformedValue(ProvnetError):
    """Bytes that are not a provnet value: not the encoding, too large, no statements."""


class ValueRejected(ProvnetError):
    """A well-formed value whose statements failed a check (signature, proof, terms)."""


class WrongOrigin(ValueRejected):
    """A value whose statements name another origin than the one the caller expected."""

    def __init__(self, message: str, *, expected: str, found: tuple[str, ...]) -> None:
        super().__init__(message)
        self.expected = expected
        self.found = found


class NotRehydrated(ProvnetError):
    """No verified hops and no evidence: the origin's answer accuses nobody.

    ``outcome`` is what the holder got (``pending``, ``expired``, ``busy``,
    ``rejected``, ``unattributable``); ``origin`` the origin it got it from.
    """

    def __init__(self, message: str, *, origin: str, outcome: str) -> None:
        super().__init__(message)
        self.origin = origin
        self.outcome = outcome


class InvalidEvidence(ProvnetError):
    """An evidence file that is unreadable, not evidence, or does not verify."""


class RequestRejected(ProvnetError):
    """The node refused a request; ``code`` is its status name (``INVALID_ARGUMENT`` …)."""

    def __init__(self, message: str, *, code: str = "") -> None:
        super().__init__(message)
        self.code = code


class NodeUnavailable(ProvnetError):
    """The node (or the peer a call depends on) could not be reached in time."""


#: Status names that say the call never reached a node that answers.
_UNREACHED = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED"})


def _call_error(what: str, exc: CallFailed) -> ProvnetError:
    if exc.code in _UNREACHED:
        return NodeUnavailable(f"{what}: {exc}")
    return RequestRejected(f"{what}: {exc}", code=exc.code)


def _node_error(what: str, exc: NodeError | ContractError) -> ProvnetError:
    if isinstance(exc, PeerUnavailable):
        return NodeUnavailable(f"{what}: {exc}")
    code = getattr(exc, "code", None)
    return RequestRejected(f"{what}: {exc}", code=getattr(code, "name", ""))


# --------------------------------------------------------------------------- types


@dataclass(frozen=True, slots=True)
class Value:
    """A compacted value with its origins' statements.

    ``ref`` names it, ``payload`` is the value itself (opaque bytes),
    ``origins`` the node ids whose statements it carries. :meth:`to_bytes`
    is what a receiver passes to :meth:`Node.receive`.
    """

    ref: str
    payload: bytes
    origins: tuple[str, ...]
    _delivery: Delivery = field(repr=False, compare=False)
    _data: bytes = field(repr=False)

    def to_bytes(self) -> bytes:
        return self._data

    @property
    def statement_bytes(self) -> int:
        """Bytes of the value's encoding that are not its payload."""
        return len(self._data) - len(self.payload)


@dataclass(frozen=True, slots=True)
class Received:
    """A value the node verified and now holds, and its signed delivery receipt."""

    value: Value
    #: the receiver's signed delivery receipt (DSSE envelope bytes)
    receipt: bytes


@dataclass(frozen=True, slots=True)
class Hop:
    """One folded hop, verified against its origin's signed root."""

    origin: str
    leaf_index: int
    #: the hop's canonical bytes (RFC 8785 JSON), exactly as committed
    data: bytes

    @property
    def fields(self) -> dict[str, Any]:
        """The hop's JSON fields, including ``origin`` and ``epoch``."""
        return parse_json_object(self.data, what="hop", max_bytes=MAX_HOP_BYTES)


@dataclass(frozen=True, slots=True)
class Rehydrated:
    """Every folded hop of a value, each verified against the signed root."""

    ref: str
    hops: tuple[Hop, ...]
    #: calls the holder made (demands, signed re-asks, witness challenges)
    rpcs: int


@dataclass(frozen=True, slots=True)
class Evidence:
    """An origin failed its obligation; ``data`` is the self-contained evidence record.

    ``kind`` is ``bad_data``, ``refused``, ``equivocation``, ``split_view``
    (``level`` ``proof``) or ``unanswered`` (``suspicion``). A suspicion is
    ``confirmed`` only when witnesses' demands went unanswered too; an
    unconfirmed one is not kept (``path`` empty) and verifies as
    ``suspected``, never as a proof: silence alone proves nothing. ``path``:
    where the holder wrote the file (on the holder's machine).
    """

    ref: str
    origin: str
    kind: str
    level: str
    confirmed: bool
    detail: str
    data: bytes
    path: str


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a verified evidence file establishes (:func:`verify_evidence`)."""

    kind: str
    #: ``proof`` or ``suspicion``
    level: str
    #: ``proven``, ``admitted_loss`` (proofs); ``suspected``, ``witness_confirmed``,
    #: ``busy`` (suspicions); ``cleared`` (a later receipt of the accused answered)
    status: str
    accused: str
    commitment: str
    reason: str
    witnesses: tuple[str, ...]

    @property
    def accuses(self) -> bool:
        """True unless the suspicion was cleared."""
        return self.status != "cleared"

    @classmethod
    def _of(cls, v: EvidenceVerdict) -> Verdict:
        return cls(
            v.kind.value,
            v.level.value,
            v.status.value,
            v.accused,
            v.commitment,
            v.reason,
            v.witnesses,
        )


# --------------------------------------------------------------------------- value bytes


def _encode(delivery: Delivery) -> bytes:
    # No sender: these bytes may reach a receiver from anyone, so they name none.
    return wire.delivered_value_bytes(dataclasses.replace(delivery, sender=""))


def _origins(delivery: Delivery) -> tuple[str, ...]:
    """The origins the statements name (parsed; the receiving node verifies them)."""
    found = [parse_head(h).statement.origin for h in delivery.heads]
    found += [parse_statement(c, Commitment).statement.origin for c in delivery.commitments]
    return tuple(dict.fromkeys(found))


def _value(delivery: Delivery, data: bytes | None = None) -> Value:
    return Value(
        delivery.value_ref,
        delivery.value,
        _origins(delivery),
        delivery,
        _encode(delivery) if data is None else data,
    )


def _decode(data: bytes) -> Value:
    """Parse value bytes (nothing verified here: :meth:`Node.receive` verifies)."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError(f"value bytes expected, got {type(data).__name__}")
    data = bytes(data)
    if len(data) > MAX_VALUE_BYTES:
        raise MalformedValue(f"value: {len(data)} bytes exceeds the limit of {MAX_VALUE_BYTES}")
    try:
        delivery = wire.delivery_from_value_bytes(data)
        value = _value(delivery, data)
        carried = {head_digest(h) for h in delivery.heads}
        proven_under = [FoldProof.from_bytes(p).head for p in delivery.fold_proofs]
    except ContractError as exc:
        raise MalformedValue(f"value: {exc}") from exc
    except Exception as exc:  # protobuf's DecodeError, and what a parser may raise on junk
        raise MalformedValue(f"value: not a provnet value ({type(exc).__name__}: {exc})") from exc
    if not value.ref:
        raise MalformedValue("value: no value ref")
    if not delivery.heads and not delivery.commitments:
        raise MalformedValue(
            f"value {value.ref!r:.80}: carries no signed statements, so nothing commits"
            " its folded hops"
        )
    # A fold proof may name a head the receiver verified before instead of
    # carrying it; such a head's origin would be missing from ``origins``, and
    # ``receive(origin=…)`` would accept another origin's folds unseen.
    for i, head in enumerate(proven_under):
        if head not in carried:
            raise MalformedValue(
                f"value {value.ref!r:.80}: fold proof {i} is proven under head {head[:12]}…,"
                " which the value does not carry"
            )
    return value


# --------------------------------------------------------------------------- the node


class _Backend(Protocol):
    """What a :class:`Node` calls: a node core in this process, or a node's client."""

    node_id: str
    address: str

    async def append(self, hops: Sequence[bytes]) -> tuple[int, ...]: ...

    async def compact(
        self, ref: str, seqs: Sequence[int], payload: bytes, serve_for_ms: int, deadline_ms: int
    ) -> CommittedCompaction: ...

    async def deliver(self, delivery: Delivery) -> bytes:
        """Hand the value to the node; its signed delivery receipt."""
        ...

    async def rehydrate(
        self, ref: str, witnesses: Sequence[str], expect: Delivery | None
    ) -> RehydrationReport: ...

    async def close(self) -> None: ...


class _Local:
    """A node core in this process; ``running`` None: it has no server."""

    def __init__(self, core: NodeCore, running: RunningNode | None) -> None:
        self.core = core
        self.running = running
        self.node_id = core.node_id
        self.address = running.address if running is not None else ""

    async def append(self, hops: Sequence[bytes]) -> tuple[int, ...]:
        try:
            _, seqs = await self.core.append(hops)
        except (NodeError, ContractError) as exc:
            raise _node_error("append", exc) from exc
        return seqs

    async def compact(
        self, ref: str, seqs: Sequence[int], payload: bytes, serve_for_ms: int, deadline_ms: int
    ) -> CommittedCompaction:
        if self.running is None:
            # Its obligation would name an address where nobody answers.
            raise RequestRejected(
                f"compact {ref!r:.80}: node {self.core.config.name!r} has no server"
                " (listen=None), so it cannot serve the hops it would promise to serve",
                code="FAILED_PRECONDITION",
            )
        try:
            return await self.core.commit_compaction(
                [(ref, seqs, payload)], serve_for_ms=serve_for_ms, deadline_ms=deadline_ms
            )
        except (NodeError, ContractError) as exc:
            raise _node_error(f"compact {ref!r:.80}", exc) from exc

    async def deliver(self, delivery: Delivery) -> bytes:
        # The node verifies every statement before it holds anything.
        return (await self.core.deliver(delivery, signed=True)).receipt

    async def rehydrate(
        self, ref: str, witnesses: Sequence[str], expect: Delivery | None
    ) -> RehydrationReport:
        core = self.core
        try:
            if expect is not None:
                # A later value under the same ref replaces the one held; the
                # caller named this one. (No await between this check and the
                # core's own look-up: nothing can replace it in between.)
                held = core.held(ref).delivery
                if (held.value, held.commitments, held.fold_proofs) != (
                    expect.value,
                    expect.commitments,
                    expect.fold_proofs,
                ):
                    raise RequestRejected(
                        f"rehydrate {ref!r:.80}: node {core.config.name!r} now holds another"
                        " value under this ref",
                        code="FAILED_PRECONDITION",
                    )
            return await core.rehydrate(ref, witnesses)
        except (NodeError, ContractError) as exc:
            raise _node_error(f"rehydrate {ref!r:.80}", exc) from exc

    async def close(self) -> None:
        if self.running is not None:
            await self.running.stop()
        else:
            await self.core.close()


class _Remote:
    def __init__(self, client: NodeClient, node_id: str) -> None:
        self.client = client
        self.node_id = node_id
        self.address = client.address

    async def append(self, hops: Sequence[bytes]) -> tuple[int, ...]:
        try:
            return await self.client.append(hops)
        except CallFailed as exc:
            raise _call_error("append", exc) from exc

    async def compact(
        self, ref: str, seqs: Sequence[int], payload: bytes, serve_for_ms: int, deadline_ms: int
    ) -> CommittedCompaction:
        try:
            return await self.client.commit_compaction(
                [(ref, seqs, payload)], serve_for_ms=serve_for_ms, deadline_ms=deadline_ms
            )
        except CallFailed as exc:
            raise _call_error(f"compact {ref!r:.80}", exc) from exc

    async def deliver(self, delivery: Delivery) -> bytes:
        return (await self.client.deliver(delivery, signed=True)).receipt

    async def rehydrate(
        self, ref: str, witnesses: Sequence[str], expect: Delivery | None
    ) -> RehydrationReport:
        # Deliver.Rehydrate names the value by ref alone: what the node holds under it.
        try:
            return await self.client.rehydrate(ref, witnesses)
        except CallFailed as exc:
            raise _call_error(f"rehydrate {ref!r:.80}", exc) from exc

    async def close(self) -> None:
        await self.client.close()


def _hop_bytes(hop: Mapping[str, Any] | bytes, i: int) -> bytes:
    if isinstance(hop, bytes):
        return hop
    if isinstance(hop, Mapping):
        try:
            return json.dumps(dict(hop), ensure_ascii=False, allow_nan=False).encode()
        except (TypeError, ValueError) as exc:
            raise ValueError(f"append: hop {i} is not JSON: {exc}") from exc
    raise TypeError(f"append: hop {i} must be a mapping or JSON bytes, got {type(hop).__name__}")


class Node:
    """A provnet node, in this process (:func:`open_node`) or running (:func:`connect`)."""

    def __init__(self, backend: _Backend) -> None:
        self._backend = backend
        self._closed = False

    @property
    def node_id(self) -> str:
        """The node's id: the hex of its Ed25519 public key."""
        return self._backend.node_id

    @property
    def address(self) -> str:
        """host:port the node answers on (what its obligations name, for a local node)."""
        return self._backend.address

    async def append(self, hops: Sequence[Mapping[str, Any] | bytes]) -> tuple[int, ...]:
        """Store hops in the node's hop log; returns each hop's sequence number.

        A hop is a JSON object (a mapping, or its JSON bytes) with an integer
        ``step``, which becomes its sequence number; ``origin`` and ``epoch``
        are added by the node. Storing the same hop again is a no-op.
        """
        if isinstance(hops, Mapping | bytes):
            raise TypeError("append: a sequence of hops expected, not one hop")
        return await self._backend.append([_hop_bytes(h, i) for i, h in enumerate(hops)])

    async def compact(
        self,
        ref: str,
        seqs: Sequence[int],
        payload: bytes = b"",
        *,
        serve_for_ms: int = 0,
        deadline_ms: int = 0,
    ) -> Value:
        """Fold the stored hops ``seqs`` into the value ``ref`` with its ``payload``.

        The node makes the hops durable, then signs ONE tree head over the fold
        with its promise to serve them (for ``serve_for_ms``, answering within
        ``deadline_ms``; 0: the node's defaults), and holds the value itself.
        """
        if not isinstance(payload, bytes):
            raise TypeError(f"compact: payload must be bytes, got {type(payload).__name__}")
        committed = await self._backend.compact(ref, seqs, payload, serve_for_ms, deadline_ms)
        delivery = Delivery(
            ref, payload, (), (), "", committed.fold_proofs, (committed.head,), committed.custody
        )
        return _value(delivery)

    async def receive(self, data: bytes, *, origin: str | None = None) -> Received:
        """Verify value bytes and hold the value; ``origin``: the only origin accepted.

        Checked before anything is held: the encoding (:class:`MalformedValue`),
        the origins the statements name against ``origin`` (:class:`WrongOrigin`),
        then by the node: each head's signature by its origin, each fold proof
        under its head, the serving terms unexpired (:class:`ValueRejected`).
        """
        value = _decode(data)
        if origin is not None:
            others = tuple(o for o in value.origins if o != origin)
            if others:
                named = ", ".join(o[:16] + "…" for o in others)
                raise WrongOrigin(
                    f"value {value.ref!r:.80}: statements by {named}, expected only {origin[:16]}…",
                    expected=origin,
                    found=value.origins,
                )
        try:
            receipt = await self._backend.deliver(value._delivery)
        except RequestTooLarge as exc:
            raise MalformedValue(f"value {value.ref!r:.80}: {exc}") from exc
        except StoreError as exc:  # the receiver's own disk, not the value
            raise _node_error(f"receive {value.ref!r:.80}", exc) from exc
        except (NodeError, ContractError) as exc:
            raise ValueRejected(f"value {value.ref!r:.80}: {exc}") from exc
        except CallFailed as exc:
            if exc.code in _UNREACHED:
                raise NodeUnavailable(f"receive {value.ref!r:.80}: {exc}") from exc
            raise ValueRejected(f"value {value.ref!r:.80}: {exc}") from exc
        return Received(value, receipt)

    async def rehydrate(
        self, value: Value | Received | str, *, witnesses: Sequence[str] = ()
    ) -> Rehydrated | Evidence:
        """Demand a held value's folded hops from the origins it names.

        :class:`Rehydrated`: every hop verified against its origin's signed
        root. :class:`Evidence`: an origin failed (wrong bytes, a signed
        refusal, two heads for one slot, or no answer by the deadline: a
        suspicion, ``confirmed`` when the ``witnesses`` — peer names or
        addresses — were not answered either); for a value of several origins, the
        first that failed. :class:`NotRehydrated` when neither (the origin
        said pending, the promise expired, …). Given a :class:`Value`, a local
        node rehydrates that value or refuses (:class:`RequestRejected`) when
        a later one replaced it under its ref; a connected node, and a ref
        alone, rehydrate what is held under the ref.
        """
        if isinstance(value, Received):
            value = value.value
        if isinstance(value, Value):
            ref, expect = value.ref, value._delivery
        elif isinstance(value, str):
            ref, expect = value, None
        else:
            raise TypeError(f"rehydrate: a Value, Received or ref expected, got {value!r:.80}")
        report = await self._backend.rehydrate(ref, tuple(witnesses), expect)
        for o in report.outcomes:
            if o.accuses:
                try:
                    level = _EvidenceRecord.from_bytes(o.evidence).level
                except ContractError as exc:
                    raise RequestRejected(
                        f"rehydrate {ref!r:.80}: the holder's evidence against"
                        f" {o.origin[:16]}… is not an evidence record: {exc}"
                    ) from exc
                return Evidence(
                    ref,
                    o.origin,
                    o.outcome.value,
                    level.value,
                    level is EvidenceLevel.PROOF or o.witness_confirmed,
                    o.detail,
                    o.evidence,
                    o.evidence_path,
                )
        failed = next((o for o in report.outcomes if o.outcome is not Outcome.SERVED), None)
        if failed is not None:
            raise NotRehydrated(
                f"rehydrate {ref!r:.80}: origin {failed.origin[:16]}… answered"
                f" {failed.outcome.value}: {failed.detail}",
                origin=failed.origin,
                outcome=failed.outcome.value,
            )
        return Rehydrated(
            ref, tuple(Hop(h.origin, h.leaf_index, h.hop) for h in report.hops), report.rpcs
        )

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self._backend.close()

    async def __aenter__(self) -> Node:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


@contextlib.asynccontextmanager
async def open_node(
    data_dir: str | Path,
    *,
    name: str = "node",
    listen: str | None = "127.0.0.1:0",
    operator_keys: Sequence[str] = (),
    fault: FaultMode | str = FaultMode.NONE,
    fault_delay_ms: int = 0,
    deadline_ms: int = 0,
    serve_for_ms: int = 0,
) -> AsyncIterator[Node]:
    """A node in this process, stopped when the block ends.

    Its key (``node.key``, made on first use), hop log and evidence files
    live under ``data_dir``; it serves on ``listen`` (port 0: a free one),
    the address its obligations name. ``listen=None``: no server — the node
    receives, rehydrates and keeps evidence, but cannot :meth:`Node.compact`
    (nobody could demand what it promised). ``operator_keys`` (64-hex public keys)
    may drive it from outside as :func:`connect` does. ``fault`` makes it
    misbehave as an origin (``tamper``, ``refuse``, … for tests and
    experiments; ``none`` is the honest node; ``slow`` waits
    ``fault_delay_ms`` before answering; ``crash`` stops answering, and never
    exits this process as a node process would). ``deadline_ms`` and
    ``serve_for_ms``: the terms it promises (0: the node's defaults).
    """
    try:
        mode = FaultMode(fault)
    except ValueError:
        raise ValueError(
            f"open_node: fault {fault!r} is not one of {', '.join(m.value for m in FaultMode)}"
        ) from None
    terms = {k: v for k, v in (("deadline_ms", deadline_ms), ("serve_for_ms", serve_for_ms)) if v}
    try:
        config = NodeConfig(
            name=name,
            data_dir=Path(data_dir),
            listen="127.0.0.1:0" if listen is None else listen,
            operator_keys=tuple(operator_keys),
            fault=mode,
            fault_delay_ms=fault_delay_ms,
            **terms,  # type: ignore[arg-type]
        )
    except ConfigError as exc:
        raise ValueError(f"open_node: {exc}") from exc
    cores: list[NodeCore] = []

    def crash() -> None:
        # Not os._exit, as a node process does: this is the caller's process.
        # The node stops answering, as a crashed peer would.
        for core in cores:
            core.crashed = True

    plan = FaultPlan(mode, fault_delay_ms, crash=crash)
    try:
        if listen is None:
            identity = load_or_create_identity(config.data_dir)
            # the calls it makes (demands, re-asks) are signed with its own key
            transport = GrpcTransport(
                config.max_message_bytes, credentials=ControlCredentials(identity)
            )
            core = await NodeCore.open(config, identity, transport=transport, fault=plan)
            backend = _Local(core, None)
        else:
            running = await start_node(config, fault=plan)
            backend = _Local(running.core, running)
        cores.append(backend.core)
    except (OSError, ContractError, NodeError) as exc:
        raise NodeUnavailable(f"open_node {data_dir}: {exc}") from exc
    node = Node(backend)
    try:
        yield node
    finally:
        await node.close()


async def connect(address: str, operator_key: str | Path, *, timeout: float = 30.0) -> Node:
    """A running node at ``address`` (host:port), driven with ``operator_key``.

    ``operator_key`` is a key file (``provnet keys new``) whose public key the
    node was started with (``--operator-key-file`` or ``PROVNET_OPERATOR_KEYS``);
    every call has ``timeout`` seconds. ``await node.close()`` (or
    ``async with``) when done.
    """
    try:
        identity = load_identity(operator_key)
    except KeyFileError as exc:
        raise ValueError(f"connect: {exc}") from exc
    client = NodeClient(address, ControlCredentials(identity), timeout=timeout)
    try:
        info = await client.info(wait_for_ready=True)
    except CallFailed as exc:
        await client.close()
        raise _call_error(f"connect {address}", exc) from exc
    return Node(_Remote(client, info.node_id))


def verify_evidence(
    evidence: str | Path | bytes | Evidence, *, now_ms: int | None = None
) -> Verdict:
    """Verify an evidence file (a path, its bytes, or an :class:`Evidence`) by itself.

    Everything it cites is verified with nothing but its content and the
    accused origin's key it names, as ``provnet evidence verify`` does;
    ``now_ms`` (default: now) decides whether an ``unanswered`` deadline
    passed. A file that does not verify is :class:`InvalidEvidence`, naming why.
    """
    if isinstance(evidence, Evidence):
        data = evidence.data
        where = f"evidence against {evidence.origin[:16]}…"
    elif isinstance(evidence, bytes):
        data = evidence
        where = "evidence"
    else:
        path = Path(evidence)
        where = str(path)
        try:
            with path.open("rb") as fh:
                data = fh.read(MAX_DOCUMENT_BYTES + 1)
        except OSError as exc:
            raise InvalidEvidence(f"{where}: cannot read ({exc.strerror})") from exc
    if len(data) > MAX_DOCUMENT_BYTES:
        raise InvalidEvidence(f"{where}: larger than {MAX_DOCUMENT_BYTES} bytes")
    try:
        record = _EvidenceRecord.from_bytes(data)
    except EncodingError as exc:
        raise InvalidEvidence(f"{where}: not an evidence file: {exc}") from exc
    now = int(time.time() * 1000) if now_ms is None else now_ms
    try:
        verdict = _verify_evidence(record, now=now)
    except ContractError as exc:
        raise InvalidEvidence(
            f"{where}: {record.kind.value} against {record.accused[:16]}… does not verify: {exc}"
        ) from exc
    return Verdict._of(verdict)
