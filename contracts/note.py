"""C2SP signed notes: text signed by one or more keys (c2sp.org/signed-note).

A signed note is UTF-8 with no ASCII control character but newline::

    <text: one or more lines, each ending in "\\n">
    "\\n"                                    the blank line
    "— " <key name> " " base64(key id ‖ payload) "\\n"    one per signature

* The **text** is what a type 0x01 key signs (Ed25519, RFC 8032, over the
  text's UTF-8 bytes, final newline included, blank line excluded). The text
  may hold empty lines; it ends at the *last* blank line of the note.
* The dash is U+2014 (em dash). **Key names** are non-empty and hold no
  Unicode white space (``str.isspace``) and no ``+``.
* The **key id** is ``SHA-256(key name ‖ 0x0A ‖ signature type ‖ public
  key)[:4]`` (:func:`key_id`): the type byte makes a key used for two
  signature types two keys.
* A **verifier key** (vkey) is the text
  ``<key name>+<hex key id>+<base64(signature type ‖ public key)>``
  (:class:`VerifierKey`); its key id must be the one the name and key give.
* Signature type **0x04** is the tlog-cosignature/v1 timestamped Ed25519
  cosignature (c2sp.org/tlog-cosignature): its payload is
  ``u64_be(timestamp) ‖ Ed25519 signature`` and the Ed25519 message is
  ``"cosignature/v1\\ntime <timestamp>\\n" ‖ text`` (:func:`cosignature_message`),
  the timestamp in POSIX seconds, decimal without leading zeros, at most
  2^63 − 1.

Verification (:func:`open_note`) follows the spec's rules: a signature line
is matched to a key by **name and key id** together; lines no trusted key
matches are ignored (kept as ``unverified``); a matched line that does not
verify rejects the whole note (:class:`~contracts.errors.BadSignature`
naming the key); a note with no verified signature is rejected too.

Parsing is bounded before anything is decoded: at most ``max_bytes`` bytes
(:data:`MAX_NOTE_BYTES`) and ``max_signatures`` signature lines
(:data:`MAX_SIGNATURES`; the spec asks verifiers to accept at least 16).
Every base64 field must be canonical (what encoding the decoded bytes gives
back), so ``encode_note(parse_note(b)) == b`` for every accepted ``b``: the
bytes that travel are the bytes that were signed, and are never rebuilt
differently. Malformed bytes are an :class:`~contracts.errors.EncodingError`
naming the part that was wrong.
"""

from __future__ import annotations

import binascii
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from contracts.errors import BadSignature, CheckResult, EncodingError, run_check
from contracts.identity import Identity, PublicKey

__all__ = [
    "COSIGNATURE_V1_HEADER",
    "MAX_NOTE_BYTES",
    "MAX_SIGNATURES",
    "MAX_TIMESTAMP",
    "SIG_TYPE_COSIGNATURE_V1",
    "SIG_TYPE_ED25519",
    "LineNotVerified",
    "Note",
    "NoteKey",
    "NoteSignature",
    "OpenedNote",
    "VerifiedSignature",
    "VerifierKey",
    "check_key_name",
    "check_note",
    "cosignature_message",
    "cosignature_timestamp",
    "decode_canonical_base64",
    "decode_decimal",
    "decode_hash",
    "encode_base64",
    "encode_hash",
    "encode_note",
    "key_id",
    "open_note",
    "parse_note",
    "text_digest",
]

SIG_TYPE_ED25519 = 0x01
SIG_TYPE_COSIGNATURE_V1 = 0x04
_SUPPORTED_TYPES = {
    SIG_TYPE_ED25519: "Ed25519",
    SIG_TYPE_COSIGNATURE_V1: "cosignature/v1",
}

# Room for a cosigned head plus lines of types this module does not verify
# (post-quantum signatures run to kilobytes each), while one hostile note
# still costs little to refuse.
MAX_NOTE_BYTES = 128 * 1024
# The spec's floor is 16; cosigned heads carry the log's signature plus a
# witness quorum, so a bound well above that refuses only abuse.
MAX_SIGNATURES = 100
MAX_TIMESTAMP = 2**63 - 1
COSIGNATURE_V1_HEADER = b"cosignature/v1\n"

_DASH = "\u2014 "
_KEY_ID_LEN = 4
_ED25519_SIG_LEN = 64
_TIMESTAMP_LEN = 8
_PUBLIC_KEY_LEN = 32
_HASH_LEN = 32
_HEX = frozenset("0123456789abcdef")
# Control characters the spec forbids: everything below U+0020 but newline.
_FORBIDDEN = {c: None for c in range(0x20) if c != 0x0A}


def key_id(name: str, sig_type: int, public_key: bytes) -> bytes:
    """``SHA-256(name ‖ 0x0A ‖ sig_type ‖ public_key)[:4]`` (signed-note §Signatures)."""
    if not 0 <= sig_type <= 0xFF:
        raise ValueError(f"signature type must be one byte, got {sig_type}")
    material = name.encode("utf-8") + b"\n" + bytes([sig_type]) + bytes(public_key)
    return hashlib.sha256(material).digest()[:_KEY_ID_LEN]


def _key_name_problem(name: str) -> str | None:
    if not name:
        return "key name is empty"
    if "+" in name:
        return f"key name {name!r:.80} contains '+'"
    if any(c.isspace() for c in name):
        return f"key name {name!r:.80} contains white space"
    if len(name.translate(_FORBIDDEN)) != len(name):
        return f"key name {name!r:.80} contains a control character"
    return None


def check_key_name(name: str) -> None:
    """Raise :class:`EncodingError` unless ``name`` is a valid key name."""
    problem = _key_name_problem(name)
    if problem is not None:
        raise EncodingError(problem)


def decode_canonical_base64(text: str, what: str) -> bytes:
    """Strict, canonical standard base64 (RFC 4648 §4) or :class:`EncodingError`.

    ``what`` names the field in the error.
    """
    try:
        raw = binascii.a2b_base64(text.encode("ascii"), strict_mode=True)
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise EncodingError(f"{what} is not base64: {text!r:.80} ({exc})") from exc
    # Two spellings of one value would let the same note travel as different
    # bytes; only the one encoding gives back is accepted.
    if encode_base64(raw) != text:
        raise EncodingError(f"{what} is not canonical base64: {text!r:.80}")
    return raw


def encode_base64(raw: bytes) -> str:
    """Standard base64 with padding, no newline."""
    return binascii.b2a_base64(raw, newline=False).decode("ascii")


def decode_decimal(text: str, what: str, lo: int, hi: int) -> int:
    """A note line's decimal number: ASCII digits, no leading zero, in ``[lo, hi]``
    (:class:`EncodingError` naming ``what`` otherwise)."""
    # Length first: a megabyte of digits must not reach int().
    if not text or len(text) > len(str(hi)) or not text.isascii() or not text.isdigit():
        raise EncodingError(f"{what} {text!r:.40} is not a decimal number")
    if text != "0" and text.startswith("0"):
        raise EncodingError(f"{what} {text!r:.40} has a leading zero")
    value = int(text)
    if not lo <= value <= hi:
        raise EncodingError(f"{what} {value} outside [{lo}, {hi}]")
    return value


def decode_hash(text: str, what: str) -> str:
    """A note line's SHA-256 value: canonical base64 of 32 bytes, as 64 lower-case hex."""
    raw = decode_canonical_base64(text, what)
    if len(raw) != _HASH_LEN:
        raise EncodingError(f"{what} is {len(raw)} bytes, not {_HASH_LEN}")
    return raw.hex()


def encode_hash(hex_digest: str) -> str:
    """:func:`decode_hash`'s inverse: 64 hex characters as base64 of their 32 bytes."""
    return encode_base64(bytes.fromhex(hex_digest))


def text_digest(data: bytes, what: str = "note") -> str:
    """SHA-256 (hex) of a note's text — everything before its last blank line —
    read **without parsing or verifying** the note: a key to look it up by."""
    raw = bytes(data)
    split = raw.rfind(b"\n\n")
    if split < 0:
        raise EncodingError(f"{what} has no blank line between its text and its signatures")
    return hashlib.sha256(raw[: split + 1]).hexdigest()


def cosignature_message(text: bytes, timestamp: int) -> bytes:
    """The bytes a tlog-cosignature/v1 (type 0x04) Ed25519 signature covers.

    ``"cosignature/v1\\n" ‖ "time " ‖ decimal(timestamp) ‖ "\\n" ‖ text``
    (c2sp.org/tlog-cosignature §Ed25519 signed message), ``text`` being the
    whole note text of the cosigned checkpoint, extension lines included.
    """
    _check_timestamp_arg(timestamp)
    return COSIGNATURE_V1_HEADER + b"time %d\n" % timestamp + bytes(text)


def cosignature_timestamp(signature: NoteSignature) -> int:
    """The timestamp a type 0x04 line carries, read without verifying it.

    For a line that is not shaped like a cosignature (``u64_be(t) ‖`` 64
    bytes), :class:`EncodingError`. Only a verified timestamp
    (:attr:`VerifiedSignature.timestamp`) may decide anything.
    """
    payload = signature.payload
    if len(payload) != _TIMESTAMP_LEN + _ED25519_SIG_LEN:
        raise EncodingError(
            f"line by {signature.key} holds {len(payload)} bytes after its key id,"
            f" not a cosignature's {_TIMESTAMP_LEN} + {_ED25519_SIG_LEN}"
        )
    timestamp = int.from_bytes(payload[:_TIMESTAMP_LEN], "big")
    if timestamp > MAX_TIMESTAMP:
        raise EncodingError(f"cosignature by {signature.key}: timestamp {timestamp} exceeds 2^63-1")
    return timestamp


def _check_timestamp_arg(timestamp: int) -> None:
    if type(timestamp) is not int or not 0 <= timestamp <= MAX_TIMESTAMP:
        raise ValueError(f"cosignature timestamp must be an int in [0, 2^63-1], got {timestamp!r}")


@dataclass(frozen=True, slots=True)
class NoteSignature:
    """One signature line: key name, 4-byte key id and the payload after it.

    ``payload`` is what the key's signature type defines: a 64-byte Ed25519
    signature for type 0x01, ``u64_be(timestamp) ‖`` 64-byte signature for
    type 0x04, anything (≥ 1 byte) for types this module does not verify.
    """

    name: str
    key_id: bytes
    payload: bytes

    def __post_init__(self) -> None:
        problem = _key_name_problem(self.name)
        if problem is not None:
            raise ValueError(problem)
        if type(self.key_id) is not bytes or len(self.key_id) != _KEY_ID_LEN:
            raise ValueError(f"key id must be {_KEY_ID_LEN} bytes, got {self.key_id!r}")
        if type(self.payload) is not bytes or not self.payload:
            raise ValueError("signature payload must be non-empty bytes")

    @property
    def line(self) -> str:
        """The signature line, ``"— <name> <base64(key id ‖ payload)>\\n"``."""
        return f"{_DASH}{self.name} {encode_base64(self.key_id + self.payload)}\n"

    @property
    def key(self) -> str:
        """``<name>+<hex key id>``: how errors and logs name the signing key."""
        return f"{self.name}+{self.key_id.hex()}"


def _text_problem(text: str) -> str | None:
    if not text.endswith("\n"):
        return "note text does not end with a newline"
    if len(text.translate(_FORBIDDEN)) != len(text):
        return "note text contains a control character other than newline"
    return None


@dataclass(frozen=True, slots=True)
class Note:
    """A parsed signed note: its text (final newline included) and its lines.

    ``to_bytes()`` is the exact byte string :func:`parse_note` accepted.
    """

    text: str
    signatures: tuple[NoteSignature, ...]

    def __post_init__(self) -> None:
        problem = _text_problem(self.text)
        if problem is not None:
            raise ValueError(problem)
        if not self.signatures:
            raise ValueError("a signed note needs at least one signature")
        if not all(isinstance(s, NoteSignature) for s in self.signatures):
            raise TypeError("signatures must be NoteSignature objects")

    @property
    def text_bytes(self) -> bytes:
        """The signed bytes: the text's UTF-8, blank line and signatures excluded."""
        return self.text.encode("utf-8")

    def to_bytes(self) -> bytes:
        return encode_note(self)

    def with_signatures(self, *signatures: NoteSignature) -> Note:
        """This note with ``signatures`` appended (a witness adds its cosignature)."""
        return Note(text=self.text, signatures=self.signatures + tuple(signatures))


def encode_note(note: Note) -> bytes:
    """``text ‖ "\\n" ‖ signature lines``, UTF-8 (signed-note §Format)."""
    return (note.text + "\n" + "".join(s.line for s in note.signatures)).encode("utf-8")


def _parse_signature_line(line: str, number: int) -> NoteSignature:
    where = f"signature line {number}"
    if not line.startswith(_DASH):
        raise EncodingError(f"{where} does not start with an em dash and a space: {line!r:.80}")
    parts = line[len(_DASH) :].split(" ")
    if len(parts) != 2:
        raise EncodingError(f"{where} is not '— <name> <base64>': {line!r:.80}")
    name, encoded = parts
    problem = _key_name_problem(name)
    if problem is not None:
        raise EncodingError(f"{where}: {problem}")
    raw = decode_canonical_base64(encoded, f"{where} ({name})")
    if len(raw) <= _KEY_ID_LEN:
        raise EncodingError(
            f"{where} ({name}) holds {len(raw)} bytes,"
            f" not a {_KEY_ID_LEN}-byte key id and a signature"
        )
    return NoteSignature(name=name, key_id=raw[:_KEY_ID_LEN], payload=raw[_KEY_ID_LEN:])


def parse_note(
    data: bytes, *, max_bytes: int = MAX_NOTE_BYTES, max_signatures: int = MAX_SIGNATURES
) -> Note:
    """Parse a signed note, or raise :class:`EncodingError` naming what is wrong.

    Checks, in order: (1) size ≤ ``max_bytes``; (2) UTF-8; (3) no control
    character but newline, final newline; (4) a blank line separates text and
    signatures (the last one in the note); (5) 1..``max_signatures`` lines,
    each ``"— <name> <base64>"`` with a valid name and canonical base64 of a
    key id and a non-empty payload. Nothing is verified here: see
    :func:`open_note`.
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError(f"a note is bytes, got {type(data).__name__}")
    if len(data) > max_bytes:
        raise EncodingError(f"note is {len(data)} bytes, more than the limit of {max_bytes}")
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EncodingError(f"note is not UTF-8 (byte {exc.start})") from exc
    if len(text.translate(_FORBIDDEN)) != len(text):
        at = next(i for i, c in enumerate(text) if ord(c) < 0x20 and c != "\n")
        raise EncodingError(
            f"note contains control character U+{ord(text[at]):04X} at character {at}"
        )
    if not text.endswith("\n"):
        raise EncodingError("note does not end with a newline")
    split = text.rfind("\n\n")
    if split < 0:
        raise EncodingError("note has no blank line between its text and its signatures")
    body, block = text[: split + 1], text[split + 2 :]
    if not block:
        raise EncodingError("note has no signature lines after its blank line")
    lines = block[:-1].split("\n")
    if len(lines) > max_signatures:
        raise EncodingError(
            f"note has {len(lines)} signature lines, more than the limit of {max_signatures}"
        )
    signatures = tuple(_parse_signature_line(line, i + 1) for i, line in enumerate(lines))
    return Note(text=body, signatures=signatures)


@dataclass(frozen=True, slots=True)
class VerifierKey:
    """A trusted key: name, signature type and Ed25519 public key (a vkey).

    Only the types this module verifies (0x01 Ed25519, 0x04 cosignature/v1)
    can be built; both use a 32-byte Ed25519 key.
    """

    name: str
    sig_type: int
    public: PublicKey

    def __post_init__(self) -> None:
        problem = _key_name_problem(self.name)
        if problem is not None:
            raise ValueError(problem)
        if self.sig_type not in _SUPPORTED_TYPES:
            raise ValueError(f"unsupported signature type 0x{self.sig_type:02x}")
        if not isinstance(self.public, PublicKey):
            raise TypeError("public must be a contracts.identity.PublicKey")

    @classmethod
    def ed25519(cls, name: str, public: PublicKey) -> VerifierKey:
        return cls(name=name, sig_type=SIG_TYPE_ED25519, public=public)

    @classmethod
    def cosigner(cls, name: str, public: PublicKey) -> VerifierKey:
        return cls(name=name, sig_type=SIG_TYPE_COSIGNATURE_V1, public=public)

    @property
    def key_id(self) -> bytes:
        return key_id(self.name, self.sig_type, self.public.raw)

    @property
    def key(self) -> str:
        """``<name>+<hex key id>``, as :attr:`NoteSignature.key`."""
        return f"{self.name}+{self.key_id.hex()}"

    def to_string(self) -> str:
        """``<name>+<hex key id>+<base64(type ‖ public key)>`` (signed-note §Verifier keys)."""
        return f"{self.key}+{encode_base64(bytes([self.sig_type]) + self.public.raw)}"

    @classmethod
    def parse(cls, vkey: str) -> VerifierKey:
        """Parse a vkey string; :class:`EncodingError` names the bad part.

        The name holds no ``+`` and the hex id none either, so the first two
        ``+`` split the parts (the base64 may hold ``+`` itself).
        """
        if not isinstance(vkey, str):
            raise TypeError(f"a vkey is a str, got {type(vkey).__name__}")
        parts = vkey.split("+", 2)
        if len(parts) != 3:
            raise EncodingError(f"vkey {vkey!r:.80} is not '<name>+<hex id>+<base64 key>'")
        name, hex_id, encoded = parts
        problem = _key_name_problem(name)
        if problem is not None:
            raise EncodingError(f"vkey: {problem}")
        if len(hex_id) != 2 * _KEY_ID_LEN or not set(hex_id) <= _HEX:
            raise EncodingError(
                f"vkey {name}: key id {hex_id!r:.20} is not 8 lower-case hex digits"
            )
        raw = decode_canonical_base64(encoded, f"vkey {name} key")
        if not raw:
            raise EncodingError(f"vkey {name}: key material is empty")
        sig_type, material = raw[0], raw[1:]
        if sig_type not in _SUPPORTED_TYPES:
            raise EncodingError(f"vkey {name}: unsupported signature type 0x{sig_type:02x}")
        if len(material) != _PUBLIC_KEY_LEN:
            raise EncodingError(
                f"vkey {name}: {_SUPPORTED_TYPES[sig_type]} public key is {len(material)} bytes,"
                f" not {_PUBLIC_KEY_LEN}"
            )
        key = cls(name=name, sig_type=sig_type, public=PublicKey.from_raw(material))
        if key.key_id.hex() != hex_id:
            raise EncodingError(
                f"vkey {name}: key id {hex_id} is not the key's id {key.key_id.hex()}"
            )
        return key

    def verify(self, text: bytes, signature: NoteSignature) -> VerifiedSignature:
        """Verify one signature line over note text; :class:`BadSignature` if not.

        The line must carry this key's name and id (else ``ValueError``: the
        caller matched it to the wrong key).
        """
        if signature.name != self.name or signature.key_id != self.key_id:
            raise ValueError(f"signature by {signature.key} is not by key {self.key}")
        payload = signature.payload
        if self.sig_type == SIG_TYPE_ED25519:
            if len(payload) != _ED25519_SIG_LEN:
                raise LineNotVerified(
                    f"signature by {self.key} is {len(payload)} bytes, not {_ED25519_SIG_LEN}",
                    self,
                )
            message, sig, timestamp = text, payload, None
        else:
            if len(payload) != _TIMESTAMP_LEN + _ED25519_SIG_LEN:
                raise LineNotVerified(
                    f"cosignature by {self.key} is {len(payload)} bytes,"
                    f" not {_TIMESTAMP_LEN} + {_ED25519_SIG_LEN}",
                    self,
                )
            timestamp = int.from_bytes(payload[:_TIMESTAMP_LEN], "big")
            if timestamp > MAX_TIMESTAMP:
                raise LineNotVerified(
                    f"cosignature by {self.key}: timestamp {timestamp} exceeds 2^63-1",
                    self,
                )
            message, sig = cosignature_message(text, timestamp), payload[_TIMESTAMP_LEN:]
        try:
            self.public.verify(sig, message)
        except BadSignature as exc:
            what = "cosignature" if timestamp is not None else "signature"
            at = "" if timestamp is None else f" (time {timestamp})"
            raise LineNotVerified(
                f"{what} by {self.key}{at} does not verify over the note text", self
            ) from exc
        return VerifiedSignature(key=self, signature=signature, timestamp=timestamp)


class LineNotVerified(BadSignature):
    """A signature line by a trusted key that does not verify; ``key`` is that key."""

    def __init__(self, message: str, key: VerifierKey) -> None:
        super().__init__(message)
        self.key = key


@dataclass(frozen=True, slots=True)
class VerifiedSignature:
    """A signature line that verified with a trusted key (``timestamp``: type 0x04)."""

    key: VerifierKey
    signature: NoteSignature
    timestamp: int | None


@dataclass(frozen=True, slots=True)
class NoteKey:
    """A signing key under a note key name: an :class:`Identity` and a type.

    Type 0x01 signs the note text; type 0x04 cosigns it with a timestamp.
    """

    name: str
    identity: Identity
    sig_type: int = SIG_TYPE_ED25519

    def __post_init__(self) -> None:
        problem = _key_name_problem(self.name)
        if problem is not None:
            raise ValueError(problem)
        if self.sig_type not in _SUPPORTED_TYPES:
            raise ValueError(f"unsupported signature type 0x{self.sig_type:02x}")

    @property
    def verifier(self) -> VerifierKey:
        return VerifierKey(name=self.name, sig_type=self.sig_type, public=self.identity.public)

    def sign(self, text: str | bytes, *, timestamp: int | None = None) -> NoteSignature:
        """The signature line over ``text`` (a cosignature needs ``timestamp``, seconds)."""
        raw = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        problem = _text_problem(raw.decode("utf-8"))
        if problem is not None:
            raise ValueError(problem)
        kid = key_id(self.name, self.sig_type, self.identity.public.raw)
        if self.sig_type == SIG_TYPE_ED25519:
            if timestamp is not None:
                raise ValueError(f"key {self.name} signs type 0x01 notes, which carry no timestamp")
            payload = self.identity.sign(raw)
        else:
            if timestamp is None:
                raise ValueError(f"cosigner {self.name} needs a timestamp to cosign")
            message = cosignature_message(raw, timestamp)
            payload = timestamp.to_bytes(_TIMESTAMP_LEN, "big") + self.identity.sign(message)
        return NoteSignature(name=self.name, key_id=kid, payload=payload)


@dataclass(frozen=True, slots=True)
class OpenedNote:
    """A note with at least one signature verified by a trusted key.

    ``verified`` holds one entry per trusted key that signed (in line order;
    of a key's repeated cosignature lines, the earliest dated);
    ``unverified`` the lines no trusted key matched (ignored, per the spec).
    """

    note: Note
    verified: tuple[VerifiedSignature, ...]
    unverified: tuple[NoteSignature, ...]

    def by(self, key: VerifierKey) -> VerifiedSignature | None:
        """The verified signature by ``key``, or ``None`` if it did not sign."""
        for v in self.verified:
            if v.key == key:
                return v
        return None


def _index(keys: Iterable[VerifierKey]) -> dict[tuple[str, bytes], VerifierKey]:
    index: dict[tuple[str, bytes], VerifierKey] = {}
    for key in keys:
        if not isinstance(key, VerifierKey):
            raise TypeError(f"trusted keys must be VerifierKey objects, got {type(key).__name__}")
        slot = (key.name, key.key_id)
        if slot in index and index[slot] != key:
            raise ValueError(f"two different trusted keys share name and id {key.key}")
        index[slot] = key
    return index


def open_note(
    data: bytes | Note,
    keys: Sequence[VerifierKey],
    *,
    max_bytes: int = MAX_NOTE_BYTES,
    max_signatures: int = MAX_SIGNATURES,
) -> OpenedNote:
    """Parse ``data`` and verify it against trusted ``keys`` (signed-note §Signatures).

    (1) parse, bounded (:func:`parse_note`); (2) match each line to a trusted
    key by name *and* key id, ignoring lines no key matches; (3) every matched
    line must verify, else :class:`BadSignature` naming the key; (4) at least
    one line must have verified, else :class:`BadSignature` listing the keys
    that signed. Two different trusted keys with one name and id are the
    caller's mistake (``ValueError``).
    """
    note = (
        data
        if isinstance(data, Note)
        else parse_note(data, max_bytes=max_bytes, max_signatures=max_signatures)
    )
    index = _index(keys)
    text = note.text_bytes
    verified: dict[tuple[str, bytes], VerifiedSignature] = {}
    unverified: list[NoteSignature] = []
    for signature in note.signatures:
        slot = (signature.name, signature.key_id)
        key = index.get(slot)
        if key is None:
            unverified.append(signature)
            continue
        # (3) a repeated line by a trusted key is verified too: a bad copy
        # beside a good one still means someone altered the note.
        result = key.verify(text, signature)
        # of one key's lines the earliest dated one is kept: a witness vouched
        # from that time on, and a later copy must not make it look future-dated
        kept = verified.get(slot)
        if kept is None or (
            result.timestamp is not None
            and kept.timestamp is not None
            and result.timestamp < kept.timestamp
        ):
            verified[slot] = result
    if not verified:
        signers = ", ".join(s.key for s in note.signatures)
        trusted = ", ".join(k.key for k in index.values()) or "none"
        raise BadSignature(
            f"note has no signature by a trusted key (signed by {signers}; trusted: {trusted})"
        )
    return OpenedNote(note=note, verified=tuple(verified.values()), unverified=tuple(unverified))


def check_note(data: bytes | Note, keys: Sequence[VerifierKey]) -> CheckResult[OpenedNote]:
    """:func:`open_note` as a result object: falsy on failure, with the error."""
    return run_check(lambda: open_note(data, keys))
