"""What crosses the boundary, and how it is metered (boundary runner internals).

- **Value encoding.** A delivered value is the JSON of exactly what a gate
  reads of it (spec §6): the five effective scores, ``tainted_by``, the
  visible hops, the folded prefix (counts and pointers) and the prose blob.
  Floats are written with ``repr`` (shortest round trip), so the holder
  decodes the very scores the origin decided on: decisions can be equal
  bit for bit. ground_truth ships its whole lineage this way ("ship
  everything"); the structural arms ship their compacted lineage plus the
  fold proofs and signed heads in the delivery envelope.
- **Hop bytes.** The origin appends a hop as its spec fields
  (:func:`hop_fields`); the node stores the RFC 8785 bytes with ``origin``
  and ``epoch`` added. A served hop is parsed back (:func:`hop_from_served`)
  only after the holder client verified it against the signed root.
- **Metering.** :class:`WireMeter` counts RPCs and protobuf-encoded request
  and response bytes per *tag* (what the runner is doing: one arm's
  delivery, one arm's rehydration, the origin's commits) through
  :class:`MeteredTransport`, a :class:`nodes.transport.Transport` wrapper.
  A demand's answers come sized by the transport that carried them
  (:class:`nodes.wire.SizedAnswers`: over gRPC the response's length as
  received, in memory its encoding's size), so they are not sized again.
  :class:`CryptoMeter` counts Ed25519 signatures and verifications, as
  :mod:`contracts.identity` reports them to its observer
  (:func:`contracts.identity.observe_signatures`), and the leaves hashed into
  Merkle roots by wrapping the Merkle entry points while the run is active
  (restored on exit), and times both. Operations are sequential, so a plain
  "current tag" attributes work done on the serving side of a gRPC call too.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import orjson

from contracts.identity import observe_signatures
from harness.events import Hop
from harness.gates import GateView
from harness.lineage import FoldedPrefix, hop_fields
from nodes import wire
from nodes.attester import AttestationAnswer, AttestationAsk, AttestCarrier
from nodes.custodian import CustodyTransport
from nodes.messages import Acknowledgement, WitnessReply
from nodes.transport import Answer, CallFailed, ChallengeResult, Delivery, Transport

__all__ = [
    "CryptoMeter",
    "HopCodec",
    "MeteredTransport",
    "TagCounts",
    "WireMeter",
    "decode_value",
    "encode_value",
    "hop_fields",
    "hop_from_served",
]

_VALUE_KEYS = frozenset({"arm", "value_id", "scores", "tainted_by", "visible", "folded", "blob"})


def _hop_doc(hop: Hop) -> dict[str, Any]:
    # Deltas as pairs: their order is part of the hop as the arms applied it.
    return {
        "hop_id": hop.hop_id,
        "step": hop.step,
        "op": hop.op,
        "axis_deltas": [[a, f] for a, f in hop.axis_deltas],
        "taints_added": list(hop.taints_added),
        "parent_hop_ids": list(hop.parent_hop_ids),
    }


def _str_tuple(value: object, what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise ValueError(f"{what}: expected a list of strings, got {value!r:.80}")
    return tuple(value)


def _int(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{what}: expected an integer, got {value!r:.80}")
    return value


def _number(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{what}: expected a number, got {value!r:.80}")
    return float(value)


def _hop_from_doc(doc: object, what: str) -> Hop:
    if not isinstance(doc, dict):
        raise ValueError(f"{what}: expected an object, got {doc!r:.80}")
    deltas = doc.get("axis_deltas")
    if isinstance(deltas, dict):
        pairs = tuple((str(a), _number(f, f"{what}.axis_deltas.{a}")) for a, f in deltas.items())
    elif isinstance(deltas, list):
        pairs = tuple(
            (str(p[0]), _number(p[1], f"{what}.axis_deltas"))
            for p in deltas
            if isinstance(p, list) and len(p) == 2
        )
        if len(pairs) != len(deltas):
            raise ValueError(f"{what}.axis_deltas: expected [axis, factor] pairs")
    else:
        raise ValueError(f"{what}.axis_deltas: expected an object or pairs, got {deltas!r:.80}")
    hop_id, op = doc.get("hop_id"), doc.get("op")
    if not isinstance(hop_id, str) or not isinstance(op, str):
        raise ValueError(f"{what}: hop_id and op must be strings")
    return Hop(
        hop_id,
        _int(doc.get("step"), f"{what}.step"),
        op,
        pairs,
        _str_tuple(doc.get("taints_added"), f"{what}.taints_added"),
        _str_tuple(doc.get("parent_hop_ids"), f"{what}.parent_hop_ids"),
    )


def _hop_fast(doc: object) -> Hop | None:
    """The common, well-formed hop document as a :class:`Hop`; None for anything else.

    Exactly what :func:`_hop_from_doc` returns for a document whose fields
    all have their plain types (strings, an int step, ``[axis, float]``
    pairs); every other document (a dict of deltas, an int factor, a missing
    or mistyped field) returns None and goes through the checking parser,
    which converts or names the bad field as before.
    """
    if type(doc) is not dict:
        return None
    hop_id = doc.get("hop_id")
    step = doc.get("step")
    op = doc.get("op")
    deltas = doc.get("axis_deltas")
    taints = doc.get("taints_added")
    parents = doc.get("parent_hop_ids")
    if not (
        type(hop_id) is str
        and type(step) is int
        and type(op) is str
        and type(deltas) is list
        and type(taints) is list
        and type(parents) is list
    ):
        return None
    pairs: list[tuple[str, float]] = []
    for p in deltas:
        if type(p) is not list or len(p) != 2 or type(p[0]) is not str or type(p[1]) is not float:
            return None
        pairs.append((p[0], p[1]))
    for t in taints:
        if type(t) is not str:
            return None
    for t in parents:
        if type(t) is not str:
            return None
    return Hop(hop_id, step, op, tuple(pairs), tuple(taints), tuple(parents))


def hop_from_served(fields: dict[str, Any], what: str) -> Hop:
    """A verified served hop (parsed canonical JSON) as the harness's :class:`Hop`."""
    fast = _hop_fast(fields)
    return fast if fast is not None else _hop_from_doc(fields, what)


_DUMPS = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode


class HopCodec:
    """Per-run memo of each hop's JSON fragment, keyed by hop id (unique within a run).

    A value carries the same visible hops decision after decision, and
    ground_truth its whole lineage: each hop is serialised once per run.
    Bounded: cleared when full. (Decoding is not memoised: the holder
    parses every value it receives from its bytes.)
    """

    __slots__ = ("_fragments", "limit")

    def __init__(self, limit: int = 65_536) -> None:
        self.limit = limit
        self._fragments: dict[str, str] = {}

    def fragment(self, hop: Hop) -> str:
        text = self._fragments.get(hop.hop_id)
        if text is None:
            if len(self._fragments) >= self.limit:
                self._fragments.clear()
            text = self._fragments[hop.hop_id] = _DUMPS(_hop_doc(hop))
        return text


def encode_value(
    arm: str, value_id: int, view: GateView, blob: str | None, codec: HopCodec | None = None
) -> bytes:
    """The delivered value: everything a gate reads of it (see module docstring).

    With ``codec`` the visible hops' JSON fragments are memoised; the bytes
    are the same either way (the keys are sorted and ``visible`` is the last
    one, so the fragments are spliced in where ``json.dumps`` puts them).
    """
    folded = view.folded
    doc: dict[str, Any] = {
        "arm": arm,
        "value_id": value_id,
        "scores": [float(x) for x in view.scores],
        "tainted_by": sorted(view.tainted_by),
        "visible": [] if codec is not None else [_hop_doc(h) for h in view.visible],
        "folded": None
        if folded is None
        else {
            "n_hops_folded": folded.n_hops_folded,
            "op_counts": [[op, n] for op, n in folded.op_counts],
            "n_taints_folded": folded.n_taints_folded,
            "folded_hop_ids": list(folded.folded_hop_ids),
        },
        "blob": blob,
    }
    if codec is None:
        return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode("utf-8")
    head = _DUMPS(doc)
    if not head.endswith('"visible":[]}'):
        raise AssertionError("value encoding: 'visible' must be the last key")
    hops = ",".join([codec.fragment(h) for h in view.visible])
    return f"{head[:-2]}{hops}]}}".encode()


@dataclass(frozen=True, slots=True)
class DecodedValue:
    arm: str
    value_id: int
    view: GateView


def decode_value(data: bytes) -> DecodedValue:
    """Parse a delivered value back into the :class:`GateView` the holder's gates read.

    Raises ``ValueError`` naming the field that is missing or malformed.
    """
    try:
        # orjson: the same documents as json.loads for what encode_value writes
        # (floats parsed to the same doubles), about twice as fast; stricter on
        # the rest (invalid UTF-8, lone surrogates, NaN), which is not JSON either.
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"delivered value is not JSON: {exc}") from exc
    if not isinstance(doc, dict) or set(doc) != _VALUE_KEYS:
        got = sorted(doc) if isinstance(doc, dict) else type(doc).__name__
        raise ValueError(f"delivered value: expected keys {sorted(_VALUE_KEYS)}, got {got}")
    scores = doc["scores"]
    if not isinstance(scores, list) or len(scores) != 5:
        raise ValueError(f"delivered value: scores must be 5 numbers, got {scores!r:.80}")
    visible = doc["visible"]
    if not isinstance(visible, list):
        raise ValueError("delivered value: visible must be a list of hops")
    hops: list[Hop] = []
    for i, h in enumerate(visible):
        hop = _hop_fast(h)
        hops.append(hop if hop is not None else _hop_from_doc(h, f"visible[{i}]"))
    folded_doc = doc["folded"]
    folded: FoldedPrefix | None = None
    if folded_doc is not None:
        if not isinstance(folded_doc, dict):
            raise ValueError("delivered value: folded must be an object or null")
        counts = folded_doc.get("op_counts")
        if not isinstance(counts, list):
            raise ValueError("delivered value: folded.op_counts must be a list")
        folded = FoldedPrefix(
            _int(folded_doc.get("n_hops_folded"), "folded.n_hops_folded"),
            tuple((str(p[0]), _int(p[1], "folded.op_counts")) for p in counts),
            _int(folded_doc.get("n_taints_folded"), "folded.n_taints_folded"),
            _str_tuple(folded_doc.get("folded_hop_ids"), "folded.folded_hop_ids"),
        )
    blob = doc["blob"]
    if blob is not None and not isinstance(blob, str):
        raise ValueError("delivered value: blob must be a string or null")
    view = GateView(
        [_number(x, "scores") for x in scores],
        set(_str_tuple(doc["tainted_by"], "tainted_by")),
        hops,
        folded,
        folded is not None or blob is not None,
    )
    return DecodedValue(str(doc["arm"]), _int(doc["value_id"], "value_id"), view)


# --------------------------------------------------------------------------- metering


@dataclass(slots=True)
class TagCounts:
    """What one tag (arm × phase) cost: calls, wire bytes, crypto operations and time."""

    rpcs: int = 0
    request_bytes: int = 0
    response_bytes: int = 0
    sign_ops: int = 0
    verify_ops: int = 0
    sig_seconds: float = 0.0
    hash_calls: int = 0
    hash_leaves: int = 0
    hash_seconds: float = 0.0
    failed_rpcs: int = 0
    #: hop bytes strings that arrived in demand answers (what crossed the wire)
    hops_received: int = 0


class WireMeter:
    """Counters per tag; ``tag`` is what the runner is doing right now."""

    def __init__(self) -> None:
        self.tag: tuple[str, str] = ("", "")
        self.by_tag: dict[tuple[str, str], TagCounts] = {}
        self.calls_by_node: dict[tuple[str, str], int] = {}

    def counts(self, tag: tuple[str, str] | None = None) -> TagCounts:
        key = self.tag if tag is None else tag
        c = self.by_tag.get(key)
        if c is None:
            c = self.by_tag[key] = TagCounts()
        return c

    @contextmanager
    def tagged(self, tag: tuple[str, str]) -> Iterator[TagCounts]:
        previous = self.tag
        self.tag = tag
        try:
            yield self.counts(tag)
        finally:
            self.tag = previous


class MeteredTransport:
    """A :class:`~nodes.transport.Transport` that counts every call it carries.

    Bytes are the protobuf encodings of the request and response messages
    (what gRPC frames carry, without HTTP/2 framing), computed the same way
    for the in-memory and the gRPC transport.
    """

    def __init__(self, inner: Transport, meter: WireMeter, node: str) -> None:
        self.inner = inner
        self.meter = meter
        self.node = node

    def _count(
        self, method: str, request: int, response: int, failed: bool = False, hops: int = 0
    ) -> None:
        c = self.meter.counts()
        c.rpcs += 1
        c.hops_received += hops
        c.request_bytes += request
        c.response_bytes += response
        if failed:
            c.failed_rpcs += 1
        key = (self.node, method)
        self.meter.calls_by_node[key] = self.meter.calls_by_node.get(key, 0) + 1

    async def request_attestation(
        self, address: str, ask: AttestationAsk, timeout: float
    ) -> AttestationAnswer:
        """``Attest.Request`` (the inner transport must carry it)."""
        inner = self.inner
        if not isinstance(inner, AttestCarrier):
            raise CallFailed("UNIMPLEMENTED", "transport does not carry Attest.Request", address)
        req = wire.attest_request_size(ask)
        try:
            answer = await inner.request_attestation(address, ask, timeout)
        except Exception:
            self._count("AttestRequest", req, 0, failed=True)
            raise
        self._count("AttestRequest", req, wire.attest_response_size(answer))
        return answer

    async def _serve_demand(
        self, req: int, call: Awaitable[list[Answer]], method: str = "Demand"
    ) -> list[Answer]:
        """One ``Serve.Demand`` (signed demands) or ``Serve.Ask`` call (unsigned asks),
        counted as such."""
        try:
            answers = await call
        except Exception:
            self._count(method, req, 0, failed=True)
            raise
        # Sized by the inner transport when it could (wire.SizedAnswers), not again.
        resp = wire.demand_response_size(answers)
        self._count(method, req, resp, hops=sum([len(a.hops) for a in answers]))
        return answers

    async def demand(self, address: str, demands: Sequence[bytes], timeout: float) -> list[Answer]:
        return await self._serve_demand(
            wire.demand_request_size(demands), self.inner.demand(address, demands, timeout)
        )

    async def ask(self, address: str, asks: bytes, timeout: float) -> list[Answer]:
        return await self._serve_demand(
            wire.ask_frame_size(asks), self.inner.ask(address, asks, timeout), "Ask"
        )

    async def demand_stream(self, address: str, demand: bytes, timeout: float) -> Answer:
        req = wire.stream_request_size(demand)
        try:
            answer = await self.inner.demand_stream(address, demand, timeout)
        except Exception:
            self._count("DemandStream", req, 0, failed=True)
            raise
        resp = wire.stream_answer_size(answer)
        self._count("DemandStream", req, resp, hops=len(answer.hops))
        return answer

    async def challenge(
        self,
        address: str,
        *,
        commitment: bytes,
        obligation: bytes,
        demand: bytes,
        origin_address: str,
        timeout: float,
    ) -> ChallengeResult:
        req = wire.challenge_request_size(
            commitment=commitment,
            obligation=obligation,
            demand=demand,
            origin_address=origin_address,
        )
        try:
            result = await self.inner.challenge(
                address,
                commitment=commitment,
                obligation=obligation,
                demand=demand,
                origin_address=origin_address,
                timeout=timeout,
            )
        except Exception:
            self._count("Challenge", req, 0, failed=True)
            raise
        resp = wire.challenge_response_size(result)
        self._count("Challenge", req, resp)
        return result

    async def deliver(
        self, address: str, delivery: Delivery, timeout: float, signed: bool = False
    ) -> Acknowledgement:
        req = wire.deliver_request_size(delivery, signed=signed)
        try:
            ack = await self.inner.deliver(address, delivery, timeout, signed)
        except Exception:
            self._count("Deliver", req, 0, failed=True)
            raise
        self._count("Deliver", req, wire.deliver_response_size(ack))
        return ack

    async def take_custody(
        self, address: str, head: bytes, fold_proofs: Sequence[bytes], timeout: float
    ) -> tuple[bytes, ...]:
        """``Custody.Take``, counted as ``Take`` (nodes.custodian.CustodyTransport)."""
        inner = self.inner
        if not isinstance(inner, CustodyTransport):
            raise CallFailed("UNIMPLEMENTED", "this transport cannot reach custodians", address)
        req = wire.message_size(wire.take_custody_request(head, fold_proofs))
        try:
            statements = await inner.take_custody(address, head, fold_proofs, timeout)
        except Exception:
            self._count("Take", req, 0, failed=True)
            raise
        self._count("Take", req, wire.message_size(wire.take_custody_response(statements)))
        return statements

    async def add_checkpoint(self, address: str, body: bytes, timeout: float) -> WitnessReply:
        """``Witness.AddCheckpoint``, counted as ``AddCheckpoint`` (nodes.cosigner)."""
        call = getattr(self.inner, "add_checkpoint", None)
        if call is None:
            raise CallFailed("UNIMPLEMENTED", "this transport cannot reach witnesses", address)
        req = wire.message_size(wire.add_checkpoint_request(body))
        try:
            reply: WitnessReply = await call(address, body, timeout)
        except Exception:
            self._count("AddCheckpoint", req, 0, failed=True)
            raise
        self._count("AddCheckpoint", req, wire.message_size(wire.add_checkpoint_response(reply)))
        return reply

    async def close(self) -> None:
        await self.inner.close()


class _TagSignatures:
    """Adds each Ed25519 operation to the meter's current tag."""

    __slots__ = ("_lock", "meter")

    def __init__(self, meter: WireMeter) -> None:
        self.meter = meter
        # the observer is called on whichever thread signed; keep the sums whole
        self._lock = threading.Lock()

    def signed(self, seconds: float) -> None:
        with self._lock:
            c = self.meter.counts()
            c.sign_ops += 1
            c.sig_seconds += seconds

    def verified(self, seconds: float) -> None:
        with self._lock:
            c = self.meter.counts()
            c.verify_ops += 1
            c.sig_seconds += seconds


class CryptoMeter:
    """Counts and times signatures, verifications and Merkle hashing while active.

    Signatures and verifications: the observer of :mod:`contracts.identity`
    (every Ed25519 operation of the project reports to it). Merkle hashing:
    wraps ``merkle_root`` / ``leaf_hashes`` wherever a loaded
    ``contracts``/``nodes`` module bound them. Use as a context manager; the
    observer is removed and the originals are restored on exit, also on error.
    """

    _active = False

    def __init__(self, meter: WireMeter) -> None:
        self.meter = meter
        self._restore: list[tuple[object, str, object]] = []
        self._signatures = observe_signatures(_TagSignatures(meter))

    def _patch(self, owner: object, name: str, make: Callable[[Any], Any]) -> None:
        original = getattr(owner, name)
        self._restore.append((owner, name, original))
        setattr(owner, name, make(original))

    def __enter__(self) -> CryptoMeter:
        if CryptoMeter._active:
            raise RuntimeError("a CryptoMeter is already active in this process")
        import contracts.merkle
        import contracts.serve
        import nodes.store  # noqa: F401

        meter = self.meter
        perf = time.perf_counter

        depth = [0]  # a Merkle entry point calling another is one operation, not two

        def hasher(original: Any) -> Any:
            def hashed(leaves: Any, *args: Any, **kwargs: Any) -> Any:
                if depth[0]:
                    return original(leaves, *args, **kwargs)
                items = leaves if isinstance(leaves, list | tuple) else list(leaves)
                depth[0] += 1
                start = perf()
                try:
                    return original(items, *args, **kwargs)
                finally:
                    depth[0] -= 1
                    c = meter.counts()
                    c.hash_calls += 1
                    c.hash_leaves += len(items)
                    c.hash_seconds += perf() - start

            return hashed

        self._signatures.__enter__()
        try:
            # Every module of contracts/nodes that bound a Merkle entry point by
            # name (``from contracts.merkle import merkle_root``), and the module
            # itself for callers that look it up at call time.
            targets = {contracts.merkle.merkle_root, contracts.merkle.leaf_hashes}
            for mod_name, module in sorted(sys.modules.items()):
                if module is None or not mod_name.startswith(("contracts", "nodes")):
                    continue
                for attr in ("merkle_root", "leaf_hashes"):
                    if getattr(module, attr, None) in targets:
                        self._patch(module, attr, hasher)
        except BaseException:
            self._undo()
            raise
        CryptoMeter._active = True
        return self

    def _undo(self) -> None:
        try:
            while self._restore:
                owner, name, original = self._restore.pop()
                setattr(owner, name, original)
        finally:
            self._signatures.__exit__(None, None, None)

    def __exit__(self, *exc: object) -> None:
        self._undo()
        CryptoMeter._active = False
