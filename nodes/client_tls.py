"""TLS for the tools that drive running nodes, and for the local cluster.

The node's own settings (:mod:`nodes.config`) are ``--tls-ca``, ``--tls-cert``
and ``--tls-key`` (``PROVNET_TLS_CA``, ``PROVNET_TLS_CERT``,
``PROVNET_TLS_KEY``). The client-side commands take the same names with the
same variables as fallback (:func:`add_tls_flags`, :meth:`ClientTls.from_args`):

- ``--tls-ca``: every call the tool makes is TLS, verifying each node's
  certificate against that CA for the host dialed (``cluster smoke``,
  ``cluster status``, ``experiment boundary --cluster/--nodes``, ``experiment
  custody --cluster/--nodes``, the attest runner on running nodes). A tool has
  no client certificate: the serve plane is open to any bearer (S7) and
  control calls keep their operator signatures;
- ``--tls-cert``/``--tls-key`` (``cluster smoke`` only): the certificate the
  smoke test's own fault nodes serve; they run on the tool's host and are
  dialed as ``--extra-host``, so the certificate must name that host. Without
  them the smoke test makes one with the CA's key **found beside the CA
  certificate** (``ca.key`` in the directory of ``--tls-ca``, as ``provnet
  tls new`` and ``cluster up --tls`` write it); with neither, it stops before
  the first step saying so.

``provnet cluster up --tls`` makes the cluster CA under
``$PROVNET_HOME/tls/`` (once; again when it has expired) and a certificate
per node naming ``127.0.0.1`` and ``localhost`` on every start, and records
the CA in ``cluster.json``; the commands that read a local cluster
(``status``, ``smoke``, ``experiment boundary --cluster``, ``experiment custody
--cluster``) use it from there; the custody experiment, like the smoke test,
certifies the extra nodes it starts with the CA key beside it
(:mod:`harness.custody.remote_tls`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nodes.tls import TlsFiles

# nodes.tls (grpc, cryptography) is imported where it is used: the flags are
# registered on commands whose registration must stay light (harness.cli).

__all__ = [
    "CLUSTER_TLS_DIR",
    "LOCAL_HOSTS",
    "ClientTls",
    "add_tls_flags",
    "cluster_certificates",
    "reachability",
]

#: The local cluster's CA and node certificates, under ``$PROVNET_HOME``.
CLUSTER_TLS_DIR = "tls"
#: What a local cluster node's certificate names: the hosts its callers dial.
LOCAL_HOSTS = ("127.0.0.1", "localhost")
#: Validity of the certificates made for a local cluster and for smoke's fault nodes.
_CLUSTER_DAYS = 30
_EXTRA_DAYS = 1

_FLAGS = {
    "tls_ca": ("--tls-ca", "PROVNET_TLS_CA"),
    "tls_cert": ("--tls-cert", "PROVNET_TLS_CERT"),
    "tls_key": ("--tls-key", "PROVNET_TLS_KEY"),
}


def _setting(field: str) -> str:
    flag, var = _FLAGS[field]
    return f"{flag} (${var})"


def _error(message: str) -> Exception:
    from nodes.tls import TlsError

    return TlsError(message)


def add_tls_flags(parser: argparse.ArgumentParser, *, serving: bool = False) -> None:
    """``--tls-ca`` (and with ``serving``, ``--tls-cert``/``--tls-key``) on ``parser``."""
    parser.add_argument(
        "--tls-ca",
        default=None,
        metavar="CA.PEM",
        help="dial the nodes over TLS, verifying their certificates against this CA"
        " (default: $PROVNET_TLS_CA; a local cluster started with --tls: its own CA;"
        " none: plaintext)",
    )
    if not serving:
        return
    parser.add_argument(
        "--tls-cert",
        default=None,
        metavar="CERT.PEM",
        help="certificate the smoke test's own fault nodes serve, naming --extra-host"
        " (default: $PROVNET_TLS_CERT; none: made with the CA key beside --tls-ca)",
    )
    parser.add_argument(
        "--tls-key",
        default=None,
        metavar="KEY.PEM",
        help="key of --tls-cert (default: $PROVNET_TLS_KEY)",
    )


@dataclass(frozen=True, slots=True)
class ClientTls:
    """A tool's TLS: the CA it verifies nodes with, and (smoke) its fault nodes' certificate."""

    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    #: the CA's :class:`nodes.tls.TlsFiles`, made at the first use: it reads the file once
    _files: TlsFiles | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            raise _error(
                f"{_setting('tls_cert')} and {_setting('tls_key')} go together: got only"
                f" {'the certificate' if self.key is None else 'the key'}"
            )
        if self.cert is not None and self.ca is None:
            raise _error(
                f"{_setting('tls_cert')} needs {_setting('tls_ca')}: the fault nodes it"
                " serves for dial the cluster's nodes over TLS"
            )

    @classmethod
    def from_args(
        cls,
        args: argparse.Namespace,
        env: Mapping[str, str] | None = None,
        *,
        default_ca: Path | None = None,
        serving: bool = False,
    ) -> ClientTls:
        """Flags first, then ``PROVNET_TLS_*``, then ``default_ca`` (a local cluster's);
        the certificate and key only with ``serving`` (the smoke test's fault nodes)."""
        environ = os.environ if env is None else env

        def pick(field: str) -> Path | None:
            given = getattr(args, field, None) or environ.get(_FLAGS[field][1]) or None
            return None if given is None else Path(given)

        ca = pick("tls_ca") or default_ca
        if not serving:
            return cls(ca)._readable()
        return cls(ca, pick("tls_cert"), pick("tls_key"))._readable()

    def _readable(self) -> ClientTls:
        """``self``, once its CA has been read (one that cannot be fails, naming the setting)."""
        self.ca_pem()
        return self

    @property
    def on(self) -> bool:
        return self.ca is not None

    def _ca_files(self) -> TlsFiles | None:
        from nodes.tls import TlsFiles

        if self.ca is None:
            return None
        if self._files is None:
            object.__setattr__(self, "_files", TlsFiles(ca=self.ca, ca_setting=_setting("tls_ca")))
        return self._files

    def files(self) -> TlsFiles | None:
        """What :class:`nodes.control.NodeClients` takes (None: plaintext): one
        :class:`nodes.tls.TlsFiles` per tool, so the CA file is read once."""
        files = self._ca_files()
        if files is not None:
            files.channel_credentials()  # not PEM: fails here, naming the file
        return files

    def ca_pem(self) -> bytes | None:
        """The CA's bytes (read once); one that cannot be read fails, naming the setting."""
        files = self._ca_files()
        return None if files is None else files.ca_pem()

    def serving(
        self, out_dir: Path, host: str, *, now: dt.datetime | None = None
    ) -> tuple[Path, Path]:
        """Certificate and key for nodes this tool starts on ``host``.

        ``--tls-cert``/``--tls-key`` when given; else one made now into
        ``out_dir`` with the CA key found beside the CA certificate.
        """
        from nodes.tls import CA_CERT, CA_KEY, new_node_certificate

        if self.ca is None:
            raise _error("TLS is off: no certificate is needed")
        if self.cert is not None and self.key is not None:
            return self.cert, self.key
        ca_dir = self.ca.parent
        if not (ca_dir / CA_KEY).is_file():
            raise _error(
                f"the smoke test's fault nodes serve TLS and need a certificate naming {host!r}:"
                f" give {_setting('tls_cert')} and {_setting('tls_key')}, or keep the CA key"
                f" {ca_dir / CA_KEY} beside {_setting('tls_ca')} {self.ca}"
                " ('provnet tls new --ca DIR --node NAME --host HOST' makes such a certificate)"
            )
        if (ca_dir / CA_CERT).resolve() != self.ca.resolve():
            raise _error(
                f"{_setting('tls_ca')} {self.ca}: the CA key {ca_dir / CA_KEY} belongs to"
                f" {ca_dir / CA_CERT}; point {_setting('tls_ca')} at that file, or give"
                f" {_setting('tls_cert')} and {_setting('tls_key')}"
            )
        return new_node_certificate(
            ca_dir,
            "extra",
            [host],
            now=now or dt.datetime.now(dt.UTC),
            days=_EXTRA_DAYS,
            out_dir=out_dir,
        )


def _valid_ca(path: Path, now: dt.datetime) -> bool:
    """Whether ``path`` is a CA certificate valid for a while longer, with its key beside it."""
    from cryptography import x509

    from nodes.tls import CA_KEY

    if not (path.is_file() and (path.parent / CA_KEY).is_file()):
        return False
    try:
        cert = x509.load_pem_x509_certificate(path.read_bytes())
    except ValueError:
        return False
    return cert.not_valid_after_utc > now + dt.timedelta(days=1)


def cluster_certificates(
    tls_dir: Path, names: Sequence[str], *, now: dt.datetime | None = None
) -> tuple[Path, dict[str, tuple[Path, Path]]]:
    """The local cluster's CA (made once, again when expiring) and a fresh certificate
    per node naming :data:`LOCAL_HOSTS`: (ca.pem, name → (cert, key))."""
    from nodes.tls import CA_CERT, new_ca, new_node_certificate

    when = now or dt.datetime.now(dt.UTC)
    tls_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    ca = tls_dir / CA_CERT
    if not _valid_ca(ca, when):
        new_ca(tls_dir, now=when, days=_CLUSTER_DAYS)
    certs = {
        name: new_node_certificate(tls_dir, name, list(LOCAL_HOSTS), now=when, days=_CLUSTER_DAYS)
        for name in names
    }
    return ca, certs


def reachability(address: str, ca_pem: bytes | None, state: str) -> str:
    """Why the node at ``address`` answers ``state`` (not SERVING): its TLS failure named
    when TLS is on and the handshake is what fails, else the state itself."""
    if ca_pem is None:
        return f"answers {state}, not SERVING"
    import asyncio

    from nodes.tls import diagnose

    why = asyncio.run(diagnose(address, ca_pem, timeout=2.0))
    if why is None:
        return f"answers {state}, not SERVING (over TLS)"
    return f"answers {state}: TLS: {why}"
