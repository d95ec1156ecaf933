"""Custody statements travel once per (statement, receiver), then by digest
(nodes.custody_elision), with the NOT_FOUND resend heads use when the receiver lost them."""

from __future__ import annotations

import pytest

from contracts.custody import custody_digest, is_custody_note
from nodes.custody_elision import REFERENCE_BYTES, HeldStatements
from nodes.errors import UnknownCommitment
from tests.nodes.custody_support import CustodyCluster

REF = "value:7"


async def _world(net: CustodyCluster, k: int) -> None:
    names = tuple(f"c{i + 1}" for i in range(k))
    for name in names:
        await net.add(name, peers=("o",), operator=f"op-{name}")
    await net.add("h", peers=("o", *names))
    await net.add("o", peers=("h", *names), custodians=names, custody_k=k, operator="op-o")
    await net.compact("o", REF)


async def test_a_statement_travels_in_full_once_then_by_digest(net: CustodyCluster) -> None:
    await _world(net, k=2)
    o, h = net.nodes["o"], net.nodes["h"]
    held = o.held(REF)
    notes = held.delivery.custody
    assert len(notes) == 2
    assert all(is_custody_note(n) for n in notes)
    address = h.advertised
    _, first = await o.holding.send(address, held.delivery, 5.0)
    assert first.custody == notes
    _, second = await o.holding.send(address, held.delivery, 5.0)
    assert [len(c) for c in second.custody] == [REFERENCE_BYTES, REFERENCE_BYTES]
    assert [c.hex() for c in second.custody] == [custody_digest(n) for n in notes]
    # what the receiver holds is the full notes, bound to the fold
    assert h.held(REF).delivery.custody == notes
    assert len(h.held(REF).custody) == 2


async def test_a_receiver_that_lost_the_statements_gets_them_again_in_full(
    net: CustodyCluster,
) -> None:
    await _world(net, k=1)
    o, h = net.nodes["o"], net.nodes["h"]
    held = o.held(REF)
    await o.holding.send(h.advertised, held.delivery, 5.0)
    h.holding._statements = HeldStatements()  # a restart: its caches are in memory
    _, sent = await o.holding.send(h.advertised, held.delivery, 5.0)
    assert sent.custody == held.delivery.custody  # NOT_FOUND, then once in full
    assert h.held(REF).delivery.custody == held.delivery.custody
    # and by digest again after that
    _, again = await o.holding.send(h.advertised, held.delivery, 5.0)
    assert [len(c) for c in again.custody] == [REFERENCE_BYTES]


def test_a_digest_of_a_statement_not_held_is_not_found_naming_it() -> None:
    with pytest.raises(UnknownCommitment, match="not held here"):
        HeldStatements().resolve(REF, (b"\x01" * REFERENCE_BYTES,))
