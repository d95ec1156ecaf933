"""The sender's custody acknowledgements: a statement that ran out is never sent by digest.

A receiver drops an expired custody statement without keeping it (no promise is
carried on), so a sender that acknowledged it would send its digest, get
``NOT_FOUND`` and resend in full on every later delivery. The acknowledgement is
taken at the receipt's own date, and the set of acknowledgements is bounded.
"""

from __future__ import annotations

import json
from pathlib import Path

from contracts.custody import parse_custody
from nodes.custody_elision import REFERENCE_BYTES, CustodyAcks

VECTOR = Path(__file__).parents[1] / "contracts" / "vectors" / "custody" / "custody.json"
NOTE = json.loads(VECTOR.read_text(encoding="utf-8"))["note"].encode("utf-8")
SERVE_UNTIL = parse_custody(NOTE).statement.serve_until


def test_a_statement_acknowledged_while_live_then_travels_by_digest() -> None:
    acks = CustodyAcks()
    acks.acknowledge("peer:1", [NOTE], SERVE_UNTIL - 1)
    (sent,) = acks.elide("peer:1", [NOTE])
    assert len(sent) == REFERENCE_BYTES
    assert acks.elide("peer:2", [NOTE]) == (NOTE,)  # per receiver


def test_a_statement_expired_at_the_receipt_is_not_acknowledged() -> None:
    acks = CustodyAcks()
    acks.acknowledge("peer:1", [NOTE], SERVE_UNTIL)
    assert acks.elide("peer:1", [NOTE]) == (NOTE,)


def test_acknowledgements_are_bounded() -> None:
    acks = CustodyAcks(size=2)
    for i in range(3):
        acks.acknowledge(f"peer:{i}", [NOTE], SERVE_UNTIL - 1)
    assert acks.elide("peer:0", [NOTE]) == (NOTE,)  # the oldest went
    assert len(acks.elide("peer:2", [NOTE])[0]) == REFERENCE_BYTES
