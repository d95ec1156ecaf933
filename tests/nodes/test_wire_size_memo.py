"""Sizes and digests remembered for the last delivery or value, by identity only."""

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


def test_a_holders_value_digest_is_each_values_own_in_any_order() -> None:
    from types import SimpleNamespace

    from contracts.canonical import sha256_hex
    from nodes.holding import Holding

    holder = SimpleNamespace(_last_digest=(None, ""))
    a, b = b"value a" * 10, b"value b" * 10
    a_copy = bytes(bytearray(a))
    for v in (a, a, b, a, b, b, a_copy):
        assert Holding._value_digest(holder, v) == sha256_hex(v)  # type: ignore[arg-type]
