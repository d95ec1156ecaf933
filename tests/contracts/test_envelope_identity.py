"""DSSE envelopes (interoperability, exact bytes) and key files (0600)."""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from securesystemslib.dsse import Envelope as SslibEnvelope
from securesystemslib.exceptions import VerificationError as SslibVerificationError
from securesystemslib.signer._crypto_signer import CryptoSigner
from securesystemslib.signer._key import SSlibKey

from contracts import (
    BadSignature,
    Commitment,
    EncodingError,
    Envelope,
    Identity,
    KeyFileError,
    PublicKey,
    load_identity,
    open_any,
    open_statement,
    pae,
    rotate_identity,
    save_identity,
    sign_envelope,
)
from tests.contracts._support import fixed_identity, make_world


def test_pae_matches_the_dsse_specification_example() -> None:
    # DSSE v1 protocol.md: PAE("http://example.com/HelloWorld", "hello world")
    expected = b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    assert pae("http://example.com/HelloWorld", b"hello world") == expected
    assert Envelope(b"hello world", "http://example.com/HelloWorld", ()).pae() == expected


@pytest.mark.parametrize(
    ("payload_type", "payload"),
    [
        ("application/vnd.provnet.receipt+json", b""),
        ("application/vnd.provnet.receipt+json", b"x" * 1000),
        ("t\u00ffp\u00e9/\u2603", b"\x00 \xff DSSEv1 1 a"),
        ("a", bytes(range(256))),
    ],
)
def test_pae_is_the_bytes_securesystemslib_signs(payload_type: str, payload: bytes) -> None:
    # The one PAE here and the maintained DSSE implementation agree, lengths
    # of non-ASCII types counted in UTF-8 bytes included.
    assert pae(payload_type, payload) == SslibEnvelope(payload, payload_type, {}).pae()


def _sslib_key(identity: Identity) -> SSlibKey:
    return SSlibKey.from_crypto(
        PublicKey.from_node_id(identity.node_id)._key, keyid=identity.node_id
    )


def test_our_envelopes_verify_with_the_securesystemslib_dsse_verifier() -> None:
    w = make_world()
    theirs = SslibEnvelope.from_dict(json.loads(w.commitment.to_bytes()))
    accepted = theirs.verify([_sslib_key(w.origin)], 1)
    assert list(accepted) == [w.origin.node_id]
    with pytest.raises(SslibVerificationError):
        SslibEnvelope.from_dict(json.loads(w.commitment.to_bytes())).verify(
            [_sslib_key(w.holder)], 1
        )


def test_envelopes_signed_by_securesystemslib_verify_here() -> None:
    w = make_world()
    private = Ed25519PrivateKey.from_private_bytes(os.urandom(32))
    signer = CryptoSigner(private)
    theirs = SslibEnvelope(w.commitment.envelope.payload, w.commitment.envelope.payload_type, {})
    theirs.sign(signer)
    ours = Envelope.from_json(theirs.to_dict())
    key = PublicKey.from_raw(bytes.fromhex(signer.public_key.keyval["public"]))
    assert ours.payload == w.commitment.envelope.payload
    with pytest.raises(BadSignature, match="no signature by"):
        ours.verify(key)  # sslib's keyid is not our node id …
    relabelled = Envelope(
        ours.payload,
        ours.payload_type,
        tuple(type(s)(keyid=key.node_id, sig=s.sig) for s in ours.signatures),
    )
    relabelled.verify(key)  # … but the signature over the PAE is the same scheme


def test_signature_covers_the_exact_payload_bytes_received() -> None:
    w = make_world()
    env = w.commitment.envelope
    # Same JSON meaning, different bytes (a space): the signature must fail.
    spaced = env.payload.replace(b'"epoch":', b'"epoch": ')
    assert json.loads(spaced) == json.loads(env.payload)
    altered = Envelope(spaced, env.payload_type, env.signatures)
    with pytest.raises(BadSignature):
        open_statement(altered, Commitment)
    assert altered.digest != env.digest


def test_wrong_payload_type_is_rejected_before_parsing_the_payload() -> None:
    w = make_world()
    env = w.obligation.envelope
    relabelled = sign_envelope(w.origin, "application/vnd.provnet.commitment+json", env.payload)
    with pytest.raises(EncodingError, match="field 'type' is 'obligation'"):
        open_statement(relabelled, Commitment)
    with pytest.raises(EncodingError, match=r"where 'application/vnd\.provnet\.commitment"):
        open_statement(env, Commitment)
    with pytest.raises(EncodingError, match="unknown payload type"):
        open_any(sign_envelope(w.origin, "text/plain", b"{}").to_bytes())


def test_envelope_round_trips_and_digest_is_sha256_of_the_statement_payload() -> None:
    w = make_world()
    data = w.demand.to_bytes()
    again = Envelope.from_bytes(data)
    assert again.to_bytes() == data
    import hashlib

    from contracts.batch import demand_payload

    payload = demand_payload(w.demand.statement)
    assert w.demand.digest == hashlib.sha256(payload).hexdigest()
    assert json.loads(data)["signatures"][0]["keyid"] == w.holder.node_id
    assert base64.b64decode(json.loads(data)["payload"]) == again.payload


def test_node_id_is_the_raw_public_key_hex() -> None:
    ident = fixed_identity("origin")
    assert len(ident.node_id) == 64
    assert PublicKey.from_node_id(ident.node_id).raw == bytes.fromhex(ident.node_id)
    with pytest.raises(EncodingError):
        PublicKey.from_node_id(ident.node_id.upper())


def test_key_file_is_written_0600_and_loads_back(tmp_path: Path) -> None:
    ident = Identity.generate()
    path = save_identity(ident, tmp_path / "node.key")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_identity(path).node_id == ident.node_id
    with pytest.raises(FileExistsError):
        save_identity(Identity.generate(), path)


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660, 0o644, 0o620])
def test_key_file_readable_or_writable_by_others_is_refused(tmp_path: Path, mode: int) -> None:
    path = save_identity(Identity.generate(), tmp_path / "node.key")
    path.chmod(mode)
    with pytest.raises(KeyFileError, match=f"mode {mode:04o}"):
        load_identity(path)


def test_key_file_that_is_not_an_ed25519_pem_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "node.key"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, b"-----BEGIN PRIVATE KEY-----\nnonsense\n-----END PRIVATE KEY-----\n")
    os.close(fd)
    with pytest.raises(KeyFileError, match="not an unencrypted PKCS#8"):
        load_identity(path)
    with pytest.raises(KeyFileError, match="cannot open"):
        load_identity(tmp_path / "missing.key")


def test_rotation_keeps_the_old_key_so_its_statements_stay_attributable(tmp_path: Path) -> None:
    path = save_identity(Identity.generate(), tmp_path / "node.key")
    old = load_identity(path)
    new, retired = rotate_identity(path)
    assert new.node_id != old.node_id
    assert load_identity(path).node_id == new.node_id
    assert load_identity(retired).node_id == old.node_id
    assert stat.S_IMODE(retired.stat().st_mode) == 0o600


def test_json_with_a_lone_surrogate_or_duplicate_key_is_malformed() -> None:
    from contracts import parse_json

    with pytest.raises(EncodingError, match="lone surrogate"):
        parse_json(b'{"k":"\\ud800"}', what="t")
    assert parse_json(b'"\\ud83d\\ude00"', what="t") == "\U0001f600"
    with pytest.raises(EncodingError, match="duplicate JSON key 'payload'"):
        Envelope.from_bytes(b'{"payload":"","payload":"","payloadType":"x","signatures":[]}')
    with pytest.raises(EncodingError, match="nested deeper than 32"):
        parse_json(b"[" * 33 + b"]" * 33, what="t")
    assert parse_json(b"[" * 32 + b"]" * 32, what="t") is not None


def test_signatures_are_openssls_and_openssl_signatures_verify() -> None:
    """Signing and verifying run on libsodium: Ed25519 is deterministic, so a
    signature is the very bytes OpenSSL makes with the same key, and each
    verifies the other's."""
    for i in range(8):
        private = Ed25519PrivateKey.generate()
        identity = Identity._from_private(private)
        data = os.urandom(i * 97)
        sig = identity.sign(data)
        assert sig == private.sign(data)
        private.public_key().verify(sig, data)  # OpenSSL accepts ours
        identity.public.verify(private.sign(data), data)  # we accept OpenSSL's
        with pytest.raises(BadSignature):
            identity.public.verify(sig, data + b"x")


def test_a_signature_of_the_wrong_length_never_verifies() -> None:
    """A signature one byte too long, its last byte the message's first, must not
    verify the rest of the message (libsodium reads the first 64 bytes of
    signature + message as the signature), nor one byte short, nor empty."""
    identity = fixed_identity("length")
    data = b"payload bytes"
    sig = identity.sign(data)
    identity.public.verify(sig, data)
    for bad, message in (
        (sig + data[:1], data[1:]),
        (sig[:-1], sig[-1:] + data),
        (b"", sig + data),
    ):
        with pytest.raises(BadSignature):
            identity.public.verify(bad, message)


def test_a_parsed_statement_is_bound_to_its_signer_and_verified_only_when_asked() -> None:
    """parse_statement checks the named signer but not the signature; verify_parsed
    then refuses a signature that does not verify over the payload as received."""
    import dataclasses

    from contracts.errors import BadSignature, BindingMismatch
    from contracts.serve import build_delivery_receipt
    from contracts.signed import parse_statement, verify_parsed
    from contracts.statements import DeliveryReceipt

    peer, other = fixed_identity("peer"), fixed_identity("other")
    good = build_delivery_receipt(
        peer,
        sender=other.node_id,
        value_digest="ab" * 32,
        commitments=[],
        obligations=[],
        received_at=1_000,
    ).envelope
    assert verify_parsed(parse_statement(good, DeliveryReceipt, signer=peer.node_id))
    with pytest.raises(BindingMismatch, match="names signer"):
        parse_statement(good, DeliveryReceipt, signer=other.node_id)
    altered = dataclasses.replace(good, payload=good.payload.replace(b"1000", b"1001"))
    assert altered.payload != good.payload
    parsed = parse_statement(altered, DeliveryReceipt, signer=peer.node_id)  # not checked here
    with pytest.raises(BadSignature, match="does not verify"):
        verify_parsed(parsed)


def test_envelope_signer_writes_the_bytes_sign_envelope_writes() -> None:
    from contracts.envelope import EnvelopeSigner

    identity = fixed_identity("signer")
    signer = EnvelopeSigner(identity, "application/vnd.provnet.receipt-batch+bin")
    for payload in (b"", b"p" * 300, bytes(range(256))):
        expected = sign_envelope(identity, "application/vnd.provnet.receipt-batch+bin", payload)
        envelope, data = signer.sign_envelope(payload)
        assert data == signer.sign(payload) == expected.to_bytes()
        assert envelope == expected
        envelope.verify(PublicKey.from_node_id(identity.node_id))


def _b64(data: bytes) -> str:
    return base64.standard_b64encode(data).decode("ascii")


_KEYID = "ab" * 32
_SIG = _b64(b"\x01" * 64)
_TYPE = "application/vnd.provnet.receipt+json"


def _envelope_object(**changes: object) -> dict[str, object]:
    obj: dict[str, object] = {
        "payload": _b64(b'{"v":1}'),
        "payloadType": _TYPE,
        "signatures": [{"keyid": _KEYID, "sig": _SIG}],
    }
    obj.update(changes)
    return obj


# Envelopes valid and invalid, canonical in shape or not: each is read the same way
# whichever route it takes (the one-signature pattern, the general parser, an object).
_ROUTE_CASES = {
    "canonical": _envelope_object(),
    "url-safe payload": _envelope_object(payload=base64.urlsafe_b64encode(b"\xfb\xff").decode()),
    "unpadded payload": _envelope_object(payload="AAA"),
    "padding inside the payload": _envelope_object(payload="AA==AAAA"),
    "payload not base64": _envelope_object(payload="!!!!"),
    "payload not a string": _envelope_object(payload=7),
    "empty payload": _envelope_object(payload=""),
    "empty payloadType": _envelope_object(payloadType=""),
    "payloadType of 200": _envelope_object(payloadType="t" * 200),
    "payloadType of 201": _envelope_object(payloadType="t" * 201),
    "payloadType with a space": _envelope_object(payloadType="text/plain; v=1"),
    "payloadType non-ASCII": _envelope_object(payloadType="application/vnd.é+json"),
    "keyid of 256": _envelope_object(signatures=[{"keyid": "a" * 256, "sig": _SIG}]),
    "keyid of 257": _envelope_object(signatures=[{"keyid": "a" * 257, "sig": _SIG}]),
    "keyid upper-case hex": _envelope_object(signatures=[{"keyid": _KEYID.upper(), "sig": _SIG}]),
    "keyid empty": _envelope_object(signatures=[{"keyid": "", "sig": _SIG}]),
    "keyid absent": _envelope_object(signatures=[{"sig": _SIG}]),
    "keyid not a string": _envelope_object(signatures=[{"keyid": 5, "sig": _SIG}]),
    "sig unpadded": _envelope_object(signatures=[{"keyid": _KEYID, "sig": "AQ"}]),
    "sig absent": _envelope_object(signatures=[{"keyid": _KEYID}]),
    "sig field unknown": _envelope_object(signatures=[{"keyid": _KEYID, "sig": _SIG, "x": 1}]),
    "no signature": _envelope_object(signatures=[]),
    "two signatures": _envelope_object(
        signatures=[{"keyid": _KEYID, "sig": _SIG}, {"keyid": "cd" * 32, "sig": _SIG}]
    ),
    "nine signatures": _envelope_object(signatures=[{"keyid": _KEYID, "sig": _SIG}] * 9),
    "signatures not a list": _envelope_object(signatures={"keyid": _KEYID, "sig": _SIG}),
    "unknown field": _envelope_object(extra="x"),
}


def _read(route: object) -> Envelope | tuple[str, str]:
    try:
        if isinstance(route, bytes):
            return Envelope.from_bytes(route)
        return Envelope.from_json(route)
    except EncodingError as exc:
        return type(exc).__name__, str(exc)


def _reordered(value: object) -> object:
    """``value`` with every object's keys in reverse order (JSON means the same)."""
    if isinstance(value, dict):
        return {k: _reordered(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [_reordered(v) for v in value]
    return value


@pytest.mark.parametrize("case", sorted(_ROUTE_CASES))
def test_an_envelope_reads_the_same_as_canonical_bytes_reordered_bytes_and_an_object(
    case: str,
) -> None:
    from contracts.canonical import canonical_bytes
    from contracts.envelope import _CANONICAL_SINGLE

    obj = _ROUTE_CASES[case]
    canonical = canonical_bytes(obj)
    reordered = json.dumps(_reordered(obj), indent=1, ensure_ascii=False).encode("utf-8")
    assert reordered != canonical
    read = [_read(canonical), _read(reordered), _read(obj)]
    assert read[0] == read[1] == read[2], case
    # the canonical one-signature shapes take the pattern's route from bytes
    patterned = {
        "canonical",
        "unpadded payload",
        "padding inside the payload",
        "empty payload",
        "payloadType of 200",
        "keyid of 256",
        "keyid empty",
        "sig unpadded",
    }
    assert (_CANONICAL_SINGLE.fullmatch(canonical.decode("latin-1")) is not None) == (
        case in patterned
    )
    valid = {
        "canonical",
        "url-safe payload",
        "empty payload",
        "payloadType of 200",
        "payloadType with a space",
        "payloadType non-ASCII",
        "keyid of 256",
        "keyid upper-case hex",
        "keyid empty",
        "keyid absent",
        "no signature",
        "two signatures",
    }
    assert isinstance(read[0], Envelope) == (case in valid), read[0]
