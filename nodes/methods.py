"""The method table: who may call each rpc a node serves, and how the node treats the call.

Every rpc of every provnet service declares its policy in the ``.proto``, as
the ``provnet.v1.policy`` method option (``proto/provnet/v1/policy.proto``)::

    rpc Deliver(DeliverRequest) returns (DeliverResponse) {
      option (policy) = {
        access: ACCESS_SIGNED  reason: "…"  sender: SENDER_PEER_AS_ITSELF
        bulk: true  retry: RETRY_IDEMPOTENT  retry_reason: "…"
      };
    }

This module reads the options from the generated descriptors once, at
import, into :data:`METHODS` (full method name → :class:`MethodPolicy`,
frozen), the one table the node consults:

* :mod:`nodes.auth`: a signed method needs a control signature before its
  handler runs; an ``operator`` method only an operator key's, a
  ``peer-as-itself`` method any node key's (the core then checks the signer
  against what the request names);
* :mod:`nodes.interceptors` / :mod:`nodes.overload`: a bulk method is admitted
  or shed before its body is read, under the bulk caps and byte budget of its
  caller's class; an open unary method sits behind the cap its ``open_cap``
  names (shared, none, the witness slots); streams behind the stream slots;
* :mod:`nodes.retry`: only a method whose ``retry`` is not ``never`` is made
  again after a refusal that says it never ran.

Every option is checked as it is read: a provnet rpc without the option, or
with one that contradicts itself (a signed method a bearer may call, a
retried method without its reason, a cap on a method no cap applies to), is
a :class:`MethodTableError` naming the rpc, raised when this module is
imported — a node cannot start with a method nobody decided about.

The node also serves gRPC's health and reflection services, whose ``.proto``
it does not own: their policy is declared here (:data:`FOREIGN`), open to
anyone, health checks uncapped.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any, TypeVar

from google.protobuf import descriptor_pb2

from nodes._pb.provnet import v1 as _v1
from nodes._pb.provnet.v1 import policy_pb2

__all__ = [
    "BULK",
    "FOREIGN",
    "METHODS",
    "OPERATOR_ONLY",
    "SIGNED",
    "Access",
    "MethodPolicy",
    "MethodTableError",
    "OpenCap",
    "Retry",
    "Sender",
    "lookup",
    "method_name",
    "policy",
    "read_policies",
]

#: The protobuf package every method in the table belongs to.
PACKAGE = "provnet.v1"


class MethodTableError(Exception):
    """An rpc without its policy option, or with one that contradicts itself."""


class Access(StrEnum):
    """Whether a call must carry a control signature (``provnet.v1.Access``)."""

    SIGNED = "signed"
    OPEN = "open"


class Sender(StrEnum):
    """Whose call it may be (``provnet.v1.Sender``)."""

    OPERATOR = "operator"
    PEER_AS_ITSELF = "peer-as-itself"
    BEARER = "bearer"
    ANYONE = "anyone"


class Retry(StrEnum):
    """Whether a call refused before it ran is made again (``provnet.v1.Retry``)."""

    NEVER = "never"
    IDEMPOTENT = "idempotent"
    NOT_RUN_ONLY = "not-run-only"


class OpenCap(StrEnum):
    """The cap an open, unary, non-bulk call sits behind (``provnet.v1.OpenCap``)."""

    SHARED = "shared"
    NONE = "none"
    WITNESS = "witness"


_ACCESS = {policy_pb2.ACCESS_SIGNED: Access.SIGNED, policy_pb2.ACCESS_OPEN: Access.OPEN}
_SENDER = {
    policy_pb2.SENDER_OPERATOR: Sender.OPERATOR,
    policy_pb2.SENDER_PEER_AS_ITSELF: Sender.PEER_AS_ITSELF,
    policy_pb2.SENDER_BEARER: Sender.BEARER,
    policy_pb2.SENDER_ANYONE: Sender.ANYONE,
}
_RETRY = {
    policy_pb2.RETRY_NEVER: Retry.NEVER,
    policy_pb2.RETRY_IDEMPOTENT: Retry.IDEMPOTENT,
    policy_pb2.RETRY_NOT_RUN_ONLY: Retry.NOT_RUN_ONLY,
}
_OPEN_CAP = {
    policy_pb2.OPEN_CAP_SHARED: OpenCap.SHARED,
    policy_pb2.OPEN_CAP_NONE: OpenCap.NONE,
    policy_pb2.OPEN_CAP_WITNESS: OpenCap.WITNESS,
}
#: Who may call a method of each access.
_SENDERS_OF = {
    Access.SIGNED: frozenset({Sender.OPERATOR, Sender.PEER_AS_ITSELF}),
    Access.OPEN: frozenset({Sender.BEARER, Sender.ANYONE}),
}


@dataclass(frozen=True, slots=True)
class MethodPolicy:
    """One rpc's row of the method table (field meanings: ``policy.proto``)."""

    #: Full method name, as gRPC routes it: ``/provnet.v1.Deliver/Deliver``.
    name: str
    access: Access
    #: Signed: what the call makes the node do for its signer; open: why no
    #: signature is needed.
    reason: str
    sender: Sender
    bulk: bool
    retry: Retry
    #: Why a retried call is safe to make again ("" for ``Retry.NEVER``).
    retry_reason: str
    #: The cap of an open, unary, non-bulk call; None for every other method.
    open_cap: OpenCap | None
    client_streaming: bool = False
    server_streaming: bool = False

    @property
    def signed(self) -> bool:
        return self.access is Access.SIGNED

    @property
    def operator_only(self) -> bool:
        return self.sender is Sender.OPERATOR

    @property
    def retried(self) -> bool:
        """Whether :func:`nodes.retry.retry_shed` may make the call again."""
        return self.retry is not Retry.NEVER

    @property
    def unary(self) -> bool:
        return not (self.client_streaming or self.server_streaming)


_T = TypeVar("_T")


def _closed(table: Mapping[Any, _T], value: int, what: str, rpc: str) -> _T:
    found = table.get(value)
    if found is None:
        raise MethodTableError(f"{rpc}: policy {what} is unset or unknown ({value})")
    return found


def policy_from_options(
    name: str,
    options: descriptor_pb2.MethodOptions,
    *,
    client_streaming: bool = False,
    server_streaming: bool = False,
) -> MethodPolicy:
    """The policy an rpc's options declare, checked; :class:`MethodTableError` naming
    the rpc if the option is missing or contradicts itself."""
    if not options.HasExtension(policy_pb2.policy):
        raise MethodTableError(
            f"{name} declares no policy: add `option (policy) = {{…}};` to the rpc"
            " (proto/provnet/v1/policy.proto), then run python -m nodes._pb.generate"
        )
    declared = options.Extensions[policy_pb2.policy]
    access = _closed(_ACCESS, declared.access, "access", name)
    sender = _closed(_SENDER, declared.sender, "sender", name)
    retry = _closed(_RETRY, declared.retry, "retry", name)
    if not declared.reason.strip():
        raise MethodTableError(f"{name}: policy says no reason (why {access} is right)")
    if sender not in _SENDERS_OF[access]:
        raise MethodTableError(
            f"{name}: a {access} method cannot be called by sender {sender}"
            f" (one of {sorted(_SENDERS_OF[access])})"
        )
    unary = not (client_streaming or server_streaming)
    if declared.bulk and not unary:
        raise MethodTableError(f"{name}: a bulk method must be unary (admitted before its body)")
    if retry is Retry.NEVER:
        if declared.retry_reason:
            raise MethodTableError(f"{name}: retry_reason given but the method is never retried")
    else:
        if not declared.retry_reason.strip():
            raise MethodTableError(f"{name}: retried ({retry}) without a retry_reason")
        if not unary:
            raise MethodTableError(f"{name}: only unary methods are retried")
    capped = access is Access.OPEN and unary and not declared.bulk
    open_cap: OpenCap | None = None
    if capped:
        open_cap = _closed(_OPEN_CAP, declared.open_cap, "open_cap", name)
    elif declared.open_cap != policy_pb2.OPEN_CAP_UNSPECIFIED:
        raise MethodTableError(
            f"{name}: open_cap applies only to open, unary, non-bulk methods"
            " (signed calls are verified first, bulk calls and streams have caps of their own)"
        )
    return MethodPolicy(
        name=name,
        access=access,
        reason=declared.reason,
        sender=sender,
        bulk=declared.bulk,
        retry=retry,
        retry_reason=declared.retry_reason,
        open_cap=open_cap,
        client_streaming=client_streaming,
        server_streaming=server_streaming,
    )


def read_policies(services: Iterable[Any]) -> dict[str, MethodPolicy]:
    """Full method name → policy for every method of ``services`` (service descriptors)."""
    table: dict[str, MethodPolicy] = {}
    for service in services:
        for method in service.methods:
            name = f"/{service.full_name}/{method.name}"
            # Re-read through the default pool's MethodOptions, where the policy
            # extension is registered, whichever pool the descriptor came from.
            options = descriptor_pb2.MethodOptions.FromString(
                method.GetOptions().SerializeToString()
            )
            table[name] = policy_from_options(
                name,
                options,
                client_streaming=method.client_streaming,
                server_streaming=method.server_streaming,
            )
    return table


def _provnet_services() -> list[Any]:
    """Every service of every generated ``provnet/v1`` module (a new ``.proto`` included)."""
    services: list[Any] = []
    for info in sorted(pkgutil.iter_modules(_v1.__path__), key=lambda m: m.name):
        if info.name.endswith("_pb2"):
            module = importlib.import_module(f"{_v1.__name__}.{info.name}")
            services.extend(module.DESCRIPTOR.services_by_name.values())
    return services


def _foreign(
    name: str,
    reason: str,
    cap: OpenCap | None,
    *,
    client_streaming: bool = False,
    server_streaming: bool = False,
) -> MethodPolicy:
    return MethodPolicy(
        name=name,
        access=Access.OPEN,
        reason=reason,
        sender=Sender.ANYONE,
        bulk=False,
        retry=Retry.NEVER,
        retry_reason="",
        open_cap=cap,
        client_streaming=client_streaming,
        server_streaming=server_streaming,
    )


_HEALTH = "health checks must answer whatever else a caller holds open"
_REFLECTION = "reads the services' descriptors"

#: Methods of gRPC's own services a node serves (their ``.proto`` is not ours).
FOREIGN: Mapping[str, MethodPolicy] = MappingProxyType(
    {
        p.name: p
        for p in (
            _foreign("/grpc.health.v1.Health/Check", _HEALTH, OpenCap.NONE),
            _foreign("/grpc.health.v1.Health/List", _HEALTH, OpenCap.NONE),
            _foreign("/grpc.health.v1.Health/Watch", _HEALTH, None, server_streaming=True),
            _foreign(
                "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                _REFLECTION,
                None,
                client_streaming=True,
                server_streaming=True,
            ),
            _foreign(
                "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
                _REFLECTION,
                None,
                client_streaming=True,
                server_streaming=True,
            ),
        )
    }
)

#: Every provnet rpc → its policy, read from the descriptors at import.
METHODS: Mapping[str, MethodPolicy] = MappingProxyType(read_policies(_provnet_services()))

#: Views of :data:`METHODS` for the checks made on every call (a set lookup).
SIGNED: frozenset[str] = frozenset(n for n, p in METHODS.items() if p.signed)
OPERATOR_ONLY: frozenset[str] = frozenset(n for n, p in METHODS.items() if p.operator_only)
BULK: frozenset[str] = frozenset(n for n, p in METHODS.items() if p.bulk)


def lookup(method: str) -> MethodPolicy | None:
    """The policy of ``method`` (a provnet rpc or one of :data:`FOREIGN`); None if neither."""
    return METHODS.get(method) or FOREIGN.get(method)


def policy(method: str) -> MethodPolicy:
    """The policy of provnet rpc ``method``; ``KeyError`` naming it if it has none."""
    found = METHODS.get(method)
    if found is None:
        raise KeyError(f"{method} is not a {PACKAGE} method (nodes.methods.METHODS)")
    return found


def method_name(service: str, rpc: str) -> str:
    """The full name of ``service.rpc`` (``/provnet.v1.Deliver/Deliver`` for ``"Deliver",
    "Deliver"``), checked against the table: a renamed rpc fails where its name is
    taken, at import."""
    name = f"/{PACKAGE}.{service}/{rpc}"
    policy(name)
    return name
