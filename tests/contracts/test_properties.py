"""Property tests (hypothesis) over statements, hops, envelopes and the serve checks."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contracts import (
    AnswerKind,
    Commitment,
    ContractError,
    Envelope,
    Evidence,
    EvidenceKind,
    ReceiptStatus,
    TrustPolicy,
    answer_demand,
    build_commitment,
    build_demand,
    build_obligation,
    canonical_bytes,
    hop_bytes,
    judge_answer,
    open_any,
    open_statement,
    parse_hop,
    sign_envelope,
    sign_statement,
    verify_evidence,
)
from contracts.statements import STATEMENT_TYPES
from tests.contracts._support import DAY, EPOCH, NOW, fixed_identity, make_hops, resign_receipt

ORIGIN = fixed_identity("origin")
HOLDER = fixed_identity("holder")
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53) + 1, 2**53 - 1)
    | st.floats(min_value=-1e15, max_value=1e15)
    | st.text(max_size=30)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5)
    ),
    max_leaves=25,
)


@FAST
@given(
    epoch=st.text(max_size=40),
    value_ref=st.text(max_size=80),
    fold_seq=st.integers(0, 2**40),
    n=st.integers(0, 20),
    issued_at=st.integers(0, 10**14),
    pending=st.booleans(),
)
def test_property_commitment_signs_opens_and_digests_stably(
    epoch: str, value_ref: str, fold_seq: int, n: int, issued_at: int, pending: bool
) -> None:
    hops = make_hops(ORIGIN.node_id, n)
    signed = build_commitment(
        ORIGIN,
        epoch=epoch,
        value_ref=value_ref,
        fold_seq=fold_seq,
        hops=hops,
        issued_at=issued_at,
        provenance_pending=pending,
    )
    opened = open_statement(signed.to_bytes(), Commitment, signer=ORIGIN.node_id)
    assert opened.statement == signed.statement
    assert opened.digest == signed.digest
    assert opened.envelope.payload == canonical_bytes(signed.statement.to_json())


@FAST
@given(
    fields=st.dictionaries(
        st.text(max_size=10).filter(lambda k: k not in ("origin", "epoch")), json_values, max_size=8
    )
)
def test_property_hop_bytes_are_canonical_and_round_trip(fields: dict[str, Any]) -> None:
    data = hop_bytes(fields, ORIGIN.node_id, EPOCH)
    reordered = dict(reversed(list(fields.items())))
    assert hop_bytes(reordered, ORIGIN.node_id, EPOCH) == data
    parsed = parse_hop(data, origin=ORIGIN.node_id, epoch=EPOCH)
    assert canonical_bytes(parsed) == data


@settings(max_examples=300, deadline=None)
@given(kind=st.sampled_from(sorted(STATEMENT_TYPES)), payload=json_values)
def test_property_any_signed_json_payload_is_accepted_or_a_contract_error(
    kind: str, payload: Any
) -> None:
    raw = json.dumps(payload).encode()
    with contextlib.suppress(ContractError):
        open_any(sign_envelope(ORIGIN, kind, raw).to_bytes())


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_property_arbitrary_bytes_never_escape_as_other_errors(data: bytes) -> None:
    for parse in (Envelope.from_bytes, Evidence.from_bytes, TrustPolicy.from_bytes, open_any):
        with contextlib.suppress(ContractError):
            parse(data)


def _world(n: int, serve_for: int) -> tuple[Any, Any, list[bytes]]:
    hops = make_hops(ORIGIN.node_id, n)
    c = build_commitment(ORIGIN, epoch=EPOCH, value_ref="v", fold_seq=0, hops=hops, issued_at=NOW)
    o = build_obligation(
        ORIGIN,
        c,
        serve_until=NOW + serve_for,
        deadline_ms=1_000,
        endpoints=["127.0.0.1:50051"],
        issued_at=NOW,
    )
    return c, o, hops


@FAST
@given(
    n=st.integers(1, 40),
    picks=st.none() | st.sets(st.integers(0, 39), min_size=1, max_size=10),
    at=st.integers(0, 2 * DAY),
)
def test_property_a_correct_origin_is_never_accused(
    n: int, picks: set[int] | None, at: int
) -> None:
    c, o, hops = _world(n, DAY)
    leaves = None if picks is None else sorted(i for i in picks if i < n) or [0]
    d = build_demand(HOLDER, o, now=NOW, leaves=leaves, nonce="ab" * 16)
    r = answer_demand(ORIGIN, d, obligation=o, commitment=c, hops=hops, now=NOW + at)
    served = [hops[i] for i in (range(n) if leaves is None else leaves)]
    if r.statement.status is not ReceiptStatus.SERVED:
        served = []
    answer = judge_answer(r, served, demand=d, obligation=o, commitment=c, reported_at=NOW + at)
    assert answer.kind in (AnswerKind.SERVED, AnswerKind.LEGITIMATE)
    assert answer.evidence is None


@FAST
@given(n=st.integers(1, 40), victim=st.integers(0, 39), junk=st.binary(min_size=1, max_size=8))
def test_property_an_origin_signing_any_wrong_hop_is_caught_as_bad_data(
    n: int, victim: int, junk: bytes
) -> None:
    c, o, hops = _world(n, DAY)
    d = build_demand(HOLDER, o, now=NOW, nonce="cd" * 16)
    honest = answer_demand(ORIGIN, d, obligation=o, commitment=c, hops=hops, now=NOW + 1)
    wrong = list(hops)
    wrong[victim % n] = wrong[victim % n] + junk
    lying = resign_receipt(ORIGIN, honest, wrong)
    answer = judge_answer(lying, wrong, demand=d, obligation=o, commitment=c, reported_at=NOW)
    assert answer.kind is AnswerKind.EVIDENCE
    assert answer.evidence is not None
    assert verify_evidence(answer.evidence.to_bytes(), now=NOW).kind is EvidenceKind.BAD_DATA


@FAST
@given(n=st.integers(2, 30), drop=st.integers(0, 29))
def test_property_a_receipt_for_a_shorter_tree_is_bad_data(n: int, drop: int) -> None:
    c, o, hops = _world(n, DAY)
    d = build_demand(HOLDER, o, now=NOW, nonce="ef" * 16)
    honest = answer_demand(ORIGIN, d, obligation=o, commitment=c, hops=hops, now=NOW + 1)
    kept = [h for i, h in enumerate(hops) if i != drop % n]
    shorter = sign_statement(
        ORIGIN,
        dataclasses.replace(resign_receipt(ORIGIN, honest, kept).statement, tree_size=n - 1),
    )
    answer = judge_answer(shorter, kept, demand=d, obligation=o, commitment=c, reported_at=NOW)
    assert answer.kind is AnswerKind.EVIDENCE


@settings(max_examples=300, deadline=None)
@given(
    value=st.text(alphabet="0123456789abcdefABCDEF g\u00e9", min_size=60, max_size=68)
    | st.sampled_from(
        ["0" * 64, "f" * 64, "0" * 63 + "G", " " + "0" * 63, "0" * 32 + "x" + "0" * 31]
    )
)
def test_property_digest_check_agrees_with_the_regular_expression(value: str) -> None:
    import re

    from contracts._fields import is_digest

    assert is_digest(value) == (re.fullmatch(r"[0-9a-f]{64}", value) is not None)


@settings(max_examples=200, deadline=None)
@given(
    payload=st.binary(max_size=200),
    payload_type=st.sampled_from(["application/vnd.provnet.receipt+json", "text/plain", "a b"]),
    keyid=st.sampled_from(["", ORIGIN.node_id, "KEY", 'q"uote']),
    flip=st.integers(0, 400),
)
def test_property_canonical_envelope_fast_path_agrees_with_the_general_parser(
    payload: bytes, payload_type: str, keyid: str, flip: int
) -> None:
    from contracts.canonical import parse_json_object
    from contracts.envelope import EnvelopeSignature

    env = Envelope(payload, payload_type, (EnvelopeSignature(keyid, b"\x01" * 64),))
    data = bytearray(env.to_bytes())
    if flip < len(data):
        data[flip] ^= 0x20
    fast: Envelope | Exception
    general: Envelope | Exception
    try:
        fast = Envelope.from_bytes(bytes(data))
    except ContractError as exc:
        fast = exc
    try:
        general = Envelope.from_json(parse_json_object(bytes(data), what="envelope"))
    except ContractError as exc:
        general = exc
    if isinstance(general, Envelope):
        assert fast == general
    else:
        assert isinstance(fast, ContractError)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n_witnesses=st.integers(0, 4),
    silent=st.lists(st.booleans(), min_size=4, max_size=4),
    answered_by=st.none() | st.integers(0, 4),
    min_witnesses=st.integers(1, 4),
    re_asks=st.integers(0, 10),
)
def test_property_unanswered_is_never_proof_and_any_answer_clears_it(
    n_witnesses: int,
    silent: list[bool],
    answered_by: int | None,
    min_witnesses: int,
    re_asks: int,
) -> None:
    from contracts import (
        EvidenceLevel,
        EvidenceStatus,
        build_witness_report,
        unanswered_evidence,
    )

    c, o, hops = _world(4, DAY)
    d = build_demand(HOLDER, o, now=NOW, nonce="0a" * 16)
    witnesses = [fixed_identity(f"w{i}") for i in range(n_witnesses)]
    w_demands = [
        build_demand(w, o, now=NOW + 10, nonce=f"{i:032x}") for i, w in enumerate(witnesses)
    ]
    reports = [
        build_witness_report(w, wd, at=NOW + 5_000, address="127.0.0.1:50051")
        for w, wd, quiet in zip(witnesses, w_demands, silent, strict=False)
        if quiet
    ]
    ev = unanswered_evidence(
        d,
        obligation=o,
        commitment=c,
        re_asks=re_asks,
        reported_at=NOW + 6_000,
        witness_demands=w_demands,
        witness_reports=reports,
    )
    demands = [d, *w_demands]
    if answered_by is not None and answered_by < len(demands):
        receipt = answer_demand(
            ORIGIN, demands[answered_by], obligation=o, commitment=c, hops=hops, now=NOW + 9_000
        )
        ev = ev.with_answer(receipt)
    verdict = verify_evidence(ev.to_bytes(), now=NOW + 10_000, min_witnesses=min_witnesses)
    assert verdict.level is EvidenceLevel.SUSPICION
    assert not verdict.is_proof
    if answered_by is not None and answered_by < len(demands):
        assert verdict.status is EvidenceStatus.CLEARED
    elif len(reports) >= min_witnesses:
        assert verdict.status is EvidenceStatus.WITNESS_CONFIRMED
    else:
        assert verdict.status is EvidenceStatus.SUSPECTED


@settings(max_examples=300, deadline=None)
@given(
    payload=st.binary(max_size=60),
    at=st.integers(0, 300),
    insert=st.sampled_from([b'"', b"\\", b",", b"}", b"]", b" ", b'"x":1,', b'","sig":"', b"=="]),
    cut=st.integers(0, 3),
)
def test_property_fast_path_never_accepts_what_the_general_parser_reads_otherwise(
    payload: bytes, at: int, insert: bytes, cut: int
) -> None:
    from contracts.canonical import parse_json_object
    from contracts.envelope import EnvelopeSignature

    env = Envelope(
        payload,
        "application/vnd.provnet.receipt+json",
        (EnvelopeSignature(ORIGIN.node_id, b"\x02" * 64),),
    )
    raw = env.to_bytes()
    at %= len(raw) + 1
    data = raw[:at] + insert + raw[at + cut :]
    fast: Envelope | None
    general: Envelope | None
    try:
        fast = Envelope.from_bytes(data)
    except ContractError:
        fast = None
    try:
        general = Envelope.from_json(parse_json_object(data, what="envelope"))
    except ContractError:
        general = None
    assert fast == general


# ------------------------------------------------------------ heads (revision 2)


def _head_log(values: int, compactions: int, n: int) -> Any:
    from contracts import FoldInput, HeadLog

    log = HeadLog(ORIGIN, EPOCH)
    hops: dict[str, list[bytes]] = {}
    for c in range(compactions):
        folds = []
        for v in range(values):
            hops[f"v{v}"] = make_hops(ORIGIN.node_id, n, start=1 + 50 * (c * values + v))
            folds.append(FoldInput(f"v{v}", c, hops[f"v{v}"]))
        log.compact(folds, serve_until=NOW + DAY, deadline_ms=1_000, endpoints=[], issued_at=NOW)
    return log, hops


@FAST
@given(
    values=st.integers(1, 9),
    compactions=st.integers(1, 4),
    n=st.integers(1, 12),
    pick=st.integers(0, 8),
    leaves=st.none() | st.sets(st.integers(0, 11), min_size=1, max_size=4),
    at=st.integers(0, 2 * DAY),
)
def test_property_heads_a_correct_origin_is_never_accused_and_never_verified_when_serving(
    values: int, compactions: int, n: int, pick: int, leaves: set[int] | None, at: int
) -> None:
    from contracts import HeadCache, judge_fold_answer

    log, hops = _head_log(values, compactions, n)
    ref = f"v{pick % values}"
    cache = HeadCache()
    proof = log.fold_proof(ref)
    fold = cache.verify_fold(proof, now=NOW, head=log.heads[-1].to_bytes())
    picked = None if leaves is None else sorted(i for i in leaves if i < n) or [0]
    d = build_demand(HOLDER, fold.obligation, now=NOW, leaves=picked, nonce="ab" * 16)
    c, o = fold.commitment, fold.obligation
    r = answer_demand(ORIGIN, d, obligation=o, commitment=c, hops=hops[ref], now=NOW + at)
    served = [hops[ref][i] for i in (range(n) if picked is None else picked)]
    if r.statement.status is not ReceiptStatus.SERVED:
        served = []
    answer = judge_fold_answer(r.to_bytes(), served, demand=d, fold=fold, reported_at=NOW + at)
    assert answer.kind in (AnswerKind.SERVED, AnswerKind.LEGITIMATE), answer.reason
    assert answer.evidence is None
    if answer.kind is AnswerKind.SERVED:
        assert answer.served is not None
        assert not answer.served.receipt_verified
    assert cache.signature_checks == 1


@FAST
@given(n=st.integers(1, 20), victim=st.integers(0, 19), junk=st.binary(min_size=1, max_size=8))
def test_property_heads_an_origin_signing_any_wrong_hop_is_caught_as_bad_data(
    n: int, victim: int, junk: bytes
) -> None:
    from contracts import judge_fold_answer, verify_fold

    log, hops = _head_log(3, 1, n)
    fold = verify_fold(log.fold_proof("v1"), log.heads[-1])
    d = build_demand(HOLDER, fold.obligation, now=NOW, nonce="cd" * 16)
    honest = answer_demand(
        ORIGIN, d, obligation=fold.obligation, commitment=fold.commitment, hops=hops["v1"], now=NOW
    )
    wrong = list(hops["v1"])
    wrong[victim % n] += junk
    lying = resign_receipt(ORIGIN, honest, wrong)
    answer = judge_fold_answer(lying, wrong, demand=d, fold=fold, reported_at=NOW)
    assert answer.kind is AnswerKind.EVIDENCE
    assert answer.evidence is not None
    assert verify_evidence(answer.evidence.to_bytes(), now=NOW).kind is EvidenceKind.BAD_DATA


@FAST
@given(length=st.integers(2, 12), data=st.data())
def test_property_split_views_are_proven_and_one_view_never_is(
    length: int, data: st.DataObject
) -> None:
    from contracts import FoldInput, HeadLog, NotEvidence, split_view_evidence

    diverge = data.draw(st.integers(0, length - 1))
    x, y = HeadLog(ORIGIN, EPOCH), HeadLog(ORIGIN, EPOCH)
    for c in range(length):
        for view, shift in ((x, 0), (y, 500 if c >= diverge else 0)):
            fold = FoldInput("v", c, make_hops(ORIGIN.node_id, 2, start=1 + 3 * c + shift))
            view.compact([fold], serve_until=NOW + DAY, deadline_ms=1, endpoints=[], issued_at=NOW)
    first = data.draw(st.integers(0, length - 1))
    second = data.draw(st.integers(first, length - 1))
    path = () if first == second else y.consistency_path(first, second)
    if second < diverge:
        # Before the views diverge the heads are the same tree: nothing to prove.
        with contextlib.suppress(NotEvidence):
            split_view_evidence(x.heads[first], y.heads[second], reported_at=NOW, path=path)
            raise AssertionError("heads before the divergence reported as a split view")
    elif first >= diverge or first == second:
        ev = split_view_evidence(x.heads[first], y.heads[second], reported_at=NOW, path=path)
        assert verify_evidence(ev.to_bytes(), now=NOW).is_proof
    # Two heads of one view are never a split view.
    for view in (x, y):
        with contextlib.suppress(NotEvidence):
            split_view_evidence(
                view.heads[first],
                view.heads[second],
                reported_at=NOW,
                path=() if first == second else view.consistency_path(first, second),
            )
            raise AssertionError("one view's heads reported as a split view")
