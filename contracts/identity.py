"""Node identities: Ed25519 keys, node ids and key files.

A node's id **is** its raw Ed25519 public key in lower-case hex (64
characters). Statements name origins, holders, witnesses and attesters by
node id, so anyone holding a statement also holds the public key that must
have signed it: evidence verifies with nothing but the file.

Key files hold the private key as unencrypted PKCS#8 PEM. They are written
with mode 0600 (created that way, never widened), and :func:`load_identity`
refuses a file that group or other can read, like OpenSSH does.

Every Ed25519 signature of the project is made by :meth:`Identity.sign` and
every verification by :meth:`PublicKey.verify`; both report to the observer
installed with :func:`observe_signatures`, if any, which is how the harness
and the benchmarks count and time them.
"""

from __future__ import annotations

import functools
import os
import stat
import threading
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter
from types import TracebackType
from typing import Protocol

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from nacl.bindings import crypto_sign, crypto_sign_BYTES, crypto_sign_open
from nacl.exceptions import BadSignatureError

from contracts.errors import BadSignature, EncodingError, KeyFileError

__all__ = [
    "NODE_ID_HEX_LEN",
    "Identity",
    "PublicKey",
    "SignatureCount",
    "SignatureObserver",
    "load_identity",
    "observe_signatures",
    "rotate_identity",
    "save_identity",
]

NODE_ID_HEX_LEN = 64
_HEX = frozenset("0123456789abcdef")
_MAX_KEY_FILE_BYTES = 4096
_KEY_CACHE_SIZE = 4096


class SignatureObserver(Protocol):
    """Told of every Ed25519 operation while installed (:func:`observe_signatures`).

    Called on the thread that made the operation, once it returned or
    raised (a signature that fails to verify is still a verification made),
    with the seconds it took.
    """

    def signed(self, seconds: float) -> None: ...

    def verified(self, seconds: float) -> None: ...


# One per process, not per context: a node served in-process answers gRPC
# calls in tasks the server spawned, which do not inherit the caller's
# context, and the harness counts the serving side's signatures too.
_observer: SignatureObserver | None = None
_observer_lock = threading.Lock()


class observe_signatures:
    """Install ``observer`` for every Ed25519 operation of this process while entered.

    One observer at a time: entering while another is installed raises
    ``RuntimeError`` (two meters would each miss what the other counted).
    """

    __slots__ = ("observer",)

    def __init__(self, observer: SignatureObserver) -> None:
        self.observer = observer

    def __enter__(self) -> SignatureObserver:
        global _observer
        with _observer_lock:
            if _observer is not None:
                raise RuntimeError(
                    f"an Ed25519 observer is already installed in this process: {_observer!r}"
                )
            _observer = self.observer
        return self.observer

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        global _observer
        with _observer_lock:
            if _observer is self.observer:
                _observer = None


class SignatureCount:
    """A :class:`SignatureObserver` that counts and times; safe across threads."""

    __slots__ = ("_lock", "seconds", "signs", "verifies")

    def __init__(self) -> None:
        self.signs = 0
        self.verifies = 0
        self.seconds = 0.0
        self._lock = threading.Lock()

    def signed(self, seconds: float) -> None:
        with self._lock:
            self.signs += 1
            self.seconds += seconds

    def verified(self, seconds: float) -> None:
        with self._lock:
            self.verifies += 1
            self.seconds += seconds

    def __repr__(self) -> str:
        return f"SignatureCount(signs={self.signs}, verifies={self.verifies})"


@dataclass(frozen=True, slots=True)
class PublicKey:
    """An Ed25519 public key; ``node_id`` is its raw bytes in hex."""

    raw: bytes
    _key: Ed25519PublicKey = field(repr=False, compare=False, hash=False)
    # hex of ``raw``, computed once: node ids are compared on every statement
    _node_id: str = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_node_id", self.raw.hex())

    @classmethod
    def from_raw(cls, raw: bytes) -> PublicKey:
        if len(raw) != 32:
            raise EncodingError(f"Ed25519 public key must be 32 bytes, got {len(raw)}")
        try:
            key = Ed25519PublicKey.from_public_bytes(raw)
        except ValueError as exc:
            raise EncodingError(f"invalid Ed25519 public key {raw.hex()[:16]}…") from exc
        return cls(raw=raw, _key=key)

    @classmethod
    def from_node_id(cls, node_id: str) -> PublicKey:
        """Parse a node id (64 lower-case hex characters).

        Parsed keys are memoised (bounded, least recently used out): verifying
        many statements by the same few nodes should not re-decode the curve
        point every time.
        """
        if not isinstance(node_id, str):
            raise EncodingError(
                f"node id must be {NODE_ID_HEX_LEN} hex characters: {node_id!r:.80}"
            )
        return _parsed_node_id(node_id)

    @property
    def node_id(self) -> str:
        return self._node_id

    def verify(self, signature: bytes, data: bytes) -> None:
        """Raise :class:`BadSignature` unless ``signature`` is valid over ``data``.

        libsodium's Ed25519 (``crypto_sign_open``): about twice as fast as
        OpenSSL's here, and stricter — it also refuses non-canonical and
        small-order points — so it accepts no signature OpenSSL would refuse.
        The length is checked first: ``crypto_sign_open`` reads the first 64
        bytes of signature + data as the signature.
        """
        observer = _observer
        start = perf_counter() if observer is not None else 0.0
        try:
            if type(signature) is not bytes or len(signature) != crypto_sign_BYTES:
                raise BadSignature(
                    f"signature does not verify with key {self.node_id[:16]}…:"
                    f" {len(signature)} bytes, not {crypto_sign_BYTES}"
                )
            try:
                crypto_sign_open(signature + data, self.raw)
            except BadSignatureError as exc:
                raise BadSignature(
                    f"signature does not verify with key {self.node_id[:16]}…"
                ) from exc
        finally:
            if observer is not None:
                observer.verified(perf_counter() - start)


@functools.lru_cache(maxsize=_KEY_CACHE_SIZE)
def _parsed_node_id(node_id: str) -> PublicKey:
    """A node id's key: a pure function of the id's text, so functools memoises it
    (a malformed id raises and is not remembered)."""
    if len(node_id) != NODE_ID_HEX_LEN:
        raise EncodingError(f"node id must be {NODE_ID_HEX_LEN} hex characters: {node_id!r:.80}")
    if not set(node_id) <= _HEX:
        raise EncodingError(f"node id must be lower-case hex: {node_id!r:.80}")
    return PublicKey.from_raw(bytes.fromhex(node_id))


@dataclass(frozen=True, slots=True)
class Identity:
    """A node's signing key. ``node_id`` names it; never log the private part."""

    public: PublicKey
    _private: Ed25519PrivateKey = field(repr=False, compare=False, hash=False)
    # libsodium's secret key (seed + public key) for signing; key files stay PKCS#8
    _secret: bytes = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        seed = self._private.private_bytes(
            serialization.Encoding.Raw,
            serialization.PrivateFormat.Raw,
            serialization.NoEncryption(),
        )
        object.__setattr__(self, "_secret", seed + self.public.raw)

    @classmethod
    def generate(cls) -> Identity:
        return cls._from_private(Ed25519PrivateKey.generate())

    @classmethod
    def from_seed(cls, seed: bytes) -> Identity:
        """Deterministic identity from a 32-byte seed (test vectors only)."""
        if len(seed) != 32:
            raise ValueError(f"Ed25519 seed must be 32 bytes, got {len(seed)}")
        return cls._from_private(Ed25519PrivateKey.from_private_bytes(seed))

    @classmethod
    def _from_private(cls, key: Ed25519PrivateKey) -> Identity:
        raw = key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        return cls(public=PublicKey.from_raw(raw), _private=key)

    @property
    def node_id(self) -> str:
        return self.public.node_id

    def sign(self, data: bytes) -> bytes:
        """Ed25519 signature over ``data`` (64 bytes).

        By libsodium (``crypto_sign``, about 1.5 times faster than OpenSSL's
        here): Ed25519 signatures are deterministic, so the bytes are the
        same as OpenSSL's for the same key and data (pinned by the vectors).
        """
        observer = _observer
        if observer is None:
            return crypto_sign(bytes(data), self._secret)[:crypto_sign_BYTES]
        start = perf_counter()
        try:
            return crypto_sign(bytes(data), self._secret)[:crypto_sign_BYTES]
        finally:
            observer.signed(perf_counter() - start)

    def private_pem(self) -> bytes:
        return self._private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )


def save_identity(
    identity: Identity, path: str | os.PathLike[str], *, overwrite: bool = False
) -> Path:
    """Write ``identity`` to ``path`` with mode 0600 (atomic rename).

    Raises ``FileExistsError`` if the file exists and ``overwrite`` is false.
    """
    target = Path(path)
    if target.exists() and not overwrite:
        raise FileExistsError(f"key file {target} already exists")
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(identity.private_pem())
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return target


def load_identity(path: str | os.PathLike[str]) -> Identity:
    """Load a key file, refusing one that group or other can read or write."""
    target = Path(path)
    try:
        fd = os.open(target, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        raise KeyFileError(f"key file {target}: cannot open ({exc.strerror})") from exc
    with os.fdopen(fd, "rb") as fh:
        mode = os.fstat(fh.fileno()).st_mode
        if not stat.S_ISREG(mode):
            raise KeyFileError(f"key file {target}: not a regular file")
        if mode & 0o077:
            raise KeyFileError(
                f"key file {target}: mode {stat.S_IMODE(mode):04o} lets group/other access it;"
                " expected 0600 (chmod 600 it)"
            )
        data = fh.read(_MAX_KEY_FILE_BYTES + 1)
    if len(data) > _MAX_KEY_FILE_BYTES:
        raise KeyFileError(f"key file {target}: larger than {_MAX_KEY_FILE_BYTES} bytes")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise KeyFileError(f"key file {target}: not an unencrypted PKCS#8 PEM key") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyFileError(f"key file {target}: not an Ed25519 key ({type(key).__name__})")
    return Identity._from_private(key)


def rotate_identity(path: str | os.PathLike[str]) -> tuple[Identity, Path]:
    """Replace the key at ``path`` with a fresh one; keep the old one beside it.

    The previous key (which must load cleanly) is moved to
    ``<name>.<old node id prefix>.retired`` with mode 0600, so statements it
    signed stay attributable. Returns the new identity and the retired path.
    """
    target = Path(path)
    old = load_identity(target)
    retired = target.with_name(f"{target.name}.{old.node_id[:16]}.retired")
    save_identity(old, retired, overwrite=True)
    new = Identity.generate()
    save_identity(new, target, overwrite=True)
    return new, retired
