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
from contracts.evidence import AnswerKind, Evidence, EvidenceKind, verify_evidence
from contracts.head_note import is_head_note
from contracts.lazy import judge_fold_answer
from contracts.serve import answer_demand, build_demand, sign_served
from harness.cli import main as provnet_main
from tests.contracts._support import DAY, NOW, HeadWorld, fixed_identity, make_head_world

VECTOR = Path(__file__).with_name("vectors") / "custody" / "custody.json"
CUSTODIAN = fixed_identity("custodian")


def _statement(world=None, **changes: object) -> CustodyStatement:  # type: ignore[no-untyped-def]
    w = world if world is not None else make_head_world()
    base = CustodyStatement(
        custodian=CUSTODIAN.node_id,
        operator="op-b",
        head=w.head.digest,
        folds=(w.fold.leaf_hash.hex(),),
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
        (lambda t: t.replace("provnet-custody/v2", "provnet-custody/v1"), "line 1"),
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
    with pytest.raises(BindingMismatch, match="head"):
        bind_custody(custody, other.fold)
    # a statement naming another fold of the head does not stand for this one
    another = open_custody(sign_custody(CUSTODIAN, _statement(w, folds=("ab" * 32,))).note)
    with pytest.raises(BindingMismatch, match="does not name fold"):
        bind_custody(another, w.fold)
    # naming no fold: every fold of the head
    every = open_custody(sign_custody(CUSTODIAN, _statement(w, folds=())).note)
    assert bind_custody(every, w.fold).custodian == CUSTODIAN.node_id
    with pytest.raises(Expired):
        bind_custody(custody, w.fold, now=NOW + 2 * DAY)
    with pytest.raises(ValueError, match="verified"):
        bind_custody(parse_custody(custody.note), w.fold)


def test_c1_an_origin_is_not_its_own_custodian() -> None:
    w = make_head_world()
    own = _statement(w, custodian=w.origin.node_id)
    with pytest.raises(BindingMismatch, match="not its own custodian"):
        bind_custody(open_custody(sign_custody(w.origin, own).note), w.fold)


def test_c1_one_statement_per_head_its_bytes_do_not_grow_with_the_folds() -> None:
    """A statement for every fold of a head names none of them: its bytes are the
    same for a compaction of 3 folds or of 40 (O(k) per value, never O(folds))."""
    small, large = make_head_world(values=3), make_head_world(values=40)
    a = sign_custody(CUSTODIAN, _statement(small, folds=())).note
    b = sign_custody(CUSTODIAN, _statement(large, folds=())).note
    assert len(a) == len(b) < 450


def test_c1_open_fold_refuses_an_expired_head_as_well_as_an_expired_statement() -> None:
    from contracts.custody import custody_bundle, open_fold

    w = make_head_world(serve_until=NOW + 1_000)
    note = sign_custody(CUSTODIAN, _statement(w, serve_until=NOW + DAY)).note
    bundle = custody_bundle(w.head.note, note)
    assert isinstance(open_fold(bundle, w.fold.proof, now=NOW), CustodyFold)
    with pytest.raises(Expired, match="head"):
        open_fold(bundle, w.fold.proof, now=NOW + 2_000)
    with pytest.raises(Expired, match="head"):
        open_fold(w.head.note, w.fold.proof, now=NOW + 2_000)


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


# ------------------------------------------------------- evidence naming a custodian


def _custody_world() -> tuple[HeadWorld, CustodyFold]:
    w = make_head_world()
    custody = open_custody(sign_custody(CUSTODIAN, _statement(w)).note)
    return w, bind_custody(custody, w.fold, now=NOW)


def test_c3_custodian_bad_data_is_proof_naming_the_custodian_not_the_origin() -> None:
    w, cfold = _custody_world()
    demand = build_demand(w.holder, cfold.obligation, now=NOW + 1_000, nonce="b2" * 16)
    lie = (*w.hops["value:42"][:-1], b'{"lie":1}')
    receipt = sign_served(
        CUSTODIAN,
        demand,
        obligation=cfold.obligation,
        commitment=cfold.commitment,
        hops=lie,
        now=NOW + 1_001,
    )
    answer = judge_fold_answer(receipt, lie, demand=demand, fold=cfold, reported_at=NOW + 1_002)
    assert answer.evidence is not None
    data = answer.evidence.to_bytes()
    verdict = verify_evidence(data, now=NOW + 2_000)
    assert verdict.kind is EvidenceKind.BAD_DATA
    assert verdict.accused == CUSTODIAN.node_id != w.origin.node_id
    assert cfold.custody is not None
    assert verdict.obligation == cfold.custody.digest
    # the record's custody note is the statement as signed
    assert Evidence.from_bytes(data).custody == cfold.custody.note


def test_c3_custodian_refusal_before_serve_until_is_proof() -> None:
    w, cfold = _custody_world()
    demand = build_demand(w.holder, cfold.obligation, now=NOW + 1_000, nonce="c3" * 16)
    receipt = answer_demand(
        CUSTODIAN,
        demand,
        obligation=cfold.obligation,
        commitment=cfold.commitment,
        hops=None,
        now=NOW + 1_001,
    )
    answer = judge_fold_answer(receipt, (), demand=demand, fold=cfold, reported_at=NOW + 1_002)
    assert answer.evidence is not None
    verdict = verify_evidence(answer.evidence.to_bytes(), now=NOW + 2_000)
    assert verdict.kind is EvidenceKind.REFUSED
    assert verdict.accused == CUSTODIAN.node_id


def test_c3_honest_custodian_serving_is_served_without_a_signature_check() -> None:
    w, cfold = _custody_world()
    hops = w.hops["value:42"]
    demand = build_demand(w.holder, cfold.obligation, now=NOW + 1_000, nonce="d4" * 16)
    receipt = answer_demand(
        CUSTODIAN,
        demand,
        obligation=cfold.obligation,
        commitment=cfold.commitment,
        hops=hops,
        now=NOW + 1_001,
    )
    answer = judge_fold_answer(receipt, hops, demand=demand, fold=cfold, reported_at=NOW + 1_002)
    assert answer.kind is AnswerKind.SERVED
    assert answer.evidence is None


def test_c3_a_custodian_cannot_be_framed_with_a_statement_it_did_not_sign() -> None:
    """Accuracy: a record naming an honest custodian with a forger's statement (its
    custodian line rewritten) or another custodian's statement does not verify."""
    w, cfold = _custody_world()
    forger = fixed_identity("forger")
    fcustody = open_custody(sign_custody(forger, _statement(w, custodian=forger.node_id)).note)
    ffold = bind_custody(fcustody, w.fold)
    demand = build_demand(w.holder, ffold.obligation, now=NOW + 1_000, nonce="e5" * 16)
    receipt = answer_demand(
        forger,
        demand,
        obligation=ffold.obligation,
        commitment=ffold.commitment,
        hops=None,
        now=NOW + 1_001,
    )
    answer = judge_fold_answer(receipt, (), demand=demand, fold=ffold, reported_at=NOW + 1_002)
    assert answer.evidence is not None
    assert verify_evidence(answer.evidence, now=NOW + 2_000).accused == forger.node_id
    framed = dataclasses.replace(answer.evidence, accused=CUSTODIAN.node_id)
    with pytest.raises(ContractError):
        verify_evidence(framed.to_bytes(), now=NOW + 2_000)
    swapped = dataclasses.replace(
        answer.evidence,
        accused=CUSTODIAN.node_id,
        custody=cfold.custody.note if cfold.custody else None,
    )
    with pytest.raises(ContractError):  # the demand and receipt are for another statement
        verify_evidence(swapped.to_bytes(), now=NOW + 2_000)


def test_c3_provnet_evidence_verify_reads_evidence_naming_a_custodian(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit codes unchanged: 0 for a record that accuses the custodian, 1 for one
    framed on another key."""
    w, cfold = _custody_world()
    demand = build_demand(w.holder, cfold.obligation, now=NOW + 1_000, nonce="f6" * 16)
    lie = (*w.hops["value:42"][:-1], b'{"lie":2}')
    receipt = sign_served(
        CUSTODIAN,
        demand,
        obligation=cfold.obligation,
        commitment=cfold.commitment,
        hops=lie,
        now=NOW + 1_001,
    )
    answer = judge_fold_answer(receipt, lie, demand=demand, fold=cfold, reported_at=NOW + 1_002)
    assert answer.evidence is not None
    good = tmp_path / "custodian.json"
    good.write_bytes(answer.evidence.to_bytes())
    assert provnet_main(["evidence", "verify", str(good), "--now", str(NOW + 2_000)]) == 0
    out = capsys.readouterr().out
    assert CUSTODIAN.node_id[:16] in out
    framed = tmp_path / "framed.json"
    record = json.loads(good.read_bytes())
    record["accused"] = w.origin.node_id
    framed.write_text(json.dumps(record))
    assert provnet_main(["evidence", "verify", str(framed), "--now", str(NOW + 2_000)]) == 1


def _fuzz_evidence(runs: int, seed: int) -> None:
    """Mutated records against a custodian: every one verifies as the original does,
    or is rejected with a ContractError; none accuses anyone but the custodian."""
    w, cfold = _custody_world()
    demand = build_demand(w.holder, cfold.obligation, now=NOW + 1_000, nonce="a7" * 16)
    receipt = answer_demand(
        CUSTODIAN,
        demand,
        obligation=cfold.obligation,
        commitment=cfold.commitment,
        hops=None,
        now=NOW + 1_001,
    )
    answer = judge_fold_answer(receipt, (), demand=demand, fold=cfold, reported_at=NOW + 1_002)
    assert answer.evidence is not None
    base = answer.evidence.to_json()
    rng = random.Random(seed)
    others = [w.origin.node_id, w.holder.node_id, fixed_identity("forger").node_id]
    for _ in range(runs):
        record = json.loads(json.dumps(base))
        match rng.randrange(4):
            case 0:  # a byte of the custody note
                note = bytearray(record["custody"].encode())
                note[rng.randrange(len(note))] ^= 1 << rng.randrange(7)
                record["custody"] = note.decode("utf-8", "replace")
            case 1:
                record["accused"] = rng.choice(others)
            case 2:
                record[rng.choice(["custody", "proof", "commitment", "receipt"])] = rng.choice(
                    [None, "", 7, [], {}]
                )
            case _:
                record["commitment"], record["custody"] = record["custody"], record["commitment"]
        try:
            verdict = verify_evidence(json.dumps(record).encode(), now=NOW + 2_000)
        except ContractError:
            continue
        assert verdict.accused == CUSTODIAN.node_id


def test_c3_fuzz_mutated_custodian_evidence_never_accuses_another_party() -> None:
    _fuzz_evidence(200, seed=7)


@pytest.mark.long
def test_c3_fuzz_long_run_of_mutated_custodian_evidence() -> None:
    _fuzz_evidence(20_000, seed=77)
