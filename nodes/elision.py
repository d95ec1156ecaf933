"""What a sender remembers of each peer: the heads it acknowledged holding verified.

A delivery of a compacted value carries fold proofs and the signed heads
they hang from. A head the receiving node listed in an earlier signed
delivery receipt is held verified there, so later deliveries to that address
carry only the fold proof (which names the head by digest); and a head that
does travel names an origin other than the sender by its key id once the
peer acknowledged a head of that origin (it holds that key). A peer that no
longer holds one (a restart: its caches are in memory) answers
``NOT_FOUND``; the delivery is then repeated once with every head, each
naming its origin in full, and the forgotten acknowledgements are dropped.

The receipt decides nothing else (design, "Verify where it carries
information"): it is parsed and bound to the expected signer, its signature
not verified — a wrong acknowledgement costs one ``NOT_FOUND`` and a resend,
never a wrong decision. :class:`HeadElision` is transport-agnostic: it is
given the one call that delivers (a node's transport, or a tool's
:class:`nodes.control.NodeClients`), which raises
:class:`nodes.transport.CallFailed` on a status.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Awaitable, Callable

from contracts.envelope import Envelope
from contracts.signed import Signed, parse_statement
from contracts.statements import DeliveryReceipt
from nodes.messages import Delivery
from nodes.transport import CallFailed

__all__ = ["DeliverCall", "HeadElision"]

#: One ``Deliver.Deliver`` call: (address, delivery, timeout s) -> the receipt's bytes.
DeliverCall = Callable[[str, Delivery, float], Awaitable[bytes]]


@functools.lru_cache(maxsize=4096)
def _envelope_digest(data: bytes) -> str:
    """Digest of an envelope as sent (the digest statements name it by), memoised by
    the exact bytes: a head travels, or is elided, on every delivery under it."""
    return Envelope.from_bytes(data).digest


@functools.lru_cache(maxsize=4096)
def _head_origin(data: bytes) -> str:
    """The origin a head envelope is signed by (its one signature's key id)."""
    return Envelope.from_bytes(data).signatures[0].keyid


class HeadElision:
    """Per peer address: the heads (and so the origins' keys) it acknowledged."""

    def __init__(self) -> None:
        self._heads_acked: set[tuple[str, str]] = set()
        self._origins_acked: set[tuple[str, str]] = set()

    def acknowledged(self, address: str, head: bytes) -> bool:
        """Whether the peer at ``address`` acknowledged holding ``head`` verified."""
        return (address, _envelope_digest(head)) in self._heads_acked

    async def send(
        self,
        deliver: DeliverCall,
        address: str,
        delivery: Delivery,
        timeout: float,
        *,
        signer: str | None = None,
    ) -> tuple[bytes, Signed[DeliveryReceipt], Delivery]:
        """Deliver with ``deliver``, heads the peer acknowledged sent as digests.

        Returns the peer's receipt (bytes, and parsed bound to ``signer``, its
        signature **not** verified) and the delivery as sent. A ``NOT_FOUND``
        answer to a delivery that left a head or an origin's key out repeats it
        once in full; any other failure (or ``NOT_FOUND`` to a full delivery)
        is raised as the :class:`~nodes.transport.CallFailed` it was.
        """
        elided = tuple(
            h for h in delivery.heads if (address, _envelope_digest(h)) in self._heads_acked
        )
        travelling = tuple(h for h in delivery.heads if h not in elided)
        keyed = tuple(
            dict.fromkeys(
                o
                for o in map(_head_origin, travelling)
                if o != delivery.sender and (address, o) in self._origins_acked
            )
        )
        full = (
            delivery
            if not delivery.key_id_origins
            else dataclasses.replace(delivery, key_id_origins=())
        )
        outgoing = full
        if elided or keyed:
            outgoing = dataclasses.replace(delivery, heads=travelling, key_id_origins=keyed)
        try:
            data = await deliver(address, outgoing, timeout)
        except CallFailed as exc:
            if not (elided or keyed) or exc.code != "NOT_FOUND":
                raise
            for h in elided:
                self._heads_acked.discard((address, _envelope_digest(h)))
            for o in keyed:
                self._origins_acked.discard((address, o))
            data = await deliver(address, full, timeout)
            outgoing = full
        receipt = parse_statement(data, DeliveryReceipt, signer=signer)
        sent = {_envelope_digest(h): h for h in delivery.heads}
        for digest in receipt.statement.obligations:
            head = sent.get(digest)
            if head is not None and (address, digest) not in self._heads_acked:
                # (a head acknowledged before had its origin recorded then)
                self._heads_acked.add((address, digest))
                self._origins_acked.add((address, _head_origin(head)))
        return data, receipt, outgoing
