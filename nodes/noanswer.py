"""One meaning of "no answer", for holders and witnesses alike.

A demand sent to an endpoint the origin signed into its obligation ends in
one of four ways. Holders (:meth:`nodes.client.Holder.rehydrate`) and
witnesses (:meth:`nodes.client.Holder.witness`) both decide with
:func:`reply_for`, so what a holder records and what a witness signs can
never disagree about the same status:

==========  =====================================  ==============================
reply       what came back                         what it becomes
==========  =====================================  ==============================
answered    a receipt the origin signed            judged (served, a proof, ...)
``silent``  nothing by the deadline                ``unanswered`` (a suspicion); a
            (``DEADLINE_EXCEEDED``), no             witness signs ``UNANSWERED``
            connection (``UNAVAILABLE``), the call
            reset (``CANCELLED``), or an answer cut
            short in transit (``DATA_LOSS``)
``busy``    ``RESOURCE_EXHAUSTED``: the endpoint    asked again after its pushback
            says it is overloaded, usually with a   within the deadline; still busy:
            retry appointment                       ``busy``, a suspicion that is
            (``grpc-retry-pushback-ms``)            never witness-confirmed, never
                                                    a proof; a witness signs
                                                    nothing
``status``  any other status (``INVALID_ARGUMENT``, the endpoint answered, unsigned:
            ``NOT_FOUND``, ``INTERNAL`` ...)        recorded as that status, never
                                                    evidence; a witness signs
                                                    nothing
==========  =====================================  ==============================

Only silence is ``unanswered``: an explicit status is something the endpoint
said, so it is recorded as what it is, with the status, in the holder's
report and (``busy``) in the evidence file (``"status"`` on the record, see
:mod:`contracts.evidence`). A node that refuses a call before its event loop
took it up (gRPC's pending-call limit) resets it: the caller sees
``CANCELLED``, which is indistinguishable from a connection lost, so it counts
as silence (the node's own shedding answers ``RESOURCE_EXHAUSTED`` well before
that limit; see docs/security.md).
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["BUSY_CODES", "SILENT_CODES", "CallFailed", "Reply", "reply_for"]

#: Statuses that mean nothing came back from the endpoint.
SILENT_CODES = frozenset({"DEADLINE_EXCEEDED", "UNAVAILABLE", "CANCELLED", "DATA_LOSS"})
#: Statuses by which the endpoint says it is too busy to answer now.
BUSY_CODES = frozenset({"RESOURCE_EXHAUSTED"})


class Reply(StrEnum):
    """How a call to a signed endpoint that brought no receipt ended."""

    SILENT = "silent"
    BUSY = "busy"
    STATUS = "status"


def reply_for(code: str) -> Reply:
    """What a failed call's gRPC status name (``CallFailed.code``) means."""
    if code in SILENT_CODES:
        return Reply.SILENT
    if code in BUSY_CODES:
        return Reply.BUSY
    return Reply.STATUS


class CallFailed(Exception):
    """A call to a peer failed; ``code`` is the gRPC status name, ``pushback_ms`` the
    retry appointment the peer sent with it (``grpc-retry-pushback-ms``), if any."""

    def __init__(
        self, code: str, message: str, address: str, pushback_ms: int | None = None
    ) -> None:
        super().__init__(f"{address}: {code}: {message}")
        self.code = code
        self.message = message
        self.address = address
        self.pushback_ms = pushback_ms

    @property
    def reply(self) -> Reply:
        """Silence, busy or a status: the one rule of :func:`nodes.noanswer.reply_for`."""
        return reply_for(self.code)

    @property
    def no_answer(self) -> bool:
        return self.reply is Reply.SILENT
