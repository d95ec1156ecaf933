"""C2SP signed notes, tlog-checkpoints and cosignature/v1 against the published vectors.

The vectors live in ``tests/contracts/vectors/c2sp/`` with the repository,
commit and test (or spec section) each case was copied from.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.checkpoint import (
    MAX_TREE_SIZE,
    Checkpoint,
    check_checkpoint,
    cosign_checkpoint,
    encode_checkpoint,
    parse_checkpoint,
    sign_checkpoint,
    verify_checkpoint,
)
from contracts.errors import (
    BadSignature,
    BindingMismatch,
    ContractError,
    EncodingError,
    NotAuthorized,
)
from contracts.identity import Identity
from contracts.note import (
    MAX_SIGNATURES,
    SIG_TYPE_COSIGNATURE_V1,
    SIG_TYPE_ED25519,
    Note,
    NoteKey,
    NoteSignature,
    VerifierKey,
    check_key_name,
    check_note,
    cosignature_message,
    cosignature_timestamp,
    encode_note,
    key_id,
    open_note,
    parse_note,
)
from tests.contracts import c2sp_gen

VECTORS = Path(__file__).with_name("vectors") / "c2sp"
NOTE_V = json.loads((VECTORS / "signed-note.json").read_text())
CHECKPOINT_V = json.loads((VECTORS / "tlog-checkpoint.json").read_text())
COSIG_V = json.loads((VECTORS / "tlog-cosignature.json").read_text())
ERRORS: dict[str, type[ContractError]] = {
    "BadSignature": BadSignature,
    "EncodingError": EncodingError,
}


def _ids(cases: list[dict[str, Any]]) -> list[str]:
    return [c["source"].get("test") or c["source"].get("section") or "" for c in cases]


def _note_bytes(case: dict[str, Any]) -> bytes:
    if "note_hex" in case:
        return bytes.fromhex(case["note_hex"])
    return str(case["note"]).encode("utf-8")


def _keys(case: dict[str, Any]) -> list[VerifierKey]:
    return [VerifierKey.parse(v) for v in case["vkeys"]]


def _identity_from_skey(skey: str) -> tuple[str, Identity]:
    """golang.org/x/mod/sumdb/note's ``PRIVATE+KEY+<name>+<id>+base64(0x01 ‖ seed)``."""
    prefix = "PRIVATE+KEY+"
    assert skey.startswith(prefix)
    name, _, encoded = skey[len(prefix) :].split("+", 2)
    raw = base64.b64decode(encoded)
    assert raw[0] == SIG_TYPE_ED25519
    return name, Identity.from_seed(raw[1:])


def _seed_key(case: dict[str, Any], sig_type: int) -> NoteKey:
    return NoteKey(str(case["name"]), Identity.from_seed(bytes.fromhex(case["seed"])), sig_type)


# --- signed-note: published notes, keys and rejections ------------------------------


@pytest.mark.parametrize("case", NOTE_V["verifies"], ids=_ids(NOTE_V["verifies"]))
def test_published_note_verifies_and_reencodes_byte_for_byte(case: dict[str, Any]) -> None:
    data = _note_bytes(case)
    note = parse_note(data)
    assert encode_note(note) == data
    assert note.text == case["text"]
    opened = open_note(data, _keys(case))
    assert [v.key.key for v in opened.verified] == case["verified"]
    assert [s.key for s in opened.unverified] == case["unverified"]
    assert check_note(data, _keys(case))


@pytest.mark.parametrize(
    "case", NOTE_V["parses_unverifiable"], ids=_ids(NOTE_V["parses_unverifiable"])
)
def test_published_note_without_a_key_parses_but_never_opens(case: dict[str, Any]) -> None:
    data = _note_bytes(case)
    note = parse_note(data)
    assert (note.text, [s.key for s in note.signatures]) == (case["text"], case["signatures"])
    assert note.to_bytes() == data
    with pytest.raises(BadSignature, match="no signature by a trusted key"):
        open_note(data, [])


@pytest.mark.parametrize("case", NOTE_V["signs"], ids=_ids(NOTE_V["signs"]))
def test_signing_reproduces_the_published_note_byte_for_byte(case: dict[str, Any]) -> None:
    name, identity = _identity_from_skey(case["skey"])
    key = NoteKey(name, identity)
    assert key.verifier.to_string() == case["vkey"]
    note = Note(text=case["text"], signatures=(key.sign(case["text"]),))
    assert note.to_bytes() == case["note"].encode("utf-8")


@pytest.mark.parametrize("case", NOTE_V["rejected"], ids=_ids(NOTE_V["rejected"]))
def test_published_bad_note_is_refused_naming_what_failed(case: dict[str, Any]) -> None:
    with pytest.raises(ERRORS[case["error"]], match=re.escape(case["names"])):
        open_note(_note_bytes(case), _keys(case))
    assert not check_note(_note_bytes(case), _keys(case))


@pytest.mark.parametrize("case", NOTE_V["vkeys"], ids=_ids(NOTE_V["vkeys"]))
def test_published_vkey_parses_and_formats_back(case: dict[str, Any]) -> None:
    key = VerifierKey.parse(case["vkey"])
    assert (key.name, key.key_id.hex(), key.sig_type) == (
        case["name"],
        case["key_id"],
        case["type"],
    )
    assert key_id(key.name, key.sig_type, key.public.raw).hex() == case["key_id"]
    assert key.to_string() == case["vkey"]


@pytest.mark.parametrize("case", NOTE_V["skeys"], ids=_ids(NOTE_V["skeys"]))
def test_published_private_key_gives_its_published_vkey(case: dict[str, Any]) -> None:
    name, identity = _identity_from_skey(case["skey"])
    assert NoteKey(name, identity).verifier.to_string() == case["vkey"]


@pytest.mark.parametrize("case", NOTE_V["bad_vkeys"], ids=_ids(NOTE_V["bad_vkeys"]))
def test_published_bad_vkey_is_refused(case: dict[str, Any]) -> None:
    with pytest.raises(EncodingError, match="vkey"):
        VerifierKey.parse(case["vkey"])


def test_every_substring_and_every_bumped_byte_of_a_vkey_is_refused() -> None:
    # golang.org/x/mod sumdb/note TestNewVerifier: the rule, applied here.
    vkey = NOTE_V["vkeys"][0]["vkey"]
    manglings = {vkey[i:j] for i in range(len(vkey)) for j in range(i + 1, len(vkey) + 1)} - {vkey}
    manglings |= {vkey[:i] + chr(ord(vkey[i]) + 1) + vkey[i + 1 :] for i in range(len(vkey))}
    for bad in sorted(manglings):
        with pytest.raises(EncodingError):
            VerifierKey.parse(bad)


# --- signed-note: rules of the format -----------------------------------------------


def _peter() -> NoteKey:
    return NoteKey(*_identity_from_skey(NOTE_V["signs"][0]["skey"]))


TEXT = NOTE_V["signs"][0]["text"]


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("", "empty"),
        ("a+b", "'+'"),
        ("a b", "white space"),
        ("a\u00a0b", "white space"),
        ("a\u2028b", "white space"),
        ("a\tb", "white space"),
    ],
)
def test_key_name_rules_refuse_empty_plus_and_unicode_space(name: str, problem: str) -> None:
    with pytest.raises(EncodingError, match=re.escape(problem)):
        check_key_name(name)
    with pytest.raises(ValueError, match=re.escape(problem)):
        NoteKey(name, _peter().identity)
    line = f"\u2014 {name} {base64.b64encode(bytes(68)).decode()}\n"
    with pytest.raises(EncodingError):
        parse_note((TEXT + "\n" + line).encode())


def test_key_id_is_sha256_of_name_newline_type_and_key() -> None:
    key = _peter().identity.public.raw
    for sig_type in (SIG_TYPE_ED25519, SIG_TYPE_COSIGNATURE_V1):
        want = hashlib.sha256(b"PeterNeumann\n" + bytes([sig_type]) + key).digest()[:4]
        assert key_id("PeterNeumann", sig_type, key) == want
    assert key_id("PeterNeumann", 1, key) != key_id("PeterNeumann", 4, key)


def test_non_canonical_base64_in_a_signature_is_refused() -> None:
    good = NOTE_V["signs"][0]["note"]
    # 68 bytes end in one padding '=': the last character's low 4 bits are
    # unused, so 'M' and 'N' decode alike; only 'M' is what encoding gives.
    assert good.endswith("M=\n")
    bad = good[:-3] + "N=\n"
    with pytest.raises(EncodingError, match="not canonical base64"):
        parse_note(bad.encode())


def test_note_over_the_size_bound_is_refused_before_decoding() -> None:
    data = NOTE_V["signs"][0]["note"].encode()
    assert parse_note(data, max_bytes=len(data)).to_bytes() == data
    with pytest.raises(EncodingError, match=f"{len(data)} bytes, more than the limit"):
        parse_note(data, max_bytes=len(data) - 1)


def test_sixteen_signatures_are_accepted_as_the_spec_requires() -> None:
    keys = [NoteKey(f"k{i}", Identity.from_seed(bytes([i]) * 32)) for i in range(16)]
    note = Note(text=TEXT, signatures=tuple(k.sign(TEXT) for k in keys))
    opened = open_note(note.to_bytes(), [k.verifier for k in keys])
    assert len(opened.verified) == 16


def test_one_signature_line_over_the_bound_is_refused() -> None:
    line = NOTE_V["signs"][0]["note"].split("\n\n")[1]
    at_bound = (TEXT + "\n" + line * MAX_SIGNATURES).encode()
    assert len(open_note(at_bound, [_peter().verifier]).verified) == 1
    with pytest.raises(EncodingError, match=f"{MAX_SIGNATURES + 1} signature lines"):
        parse_note((TEXT + "\n" + line * (MAX_SIGNATURES + 1)).encode())


def test_text_may_hold_empty_lines_and_ends_at_the_last_blank_line() -> None:
    text = "a\n\nb\n\n"
    note = Note(text=text, signatures=(_peter().sign(text),))
    parsed = parse_note(note.to_bytes())
    assert parsed.text == text
    assert open_note(note.to_bytes(), [_peter().verifier]).note == note


def test_a_key_that_signs_twice_is_verified_twice_and_counted_once() -> None:
    peter = _peter()
    good = peter.sign(TEXT)
    bad = NoteSignature(good.name, good.key_id, bytes(64))
    twice = Note(text=TEXT, signatures=(good, good))
    assert len(open_note(twice.to_bytes(), [peter.verifier]).verified) == 1
    with pytest.raises(BadSignature, match="PeterNeumann\\+c74f20a3"):
        open_note(Note(text=TEXT, signatures=(good, bad)).to_bytes(), [peter.verifier])


def test_two_different_trusted_keys_with_one_name_and_id_are_a_caller_error() -> None:
    peter = _peter().verifier
    other = Identity.from_seed(bytes(32)).public

    class _Clash(VerifierKey):
        # Key ids are short, not collision-free: a clash is forced here.
        __slots__ = ()

        @property
        def key_id(self) -> bytes:
            return peter.key_id

    twin = _Clash(name="PeterNeumann", sig_type=SIG_TYPE_ED25519, public=other)
    note = NOTE_V["signs"][0]["note"].encode()
    assert len(open_note(note, [peter, peter]).verified) == 1
    with pytest.raises(ValueError, match="share name and id PeterNeumann\\+c74f20a3"):
        open_note(note, [peter, twin])


# --- tlog-checkpoint ----------------------------------------------------------------


@pytest.mark.parametrize("case", CHECKPOINT_V["parses"], ids=_ids(CHECKPOINT_V["parses"]))
def test_published_checkpoint_parses_into_its_lines(case: dict[str, Any]) -> None:
    note = parse_note(case["note"].encode())
    cp = parse_checkpoint(note.text)
    assert (cp.origin, cp.size, base64.b64encode(cp.root).decode(), list(cp.extensions)) == (
        case["origin"],
        case["size"],
        case["root"],
        case["extensions"],
    )
    assert encode_checkpoint(cp) == note.text_bytes
    assert [s.key for s in note.signatures] == case["signatures"]


@pytest.mark.parametrize("case", CHECKPOINT_V["verifies"], ids=_ids(CHECKPOINT_V["verifies"]))
def test_published_signed_checkpoint_verifies(case: dict[str, Any]) -> None:
    data = case["note"].encode()
    log_key = (
        VerifierKey.parse(case["vkey"])
        if "vkey" in case
        else _seed_key(case, SIG_TYPE_ED25519).verifier
    )
    verified = verify_checkpoint(data, log_key=log_key, origin=case["origin"])
    assert verified.raw == data
    assert (verified.checkpoint.size, base64.b64encode(verified.checkpoint.root).decode()) == (
        case["size"],
        case["root"],
    )
    assert verified.note.to_bytes() == data
    assert check_checkpoint(data, log_key=log_key, origin=case["origin"])


def test_signing_the_sigsum_checkpoint_reproduces_it_byte_for_byte() -> None:
    case = CHECKPOINT_V["verifies"][1]
    key = _seed_key(case, SIG_TYPE_ED25519)
    public = key.identity.public.raw
    assert case["origin"] == "sigsum.org/v1/tree/" + hashlib.sha256(public).hexdigest()
    cp = Checkpoint(case["origin"], case["size"], base64.b64decode(case["root"]))
    assert sign_checkpoint(cp, key).to_bytes() == case["note"].encode()


@pytest.mark.parametrize(
    ("mutate", "error", "names"),
    [
        (lambda t: t.replace("\n10\n", "\n11\n"), BadSignature, "does not verify"),
        (lambda t: t.replace("HA5H", "HA5I"), BadSignature, "does not verify"),
        (lambda t: t.replace("e69\n10", "e6a\n10"), BindingMismatch, "origin"),
        (lambda t: t.replace("gJ2ho0n8", "gJ2Ho0n8"), BadSignature, "no signature by"),
        (lambda t: t.replace("F8olcerU", "F8olcerV"), BadSignature, "does not verify"),
    ],
    ids=["bad size", "bad hash", "bad origin", "bad key id", "bad signature"],
)
def test_mutated_checkpoint_fails_naming_what_failed(
    mutate: Any, error: type[ContractError], names: str
) -> None:
    # sigsum-go pkg/checkpoint TestCheckpointVerify's mutations.
    case = CHECKPOINT_V["verifies"][1]
    log_key = _seed_key(case, SIG_TYPE_ED25519).verifier
    mutated = mutate(case["note"])
    assert mutated != case["note"]
    with pytest.raises(error, match=names):
        verify_checkpoint(mutated.encode(), log_key=log_key, origin=case["origin"])


@pytest.mark.parametrize(
    "case", CHECKPOINT_V["rejected_notes"], ids=_ids(CHECKPOINT_V["rejected_notes"])
)
def test_published_bad_checkpoint_note_is_refused(case: dict[str, Any]) -> None:
    good = CHECKPOINT_V["verifies"][1]
    log_key = _seed_key(good, SIG_TYPE_ED25519).verifier
    with pytest.raises(ERRORS[case["error"]], match=re.escape(case["names"])):
        verify_checkpoint(case["note"].encode(), log_key=log_key, origin=good["origin"])


@pytest.mark.parametrize(
    "case", CHECKPOINT_V["rejected_texts"], ids=_ids(CHECKPOINT_V["rejected_texts"])
)
def test_published_bad_checkpoint_text_is_refused(case: dict[str, Any]) -> None:
    with pytest.raises(EncodingError, match=re.escape(case["names"])):
        parse_checkpoint(case["text"].encode())


@pytest.mark.parametrize("case", CHECKPOINT_V["formats"], ids=_ids(CHECKPOINT_V["formats"]))
def test_checkpoint_with_extension_lines_formats_and_parses(case: dict[str, Any]) -> None:
    cp = Checkpoint(
        case["origin"], case["size"], base64.b64decode(case["root"]), tuple(case["extensions"])
    )
    assert encode_checkpoint(cp) == case["text"].encode()
    assert parse_checkpoint(case["text"]) == cp


ROOT = bytes(range(32))
ROOT_B64 = base64.b64encode(ROOT).decode()


@pytest.mark.parametrize(
    ("text", "names"),
    [
        (f"o\n01\n{ROOT_B64}\n", "leading zero"),
        (f"o\n{MAX_TREE_SIZE + 1}\n{ROOT_B64}\n", "not below 2\\^64"),
        (f"o\n{'9' * 10_000}\n{ROOT_B64}\n", "not a decimal number"),
        (f"o\n+1\n{ROOT_B64}\n", "not a decimal number"),
        (f"o\n 1\n{ROOT_B64}\n", "not a decimal number"),
        (f"o\n1\n{ROOT_B64}\n\n", "line 4: extension line is empty"),
        (f"o\n1\n{ROOT_B64}\next\n\n", "line 5: extension line is empty"),
        (f"o\n1\n{ROOT_B64[:-1]}\n", "root hash is not base64"),
        (f"o\n1\n{ROOT_B64}\nx\ty\n", "control character"),
    ],
)
def test_checkpoint_line_rules(text: str, names: str) -> None:
    with pytest.raises(EncodingError, match=names):
        parse_checkpoint(text)


def test_tree_size_bounds_zero_and_two_to_the_64_minus_one_are_accepted() -> None:
    for size in (0, MAX_TREE_SIZE):
        text = f"o\n{size}\n{ROOT_B64}\n"
        assert parse_checkpoint(text).size == size
        assert encode_checkpoint(parse_checkpoint(text)) == text.encode()


# --- tlog-cosignature/v1 ------------------------------------------------------------


@pytest.mark.parametrize("case", COSIG_V["messages"], ids=_ids(COSIG_V["messages"]))
def test_cosignature_message_is_the_published_bytes(case: dict[str, Any]) -> None:
    message = cosignature_message(case["text"].encode(), case["timestamp"])
    assert message == case["message"].encode()


@pytest.mark.parametrize("case", COSIG_V["lines"], ids=_ids(COSIG_V["lines"]))
def test_published_cosignature_line_carries_its_timestamp(case: dict[str, Any]) -> None:
    note = parse_note(case["note"].encode())
    line = note.signatures[case["line"] - 1]
    assert (line.key, cosignature_timestamp(line)) == (case["key"], case["timestamp"])
    assert note.to_bytes() == case["note"].encode()


@pytest.mark.parametrize("case", COSIG_V["not_cosignatures"], ids=_ids(COSIG_V["not_cosignatures"]))
def test_published_non_cosignature_has_no_timestamp(case: dict[str, Any]) -> None:
    with pytest.raises(EncodingError, match=re.escape(case["names"])):
        cosignature_timestamp(parse_note(case["note"].encode()).signatures[0])


@pytest.mark.parametrize("case", COSIG_V["verifies"], ids=_ids(COSIG_V["verifies"]))
def test_published_cosignature_verifies_and_is_reproduced(case: dict[str, Any]) -> None:
    witness = _seed_key(case, SIG_TYPE_COSIGNATURE_V1)
    assert witness.verifier.key_id.hex() == case["key_id"]
    line = witness.sign(case["text"], timestamp=case["timestamp"])
    assert line.line == case["line"]
    opened = open_note(case["note"].encode(), [witness.verifier])
    assert [v.key.key for v in opened.verified] == case["verified"]
    assert [s.key for s in opened.unverified] == case["unverified"]
    assert opened.verified[0].timestamp == case["timestamp"]


@pytest.mark.parametrize("case", COSIG_V["rejected"], ids=_ids(COSIG_V["rejected"]))
def test_published_bad_cosignature_rejects_the_note(case: dict[str, Any]) -> None:
    witness = _seed_key(case, SIG_TYPE_COSIGNATURE_V1)
    with pytest.raises(ERRORS[case["error"]], match=re.escape(case["names"])):
        open_note(case["note"].encode(), [witness.verifier])


def test_cosignature_with_a_changed_timestamp_fails_naming_key_and_time() -> None:
    # sigsum-go TestCheckpointVerifyCosignatureByKey: Timestamp++ must fail.
    case = COSIG_V["verifies"][0]
    witness = _seed_key(case, SIG_TYPE_COSIGNATURE_V1)
    good = witness.sign(case["text"], timestamp=case["timestamp"])
    bumped = (case["timestamp"] + 1).to_bytes(8, "big") + good.payload[8:]
    note = Note(case["text"], (NoteSignature(good.name, good.key_id, bumped),))
    with pytest.raises(BadSignature, match=re.escape("example.org/witness+cacf2e50 (time 1235)")):
        open_note(note.to_bytes(), [witness.verifier])


def test_the_same_key_as_log_key_and_cosigner_has_two_key_ids() -> None:
    case = COSIG_V["verifies"][0]
    identity = Identity.from_seed(bytes.fromhex(case["seed"]))
    as_log = NoteKey("example.org/witness", identity, SIG_TYPE_ED25519)
    as_witness = NoteKey("example.org/witness", identity, SIG_TYPE_COSIGNATURE_V1)
    assert as_log.verifier.key_id != as_witness.verifier.key_id
    cosigned = Note(case["text"], (as_witness.sign(case["text"], timestamp=1),))
    # The type 0x01 key does not match the type 0x04 line: ignored, not verified.
    with pytest.raises(BadSignature, match="no signature by a trusted key"):
        open_note(cosigned.to_bytes(), [as_log.verifier])


# --- a provnet-shaped head: log signature, cosignatures, extension lines ------------


def _world() -> tuple[NoteKey, list[NoteKey], Checkpoint]:
    seed = hashlib.sha256
    log = NoteKey("provnet.test/origin", Identity.from_seed(seed(b"note log").digest()))
    witnesses = [
        NoteKey(
            f"provnet.test/w{i}",
            Identity.from_seed(seed(b"note witness %d" % i).digest()),
            SIG_TYPE_COSIGNATURE_V1,
        )
        for i in range(3)
    ]
    cp = Checkpoint(
        "provnet.test/origin", 5, ROOT, ("serve_until 1795950000000", "deadline_ms 2000")
    )
    return log, witnesses, cp


NOW = 1_795_946_400_000


def test_cosigned_checkpoint_verifies_with_each_trusted_cosigner_once() -> None:
    log, witnesses, cp = _world()
    note = sign_checkpoint(cp, log)
    t = NOW // 1000
    note = note.with_signatures(*(cosign_checkpoint(note, w, timestamp=t) for w in witnesses))
    trusted = [w.verifier for w in witnesses[:2]]
    verified = verify_checkpoint(note.to_bytes(), log_key=log.verifier, cosigners=trusted, now=NOW)
    assert verified.checkpoint == cp
    assert verified.cosigners == {w.verifier.key for w in witnesses[:2]}
    assert [s.key for s in verified.unverified] == [witnesses[2].verifier.key]
    assert all(c.timestamp == t for c in verified.cosignatures)


def test_cosignature_covers_extension_lines() -> None:
    # transparency-dev/formats note TestSigCoversExtensionLines, as a fact.
    log, witnesses, cp = _world()
    note = sign_checkpoint(cp, log)
    cosig = cosign_checkpoint(note, witnesses[0], timestamp=1)
    tampered = note.text.replace("deadline_ms 2000", "deadline_ms 2001")
    bad = Note(tampered, (cosig,))
    with pytest.raises(BadSignature, match=re.escape("cosignature by provnet.test/w0")):
        open_note(bad.to_bytes(), [witnesses[0].verifier])


def test_cosignature_dated_after_now_is_refused() -> None:
    log, witnesses, cp = _world()
    note = sign_checkpoint(cp, log)
    late = note.with_signatures(cosign_checkpoint(note, witnesses[0], timestamp=NOW // 1000 + 1))
    kwargs: dict[str, Any] = {"log_key": log.verifier, "cosigners": [witnesses[0].verifier]}
    with pytest.raises(NotAuthorized, match=r"provnet\.test/w0.*after now"):
        verify_checkpoint(late.to_bytes(), now=NOW, **kwargs)
    assert verify_checkpoint(late.to_bytes(), now=NOW + 1000, **kwargs)


def test_checkpoint_signed_only_by_a_cosigner_is_not_the_logs() -> None:
    log, witnesses, cp = _world()
    text = cp.text.decode()
    only_witness = Note(text, (witnesses[0].sign(text, timestamp=1),))
    with pytest.raises(BadSignature, match=re.escape("no signature by log key provnet.test/")):
        verify_checkpoint(
            only_witness.to_bytes(), log_key=log.verifier, cosigners=[witnesses[0].verifier]
        )


def test_witness_refuses_to_cosign_text_that_is_not_a_checkpoint() -> None:
    _, witnesses, _ = _world()
    with pytest.raises(EncodingError, match="fewer than the 3"):
        cosign_checkpoint(Note(TEXT, (_peter().sign(TEXT),)), witnesses[0], timestamp=1)


def test_cosignature_timestamp_above_two_to_the_63_is_refused() -> None:
    _, witnesses, cp = _world()
    with pytest.raises(ValueError, match="2\\^63-1"):
        witnesses[0].sign(cp.text, timestamp=2**63)
    line = witnesses[0].sign(cp.text, timestamp=1)
    forged = NoteSignature(line.name, line.key_id, (2**63).to_bytes(8, "big") + line.payload[8:])
    with pytest.raises(BadSignature, match="exceeds 2\\^63-1"):
        open_note(Note(cp.text.decode(), (forged,)).to_bytes(), [witnesses[0].verifier])


# --- properties ---------------------------------------------------------------------

_text_char = st.characters(codec="utf-8", exclude_characters="\n").filter(lambda c: ord(c) >= 0x20)
_line = st.text(_text_char, max_size=30)
_name = st.text(
    st.characters(codec="utf-8").filter(lambda c: ord(c) >= 0x20 and c != "+" and not c.isspace()),
    min_size=1,
    max_size=20,
)
_signature = st.builds(
    NoteSignature, _name, st.binary(min_size=4, max_size=4), st.binary(min_size=1, max_size=80)
)
_note = st.builds(
    Note,
    st.lists(_line, min_size=1, max_size=6).map(lambda ls: "".join(f"{x}\n" for x in ls)),
    st.lists(_signature, min_size=1, max_size=5).map(tuple),
)
_checkpoint = st.builds(
    Checkpoint,
    st.text(_text_char, min_size=1, max_size=30),
    st.integers(0, MAX_TREE_SIZE),
    st.binary(min_size=32, max_size=32),
    st.lists(st.text(_text_char, min_size=1, max_size=20), max_size=4).map(tuple),
)


@settings(max_examples=150, deadline=None)
@given(_note)
def test_parse_of_encode_is_identity_for_notes(note: Note) -> None:
    data = encode_note(note)
    assert parse_note(data) == note
    assert encode_note(parse_note(data)) == data


@settings(max_examples=150, deadline=None)
@given(_checkpoint)
def test_parse_of_encode_is_identity_for_checkpoints(cp: Checkpoint) -> None:
    text = encode_checkpoint(cp)
    assert parse_checkpoint(text) == cp
    assert encode_checkpoint(parse_checkpoint(text)) == text


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_are_parsed_or_refused_as_encoding_errors(data: bytes) -> None:
    for parse in (parse_note, parse_checkpoint):
        with contextlib.suppress(EncodingError):
            parse(data)


@settings(max_examples=150, deadline=None)
@given(_note, st.data())
def test_a_mutated_signed_note_never_verifies(note: Note, data: st.DataObject) -> None:
    peter = _peter()
    signed = Note(note.text, (peter.sign(note.text),)).to_bytes()
    at = data.draw(st.integers(0, len(signed) - 1))
    flip = data.draw(st.integers(1, 255))
    mutated = signed[:at] + bytes([signed[at] ^ flip]) + signed[at + 1 :]
    with pytest.raises(ContractError):
        open_note(mutated, [peter.verifier])


# --- provnet's own vector, fixed keys and clock -------------------------------------


def test_provnet_cosigned_checkpoint_vector_regenerates_byte_for_byte() -> None:
    assert c2sp_gen.build() == c2sp_gen.PATH.read_bytes()


def test_provnet_vector_verifies_by_the_specs_written_out_independently() -> None:
    from nacl.bindings import crypto_sign_open

    doc = json.loads(c2sp_gen.PATH.read_text())
    note: str = doc["note"]
    text, block = note.rsplit("\n\n", 1)
    signed = (text + "\n").encode()
    vkeys = [doc["log_vkey"], *doc["cosigner_vkeys"]]
    for vkey, line in zip(vkeys, block.splitlines(), strict=True):
        name, hex_id, material = vkey.split("+", 2)
        raw = base64.b64decode(material)
        assert (
            hashlib.sha256(name.encode() + b"\n" + raw[:1] + raw[1:]).digest()[:4].hex() == hex_id
        )
        dash, line_name, sig_b64 = line.split(" ")
        assert (dash, line_name) == ("\u2014", name)
        sig = base64.b64decode(sig_b64)
        assert sig[:4].hex() == hex_id
        if raw[0] == 1:
            crypto_sign_open(sig[4:] + signed, raw[1:])
        else:
            t = int.from_bytes(sig[4:12], "big")
            assert t == doc["timestamp"]
            crypto_sign_open(sig[12:] + b"cosignature/v1\ntime %d\n" % t + signed, raw[1:])
    verified = verify_checkpoint(
        note.encode(),
        log_key=VerifierKey.parse(doc["log_vkey"]),
        cosigners=[VerifierKey.parse(v) for v in doc["cosigner_vkeys"]],
        now=doc["now_ms"],
    )
    assert len(verified.cosignatures) == 2
    assert list(verified.checkpoint.extensions) == doc["extensions"]


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=120))
def test_arbitrary_vkey_text_is_parsed_or_refused_as_an_encoding_error(text: str) -> None:
    with contextlib.suppress(EncodingError):
        assert VerifierKey.parse(text).to_string() == text
