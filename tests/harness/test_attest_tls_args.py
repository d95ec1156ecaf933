"""experiment attest on running nodes: the TLS CA reaches the slice, and TLS flags without
running nodes are refused by name."""

from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path

import pytest

from harness.attest.cli import _running_slice, configure
from harness.attest.runner import AttestSlice
from harness.cli_errors import UsageError
from nodes.tls import new_ca


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    configure(parser)
    return parser.parse_args(list(argv))


def test_tls_ca_reaches_the_running_slice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROVNET_TLS_CA", raising=False)
    ca = new_ca(tmp_path, now=dt.datetime.now(dt.UTC))
    nodes = "a=127.0.0.1:1,b=127.0.0.1:2"
    slice_ = _running_slice(_parse("--nodes", nodes, "--tls-ca", str(ca)), False, None)
    assert isinstance(slice_, AttestSlice)
    assert slice_.tls_ca == str(ca)
    plain = _running_slice(_parse("--nodes", nodes), False, None)
    assert isinstance(plain, AttestSlice)
    assert plain.tls_ca == ""


def test_missing_ca_file_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROVNET_TLS_CA", raising=False)
    missing = tmp_path / "absent.pem"
    with pytest.raises(UsageError, match=r"absent\.pem"):
        _running_slice(
            _parse("--nodes", "a=127.0.0.1:1,b=127.0.0.1:2", "--tls-ca", str(missing)), False, None
        )
