"""The witness role: a demand re-issued on a holder's behalf, and what came of it, signed.

What this role promises. Asked to challenge an origin, the node sends a demand
of its own for the same obligation, only to an endpoint the origin signed into
that obligation, waits no longer than the obligation's deadline (bounded by
:data:`contracts.rules.MAX_DEADLINE_MS`), and signs what happened — served,
refused, or no answer by the due time (:func:`contracts.rules.demand_due_ms`).
The checks and the waiting are the holder client's
(:meth:`nodes.client.Holder.witness`); this role bounds the request.
"""

from __future__ import annotations

from nodes.context import NodeContext
from nodes.errors import RequestTooLarge
from nodes.messages import ChallengeResult

__all__ = ["Witness"]


class Witness:
    """The witness role of one node; see the module docstring."""

    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx

    async def challenge(
        self,
        *,
        commitment: bytes,
        obligation: bytes,
        demand: bytes,
        origin_address: str,
        deadline: float | None = None,
    ) -> ChallengeResult:
        """Witness: re-issue a demand of our own to the origin; sign what happened."""
        if len(demand) > self.ctx.config.max_message_bytes:
            raise RequestTooLarge("challenge: demand too large")
        result: ChallengeResult = await self.ctx.client().witness(
            commitment, obligation, demand, origin_address, deadline=deadline
        )
        return result
