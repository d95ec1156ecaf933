"""Errors of the node layer and their gRPC status codes.

::

    NodeError                     a request could not be carried out
    ├── MalformedRequest          INVALID_ARGUMENT   fields missing / wrong shape
    ├── RequestTooLarge           RESOURCE_EXHAUSTED over a node size bound
    ├── UnknownCommitment         NOT_FOUND          no such commitment/obligation here
    ├── UnknownValue              NOT_FOUND          no held value with that ref
    ├── UnknownPeer               INVALID_ARGUMENT   peer name not configured
    ├── DemandPredatesRestart     ABORTED            dated below the replay floor found at
    │                                                start: re-issue a fresh demand
    └── PeerUnavailable           UNAVAILABLE        a peer this call depends on failed

Errors raised by :mod:`contracts` (untrusted statements) and by
:mod:`nodes.store` are not wrapped; :func:`status_for` maps every one of them
to a precise status code, and the server interceptor
(:mod:`nodes.interceptors`) is the one place that calls it:

====================================  ====================
contracts ``EncodingError``           INVALID_ARGUMENT
``BadSignature``                      UNAUTHENTICATED
``NotAuthorized``, ``Revoked``        PERMISSION_DENIED
``Expired``                           FAILED_PRECONDITION
``ReplayedNonce`` (contracts, store)  ALREADY_EXISTS
``DigestMismatch``/``RootMismatch``/  INVALID_ARGUMENT
``BindingMismatch``
``NotEvidence``                       FAILED_PRECONDITION
store ``UnknownCommitment``           NOT_FOUND
store ``HopConflict``/``FoldConflict`` ALREADY_EXISTS
store ``StaleEpoch``, ``MissingHop``  FAILED_PRECONDITION
store ``StoreUnavailable``            UNAVAILABLE
any other store error                 INTERNAL
====================================  ====================
"""

from __future__ import annotations

import grpc

from contracts import errors as ce

__all__ = [
    "DemandPredatesRestart",
    "MalformedRequest",
    "NodeError",
    "PeerUnavailable",
    "RequestTooLarge",
    "UnknownCommitment",
    "UnknownPeer",
    "UnknownValue",
    "status_for",
]


class NodeError(Exception):
    """Root of the node layer's own request errors."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL


class MalformedRequest(NodeError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class RequestTooLarge(NodeError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class UnknownCommitment(NodeError):
    code = grpc.StatusCode.NOT_FOUND


class UnknownValue(NodeError):
    code = grpc.StatusCode.NOT_FOUND


class UnknownPeer(NodeError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class DemandPredatesRestart(NodeError):
    """A demand a previous run of this node may have answered (replay floor)."""

    code = grpc.StatusCode.ABORTED


class PeerUnavailable(NodeError):
    code = grpc.StatusCode.UNAVAILABLE


_CONTRACT_CODES: tuple[tuple[type[ce.ContractError], grpc.StatusCode], ...] = (
    (ce.BadSignature, grpc.StatusCode.UNAUTHENTICATED),
    (ce.NotAuthorized, grpc.StatusCode.PERMISSION_DENIED),
    (ce.Revoked, grpc.StatusCode.PERMISSION_DENIED),
    (ce.Expired, grpc.StatusCode.FAILED_PRECONDITION),
    (ce.ReplayedNonce, grpc.StatusCode.ALREADY_EXISTS),
    (ce.NotEvidence, grpc.StatusCode.FAILED_PRECONDITION),
    (ce.EncodingError, grpc.StatusCode.INVALID_ARGUMENT),
    (ce.KeyFileError, grpc.StatusCode.INTERNAL),
    (ce.VerificationError, grpc.StatusCode.INVALID_ARGUMENT),
    (ce.ContractError, grpc.StatusCode.INVALID_ARGUMENT),
)

_STORE_CODES_BY_NAME: dict[str, grpc.StatusCode] = {
    "ReplayedNonce": grpc.StatusCode.ALREADY_EXISTS,
    "UnknownCommitment": grpc.StatusCode.NOT_FOUND,
    "HopConflict": grpc.StatusCode.ALREADY_EXISTS,
    "FoldConflict": grpc.StatusCode.ALREADY_EXISTS,
    "StaleEpoch": grpc.StatusCode.FAILED_PRECONDITION,
    "MissingHop": grpc.StatusCode.FAILED_PRECONDITION,
    "StoreUnavailable": grpc.StatusCode.UNAVAILABLE,
    "StoreClosed": grpc.StatusCode.UNAVAILABLE,
}


def _store_code(exc: BaseException) -> grpc.StatusCode | None:
    from nodes import store

    if not isinstance(exc, store.StoreError):
        return None
    for cls in type(exc).__mro__:
        code = _STORE_CODES_BY_NAME.get(cls.__name__)
        if code is not None and cls.__module__ == store.__name__:
            return code
    return grpc.StatusCode.INTERNAL


def status_for(exc: BaseException) -> grpc.StatusCode | None:
    """The status code a request error maps to; ``None`` for an unexpected error (a bug)."""
    if isinstance(exc, NodeError):
        return exc.code
    if isinstance(exc, ce.ContractError):
        for cls, code in _CONTRACT_CODES:
            if isinstance(exc, cls):
                return code
    return _store_code(exc)
