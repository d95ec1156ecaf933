"""TLS between nodes: certificates, and the credentials servers and channels use.

What TLS adds, and what it does not (docs/security.md, "TLS between hosts"):

- a node started with a certificate and key (``tls_cert``, ``tls_key``)
  serves TLS only on its one port; a caller with a CA (``tls_ca``) dials TLS
  and gRPC verifies the peer's chain to that CA and that the certificate
  names the host dialed (a DNS or IP subject alternative name). Traffic
  between hosts is then confidential and cannot be altered or redirected by
  the network;
- no client certificates: the serve plane stays open to any bearer of an
  obligation (S7), and the control plane keeps its per-call signatures
  (:mod:`nodes.auth`), which TLS neither replaces nor weakens;
- a node's identity stays its key, pinned by the peers file
  (:mod:`nodes.transport`): a certificate says which host a connection
  reached, a pin which node answered there.

A handshake that fails is diagnosed by the caller (:func:`diagnose`: the
peer's certificate fetched without verification and checked step by step),
so a wrong or expired certificate fails the call with a status that says
what failed (:data:`TLS_FAILED`), never silence: it accuses nobody.

Certificates are made by ``provnet tls new`` (:func:`new_ca`,
:func:`new_node_certificate`: ECDSA P-256, SHA-256) or supplied by the
platform (any PEM files, e.g. a Kubernetes Secret or a swarm secret).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import ipaddress
import ssl
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from nodes.config import ConfigError

__all__ = [
    "CA_CERT",
    "CA_KEY",
    "DEFAULT_DAYS",
    "TLS_FAILED",
    "TlsError",
    "TlsFiles",
    "check_certificate",
    "diagnose",
    "new_ca",
    "new_node_certificate",
]

#: The status of a call whose TLS handshake failed for a reason :func:`diagnose`
#: names: a status, not silence (:mod:`nodes.noanswer`).
TLS_FAILED = "UNAUTHENTICATED"
CA_CERT = "ca.pem"
CA_KEY = "ca.key"
DEFAULT_DAYS = 365


class TlsError(ConfigError):
    """A TLS file is missing, unreadable or not what it should be; names the file."""


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise TlsError(f"{what} {path}: cannot read ({exc.strerror or exc})") from None


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """PEM files: ``ca`` verifies peers; ``cert``/``key`` are this node's own (both or neither).

    The CA file is read once, at the first use, and its bytes serve every later
    one (the credentials, the handshake diagnosis, the health probes).
    ``ca_setting`` is how an error names the CA file (a tool's flag).
    """

    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    ca_setting: str = field(default="TLS CA certificate", compare=False)
    _ca_pem: bytes | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            raise TlsError("a TLS certificate and its key go together: give both or neither")

    @property
    def serves(self) -> bool:
        return self.cert is not None

    def ca_pem(self) -> bytes | None:
        """The CA file's bytes (None: plaintext), read at the first call only."""
        if self.ca is None:
            return None
        if self._ca_pem is None:
            object.__setattr__(self, "_ca_pem", _read(self.ca, self.ca_setting))
        return self._ca_pem

    def server_credentials(self) -> grpc.ServerCredentials | None:
        """TLS for the node's port (no client certificates: the serve plane is open)."""
        if self.cert is None or self.key is None:
            return None
        cert = _read(self.cert, "TLS certificate")
        key = _read(self.key, "TLS key")
        try:
            x509.load_pem_x509_certificate(cert)
        except ValueError as exc:
            raise TlsError(f"TLS certificate {self.cert}: not a PEM certificate ({exc})") from None
        try:
            serialization.load_pem_private_key(key, password=None)
        except (ValueError, TypeError) as exc:
            raise TlsError(f"TLS key {self.key}: not an unencrypted PEM key ({exc})") from None
        return grpc.ssl_server_credentials([(key, cert)], require_client_auth=False)

    def channel_credentials(self) -> grpc.ChannelCredentials | None:
        """Credentials that verify a peer's certificate against ``ca`` (None: plaintext)."""
        ca = self.ca_pem()
        if ca is None:
            return None
        try:
            x509.load_pem_x509_certificates(ca)
        except ValueError as exc:
            raise TlsError(f"{self.ca_setting} {self.ca}: not PEM certificates ({exc})") from None
        return grpc.ssl_channel_credentials(root_certificates=ca)


# --------------------------------------------------------------------------- making certificates


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    data = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_bytes(data)


def new_ca(directory: Path, *, now: dt.datetime, days: int = DEFAULT_DAYS) -> Path:
    """A CA key and self-signed certificate in ``directory`` (``ca.pem``, ``ca.key``)."""
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name("provnet cluster CA")
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    _write_key(directory / CA_KEY, key)
    (directory / CA_CERT).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return directory / CA_CERT


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def new_node_certificate(
    ca_dir: Path,
    node: str,
    hosts: Sequence[str],
    *,
    now: dt.datetime,
    days: int = DEFAULT_DAYS,
    out_dir: Path | None = None,
) -> tuple[Path, Path]:
    """A server certificate for ``node`` naming ``hosts`` (DNS names or IPs), signed by
    the CA in ``ca_dir``; written as ``<node>.pem`` and ``<node>.key`` (0600)."""
    if not hosts:
        raise ValueError("a node certificate needs at least one host name or address")
    ca_cert = x509.load_pem_x509_certificate(_read(ca_dir / CA_CERT, "TLS CA certificate"))
    ca_key = serialization.load_pem_private_key(_read(ca_dir / CA_KEY, "TLS CA key"), None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise TlsError(f"TLS CA key {ca_dir / CA_KEY}: expected an EC key")
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(node))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([_san(h) for h in hosts]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    out = ca_dir if out_dir is None else out_dir
    out.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = out / f"{node}.pem", out / f"{node}.key"
    _write_key(key_path, key)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert_path, key_path


# --------------------------------------------------------------------------- diagnosis


def _names_host(cert: x509.Certificate, host: str) -> bool:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host.lower().rstrip(".") in {
            n.lower() for n in san.get_values_for_type(x509.DNSName)
        }
    return ip in san.get_values_for_type(x509.IPAddress)


def check_certificate(der: bytes, ca_pem: bytes, host: str, now: dt.datetime) -> str | None:
    """Why the certificate ``der`` fails for ``host`` under ``ca_pem``; None if it passes.

    The checks gRPC's handshake makes, one at a time so the failure can be named.
    """
    # (1) a certificate at all
    try:
        cert = x509.load_der_x509_certificate(der)
    except ValueError as exc:
        return f"the peer sent no readable certificate ({exc})"
    subject = cert.subject.rfc4514_string()
    # (2) issued by one of our CAs, and signed by its key
    issuers = [c for c in x509.load_pem_x509_certificates(ca_pem) if c.subject == cert.issuer]
    if not issuers:
        return (
            f"certificate {subject!r} is issued by {cert.issuer.rfc4514_string()!r},"
            " not by the configured CA"
        )
    for ca in issuers:
        try:
            cert.verify_directly_issued_by(ca)
            break
        except (InvalidSignature, ValueError, TypeError):
            continue
    else:
        return f"certificate {subject!r} is not signed by the configured CA's key"
    # (3) valid now
    after, before = cert.not_valid_after_utc, cert.not_valid_before_utc
    stamp = "%Y-%m-%dT%H:%M:%SZ"
    if now > after:
        return (
            f"certificate {subject!r} expired at {after.strftime(stamp)}"
            f" (now {now.strftime(stamp)})"
        )
    if now < before:
        return (
            f"certificate {subject!r} is not valid before {before.strftime(stamp)}"
            f" (now {now.strftime(stamp)})"
        )
    # (4) names the host dialed
    if not _names_host(cert, host):
        return f"certificate {subject!r} does not name the host {host!r}"
    return None


async def diagnose(
    address: str, ca_pem: bytes, timeout: float, now: dt.datetime | None = None
) -> str | None:
    """Why a TLS handshake with ``address`` fails, or None (unreachable, or it passes).

    Fetches the peer's certificate without verifying it, then checks it with
    :func:`check_certificate`. A peer that answers but not with TLS is named
    too. Only on a call's failure path: it costs one more connection.
    """
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    try:
        _, writer = await asyncio.wait_for(
            asyncio.open_connection(host, int(port), ssl=context), timeout
        )
    except ssl.SSLError as exc:
        return f"the TLS handshake with {address} failed ({exc.reason or exc}): is it serving TLS?"
    except (OSError, TimeoutError):
        return None
    try:
        ssl_object = writer.get_extra_info("ssl_object")
        der = None if ssl_object is None else ssl_object.getpeercert(binary_form=True)
    finally:
        writer.close()
        with contextlib.suppress(OSError, TimeoutError, ssl.SSLError):
            await asyncio.wait_for(writer.wait_closed(), 1.0)
    if not der:
        return f"{address} sent no certificate"
    return check_certificate(der, ca_pem, host, now or dt.datetime.now(dt.UTC))
