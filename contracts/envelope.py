"""DSSE envelopes: the signed wrapper around every statement.

Wire form (DSSE v1.0 JSON envelope, https://github.com/secure-systems-lab/dsse)::

    {"payload": <base64 of the payload bytes>,
     "payloadType": "application/vnd.provnet.<kind>+json",
     "signatures": [{"keyid": <node id>, "sig": <base64 Ed25519 signature>}]}

What is signed: the DSSE pre-authentication encoding
``PAE(type, body) = "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body``
of the payload bytes exactly as received, written by :func:`pae` (the one
implementation: :meth:`Envelope.pae`, :func:`sign_envelope` and
:class:`EnvelopeSigner` all call it; tested against the DSSE specification's
example and against securesystemslib's encoder). The
signature is Ed25519 over those PAE bytes (made and checked by libsodium through
PyNaCl, :mod:`contracts.identity`), so any DSSE
verifier holding the node's public key accepts our envelopes (see the
interoperability test). Verification never re-encodes the payload.

The JSON parsing of the envelope is done here rather than with
``securesystemslib.dsse.Envelope.from_dict`` because that method mutates its
input, raises ``KeyError``/``binascii.Error`` on malformed input and does not
bound sizes; untrusted bytes must map to :class:`EncodingError` only.

``digest`` of an envelope is the lower-case hex SHA-256 of its payload bytes.
Payloads we sign are the RFC 8785 canonical bytes of the statement, so this
is also the SHA-256 of the canonical statement: the "commitment digest",
"obligation digest", "receipt digest" … used throughout the project.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

from contracts.canonical import MAX_DOCUMENT_BYTES, JsonObject, canonical_bytes, parse_json_object
from contracts.errors import BadSignature, EncodingError
from contracts.identity import Identity, PublicKey

__all__ = [
    "MAX_ENVELOPE_BYTES",
    "MAX_SIGNATURES",
    "Envelope",
    "EnvelopeSignature",
    "EnvelopeSigner",
    "pae",
    "sign_envelope",
]

MAX_ENVELOPE_BYTES = MAX_DOCUMENT_BYTES
MAX_SIGNATURES = 8
_MAX_PAYLOAD_TYPE = 200
_MAX_KEYID = 256
_ENVELOPE_KEYS = frozenset({"payload", "payloadType", "signatures"})
_SIGNATURE_KEYS = frozenset({"keyid", "sig"})


# ``Envelope.to_bytes`` writes the canonical form in RFC 8785 key order
# ("payload" < "payloadType" < "signatures"; "keyid" < "sig"), without
# whitespace; base64 needs no escape, the strings are canonical_bytes' own:
#   {"payload":"<b64>","payloadType":<type>,"signatures":[{"keyid":<id>,"sig":"<b64>"}]}
_HEAD = b'{"payload":"'
_MID_TYPE = b'","payloadType":'
_MID_SIGS = b',"signatures":['
_MID_KEYID = b'{"keyid":'
_MID_SIG = b',"sig":"'
_TAIL = b'"}]}'


# That shape with one signature, a payload type of the plain alphabet and a
# hex keyid (every envelope this project writes), decoded by one pattern
# instead of the general JSON parser: the base64, payload-type and hex classes
# admit no quote or backslash, so a match is one object with three keys once
# each, and its strings are the matched characters as they are (no escapes);
# ``fullmatch`` leaves nothing before or after it, and the repeats are
# possessive (no class matches the quote that ends it: nothing to backtrack
# into). It only decodes: what it matched goes to :func:`_validated`, the one
# validator, as the general parser's object does (through
# :meth:`Envelope.from_json`), so both routes accept and refuse the same envelopes.
_CANONICAL_SINGLE = re.compile(
    r'\{"payload":"([A-Za-z0-9+/=]*+)","payloadType":"([A-Za-z0-9.+/_-]{1,200}+)",'
    r'"signatures":\[\{"keyid":"([0-9a-f]{0,256}+)","sig":"([A-Za-z0-9+/=]*+)"\}\]\}'
)


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding of ``payload`` (the signed bytes):
    ``"DSSEv1" SP LEN(type) SP type SP LEN(body) SP body``, lengths in bytes as
    ASCII decimal without leading zeros, the type as UTF-8."""
    raw_type = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(raw_type), raw_type, len(payload), payload)


def _b64decode(value: object, what: str) -> bytes:
    if type(value) is not str:
        raise EncodingError(f"{what}: expected a base64 string, got {type(value).__name__}")
    try:
        # Strict: only the standard alphabet, correct padding, no whitespace.
        return binascii.a2b_base64(value, strict_mode=True)
    except (binascii.Error, ValueError):
        pass
    try:
        # DSSE producers may use the URL-safe alphabet.
        data = value.encode("ascii")
        return base64.b64decode(data, altchars=b"-_", validate=True)
    except (binascii.Error, ValueError) as exc:
        raise EncodingError(f"{what}: invalid base64 ({exc})") from exc


def _validated(payload: object, payload_type: object, raw_sigs: object) -> Envelope:
    """The one validator of an envelope, from its three JSON members as decoded:
    the payload's base64, the payload type, the signature list's bound and each
    signature's shape, keyid and base64. Every route from bytes or a JSON object
    to an :class:`Envelope` ends here."""
    body = _b64decode(payload, "envelope payload")
    if type(payload_type) is not str or not 0 < len(payload_type) <= _MAX_PAYLOAD_TYPE:
        raise EncodingError(
            f"envelope: payloadType must be a short string, got {payload_type!r:.80}"
        )
    if type(raw_sigs) is not list:
        raise EncodingError("envelope: signatures must be a list")
    if len(raw_sigs) > MAX_SIGNATURES:
        raise EncodingError(f"envelope: {len(raw_sigs)} signatures exceeds {MAX_SIGNATURES}")
    sigs: list[EnvelopeSignature] = []
    for i, raw in enumerate(raw_sigs):
        if type(raw) is not dict or not raw.keys() <= _SIGNATURE_KEYS:
            raise EncodingError(f"envelope: signature {i} must be an object {{keyid, sig}}")
        keyid = raw.get("keyid", "")
        if type(keyid) is not str or len(keyid) > _MAX_KEYID:
            raise EncodingError(f"envelope: signature {i} keyid must be a short string")
        sigs.append(EnvelopeSignature(keyid, _b64decode(raw.get("sig"), "signature")))
    return Envelope(body, payload_type, tuple(sigs))


@dataclass(frozen=True, slots=True)
class EnvelopeSignature:
    """One DSSE signature: ``keyid`` is the signer's node id."""

    keyid: str
    sig: bytes


@dataclass(frozen=True, slots=True)
class Envelope:
    """A parsed DSSE envelope holding the payload bytes exactly as received."""

    payload: bytes
    payload_type: str
    signatures: tuple[EnvelopeSignature, ...]
    _digest: str = field(default="", init=False, repr=False, compare=False)

    @property
    def digest(self) -> str:
        """Hex SHA-256 of the payload bytes (the statement digest)."""
        if not self._digest:
            # Memoised: digests are compared on every binding check.
            object.__setattr__(self, "_digest", hashlib.sha256(self.payload).hexdigest())
        return self._digest

    def pae(self) -> bytes:
        """The signed bytes: :func:`pae` of this envelope's type and payload."""
        return pae(self.payload_type, self.payload)

    def to_json(self) -> JsonObject:
        return {
            "payload": base64.standard_b64encode(self.payload).decode("ascii"),
            "payloadType": self.payload_type,
            "signatures": [
                {"keyid": s.keyid, "sig": base64.standard_b64encode(s.sig).decode("ascii")}
                for s in self.signatures
            ],
        }

    def to_bytes(self) -> bytes:
        """RFC 8785 canonical JSON of the DSSE envelope (``ValueError`` for a
        string JSON cannot carry, as :func:`~contracts.canonical.canonical_bytes`).

        Written in the canonical key order around the parts: base64 (which
        needs no escape) and the payload type and keyids as
        :func:`~contracts.canonical.canonical_bytes` encodes a string.
        """
        b64 = binascii.b2a_base64
        parts = [
            _HEAD,
            b64(self.payload, newline=False),
            _MID_TYPE,
            canonical_bytes(self.payload_type),
            _MID_SIGS,
        ]
        for i, sig in enumerate(self.signatures):
            parts += (
                _MID_KEYID if i == 0 else b"," + _MID_KEYID,
                canonical_bytes(sig.keyid),
                _MID_SIG,
                b64(sig.sig, newline=False),
                b'"}',
            )
        parts.append(b"]}")
        return b"".join(parts)

    @classmethod
    def from_json(cls, obj: Any) -> Envelope:
        """Parse the DSSE JSON form (already decoded from bytes)."""
        if not isinstance(obj, dict):
            raise EncodingError(f"envelope: expected a JSON object, got {type(obj).__name__}")
        if not obj.keys() <= _ENVELOPE_KEYS:
            unknown = sorted(obj.keys() - _ENVELOPE_KEYS)
            raise EncodingError(f"envelope: unknown fields {unknown[:5]}")
        return _validated(obj.get("payload"), obj.get("payloadType"), obj.get("signatures"))

    @classmethod
    def from_bytes(cls, data: bytes, *, max_bytes: int = MAX_ENVELOPE_BYTES) -> Envelope:
        """Parse DSSE JSON bytes (bounded in size and depth): decoded to the
        envelope's three members (canonical single-signature bytes by one pattern,
        anything else by the general parser and :meth:`from_json`), which one
        validator checks."""
        if type(data) is bytes and len(data) <= max_bytes:
            # Latin-1 maps each byte to one character, so the pattern (ASCII only)
            # matches the text exactly where it would match the bytes.
            match = _CANONICAL_SINGLE.fullmatch(data.decode("latin-1"))
            if match is not None:
                payload, payload_type, keyid, sig = match.groups()
                return _validated(payload, payload_type, [{"keyid": keyid, "sig": sig}])
        return cls.from_json(parse_json_object(data, what="envelope", max_bytes=max_bytes))

    def verify(self, key: PublicKey) -> None:
        """Raise :class:`BadSignature` unless ``key`` signed the PAE of the payload.

        Signatures whose keyid names another key are skipped; a signature with
        an empty keyid is tried too (DSSE makes keyid optional).
        """
        message: bytes | None = None
        node_id = key.node_id
        tried = 0
        for sig in self.signatures:
            if sig.keyid not in (node_id, ""):
                continue
            if message is None:
                message = self.pae()
            tried += 1
            try:
                key.verify(sig.sig, message)
            except BadSignature:
                continue
            return
        if tried == 0:
            raise BadSignature(
                f"{self.payload_type} {self.digest[:12]}…: no signature by {node_id[:16]}…"
            )
        raise BadSignature(
            f"{self.payload_type} {self.digest[:12]}…: signature by {node_id[:16]}… does not verify"
        )


def sign_envelope(identity: Identity, payload_type: str, payload: bytes) -> Envelope:
    """Sign ``payload`` (exact bytes) under ``payload_type`` with ``identity``."""
    sig = identity.sign(pae(payload_type, payload))
    return Envelope(payload, payload_type, (EnvelopeSignature(identity.node_id, sig),))


class EnvelopeSigner:
    """Signs payloads of one type with one identity straight to envelope bytes.

    ``sign(payload)`` is ``sign_envelope(identity, payload_type, payload).to_bytes()``
    (the same bytes: pinned by a test), with what does not depend on the
    payload — the envelope's text around the payload and the signature, the
    keyid — written once here rather than per signature; the signed bytes are
    :func:`pae`'s.
    """

    __slots__ = ("_identity", "_keyid", "_middle", "_type")

    def __init__(self, identity: Identity, payload_type: str) -> None:
        keyid = identity.node_id
        self._identity = identity
        self._keyid = keyid
        self._type = payload_type
        type_text, keyid_text = canonical_bytes(payload_type), canonical_bytes(keyid)
        self._middle = b"".join((_MID_TYPE, type_text, _MID_SIGS, _MID_KEYID, keyid_text, _MID_SIG))

    @property
    def signs_as(self) -> tuple[str, str]:
        """(keyid, payload type) of what this signer signs."""
        return self._keyid, self._type

    def sign(self, payload: bytes) -> bytes:
        """The canonical envelope bytes of ``payload`` signed (one Ed25519 signature)."""
        return self._signed(payload)[1]

    def sign_envelope(self, payload: bytes) -> tuple[Envelope, bytes]:
        """``payload`` signed (one Ed25519 signature): the envelope and its canonical
        bytes (``sign_envelope(identity, payload_type, payload)`` and its ``to_bytes()``)."""
        sig, data = self._signed(payload)
        return Envelope(payload, self._type, (EnvelopeSignature(self._keyid, sig),)), data

    def _signed(self, payload: bytes) -> tuple[bytes, bytes]:
        sig = self._identity.sign(pae(self._type, payload))
        data = b"".join(
            (
                _HEAD,
                binascii.b2a_base64(payload, newline=False),
                self._middle,
                binascii.b2a_base64(sig, newline=False),
                _TAIL,
            )
        )
        return sig, data
