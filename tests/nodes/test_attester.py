"""The attester role's request: bounds, the wire form, and its configuration."""

from __future__ import annotations

import pytest

from contracts.errors import EncodingError
from contracts.statements import Axis
from nodes import wire
from nodes.attester import (
    MAX_LIFETIME_MS,
    MAX_PROOFS,
    MIN_LIFETIME_MS,
    AttestationAsk,
    AttesterFault,
)
from nodes.config import ConfigError, NodeConfig
from nodes.errors import MalformedRequest, RequestTooLarge

DIGEST = "ab" * 32


def test_ask_bounds_are_checked_naming_the_field() -> None:
    AttestationAsk("v/1", (DIGEST,), lifetime_ms=MAX_LIFETIME_MS).check()
    with pytest.raises(MalformedRequest, match="lifetime"):
        AttestationAsk("v/1", (DIGEST,), lifetime_ms=MAX_LIFETIME_MS + 1).check()
    # renewals of a logged attestation wait for its expiry: a floor bounds how often
    AttestationAsk("v/1", (DIGEST,), lifetime_ms=MIN_LIFETIME_MS).check()
    with pytest.raises(MalformedRequest, match=f"below {MIN_LIFETIME_MS} ms"):
        AttestationAsk("v/1", (DIGEST,), lifetime_ms=MIN_LIFETIME_MS - 1).check()
    with pytest.raises(MalformedRequest, match="not a digest"):
        AttestationAsk("v/1", ("xyz",)).check()
    with pytest.raises(MalformedRequest, match="appears twice"):
        AttestationAsk("v/1", (), axes=((Axis.FRESHNESS, 1.0), (Axis.FRESHNESS, 0.5))).check()
    with pytest.raises(MalformedRequest, match=r"in \[0, 1\]"):
        AttestationAsk("v/1", (), axes=((Axis.FRESHNESS, 1.5),)).check()
    with pytest.raises(RequestTooLarge, match="proofs or commitments"):
        AttestationAsk("v/1", (DIGEST,) * (MAX_PROOFS + 1)).check()
    with pytest.raises(MalformedRequest, match="value_ref"):
        AttestationAsk("", (DIGEST,)).check()


def test_ask_crosses_the_wire_unchanged_and_strictly() -> None:
    ask = AttestationAsk(
        "run/v7",
        (DIGEST,),
        (),
        False,
        1_900_000_000_000,
        125_000,
        ((Axis.VERIFICATION, 0.0), (Axis.CAPABILITY, 1.0)),
        ("taint:unverified_web:3",),
    )
    assert wire.attestation_ask_from_pb(wire.attest_request(ask)) == ask
    bad = wire.attest_request(ask)
    bad.axes[0].axis = "speed"
    with pytest.raises(EncodingError, match="unknown axis"):
        wire.attestation_ask_from_pb(bad)
    bad = wire.attest_request(ask)
    bad.proofs.append(b"{not a proof")
    with pytest.raises(EncodingError, match="rehydration proof is malformed"):
        wire.attestation_ask_from_pb(bad)


def test_attest_fault_is_configured_by_flag_or_variable() -> None:
    cfg = NodeConfig.from_env_and_args({"name": "a", "data_dir": "/tmp/x"}, env={})
    assert cfg.attest_fault is AttesterFault.NONE
    cfg = NodeConfig.from_env_and_args(
        {"name": "a", "data_dir": "/tmp/x"}, env={"PROVNET_ATTEST_FAULT": "forged_receipts"}
    )
    assert cfg.attest_fault is AttesterFault.FORGED_RECEIPTS
    with pytest.raises(ConfigError, match=r"--attest-fault \(\$PROVNET_ATTEST_FAULT\).*lax"):
        NodeConfig.from_env_and_args(
            {"name": "a", "data_dir": "/tmp/x", "attest_fault": "sloppy"}, env={}
        )
