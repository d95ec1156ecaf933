"""A TLS setup reads its CA file once, however many parts use it."""

from __future__ import annotations

import argparse
import datetime as dt
from collections.abc import Callable
from pathlib import Path

import pytest

from nodes.client_tls import ClientTls, add_tls_flags
from nodes.tls import TlsFiles, new_ca, new_node_certificate
from nodes.transport import GrpcTransport

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _count_reads(monkeypatch: pytest.MonkeyPatch, target: Path) -> list[Path]:
    reads: list[Path] = []
    read: Callable[[Path], bytes] = Path.read_bytes

    def counting(path: Path) -> bytes:
        if path == target:
            reads.append(path)
        return read(path)

    monkeypatch.setattr(Path, "read_bytes", counting)
    return reads


async def test_a_tool_reads_its_ca_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ca = new_ca(tmp_path, now=NOW)
    parser = argparse.ArgumentParser()
    add_tls_flags(parser)
    reads = _count_reads(monkeypatch, ca)
    tls = ClientTls.from_args(parser.parse_args(["--tls-ca", str(ca)]), {})
    transport = GrpcTransport(tls=tls.files())
    try:
        assert tls.ca_pem() == ca.read_bytes()  # this read is the test's own
    finally:
        await transport.close()
    assert len(reads) == 2


async def test_a_node_reads_its_ca_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ca = new_ca(tmp_path, now=NOW)
    cert, key = new_node_certificate(tmp_path, "a", ["127.0.0.1"], now=NOW)
    reads = _count_reads(monkeypatch, ca)
    tls = TlsFiles(ca, cert, key)
    assert tls.server_credentials() is not None
    assert tls.channel_credentials() is not None
    transport = GrpcTransport(tls=tls)
    await transport.close()
    assert len(reads) == 1
