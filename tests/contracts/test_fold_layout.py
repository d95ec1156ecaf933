"""Fold records and fold proofs: one layout each, read strictly, the old JSON form refused."""

from __future__ import annotations

import json

import pytest

from contracts.errors import EncodingError
from contracts.fold_layout import PROOF_LAYOUT, RECORD_LAYOUT, decode, encode
from contracts.heads import FoldInput, FoldProof, FoldRecord, HeadLog
from contracts.identity import Identity

ORIGIN = Identity.from_seed(bytes(32))


def _log() -> HeadLog:
    log = HeadLog(ORIGIN, "7-0123456789abcdef")
    for seq in range(3):
        log.compact(
            [FoldInput("a", seq, [b"a%d" % seq]), FoldInput("b", seq, [b"b"])],
            serve_until=5_000,
            deadline_ms=1,
            endpoints=(),
            issued_at=1,
        )
    return log


def test_a_fold_record_is_its_layout_byte_for_byte() -> None:
    record = FoldRecord("v/1", 300, 2, "11" * 32, "22" * 32)
    data = record.to_bytes()
    # prev present (0x01 + 32), fold_seq 300 (2-byte varint), leaf_count 2, root, "v/1"
    assert data == b"\x01" + b"\x22" * 32 + b"\xac\x02" + b"\x02" + b"\x11" * 32 + b"\x03v/1"
    assert FoldRecord.from_bytes(data) == record
    first = FoldRecord("v", 0, 1, "11" * 32)
    assert first.to_bytes()[0] == 0
    assert len(first.to_bytes()) == 1 + 1 + 1 + 32 + 2


def test_a_fold_proof_is_its_layout_and_keeps_its_records_verbatim() -> None:
    proof = _log().fold_proof("a", back=2)
    data = proof.to_bytes()
    assert data[:32] == bytes.fromhex(proof.head)
    assert proof.record in data
    assert all(c in data for c in proof.chain)
    assert data.endswith(b"".join(proof.path))
    again = FoldProof.from_bytes(data)
    assert again == proof
    assert len(again.chain) == 2
    assert FoldProof.from_text(proof.to_text()) == proof
    values = decode(PROOF_LAYOUT, data, "fold proof")
    assert encode(PROOF_LAYOUT, values) == data  # one table, both ways


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x02" + bytes(32), "presence byte 0x02"),
        (b"\x00\x80\x00" + bytes(32), "not a shortest-form varint"),
        (b"\x00" + b"\xff" * 11, "more than 10 bytes"),
        (b"\x00\x00\x01" + bytes(31), "ends inside its root"),
        (b"\x00\x00\x01" + bytes(32) + b"\x02a", "ends inside its value_ref"),
        (b"\x00\x00\x01" + bytes(32) + b"\x01\xff", "not UTF-8"),
        (b"\x00\x00\x01" + bytes(32) + b"\x00\x00", "1 bytes after its last part"),
        (b"\x00\x00\x01" + bytes(32) + b"\x88\x08", "1032 bytes"),
    ],
)
def test_malformed_fold_records_are_refused_naming_the_part(data: bytes, message: str) -> None:
    with pytest.raises(EncodingError, match=message):
        FoldRecord.from_bytes(data)


def test_malformed_fold_proofs_are_refused_naming_the_part() -> None:
    data = _log().fold_proof("a", back=1).to_bytes()
    for n in range(32 + 1 + 1):
        with pytest.raises(EncodingError, match="fold proof"):
            FoldProof.from_bytes(data[:n])
    with pytest.raises(EncodingError, match="not whole 32-byte hashes"):
        FoldProof.from_bytes(data + b"\x00")
    record = FoldRecord("a", 0, 1, "11" * 32).to_bytes()
    with pytest.raises(EncodingError, match="8193 chain records"):
        FoldProof.from_bytes(bytes(32) + b"\x00" + record + b"\x81\x40")
    with pytest.raises(EncodingError, match="canonical"):
        FoldProof.from_text(FoldProof.from_bytes(data).to_text().rstrip("=") + "==")


def test_the_earlier_json_forms_are_refused_by_name() -> None:
    record = FoldRecord("a", 0, 1, "11" * 32)
    old_record = json.dumps(
        {"n": 1, "p": None, "r": "11" * 32, "s": 0, "v": "a"}, separators=(",", ":")
    ).encode()
    with pytest.raises(EncodingError, match="JSON fold record, the earlier form"):
        FoldRecord.from_bytes(old_record)
    old_proof = {"head": "ab" * 32, "index": 0, "path": "", "record": {"n": 1}}
    with pytest.raises(EncodingError, match="earlier JSON form of a fold proof"):
        FoldProof.from_text(old_proof)
    assert decode(RECORD_LAYOUT, record.to_bytes(), "r")["value_ref"] == "a"


def test_evidence_citing_a_fold_proof_in_the_earlier_json_form_is_refused_by_name() -> None:
    from contracts.evidence import cited_fold

    proof = _log().fold_proof("a")
    assert cited_fold({"fold": proof.to_text()}) == proof
    old = {"head": proof.head, "index": proof.index, "path": "", "record": {"n": 1}}
    with pytest.raises(EncodingError, match="earlier JSON form"):
        cited_fold(old)
    with pytest.raises(EncodingError, match="must be"):
        cited_fold({"fold": proof.to_text(), "extra": 1})
