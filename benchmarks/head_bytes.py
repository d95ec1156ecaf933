"""Bytes of a lone first delivery, its head note spelled as short as C2SP allows.

Issue #24 asks for a lone first delivery (one value, folded twice, in a
20-value compaction, sent with its head) of at most 480 bytes of statements.
This reads that delivery from its golden wire vector (``tests/nodes/vectors``:
the fold proof and the head note as a node signs them), then signs the same
checkpoint again with shorter legal spellings — origin line, extension
keywords, key name — and prints what each delivery's statements cost on
the wire (``nodes.wire.delivery_statement_size``). Every note printed is a
real signed note, opened with ``contracts.note.open_note`` under its key.

The rows, each shorter than the one before:

- as the node signs it today;
- the node id in the origin line in base64url instead of hex (the key name
  still the origin line: tlog-checkpoint SHOULD);
- and one-letter extension keywords;
- and a one-letter key name (breaks that SHOULD, no MUST);
- the origin line and key name one letter each, one-letter keywords: the
  shortest text that still carries the design's lines (compaction root,
  issue time, serving terms, endpoint);
- that, with the fold proof naming its head by a one-byte position instead
  of its 32-byte digest: not built, the proof's size less 31 bytes.

Usage::

    .venv/bin/python benchmarks/head_bytes.py
"""

from __future__ import annotations

import base64
import dataclasses
from pathlib import Path

from contracts.checkpoint import Checkpoint, parse_checkpoint, sign_checkpoint
from contracts.identity import Identity
from contracts.note import NoteKey, encode_note, open_note, parse_note
from nodes.messages import Delivery
from nodes.wire import (
    WIRE_VERSION,
    deliver_request_from_bytes,
    delivery_from_pb,
    delivery_statement_size,
)

#: Issue #24's bound on a lone first delivery's statement bytes.
TARGET_BYTES = 480
#: The lone first delivery, as ``tests/nodes/wire_vectors.py`` writes it.
VECTOR = (
    Path(__file__).resolve().parents[1]
    / "tests"
    / "nodes"
    / "vectors"
    / f"deliver-request-v{WIRE_VERSION}.binpb"
)
#: The key that signed the vector's head (the vectors' origin, seed of 32 zero bytes).
ORIGIN = Identity.from_seed(bytes(32))
#: A proof naming its head by a one-byte position instead of a 32-byte digest.
_DIGEST_FOR_POSITION = 32 - 1


def first_delivery() -> Delivery:
    """The wire vector's lone first delivery, read from its golden file."""
    msg = deliver_request_from_bytes(VECTOR.read_bytes())
    return delivery_from_pb(msg.value, msg.sender)


def respelled(checkpoint: Checkpoint, key: NoteKey, *, origin: str, short_keywords: bool) -> bytes:
    """``checkpoint`` under ``origin``, signed by ``key``; keywords cut to one letter."""
    extensions = checkpoint.extensions
    if short_keywords:
        extensions = tuple(f"{line[0]}{line[line.index(' ') :]}" for line in extensions)
    note = sign_checkpoint(
        dataclasses.replace(checkpoint, origin=origin, extensions=extensions), key
    )
    data = encode_note(note)
    open_note(data, [key.verifier])  # a real signed note, or this raises
    return data


def main() -> int:
    origin = ORIGIN
    first = first_delivery()
    (head,) = first.heads
    (proof,) = first.fold_proofs
    checkpoint = parse_checkpoint(parse_note(head).text)
    open_note(head, [NoteKey(checkpoint.origin, origin).verifier])  # signed by ORIGIN, or raises
    epoch = checkpoint.origin.rsplit("/", 1)[1]
    b64_id = base64.urlsafe_b64encode(bytes.fromhex(origin.node_id)).rstrip(b"=").decode()
    short_origin = f"pn/{b64_id}/{epoch}"

    def sized(note: bytes) -> int:
        return delivery_statement_size(dataclasses.replace(first, heads=(note,)))

    rows: list[tuple[str, int, int | None]] = [("as the node signs it", sized(head), len(head))]
    variants = (
        ("node id in base64url, key name = origin", short_origin, short_origin, False),
        ("… and one-letter keywords", short_origin, short_origin, True),
        ("… and a one-letter key name (SHOULD broken)", short_origin, "k", True),
        ("one-letter origin and key name, one-letter keywords", "o", "o", True),
    )
    for what, line, name, short in variants:
        note = respelled(checkpoint, NoteKey(name, origin), origin=line, short_keywords=short)
        rows.append((what, sized(note), len(note)))
    rows.append(
        (
            "… and the proof naming its head by position (computed)",
            rows[-1][1] - _DIGEST_FOR_POSITION,
            None,
        )
    )
    print(f"fold proof: {len(proof)} B; target: lone first delivery <= {TARGET_BYTES} B")
    print(f"{'head note spelling':<58} {'note':>6} {'delivery':>9}")
    for what, size, note_len in rows:
        shown = f"{note_len} B" if note_len is not None else "-"
        verdict = "PASS" if size <= TARGET_BYTES else "FAIL"
        print(f"{what:<58} {shown:>6} {size:>7} B  {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
