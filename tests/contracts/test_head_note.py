"""A head as a C2SP tlog-checkpoint signed note (design revision 3).

The note is checked three ways: against :mod:`contracts.checkpoint` (the
parser the specs' own examples pin, tests/contracts/vectors/c2sp), against
the C2SP rules recomputed here from first principles (key id, Ed25519 over
the text), and byte for byte against the golden head in
``tests/contracts/vectors/c2sp/provnet-head.json``.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from contracts.checkpoint import (
    Checkpoint,
    cosign_checkpoint,
    encode_checkpoint,
    parse_checkpoint,
    sign_checkpoint,
    verify_checkpoint,
)
from contracts.errors import BadSignature, BindingMismatch, EncodingError
from contracts.head_note import (
    HEAD_LINES,
    MAX_HEAD_BYTES,
    head_checkpoint,
    head_from_checkpoint,
    head_log_key,
    head_origin,
    open_head,
    parse_head,
    sign_head,
)
from contracts.heads import FoldInput, HeadLog
from contracts.identity import Identity
from contracts.note import NoteKey, VerifierKey, encode_base64, parse_note
from contracts.statements import Head

ORIGIN = Identity.from_seed(bytes(32))
OTHER = Identity.from_seed(bytes([1]) * 32)
WITNESS = Identity.from_seed(bytes([2]) * 32)
EPOCH = "7-0123456789abcdef"
VECTOR = Path(__file__).with_name("vectors") / "c2sp" / "provnet-head.json"


def _head(**changes: object) -> Head:
    """Compaction 1 of a 20-value epoch (the head of tests/nodes/wire_vectors)."""
    log = HeadLog(ORIGIN, EPOCH)
    refs = [f"C25-med-s0/v0.{40 + i}" for i in range(20)]
    for fold_seq in (0, 1):
        compaction = log.compact(
            [
                FoldInput(r, fold_seq, [b"hop %d %d" % (fold_seq, i) for i in range(25)])
                for r in refs
            ],
            serve_until=1_764_503_600_000,
            deadline_ms=2000,
            endpoints=["127.0.0.1:50051"],
            issued_at=1_764_500_000_000,
        )
    return dataclasses.replace(compaction.head.statement, **changes)  # type: ignore[arg-type]


def _resign(note: bytes, text: str, identity: Identity = ORIGIN) -> bytes:
    """``text`` signed by ``identity`` under the note's key name (a well-formed forgery)."""
    name = parse_note(note).signatures[0].name
    checkpoint = parse_checkpoint(text)
    return sign_checkpoint(checkpoint, NoteKey(name, identity)).to_bytes()


def test_a_head_is_a_tlog_checkpoint_with_the_log_of_heads_as_its_tree() -> None:
    head = _head()
    signed = sign_head(ORIGIN, head)
    checkpoint = parse_checkpoint(parse_note(signed.note).text)
    assert checkpoint.origin == f"provnet/{ORIGIN.node_id}/{EPOCH}"
    # the checkpoint's tree is the epoch's log of heads: seq + 1 compactions, its root
    assert checkpoint.size == head.seq + 1 == 2
    assert checkpoint.root.hex() == head.log_root
    assert checkpoint.extensions == (
        f"folds 20 {encode_base64(bytes.fromhex(head.root))}",
        "issued 1764500000000",
        "serve 1764503600000 2000",
        "endpoint 127.0.0.1:50051",
    )
    assert [line.keyword for line in HEAD_LINES] == [
        "folds",
        "issued",
        "serve",
        "endpoint",
        "pending",
    ]


def test_a_head_note_follows_c2sp_recomputed_from_first_principles() -> None:
    """Key name = origin line, key id = SHA-256(name ‖ 0x0A ‖ 0x01 ‖ key)[:4], Ed25519
    over the text (final newline included), one signature line after the blank line."""
    signed = sign_head(ORIGIN, _head())
    text, blank, line = signed.note.decode("utf-8").rpartition("\n\n")
    text += "\n"
    name = f"provnet/{ORIGIN.node_id}/{EPOCH}"
    assert blank == "\n\n"
    assert line.startswith(f"\u2014 {name} ")
    assert line.endswith("\n")
    raw = base64.b64decode(line.rstrip("\n").rsplit(" ", 1)[1], validate=True)
    public = bytes.fromhex(ORIGIN.node_id)
    assert raw[:4] == hashlib.sha256(name.encode() + b"\n\x01" + public).digest()[:4]
    Ed25519PublicKey.from_public_bytes(public).verify(raw[4:], text.encode())
    assert signed.digest == hashlib.sha256(text.encode()).hexdigest()
    assert signed.note.count(b"\n\n") == 1


def test_a_head_note_is_verified_by_verify_checkpoint_on_its_bytes() -> None:
    signed = sign_head(ORIGIN, _head())
    key = VerifierKey.ed25519(f"provnet/{ORIGIN.node_id}/{EPOCH}", ORIGIN.public)
    assert head_log_key(ORIGIN.node_id, EPOCH) == key
    verified = verify_checkpoint(signed.note, log_key=key)
    assert verified.raw == signed.note
    opened = open_head(signed.note, origin=ORIGIN.node_id)
    assert opened.statement == _head()
    assert opened.note == signed.note
    assert opened.digest == signed.digest
    assert parse_head(signed.note).statement == opened.statement


def test_one_text_per_head_encode_and_decode_walk_one_table() -> None:
    for head in (
        _head(),
        _head(pending=True),
        _head(endpoints=()),
        _head(endpoints=("[::1]:7000", "node-b.example:443", "unix:/tmp/s")),
        _head(seq=0, epoch="run-1"),
    ):
        checkpoint = head_checkpoint(head)
        assert head_from_checkpoint(checkpoint) == head
        assert parse_checkpoint(encode_checkpoint(checkpoint)) == checkpoint
    assert head_checkpoint(_head(pending=True)).extensions[-1] == "pending"


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (lambda x: x[1:], "expected the 'folds' line"),
        (lambda x: [x[1], x[0], *x[2:]], "expected the 'folds' line"),
        (lambda x: [*x, x[-1].replace("endpoint", "pending")], "unknown, repeated"),
        (lambda x: [x[0], x[1], x[1], *x[2:]], "expected the 'serve' line"),
        (lambda x: [*x, "cosigned-by somebody"], "unknown, repeated"),
        (lambda x: [x[0], "issued 01764500000000", *x[2:]], "leading zero"),
        (lambda x: [x[0], "issued  1764500000000", *x[2:]], "values"),
        (lambda x: [x[0], x[1], "serve 1764503600000 0", *x[3:]], "outside"),
        (lambda x: ["folds 20 " + "A" * 42 + "B=", *x[1:]], "not canonical base64"),
        (lambda x: ["folds 0 " + x[0].split()[2], *x[1:]], "outside"),
    ],
)
def test_a_head_note_with_lines_out_of_place_is_refused_naming_the_line(
    lines: object, message: str
) -> None:
    good = head_checkpoint(_head())
    extensions = lines(list(good.extensions))  # type: ignore[operator]
    bad = Checkpoint(good.origin, good.size, good.root, tuple(extensions))
    with pytest.raises(EncodingError, match=message):
        head_from_checkpoint(bad)
    # signed by the origin itself, it is still not a head
    note = sign_checkpoint(bad, NoteKey(bad.origin, ORIGIN)).to_bytes()
    with pytest.raises(EncodingError, match=message):
        open_head(note)


def test_a_changed_head_line_fails_its_signature() -> None:
    note = sign_head(ORIGIN, _head()).note
    for old, new in (
        (b"serve 1764503600000", b"serve 1864503600000"),
        (b"folds 20", b"folds 21"),
        (b"endpoint 127.0.0.1:50051", b"endpoint 10.0.0.9:50051"),
        (b"\n2\n", b"\n3\n"),
    ):
        assert old in note
        with pytest.raises(BadSignature, match=f"provnet/{ORIGIN.node_id[:16]}"):
            open_head(note.replace(old, new, 1))


def test_a_head_naming_another_origin_does_not_verify_as_its_head() -> None:
    """An adversary's key cannot speak for an origin line naming someone else."""
    note = sign_head(ORIGIN, _head()).note
    forged = _resign(note, parse_note(note).text, identity=OTHER)
    with pytest.raises(BadSignature, match="no signature by a trusted key"):
        open_head(forged)
    # its own head, relabelled as another node's epoch: the key is the named node's
    mine = sign_head(OTHER, _head(origin=OTHER.node_id)).note
    relabelled = mine.replace(OTHER.node_id.encode(), ORIGIN.node_id.encode())
    with pytest.raises(BadSignature):
        open_head(relabelled)
    with pytest.raises(BindingMismatch, match="not"):
        open_head(note, origin=OTHER.node_id)
    with pytest.raises(ValueError, match="identity"):
        sign_head(OTHER, _head())


def test_origin_lines_that_are_not_a_heads_are_refused() -> None:
    good = head_checkpoint(_head())
    for origin in (
        "example.com/behind-the-sofa",
        f"provnet/{ORIGIN.node_id}",
        f"provnet/{ORIGIN.node_id.upper()}/{EPOCH}",
        f"provnet/{ORIGIN.node_id}/a/b",
        f"other/{ORIGIN.node_id}/{EPOCH}",
    ):
        with pytest.raises(EncodingError, match="origin"):
            head_from_checkpoint(dataclasses.replace(good, origin=origin))
    for epoch in ("", "a b", "a+b", "x" * 129):
        with pytest.raises(ValueError, match="epoch"):
            head_origin(ORIGIN.node_id, epoch)
    with pytest.raises(EncodingError, match="bytes, more than"):
        open_head(b"x" * (MAX_HEAD_BYTES + 1))


def test_a_witness_cosignature_leaves_the_head_and_its_digest_unchanged() -> None:
    signed = sign_head(ORIGIN, _head())
    note = parse_note(signed.note)
    witness = NoteKey("witness.example", WITNESS, sig_type=0x04)
    cosigned = note.with_signatures(
        cosign_checkpoint(note, witness, timestamp=1_764_500_001)
    ).to_bytes()
    opened = open_head(cosigned, cosigners=(witness.verifier,), now=1_764_500_002_000)
    assert opened.digest == signed.digest
    assert opened.statement == signed.statement
    assert opened.note == cosigned  # carried as received, witness line included
    assert opened.verified is not None
    assert opened.verified.cosigners == {witness.verifier.key}
    # without the witness's key the line is kept, unverified, and the head still verifies
    assert open_head(cosigned).verified.unverified  # type: ignore[union-attr]


def test_the_golden_head_note_is_reproduced_byte_for_byte() -> None:
    """Ed25519 (RFC 8032) is deterministic: a fixed key and clock give fixed bytes.
    Regenerate (after a deliberate layout change) with
    ``.venv/bin/python -m tests.contracts.test_head_note``."""
    vector = json.loads(VECTOR.read_text())
    assert vector == _golden()
    opened = open_head(vector["note"].encode("utf-8"))
    assert opened.digest == vector["digest"]
    assert len(vector["note"].encode("utf-8")) == vector["bytes"]


def _golden() -> dict[str, object]:
    signed = sign_head(ORIGIN, _head())
    return {
        "comment": (
            "A provnet head (contracts.head_note): compaction 1 of a 20-value epoch,"
            " signed by Identity.from_seed(bytes(32)); tests/contracts/test_head_note.py"
        ),
        "vkey": head_log_key(ORIGIN.node_id, EPOCH).to_string(),
        "head": json.loads(json.dumps(dataclasses.asdict(signed.statement))),
        "digest": signed.digest,
        "bytes": len(signed.note),
        "note": signed.note.decode("utf-8"),
    }


if __name__ == "__main__":
    VECTOR.write_text(json.dumps(_golden(), indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {VECTOR}")
