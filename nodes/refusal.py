"""What a driver says when a node refuses its control calls.

A node authorises control calls (append, commit, deliver, rehydrate, …) only
when they are signed by an operator key it was started with
(:mod:`nodes.auth`); it answers ``UNAUTHENTICATED`` (no or a bad signature)
or ``PERMISSION_DENIED`` (a key it does not authorise). Neither is a fault
of the run: it is a set-up mistake on one side, and nothing the driver does
next can succeed. Every driver that makes control calls (the boundary
experiment on running nodes, the attest experiment, the smoke test) turns
the first such answer into :class:`ControlRefused`, whose message names the
node and what to change — printed as one ``provnet: error:`` line.

Which side to change is read from what the node said: "has no operator key
configured" is the node's side (start it with ``--operator-key-file``), a
missing signature is the driver's (``$PROVNET_OPERATOR_KEY_FILE``), a key
the node does not know is a mismatch between the two.
"""

from __future__ import annotations

__all__ = [
    "HOW_TO_AUTHORISE",
    "REFUSAL_CODES",
    "ControlRefused",
    "control_refused",
    "is_refusal",
]

#: gRPC status names a node answers a control call it does not authorise with.
REFUSAL_CODES = frozenset({"UNAUTHENTICATED", "PERMISSION_DENIED"})

#: The one recipe every message points to (docs/cluster.md, "Driving nodes you start").
HOW_TO_AUTHORISE = (
    "make a key with 'provnet keys new operator.key', start every node with"
    " --operator-key-file operator.key (or $PROVNET_OPERATOR_KEY_FILE) and run the driver"
    " with PROVNET_OPERATOR_KEY_FILE=operator.key (docs/cluster.md)"
)


class ControlRefused(Exception):
    """A node refused a control call; the message names the node and the fix."""

    def __init__(self, node: str, message: str) -> None:
        super().__init__(message)
        self.node = node


def _code_name(exc: BaseException) -> str:
    code = getattr(exc, "code", None)
    if isinstance(code, str):  # a nodes.transport.CallFailed (nodes.control.RpcFailed)
        return code
    if not callable(code):
        return ""
    value = code()
    return str(getattr(value, "name", value))


def _details(exc: BaseException) -> str:
    message = getattr(exc, "message", None)
    if isinstance(message, str):  # what the node said, as a CallFailed carries it
        return message
    details = getattr(exc, "details", None)
    return str(details()) if callable(details) else str(exc)


def is_refusal(exc: BaseException) -> bool:
    """Whether ``exc`` is a gRPC error a node answers an unauthorised control call with."""
    return _code_name(exc) in REFUSAL_CODES


def control_refused(
    node: str, address: str, exc: BaseException, *, signer: str | None
) -> ControlRefused:
    """The error for node ``node`` at ``address`` refusing a call (``exc``).

    ``signer`` is the public key id the driver signed with (None: it had no
    operator key and sent the call unsigned).
    """
    said = _details(exc)
    where = f"node {node} at {address}"
    if "has no operator key configured" in said:
        why = f"{where} was started without an operator key, so it refuses every control call"
    elif signer is None:
        why = (
            f"{where} refused an unsigned control call: this driver has no operator key"
            " ($PROVNET_OPERATOR_KEY_FILE is not set)"
        )
    else:
        why = f"{where} does not authorise the operator key this driver signs with ({signer[:16]}…)"
    return ControlRefused(node, f"{why} [{_code_name(exc)}]; {HOW_TO_AUTHORISE}")
