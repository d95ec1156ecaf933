"""A hostile client for the crash campaign: every call it makes must be refused properly.

:class:`Attacker` holds its own Ed25519 identity (no operator key) and the
bearer obligations of the origin under test (S7: anyone holding an
obligation may demand). It interleaves the attacks of the design's "Who may
call what (revision 2)" with the honest traffic of a running campaign, one
call at a time per worker, against real node processes:

* demands dated beyond the ±30 s skew, ahead or behind (replay-floor
  poisoning), and demands dated now or ahead *within* the skew (they are
  served, and must stay unreplayable across a restart);
* exact replays of demands it was served, and fresh demands reusing their
  nonces;
* demands for another origin's obligation, and to a node that is not the
  origin; bit-flipped demands; demands naming another holder but signed by
  the attacker; garbage, too many, and oversized demands;
* control calls without credentials or signed with its own key
  (``CommitFold`` with ``deadline_ms=1``, ``Append``, ``Rehydrate``,
  ``Forward``, ``Deliver`` naming another node as sender), an oversized
  ``value_ref``;
* witness challenges pointing at addresses the origin never signed, and
  plain challenges (their reports must name the signed endpoint);
* made-up ``Evidence.Report`` suspicions (with whatever witness reports it
  collected).

Every call is judged against the codes it may get (:data:`EXPECTED`). A
transport failure (UNAVAILABLE, DEADLINE_EXCEEDED, CANCELLED) is accepted
only from the origin, and only if the origin was killed or not yet serving
at some moment of the call (``origin_state``); a challenge may also run out
of time while the witness waits out the origin's deadline. INTERNAL or
UNKNOWN, any other unexpected code, a replayed demand served twice, and a
witness report naming an address the origin did not sign are *violations*,
listed in :attr:`Attacker.violations`.
"""

from __future__ import annotations

import asyncio
import contextvars
import random
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, assert_never

import grpc

from contracts.batch import DEMAND_BATCH_TYPE, demand_payload
from contracts.envelope import Envelope, EnvelopeSignature, pae
from contracts.errors import ContractError
from contracts.evidence import unanswered_evidence
from contracts.identity import Identity
from contracts.serve import build_demand
from contracts.signed import Signed, open_statement
from contracts.statements import (
    Commitment,
    Demand,
    Obligation,
    Receipt,
    ReceiptStatus,
    WitnessOutcome,
    WitnessReport,
)
from nodes import wire
from nodes._pb.provnet.v1 import (
    deliver_pb2,
    deliver_pb2_grpc,
    evidence_pb2,
    evidence_pb2_grpc,
    hoplog_pb2,
    hoplog_pb2_grpc,
    serve_pb2,
    serve_pb2_grpc,
)
from nodes.auth import ControlCredentials, control_channel
from nodes.messages import Delivery

__all__ = ["EXPECTED", "TRANSPORT_CODES", "Attack", "Attacker", "Bearer", "Targets"]

#: What a caller sees while the origin is being killed or restarted.
TRANSPORT_CODES = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED"})
#: Codes that are never a proper refusal.
_BROKEN = frozenset({"INTERNAL", "UNKNOWN"})
_SKEW_MS = 30_000
#: Every call waits for the channel (``wait_for_ready``): a call made while the
#: origin is down reaches the next run, so a fast UNAVAILABLE means the
#: connection broke under the call.
_TIMEOUT_S = 10.0
#: Served demands kept for replays (the most recent).
_KEEP_SERVED = 256
#: gRPC's reconnect backoff, bounded: the origin comes back within a second or two.
CHANNEL_OPTIONS = (
    ("grpc.initial_reconnect_backoff_ms", 50),
    ("grpc.min_reconnect_backoff_ms", 50),
    ("grpc.max_reconnect_backoff_ms", 300),
)


#: The origin's state when the current call started (per worker task).
_ORIGIN_BEFORE: contextvars.ContextVar[tuple[int, bool]] = contextvars.ContextVar(
    "origin_before", default=(0, False)
)


class Attack(StrEnum):
    FUTURE_BEYOND_SKEW = "future_beyond_skew"
    PAST_BEYOND_SKEW = "past_beyond_skew"
    WITHIN_SKEW = "within_skew"
    REPLAY = "replay"
    NONCE_REUSE = "nonce_reuse"
    OTHER_ORIGIN = "other_origin"
    NOT_THE_ORIGIN = "not_the_origin"
    BIT_FLIP = "bit_flip"
    FORGED_HOLDER = "forged_holder"
    GARBAGE_DEMAND = "garbage_demand"
    TOO_MANY_DEMANDS = "too_many_demands"
    OVERSIZED_DEMAND = "oversized_demand"
    OVERSIZED_MESSAGE = "oversized_message"
    COMMIT_UNKEEPABLE = "commit_unkeepable"
    APPEND = "append"
    REHYDRATE = "rehydrate"
    FORWARD = "forward"
    DELIVER_AS_OTHER = "deliver_as_other"
    OVERSIZED_VALUE_REF = "oversized_value_ref"
    CHALLENGE_REDIRECT = "challenge_redirect"
    CHALLENGE_PLAIN = "challenge_plain"
    REPORT_MADE_UP = "report_made_up"


_REFUSED_DEMAND = frozenset(
    {"INVALID_ARGUMENT", "UNAUTHENTICATED", "NOT_FOUND", "FAILED_PRECONDITION", "OUT_OF_RANGE"}
)
_CONTROL = frozenset({"UNAUTHENTICATED", "PERMISSION_DENIED"})

#: The codes each attack may get (besides :data:`TRANSPORT_CODES`). "OK" = answered.
#: Control attacks are narrowed further by the credentials used (see ``_control``).
EXPECTED: dict[Attack, frozenset[str]] = {
    Attack.FUTURE_BEYOND_SKEW: frozenset({"OUT_OF_RANGE"}),
    Attack.PAST_BEYOND_SKEW: frozenset({"OUT_OF_RANGE"}),
    # Served (and never again); RESOURCE_EXHAUSTED only as the node sheds load
    # (holders' floors are never refused for room); after a restart, ABORTED
    # when dated before the attacker's own floor (its demands jump back and
    # forth inside the window) or at or below the global floor of evicted ones.
    Attack.WITHIN_SKEW: frozenset({"OK", "RESOURCE_EXHAUSTED", "ABORTED"}),
    Attack.REPLAY: frozenset({"ALREADY_EXISTS", "ABORTED", "FAILED_PRECONDITION", "OUT_OF_RANGE"}),
    # ALREADY_EXISTS while the run that served the nonce lives (checked below).
    Attack.NONCE_REUSE: frozenset({"ALREADY_EXISTS", "OK", "ABORTED"}),
    Attack.OTHER_ORIGIN: frozenset({"NOT_FOUND"}),
    Attack.NOT_THE_ORIGIN: frozenset({"NOT_FOUND"}),
    Attack.BIT_FLIP: _REFUSED_DEMAND,
    Attack.FORGED_HOLDER: frozenset({"UNAUTHENTICATED"}),
    Attack.GARBAGE_DEMAND: frozenset({"INVALID_ARGUMENT"}),
    Attack.TOO_MANY_DEMANDS: frozenset({"RESOURCE_EXHAUSTED"}),
    Attack.OVERSIZED_DEMAND: frozenset({"INVALID_ARGUMENT", "RESOURCE_EXHAUSTED"}),
    Attack.OVERSIZED_MESSAGE: frozenset({"RESOURCE_EXHAUSTED"}),
    Attack.COMMIT_UNKEEPABLE: _CONTROL,
    Attack.APPEND: _CONTROL,
    Attack.REHYDRATE: _CONTROL,
    Attack.FORWARD: _CONTROL,
    Attack.DELIVER_AS_OTHER: _CONTROL,
    # A bulk call of a key the node does not know: shed with a retry appointment
    # while the strangers' share of the bulk budget is taken (the attacker's own
    # other deliveries), else refused for the oversized field.
    Attack.OVERSIZED_VALUE_REF: frozenset({"INVALID_ARGUMENT", "RESOURCE_EXHAUSTED"}),
    Attack.CHALLENGE_REDIRECT: frozenset({"INVALID_ARGUMENT"}),
    Attack.CHALLENGE_PLAIN: frozenset({"OK"}),
    Attack.REPORT_MADE_UP: _CONTROL,
}

#: How often each attack is drawn (relative); the heavy ones rarely.
_WEIGHTS: dict[Attack, int] = {
    Attack.FUTURE_BEYOND_SKEW: 8,
    Attack.PAST_BEYOND_SKEW: 4,
    Attack.WITHIN_SKEW: 6,
    Attack.REPLAY: 6,
    Attack.NONCE_REUSE: 3,
    Attack.OTHER_ORIGIN: 3,
    Attack.NOT_THE_ORIGIN: 2,
    Attack.BIT_FLIP: 5,
    Attack.FORGED_HOLDER: 3,
    Attack.GARBAGE_DEMAND: 2,
    Attack.TOO_MANY_DEMANDS: 1,
    Attack.OVERSIZED_DEMAND: 1,
    Attack.OVERSIZED_MESSAGE: 1,
    Attack.COMMIT_UNKEEPABLE: 4,
    Attack.APPEND: 2,
    Attack.REHYDRATE: 2,
    Attack.FORWARD: 1,
    Attack.DELIVER_AS_OTHER: 3,
    Attack.OVERSIZED_VALUE_REF: 1,
    Attack.CHALLENGE_REDIRECT: 5,
    Attack.CHALLENGE_PLAIN: 2,
    Attack.REPORT_MADE_UP: 4,
}
#: Attacks that need an obligation of the origin to aim at.
_NEEDS_BEARER = frozenset(
    {
        Attack.FUTURE_BEYOND_SKEW,
        Attack.PAST_BEYOND_SKEW,
        Attack.WITHIN_SKEW,
        Attack.NOT_THE_ORIGIN,
        Attack.BIT_FLIP,
        Attack.FORGED_HOLDER,
        Attack.DELIVER_AS_OTHER,
        Attack.CHALLENGE_REDIRECT,
        Attack.CHALLENGE_PLAIN,
        Attack.REPORT_MADE_UP,
    }
)


@dataclass(frozen=True, slots=True)
class Bearer:
    """An obligation of the origin the attacker holds (as any bearer may)."""

    commitment: Signed[Commitment]
    obligation: Signed[Obligation]
    commitment_bytes: bytes
    obligation_bytes: bytes


@dataclass(frozen=True, slots=True)
class Targets:
    """Where the attacker aims: the origin, two honest third nodes, ids to impersonate."""

    origin: str
    holder_node: str
    witness: str
    #: Node ids the attacker pretends to be (the honest holder's, a peer's).
    victims: tuple[str, ...]
    #: An obligation another node issued (``OTHER_ORIGIN`` demands it from the origin).
    foreign: Bearer


@dataclass(frozen=True, slots=True)
class _Served:
    demand: bytes
    holder: str
    nonce: str
    time_ms: int
    run: int
    bearer: Bearer


@dataclass(slots=True)
class Attacker:
    """See the module docstring.

    ``origin_state()`` is (how many times the origin was started, whether it
    is serving now): the run that answers, and whether it could have failed.
    """

    identity: Identity
    targets: Targets
    origin_state: Callable[[], tuple[int, bool]]
    bearers: list[Bearer] = field(default_factory=list)
    calls: Counter[str] = field(default_factory=Counter)
    codes: dict[Attack, Counter[str]] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    replays_refused: int = 0
    unanswered_reports: int = 0
    _served: deque[_Served] = field(default_factory=lambda: deque(maxlen=_KEEP_SERVED))
    _confirmations: deque[tuple[Signed[Demand], Signed[WitnessReport], Bearer]] = field(
        default_factory=lambda: deque(maxlen=16)
    )
    _channels: dict[tuple[str, bool], grpc.aio.Channel] = field(default_factory=dict)

    # ----------------------------------------------------------------- plumbing

    def _channel(self, address: str, signed: bool) -> grpc.aio.Channel:
        key = (address, signed)
        chan = self._channels.get(key)
        if chan is None:
            creds = ControlCredentials(self.identity) if signed else None
            chan = control_channel(address, creds, CHANNEL_OPTIONS)
            self._channels[key] = chan
        return chan

    async def close(self) -> None:
        for chan in self._channels.values():
            await chan.close(None)
        self._channels.clear()

    @property
    def total(self) -> int:
        return sum(self.calls.values())

    def run_id(self) -> int:
        return self.origin_state()[0]

    def _steady(self) -> bool:
        """The origin served, one run, from the start of this worker's call until now."""
        before = _ORIGIN_BEFORE.get()
        return before[1] and before == self.origin_state()

    def _predates_restart(self) -> frozenset[str]:
        """ABORTED, for a demand made while the origin was down: a demand to be verified
        is refused below the restart floor before its signature is checked."""
        return frozenset() if self._steady() else frozenset({"ABORTED"})

    def _judge(
        self, attack: Attack, target: str, code: str, detail: str, allowed: frozenset[str]
    ) -> None:
        self.calls[attack.value] += 1
        self.codes.setdefault(attack, Counter())[code] += 1
        t = self.targets
        names = {t.origin: "origin", t.holder_node: "holder node", t.witness: "witness"}
        target = f"{names.get(target, '?')} {target}"
        if code == "OK":
            detail = detail if detail.startswith("served") else "answered"
        if code in _BROKEN:
            self.violations.append(f"{attack} on {target}: {code} ({detail[:200]})")
        elif code in TRANSPORT_CODES:
            steady = self._steady()
            waits = attack in {Attack.CHALLENGE_PLAIN} and code == "DEADLINE_EXCEEDED"
            if (not target.startswith("origin") or steady) and not waits:
                self.violations.append(
                    f"{attack} on {target}: {code} ({detail[:200]}) although"
                    f" {'the origin ran all along' if steady else 'this is not the origin'}"
                )
        elif code not in allowed:
            self.violations.append(
                f"{attack} on {target}: got {code} ({detail[:200]}), expected {sorted(allowed)}"
            )

    @staticmethod
    async def _call(call: Any) -> tuple[str, Any]:
        try:
            reply = await call
        except grpc.aio.AioRpcError as exc:
            return exc.code().name, exc.details() or ""
        return "OK", reply

    def _demand(
        self, bearer: Bearer, offset_ms: int = 0, nonce: str | None = None
    ) -> Signed[Demand]:
        now = int(time.time() * 1000)
        return build_demand(self.identity, bearer.obligation, now=now + offset_ms, nonce=nonce)

    async def _serve(self, address: str, demands: Sequence[bytes]) -> tuple[str, Any]:
        stub: Any = serve_pb2_grpc.ServeStub(self._channel(address, False))
        return await self._call(
            stub.Demand(
                serve_pb2.DemandRequest(demands=list(demands)),
                timeout=_TIMEOUT_S,
                wait_for_ready=True,
            )
        )

    # ----------------------------------------------------------------- the loop

    async def run(self, rng: random.Random, stop: asyncio.Event, max_calls: int) -> None:
        """Attack until ``stop`` is set (at most ``max_calls`` calls), pausing 0–15 ms."""
        attacks = list(_WEIGHTS)
        for n in range(max_calls):
            if stop.is_set():
                return
            possible = [a for a in attacks if self.bearers or a not in _NEEDS_BEARER]
            if n % 4 == 3:
                # Every fourth call: the attack made least so far, so every kind is made.
                fewest = min(self.calls[a.value] for a in possible)
                attack = rng.choice([a for a in possible if self.calls[a.value] == fewest])
            else:
                attack = rng.choices(possible, [_WEIGHTS[a] for a in possible])[0]
            await self.one(attack, rng)
            with_pause = rng.uniform(0.0, 0.015)
            try:
                await asyncio.wait_for(stop.wait(), with_pause)
            except TimeoutError:
                continue
            return

    async def one(self, attack: Attack, rng: random.Random) -> None:
        _ORIGIN_BEFORE.set(self.origin_state())
        t = self.targets
        bearer = rng.choice(self.bearers) if self.bearers else t.foreign
        match attack:
            case Attack.FUTURE_BEYOND_SKEW | Attack.PAST_BEYOND_SKEW:
                sign = 1 if attack is Attack.FUTURE_BEYOND_SKEW else -1
                # Beyond the window even after waiting out a restart (wait_for_ready):
                # dated 31 s ahead, a call that waited 2 s arrives 29 s ahead, and is served.
                offset = sign * rng.randint(
                    _SKEW_MS + int(_TIMEOUT_S * 1000) + 5_000, 10 * _SKEW_MS
                )
                code, detail = await self._serve(
                    t.origin, [self._demand(bearer, offset).to_bytes()]
                )
                self._judge(attack, self.targets.origin, code, str(detail), EXPECTED[attack])
            case Attack.WITHIN_SKEW:
                ahead = rng.randint(1_000, _SKEW_MS - 5_000) if rng.random() < 0.6 else 0
                demand = self._demand(bearer, ahead)
                await self._served_demand(attack, bearer, demand)
            case Attack.REPLAY:
                await self._replay(rng)
            case Attack.NONCE_REUSE:
                await self._nonce_reuse(rng)
            case Attack.OTHER_ORIGIN:
                foreign = self._demand(t.foreign).to_bytes()
                code, detail = await self._serve(t.origin, [foreign])
                self._judge(attack, self.targets.origin, code, str(detail), EXPECTED[attack])
            case Attack.NOT_THE_ORIGIN:
                target = rng.choice((t.holder_node, t.witness))
                code, detail = await self._serve(target, [self._demand(bearer).to_bytes()])
                self._judge(attack, target, code, str(detail), EXPECTED[attack])
            case Attack.BIT_FLIP:
                await self._bit_flip(bearer, rng)
            case Attack.FORGED_HOLDER:
                forged = self._forged(bearer, rng.choice(t.victims), rng.random() < 0.5)
                code, detail = await self._serve(t.origin, [forged])
                allowed = EXPECTED[attack] | self._predates_restart()
                self._judge(attack, self.targets.origin, code, str(detail), allowed)
            case Attack.GARBAGE_DEMAND:
                junk = rng.randbytes(rng.randint(1, 4096))
                code, detail = await self._serve(t.origin, [junk])
                self._judge(attack, self.targets.origin, code, str(detail), EXPECTED[attack])
            case Attack.TOO_MANY_DEMANDS:
                code, detail = await self._serve(t.origin, [b"{}"] * 300)
                self._judge(attack, self.targets.origin, code, str(detail), EXPECTED[attack])
            case Attack.OVERSIZED_DEMAND:
                padded = b'{"payload":"' + b"A" * (2 * 1024 * 1024) + b'"}'
                code, detail = await self._serve(t.origin, [padded])
                self._judge(attack, self.targets.origin, code, str(detail), EXPECTED[attack])
            case Attack.OVERSIZED_MESSAGE:
                code, detail = await self._serve(t.origin, [b"A" * (5 * 1024 * 1024)])
                self._judge(attack, self.targets.origin, code, str(detail), EXPECTED[attack])
            case Attack.COMMIT_UNKEEPABLE:
                commit = hoplog_pb2.CommitFoldRequest(
                    value_ref="mine", seqs=[1], deadline_ms=1, serve_for_ms=2**40
                )
                await self._control(attack, t.origin, rng, "HopLog", "CommitFold", commit)
            case Attack.APPEND:
                append = hoplog_pb2.AppendRequest(hops=[b'{"hop_id":"x"}'], seqs=[2**62])
                await self._control(attack, t.origin, rng, "HopLog", "Append", append)
            case Attack.REHYDRATE:
                rehydrate = deliver_pb2.RehydrateRequest(value_ref="f1", witnesses=["127.0.0.1:9"])
                await self._control(attack, t.holder_node, rng, "Deliver", "Rehydrate", rehydrate)
            case Attack.FORWARD:
                forward = deliver_pb2.ForwardRequest(value_ref="f1", peer=t.witness)
                await self._control(attack, t.holder_node, rng, "Deliver", "Forward", forward)
            case Attack.DELIVER_AS_OTHER:
                delivery = Delivery(
                    "as-other",
                    b"v",
                    (bearer.commitment_bytes,),
                    (bearer.obligation_bytes,),
                    rng.choice(t.victims),
                )
                target = rng.choice((t.holder_node, t.witness))
                await self._control(
                    attack, target, rng, "Deliver", "Deliver", wire.deliver_request(delivery)
                )
            case Attack.OVERSIZED_VALUE_REF:
                # Signed with its own key, as itself: past the control plane, into the checks.
                delivery = Delivery("v" * rng.randint(300, 20_000), b"v", (), (), "")
                stub: Any = deliver_pb2_grpc.DeliverStub(self._channel(t.holder_node, True))
                code, detail = await self._call(
                    stub.Deliver(
                        wire.deliver_request(delivery), timeout=_TIMEOUT_S, wait_for_ready=True
                    )
                )
                self._judge(attack, self.targets.holder_node, code, str(detail), EXPECTED[attack])
            case Attack.CHALLENGE_REDIRECT:
                await self._challenge(attack, bearer, rng, redirect=True)
            case Attack.CHALLENGE_PLAIN:
                await self._challenge(attack, bearer, rng, redirect=False)
            case Attack.REPORT_MADE_UP:
                await self._report(bearer, rng)
            case _:
                assert_never(attack)

    # ----------------------------------------------------------------- demands

    async def _served_demand(self, attack: Attack, bearer: Bearer, demand: Signed[Demand]) -> None:
        run = self.run_id()
        code, reply = await self._serve(self.targets.origin, [demand.to_bytes()])
        detail = "" if code == "OK" else str(reply)
        allowed = EXPECTED[attack]
        if not self._steady():
            # Made while the origin was down: a run started after it may ask for a fresh one.
            allowed = allowed | {"ABORTED"}
        self._judge(attack, self.targets.origin, code, detail, allowed)
        if code != "OK":
            return
        try:
            receipt = open_statement(
                bytes(reply.answers[0].receipt), Receipt, signer=bearer.commitment.statement.origin
            )
        except (ContractError, IndexError) as exc:
            self.violations.append(f"{attack}: the origin's answer does not verify: {exc}")
            return
        if receipt.statement.status is ReceiptStatus.SERVED and self.run_id() == run:
            d = demand.statement
            self._served.append(_Served(demand.to_bytes(), d.holder, d.nonce, d.time, run, bearer))

    async def _replay(self, rng: random.Random) -> None:
        if not self._served:
            return
        old = rng.choice(self._served)
        code, reply = await self._serve(self.targets.origin, [old.demand])
        detail = "served a replayed demand" if code == "OK" else str(reply)
        self._judge(Attack.REPLAY, self.targets.origin, code, detail, EXPECTED[Attack.REPLAY])
        if code in EXPECTED[Attack.REPLAY]:
            self.replays_refused += 1

    async def _nonce_reuse(self, rng: random.Random) -> None:
        now = int(time.time() * 1000)
        run = self.run_id()
        same_run = [s for s in self._served if s.run == run and now - s.time_ms < _SKEW_MS]
        if not same_run:
            return
        old = rng.choice(same_run)
        fresh = self._demand(old.bearer, nonce=old.nonce)
        code, reply = await self._serve(self.targets.origin, [fresh.to_bytes()])
        allowed = EXPECTED[Attack.NONCE_REUSE]
        if self.run_id() == run:
            # The process that served the nonce answered this call too: it remembers.
            allowed = frozenset({"ALREADY_EXISTS"})
        detail = "served a reused nonce" if code == "OK" else str(reply)
        self._judge(Attack.NONCE_REUSE, self.targets.origin, code, detail, allowed)

    async def _bit_flip(self, bearer: Bearer, rng: random.Random) -> None:
        data = bytearray(self._demand(bearer).to_bytes())
        at = rng.randrange(len(data) * 8)
        data[at // 8] ^= 1 << (at % 8)
        flipped = bytes(data)
        allowed = EXPECTED[Attack.BIT_FLIP]
        try:
            open_statement(flipped, Demand, signer=self.identity.node_id)
        except (ContractError, ValueError):
            pass
        else:
            # The flip left a valid demand (e.g. in JSON spacing): answered as any of
            # the attacker's, or ABORTED below its own floor after a restart.
            allowed = allowed | {"OK", "ABORTED"}
        code, detail = await self._serve(self.targets.origin, [flipped])
        allowed = allowed | self._predates_restart()
        self._judge(Attack.BIT_FLIP, self.targets.origin, code, str(detail), allowed)

    def _forged(self, bearer: Bearer, victim: str, victim_keyid: bool) -> bytes:
        """A demand naming ``victim`` as holder, signed with the attacker's key."""
        o = bearer.obligation
        statement = Demand(
            holder=victim,
            origin=o.statement.origin,
            obligation=o.digest,
            commitment=o.statement.commitment,
            nonce=self._demand(bearer).statement.nonce,
            time=int(time.time() * 1000),
        )
        payload = demand_payload(statement)
        payload_type = DEMAND_BATCH_TYPE
        sig = self.identity.sign(pae(payload_type, payload))
        keyid = victim if victim_keyid else self.identity.node_id
        return Envelope(payload, payload_type, (EnvelopeSignature(keyid, sig),)).to_bytes()

    # ----------------------------------------------------------------- control plane

    async def _control(
        self,
        attack: Attack,
        address: str,
        rng: random.Random,
        service: str,
        method: str,
        request: Any,
    ) -> None:
        signed = rng.random() < 0.5
        chan = self._channel(address, signed)
        stub: Any = {
            "HopLog": hoplog_pb2_grpc.HopLogStub,
            "Deliver": deliver_pb2_grpc.DeliverStub,
            "Evidence": evidence_pb2_grpc.EvidenceStub,
        }[service](chan)
        code, detail = await self._call(
            getattr(stub, method)(request, timeout=_TIMEOUT_S, wait_for_ready=True)
        )
        allowed = frozenset({"PERMISSION_DENIED" if signed else "UNAUTHENTICATED"})
        allowed &= EXPECTED[attack]
        if signed and not self._steady():
            # Signed while the origin was down: a run started after it refuses a
            # call signed before it (ABORTED) before the core judges it.
            allowed |= {"ABORTED"}
        self._judge(attack, address, code, str(detail), allowed)

    # ----------------------------------------------------------------- witnesses, evidence

    async def _challenge(
        self, attack: Attack, bearer: Bearer, rng: random.Random, *, redirect: bool
    ) -> None:
        t = self.targets
        witness = rng.choice((t.holder_node, t.witness))
        demand = self._demand(bearer)
        origin_address = ""
        if redirect:
            origin_address = rng.choice(
                ("127.0.0.1:9", "127.0.0.1:1", t.witness, "not an address", "x" * 3000, "[::1]:9")
            )
        request = evidence_pb2.ChallengeRequest(
            commitment=bearer.commitment_bytes,
            obligation=bearer.obligation_bytes,
            demand=demand.to_bytes(),
            origin_address=origin_address,
        )
        stub: Any = evidence_pb2_grpc.EvidenceStub(self._channel(witness, False))
        code, reply = await self._call(
            stub.Challenge(request, timeout=_TIMEOUT_S, wait_for_ready=True)
        )
        self._judge(attack, witness, code, "" if code == "OK" else str(reply), EXPECTED[attack])
        if code != "OK" or not reply.witness_report:
            return
        try:
            report = open_statement(bytes(reply.witness_report), WitnessReport)
            wdemand = open_statement(bytes(reply.witness_demand), Demand)
        except ContractError as exc:
            self.violations.append(f"{attack}: witness report does not verify: {exc}")
            return
        endpoints = bearer.obligation.statement.endpoints
        if report.statement.address not in endpoints:
            self.violations.append(
                f"{attack}: witness {witness} asked {report.statement.address!r},"
                f" not an endpoint the origin signed ({endpoints})"
            )
        if report.statement.outcome is WitnessOutcome.UNANSWERED:
            self.unanswered_reports += 1
            self._confirmations.append((wdemand, report, bearer))

    async def _report(self, bearer: Bearer, rng: random.Random) -> None:
        """A suspicion of its own making, with any witness reports it collected."""
        t = self.targets
        confirmations = [c for c in self._confirmations if c[2] is bearer]
        deadline = bearer.obligation.statement.deadline_ms
        demand = self._demand(bearer, -(deadline + rng.randint(100, 5_000)))
        evidence = unanswered_evidence(
            demand,
            obligation=bearer.obligation,
            commitment=bearer.commitment,
            re_asks=1,
            reported_at=int(time.time() * 1000),
            witness_demands=[c[0] for c in confirmations],
            witness_reports=[c[1] for c in confirmations],
        )
        request = evidence_pb2.ReportRequest(evidence=evidence.to_bytes())
        target = rng.choice((t.holder_node, t.witness, t.origin))
        await self._control(Attack.REPORT_MADE_UP, target, rng, "Evidence", "Report", request)

    def summary(self) -> dict[str, dict[str, int]]:
        return {a.value: dict(sorted(c.items())) for a, c in sorted(self.codes.items())}
