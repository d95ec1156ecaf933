"""The simulation's adversaries beyond faulty origins, and the cell's ledger of evidence.

A cell's faulty agents all collude (they know each other's node ids):

- **faulty origins** run a fault mode of :mod:`nodes.faults` (the node core's own);
- a **lying holder** or **lying relay** (an agent that holds the value) keeps
  deciding with the real client, and after each rehydration tries to frame each
  *faithful* origin of the value, once per run:

  * *silence it never met*: a second :class:`nodes.client.Holder` on the liar's
    key whose demands to the origin are never sent, so the real client waits
    out the deadline, challenges the cell's witness (a real ``Evidence.Challenge``)
    and builds the suspicion it would build for real silence — a faithful
    witness's answer clears it, a colluding witness confirms it;
  * *a served receipt called a refusal or bad data*: a real signed demand
    (another :class:`~nodes.client.Holder`, signed asks only), whose genuine
    receipt is filed as ``refused`` and as ``bad_data`` evidence, and once more
    with one byte of the receipt flipped;
  * *two heads called a split view*: the two latest distinct heads of the
    origin the liar has held, filed as ``split_view`` evidence;

- a **lying witness** answers a challenge about a colluder with no report (it
  covers the faulty origin: the suspicion stays unconfirmed) and about a
  faithful origin with the real witness code whose own demand is never sent
  (it frames: it signs ``unanswered`` once the demand is due).

Every record a liar files is judged by :func:`contracts.evidence.verify_evidence`
— what any node that receives evidence runs — so a forged *proof* against a
faithful agent counted here is one a verifier would accept (the claim under
test is that there is none). :class:`CellLedger` also stamps every rehydration
outcome with its virtual time (time to evidence, time to clear) and reads each
node's storage before the nodes close.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from contracts.envelope import Envelope, EnvelopeSignature
from contracts.errors import ContractError
from contracts.evidence import Evidence, EvidenceKind, cite_head, verify_evidence
from contracts.head_note import is_head_note, parse_head
from contracts.signed import open_statement
from contracts.statements import Obligation, Receipt
from harness.boundary.play import Runner
from harness.boundary.topology import NodeOps, NodeRef, NodeSpec, Topology
from harness.simulate.network import Availability, address_name
from nodes.attester import AttestationAnswer, AttestationAsk
from nodes.client import HeldFold, Holder
from nodes.errors import UnknownValue
from nodes.messages import (
    Acknowledgement,
    Answer,
    ChallengeResult,
    CommittedCompaction,
    Delivery,
    Outcome,
    RehydrationReport,
)
from nodes.services import NodeCore
from nodes.transport import CallFailed, LocalNode, Transport

__all__ = ["LIAR", "CellLedger", "Forgery", "Stamp"]

_R = TypeVar("_R")

#: The fault label of a lying holder, relay or witness (origins carry their fault mode).
LIAR = "liar"

#: Kinds that prove (a suspicion is ``unanswered``).
_PROOFS = frozenset(
    {
        EvidenceKind.BAD_DATA,
        EvidenceKind.REFUSED,
        EvidenceKind.EQUIVOCATION,
        EvidenceKind.SPLIT_VIEW,
    }
)


@dataclass(frozen=True, slots=True)
class Stamp:
    """One origin's outcome of one rehydration, at its virtual time."""

    t: float
    origin: str
    outcome: str
    #: the holder recorded evidence (a proof, or a witness-confirmed suspicion)
    recorded: bool
    #: the origin was up (churn) when the rehydration began
    up: bool = True


@dataclass(frozen=True, slots=True)
class Forgery:
    """One record a liar filed, and how a verifier judged it."""

    t: float
    liar: str
    accused: str
    kind: str
    #: "proof" (accepted as proof), "suspicion" (accepted, confirmed), "rejected"
    verdict: str
    reason: str


class _Silent:
    """A transport whose demands to ``targets`` (node names) are never sent: the
    caller waits out its timeout and sees silence. Everything else goes through."""

    def __init__(self, inner: Transport, targets: Callable[[], set[str]]) -> None:
        self.inner = inner
        self._targets = targets

    async def _silent(self, address: str, timeout: float, call: Callable[[], Awaitable[_R]]) -> _R:
        if address_name(address) in self._targets():
            await asyncio.sleep(timeout)
            raise CallFailed("DEADLINE_EXCEEDED", "deadline exceeded", address)
        return await call()

    async def demand(self, address: str, demands: Sequence[bytes], timeout: float) -> list[Answer]:
        return await self._silent(
            address, timeout, lambda: self.inner.demand(address, demands, timeout)
        )

    async def ask(self, address: str, asks: bytes, timeout: float) -> list[Answer]:
        return await self._silent(address, timeout, lambda: self.inner.ask(address, asks, timeout))

    async def demand_stream(self, address: str, demand: bytes, timeout: float) -> Answer:
        return await self._silent(
            address, timeout, lambda: self.inner.demand_stream(address, demand, timeout)
        )

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
        return await self.inner.challenge(
            address,
            commitment=commitment,
            obligation=obligation,
            demand=demand,
            origin_address=origin_address,
            timeout=timeout,
        )

    async def deliver(
        self, address: str, delivery: Delivery, timeout: float, signed: bool = False
    ) -> Acknowledgement:
        return await self.inner.deliver(address, delivery, timeout, signed)

    async def request_attestation(
        self, address: str, ask: AttestationAsk, timeout: float
    ) -> AttestationAnswer:
        request = getattr(self.inner, "request_attestation")  # noqa: B009 — optional method
        out: AttestationAnswer = await request(address, ask, timeout)
        return out

    async def close(self) -> None:  # the liar's own node closes the inner transport
        return None


class _LyingWitness:
    """What answers for a lying witness: its core, except for challenges (module doc)."""

    def __init__(self, core: NodeCore, ledger: CellLedger) -> None:
        self._core = core
        self._ledger = ledger
        self._framer = Holder(
            core.identity,
            _Silent(core.transport, ledger.honest_names),
            clock=core.clock,
            cache=False,
        )

    def __getattr__(self, name: str) -> Any:
        return getattr(self._core, name)

    @property
    def crashed(self) -> bool:
        return self._core.crashed

    async def challenge(
        self,
        *,
        commitment: bytes,
        obligation: bytes,
        demand: bytes,
        origin_address: str,
        deadline: float | None = None,
    ) -> ChallengeResult:
        if address_name(_endpoint(obligation)) not in self._ledger.honest_names():
            return ChallengeResult(b"", False, b"", b"")  # a colluder: no report, no confirmation
        self._ledger.witness_lies += 1
        return await self._framer.witness(
            commitment, obligation, demand, origin_address, deadline=deadline
        )


def _endpoint(obligation: bytes) -> str:
    """The endpoint an obligation (or signed head) names, unverified ('' if none)."""
    try:
        if is_head_note(obligation):
            return parse_head(obligation).statement.endpoints[0]
        o = open_statement(obligation, Obligation)
        return o.statement.endpoints[0]
    except (ContractError, ValueError, IndexError):
        return ""


@dataclass(slots=True)
class CellLedger:
    """One cell's observer (:class:`harness.boundary.runner.SliceObserver`): the liars,
    the outcomes stamped with virtual time, the forgeries judged, storage per node."""

    #: node name -> fault label, for the cell's faulty agents (all colluding)
    faulty: dict[str, str]
    #: node name -> when it is down (churn), to tell which rehydrations could reach it
    availability: dict[str, Availability] = field(default_factory=dict)
    stamps: list[Stamp] = field(default_factory=list)
    forgeries: list[Forgery] = field(default_factory=list)
    #: per node: (hops, statements, evidence records, evidence bytes) stored at the end
    storage: dict[str, tuple[int, int, int, int]] = field(default_factory=dict)
    witness_lies: int = 0
    _names: set[str] = field(default_factory=set)
    _framed: set[tuple[str, str, str]] = field(default_factory=set)
    _heads: dict[tuple[str, str], list[bytes]] = field(default_factory=dict)

    # ------------------------------------------------------------- SliceObserver

    def serve_as(self, spec: NodeSpec, core: NodeCore) -> LocalNode:
        self._names.add(spec.name)
        if self.faulty.get(spec.name) == LIAR and spec.role.value == "witness":
            return _LyingWitness(core, self)
        return core

    def started(self, topo: Topology, runner: Runner) -> None:
        runner.ops = _WatchedOps(runner.ops, self, topo, runner)

    async def finishing(self, topo: Topology, runner: Runner) -> None:
        for node in topo.nodes:
            self.storage[node.name] = await _storage(node.core)

    # ------------------------------------------------------------- who is who

    def honest_names(self) -> set[str]:
        return self._names - set(self.faulty)

    def liars_holding(self, topo: Topology) -> list[str]:
        return [n.name for n in (*topo.relays, topo.holder) if self.faulty.get(n.name) == LIAR]

    # ------------------------------------------------------------- forging

    async def forge(self, topo: Topology, runner: Runner, value_ref: str) -> None:
        """Each lying holder or relay of ``value_ref`` frames each faithful origin of it
        (once per run): framed silence, misfiled receipts, a split view of two heads."""
        run = runner.context[0]
        witnesses = [topo.witness.address] if topo.witness is not None else []
        honest = self.honest_names()
        for liar in self.liars_holding(topo):
            core = next(n.core for n in topo.nodes if n.name == liar)
            try:
                held = core.held(value_ref)
            except UnknownValue:
                continue  # a relay that forwarded this value without keeping it
            by_origin: dict[str, list[HeldFold]] = {}
            for f in held.folds:
                by_origin.setdefault(f.commitment.statement.origin, []).append(f)
            for origin_id, folds in by_origin.items():
                name = topo.name_of(origin_id)
                if name not in honest or (liar, name, run) in self._framed:
                    continue
                self._framed.add((liar, name, run))
                with topo.meter.tagged(("liar", "forge")):
                    await self._frame(core, liar, name, value_ref, folds, witnesses)
                    await self._misfile(core, liar, name, value_ref, folds)
                self._split(core, liar, name, origin_id, folds)

    async def _frame(
        self,
        core: NodeCore,
        liar: str,
        name: str,
        value_ref: str,
        folds: list[HeldFold],
        witnesses: list[str],
    ) -> None:
        filed: list[bytes] = []

        async def keep(kind: str, accused: str, body: bytes, path: str) -> None:
            filed.append(body)

        framer = Holder(
            core.identity,
            _Silent(core.transport, lambda: {name}),
            clock=core.clock,
            cache=False,
            unsigned_first=False,
            on_evidence=keep,
        )
        report = await framer.rehydrate(value_ref, folds, witnesses=witnesses)
        for body in filed:
            self._judge(core, liar, name, body)
        if not filed:  # the liar's own client would not record it: a witness cleared it
            detail = "; ".join(o.detail for o in report.outcomes)
            self._note(liar, name, "unanswered", "rejected", f"not recordable: {detail}"[:200])

    async def _misfile(
        self, core: NodeCore, liar: str, name: str, value_ref: str, folds: list[HeldFold]
    ) -> None:
        receipts: list[tuple[bytes, bytes]] = []

        async def on_receipt(origin: str, receipt: bytes, demand: bytes) -> int:
            receipts.append((receipt, demand))
            return 0

        asker = Holder(
            core.identity,
            core.transport,
            clock=core.clock,
            cache=False,
            unsigned_first=False,
            batch=False,
            on_receipt=on_receipt,
        )
        await asker.rehydrate(value_ref, folds)
        by_key = {(f.obligation.digest, f.commitment.digest): f for f in folds}
        for receipt, demand in receipts[:1]:
            try:
                r = open_statement(receipt, Receipt)
            except ContractError:
                continue
            fold = by_key.get((r.statement.obligation, r.statement.commitment))
            if fold is None:
                continue
            genuine = Envelope.from_bytes(receipt)
            # the genuine receipt under a signature the origin never made
            relabelled = Envelope(
                genuine.payload,
                genuine.payload_type,
                tuple(
                    EnvelopeSignature(g.keyid, bytes([g.sig[0] ^ 0x01]) + g.sig[1:])
                    for g in genuine.signatures
                ),
            ).to_bytes()
            for kind, body in (
                (EvidenceKind.REFUSED, receipt),
                (EvidenceKind.BAD_DATA, receipt),
                (EvidenceKind.REFUSED, relabelled),
            ):
                try:
                    e = Evidence(
                        kind=kind,
                        accused=fold.commitment.statement.origin,
                        commitment=fold.commitment.envelope,
                        obligation=fold.obligation.envelope,
                        demand=Envelope.from_bytes(demand),
                        receipt=Envelope.from_bytes(body),
                        reported_at=core.now_ms(),
                    )
                    if fold.fold is not None:
                        e = cite_head(e, fold.fold)
                except (ContractError, ValueError) as exc:
                    self._note(liar, name, kind.value, "rejected", f"cannot be built: {exc}")
                    continue
                self._judge(core, liar, name, e.to_bytes())

    def _split(
        self, core: NodeCore, liar: str, name: str, origin_id: str, folds: list[HeldFold]
    ) -> None:
        heads = self._heads.setdefault((liar, name), [])
        for f in folds:
            if f.fold is not None and f.obligation_bytes not in heads:
                heads.append(f.obligation_bytes)
        if len(heads) < 2:
            return
        a, b = heads[-2], heads[-1]
        del heads[:-1]
        try:
            e = Evidence(
                kind=EvidenceKind.SPLIT_VIEW,
                accused=origin_id,
                commitment=a,
                conflicting=b,
                reported_at=core.now_ms(),
                proof={"path": []},
            )
        except (ContractError, ValueError, TypeError) as exc:
            self._note(liar, name, "split_view", "rejected", f"cannot be built: {exc}")
            return
        self._judge(core, liar, name, e.to_bytes())

    def _judge(self, core: NodeCore, liar: str, name: str, body: bytes) -> None:
        try:
            verdict = verify_evidence(body, now=core.now_ms())
        except ContractError as exc:
            kind = _kind_of(body)
            self._note(liar, name, kind, "rejected", str(exc)[:200])
            return
        if not verdict.accuses:
            self._note(liar, name, verdict.kind.value, "rejected", verdict.reason[:200])
        elif verdict.kind in _PROOFS:
            self._note(liar, name, verdict.kind.value, "proof", verdict.reason[:200])
        else:
            self._note(liar, name, verdict.kind.value, "suspicion", verdict.reason[:200])

    def _note(self, liar: str, name: str, kind: str, verdict: str, reason: str) -> None:
        t = asyncio.get_running_loop().time()
        self.forgeries.append(Forgery(t, liar, name, kind, verdict, reason))


def _kind_of(body: bytes) -> str:
    try:
        return Evidence.from_bytes(body).kind.value
    except (ContractError, ValueError):
        return "unparsable"


async def _storage(core: NodeCore) -> tuple[int, int, int, int]:
    """(hops, statements, evidence records, evidence bytes) in a node's store."""
    store = core.store
    async with store._read("simulation storage") as db:
        hops = next(iter(await db.execute_fetchall("SELECT COUNT(*) FROM hops")))[0]
        statements = 0
        for table in ("commitments", "obligations", "heads", "head_folds"):
            q = f"SELECT COUNT(*) FROM {table}"
            statements += next(iter(await db.execute_fetchall(q)))[0]
        ev = list(
            await db.execute_fetchall(
                "SELECT COUNT(*), COALESCE(SUM(LENGTH(body)), 0) FROM evidence"
            )
        )
    return int(hops), int(statements), int(ev[0][0]), int(ev[0][1])


class _WatchedOps:
    """The runner's :class:`NodeOps`, each rehydration stamped and followed by the liars' turn."""

    def __init__(self, inner: NodeOps, ledger: CellLedger, topo: Topology, runner: Runner) -> None:
        self.inner = inner
        self.ledger = ledger
        self.topo = topo
        self.runner = runner

    async def begin_run(self, label: str) -> None:
        await self.inner.begin_run(label)

    def commit_ref(self, label: str, name: str) -> str:
        return self.inner.commit_ref(label, name)

    def delivery_ref(self, arm: str, value_id: int) -> str:
        return self.inner.delivery_ref(arm, value_id)

    async def append(self, origin: NodeRef, hops: list[bytes], steps: list[int]) -> None:
        await self.inner.append(origin, hops, steps)

    async def commit_compaction(
        self, origin: NodeRef, folds: list[tuple[str, list[int], bytes]]
    ) -> CommittedCompaction:
        return await self.inner.commit_compaction(origin, folds)

    async def deliver(
        self, path: Sequence[NodeRef], delivery: Delivery, timeout: float
    ) -> Delivery:
        return await self.inner.deliver(path, delivery, timeout)

    async def rehydrate(self, value_ref: str) -> RehydrationReport:
        ledger = self.ledger
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        report = await self.inner.rehydrate(value_ref)
        t = loop.time()
        for o in report.outcomes:
            # a busy record is the holder's own note, kept to re-test: it accuses nobody
            recorded = bool(o.evidence_path) and o.outcome is not Outcome.BUSY
            name = self.topo.name_of(o.origin)
            avail = ledger.availability.get(name)
            up = avail is None or not avail.is_down(t0)
            ledger.stamps.append(Stamp(t, name, o.outcome.value, recorded, up))
        if ledger.liars_holding(self.topo):
            await ledger.forge(self.topo, self.runner, value_ref)
        return report
