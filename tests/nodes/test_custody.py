"""Custodians on in-process nodes over the memory transport (docs/custody.md).

Clauses C2-C5 (docs/contracts.md): a custodian takes custody only with the hops
durable, serves any bearer like an origin, is accused by name when it fails, and
a holder whose origin left rehydrates exactly from any one custodian that serves.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import pytest

from contracts.attest import verify_rehydration
from contracts.custody import open_custody, sign_custody
from contracts.identity import Identity
from nodes.attester import AttestationAsk, FoldBytes
from nodes.config import ConfigError, NodeConfig
from nodes.custody_store import (
    HeldCustodyFold,
    custody_counts,
    hold_folds,
    keep_statement,
    reap_custody,
)
from nodes.errors import MalformedRequest, StoreUnavailable
from nodes.faults import FaultMode
from nodes.messages import Outcome
from tests.contracts._support import fixed_identity
from tests.nodes.custody_support import CustodyCluster, accused_honest

REF = "value:7"


async def _world(
    net: CustodyCluster,
    *,
    k: int = 2,
    faults: dict[str, FaultMode] | None = None,
    operators: tuple[str, str, str] = ("op-a", "op-b", "op-c"),
) -> None:
    faults = faults or {}
    names = ("c1", "c2", "c3")
    for name, op in zip(names, operators, strict=True):
        await net.add(name, peers=("o",), operator=op, fault=faults.get(name, FaultMode.NONE))
    await net.add("h", peers=("o", *names))
    await net.add("o", peers=("h", *names), custodians=names, custody_k=k, operator="op-o")
    await net.compact("o", REF)
    await net.nodes["o"].forward(REF, "h")


async def _served_once_the_origin_is_gone(net: CustodyCluster, *, by: str) -> None:
    """The origin departs for good; the holder asks again and ``by`` serves it all."""
    net.depart("o")
    h = net.nodes["h"]
    h.holder._use_cache = False  # ask again: the origin is gone for good
    report = await h.rehydrate(REF)
    assert report.complete
    assert report.served_by == (by,)


async def test_c2_origin_takes_k_custodians_at_commit_and_the_value_carries_them(
    net: CustodyCluster,
) -> None:
    await _world(net, k=2)
    held = net.nodes["h"].held(REF)
    assert len(held.custody) == 2
    custodians = [open_custody(n).statement.custodian for n in held.delivery.custody]
    assert custodians == [net.nodes["c1"].node_id, net.nodes["c2"].node_id]
    # each custodian holds the hops durably and signed only after that
    for name in ("c1", "c2"):
        counts = await custody_counts(net.nodes[name].store)
        assert counts["custody_statements"] == 1
        assert counts["custody_hops"] == 6
    # the origin is asked first and serves: no custodian is asked
    report = await net.nodes["h"].rehydrate(REF)
    assert report.complete
    assert report.parties == ()
    assert report.served_by == (net.nodes["o"].node_id,)


async def test_c4_origin_gone_holder_rehydrates_exactly_from_the_first_custodian(
    net: CustodyCluster,
) -> None:
    await _world(net, k=2)
    served = await net.nodes["h"].rehydrate(REF)
    net.depart("o")
    h = net.nodes["h"]
    h.holder._use_cache = False  # ask again: the origin is gone for good
    report = await h.rehydrate(REF)
    assert report.complete
    assert report.served_by == (net.nodes["c1"].node_id,)
    assert [f.origin for f in report.failed] == [net.nodes["o"].node_id]
    assert report.failed[0].outcome is Outcome.UNANSWERED
    # exact: the same hops, under the origin's name and commitment
    assert sorted(report.hops) == sorted(served.hops)
    assert accused_honest(report, net.honest() - {net.nodes["o"].node_id}) == []


async def test_c4_every_failing_custodian_gets_its_own_evidence_and_the_next_serves(
    net: CustodyCluster,
) -> None:
    await _world(net, k=3, faults={"c1": FaultMode.TAMPER, "c2": FaultMode.REFUSE})
    net.depart("o")
    h = net.nodes["h"]
    h.holder._use_cache = False
    report = await h.rehydrate(REF)
    assert report.complete
    c1, c2, c3 = (net.nodes[n].node_id for n in ("c1", "c2", "c3"))
    assert report.served_by == (c3,)
    kinds = {o.origin: o.outcome for o in report.parties}
    assert kinds == {c1: Outcome.BAD_DATA, c2: Outcome.REFUSED, c3: Outcome.SERVED}
    # evidence verifies standalone and names the custodian, never an honest party
    assert accused_honest(report, {c3, net.nodes["h"].node_id}) == []
    assert {o.origin for o in report.parties if o.accuses} == {c1, c2}


async def test_c2_placement_prefers_distinct_operators(net: CustodyCluster) -> None:
    # c1 and c2 share an operator: with k = 2, c1 and c3 are chosen
    await _world(net, k=2, operators=("op-a", "op-a", "op-b"))
    held = net.nodes["h"].held(REF)
    chosen = [open_custody(n).statement.custodian for n in held.delivery.custody]
    assert chosen == [net.nodes["c1"].node_id, net.nodes["c3"].node_id]


async def test_c5_k0_carries_no_statement_and_asks_no_custodian(net: CustodyCluster) -> None:
    await _world(net, k=0)
    held = net.nodes["h"].held(REF)
    assert held.custody == ()
    assert held.delivery.custody == ()
    for name in ("c1", "c2", "c3"):
        assert (await custody_counts(net.nodes[name].store))["custody_statements"] == 0


async def test_c3_custody_survives_a_restart_and_binds_the_reaper(
    net: CustodyCluster, tmp_path: Path
) -> None:
    await _world(net, k=1)
    c1 = net.nodes["c1"]
    store = c1.store
    # the reaper before serve_until: nothing of the custody goes
    assert await reap_custody(store, now_ms=c1.now_ms()) == 0
    # restart the custodian from its data directory: it still serves the fold
    await c1.close()
    del net.nodes["c1"]
    c1 = await net.add("c1", peers=("o",), operator="op-a")
    await _served_once_the_origin_is_gone(net, by=c1.node_id)
    # after serve_until the reaper may delete the hops: and does
    held = net.nodes["h"].held(REF)
    until = open_custody(held.delivery.custody[0]).statement.serve_until
    assert await reap_custody(c1.store, now_ms=until + 1) == 6


async def test_c3_verified_hops_held_again_replace_a_damaged_row(net: CustodyCluster) -> None:
    """A hop row damaged on disk is rewritten by the next hold of the same fold
    (its hops verified against the root), and the custodian serves again."""
    await _world(net, k=1)
    c1 = net.nodes["c1"]
    async with c1.store._read("test: the hold") as db:
        rows = await db.execute_fetchall(
            "SELECT leaf_hash, head_digest, head_note, root, proof, serve_until FROM custody_holds"
        )
        (leaf, digest, note, root, proof, until) = next(iter(rows))
        hops = tuple(
            bytes(r[0])
            for r in await db.execute_fetchall(
                "SELECT hop_bytes FROM custody_hops WHERE leaf_hash = ? ORDER BY leaf_index",
                (leaf,),
            )
        )
    async with c1.store._write("test: damage one hop") as db:
        await db.execute(
            "UPDATE custody_hops SET hop_bytes = ? WHERE leaf_hash = ? AND leaf_index = 2",
            (b"damaged", leaf),
        )
    await hold_folds(
        c1.store,
        head_digest=digest,
        head_note=bytes(note),
        origin=net.nodes["o"].node_id,
        folds=[HeldCustodyFold(leaf, root, bytes(proof), hops)],
        serve_until=until,
        now_ms=c1.now_ms(),
    )
    await _served_once_the_origin_is_gone(net, by=c1.node_id)


async def test_c3_a_node_that_never_held_the_hops_is_named_and_the_next_custodian_serves(
    net: CustodyCluster,
) -> None:
    """An adversary signs a custody statement for a fold it never fetched (valid
    signature, bound to the head): the value carries it, the holder asks it first,
    gets no hops, names it, and the honest custodian after it serves."""
    await _world(net, k=1)
    x = await net.add("x", peers=("o",), operator="op-x")
    h = net.nodes["h"]
    held = h.held(REF)
    honest = held.delivery.custody[0]
    real = open_custody(honest).statement
    forged = sign_custody(
        x.identity,
        dataclasses.replace(real, custodian=x.node_id, operator="op-x", endpoints=(x.advertised,)),
    )
    assert await custody_counts(x.store) == {
        "custody_folds": 0,
        "custody_hops": 0,
        "custody_statements": 0,
    }
    # the forged statement travels first
    await h.deliver(dataclasses.replace(held.delivery, custody=(forged.note, honest)))
    net.depart("o")
    h.holder._use_cache = False
    report = await h.rehydrate(REF)
    assert report.complete
    assert report.served_by == (net.nodes["c1"].node_id,)
    named = {o.origin: o for o in report.parties}
    # it says it does not know the statement its own key signed: no receipt by the
    # deadline, an ``unanswered`` suspicion naming it (witnesses get the same answer)
    assert named[x.node_id].outcome is Outcome.UNANSWERED
    assert named[x.node_id].accuses
    assert accused_honest(report, {net.nodes["c1"].node_id, h.node_id}) == []


async def test_c1_a_statement_not_bound_to_the_value_or_not_signed_is_rejected_at_delivery(
    net: CustodyCluster,
) -> None:
    await _world(net, k=1)
    h = net.nodes["h"]
    held = h.held(REF)
    note = held.delivery.custody[0]
    # another custodian's line with the same signature: the signature fails
    tampered = note.replace(b"operator op-a", b"operator op-z")
    with pytest.raises(MalformedRequest, match="custody statement"):
        await h.deliver(dataclasses.replace(held.delivery, custody=(tampered,)))
    # a valid statement about another fold: bound to nothing this value carries
    real = open_custody(note).statement
    other = sign_custody(
        net.nodes["c1"].identity,
        dataclasses.replace(real, folds=("ab" * 32,)),
    )
    with pytest.raises(MalformedRequest, match="names no fold"):
        await h.deliver(dataclasses.replace(held.delivery, custody=(other.note,)))


async def test_c3_a_silent_custodian_is_unanswered_confirmed_by_witnesses(
    net: CustodyCluster,
) -> None:
    await _world(net, k=2, faults={"c1": FaultMode.DROP})
    net.depart("o")
    h = net.nodes["h"]
    h.holder._use_cache = False
    report = await h.rehydrate(REF)
    c1, c2 = net.nodes["c1"].node_id, net.nodes["c2"].node_id
    assert report.complete
    assert report.served_by == (c2,)
    silent = next(o for o in report.parties if o.origin == c1)
    assert silent.outcome is Outcome.UNANSWERED
    assert silent.witness_confirmed
    assert accused_honest(report, {c2, h.node_id, net.nodes["c3"].node_id}) == []


async def test_c2_no_statement_is_signed_unless_the_hops_are_durable_first(
    net: CustodyCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seed 000: a custodian whose durable write fails signs nothing; the origin's
    commit stands with no statement (it still serves itself)."""
    signed: list[object] = []

    async def disk_fails(*args: object, **kwargs: object) -> None:
        raise StoreUnavailable("disk I/O error (test)")

    def counting_sign(*args: object, **kwargs: object) -> object:
        signed.append(args)
        return sign_custody(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr("nodes.custodian.hold_folds", disk_fails)
    monkeypatch.setattr("nodes.custodian.sign_custody", counting_sign)
    await _world(net, k=1)
    assert signed == []
    assert net.nodes["h"].held(REF).delivery.custody == ()
    assert (await custody_counts(net.nodes["c1"].store))["custody_statements"] == 0


async def test_c2_a_statement_is_kept_only_over_a_hold_that_covers_its_term(
    net: CustodyCluster,
) -> None:
    await _world(net, k=1)
    c1 = net.nodes["c1"]
    note = net.nodes["h"].held(REF).delivery.custody[0]
    statement = open_custody(note).statement
    longer = sign_custody(
        c1.identity, dataclasses.replace(statement, serve_until=statement.serve_until + 1)
    )
    held = net.nodes["h"].held(REF).custody[0].fold
    assert held is not None
    leaves = (held.leaf_hash.hex(),)
    with pytest.raises(ValueError, match="not held until its serve_until"):
        await keep_statement(c1.store, longer, leaves, now_ms=c1.now_ms())


class _LyingCustodian:
    """Answers Custody.Take with a statement signed by its key but bound to nothing
    of the origin's (another fold), as a custodian that wants deliveries refused."""

    crashed = False

    def __init__(self, identity: Identity) -> None:
        self.identity = identity

    async def take_custody(self, head: bytes, fold_proofs: Sequence[bytes]) -> tuple[bytes, ...]:
        honest = open_custody(self.template).statement
        lie = dataclasses.replace(
            honest,
            custodian=self.identity.node_id,
            folds=("cd" * 32,),
        )
        return (sign_custody(self.identity, lie).note,)

    template: bytes = b""


async def test_c2_the_origin_keeps_only_statements_bound_to_its_own_head_and_folds(
    net: CustodyCluster,
) -> None:
    await _world(net, k=1)  # c1 took custody of value:7: its statement is a template
    liar = _LyingCustodian(fixed_identity("liar"))
    liar.template = net.nodes["h"].held(REF).delivery.custody[0]
    net.registry[net.address("liar")] = liar  # type: ignore[assignment]
    o2 = await net.add(
        "o2", peers=("h", "liar", "c1"), custodians=("liar", "c1"), custody_k=1, operator="op-2"
    )
    c1 = net.nodes["c1"]
    await net.compact("o2", "value:8")
    await o2.forward("value:8", "h")  # the delivery is accepted: the lie never travels
    chosen = [
        open_custody(n).statement.custodian for n in net.nodes["h"].held("value:8").delivery.custody
    ]
    assert chosen == [c1.node_id]


async def test_c4_after_the_origin_is_gone_reconstruction_is_restored_from_a_custodian(
    net: CustodyCluster,
) -> None:
    """The death spiral undone (A4 with custody): the holder fetches the fold in full
    from the custodian, the attester verifies the custodian's receipt against its
    statement and the origin's head, and signs reconstruction."""
    await _world(net, k=1)
    await net.add("a", peers=("c1",))
    h = net.nodes["h"]
    await h.close()
    del net.nodes["h"]
    h = await net.add("h", peers=("o", "c1", "a"))  # the same holder, now knowing an attester
    held = net.nodes["o"].held(REF)
    await h.deliver(held.delivery)
    net.depart("o")
    custody = h.held(REF).custody[0]
    result = await h.restore(
        AttestationAsk(REF, (), (), True, 0, 600_000),
        [FoldBytes(custody.commitment_bytes, custody.obligation_bytes, under_head=True)],
        "a",
    )
    assert result.rehydrated, result.detail
    assert result.answer.issued, result.answer.refused
    (proof,) = result.answer.issued[0].proofs
    digest, _ = verify_rehydration(proof)
    assert digest == h.held(REF).folds[0].commitment.digest  # the origin's fold, exactly


def test_c2_custody_settings_are_read_and_checked_like_every_node_setting(tmp_path: Path) -> None:
    env = {"PROVNET_NAME": "o", "PROVNET_DATA_DIR": str(tmp_path)}
    config = NodeConfig.from_env_and_args(
        env={
            **env,
            "PROVNET_CUSTODIANS": "c1;c2, c3",
            "PROVNET_CUSTODY_K": "2",
            "PROVNET_OPERATOR": "op-a",
        }
    )
    assert (config.custodians, config.custody_k, config.operator) == (("c1", "c2", "c3"), 2, "op-a")
    assert NodeConfig.from_env_and_args(env=env).custody_k == 0  # none by default
    for bad, named in (
        ({"PROVNET_CUSTODIANS": "c1", "PROVNET_CUSTODY_K": "2"}, "--custody-k"),
        ({"PROVNET_CUSTODIANS": "o", "PROVNET_CUSTODY_K": "1"}, "--custodians"),
        ({"PROVNET_CUSTODY_K": "9"}, "--custody-k"),
        ({"PROVNET_OPERATOR": "Op A"}, "--operator"),
    ):
        with pytest.raises(ConfigError, match=named):
            NodeConfig.from_env_and_args(env={**env, **bad})
