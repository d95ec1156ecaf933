"""Custody statements (contracts.custody): one encoding, a strict parser, binding to a head.

Clause C1 (docs/contracts.md): a custody statement stands for a fold only with
the custodian's signature over its exact text and a binding to the verified
head and fold it names. The golden statement is kept in
``tests/contracts/vectors/custody/custody.json``; regenerate it (after a
deliberate layout change) with ``.venv/bin/python -m tests.contracts.test_custody``.
"""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import pytest

from contracts.custody import (
    CUSTODY_HEADER,
    CUSTODY_LINES,
    CustodyFold,
    CustodyFoldRef,
    CustodyStatement,
    bind_custody,
    custodian_key,
    custody_digest,
    custody_text,
    is_custody_note,
    open_custody,
    parse_custody,
    parse_custody_text,
    sign_custody,
)
from contracts.errors import BadSignature, BindingMismatch, ContractError, EncodingError, Expired
from contracts.head_note import is_head_note
from tests.contracts._support import DAY, NOW, fixed_identity, make_head_world

VECTOR = Path(__file__).with_name("vectors") / "custody" / "custody.json"
CUSTODIAN = fixed_identity("custodian")


def _statement(world=None, **changes: object) -> CustodyStatement:  # type: ignore[no-untyped-def]
    w = world if world is not None else make_head_world()
    h = w.head.statement
    base = CustodyStatement(
        custodian=CUSTODIAN.node_id,
        operator="op-b",
        origin=h.origin,
        epoch=h.epoch,
        size=h.seq + 1,
        log_root=h.log_root,
        head=w.head.digest,
        folds=(
            CustodyFoldRef(w.fold.leaf_hash.hex(), w.fold.record.root, w.fold.record.leaf_count),
        ),
        serve_until=NOW + DAY,
        deadline_ms=2_000,
        endpoints=("127.0.0.1:50052",),
        issued_at=NOW + 10,
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def _golden() -> dict[str, object]:
    signed = sign_custody(CUSTODIAN, _statement())
    return {
        "comment": (
            "A provnet custody statement (contracts.custody) for value:42 of the test head"
            " world (tests/contracts/_support.py), signed by fixed_identity('custodian');"
            " tests/contracts/test_custody.py"
        ),
        "vkey": custodian_key(CUSTODIAN.node_id).to_string(),
        "digest": signed.digest,
        "bytes": len(signed.note),
        "note": signed.note.decode("utf-8"),
    }


def test_c1_golden_custody_statement_is_reproduced_byte_for_byte() -> None:
    vector = json.loads(VECTOR.read_text())
    assert vector == _golden()
    opened = open_custody(vector["note"].encode("utf-8"))
    assert opened.digest == vector["digest"] == custody_digest(vector["note"].encode())
    assert opened.statement == _statement()


def test_c1_text_round_trips_and_follows_the_line_table() -> None:
    s = _statement()
    text = custody_text(s)
    assert parse_custody_text(text) == s
    assert custody_text(parse_custody_text(text)) == text
    rows = text.splitlines()
    assert rows[0] == CUSTODY_HEADER
    assert [r.split(" ")[0] for r in rows[1:]] == [line.keyword for line in CUSTODY_LINES]


def test_c1_signed_bytes_are_the_bytes_carried() -> None:
    signed = sign_custody(CUSTODIAN, _statement())
    opened = open_custody(signed.note)
    assert opened.note == signed.note
    assert opened.text == custody_text(_statement()).encode()
    assert parse_custody(signed.note).statement == opened.statement
    assert is_custody_note(signed.note)
    assert not is_head_note(signed.note)


@pytest.mark.parametrize(
    ("mutate", "expect"),
    [
        (lambda t: t.replace("provnet-custody/v1", "provnet-custody/v2"), "line 1"),
        (lambda t: t.replace("serve ", "serve 0"), "serve_until"),
        (lambda t: t.replace("operator op-b", "operator op b"), "values"),
        (lambda t: t + "extra line\n", "unknown, repeated or out of order"),
        (lambda t: t.replace("issued ", "issued 01"), "leading zero"),
        (lambda t: "\n".join(r for r in t.split("\n") if not r.startswith("endpoint")), "endpoint"),
        (lambda t: t.replace("=", ""), "base64"),
    ],
)
def test_c1_parser_is_strict_and_names_what_failed(mutate, expect) -> None:  # type: ignore[no-untyped-def]
    text = custody_text(_statement())
    with pytest.raises(EncodingError, match=expect):
        parse_custody_text(mutate(text))


def test_c1_a_statement_not_signed_by_the_custodian_it_names_does_not_verify() -> None:
    forger = fixed_identity("forger")
    s = _statement(custodian=forger.node_id)
    forged = sign_custody(forger, s)
    # the forger rewrites the custodian line to the honest custodian's id and keeps its signature
    text = forged.note.decode().replace(forger.node_id, CUSTODIAN.node_id, 1)
    with pytest.raises(BadSignature):
        open_custody(text.encode())
    with pytest.raises(BindingMismatch, match="not"):
        open_custody(forged.note, custodian=CUSTODIAN.node_id)


def test_c1_binding_to_head_and_fold() -> None:
    w = make_head_world()
    custody = open_custody(sign_custody(CUSTODIAN, _statement(w)).note)
    bound = bind_custody(custody, w.fold, now=NOW)
    assert isinstance(bound, CustodyFold)
    assert bound.custodian == CUSTODIAN.node_id
    # the stand-ins name the custodian, the fold record and the statement
    assert bound.commitment.digest == w.fold.commitment.digest
    assert bound.commitment.statement.origin == CUSTODIAN.node_id
    assert bound.obligation.digest == custody.digest
    assert bound.obligation.statement.endpoints == ("127.0.0.1:50052",)
    # another head of another world: refused, naming the field
    other = make_head_world(values=4)
    with pytest.raises(BindingMismatch, match=r"log root|head digest"):
        bind_custody(custody, other.fold)
    wrong_root = open_custody(
        sign_custody(
            CUSTODIAN,
            _statement(w, folds=(CustodyFoldRef(w.fold.leaf_hash.hex(), "ab" * 32, 8),)),
        ).note
    )
    with pytest.raises(BindingMismatch, match="root"):
        bind_custody(wrong_root, w.fold)
    with pytest.raises(Expired):
        bind_custody(custody, w.fold, now=NOW + 2 * DAY)
    with pytest.raises(ValueError, match="verified"):
        bind_custody(parse_custody(custody.note), w.fold)


def test_c1_statement_size_grows_with_k_not_with_folds_of_one_value() -> None:
    # one statement per custodian; a value's fold proof names one fold record per origin
    one = len(sign_custody(CUSTODIAN, _statement()).note)
    assert one < 700


def _fuzz(runs: int, seed: int) -> int:
    rng = random.Random(seed)
    note = sign_custody(CUSTODIAN, _statement()).note
    accepted = 0
    for _ in range(runs):
        data = bytearray(note)
        for _ in range(rng.randint(1, 4)):
            if not data:
                break
            op = rng.randrange(4)
            at = rng.randrange(len(data))
            if op == 0:
                data[at] ^= 1 << rng.randrange(8)
            elif op == 1:
                del data[at : at + rng.randint(1, 8)]
            elif op == 2:
                data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
            else:
                data = data[:at]
        try:
            opened = open_custody(bytes(data))
        except ContractError:
            continue
        accepted += 1
        assert opened.statement == _statement()  # only the untouched statement verifies
    return accepted


def test_c1_fuzz_mutated_statements_only_raise_contract_errors() -> None:
    _fuzz(300, seed=25)


@pytest.mark.long
def test_c1_fuzz_long_run_of_mutated_statements() -> None:
    _fuzz(50_000, seed=2025)


if __name__ == "__main__":
    VECTOR.write_text(json.dumps(_golden(), indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {VECTOR}")
