"""Custody statements travel once per (statement, receiver); after that, by digest.

A custody statement (:mod:`contracts.custody`) is one per head and custodian,
and every value folded under that head carries it. Like a head after its
first delivery (:mod:`nodes.elision`), a statement the receiving node accepted
before travels as its **digest**: the 32 raw bytes of the SHA-256 of its note
text, in place of the note in ``DeliveredValue.custody``. A note is never 32
bytes long (its header line and signature line alone are longer), so each
entry is one or the other.

* **Sender** (:class:`CustodyAcks`, inside :class:`nodes.elision.HeadElision`):
  a statement is acknowledged by the receiver's OK answer to a delivery that
  carried it in full — a receiver verifies every statement a delivery
  carries, and refuses the delivery if one does not verify or names no fold
  of the value, so an OK answer means it now holds each verified.
* **Receiver** (:class:`HeldStatements`, in :class:`nodes.holding.Holding`):
  keeps the notes it verified, by digest (bounded, in memory); a digest it
  does not hold (a restart, an eviction) is ``NOT_FOUND``, and the sender
  repeats the delivery once with every statement in full and forgets its
  acknowledgements for that receiver — the rule heads follow.

What a receiver holds of a value is always the full notes (resolved here), so a
value it forwards carries them in full to a receiver that has not seen them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from contracts._lru import BoundedCache
from contracts.custody import custody_digest, parse_custody
from nodes.errors import UnknownCommitment

__all__ = ["REFERENCE_BYTES", "CustodyAcks", "HeldStatements", "is_reference"]

#: Length of a statement sent by digest (raw SHA-256).
REFERENCE_BYTES = 32
_HELD = 4096
#: (receiver, statement) acknowledgements a sender remembers: a miss costs one full send
_ACKED = 65_536
#: bytes of verified notes a receiver keeps (each note at most MAX_CUSTODY_BYTES)
_HELD_BYTES = 4 << 20


def is_reference(entry: bytes) -> bool:
    """Whether a ``custody`` entry is a statement's digest rather than its note."""
    return len(entry) == REFERENCE_BYTES


class CustodyAcks:
    """Sender side: per receiver address, the statements it accepted in full."""

    def __init__(self, size: int = _ACKED) -> None:
        # bounded: any peer can mint valid statements (its own origin, its own custodian)
        self._acked: BoundedCache[tuple[str, str], None] = BoundedCache(size)

    def elide(self, address: str, custody: Sequence[bytes]) -> tuple[bytes, ...]:
        """``custody`` as it travels to ``address``: acknowledged notes as digests."""
        out: list[bytes] = []
        for note in custody:
            digest = custody_digest(note)
            out.append(bytes.fromhex(digest) if (address, digest) in self._acked else note)
        return tuple(out)

    def forget(self, address: str, custody: Iterable[bytes]) -> None:
        """The receiver lost what it acknowledged (it answered ``NOT_FOUND``)."""
        for note in custody:
            self._acked.pop((address, custody_digest(note)))

    def acknowledge(self, address: str, custody: Iterable[bytes], received_at_ms: int) -> None:
        """``address`` acknowledged, by an answer dated ``received_at_ms``, a delivery
        that carried ``custody`` in full. A statement that had run out by then is not
        acknowledged: the receiver drops an expired promise without keeping it, so its
        digest would only be answered ``NOT_FOUND`` (and the full note sent) every time."""
        for note in custody:
            if parse_custody(note).statement.serve_until > received_at_ms:
                self._acked.put((address, custody_digest(note)), None)


class HeldStatements:
    """Receiver side: the custody notes this node verified, by digest (bounded)."""

    def __init__(self, size: int = _HELD) -> None:
        self._notes: BoundedCache[str, bytes] = BoundedCache(
            size, maxweight=_HELD_BYTES, weigh=len
        )

    def resolve(self, value_ref: str, custody: Sequence[bytes]) -> tuple[bytes, ...]:
        """``custody`` with every digest replaced by the note it names; a digest of a
        note not held here is :class:`~nodes.errors.UnknownCommitment` (``NOT_FOUND``:
        the sender then sends the note itself)."""
        out: list[bytes] = []
        for entry in custody:
            if not is_reference(entry):
                out.append(entry)
                continue
            note = self._notes.get(entry.hex())
            if note is None:
                raise UnknownCommitment(
                    f"deliver {value_ref}: custody statement {entry.hex()[:12]}… is named by"
                    " digest but not held here; send the statement"
                )
            out.append(note)
        return tuple(out)

    def keep(self, notes: Iterable[bytes]) -> None:
        """Notes this node verified and bound to a value it holds."""
        for note in notes:
            digest = custody_digest(note)
            if self._notes.peek(digest) is None:  # the first verified bytes stay
                self._notes.put(digest, note)
