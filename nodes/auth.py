"""The authenticated control plane: who may make a node sign or store on their behalf.

Design ("Who may call what", revision 2): the serve plane is open (any
bearer of a valid obligation may demand, any node may challenge a witness,
anyone may read ``Node.Info``/``Stats`` and submit a self-verifying
attestation); the **control plane** is not. A control call is accepted only
when it carries a per-call Ed25519 signature by a key the node authorises.
Which methods are signed, and by whom, is each rpc's ``sender`` in the method
table (:mod:`nodes.methods`, declared in the ``.proto``):

=========================  ===================================================
``operator``               an operator key (``--operator-keys``)
``peer-as-itself``         an operator key, or any node key, which the core
                           then checks against what the request names:
                           ``Deliver.Deliver`` (the sender the delivery receipt
                           will name; ``sender`` empty = the signer),
                           ``Attest.Request`` (the holder that signed every
                           demand the request cites, at least one; it makes
                           the attester sign and log on that holder's behalf,
                           nodes.attest_log)
=========================  ===================================================

The signature travels in metadata and covers a domain tag, the **target
node's id** (the hex public key of the node the call is meant for), the full
method name, the SHA-256 of the exact request bytes, the caller's time (ms)
and a random nonce::

    provnet-control/v2 \\n <target node id> \\n <method> \\n <sha256(request)>
        \\n <time_ms> \\n <nonce>

The metadata carries the key, time, nonce and signature, and also the target
id and the request digest as signed (``x-provnet-target``, ``x-provnet-digest``),
so the node checks the whole signature **before it reads the request body**
and afterwards only that the body received hashes to the digest signed.
A node checks what it knows about itself: the target must be its own id
(a call signed for another node is UNAUTHENTICATED, naming both ids), so a
call captured on its way to one node is refused by every other. A caller
knows the target from the cluster's configuration (a pinned peer id) or
asks the node (``Node.Info``, once per channel) before its first signed call.

The server verifies before the handler runs, cheapest check first: the
target, the time within ``CONTROL_SKEW_S`` of its clock, the key authorised
for the method (operator-only methods), the time not before the node's last
restart (:mod:`nodes.control_replay`: a durable floor and the nonces of
calls dated ahead, so a call captured before a restart is refused after it,
ABORTED), the nonce unseen within the window (in memory, before any
signature is verified), room in the nonce memory (operator keys and pinned
peers in a pool of their own, ``MAX_CONTROL_NONCES``; every other key in a
second pool of that size, at most ``MAX_CONTROL_NONCES_PER_KEY`` each; full →
RESOURCE_EXHAUSTED, never eviction, so a replay cannot slip through), then
the signature. The call's replay record is durable before the handler runs
(:meth:`ControlAuth.settle`).
A missing or bad signature is UNAUTHENTICATED, a valid signature by a key
not authorised for the method (or a node with no operator key configured)
is PERMISSION_DENIED; the message names the method and what to configure.
Nothing is written for a rejected call.

Client side, a call is signed by :func:`signed_metadata`: either through
:func:`control_channel` (a grpc.aio channel whose interceptor signs every
authenticated method for the node at its address; the cluster tools, smoke
test and boundary runner reach nodes through it) or, on a channel that
mostly carries the open serve plane, passed to the one call that needs it
(:class:`nodes.transport.GrpcTransport` signs its ``Deliver`` and
``Attest.Request`` calls so; its demands pay no interceptor).
:func:`operator_credentials` finds the operator key (``PROVNET_OPERATOR_KEY_FILE``
or the cluster home's ``operator.key``).
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import os
import secrets
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

from contracts.errors import ContractError
from contracts.identity import Identity, PublicKey, load_identity, save_identity
from nodes.control_replay import ControlReplay
from nodes.errors import NodeError, RequestTooLarge
from nodes.methods import OPERATOR_ONLY, SIGNED

__all__ = [
    "CONTROL_SKEW_S",
    "MAX_CONTROL_NONCES",
    "MAX_CONTROL_NONCES_PER_KEY",
    "OPERATOR_KEY_ENV",
    "OPERATOR_KEY_FILENAME",
    "Claim",
    "ControlAuth",
    "ControlCallPredatesRestart",
    "ControlCredentials",
    "NotAuthenticated",
    "PermissionDenied",
    "caller",
    "control_channel",
    "create_operator_key",
    "node_id_at",
    "operator_credentials",
    "request_digest",
    "signed_metadata",
    "signing_payload",
]

#: A control call's time must be this close to the node's clock.
CONTROL_SKEW_S = 30.0
#: Control nonces remembered at once (each for 2 × the skew window), per pool:
#: one for operator keys and pinned peers, one for every other key.
MAX_CONTROL_NONCES = 100_000
#: Nonces one key outside the first pool may have remembered at once: no key
#: the node does not know can fill the second pool alone.
MAX_CONTROL_NONCES_PER_KEY = MAX_CONTROL_NONCES // 8
OPERATOR_KEY_FILENAME = "operator.key"
OPERATOR_KEY_ENV = "PROVNET_OPERATOR_KEY_FILE"

_DOMAIN = b"provnet-control/v2"
_KEY = "x-provnet-key"
_TIME = "x-provnet-time"
_NONCE = "x-provnet-nonce"
_SIG = "x-provnet-sig"
_TARGET = "x-provnet-target"
_DIGEST = "x-provnet-digest"
_FIELDS = frozenset({_KEY, _TIME, _NONCE, _SIG, _TARGET, _DIGEST})
_HEX = frozenset("0123456789abcdef")

_caller: contextvars.ContextVar[str | None] = contextvars.ContextVar("provnet_caller", default=None)


class NotAuthenticated(NodeError):
    """No valid control-call signature (missing, malformed, stale, replayed, forged)."""

    code = grpc.StatusCode.UNAUTHENTICATED


class ControlCallPredatesRestart(NodeError):
    """Signed before this node's last restart: a previous run may have accepted it.

    ABORTED, as a demand dated below the replay floor: the caller signs afresh.
    """

    code = grpc.StatusCode.ABORTED


class PermissionDenied(NodeError):
    """A valid signature by a key this node does not authorise for the method."""

    code = grpc.StatusCode.PERMISSION_DENIED


def caller() -> str | None:
    """The node id (hex public key) that signed the current call, if it was signed."""
    return _caller.get()


def request_digest(request: bytes) -> str:
    """The hex SHA-256 of a request's bytes, as a control signature covers it.

    hashlib releases the GIL for large inputs, so a caller may compute it in a
    worker thread and pass it on (:meth:`ControlAuth.check`, ``digest=``).
    """
    return hashlib.sha256(request).hexdigest()


def signing_payload(
    method: str,
    request: bytes,
    time_ms: int,
    nonce: str,
    *,
    target: str,
    digest: str | None = None,
) -> bytes:
    """The bytes a control signature covers: for the node whose id is ``target``.

    ``digest``: ``request_digest(request)``, if known.
    """
    if digest is None:
        digest = request_digest(request)
    return b"\n".join(
        (
            _DOMAIN,
            target.encode(),
            method.encode(),
            digest.encode(),
            str(time_ms).encode(),
            nonce.encode(),
        )
    )


@dataclass(frozen=True, slots=True)
class ControlCredentials:
    """A key that signs control calls (an operator key, or a node's own key)."""

    identity: Identity

    @property
    def key_id(self) -> str:
        return self.identity.node_id

    def metadata(
        self,
        method: str,
        request: bytes,
        *,
        target: str,
        now: float | None = None,
        digest: str | None = None,
    ) -> tuple[tuple[str, str], ...]:
        """The metadata that signs one call of ``method`` with ``request`` for node ``target``."""
        time_ms = int((time.time() if now is None else now) * 1000)
        nonce = secrets.token_hex(16)
        if digest is None:
            digest = request_digest(request)
        sig = self.identity.sign(
            signing_payload(method, request, time_ms, nonce, target=target, digest=digest)
        )
        return (
            (_KEY, self.identity.node_id),
            (_TARGET, target),
            (_TIME, str(time_ms)),
            (_NONCE, nonce),
            (_DIGEST, digest),
            (_SIG, sig.hex()),
        )


def create_operator_key(path: Path) -> ControlCredentials:
    """Load the operator key at ``path``, creating it (0600) if absent."""
    if path.exists():
        return ControlCredentials(load_identity(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    identity = Identity.generate()
    save_identity(identity, path)
    return ControlCredentials(identity)


def operator_credentials(home: Path | None = None) -> ControlCredentials | None:
    """The operator key: ``$PROVNET_OPERATOR_KEY_FILE``, else ``<home>/operator.key``."""
    explicit = os.environ.get(OPERATOR_KEY_ENV)
    if explicit:
        return ControlCredentials(load_identity(explicit))
    if home is not None and (home / OPERATOR_KEY_FILENAME).exists():
        return ControlCredentials(load_identity(home / OPERATOR_KEY_FILENAME))
    return None


# --------------------------------------------------------------------------- client side


def _method_name(method: Any) -> str:
    return method.decode() if isinstance(method, bytes) else str(method)


def signed_metadata(
    credentials: ControlCredentials, method: str, request: Any, *, target: str
) -> tuple[tuple[str, str], ...]:
    """The metadata that signs one call of ``method`` carrying ``request`` (a message)
    for the node whose id is ``target``.

    What :func:`control_channel`'s interceptor attaches; a client that makes
    few signed calls on a channel otherwise open (:class:`nodes.transport.GrpcTransport`)
    passes it to the call itself, so its other calls pay no interceptor.
    """
    if method not in SIGNED:
        raise ValueError(f"{method} is not a signed method")
    return credentials.metadata(method, request.SerializeToString(), target=target)


#: How long asking a node for its id (``Node.Info``) may take when the call
#: that needs it sets no deadline.
NODE_ID_TIMEOUT_S = 10.0


async def node_id_at(
    channel: grpc.aio.Channel, timeout: float = NODE_ID_TIMEOUT_S, *, wait_for_ready: bool = False
) -> str:
    """The id of the node at the other end of ``channel`` (``Node.Info``, an open call).

    What a caller that has no pinned id for a node signs its control calls
    for. The answer is not authenticated: a node that lies about its id only
    gets calls it then refuses, and whoever can answer for an address can
    already take the calls sent to it.
    """
    from nodes import wire  # nodes.wire imports much of the node; only clients need it here

    reply = await wire.node_stub(channel).Info(
        wire.info_request(), timeout=timeout, wait_for_ready=wait_for_ready
    )
    node_id = str(reply.node_id)
    if len(node_id) != 64 or not set(node_id) <= _HEX:
        raise NotAuthenticated(f"node answered Node.Info with node id {node_id[:80]!r}, not 64 hex")
    return node_id


class _Signer:
    """Signs a channel's control calls for the node at its address (learnt once)."""

    def __init__(self, credentials: ControlCredentials, target: str | None) -> None:
        self.credentials = credentials
        self.target = target
        #: The channel the interceptors are on (set once it exists).
        self.channel: grpc.aio.Channel | None = None
        self._learning: asyncio.Future[str] | None = None

    async def target_for(self, timeout: float | None, wait_for_ready: bool) -> str:
        if self.target is not None:
            return self.target
        if self._learning is None or (
            self._learning.done() and self._learning.exception() is not None
        ):
            if self.channel is None:
                raise RuntimeError("control channel interceptor used before its channel exists")
            # As the call that needs it: a call that waits for the channel waits here too.
            self._learning = asyncio.ensure_future(
                node_id_at(
                    self.channel, timeout or NODE_ID_TIMEOUT_S, wait_for_ready=wait_for_ready
                )
            )
        self.target = await asyncio.shield(self._learning)
        return self.target

    async def details(self, details: Any, request: Any) -> Any:
        method = _method_name(details.method)
        if method not in SIGNED:
            return details
        target = await self.target_for(details.timeout, bool(details.wait_for_ready))
        metadata: Any = grpc.aio.Metadata(*(details.metadata or ()))
        for key, value in signed_metadata(self.credentials, method, request, target=target):
            metadata.add(key, value)
        return grpc.aio.ClientCallDetails(
            details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
        )


if TYPE_CHECKING:  # the stubs make them generic; the runtime classes are not subscriptable
    _UU = grpc.aio.UnaryUnaryClientInterceptor[Any, Any]
    _US = grpc.aio.UnaryStreamClientInterceptor[Any, Any]
else:
    _UU = grpc.aio.UnaryUnaryClientInterceptor
    _US = grpc.aio.UnaryStreamClientInterceptor


class _SignUnary(_UU):
    def __init__(self, signer: _Signer) -> None:
        self._signer = signer

    async def intercept_unary_unary(
        self, continuation: Callable[..., Any], client_call_details: Any, request: Any
    ) -> Any:
        return await continuation(await self._signer.details(client_call_details, request), request)


class _SignStream(_US):
    def __init__(self, signer: _Signer) -> None:
        self._signer = signer

    async def intercept_unary_stream(
        self, continuation: Callable[..., Any], client_call_details: Any, request: Any
    ) -> Any:
        return await continuation(await self._signer.details(client_call_details, request), request)


def control_channel(
    address: str,
    credentials: ControlCredentials | None,
    options: Sequence[tuple[str, Any]] = (),
    *,
    target: str | None = None,
    tls: grpc.ChannelCredentials | None = None,
) -> grpc.aio.Channel:
    """A grpc.aio channel that signs every control call with ``credentials``.

    The one place a client attaches control-plane credentials. Calls are
    signed for the node whose id is ``target``; without one, the channel asks
    the node at ``address`` for its id (``Node.Info``) before its first
    signed call. With ``credentials=None`` it is a plain channel (serve-plane
    calls only; a control call then gets UNAUTHENTICATED from the node).
    ``tls``: a TLS channel verifying the node's certificate (:mod:`nodes.tls`);
    the per-call signatures are the same over it.
    """
    opts = [("grpc.enable_http_proxy", 0), *options]
    signer = None if credentials is None else _Signer(credentials, target)
    interceptors: Any = None if signer is None else [_SignUnary(signer), _SignStream(signer)]
    if tls is None:
        channel = grpc.aio.insecure_channel(address, options=opts, interceptors=interceptors)
    else:
        channel = grpc.aio.secure_channel(address, tls, options=opts, interceptors=interceptors)
    if signer is not None:
        signer.channel = channel
    return channel


# --------------------------------------------------------------------------- server side


@dataclass(frozen=True, slots=True)
class Claim:
    """A control signature verified before the request body was read.

    What remains before the handler runs: the body must hash to ``digest``
    (:meth:`ControlAuth.check_body`) and the nonce must be recorded durably
    (:meth:`ControlAuth.settle`).
    """

    method: str
    signer: str
    digest: str
    time_ms: int
    nonce: str
    #: The signer is an operator key or a pinned peer's node id.
    known: bool


class ControlAuth:
    """Verifies control-call signatures (see module docstring); one per server.

    ``node_id``: this node's own id, the only target it accepts.
    ``peer_keys``: pinned peer node ids, whose nonces share the operator's pool.
    ``replay``: the durable record (:mod:`nodes.control_replay`); without one,
    nonces are remembered in memory only.
    """

    def __init__(
        self,
        operator_keys: Iterable[str],
        *,
        node_id: str,
        node_name: str = "",
        peer_keys: Iterable[str] = (),
        clock: Callable[[], float] = time.time,
        skew_s: float = CONTROL_SKEW_S,
        max_nonces: int = MAX_CONTROL_NONCES,
        max_nonces_per_key: int = MAX_CONTROL_NONCES_PER_KEY,
        replay: ControlReplay | None = None,
    ) -> None:
        self.operator_keys = frozenset(operator_keys)
        self.known_keys = self.operator_keys | frozenset(peer_keys)
        self.node_id = node_id
        self._name = node_name
        self._clock = clock
        self._skew_ms = int(skew_s * 1000)
        self._max = max_nonces
        self._max_per_key = max_nonces_per_key
        self.replay = (
            replay if replay is not None else ControlReplay(None, 2 * self._skew_ms, clock=clock)
        )
        # (key, nonce) → (forget at ms, known): in order of forgetting (a dict keeps
        # insertion order). Not a contracts._lru cache: a nonce is forgotten by date,
        # never evicted for room — a full pool refuses (_check_room).
        self._nonces: dict[tuple[str, str], tuple[int, bool]] = {}
        self._known_count = 0
        self._other_count = 0
        self._per_key: dict[str, int] = {}
        for (key, nonce), forget_at in sorted(self.replay.future.items(), key=lambda kv: kv[1]):
            self._remember((key, nonce), forget_at, key in self.known_keys)

    def claimed_signer(self, metadata: Any) -> str | None:
        """The key a call's metadata names, unverified: only to pick the pool it may use."""
        for key, value in metadata or ():
            if key == _KEY and isinstance(value, str):
                return value
        return None

    def is_known(self, signer: str | None) -> bool:
        return signer is not None and signer in self.known_keys

    def claim(self, method: str, metadata: Any) -> Claim | None:
        """Verify a call's signature before its body is read; None if the method needs none.

        Raises :class:`NotAuthenticated`/:class:`PermissionDenied` (or
        RESOURCE_EXHAUSTED for a full nonce pool) for a call to refuse. On a
        method that is not signed, signature metadata is ignored, not checked.
        """
        if method not in SIGNED:
            return None
        fields: dict[str, str] = {}
        for key, value in metadata or ():
            if key in _FIELDS and isinstance(value, str):
                fields[key] = value
        if not fields:
            raise NotAuthenticated(self._missing(method))
        return self._verify(method, fields)

    def check_body(self, claim: Claim, request: bytes, *, digest: str | None = None) -> None:
        """The request bytes received must be the bytes signed."""
        if digest is None:
            digest = request_digest(request)
        if digest != claim.digest:
            raise NotAuthenticated(
                f"{claim.method}: the request received (sha256 {digest[:16]}…) is not the"
                f" request signed (sha256 {claim.digest[:16]}…)"
            )

    async def settle(self, claim: Claim) -> None:
        """Make the call's replay record durable; its handler may run once this returns."""
        await self.replay.record(
            claim.signer, claim.nonce, claim.time_ms, int(self._clock() * 1000)
        )

    async def authenticate(
        self, method: str, request: bytes, metadata: Any, *, digest: str | None = None
    ) -> str | None:
        """All of it at once, for a call whose body is already read: the verified signer."""
        claim = self.claim(method, metadata)
        if claim is None:
            return None
        self.check_body(claim, request, digest=digest)
        await self.settle(claim)
        return claim.signer

    def _missing(self, method: str) -> str:
        if not self.operator_keys:
            return (
                f"{method} is a control call and node {self._name!r} has no operator key"
                " configured (--operator-keys / PROVNET_OPERATOR_KEYS): control calls are"
                " refused"
            )
        return (
            f"{method} is a control call: node {self._name!r} needs it signed with an operator key"
            f" ({OPERATOR_KEY_ENV} or the cluster's {OPERATOR_KEY_FILENAME})"
        )

    def _not_operator(self, method: str, signer: str) -> str:
        if not self.operator_keys:
            return (
                f"{method}: node {self._name!r} has no operator key configured"
                " (--operator-keys / PROVNET_OPERATOR_KEYS): control calls are refused"
            )
        return f"{method}: key {signer[:16]}… is not an operator key of node {self._name!r}"

    def _verify(self, method: str, fields: dict[str, str]) -> Claim:
        key, target, stamp, nonce, digest, sig = (
            fields.get(k, "") for k in (_KEY, _TARGET, _TIME, _NONCE, _DIGEST, _SIG)
        )
        # (1) the call is for this node: a node checks its own id, nothing else
        if target != self.node_id:
            if not target:
                raise NotAuthenticated(
                    f"{method}: the control signature names no target node"
                    f" ({_TARGET}); this is node {self._name!r} ({self.node_id[:16]}…):"
                    " sign the call for it (provnet-control/v2)"
                )
            raise NotAuthenticated(
                f"{method}: control signature is for node {target[:16]}…, not for this"
                f" node {self._name!r} ({self.node_id[:16]}…)"
            )
        # (2) well-formed, dated within the window and after this node's last restart
        if not (stamp.isdigit() and len(stamp) <= 16):
            raise NotAuthenticated(f"{method}: control signature time {stamp[:20]!r} malformed")
        if not (16 <= len(nonce) <= 64) or not nonce.isalnum():
            raise NotAuthenticated(f"{method}: control signature nonce malformed")
        if len(digest) != 64 or not set(digest) <= _HEX:
            raise NotAuthenticated(
                f"{method}: control signature request digest {digest[:20]!r} is not 64 hex"
            )
        time_ms = int(stamp)
        now_ms = int(self._clock() * 1000)
        if abs(now_ms - time_ms) > self._skew_ms:
            raise NotAuthenticated(
                f"{method}: control signature dated {stamp} ms is more than"
                f" {self._skew_ms // 1000} s from the node's clock ({now_ms} ms)"
            )
        # (3) the key may make this call (a key that may not is refused whatever it signed)
        if method in OPERATOR_ONLY and key not in self.operator_keys:
            raise PermissionDenied(self._not_operator(method, key))
        if self.replay.predates_restart(time_ms):
            raise ControlCallPredatesRestart(
                f"{method}: control signature dated {time_ms} ms, before this node's restart"
                f" (control floor {self.replay.restart_floor_ms} ms): a call signed before a"
                " restart is not accepted after it (a previous run may have run it); sign it"
                " afresh"
            )
        # (4) not seen, and room to remember it: before any signature is verified
        self._prune(now_ms)
        slot = (key, nonce)
        if slot in self._nonces:
            raise NotAuthenticated(f"{method}: control signature replayed (nonce {nonce[:16]})")
        known = key in self.known_keys
        self._check_room(method, key, known)
        future = self.replay.is_future(time_ms, now_ms)
        if future:
            self.replay.check_future_room(method, key, known, now_ms)
        # (5) the signature, over this node's id and the digest the body must match
        try:
            public = PublicKey.from_node_id(key)
            public.verify(
                bytes.fromhex(sig),
                signing_payload(method, b"", time_ms, nonce, target=self.node_id, digest=digest),
            )
        except (ContractError, ValueError) as exc:
            raise NotAuthenticated(f"{method}: control signature does not verify: {exc}") from None
        self._remember(slot, now_ms + 2 * self._skew_ms, known)
        return Claim(method, key, digest, time_ms, nonce, known)

    def _check_room(self, method: str, key: str, known: bool) -> None:
        if known:
            if self._known_count >= self._max:
                raise RequestTooLarge(
                    f"{method}: {self._max} control nonces of operator keys and pinned peers"
                    " in the window; try again shortly"
                )
            return
        if self._other_count >= self._max:
            raise RequestTooLarge(
                f"{method}: {self._max} control nonces of keys this node does not know in"
                " the window; try again shortly"
            )
        mine = self._per_key.get(key, 0)
        if mine >= self._max_per_key:
            raise RequestTooLarge(
                f"{method}: key {key[:16]}… has {mine} control nonces in the window"
                f" (cap {self._max_per_key} per key); try again shortly"
            )

    def _remember(self, slot: tuple[str, str], forget_at: int, known: bool) -> None:
        self._nonces[slot] = (forget_at, known)
        if known:
            self._known_count += 1
        else:
            self._other_count += 1
            self._per_key[slot[0]] = self._per_key.get(slot[0], 0) + 1

    def _prune(self, now_ms: int) -> None:
        nonces = self._nonces
        while nonces:
            slot, (forget_at, known) = next(iter(nonces.items()))
            if forget_at > now_ms:
                break
            del nonces[slot]
            if known:
                self._known_count -= 1
            else:
                self._other_count -= 1
                left = self._per_key[slot[0]] - 1
                if left:
                    self._per_key[slot[0]] = left
                else:
                    del self._per_key[slot[0]]

    @staticmethod
    def bind(signer: str | None) -> contextvars.Token[str | None]:
        return _caller.set(signer)

    @staticmethod
    def unbind(token: contextvars.Token[str | None]) -> None:
        _caller.reset(token)
