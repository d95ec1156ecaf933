"""deliver_request_size remembers the last delivery it sized by identity only."""

from __future__ import annotations

from nodes import wire
from nodes.messages import Delivery


def test_deliver_request_size_is_each_deliverys_own_in_any_order() -> None:
    a = Delivery("value-a", b"x" * 10, (), (), "s" * 64)
    b = Delivery("value-b", b"y" * 300, (), (), "s" * 64)
    a_again = Delivery("value-a", b"x" * 10, (), (), "s" * 64)
    sizes = {d.value_ref: wire.message_size(wire.deliver_request(d)) for d in (a, b)}
    assert sizes["value-a"] != sizes["value-b"]
    for d in (a, a, b, a, b, b, a_again):
        assert wire.deliver_request_size(d) == sizes[d.value_ref]
