"""What a sender remembers of each peer: the heads it acknowledged holding verified.

A delivery of a compacted value carries fold proofs and the signed heads
(C2SP checkpoint notes, :mod:`contracts.head_note`) they hang from. A peer's
answer to a delivery acknowledges every head the delivery named (it verified
it, or held it verified), so later deliveries to that address carry only the
fold proof (which names the head by digest). A peer that no longer holds one
(a restart: its caches are in memory) answers ``NOT_FOUND``; the delivery is
then repeated once with every head, and the forgotten acknowledgements are
dropped.

The acknowledgement decides nothing else (design, "Sign where it carries
information"): it is unsigned unless the sender asks for the peer's signed
delivery receipt, which only a sender that cites it does (``Forward``). A
wrong acknowledgement costs one ``NOT_FOUND`` and a resend, never a wrong
decision. :class:`HeadElision` is transport-agnostic: it is given the one
call that delivers (a node's transport, or a tool's
:class:`nodes.control.NodeClients`), which raises
:class:`nodes.transport.CallFailed` on a status. A node's own
``NodeCore.send`` and the tools' client both send through it.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Awaitable, Callable

from contracts._lru import BoundedCache
from contracts.head_note import head_digest
from nodes.custody_elision import CustodyAcks
from nodes.messages import Acknowledgement, Delivery
from nodes.transport import CallFailed

__all__ = ["DeliverCall", "HeadElision"]

#: One ``Deliver.Deliver`` call: (address, delivery, timeout s, signed receipt asked)
#: -> the peer's acknowledgement.
DeliverCall = Callable[[str, Delivery, float, bool], Awaitable[Acknowledgement]]


@functools.lru_cache(maxsize=4096)
def _digest(data: bytes) -> str:
    """Digest of a head note as sent (the digest fold proofs and receipts name it
    by), memoised by the exact bytes: a head travels, or is elided, on every
    delivery under it."""
    return head_digest(data)


class HeadElision:
    """Per peer address: the heads it acknowledged holding verified."""

    def __init__(self) -> None:
        # bounded: a miss only costs one full send; any peer can mint heads of its own origin
        self._heads_acked: BoundedCache[tuple[str, str], None] = BoundedCache(65_536)
        self._custody = CustodyAcks()

    def acknowledged(self, address: str, head: bytes) -> bool:
        """Whether the peer at ``address`` acknowledged holding ``head`` verified."""
        return (address, _digest(head)) in self._heads_acked

    async def send(
        self,
        deliver: DeliverCall,
        address: str,
        delivery: Delivery,
        timeout: float,
        *,
        signed: bool = False,
    ) -> tuple[Acknowledgement, Delivery]:
        """Deliver with ``deliver``, heads the peer acknowledged sent as digests.

        Returns the peer's acknowledgement (carrying its signed delivery
        receipt, not parsed here, when ``signed``) and the delivery as sent.
        Custody statements the peer accepted in an earlier delivery travel as
        their digests (:mod:`nodes.custody_elision`). A ``NOT_FOUND`` answer to
        a delivery that left a head or statement out repeats it once in full;
        any other failure (or ``NOT_FOUND`` to a full delivery) is raised as
        the :class:`~nodes.transport.CallFailed` it was.
        """
        elided = tuple(h for h in delivery.heads if (address, _digest(h)) in self._heads_acked)
        outgoing = delivery
        if elided:
            travelling = tuple(h for h in delivery.heads if h not in elided)
            outgoing = dataclasses.replace(delivery, heads=travelling)
        # custody statements the peer accepted before: by digest (nodes.custody_elision)
        custody = self._custody.elide(address, delivery.custody)
        if custody != delivery.custody:
            outgoing = dataclasses.replace(outgoing, custody=custody)
        try:
            ack = await deliver(address, outgoing, timeout, signed)
        except CallFailed as exc:
            if outgoing is delivery or exc.code != "NOT_FOUND":
                raise
            for h in elided:
                self._heads_acked.pop((address, _digest(h)))
            self._custody.forget(address, delivery.custody)
            ack = await deliver(address, delivery, timeout, signed)
            outgoing = delivery
        self._custody.acknowledge(
            address,
            (n for n, sent in zip(delivery.custody, outgoing.custody, strict=True) if n == sent),
            ack.received_at,
        )
        for h in delivery.heads:
            self._heads_acked.put((address, _digest(h)), None)
        return ack, outgoing
