"""Errors raised by :mod:`contracts`, and the result object of ``check_*``.

Every rejection of untrusted input is a :class:`ContractError`; a caller that
catches ``ContractError`` has caught every way a statement, envelope, evidence
file or key file can be bad. Misuse by the caller (wrong argument types, a
negative count it chose itself) is a ``TypeError``/``ValueError`` instead.

::

    ContractError                 untrusted input was rejected
    ├── EncodingError             malformed bytes: not JSON, too big/deep,
    │                             wrong field types, wrong payload type …
    ├── KeyFileError              a key file is unreadable, malformed or
    │                             readable by group/other
    └── VerificationError         well-formed input failed a check
        ├── BadSignature          no valid Ed25519 signature by the named key
        ├── DigestMismatch        a digest does not name the statement given
        ├── RootMismatch          leaves do not hash to the committed root
        ├── BindingMismatch       statements do not refer to each other
        │                         (nonce, origin, obligation, commitment …)
        ├── Expired               used after its expiry / serve_until
        ├── NotAuthorized         outside the trust policy (axis, ceiling,
        │                         unknown attester, missing rehydration proof)
        ├── Revoked               signed by a key revoked at that time
        ├── ReplayedNonce         a demand nonce seen before
        ├── NotServed             a receipt that refuses/defers instead of
        │                         serving (ABSENT, REFUSED, PENDING)
        └── NotEvidence           well-formed and signed, but not a failure
                                  of the accused (e.g. refusal after expiry)

``check_*`` functions return a :class:`CheckResult`: truthy when the check
passed, falsy otherwise, carrying the error that ``verify_*`` would have
raised (``result.error``) and its message (``result.reason``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = [
    "BadSignature",
    "BindingMismatch",
    "CheckResult",
    "ContractError",
    "DigestMismatch",
    "EncodingError",
    "Expired",
    "KeyFileError",
    "NotAuthorized",
    "NotEvidence",
    "NotServed",
    "ReplayedNonce",
    "Revoked",
    "RootMismatch",
    "VerificationError",
    "run_check",
]

T = TypeVar("T")


class ContractError(Exception):
    """Root of every error raised for untrusted input in :mod:`contracts`."""


class EncodingError(ContractError):
    """Bytes or JSON that cannot be parsed into the expected structure."""


class KeyFileError(ContractError):
    """A key file that is missing, malformed, or readable by group/other."""


class VerificationError(ContractError):
    """Well-formed input that failed a cryptographic or semantic check."""


class BadSignature(VerificationError):
    """No valid Ed25519 signature by the expected key over the DSSE PAE."""


class DigestMismatch(VerificationError):
    """A digest does not match the bytes or statement it should name."""


class RootMismatch(VerificationError):
    """Leaf hashes (with proofs) do not reproduce the committed Merkle root."""


class BindingMismatch(VerificationError):
    """Statements that must refer to each other do not (nonce, digest, key)."""


class Expired(VerificationError):
    """A statement used at or after its expiry time."""


class NotAuthorized(VerificationError):
    """The signer is not allowed to do this under the trust policy."""


class Revoked(VerificationError):
    """The signing key was revoked at the time of use."""


class ReplayedNonce(VerificationError):
    """A nonce that was already used."""


class NotServed(VerificationError):
    """A valid receipt whose status is not SERVED (ABSENT, REFUSED, PENDING)."""


class NotEvidence(VerificationError):
    """Valid, signed statements that do not show a failure of the accused."""


@dataclass(frozen=True, slots=True)
class CheckResult(Generic[T]):
    """Outcome of a ``check_*`` call: truthy on success, falsy on failure.

    ``value`` is what the matching ``verify_*`` returns on success;
    ``error`` is what it would have raised on failure.
    """

    value: T | None = None
    error: ContractError | None = None

    def __bool__(self) -> bool:
        return self.error is None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def failed(self) -> str:
        """Name of the failed check (the error class), or ``""`` on success."""
        return "" if self.error is None else type(self.error).__name__

    @property
    def reason(self) -> str:
        """Human-readable reason for failure, or ``""`` on success."""
        return "" if self.error is None else str(self.error)


def run_check(fn: Callable[[], T]) -> CheckResult[T]:
    """Run a ``verify_*`` thunk and fold a :class:`ContractError` into a result."""
    try:
        return CheckResult(value=fn())
    except ContractError as exc:
        return CheckResult(error=exc)
