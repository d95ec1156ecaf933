"""The node layer's errors — one tree — each carrying its gRPC status code.

::

    NodeError                     a request could not be carried out     (code)
    ├── MalformedRequest          fields missing / wrong shape           INVALID_ARGUMENT
    ├── RequestTooLarge           over a node size bound                 RESOURCE_EXHAUSTED
    ├── UnknownValue              no held value with that ref            NOT_FOUND
    ├── UnknownPeer               peer name not configured               INVALID_ARGUMENT
    ├── PromiseOutOfRange         a promise the node cannot keep         OUT_OF_RANGE
    │   └── config.PromiseSettingOutOfRange   the same, as a configured
    │                             default (also a config.ConfigError)
    ├── HeldConflict              a value_ref held for a reserved key    ALREADY_EXISTS
    │                             delivered by another (nodes.held)
    ├── ClockSkew                 dated outside the documented clock     OUT_OF_RANGE
    │                             skew of this node's clock
    ├── DemandPredatesRestart     dated below the replay floor found at  ABORTED
    │   │                         start: re-issue a fresh demand
    │   └── DemandPredatesFloor   dated at or below the nonces a full     ABORTED
    │                             memory forgot (nodes.replay)
    ├── PeerUnavailable           a peer this call depends on failed     UNAVAILABLE
    └── StoreError                the hop log failed (nodes.store)       INTERNAL
        ├── StoreUnavailable      cannot open / disk I/O / locked        UNAVAILABLE
        │   └── StoreFull         no space left on the node's disk       RESOURCE_EXHAUSTED
        ├── StoreCorrupt          integrity failure, schema or owner     INTERNAL
        ├── StoreClosed           used after close()                     UNAVAILABLE
        ├── StaleEpoch            hops built for an epoch not current    FAILED_PRECONDITION
        ├── HopConflict           (origin, epoch, seq) holds other bytes ALREADY_EXISTS
        ├── MissingHop            a fold names a hop the log lacks       FAILED_PRECONDITION
        ├── FoldConflict          another fold for the same key          ALREADY_EXISTS
        ├── SignerMismatch        commitment not over the stored bytes   INTERNAL
        └── UnknownCommitment     no such commitment/obligation here     NOT_FOUND

Every class carries its status in ``code``. Errors raised by
:mod:`contracts` (untrusted statements) are not wrapped: ``contracts`` stays
free of gRPC, so their codes are the one table below, by class.
:func:`status_for` gives the code of any error, and the server's handler wrapper
(:mod:`nodes.interceptors`) and the in-memory transport are the places
that call it:

====================================  ====================
contracts ``EncodingError``           INVALID_ARGUMENT
``BadSignature``                      UNAUTHENTICATED
``NotAuthorized``, ``Revoked``        PERMISSION_DENIED
``Expired``                           FAILED_PRECONDITION
``ReplayedNonce``                     ALREADY_EXISTS
``DigestMismatch``/``RootMismatch``/  INVALID_ARGUMENT
``BindingMismatch``
``NotEvidence``                       FAILED_PRECONDITION
``KeyFileError``                      INTERNAL
====================================  ====================
"""

from __future__ import annotations

import grpc

from contracts import errors as ce

__all__ = [
    "ClockSkew",
    "DemandPredatesFloor",
    "DemandPredatesRestart",
    "FoldConflict",
    "HeldConflict",
    "HopConflict",
    "MalformedRequest",
    "MissingHop",
    "NodeError",
    "PeerUnavailable",
    "PromiseOutOfRange",
    "RequestTooLarge",
    "SignerMismatch",
    "StaleEpoch",
    "StoreClosed",
    "StoreCorrupt",
    "StoreError",
    "StoreFull",
    "StoreUnavailable",
    "UnknownCommitment",
    "UnknownPeer",
    "UnknownValue",
    "status_for",
]


class NodeError(Exception):
    """Root of the node layer's errors; ``code`` is the status a caller receives."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL


class MalformedRequest(NodeError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class RequestTooLarge(NodeError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class PromiseOutOfRange(NodeError):
    """A deadline or lifetime outside the node's documented bounds
    (:func:`contracts.rules.promise_refusal`): asked by a commit, or configured."""

    code = grpc.StatusCode.OUT_OF_RANGE


class ClockSkew(NodeError):
    """A demand dated further from this node's clock than the documented skew.

    Its own status (not the obligation's FAILED_PRECONDITION "expired"), so a
    holder or witness told it knows the clocks disagree: a refusal, never silence.
    """

    code = grpc.StatusCode.OUT_OF_RANGE


class UnknownValue(NodeError):
    code = grpc.StatusCode.NOT_FOUND


class UnknownPeer(NodeError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class HeldConflict(NodeError):
    """A stranger's delivery names a value_ref this node holds for a reserved key."""

    code = grpc.StatusCode.ALREADY_EXISTS


class DemandPredatesRestart(NodeError):
    """A demand a previous run of this node may have answered (replay floor)."""

    code = grpc.StatusCode.ABORTED


class DemandPredatesFloor(DemandPredatesRestart):
    """A signed demand dated at or below the nonces this run forgot under load
    (:mod:`nodes.replay`): it may be a replay of one answered; re-issue it fresh."""


class PeerUnavailable(NodeError):
    code = grpc.StatusCode.UNAVAILABLE


class StoreError(NodeError):
    """Root of every error the store raises (sqlite errors are translated)."""

    code = grpc.StatusCode.INTERNAL


class StoreUnavailable(StoreError):
    """The database cannot be opened or written (I/O, locked past the timeout)."""

    code = grpc.StatusCode.UNAVAILABLE


class StoreFull(StoreUnavailable):
    """The disk holding the node's data dir is full (ENOSPC, SQLITE_FULL).

    Nothing of the refused write is kept and nothing was signed for it; the
    node keeps serving what it holds and takes writes again once space returns.
    """

    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class StoreCorrupt(StoreError):
    """Integrity failure, unknown schema version, or a data dir of another node."""


class StoreClosed(StoreError):
    """The store was used after :meth:`nodes.store.HopStore.close`."""

    code = grpc.StatusCode.UNAVAILABLE


class StaleEpoch(StoreError):
    """Hops were built for an epoch that is not the store's current epoch."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class HopConflict(StoreError):
    """(origin, epoch, seq) already holds different bytes; hops are append-only."""

    code = grpc.StatusCode.ALREADY_EXISTS


class MissingHop(StoreError):
    """A fold names a hop the log does not hold (never appended, or evicted)."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class FoldConflict(StoreError):
    """A different fold was already committed for (epoch, value_ref, fold_seq)."""

    code = grpc.StatusCode.ALREADY_EXISTS


class SignerMismatch(StoreError):
    """The signer returned a commitment whose root is not over the stored bytes."""


class UnknownCommitment(StoreError):
    """A statement names a commitment or obligation this node does not hold (or issue)."""

    code = grpc.StatusCode.NOT_FOUND


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


def status_for(exc: BaseException) -> grpc.StatusCode | None:
    """The status code a request error maps to; ``None`` for an unexpected error (a bug)."""
    if isinstance(exc, NodeError):
        return exc.code
    if isinstance(exc, ce.ContractError):
        for cls, code in _CONTRACT_CODES:
            if isinstance(exc, cls):
                return code
    return None
