"""Witness-cosigned heads: tlog-witness add-checkpoint and the tlog-policy quorum (clause W1-W3).

Vectors: ``vectors/c2sp/tlog-witness.json`` (the spec's example request and
response bodies) and ``vectors/c2sp/tlog-policy.json`` (the spec's example
policy, keys substituted), each with the repository, commit and section it
was copied from.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.checkpoint import Checkpoint, parse_checkpoint, sign_checkpoint, verify_checkpoint
from contracts.errors import BadSignature, EncodingError, NotAuthorized
from contracts.evidence import EvidenceKind, EvidenceStatus, verify_evidence
from contracts.head_note import head_log_key, sign_head
from contracts.heads import FoldInput, HeadLog
from contracts.identity import Identity
from contracts.note import NoteKey, VerifierKey, encode_note, parse_note
from contracts.witness import (
    EMPTY_TREE_ROOT,
    MAX_PROOF_LINES,
    AddCheckpoint,
    Rejection,
    WitnessAnswer,
    WitnessOutcome,
    WitnessState,
    add_checkpoint,
    encode_add_checkpoint,
    parse_add_checkpoint,
    parse_conflict,
    provnet_head_logs,
    witness_note_key,
    witness_vkey,
)
from contracts.witness_policy import check_quorum, parse_policy, verify_quorum
from tests.contracts._support import EPOCH, NOW, fixed_identity, make_hops

VECTORS = Path(__file__).with_name("vectors") / "c2sp"
WITNESS_V = json.loads((VECTORS / "tlog-witness.json").read_text())
POLICY_V = json.loads((VECTORS / "tlog-policy.json").read_text())
TERMS = {"serve_until": NOW + 86_400_000, "deadline_ms": 2_000, "endpoints": ["127.0.0.1:50051"]}
T = NOW // 1000  # cosignature timestamps are seconds


def _log(origin: Identity, n: int, *, salt: int = 0) -> HeadLog:
    log = HeadLog(origin, EPOCH)
    for c in range(n):
        hops = make_hops(origin.node_id, 3, start=1 + 10 * c + 1000 * salt)
        log.compact([FoldInput(f"value:{c}", 0, hops)], issued_at=NOW + c, **TERMS)  # type: ignore[arg-type]
    return log


def _checkpoint(log: HeadLog, i: int) -> Checkpoint:
    return parse_checkpoint(parse_note(log.heads[i].note).text)


def _proof(log: HeadLog, old: int, new: int) -> tuple[bytes, ...]:
    """RFC 6962 PROOF(old, D[new]) between log sizes (not the seeded path)."""
    if old in (0, new):
        return ()
    path = log.consistency_path(old - 1, new - 1)
    return path[1:] if old & (old - 1) == 0 else path


def _ask(
    state: WitnessState | None,
    note: bytes,
    old: int,
    proof: tuple[bytes, ...] = (),
    *,
    witness: Identity | None = None,
) -> WitnessAnswer:
    return add_checkpoint(
        state,
        AddCheckpoint(old, proof, note),
        log_key=provnet_head_logs(),
        witness_key=witness_note_key(witness or fixed_identity("witness-1")),
        timestamp=T,
    )


# ------------------------------------------------------------ encodings (spec vectors)


def test_w1_add_checkpoint_body_of_the_spec_parses_and_reencodes_byte_for_byte() -> None:
    body = WITNESS_V["request"].encode("utf-8")
    request = parse_add_checkpoint(body)
    assert request.old_size == WITNESS_V["old_size"]
    assert len(request.proof) == WITNESS_V["proof_lines"]
    assert request.origin == WITNESS_V["origin"]
    assert encode_add_checkpoint(request) == body
    # The response lines are note signature lines: appended to the checkpoint
    # they parse as one note (tlog-witness: "the client MAY concatenate it").
    note = parse_note(request.checkpoint + WITNESS_V["response"].encode("utf-8"))
    assert [s.name for s in note.signatures][-3:] == WITNESS_V["response_keys"]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"old 01\n\nx\n", "line 1: old size '01' has a leading zero"),
        (b"size 1\n\nx\n", "line 1: expected 'old <size>'"),
        (b"old 1\nnot base64\n\nx\n", "line 2: proof hash is not base64"),
        (b"old 1\nAAAA\n\nx\n", "line 2: proof hash is 3 bytes"),
        (b"old 1\n", "no empty line"),
        (b"old 1\n\n", "no checkpoint after the empty line"),
        (b"old 1\n" + b"".join([base64.b64encode(bytes(32)) + b"\n"] * 64) + b"\nx", "64 proof"),
    ],
)
def test_w1_malformed_add_checkpoint_body_is_refused_naming_the_line(
    body: bytes, expected: str
) -> None:
    with pytest.raises(EncodingError, match=expected):
        parse_add_checkpoint(body)
    assert MAX_PROOF_LINES == 63


def test_w1_conflict_body_is_the_size_and_a_newline() -> None:
    assert parse_conflict(b"20852163\n") == 20852163
    with pytest.raises(EncodingError):
        parse_conflict(b"012\n")


# ------------------------------------------------------------ the state machine


def test_w1_witness_cosigns_a_new_log_from_size_zero_and_the_cosignature_verifies() -> None:
    origin, witness = fixed_identity("origin"), fixed_identity("witness-1")
    log = _log(origin, 1)
    note = log.heads[0].note
    answer = _ask(None, note, 0)
    assert answer
    assert answer.outcome is WitnessOutcome.COSIGNED
    assert answer.http_status == 200
    assert answer.state == WitnessState(
        _checkpoint(log, 0).origin, 1, bytes.fromhex(log.heads[0].statement.log_root), note
    )
    cosigned = note + answer.body
    verified = verify_checkpoint(
        cosigned,
        log_key=head_log_key(origin.node_id, EPOCH),
        cosigners=[witness_vkey(witness.node_id)],
        now=NOW,
    )
    assert [c.timestamp for c in verified.cosignatures] == [T]
    # the head digest is the note text's: cosigning leaves it the same head
    assert parse_note(cosigned).text == parse_note(note).text


def test_w1_witness_follows_the_log_with_consistency_proofs_sizes_1_to_6() -> None:
    log = _log(fixed_identity("origin"), 6)
    state: WitnessState | None = None
    for new in range(1, 7):
        old = 0 if state is None else state.size
        answer = _ask(state, log.heads[new - 1].note, old, _proof(log, old, new))
        assert answer, answer.message
        state = answer.state
    assert state is not None
    assert state.size == 6


def test_w1_stale_old_size_gets_the_conflict_answer_with_the_witness_size() -> None:
    log = _log(fixed_identity("origin"), 3)
    state = _ask(None, log.heads[0].note, 0).state
    answer = _ask(state, log.heads[2].note, 0)
    assert answer.outcome is WitnessOutcome.CONFLICT
    assert answer.http_status == 409
    assert parse_conflict(answer.body) == 1
    assert answer.state is None
    assert answer.inconsistency is None


def test_w1_refusals_name_their_reason() -> None:
    origin = fixed_identity("origin")
    log = _log(origin, 3)
    state = _ask(None, log.heads[1].note, 0).state  # at size 2
    # size regression: old above the checkpoint's size
    regress = _ask(state, log.heads[0].note, 2)
    assert regress.reason is Rejection.SIZE_REGRESSION
    assert regress.http_status == 400
    # bad proof: one hash flipped
    proof = list(_proof(log, 2, 3))
    proof[0] = bytes(32)
    bad = _ask(state, log.heads[2].note, 2, tuple(proof))
    assert bad.reason is Rejection.BAD_PROOF
    assert bad.http_status == 422
    assert not bad
    # a proof from size 0
    assert _ask(None, log.heads[0].note, 0, (bytes(32),)).reason is Rejection.BAD_PROOF
    # unknown log: a witness for another origin only
    other = add_checkpoint(
        None,
        AddCheckpoint(0, (), log.heads[0].note),
        log_key=provnet_head_logs(frozenset({fixed_identity("someone").node_id})),
        witness_key=witness_note_key(fixed_identity("witness-1")),
        timestamp=T,
    )
    assert other.reason is Rejection.UNKNOWN_LOG
    assert other.http_status == 404
    # bad signature: the head's text signed by another key under the origin's name
    forged = sign_checkpoint(
        _checkpoint(log, 0), NoteKey(_checkpoint(log, 0).origin, fixed_identity("mallory"))
    )
    refused = _ask(None, encode_note(forged), 0)
    assert refused.reason is Rejection.BAD_SIGNATURE
    assert refused.http_status == 403
    # malformed
    assert _ask(None, b"not a note\n", 0).reason is Rejection.MALFORMED


def test_w2_a_witness_never_cosigns_a_fork_at_its_size_and_keeps_split_view_evidence() -> None:
    origin = fixed_identity("origin")
    a, b = _log(origin, 1), _log(origin, 1, salt=1)  # two heads for compaction 0
    state = _ask(None, a.heads[0].note, 0).state
    for old in (0, 1):  # whatever old size the log claims
        answer = _ask(state, b.heads[0].note, old)
        assert not answer
        assert answer.cosignature is None
        assert answer.state is None
        assert answer.inconsistency is not None
        evidence = answer.inconsistency.evidence(reported_at=NOW)
        verdict = verify_evidence(evidence, now=NOW)
        assert (evidence.kind, verdict.status) == (EvidenceKind.SPLIT_VIEW, EvidenceStatus.PROVEN)
        assert evidence.accused == origin.node_id
    assert _ask(state, b.heads[0].note, 1).reason is Rejection.INCONSISTENT


def test_w2_a_forked_log_whose_proof_reaches_the_new_root_is_split_view_evidence() -> None:
    origin = fixed_identity("origin")
    a = _log(origin, 3)  # the witness follows this one to size 3
    b = _log(origin, 5, salt=1)  # a fork from the first compaction on
    state = None
    for new in range(1, 4):
        old = 0 if state is None else state.size
        state = _ask(state, a.heads[new - 1].note, old, _proof(a, old, new)).state
    assert state is not None
    assert state.size == 3
    # the fork's own proof from 3 to 5 (3 is not a power of two: the proof commits
    # the log to its root for size 3, which is not the one cosigned here)
    answer = _ask(state, b.heads[4].note, 3, _proof(b, 3, 5))
    assert answer.reason is Rejection.INCONSISTENT
    assert answer.inconsistency is not None
    verdict = verify_evidence(answer.inconsistency.evidence(reported_at=NOW), now=NOW)
    assert verdict.status is EvidenceStatus.PROVEN


def test_w2_a_failing_proof_from_a_power_of_two_size_is_a_bad_proof_not_evidence() -> None:
    origin = fixed_identity("origin")
    a, b = _log(origin, 2), _log(origin, 3, salt=1)
    state = _ask(None, a.heads[1].note, 0).state  # size 2
    answer = _ask(state, b.heads[2].note, 2, _proof(b, 2, 3))
    assert answer.reason is Rejection.BAD_PROOF
    assert answer.inconsistency is None


def test_w1_size_zero_checkpoint_needs_the_empty_root() -> None:
    key = NoteKey("example.com/log", fixed_identity("log"))
    ok = encode_note(sign_checkpoint(Checkpoint("example.com/log", 0, EMPTY_TREE_ROOT), key))
    bad = encode_note(sign_checkpoint(Checkpoint("example.com/log", 0, bytes(32)), key))

    def logs(origin: str) -> VerifierKey | None:
        return key.verifier if origin == "example.com/log" else None

    w = witness_note_key(fixed_identity("witness-1"))
    assert add_checkpoint(None, AddCheckpoint(0, (), ok), log_key=logs, witness_key=w, timestamp=T)
    refused = add_checkpoint(
        None, AddCheckpoint(0, (), bad), log_key=logs, witness_key=w, timestamp=T
    )
    assert refused.reason is Rejection.BAD_PROOF


# ------------------------------------------------------------ policy and quorum


def _witnesses(n: int) -> list[Identity]:
    return [fixed_identity(f"witness-{i}") for i in range(1, n + 1)]


def _policy(n: int, q: int) -> bytes:
    lines = [
        f"witness w{i} {witness_vkey(w.node_id).to_string()}"
        for i, w in enumerate(_witnesses(n), 1)
    ]
    lines.append(f"group main {q} {' '.join(f'w{i}' for i in range(1, n + 1))}")
    lines.append("quorum main")
    return ("\n".join(lines) + "\n").encode()


def _cosigned(note: bytes, witnesses: list[Identity], *, t: int = T) -> bytes:
    lines = b"".join(
        witness_note_key(w).sign(parse_note(note).text, timestamp=t).line.encode()
        for w in witnesses
    )
    return note + lines


def test_w3_tlog_policy_example_parses_with_keys_substituted() -> None:
    text: str = POLICY_V["policy"]
    origin = fixed_identity("origin")
    keys = iter(
        [head_log_key(origin.node_id, EPOCH).to_string()]
        + [witness_vkey(fixed_identity(f"x{i}").node_id).to_string() for i in range(6)]
    )
    while "<vkey>" in text:
        text = text.replace("<vkey>", next(keys), 1)
    policy = parse_policy(text)
    assert list(policy.witnesses) == ["X1", "X2", "X3", "Y1", "Y2", "Y3"]
    assert policy.groups["X-witnesses"].k == 2
    assert policy.groups["Y-witnesses"].k == 1
    assert policy.groups["X-and-Y"].k == 2
    assert policy.quorum == "X-and-Y"
    note = _log(origin, 1).heads[0].note
    xs = [fixed_identity(f"x{i}") for i in range(6)]
    assert not check_quorum(_cosigned(note, xs[:3]), policy, NOW)  # X only
    met = check_quorum(_cosigned(note, [xs[0], xs[2], xs[4]]), policy, NOW)
    assert met
    assert met.groups == ("X-witnesses", "Y-witnesses", "X-and-Y")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("quorum w9\n", "line 1: quorum 'w9' is not 'none' or a witness"),
        ("witness w1 {k1}\ngroup g 3 w1\nquorum g\n", "line 2: group g: k must be 1..1"),
        ("witness w1 {k1}\nwitness w2 {k1}\nquorum w1\n", "line 2: witness w2 .* wraps the public"),
        ("witness w1 {k1}\nquorum w1\nquorum w1\n", "line 3: a second quorum"),
        ("witness w1 {k1}\n", "no quorum line"),
        ("witness none {k1}\nquorum none\n", "line 1: the name 'none' is reserved"),
        ("witness w1 {k1}\ngroup g any w1 none\nquorum g\n", "line 2: group g: 'none' cannot"),
        ("witness w1 {k1}\ngroup g any w1 w1\nquorum g\n", "line 2: group g: 'w1' is already"),
        ("witness w1 {log}\nquorum w1\n", "line 1: witness w1 .* expected 0x04"),
        ("witnes w1 {k1}\nquorum none\n", "line 1: expected log, witness, group, quorum or op"),
        ("# c\n\nquorum none\x01\n", "line 3: byte 0x01 is not allowed"),
        ("witness w1 {k1}\noperator acme w2\nquorum w1\n", "line 2: operator acme: 'w2' is not"),
    ],
)
def test_w3_policy_is_parsed_strictly_errors_name_line_and_expectation(
    text: str, expected: str
) -> None:
    k1 = witness_vkey(fixed_identity("witness-1").node_id).to_string()
    log = head_log_key(fixed_identity("origin").node_id, EPOCH).to_string()
    with pytest.raises(EncodingError, match=expected):
        parse_policy(text.format(k1=k1, log=log))


def test_w3_quorum_reports_members_and_operators_and_why_it_fails() -> None:
    ws = _witnesses(3)
    policy = parse_policy(_policy(3, 2) + b"operator acme w1 w2\noperator globex w3\n")
    note = _log(fixed_identity("origin"), 1).heads[0].note
    key = head_log_key(fixed_identity("origin").node_id, EPOCH)
    met = check_quorum(_cosigned(note, [ws[0], ws[2]]), policy, NOW, log_key=key)
    assert met
    assert met.cosigned == ("w1", "w3")
    assert met.operators == ("acme", "globex")
    short = check_quorum(_cosigned(note, [ws[1]]), policy, NOW, log_key=key)
    assert not short
    assert "group main needs 2 of 3, has 1 (w2); missing w1, w3" in short.message
    with pytest.raises(NotAuthorized, match="quorum main not met"):
        verify_quorum(note, policy, now=NOW, log_key=key)
    assert check_quorum(note, parse_policy(b"quorum none\n"), NOW, log_key=key)


def test_w3_a_forged_cosignature_fails_the_quorum_naming_the_witness() -> None:
    ws = _witnesses(3)
    policy = parse_policy(_policy(3, 2))
    note = _log(fixed_identity("origin"), 1).heads[0].note
    key = head_log_key(fixed_identity("origin").node_id, EPOCH)
    good = _cosigned(note, ws[:2])
    # w2's line re-signed by another key: name and key id of w2, signature not
    mallory = Identity.from_seed(bytes(range(32)))
    forged_line = witness_note_key(mallory).sign(parse_note(note).text, timestamp=T)
    w2 = witness_note_key(ws[1])
    forged = (
        note
        + (
            witness_note_key(ws[0]).sign(parse_note(note).text, timestamp=T).line
            + forged_line.line.replace(forged_line.name, w2.name).replace(
                base64.b64encode(forged_line.key_id + forged_line.payload).decode(),
                base64.b64encode(w2.verifier.key_id + forged_line.payload).decode(),
            )
        ).encode()
    )
    assert check_quorum(good, policy, NOW, log_key=key)
    result = check_quorum(forged, policy, NOW, log_key=key)
    assert not result
    assert "cosignature of witness w2" in result.message
    with pytest.raises(BadSignature, match="witness w2"):
        verify_quorum(forged, policy, now=NOW, log_key=key)


def test_w3_a_cosignature_dated_in_the_future_does_not_count_and_is_named() -> None:
    ws = _witnesses(3)
    policy = parse_policy(_policy(3, 2))
    note = _log(fixed_identity("origin"), 1).heads[0].note
    key = head_log_key(fixed_identity("origin").node_id, EPOCH)
    late = _cosigned(_cosigned(note, ws[:1]), ws[1:2], t=T + 3600)
    result = check_quorum(late, policy, NOW, log_key=key)
    assert not result
    assert result.refused
    assert result.refused[0][0] == "w2"
    assert "w2: cosignature dated" in result.message


def test_w3_of_a_witness_s_two_lines_the_earlier_one_counts_whatever_their_order() -> None:
    """A later, future-dated copy of a witness's cosignature does not hide the
    one it made before: the witness counts from its earliest verified line."""
    ws = _witnesses(3)
    policy = parse_policy(_policy(3, 2))
    note = _log(fixed_identity("origin"), 1).heads[0].note
    key = head_log_key(fixed_identity("origin").node_id, EPOCH)
    both = _cosigned(_cosigned(_cosigned(note, ws[:1]), ws[1:2], t=T + 3600), ws[1:2])
    result = check_quorum(both, policy, NOW, log_key=key)
    assert result, result.message
    assert set(result.cosigned) == {"w1", "w2"}
    assert result.refused == ()


def test_w3_a_head_signed_by_another_key_fails_before_any_cosignature_counts() -> None:
    ws = _witnesses(3)
    policy = parse_policy(_policy(3, 1))
    head = _log(fixed_identity("origin"), 1).heads[0]
    other = sign_head(fixed_identity("origin"), head.statement)  # same text, same key: fine
    key = head_log_key(fixed_identity("someone").node_id, EPOCH)
    result = check_quorum(_cosigned(other.note, ws), policy, NOW, log_key=key)
    assert not result
    assert "has no signature by log key" in result.message
    assert result.cosigned == ()


def _docs_example() -> str:
    text = (Path(__file__).resolve().parents[2] / "docs" / "custody.md").read_text()
    after = text.split("An example: three operators", 1)[1]
    return after.split("```\n", 2)[1]


def test_w3_the_docs_policy_example_parses_and_counts_an_operator_once() -> None:
    policy = parse_policy(_docs_example())
    docs = {
        n: Identity.from_seed(hashlib.sha256(f"provnet docs witness {n}".encode()).digest())
        for n in ("a1", "a2", "b1", "c1")
    }
    assert {n: w.key for n, w in policy.witnesses.items()} == {
        n: witness_vkey(i.node_id) for n, i in docs.items()
    }
    origin = fixed_identity("origin")
    note = _log(origin, 1).heads[0].note
    key = head_log_key(origin.node_id, EPOCH)
    same_operator = check_quorum(
        _cosigned(note, [docs["a1"], docs["a2"]]), policy, NOW, log_key=key
    )
    assert not same_operator
    assert "group two-operators needs 2 of 3, has 1 (acme)" in same_operator.message
    two = check_quorum(_cosigned(note, [docs["a2"], docs["c1"]]), policy, NOW, log_key=key)
    assert two
    assert two.operators == ("acme", "initech")


# ------------------------------------------------------------ untrusted bytes


_BODY_PARTS = st.lists(
    st.sampled_from(
        [
            b"old ",
            b"0",
            b"1",
            b"7",
            b"01",
            b"\n",
            b"AAAA",
            base64.b64encode(bytes(32)),
            b"\xff",
            b"provnet/",
            b"example.com/log\n",
            b"\xe2\x80\x94 ",
            b" ",
            b"=",
        ]
    ),
    max_size=24,
).map(b"".join)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=300), _BODY_PARTS))
def test_w1_any_body_parses_or_is_an_encoding_error_and_round_trips(body: bytes) -> None:
    try:
        request = parse_add_checkpoint(body)
    except EncodingError:
        return
    assert encode_add_checkpoint(request) == body
    # and the witness decides it without raising
    answer = _ask(None, request.checkpoint, request.old_size, request.proof)
    assert answer.outcome in set(WitnessOutcome)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "witness",
                "group",
                "quorum",
                "log",
                "operator",
                "w1",
                "w2",
                "g",
                "none",
                "any",
                "all",
                "0",
                "1",
                "2",
                "#",
                "\t",
                "{k1}",
                "{k2}",
                "{log}",
                "\n",
                " ",
            ]
        ),
        max_size=30,
    ).map(" ".join)
)
def test_w3_any_policy_text_parses_or_is_an_encoding_error_naming_a_line(text: str) -> None:
    k1 = witness_vkey(fixed_identity("witness-1").node_id).to_string()
    k2 = witness_vkey(fixed_identity("witness-2").node_id).to_string()
    log = head_log_key(fixed_identity("origin").node_id, EPOCH).to_string()
    filled = text.replace("{k1}", k1).replace("{k2}", k2).replace("{log}", log)
    try:
        policy = parse_policy(filled)
    except EncodingError as exc:
        message = str(exc)
    else:
        message = ""
    if message:
        assert message.startswith(("policy line ", "policy: no quorum")), message
        return
    assert policy.quorum == "none" or policy.quorum in {*policy.witnesses, *policy.groups}


def test_w1_witness_modules_are_pure_no_clock_no_io() -> None:
    import ast

    allowed = {"__future__", "hashlib", "collections.abc", "dataclasses", "enum", "types"}
    root = Path(__file__).resolve().parents[2] / "contracts"
    for name in ("witness.py", "witness_policy.py"):
        tree = ast.parse((root / name).read_text())
        imported = {
            n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module
        } | {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert {m for m in imported if not m.startswith("contracts")} <= allowed, name
        called = {
            n.func.id
            for n in ast.walk(tree)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
        }
        assert "open" not in called, name
