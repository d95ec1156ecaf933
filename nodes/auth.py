"""The authenticated control plane: who may make a node sign or store on their behalf.

Design ("Who may call what", revision 2): the serve plane is open (any
bearer of a valid obligation may demand, any node may challenge a witness,
anyone may read ``Node.Info``/``Stats`` and submit a self-verifying
attestation); the **control plane** is not. A control call is accepted only
when it carries a per-call Ed25519 signature by a key the node authorises:

======================================  =====================================
``HopLog.Append``, ``HopLog.CommitFold``  an operator key (``--operator-keys``)
``HopLog.CommitCompaction``
``Deliver.Rehydrate``, ``Deliver.Forward``
``Evidence.Report``, ``Attest.Restore``
``Deliver.Deliver``                      an operator key, or the node key of the
                                         sender the delivery receipt will name
                                         (a node forwarding a value signs with
                                         its own key; ``sender`` empty = the
                                         signer)
``Attest.Request``                       an operator key, or the node key of the
                                         holder that signed every demand the
                                         request cites, at least one (it makes
                                         the attester sign and log on that
                                         holder's behalf; nodes.attest_log)
======================================  =====================================

The signature travels in metadata and covers a domain tag, the full method
name, the SHA-256 of the exact request bytes received, the caller's time
(ms) and a random nonce::

    provnet-control/v1 \\n <method> \\n <sha256(request)> \\n <time_ms> \\n <nonce>

The server verifies it before the handler runs: the key must be one it
authorises for the method, the time within ``CONTROL_SKEW_S`` of its clock,
and the nonce unseen within the window (a bounded cache, ``MAX_CONTROL_NONCES``;
full → RESOURCE_EXHAUSTED, never eviction, so a replay cannot slip through).
A missing or bad signature is UNAUTHENTICATED, a valid signature by a key
not authorised for the method (or a node with no operator key configured)
is PERMISSION_DENIED; the message names the method and what to configure.
Nothing is written for a rejected call.

Client side, a call is signed by :func:`signed_metadata`: either through
:func:`control_channel` (a grpc.aio channel whose interceptor signs every
authenticated method; the cluster tools, smoke test and boundary runner
reach nodes through it) or, on a channel that mostly carries the open serve
plane, passed to the one call that needs it (:class:`nodes.transport.GrpcTransport`
signs its ``Deliver`` and ``Attest.Request`` calls so; its demands pay no
interceptor).
:func:`operator_credentials` finds the operator key (``PROVNET_OPERATOR_KEY_FILE``
or the cluster home's ``operator.key``).
"""

from __future__ import annotations

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

from contracts.errors import ContractError, ReplayedNonce
from contracts.identity import Identity, PublicKey, load_identity, save_identity
from nodes.errors import DemandPredatesRestart, NodeError
from nodes.replay import DemandNonces

__all__ = [
    "CONTROL_METHODS",
    "CONTROL_SKEW_S",
    "MAX_CONTROL_NONCES",
    "OPERATOR_KEY_ENV",
    "OPERATOR_KEY_FILENAME",
    "REQUESTER_METHODS",
    "SENDER_METHODS",
    "SIGNED_METHODS",
    "ControlAuth",
    "ControlCredentials",
    "NotAuthenticated",
    "PermissionDenied",
    "caller",
    "control_channel",
    "create_operator_key",
    "operator_credentials",
    "request_digest",
    "signed_metadata",
    "signing_payload",
]

#: Methods that make a node sign or store on the caller's behalf: operator only.
CONTROL_METHODS = frozenset(
    {
        "/provnet.v1.HopLog/Append",
        "/provnet.v1.HopLog/CommitFold",
        "/provnet.v1.HopLog/CommitCompaction",
        "/provnet.v1.Deliver/Rehydrate",
        "/provnet.v1.Deliver/Forward",
        "/provnet.v1.Evidence/Report",
        "/provnet.v1.Attest/Restore",
    }
)
#: Methods where the sender's own node key is accepted too (deliver-as-sender).
SENDER_METHODS = frozenset({"/provnet.v1.Deliver/Deliver"})
#: Methods where the holder that signed every cited demand is accepted too
#: (the node core checks the signer against the demands).
REQUESTER_METHODS = frozenset({"/provnet.v1.Attest/Request"})
#: Every method a client signs.
SIGNED_METHODS = CONTROL_METHODS | SENDER_METHODS | REQUESTER_METHODS

#: A control call's time must be this close to the node's clock.
CONTROL_SKEW_S = 30.0
#: Control nonces remembered at once (each for 2 × the skew window).
MAX_CONTROL_NONCES = 100_000
OPERATOR_KEY_FILENAME = "operator.key"
OPERATOR_KEY_ENV = "PROVNET_OPERATOR_KEY_FILE"

_DOMAIN = b"provnet-control/v1"
_KEY = "x-provnet-key"
_TIME = "x-provnet-time"
_NONCE = "x-provnet-nonce"
_SIG = "x-provnet-sig"

_caller: contextvars.ContextVar[str | None] = contextvars.ContextVar("provnet_caller", default=None)


class NotAuthenticated(NodeError):
    """No valid control-call signature (missing, malformed, stale, replayed, forged)."""

    code = grpc.StatusCode.UNAUTHENTICATED


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
    method: str, request: bytes, time_ms: int, nonce: str, *, digest: str | None = None
) -> bytes:
    """The bytes a control signature covers (``digest``: ``request_digest(request)``, if known)."""
    if digest is None:
        digest = request_digest(request)
    return b"\n".join(
        (_DOMAIN, method.encode(), digest.encode(), str(time_ms).encode(), nonce.encode())
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
        now: float | None = None,
        digest: str | None = None,
    ) -> tuple[tuple[str, str], ...]:
        time_ms = int((time.time() if now is None else now) * 1000)
        nonce = secrets.token_hex(16)
        sig = self.identity.sign(signing_payload(method, request, time_ms, nonce, digest=digest))
        return (
            (_KEY, self.identity.node_id),
            (_TIME, str(time_ms)),
            (_NONCE, nonce),
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
    credentials: ControlCredentials, method: str, request: Any
) -> tuple[tuple[str, str], ...]:
    """The metadata that signs one call of ``method`` carrying ``request`` (a message).

    What :func:`control_channel`'s interceptor attaches; a client that makes
    few signed calls on a channel otherwise open (:class:`nodes.transport.GrpcTransport`)
    passes it to the call itself, so its other calls pay no interceptor.
    """
    if method not in SIGNED_METHODS:
        raise ValueError(f"{method} is not a signed method")
    return credentials.metadata(method, request.SerializeToString())


def _signed_details(
    credentials: ControlCredentials, details: Any, request: Any
) -> Any:
    method = _method_name(details.method)
    if method not in SIGNED_METHODS:
        return details
    metadata: Any = grpc.aio.Metadata(*(details.metadata or ()))
    for key, value in signed_metadata(credentials, method, request):
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
    def __init__(self, credentials: ControlCredentials) -> None:
        self._credentials = credentials

    async def intercept_unary_unary(
        self, continuation: Callable[..., Any], client_call_details: Any, request: Any
    ) -> Any:
        return await continuation(
            _signed_details(self._credentials, client_call_details, request), request
        )


class _SignStream(_US):
    def __init__(self, credentials: ControlCredentials) -> None:
        self._credentials = credentials

    async def intercept_unary_stream(
        self, continuation: Callable[..., Any], client_call_details: Any, request: Any
    ) -> Any:
        return await continuation(
            _signed_details(self._credentials, client_call_details, request), request
        )


def control_channel(
    address: str,
    credentials: ControlCredentials | None,
    options: Sequence[tuple[str, Any]] = (),
) -> grpc.aio.Channel:
    """A grpc.aio channel that signs every control call with ``credentials``.

    The one place a client attaches control-plane credentials. With
    ``credentials=None`` it is a plain channel (serve-plane calls only; a
    control call then gets UNAUTHENTICATED from the node).
    """
    opts = [("grpc.enable_http_proxy", 0), *options]
    if credentials is None:
        return grpc.aio.insecure_channel(address, options=opts)
    interceptors: Any = [_SignUnary(credentials), _SignStream(credentials)]
    return grpc.aio.insecure_channel(address, options=opts, interceptors=interceptors)


# --------------------------------------------------------------------------- server side


class ControlAuth:
    """Verifies control-call signatures (see module docstring); one per server."""

    def __init__(
        self,
        operator_keys: Iterable[str],
        *,
        node_name: str = "",
        clock: Callable[[], float] = time.time,
        skew_s: float = CONTROL_SKEW_S,
        max_nonces: int = MAX_CONTROL_NONCES,
    ) -> None:
        self.operator_keys = frozenset(operator_keys)
        self._name = node_name
        self._clock = clock
        self._skew_ms = int(skew_s * 1000)
        self._max = max_nonces
        # Nonces of calls signed by operator keys, and of every other key's calls
        # (deliver-as-sender, Attest.Request) apart, each signer with a share:
        # no key the node does not know can fill the memory the operator needs.
        # A call is recorded only once its signer is authorised for the method.
        keep_ms = 2 * self._skew_ms
        self._nonces = DemandNonces(
            capacity=max_nonces, per_signer=max_nonces, keep_ms=keep_ms, what="control call"
        )
        self._others = DemandNonces(
            capacity=max_nonces,
            per_signer=max(1, max_nonces // 8),
            keep_ms=keep_ms,
            what="control call",
        )

    def check(
        self, method: str, request: bytes, metadata: Any, *, digest: str | None = None
    ) -> str | None:
        """The verified signer of a call (None if unsigned and not required); raises if refused.

        ``digest`` is ``request_digest(request)`` if the caller already has it.
        """
        fields: dict[str, str] = {}
        for key, value in metadata or ():
            if key in (_KEY, _TIME, _NONCE, _SIG) and isinstance(value, str):
                fields[key] = value
        needs = method in SIGNED_METHODS
        if not fields:
            if not needs:
                return None
            raise NotAuthenticated(self._missing(method))
        signer, stamp, nonce = self._verify(method, request, fields, digest)
        if method in CONTROL_METHODS and signer not in self.operator_keys:
            raise PermissionDenied(self._not_operator(method, signer))
        pool = self._nonces if signer in self.operator_keys else self._others
        try:
            pool.check_floor(signer, stamp)
        except DemandPredatesRestart:
            raise NotAuthenticated(
                f"{method}: control signature dated {stamp} ms, at or below {pool.floor_ms} ms:"
                " under load this node forgot the nonces of calls dated up to then; sign afresh"
            ) from None
        pool.claim([(signer, nonce, stamp)])
        return signer

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

    def _verify(
        self, method: str, request: bytes, fields: dict[str, str], digest: str | None
    ) -> tuple[str, int, str]:
        """The signer, time and nonce of a call whose signature verifies and is not a
        replay (looked up first: refusing a replay costs no verification)."""
        key, stamp, nonce, sig = (fields.get(k, "") for k in (_KEY, _TIME, _NONCE, _SIG))
        if not (stamp.isdigit() and len(stamp) <= 16):
            raise NotAuthenticated(f"{method}: control signature time {stamp[:20]!r} malformed")
        if not (16 <= len(nonce) <= 64) or not nonce.isalnum():
            raise NotAuthenticated(f"{method}: control signature nonce malformed")
        now_ms = int(self._clock() * 1000)
        if abs(now_ms - int(stamp)) > self._skew_ms:
            raise NotAuthenticated(
                f"{method}: control signature dated {stamp} ms is more than"
                f" {self._skew_ms // 1000} s from the node's clock ({now_ms} ms)"
            )
        for pool in (self._nonces, self._others):
            pool.prune(now_ms)
            try:
                pool.check(key, nonce)
            except ReplayedNonce:
                raise NotAuthenticated(
                    f"{method}: control signature replayed (nonce {nonce[:16]})"
                ) from None
        try:
            public = PublicKey.from_node_id(key)
            public.verify(
                bytes.fromhex(sig),
                signing_payload(method, request, int(stamp), nonce, digest=digest),
            )
        except (ContractError, ValueError) as exc:
            raise NotAuthenticated(f"{method}: control signature does not verify: {exc}") from None
        return key, int(stamp), nonce

    @staticmethod
    def bind(signer: str | None) -> contextvars.Token[str | None]:
        return _caller.set(signer)

    @staticmethod
    def unbind(token: contextvars.Token[str | None]) -> None:
        _caller.reset(token)
