"""A rehydration proof whose head signature is damaged is refused as a bad signature.

The head-form proof's error is re-raised with the head it names; a signature line
by the origin's key that does not verify (``LineNotVerified``, which also names its
key) must come out as the contract error it is, never as a crash of the checker.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from contracts.attest import RehydrationProof, verify_rehydration
from contracts.errors import BadSignature

VECTOR = Path(__file__).parent / "vectors" / "rehydration-proof-head.json"


def _flip_signature_bit(note: str) -> str:
    body, _, sig_line = note.rstrip("\n").rpartition("\n")
    prefix, _, b64 = sig_line.rpartition(" ")
    raw = bytearray(base64.b64decode(b64))
    raw[-1] ^= 1  # the Ed25519 signature's last byte; the key id stays
    return f"{body}\n{prefix} {base64.b64encode(bytes(raw)).decode('ascii')}\n"


def test_a_flipped_head_signature_bit_is_a_bad_signature_naming_the_head() -> None:
    obj = json.loads(VECTOR.read_text(encoding="utf-8"))
    verify_rehydration(RehydrationProof.from_json(obj))  # the vector itself verifies
    obj["head"] = _flip_signature_bit(obj["head"])
    with pytest.raises(BadSignature, match=r"inclusion proof under head .* rejected"):
        verify_rehydration(RehydrationProof.from_json(obj))
