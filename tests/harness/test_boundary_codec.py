"""The boundary player's shortcuts give exactly what the plain code gives.

Each shortcut of the per-decision path (memoised hop JSON, the fast hop
parser, the memoised Deliver size) is checked against the straightforward
computation it replaces, on real trajectories and on the edge cases where a
shortcut could drift (ints where floats are expected, bools, length-prefix
boundaries).
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from harness.boundary.cli import available_cores, default_workers
from harness.boundary.wire import (
    HopCodec,
    _hop_doc,
    _hop_fast,
    _hop_from_doc,
    decode_value,
    encode_value,
)
from harness.config import ExperimentConfig
from harness.events import Decision, Hop
from harness.gates import GateView
from harness.replay import Replayer, ReplayParams
from harness.trajectory import generate
from nodes import wire
from nodes.messages import Acknowledgement, Delivery

CFG = ExperimentConfig()


def _views(seed: int, steps: int = 200) -> list[tuple[int, GateView, str | None]]:
    events = generate(seed, steps, 5, CFG.degradation_profiles["high"])
    replayer = Replayer(ReplayParams(cadence=10))
    out: list[tuple[int, GateView, str | None]] = []
    for ev in events:
        replayer.feed(ev)
        if isinstance(ev, Decision):
            for arm in (replayer.gt, replayer.smin):
                state = arm.values[ev.value_id]
                view = GateView(
                    list(state.vec),
                    state.taints,
                    state.visible,
                    state.folded,
                    state.history_truncated,
                )
                out.append((ev.value_id, view, state.blob))
    return out


def test_memoised_hop_json_gives_the_same_value_bytes() -> None:
    codec = HopCodec()
    checked = 0
    for vid, view, blob in _views(4):
        plain = encode_value("ground_truth", vid, view, blob)
        assert encode_value("ground_truth", vid, view, blob, codec) == plain
        checked += len(view.visible)
    assert checked > 500  # the lineage repeats: most fragments come from the memo


def test_decoded_values_are_what_the_standard_parser_reads_bit_for_bit() -> None:
    """decode_value parses with orjson: on real values and on awkward floats
    (subnormal, shortest round trip, extremes) it reads the same document as
    json.loads, every score the same double."""
    import random
    import struct

    rng = random.Random(7)
    awkward = [0.1 + 0.2, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 1e-7, 0.3]
    awkward += [struct.unpack("<d", rng.randbytes(8))[0] for _ in range(400)]
    awkward = [x for x in awkward if x == x and abs(x) != float("inf")]
    views = _views(8)
    for i, (vid, view, blob) in enumerate(views):
        scores = [awkward[(5 * i + k) % len(awkward)] for k in range(5)]
        odd = GateView(scores, view.tainted_by, view.visible, view.folded, view.history_truncated)
        for v in (view, odd):
            data = encode_value("structural_min", vid, v, blob)
            assert json.loads(data) == __import__("orjson").loads(data)
            got = decode_value(data).view
            assert [struct.pack("<d", x) for x in got.scores] == [
                struct.pack("<d", float(x)) for x in v.scores
            ]
            assert got.visible == list(v.visible)
            assert got.folded == v.folded
    for bad in (b"\xff{}", b'{"a": NaN}', b'"\\ud800"', b"{"):
        with pytest.raises(ValueError, match="not JSON"):
            decode_value(bad)


def test_a_full_hop_memo_starts_over_and_stays_correct() -> None:
    codec = HopCodec(limit=3)
    for vid, view, blob in _views(5, steps=80):
        assert encode_value("a", vid, view, blob, codec) == encode_value("a", vid, view, blob)


def test_fast_hop_parser_agrees_with_the_checking_parser_on_real_hops() -> None:
    seen = 0
    for _, view, _ in _views(6):
        for hop in view.visible:
            doc = json.loads(json.dumps(_hop_doc(hop)))
            fast = _hop_fast(doc)
            assert fast is not None
            assert fast == _hop_from_doc(doc, "hop") == hop
            seen += 1
    assert seen > 0


@pytest.mark.parametrize(
    "doc",
    [
        # an int factor: the checking parser makes it a float
        {
            "hop_id": "h",
            "step": 1,
            "op": "fetch",
            "axis_deltas": [["a", 1]],
            "taints_added": [],
            "parent_hop_ids": [],
        },
        # deltas as an object (older form)
        {
            "hop_id": "h",
            "step": 1,
            "op": "fetch",
            "axis_deltas": {"a": 0.5},
            "taints_added": [],
            "parent_hop_ids": [],
        },
    ],
)
def test_documents_off_the_fast_path_are_converted_by_the_checking_parser(
    doc: dict[str, object],
) -> None:
    assert _hop_fast(doc) is None
    data = json.dumps(
        {
            "arm": "a",
            "value_id": 1,
            "scores": [1.0] * 5,
            "tainted_by": [],
            "visible": [doc],
            "folded": None,
            "blob": None,
        }
    ).encode()
    (hop,) = decode_value(data).view.visible
    factor = 0.5 if isinstance(doc["axis_deltas"], dict) else 1.0
    assert hop == Hop("h", 1, "fetch", (("a", factor),), (), ())
    assert type(hop.axis_deltas[0][1]) is float


@pytest.mark.parametrize(
    ("field", "bad"),
    [("step", True), ("step", 1.0), ("taints_added", [1]), ("axis_deltas", [["a", True]])],
)
def test_mistyped_hop_fields_are_still_rejected(field: str, bad: object) -> None:
    doc: dict[str, object] = {
        "hop_id": "h",
        "step": 1,
        "op": "fetch",
        "axis_deltas": [["a", 0.5]],
        "taints_added": [],
        "parent_hop_ids": [],
        field: bad,
    }
    assert _hop_fast(doc) is None
    with pytest.raises(ValueError, match="hop"):
        _hop_from_doc(doc, "hop")


def _delivery_with_statements() -> Delivery:
    """A real head-form delivery: fold proofs and a signed head, from an origin node."""
    import asyncio
    import tempfile
    from pathlib import Path

    from contracts.identity import Identity
    from nodes.config import NodeConfig
    from nodes.services import NodeCore
    from nodes.store import StoreMode
    from nodes.transport import InMemoryTransport

    async def make() -> Delivery:
        with tempfile.TemporaryDirectory() as tmp:
            config = NodeConfig(name="o", data_dir=Path(tmp), listen="o.mem:1")
            core = await NodeCore.open(
                config,
                Identity.from_seed(bytes(32)),
                transport=InMemoryTransport(registry={}),
                store_mode=StoreMode.SCRATCH,
            )
            try:
                hops = [json.dumps({"step": i, "op": "x"}).encode() for i in range(1, 9)]
                await core.append(hops)
                done = await core.commit_compaction(
                    [("v/1", [1, 2, 3], b""), ("v/2", list(range(1, 9)), b"")]
                )
            finally:
                await core.close()
        return Delivery("v/1", b"", (), (), core.node_id, done.fold_proofs, (done.head,))

    return asyncio.run(make())


def test_delivery_sizes_are_the_serialized_lengths_at_length_prefix_boundaries() -> None:
    """A Deliver request's size, the statement bytes a delivery adds and the Deliver
    response's size are the lengths of the serialized messages (the statement bytes:
    the full request's length minus the value-only request's)."""
    base = _delivery_with_statements()
    assert wire.delivery_statement_size(base) > 0
    # Inner lengths crossing 127/128 and 16383/16384 change the outer varint.
    for n in [*range(0, 300), *range(15_800, 16_600, 7), 2_100_000]:
        for d in (
            Delivery(base.value_ref, b"x" * n, (), (), base.sender, base.fold_proofs, base.heads),
            Delivery(base.value_ref, b"x" * n, (), (), "", base.fold_proofs, base.heads),
            Delivery(base.value_ref, b"x" * n, (), (), base.sender),
            # a value ref long enough for a two-byte length, and a non-ASCII one
            Delivery("r" * 130, b"x" * n, (), (), base.sender),
            Delivery("v/é", b"x" * n, (), (), "", base.fold_proofs, base.heads),
        ):
            sent = len(wire.deliver_request(d).SerializeToString())
            assert wire.deliver_request_size(d) == sent, n
            asking = len(wire.deliver_request(d, signed=True).SerializeToString())
            assert wire.deliver_request_size(d, signed=True) == asking > sent, n
            bare = Delivery(d.value_ref, d.value, (), (), d.sender)
            statements = sent - len(wire.deliver_request(bare).SerializeToString())
            assert wire.delivery_statement_size(d) == statements, n
            # the size kept on a delivery is its own: a copy with another value is sized anew
            other = dataclasses.replace(d, value=d.value + b"y")
            assert wire.deliver_request_size(other) == len(
                wire.deliver_request(other).SerializeToString()
            ), n
        for ack in (Acknowledgement(1_764_800_000_000, b"r" * n), Acknowledgement(n)):
            assert wire.deliver_response_size(ack) == len(
                wire.deliver_response(ack).SerializeToString()
            ), n


def test_default_workers_use_the_available_cores_at_most_one_per_run() -> None:
    cores = available_cores()
    assert cores >= 1
    assert default_workers(1) == 1
    assert default_workers(180) == cores
    assert default_workers(2) == min(2, cores)
