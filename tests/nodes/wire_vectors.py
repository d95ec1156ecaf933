"""Golden vectors of the node wire: a lone first delivery.

The delivery (:func:`lone_first_delivery`): one value of a 20-value
compaction (a 5-hash audit path), folded twice so its fold record chains to
its first fold, delivered by its origin with the signed head — the case
docs/contracts.md measures. Fixed Ed25519 key and clock; Ed25519 signatures
are deterministic (RFC 8032), so the bytes are too.

Files in ``tests/nodes/vectors`` (``DeliverRequest``, protobuf binary), for
the current :data:`nodes.wire.WIRE_VERSION` only (earlier versions are not
read):

* ``deliver-request-v<N>.binpb`` — the first delivery, with the head note;
* ``deliver-request-held-v<N>.binpb`` — the same value once the receiver
  holds the head (the fold proof names it by digest);
* ``deliver-request-forwarded-v<N>.binpb`` — the first delivery forwarded by
  another node (:data:`FORWARDER`): the head note is the same bytes.

``tests/nodes/test_heads_wire.py`` decodes each file to its delivery and
rebuilds it byte for byte. Write them on purpose, after a deliberate format
change that bumps ``WIRE_VERSION`` (delete the older files), with::

    .venv/bin/python -m tests.nodes.wire_vectors --write
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from contracts.heads import FoldInput, HeadLog
from contracts.identity import Identity
from nodes import wire
from nodes.messages import Delivery

__all__ = [
    "VECTOR_DIR",
    "build_wire_vectors",
    "forwarded_first_delivery",
    "lone_first_delivery",
    "main",
    "vector_name",
]

VECTOR_DIR = Path(__file__).with_name("vectors")

#: The signer of the vectors' head (``Identity.from_seed(bytes(32))``).
ORIGIN = Identity.from_seed(bytes(32))
#: A holder forwarding the value (another node than the head's origin).
FORWARDER = Identity.from_seed(bytes([1]) * 32)


def lone_first_delivery(*, sender: str | None = None) -> tuple[Delivery, Delivery]:
    """(first delivery with the head, the same once the head is held), sent by ``sender``
    (default: the origin itself)."""
    log = HeadLog(ORIGIN, "7-0123456789abcdef")
    refs = [f"C25-med-s0/v0.{40 + i}" for i in range(20)]
    compactions = [
        log.compact(
            [
                FoldInput(r, fold_seq, [b"hop %d %d" % (fold_seq, i) for i in range(25)])
                for r in refs
            ],
            serve_until=1_764_503_600_000,
            deadline_ms=2000,
            endpoints=["127.0.0.1:50051"],
            issued_at=1_764_500_000_000,
        )
        for fold_seq in (0, 1)
    ]
    compaction = compactions[-1]
    head, proof = compaction.head.to_bytes(), compaction.proofs[refs[0]].to_bytes()
    by = ORIGIN.node_id if sender is None else sender
    first = Delivery(refs[0], b"v", (), (), by, (proof,), (head,))
    held = Delivery(refs[0], b"v", (), (), by, (proof,), ())
    return first, held


def forwarded_first_delivery() -> Delivery:
    """The first delivery as :data:`FORWARDER` forwards it (the head note unchanged)."""
    first, _ = lone_first_delivery(sender=FORWARDER.node_id)
    return first


def vector_name(version: int, *, held: bool = False, forwarded: bool = False) -> str:
    kinds = {"held-": held, "forwarded-": forwarded}
    kind = next((k for k, wanted in kinds.items() if wanted), "")
    return f"deliver-request-{kind}v{version}.binpb"


def build_wire_vectors() -> dict[str, bytes]:
    """The current version's vectors, as the encoder writes them now."""
    first, held = lone_first_delivery()

    def encode(delivery: Delivery) -> bytes:
        return wire.deliver_request(delivery).SerializeToString(deterministic=True)

    return {
        vector_name(wire.WIRE_VERSION): encode(first),
        vector_name(wire.WIRE_VERSION, held=True): encode(held),
        vector_name(wire.WIRE_VERSION, forwarded=True): encode(forwarded_first_delivery()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write the current version's files")
    args = parser.parse_args(argv)
    vectors = build_wire_vectors()
    stale = [
        n
        for n, d in vectors.items()
        if not (VECTOR_DIR / n).is_file() or (VECTOR_DIR / n).read_bytes() != d
    ]
    if not args.write:
        for name in stale:
            print(f"differs or missing: {VECTOR_DIR / name}")
        return 1 if stale else 0
    VECTOR_DIR.mkdir(exist_ok=True)
    for name, data in vectors.items():
        (VECTOR_DIR / name).write_bytes(data)
        print(f"wrote {VECTOR_DIR / name} ({len(data)} B)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
