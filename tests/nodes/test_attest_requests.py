"""``Attest.Request`` from a key the attester does not know, on real node processes.

A stranger holds nothing but a key of its own: it demands a fold it found an
obligation for from a real origin process (obligations are bearer
promises), so it holds genuine rehydration proofs signed for its own demands,
and then asks real attester processes (honest, and ``--attest-fault lax``).
What it must not get: an attestation without citing a proof it signed (9),
more than one attestation and one A6 hop for the same proofs (10), an
attestation dated outside the clock skew (11); and a restarted attester must
go on issuing where its log ends, answering repeats from the log (12).
The last test drives the ledger in process: a hop logged without its fold.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contracts.attest import RehydrationProof, build_attestation
from contracts.envelope import sign_envelope
from contracts.identity import Identity
from contracts.signed import open_statement
from contracts.statements import Attestation, Axis, Commitment
from nodes import wire
from nodes.app import load_or_create_identity
from nodes.attester import (
    ATTEST_SEQ_BASE,
    AttestationAnswer,
    AttestationAsk,
    FoldBytes,
    attestation_hops,
)
from nodes.auth import (
    OPERATOR_KEY_FILENAME,
    ControlCredentials,
    control_channel,
    create_operator_key,
)
from nodes.config import NodeConfig
from nodes.restore import restore
from nodes.services import NodeCore
from nodes.store import DB_FILENAME
from nodes.transport import CallFailed, GrpcTransport, InMemoryTransport
from tests.nodes.node_process import node_process

pytestmark = pytest.mark.timeout(240)

YEAR_MS = 365 * 24 * 3600 * 1000
LIFETIME_MS = 600_000


class Nodes:
    def __init__(self, root: Path, operator: ControlCredentials) -> None:
        self.root = root
        self.operator = operator
        self.address: dict[str, str] = {}
        self.data_dir: dict[str, Path] = {}
        self._folds = 0


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nodes]:
    root = tmp_path_factory.mktemp("attest-requests")
    operator = create_operator_key(root / OPERATOR_KEY_FILENAME)
    env = {"PROVNET_OPERATOR_KEYS": operator.key_id}
    found = Nodes(root, operator)
    with contextlib.ExitStack() as stack:
        for name, extra in (
            ("origin", {}),
            ("attester", {}),
            ("lax", {"PROVNET_ATTEST_FAULT": "lax"}),
        ):
            address, data_dir = stack.enter_context(node_process(root, name, **env, **extra))
            found.address[name] = address
            found.data_dir[name] = data_dir
        yield found


def _hop(step: int) -> bytes:
    return json.dumps({"hop_id": f"h{step:06d}", "step": step, "op": "CACHE_READ"}).encode()


async def _fold(origin: str, operator: ControlCredentials, value_ref: str) -> FoldBytes:
    """As the origin's operator: three hops folded under a signed commitment + obligation."""
    base = time.time_ns() // 1000
    seqs = [base + i for i in range(3)]
    async with control_channel(origin, operator) as chan:
        stub: Any = wire.hoplog_stub(chan)
        await stub.Append(wire.append_request([_hop(i + 1) for i in range(3)], seqs), timeout=10)
        reply = await stub.CommitFold(wire.commit_fold_request(value_ref, seqs), timeout=10)
    return FoldBytes(bytes(reply.commitment), bytes(reply.obligation))


async def _restore(
    nodes: Nodes,
    stranger: Identity,
    attester: str,
    value_ref: str,
    issued_at: int = 0,
    lifetime_ms: int = LIFETIME_MS,
) -> tuple[AttestationAsk, AttestationAnswer]:
    """The stranger rehydrates a fresh fold of the origin in full (its own signed
    demands) and asks ``attester`` with those proofs; returns the ask it sent."""
    fold = await _fold(nodes.address["origin"], nodes.operator, value_ref)
    transport = GrpcTransport(credentials=ControlCredentials(stranger))
    try:
        result = await restore(
            stranger,
            transport,
            now_ms=int(time.time() * 1000),
            folds=[fold],
            ask=AttestationAsk(value_ref, (), (), True, issued_at, lifetime_ms),
            attester=attester,
            timeout=30,
        )
    finally:
        await transport.close()
    assert result.rehydrated, result.detail
    assert result.answer.issued, result.answer.refused
    proofs = result.answer.issued[0].proofs
    commitment = open_statement(fold.commitment, Commitment).digest
    return AttestationAsk(value_ref, (commitment,), proofs, True, 0, lifetime_ms), result.answer


async def _ask(stranger: Identity, attester: str, ask: AttestationAsk) -> AttestationAnswer:
    transport = GrpcTransport(credentials=ControlCredentials(stranger))
    try:
        return await transport.request_attestation(attester, ask, 30)
    finally:
        await transport.close()


def _attest_hops(data_dir: Path) -> list[int]:
    """Seqs of the attestation hops (A6) in a node's log, read from its database."""
    db = sqlite3.connect(f"file:{data_dir / DB_FILENAME}?mode=ro", uri=True)
    try:
        rows = db.execute(
            "SELECT seq FROM hops WHERE seq >= ? ORDER BY seq", (ATTEST_SEQ_BASE,)
        ).fetchall()
    finally:
        db.close()
    return [int(r[0]) for r in rows]


# --------------------------------------------------------------------------- attack 9


def test_a_stranger_citing_no_proof_of_its_own_is_refused(nodes: Nodes) -> None:
    stranger = Identity.generate()
    lax = nodes.address["lax"]

    async def go() -> None:
        # no proof at all: the lax attester would sign anything asked
        for attester in (lax, nodes.address["attester"]):
            with pytest.raises(CallFailed) as err:
                await _ask(stranger, attester, AttestationAsk("v/none", (), (), True, 0, 60_000))
            assert err.value.code == "PERMISSION_DENIED"
            assert "cites no rehydration proof" in err.value.message
        # a genuine proof, its demand naming the stranger but signed by another key
        ask, _ = await _restore(nodes, stranger, nodes.address["attester"], "v/real")
        p = ask.proofs[0]
        resigned = sign_envelope(Identity.generate(), p.demand.payload_type, p.demand.payload)
        forged = RehydrationProof(p.commitment, p.obligation, resigned, p.receipt, p.hops, p.fold)
        with pytest.raises(CallFailed) as err:
            await _ask(stranger, lax, AttestationAsk("v/real", ask.commitments, (forged,)))
        assert err.value.code == "PERMISSION_DENIED"
        assert "not signed by it" in err.value.message

    asyncio.run(go())
    assert _attest_hops(nodes.data_dir["lax"]) == []  # nothing signed, nothing logged


# --------------------------------------------------------------------------- attack 10


def test_the_same_proofs_asked_again_give_the_same_attestation_and_no_new_hop(
    nodes: Nodes,
) -> None:
    stranger = Identity.generate()
    attester = nodes.address["attester"]
    before = len(_attest_hops(nodes.data_dir["attester"]))

    async def go() -> None:
        ask, first = await _restore(nodes, stranger, attester, "v/again")
        for _ in range(15):
            again = await _ask(stranger, attester, ask)
            assert len(again.issued) == 1
            assert again.issued[0].attestation == first.issued[0].attestation
            assert again.issued[0].hop_commitment == first.issued[0].hop_commitment
            assert again.issued[0].hop_obligation == first.issued[0].hop_obligation

        # once the logged attestation has expired, the same proofs renew it, once
        short, _ = await _restore(nodes, stranger, attester, "v/short", lifetime_ms=5000)
        logged = await _ask(stranger, attester, short)
        await asyncio.sleep(5.1)
        renewed = await _ask(stranger, attester, short)
        assert renewed.issued[0].attestation != logged.issued[0].attestation
        assert (await _ask(stranger, attester, short)).issued == renewed.issued

    asyncio.run(go())
    # v/again once; v/short once, then its renewal
    assert len(_attest_hops(nodes.data_dir["attester"])) == before + 3


# --------------------------------------------------------------------------- attack 11


def test_issued_at_outside_the_clock_skew_is_refused_naming_the_skew(nodes: Nodes) -> None:
    stranger = Identity.generate()
    attester = nodes.address["attester"]
    before = len(_attest_hops(nodes.data_dir["attester"]))

    async def go() -> None:
        ask, first = await _restore(nodes, stranger, attester, "v/dated")
        for delta in (YEAR_MS, -YEAR_MS, 31_000):
            dated = AttestationAsk(
                "v/dated2", ask.commitments, ask.proofs, True, int(time.time() * 1000) + delta
            )
            with pytest.raises(CallFailed) as err:
                await _ask(stranger, attester, dated)
            assert err.value.code == "OUT_OF_RANGE"
            assert "clock skew is ±30 s" in err.value.message
        # within the skew: signed, dated as asked
        at = int(time.time() * 1000) + 10_000
        ok = await _ask(
            stranger,
            attester,
            AttestationAsk("v/dated", ask.commitments, ask.proofs, True, at, LIFETIME_MS),
        )
        # the same proofs: the attestation already logged for them, dated now
        assert [i.attestation for i in ok.issued] == [first.issued[0].attestation]
        signed = open_statement(ok.issued[0].attestation, Attestation).statement
        assert abs(signed.issued_at - time.time() * 1000) < 60_000
        # a new value within the skew: dated as asked
        at = int(time.time() * 1000) + 10_000
        _, ahead = await _restore(nodes, stranger, attester, "v/dated3", issued_at=at)
        assert open_statement(ahead.issued[0].attestation, Attestation).statement.issued_at == at

    asyncio.run(go())
    # one for each restored value
    assert len(_attest_hops(nodes.data_dir["attester"])) == before + 2


# --------------------------------------------------------------------------- attack 12


def test_a_restarted_attester_issues_on_and_answers_repeats_from_its_log(
    nodes: Nodes, tmp_path: Path
) -> None:
    stranger = Identity.generate()
    env = {"PROVNET_OPERATOR_KEYS": nodes.operator.key_id}

    async def first(attester: str) -> tuple[AttestationAsk, AttestationAnswer]:
        return await _restore(nodes, stranger, attester, "v/before")

    with node_process(tmp_path, "restarted", **env) as (address, data_dir):
        ask, answer = asyncio.run(first(address))
    assert _attest_hops(data_dir) == [ATTEST_SEQ_BASE]

    async def after(attester: str) -> None:
        again = await _ask(stranger, attester, ask)
        assert again.issued[0].attestation == answer.issued[0].attestation
        assert again.issued[0].hop_commitment == answer.issued[0].hop_commitment
        # a new value: a new hop, past the ones the log holds (was ALREADY_EXISTS)
        _, other = await _restore(nodes, stranger, attester, "v/after")
        assert other.issued[0].attestation != answer.issued[0].attestation

    with node_process(tmp_path, "restarted", **env) as (address, _):
        asyncio.run(after(address))
    assert _attest_hops(data_dir) == [ATTEST_SEQ_BASE, ATTEST_SEQ_BASE + 1]


# --------------------------------------------------------------------------- the ledger itself


def test_a_hop_logged_without_its_fold_is_committed_on_its_repeat(tmp_path: Path) -> None:
    """A crash between appending an attestation's hop and committing its fold
    leaves the hop alone in the log: its repeat answers it and commits the fold,
    and a new attestation goes to the next seq."""

    async def go() -> None:
        config = NodeConfig(name="a", data_dir=tmp_path / "a", listen="a.mem:1")
        identity = load_or_create_identity(config.data_dir)
        node = await NodeCore.open(config, identity, transport=InMemoryTransport())
        try:
            now = node.now_ms()

            def signed(value: str, issued_at: int) -> Any:
                return build_attestation(
                    identity,
                    value_digest=value,
                    axis=Axis.RECONSTRUCTION,
                    floor=1.0,
                    cites=["cd" * 32],
                    issued_at=issued_at,
                    expires_at=issued_at + LIFETIME_MS,
                )

            first = signed("ab" * 32, now)
            await node.append(attestation_hops([first], ATTEST_SEQ_BASE), [ATTEST_SEQ_BASE])
            # asked again a second later: the logged bytes, its fold committed now
            (again,) = await node.log_attestations([signed("ab" * 32, now + 1000)])
            assert again.repeated
            assert again.attestation == first.to_bytes()
            assert again.commitment
            (other,) = await node.log_attestations([signed("ef" * 32, now)])
            assert not other.repeated
        finally:
            await node.close()

    asyncio.run(go())
    assert _attest_hops(tmp_path / "a") == [ATTEST_SEQ_BASE, ATTEST_SEQ_BASE + 1]
