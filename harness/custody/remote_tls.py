"""TLS for ``provnet experiment custody --cluster/--nodes``.

Running nodes that serve TLS dial the extra node processes the experiment
starts (the departing origins and custodians) with TLS too, and verify their
certificates against the same CA. So with a CA configured (``--tls-ca``,
``$PROVNET_TLS_CA``, or the one ``cluster up --tls`` recorded in
``cluster.json``):

- every call the experiment makes is TLS, verified against that CA;
- the extra nodes serve TLS with one certificate naming the loopback hosts
  (:data:`nodes.client_tls.LOCAL_HOSTS`), issued for this run with the CA's
  key found beside the CA certificate (``ca.key``, as ``cluster up --tls``
  and ``provnet tls new`` keep it) into the run's temporary directory, and
  removed with it; they dial the running nodes and each other with TLS.

Without that key the extra nodes cannot be certified: the command stops
before anything starts, naming the missing key.
"""

from __future__ import annotations

import argparse
import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from harness.cli_errors import UsageError

if TYPE_CHECKING:
    from nodes.tls import TlsFiles

__all__ = ["EXTRA_NODES_CERT", "CustodyTls", "resolve_tls"]

#: Name of the certificate (and key) the extra node processes serve.
EXTRA_NODES_CERT = "custody-extra"
_EXTRA_DAYS = 1


@dataclass(frozen=True, slots=True)
class CustodyTls:
    """The CA the running nodes chain to, and the directory holding its key."""

    ca: Path

    @property
    def ca_dir(self) -> Path:
        return self.ca.parent

    def files(self) -> TlsFiles:
        """The :class:`nodes.tls.TlsFiles` the experiment's own calls verify nodes with."""
        from nodes.tls import TlsFiles

        files = TlsFiles(ca=self.ca, ca_setting="--tls-ca ($PROVNET_TLS_CA)")
        files.channel_credentials()
        return files

    async def failure(self, address: str) -> str | None:
        """Why a TLS handshake with ``address`` fails under the CA (:func:`nodes.tls.diagnose`)."""
        from nodes.tls import diagnose

        ca_pem = self.files().ca_pem()
        if ca_pem is None:
            return None
        return await diagnose(address, ca_pem, timeout=5.0)

    def issue(self, out_dir: Path, *, now: dt.datetime | None = None) -> tuple[Path, Path]:
        """Certificate and key for the extra node processes, signed by the CA's key now."""
        from nodes.client_tls import LOCAL_HOSTS
        from nodes.tls import new_node_certificate

        return new_node_certificate(
            self.ca_dir,
            EXTRA_NODES_CERT,
            list(LOCAL_HOSTS),
            now=now or dt.datetime.now(dt.UTC),
            days=_EXTRA_DAYS,
            out_dir=out_dir,
        )


def resolve_tls(args: argparse.Namespace) -> CustodyTls | None:
    """The run's TLS (None: plaintext); a CA whose key is not beside it is refused.

    The CA is ``--tls-ca``, else ``$PROVNET_TLS_CA``, else the one the local
    cluster recorded (``--cluster``).
    """
    from harness.boundary.cli import _tls_ca
    from nodes.tls import CA_CERT, CA_KEY

    found = _tls_ca(args)
    if not found:
        return None
    ca = Path(found)
    key = ca.parent / CA_KEY
    if not key.is_file():
        raise UsageError(
            f"--tls-ca ($PROVNET_TLS_CA) {ca}: the extra node processes this experiment"
            f" starts serve TLS and need certificates issued under that CA, but its key"
            f" {key} is missing (keep the CA key beside the CA certificate, as"
            " 'provnet cluster up --tls' and 'provnet tls new' do)"
        )
    if (ca.parent / CA_CERT).resolve() != ca.resolve():
        raise UsageError(
            f"--tls-ca ($PROVNET_TLS_CA) {ca}: the CA key {key} belongs to"
            f" {ca.parent / CA_CERT}; point --tls-ca at that file"
        )
    return CustodyTls(ca)
