"""A quorum check parses the note once and checks each signature once."""

from __future__ import annotations

from typing import Any

import pytest

import contracts.checkpoint
import contracts.note
import contracts.witness_policy
from contracts.head_note import head_log_key
from contracts.identity import SignatureCount, observe_signatures
from contracts.witness_policy import check_quorum, parse_policy
from tests.contracts._support import EPOCH, NOW, fixed_identity
from tests.contracts.test_witness import _cosigned, _log, _policy, _witnesses


def test_a_quorum_check_parses_once_and_checks_each_signature_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ws = _witnesses(3)
    policy = parse_policy(_policy(3, 2))
    origin = fixed_identity("origin")
    note = _cosigned(_log(origin, 1).heads[0].note, ws[:2])
    parses: list[int] = []
    parse = contracts.note.parse_note

    def counting(*args: Any, **kwargs: Any) -> contracts.note.Note:
        parses.append(1)
        return parse(*args, **kwargs)

    for module in (contracts.note, contracts.checkpoint, contracts.witness_policy):
        if hasattr(module, "parse_note"):
            monkeypatch.setattr(module, "parse_note", counting)
    count = SignatureCount()
    with observe_signatures(count):
        result = check_quorum(note, policy, NOW, log_key=head_log_key(origin.node_id, EPOCH))
    assert result, result.message
    assert result.cosigned == ("w1", "w2")
    assert (len(parses), count.verifies) == (1, 3)  # the log's signature and two cosignatures
