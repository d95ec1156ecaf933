"""``Attest.List`` answers what fits one message, the attesters that matter first.

Any key may ``Attest.Submit`` attestations for any value digest (the stranger
pool holds up to 4 096 of up to 64 KiB). Against a real ``provnet node``: a
stranger's large attestations for one value digest, more bytes than one
message, leave the list answered, within a message, with the operator's
attestation for that value in it.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

import grpc
import pytest

from contracts.attest import build_attestation
from contracts.identity import Identity
from contracts.signed import Signed
from contracts.statements import Attestation, Axis
from nodes._pb.provnet.v1 import attest_pb2, attest_pb2_grpc
from nodes.config import DEFAULT_MAX_MESSAGE_BYTES
from nodes.services import MAX_ATTESTATION_BYTES
from tests.nodes.node_process import node_process
from tests.nodes.rpc_support import TEST_OPERATOR

pytestmark = pytest.mark.timeout(180)

_VALUE = "ab" * 32


def _attestation(who: Identity, cites: int) -> Signed[Attestation]:
    now = int(time.time() * 1000)
    return build_attestation(
        who,
        value_digest=_VALUE,
        axis=Axis.VERIFICATION,
        floor=0.5,
        cites=[hashlib.sha256(f"{who.node_id}{i}".encode()).hexdigest() for i in range(cites)],
        issued_at=now,
        expires_at=now + 3_600_000,
    )


async def test_a_strangers_large_attestations_leave_the_list_answered_operators_first(
    tmp_path: Path,
) -> None:
    """Before, the list was every attestation held for the digest: past one message,
    ``Attest.List`` failed for everyone (RESOURCE_EXHAUSTED), and each call read them all."""
    operator = TEST_OPERATOR.identity
    big = 1
    while len(_attestation(operator, big * 2).to_bytes()) <= MAX_ATTESTATION_BYTES:
        big *= 2
    size = len(_attestation(operator, big).to_bytes())
    stranger = [
        _attestation(Identity.generate(), big)
        for _ in range(DEFAULT_MAX_MESSAGE_BYTES // size + 10)
    ]
    half = len(stranger) // 2
    assert size * len(stranger) > DEFAULT_MAX_MESSAGE_BYTES  # more than one message
    with node_process(tmp_path, "n", PROVNET_OPERATOR_KEYS=TEST_OPERATOR.key_id) as (address, _):
        async with grpc.aio.insecure_channel(address) as chan:
            stub: Any = attest_pb2_grpc.AttestStub(chan)
            for signed in stranger[:half]:
                await stub.Submit(
                    attest_pb2.SubmitAttestationRequest(attestation=signed.to_bytes()), timeout=10
                )
            mine = _attestation(operator, 1)
            await stub.Submit(
                attest_pb2.SubmitAttestationRequest(attestation=mine.to_bytes()), timeout=10
            )
            for signed in stranger[half:]:
                await stub.Submit(
                    attest_pb2.SubmitAttestationRequest(attestation=signed.to_bytes()), timeout=10
                )
            listed = await stub.List(
                attest_pb2.ListAttestationsRequest(value_digest=_VALUE), timeout=30
            )
    got = [bytes(a) for a in listed.attestations]
    assert mine.to_bytes() in got
    assert sum(len(a) for a in got) <= DEFAULT_MAX_MESSAGE_BYTES // 2
    kept = [a for a in got if a != mine.to_bytes()]
    assert kept == [s.to_bytes() for s in stranger[: len(kept)]]  # oldest first
    assert len(kept) >= (DEFAULT_MAX_MESSAGE_BYTES // 2) // size - 1
