"""Witness-cosigned heads on nodes (clauses W4-W6): the witness role, the origin, the holder.

In-process nodes over the in-memory transport, one real gRPC witness, a
witness reopened on its own data directory, and the split-view bound on
real nodes (small n: each row is a few in-process nodes, well under 2 s).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from contracts.evidence import Evidence, EvidenceStatus, verify_evidence
from contracts.head_note import head_digest, head_log_key, open_head
from contracts.heads import FoldInput, FoldProof, HeadLog
from contracts.merkle import leaf_hash
from contracts.note import parse_note
from contracts.witness import AddCheckpoint, witness_vkey
from contracts.witness_policy import check_quorum, parse_policy
from harness.boundary.wire import MeteredTransport, WireMeter
from harness.custody.split_view import bound_holds, policy_text, rows_csv, run_rows
from nodes.app import load_or_create_identity
from nodes.cluster import HealthState, child_env, free_ports, probe_health, provnet_argv
from nodes.config import ConfigError, NodeConfig
from nodes.cosigner import MAX_ANY_LOGS
from nodes.messages import Delivery
from nodes.services import NodeCore
from nodes.transport import CallFailed, GrpcTransport, InMemoryTransport, LocalNode
from tests.nodes.rpc_support import grpc_node, hop_json


class Nodes:
    """In-process nodes sharing one in-memory registry; closed by the fixture."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.registry: dict[str, LocalNode] = {}
        self.open: list[NodeCore] = []

    async def add(self, name: str, **settings: object) -> NodeCore:
        listen = f"{name}.mem:1"
        config = NodeConfig(name=name, data_dir=self.root / name, listen=listen, **settings)  # type: ignore[arg-type]
        core = await NodeCore.open(
            config,
            load_or_create_identity(config.data_dir),
            transport=InMemoryTransport(registry=self.registry),
        )
        self.registry[config.listen] = core
        self.open.append(core)
        return core

    async def close(self, core: NodeCore) -> None:
        self.open.remove(core)
        await core.close()


@pytest.fixture
async def nodes(tmp_path: Path) -> AsyncIterator[Nodes]:
    made = Nodes(tmp_path)
    try:
        yield made
    finally:
        for core in list(made.open):
            await core.close()


async def _compact(core: NodeCore, ref: str, first: int) -> tuple[bytes, bytes]:
    _, seqs = await core.append([hop_json(first), hop_json(first + 1)])
    out = await core.commit_compaction([(ref, list(seqs), b"")])
    return out.head, out.fold_proofs[0]


def _delivery(origin: NodeCore, ref: str, proof: bytes, head: bytes) -> Delivery:
    return Delivery(ref, ref.encode(), (), (), origin.node_id, (proof,), (head,))


async def _witnesses(nodes: Nodes, n: int) -> list[NodeCore]:
    return [await nodes.add(f"w{i}", witness_logs="*") for i in range(1, n + 1)]


def _policy(nodes: Nodes, witnesses: list[NodeCore], q: int) -> Path:
    path = nodes.root / "policy.txt"
    path.write_text(policy_text([w.node_id for w in witnesses], q))
    return path


# ------------------------------------------------------------------ no settings


async def test_w4_without_witness_settings_a_node_calls_no_one_and_heads_are_unchanged(
    nodes: Nodes,
) -> None:
    origin = await nodes.add("origin")
    holder = await nodes.add("holder")
    calls = origin.transport.calls  # type: ignore[attr-defined]
    head, proof = await _compact(origin, "v1", 1)
    assert origin.transport.calls == calls  # type: ignore[attr-defined]
    # the note is exactly the one signed and stored: one signature line, the origin's
    assert len(parse_note(head).signatures) == 1
    assert open_head(head).digest == head_digest(head)
    await origin.transport.deliver(holder.config.listen, _delivery(origin, "v1", proof, head), 5)
    assert holder.held("v1").delivery.heads == (head,)
    # not a witness: the rpc says so
    with pytest.raises(CallFailed) as caught:
        await origin.transport.add_checkpoint(  # type: ignore[attr-defined]
            holder.config.listen, AddCheckpoint(0, (), head).to_bytes(), 5
        )
    assert caught.value.code == "UNIMPLEMENTED"


# ------------------------------------------------------------------ origin and holder


async def test_w4_origin_delivers_cosigned_heads_a_policy_holder_accepts_same_digest(
    nodes: Nodes,
) -> None:
    witnesses = await _witnesses(nodes, 3)
    policy = _policy(nodes, witnesses, 2)
    origin = await nodes.add("origin", witnesses=tuple(w.config.listen for w in witnesses))
    holder = await nodes.add("holder", witness_policy=policy)
    for c, ref in enumerate(("v1", "v2", "v3")):  # sizes 1, 2, 3: proofs from 1 and 2
        head, proof = await _compact(origin, ref, 1 + 10 * c)
        assert len(parse_note(head).signatures) == 1 + 3, c
        key = head_log_key(origin.node_id, origin.store.epoch)
        result = check_quorum(head, parse_policy(policy.read_bytes()), origin.now_ms(), log_key=key)
        assert result, result.message
        # the stored head is the cosigned note: the same head, what was delivered
        record = FoldProof.from_bytes(proof).record
        stored = await origin.store.head_fold(head_digest(head), leaf_hash(record).hex())
        assert stored is not None
        assert stored.head_note == head
        assert head_digest(stored.head_note) == head_digest(head)
        await origin.transport.deliver(holder.config.listen, _delivery(origin, ref, proof, head), 5)
    assert [w.witnessing.cosigner.cosigned for w in witnesses] == [3, 3, 3]
    assert await holder.store.evidence() == ()


async def test_w4_policy_holder_refuses_a_head_without_quorum_and_accuses_no_one(
    nodes: Nodes,
) -> None:
    witnesses = await _witnesses(nodes, 3)
    policy = _policy(nodes, witnesses, 2)
    origin = await nodes.add("origin", witnesses=(witnesses[0].config.listen,))
    holder = await nodes.add("holder", witness_policy=policy)
    head, proof = await _compact(origin, "v1", 1)
    assert len(parse_note(head).signatures) == 2  # one cosignature: short of 2
    with pytest.raises(CallFailed) as caught:
        await origin.transport.deliver(
            holder.config.listen, _delivery(origin, "v1", proof, head), 5
        )
    assert caught.value.code == "FAILED_PRECONDITION"
    assert "group witnesses needs 2 of 3, has 1 (w1)" in caught.value.message
    assert await holder.store.evidence() == ()
    with pytest.raises(Exception, match="v1"):
        holder.held("v1")


async def test_w4_a_witness_that_is_down_costs_its_cosignature_not_the_commit(
    nodes: Nodes,
) -> None:
    witnesses = await _witnesses(nodes, 3)
    origin = await nodes.add("origin", witnesses=tuple(w.config.listen for w in witnesses))
    witnesses[1].crashed = True
    head, _ = await _compact(origin, "v1", 1)
    names = [s.name for s in parse_note(head).signatures[1:]]
    assert names == [witness_vkey(witnesses[i].node_id).name for i in (0, 2)]


async def test_w4_an_origin_behind_a_metered_transport_still_gathers_cosignatures(
    nodes: Nodes,
) -> None:
    # The boundary's meter wraps a node's transport; AddCheckpoint goes through it
    # (counted) instead of the witnesses going unasked.
    witnesses = await _witnesses(nodes, 2)
    meter = WireMeter()
    config = NodeConfig(
        name="origin",
        data_dir=nodes.root / "origin",
        listen="origin.mem:1",
        witnesses=tuple(w.config.listen for w in witnesses),
    )
    origin = await NodeCore.open(
        config,
        load_or_create_identity(config.data_dir),
        transport=MeteredTransport(InMemoryTransport(registry=nodes.registry), meter, "origin"),
    )
    nodes.open.append(origin)
    head, _ = await _compact(origin, "v1", 1)
    assert len(parse_note(head).signatures) == 3  # the origin's and two witnesses'
    assert meter.calls_by_node[("origin", "AddCheckpoint")] == 2


async def test_w4_forged_cosignature_in_a_delivery_is_refused_naming_the_witness(
    nodes: Nodes,
) -> None:
    witnesses = await _witnesses(nodes, 3)
    policy = _policy(nodes, witnesses, 2)
    origin = await nodes.add("origin", witnesses=tuple(w.config.listen for w in witnesses))
    holder = await nodes.add("holder", witness_policy=policy)
    head, proof = await _compact(origin, "v1", 1)
    note = parse_note(head)
    w2 = note.signatures[2]
    flipped = bytes([w2.payload[0]]) + bytes([w2.payload[8] ^ 1]).join(
        [w2.payload[1:8], w2.payload[9:]]
    )
    forged = type(note)(note.text, (*note.signatures[:2], type(w2)(w2.name, w2.key_id, flipped)))
    with pytest.raises(CallFailed) as caught:
        await origin.transport.deliver(
            holder.config.listen, _delivery(origin, "v1", proof, forged.to_bytes()), 5
        )
    assert caught.value.code == "FAILED_PRECONDITION"
    assert "cosignature of witness w2" in caught.value.message


# ------------------------------------------------------------------ the witness


def _fork(origin: NodeCore, ref: str, now: int) -> bytes:
    log = HeadLog(origin.identity, origin.store.epoch)
    return log.compact(
        [FoldInput(ref, 0, [hop_json(99)])],
        serve_until=now + 3_600_000,
        deadline_ms=2_000,
        endpoints=(origin.config.listen,),
        issued_at=now,
    ).head.note


async def test_w5_witness_state_survives_a_restart_and_it_never_cosigns_the_fork(
    nodes: Nodes,
) -> None:
    (witness,) = await _witnesses(nodes, 1)
    origin = await nodes.add("origin", witnesses=(witness.config.listen,))
    head, _ = await _compact(origin, "v1", 1)
    assert len(parse_note(head).signatures) == 2
    # reopened on its own data directory: the state was on disk before it answered
    await nodes.close(witness)
    witness = await nodes.add("w1", witness_logs="*")
    row = await witness.store.witness_log(open_head(head).verified.checkpoint.origin)  # type: ignore[union-attr]
    assert row is not None
    assert (row.size, head_digest(row.note)) == (1, head_digest(head))
    fork = _fork(origin, "other", origin.now_ms())
    send = origin.transport.add_checkpoint  # type: ignore[attr-defined]
    stale = await send(witness.config.listen, AddCheckpoint(0, (), fork).to_bytes(), 5)
    assert (stale.conflict, stale.size, stale.cosignatures) == (True, 1, b"")
    with pytest.raises(CallFailed) as caught:
        await send(witness.config.listen, AddCheckpoint(1, (), fork).to_bytes(), 5)
    assert caught.value.code == "FAILED_PRECONDITION"
    assert "signed two roots for size 1" in caught.value.message
    (record,) = await witness.store.evidence(kind="split_view")
    assert record.accused == origin.node_id
    verdict = verify_evidence(Evidence.from_bytes(record.body), now=origin.now_ms())
    assert verdict.status is EvidenceStatus.PROVEN
    # the file `provnet evidence verify` reads
    assert record.file_path
    assert Path(record.file_path).read_bytes() == record.body
    assert (await witness.store.witness_log(row.origin)) == row  # unchanged


async def test_w5_add_checkpoint_over_grpc_answers_as_in_memory(tmp_path: Path) -> None:
    witness = await grpc_node(tmp_path, "w1", witness_logs="*")
    transport = GrpcTransport()
    try:
        origin_id = load_or_create_identity(tmp_path / "origin")
        log = HeadLog(origin_id, "1-0123456789abcdef")
        note = log.compact(
            [FoldInput("v", 0, [hop_json(1)])],
            serve_until=witness.core.now_ms() + 3_600_000,
            deadline_ms=2_000,
            endpoints=("127.0.0.1:1",),
            issued_at=witness.core.now_ms(),
        ).head.note
        reply = await transport.add_checkpoint(
            witness.address, AddCheckpoint(0, (), note).to_bytes(), 5
        )
        lines = parse_note(note + reply.cosignatures).signatures
        assert [s.name for s in lines][1:] == [witness_vkey(witness.core.node_id).name]
        again = await transport.add_checkpoint(
            witness.address, AddCheckpoint(0, (), note).to_bytes(), 5
        )
        assert (again.conflict, again.size) == (True, 1)
        with pytest.raises(CallFailed) as caught:
            await transport.add_checkpoint(witness.address, b"old x\n\n", 5)
        assert caught.value.code == "INVALID_ARGUMENT"
    finally:
        await transport.close()
        await witness.stop(0.2)


# ------------------------------------------------------------------ the bound


async def test_w6_conflicting_heads_both_accepted_exactly_when_2q_le_n_plus_f(
    tmp_path: Path,
) -> None:
    rows = await run_rows(((3, 2, 0), (3, 2, 1), (3, 3, 1), (3, 1, 0)), root=tmp_path)
    for row in rows:
        if bound_holds(row.n, row.q, row.f):
            assert row.conflicting_accepted == 0, row
            assert row.witness_evidence >= 1, row  # an honest witness saw both heads
        else:
            assert row.conflicting_accepted == 2, row
        assert row.honest_accused == 0, row
    assert [r.bound_holds for r in rows] == [True, False, True, False]
    table = rows_csv(rows).splitlines()
    assert table[0].startswith("n,q,f,bound_holds,")
    assert len(table) == 1 + len(rows)


async def test_w5_a_witness_of_every_log_takes_on_a_bounded_number_of_logs(nodes: Nodes) -> None:
    (witness,) = await _witnesses(nodes, 1)
    assert witness.witnessing.cosigner.max_logs == MAX_ANY_LOGS
    witness.witnessing.cosigner.max_logs = 1
    first, second = await nodes.add("o1"), await nodes.add("o2")
    send = first.transport.add_checkpoint  # type: ignore[attr-defined]
    note1 = _fork(first, "a", first.now_ms())
    assert (await send(witness.config.listen, AddCheckpoint(0, (), note1).to_bytes(), 5)).size == 1
    note2 = _fork(second, "a", second.now_ms())
    with pytest.raises(CallFailed) as caught:
        await send(witness.config.listen, AddCheckpoint(0, (), note2).to_bytes(), 5)
    assert caught.value.code == "RESOURCE_EXHAUSTED"
    # a log it already witnesses is still followed
    again = await send(witness.config.listen, AddCheckpoint(1, (), note1).to_bytes(), 5)
    assert again.cosignatures


# ------------------------------------------------------------------ settings


def test_w4_witness_settings_come_from_flags_or_variables_and_errors_name_them(
    tmp_path: Path,
) -> None:
    env = {
        "PROVNET_NAME": "n",
        "PROVNET_DATA_DIR": str(tmp_path),
        "PROVNET_PEERS": "w1=127.0.0.1:7001",
        "PROVNET_WITNESSES": "w1; 127.0.0.1:7002",
        "PROVNET_WITNESS_LOGS": "*",
        "PROVNET_WITNESS_POLICY": str(tmp_path / "policy.txt"),
    }
    config = NodeConfig.from_env_and_args(None, env)
    assert config.witnesses == ("w1", "127.0.0.1:7002")
    assert (config.witness_logs, config.witness_policy) == ("*", tmp_path / "policy.txt")
    with pytest.raises(ConfigError, match=r"--witness-logs \(\$PROVNET_WITNESS_LOGS\)"):
        NodeConfig.from_env_and_args(None, {**env, "PROVNET_WITNESS_LOGS": "abc"})
    with pytest.raises(ConfigError, match=r"--witnesses .*'w9' is neither host:port nor a peer"):
        NodeConfig.from_env_and_args(None, {**env, "PROVNET_WITNESSES": "w9"})
    many = ";".join(f"127.0.0.1:{7000 + i}" for i in range(17))
    with pytest.raises(ConfigError, match="at most 16 witnesses"):
        NodeConfig.from_env_and_args(None, {**env, "PROVNET_WITNESSES": many})


async def test_w4_a_bad_policy_file_stops_the_node_naming_the_setting_and_line(
    nodes: Nodes,
) -> None:
    policy = nodes.root / "policy.txt"
    policy.write_text("# ok\nquorum w1\n")
    with pytest.raises(ConfigError, match=r"--witness-policy .*policy line 2: quorum 'w1'"):
        await nodes.add("holder", witness_policy=policy)


# ------------------------------------------------------------------ a real process, killed


def _start(root: Path, address: str) -> subprocess.Popen[bytes]:
    argv = provnet_argv(
        "node", "--name", "w1", "--listen", address, "--data-dir", str(root / "w1"),
        "--witness-logs", "*",
    )  # fmt: skip
    log = (root / "w1.log").open("ab")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=child_env())
    log.close()
    give_up = time.monotonic() + 60
    while probe_health(address, timeout=0.5) is not HealthState.SERVING:
        if proc.poll() is not None or time.monotonic() > give_up:
            proc.kill()
            pytest.fail(f"witness did not start: {(root / 'w1.log').read_text()[-2000:]}")
        time.sleep(0.05)  # polling a health probe, bounded by give_up
    return proc


@pytest.mark.soak
async def test_w5_a_witness_killed_right_after_it_answered_still_knows_what_it_cosigned(
    tmp_path: Path,
) -> None:
    """SIGKILL the witness process the moment its cosignature arrives: restarted, it
    answers the same log's stale request with the size it cosigned (soak: two
    process starts, a few seconds)."""
    address = f"127.0.0.1:{free_ports(1)[0]}"
    origin = load_or_create_identity(tmp_path / "origin")
    now = int(time.time() * 1000)
    log = HeadLog(origin, "1-0123456789abcdef")
    note = log.compact(
        [FoldInput("v", 0, [hop_json(1)])],
        serve_until=now + 3_600_000,
        deadline_ms=2_000,
        endpoints=("127.0.0.1:1",),
        issued_at=now,
    ).head.note
    transport = GrpcTransport()
    proc = _start(tmp_path, address)
    try:
        reply = await transport.add_checkpoint(address, AddCheckpoint(0, (), note).to_bytes(), 10)
        proc.kill()  # no shutdown, no flush: only what was committed before the answer
        proc.wait(timeout=10)
        assert reply.cosignatures
        await transport.close()
        transport = GrpcTransport()
        proc = _start(tmp_path, address)
        again = await transport.add_checkpoint(address, AddCheckpoint(0, (), note).to_bytes(), 10)
        assert (again.conflict, again.size) == (True, 1)
    finally:
        await transport.close()
        proc.kill()
        proc.wait(timeout=10)


# ------------------------------------------------------------------ kept and re-asked


async def _stored_head(core: NodeCore, head: bytes, proof: bytes) -> bytes:
    record = FoldProof.from_bytes(proof).record
    row = await core.store.head_fold(head_digest(head), leaf_hash(record).hex())
    assert row is not None
    return row.head_note


async def test_w4_a_restarted_origin_serves_the_cosigned_head_it_delivered(
    nodes: Nodes,
) -> None:
    witnesses = await _witnesses(nodes, 2)
    policy = _policy(nodes, witnesses, 2)
    addresses = tuple(w.config.listen for w in witnesses)
    origin = await nodes.add("origin", witnesses=addresses)
    head, proof = await _compact(origin, "v1", 1)
    assert len(parse_note(head).signatures) == 3
    await nodes.close(origin)
    reopened = await nodes.add("origin", witnesses=addresses)
    stored = await _stored_head(reopened, head, proof)
    assert stored == head  # byte for byte what was delivered before the restart
    holder = await nodes.add("holder", witness_policy=policy)
    await reopened.transport.deliver(
        holder.config.listen, _delivery(reopened, "v1", proof, stored), 5
    )
    assert holder.held("v1").delivery.heads == (head,)
    # the head log rebuilt from the cosigned notes goes on: the next head is cosigned
    head2, _ = await _compact(reopened, "v2", 11)
    assert len(parse_note(head2).signatures) == 3


async def test_w4_the_store_keeps_only_a_note_that_extends_the_stored_head(
    nodes: Nodes,
) -> None:
    witnesses = await _witnesses(nodes, 1)
    origin = await nodes.add("origin")  # no witnesses: the stored head is the signed one
    head, proof = await _compact(origin, "v1", 1)
    digest = head_digest(head)
    cosigned = await witnesses[0].witnessing.cosigner.add_checkpoint(
        AddCheckpoint(0, (), head).to_bytes()
    )
    with pytest.raises(ValueError, match="is not head"):
        await origin.store.cosigned_head("00" * 32, head + cosigned.cosignatures)
    note = parse_note(head)
    w_line = cosigned.cosignatures.decode().rstrip("\n")
    dropped_origin = (note.text + "\n" + w_line + "\n").encode()
    with pytest.raises(ValueError, match="does not extend the stored note"):
        await origin.store.cosigned_head(digest, dropped_origin)
    assert await _stored_head(origin, head, proof) == head
    assert await origin.store.cosigned_head(digest, head + cosigned.cosignatures)
    assert await _stored_head(origin, head, proof) == head + cosigned.cosignatures
    assert not await origin.store.cosigned_head(digest, head)  # nothing to add


async def test_w4_a_head_short_at_commit_is_reasked_and_a_policy_holder_accepts_it_later(
    nodes: Nodes,
) -> None:
    witnesses = await _witnesses(nodes, 3)
    policy = _policy(nodes, witnesses, 3)
    origin = await nodes.add("origin", witnesses=tuple(w.config.listen for w in witnesses))
    holder = await nodes.add("holder", witness_policy=policy)
    ask = origin.witnessing.origin
    ask.reask_delays_s = (3600.0, 3600.0)  # the background never fires here: asked by hand
    witnesses[1].crashed = True
    _, seqs = await origin.append([hop_json(1), hop_json(2)])
    out = await origin.commit_compaction([("v1", list(seqs), b"v1")])  # held by the origin too
    head, proof = out.head, out.fold_proofs[0]
    assert len(parse_note(head).signatures) == 3  # origin + w1 + w3: short of 3
    assert origin.held("v1").delivery.heads == (head,)
    with pytest.raises(CallFailed) as caught:
        await origin.transport.deliver(
            holder.config.listen, _delivery(origin, "v1", proof, head), 5
        )
    assert caught.value.code == "FAILED_PRECONDITION"
    assert ask.short_heads() == (head_digest(head),)
    # still down: the re-ask gains nothing and the head stays on the list
    assert await ask.reask() == 0
    assert ask.short_heads() == (head_digest(head),)
    witnesses[1].crashed = False
    calls = ask.asked
    assert await ask.reask() == 1
    assert ask.asked == calls + 1  # only the witness that gave no line is asked
    assert ask.short_heads() == ()
    later = await _stored_head(origin, head, proof)
    assert later.startswith(head)
    assert len(parse_note(later).signatures) == 4
    assert head_digest(later) == head_digest(head)
    # the origin's own held value carries the cosigned note now: forwarding it is accepted
    held = origin.held("v1")
    assert held.delivery.heads == (later,)
    assert [f.obligation_bytes for f in held.folds] == [later]
    await origin.transport.deliver(holder.config.listen, held.delivery, 5)
    assert holder.held("v1").delivery.heads == (later,)
    assert await holder.store.evidence() == ()


async def test_w4_background_reasks_are_bounded_and_a_newer_head_supersedes_a_short_one(
    nodes: Nodes,
) -> None:
    witnesses = await _witnesses(nodes, 2)
    origin = await nodes.add("origin", witnesses=tuple(w.config.listen for w in witnesses))
    ask = origin.witnessing.origin
    ask.reask_delays_s = (0.0, 0.0)
    witnesses[1].crashed = True
    head, proof = await _compact(origin, "v1", 1)
    await ask.settle()
    # two re-asks of the one witness that is down, then the head leaves the list
    assert ask.asked == 2 + 2
    assert ask.reasked == 2
    assert ask.short_heads() == ()
    assert await _stored_head(origin, head, proof) == head
    # a newer head of the log drops the older one still waiting
    ask.reask_delays_s = (3600.0,)
    await _compact(origin, "v2", 11)
    first = ask.short_heads()
    head3, _ = await _compact(origin, "v3", 21)
    assert len(first) == 1
    assert ask.short_heads() == (head_digest(head3),)
