"""Storage faults against a real node process: a full disk, and a corrupted store.

A full disk (a size-limited tmpfs, filled to the last byte): every write the
node is asked for — ``HopLog.Append``, ``CommitFold``, ``CommitCompaction``,
the holder floor (``future_nonces``) of a demand dated ahead, an evidence
file — either lands durably and is acknowledged, or is refused
``RESOURCE_EXHAUSTED`` naming the disk ("no space left on device" and the
path); nothing is signed for a refused write (seed 000: no head, commitment
or receipt over hops that are not durable). The node logs the full disk once
per interval, not once per call, keeps serving every fold it acknowledged,
and takes writes again once space returns; after a restart every
acknowledged fold is served and ``provenance_unresolvable`` is 0.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from contracts.evidence import EvidenceKind, verify_evidence
from contracts.heads import FoldProof, HeadCache
from contracts.identity import Identity
from contracts.serve import build_demand
from nodes._pb.provnet.v1 import (
    deliver_pb2,
    deliver_pb2_grpc,
    hoplog_pb2,
    hoplog_pb2_grpc,
    node_pb2,
    node_pb2_grpc,
)
from nodes._store_signing import fold_signer, synthetic_hop
from nodes.client import HeldFold, Holder, Outcome
from nodes.cluster import child_env, provnet_argv
from nodes.errors import StoreFull
from nodes.messages import CommittedFold
from nodes.store import HopInput, HopStore
from nodes.transport import CallFailed, GrpcTransport
from tests.nodes.rpc_support import held_fold, hop_json, operator_channel
from tests.nodes.storage_support import OriginProcess, fill_disk, log_events, small_disk

_FULL = grpc.StatusCode.RESOURCE_EXHAUSTED


@dataclass
class Acked:
    """What the node acknowledged: value ref → the fold a holder would keep."""

    folds: dict[str, HeldFold] = field(default_factory=dict)
    refused: dict[str, int] = field(default_factory=dict)


@contextlib.asynccontextmanager
async def _hoplog(address: str) -> AsyncIterator[Any]:
    async with operator_channel(address) as channel:
        yield hoplog_pb2_grpc.HopLogStub(channel)


def _assert_disk_full(exc: grpc.aio.AioRpcError, disk: Path) -> None:
    assert exc.code() is _FULL, f"{exc.code()}: {exc.details()}"
    details = exc.details() or ""
    assert "no space left on device" in details, details
    assert str(disk) in details, details


async def _append(stub: Any, first: int, count: int) -> list[int]:
    seqs = list(range(first, first + count))
    await stub.Append(
        hoplog_pb2.AppendRequest(hops=[hop_json(s) for s in seqs], seqs=seqs), timeout=30
    )
    return seqs


async def _commit(stub: Any, ref: str, seqs: list[int], acked: Acked) -> None:
    reply = await stub.CommitFold(
        hoplog_pb2.CommitFoldRequest(value_ref=ref, seqs=seqs, serve_for_ms=3_600_000), timeout=30
    )
    acked.folds[ref] = held_fold(CommittedFold(reply.commitment, reply.obligation, False))


async def _compact(stub: Any, folds: dict[str, list[int]], acked: Acked) -> None:
    reply = await stub.CommitCompaction(
        hoplog_pb2.CommitCompactionRequest(
            folds=[hoplog_pb2.CompactionFold(value_ref=r, seqs=s) for r, s in folds.items()],
            serve_for_ms=3_600_000,
        ),
        timeout=30,
    )
    heads = HeadCache()
    for ref, proof in zip(folds, reply.fold_proofs, strict=True):
        fold = heads.verify_fold(FoldProof.from_bytes(proof), now=_now_ms(), head=reply.head)
        acked.folds[ref] = HeldFold(fold.commitment, fold.obligation, proof, reply.head, fold)


def _now_ms() -> int:
    return int(time.time() * 1000)


async def _stats(address: str) -> dict[str, int]:
    async with grpc.aio.insecure_channel(address) as channel:
        reply = await node_pb2_grpc.NodeStub(channel).Stats(node_pb2.StatsRequest(), timeout=10)
    return dict(reply.counters)


async def _served_all(address: str, acked: Acked) -> list[str]:
    """Rehydrate every acknowledged fold as a fresh holder; the ones not SERVED."""
    transport = GrpcTransport()
    holder = Holder(
        Identity.generate(), transport, reasks=0, cache=False, resolve_address=lambda _: address
    )
    bad: list[str] = []
    try:
        for ref, fold in acked.folds.items():
            report = await holder.rehydrate(ref, [fold])
            (outcome,) = report.outcomes
            if outcome.outcome is not Outcome.SERVED:
                bad.append(f"{ref}: {outcome.outcome} {outcome.detail}")
            elif len(report.hops) != fold.commitment.statement.leaf_count:
                bad.append(f"{ref}: {len(report.hops)} hops served")
    finally:
        await transport.close()
    return bad


async def _try(what: str, acked: Acked, disk: Path, call: Awaitable[object]) -> None:
    """Await a write call: acknowledged (kept by the call) or refused naming the disk."""
    try:
        await call
    except grpc.aio.AioRpcError as exc:
        _assert_disk_full(exc, disk)
        acked.refused[what] = acked.refused.get(what, 0) + 1


async def test_full_disk_refuses_writes_naming_it_serves_what_it_holds_and_recovers(
    tmp_path: Path,
) -> None:
    with small_disk(tmp_path / "disk", "8m") as disk:
        data_dir = disk / "origin"
        log = tmp_path / "origin.log"
        acked = Acked()
        node = OriginProcess(data_dir, log)
        try:
            address = await node.address()
            async with _hoplog(address) as stub:
                pool = await _append(stub, 1, 3_000)  # hops to fold while the disk is full
                for i in range(4):
                    await _commit(stub, f"before{i}", pool[i * 10 : i * 10 + 10], acked)
                await _compact(stub, {"head0": pool[40:50], "head1": pool[50:60]}, acked)
        finally:
            node.stop()
        # Restarted: nothing of those folds is in memory, every demand reads the store.
        node = OriginProcess(data_dir, log)
        try:
            address = await node.address()
            commits_before = (await _stats(address))["commits"]
            floor_file = data_dir / "replay_floor"
            floor_before = int(floor_file.read_text())
            filler = fill_disk(disk)
            async with _hoplog(address) as stub:
                next_seq = 10_000
                for i in range(6):
                    await _try("append", acked, disk, _append(stub, next_seq, 2_000))
                    next_seq += 2_000
                    await _try("commit", acked, disk, _commit(stub, f"full{i}", pool, acked))
                    await _try(
                        "compaction",
                        acked,
                        disk,
                        _compact(stub, {f"fa{i}": pool[:1500], f"fb{i}": pool[1500:]}, acked),
                    )
            assert acked.refused.get("append", 0) >= 1, acked.refused
            assert acked.refused.get("commit", 0) >= 1, acked.refused
            assert acked.refused.get("compaction", 0) >= 1, acked.refused
            # A demand dated ahead of the node's clock raises its holder's durable floor
            # (from 128 fresh keys: more lines than the file's last block has room for,
            # the node's known keys being written in it at start).
            transport = GrpcTransport()
            try:
                fold = acked.folds["before0"]
                at = _now_ms() + 5_000
                many_ahead = [
                    build_demand(Identity.generate(), fold.obligation, now=at).to_bytes()
                    for _ in range(128)
                ]
                with pytest.raises(CallFailed) as refused:
                    await transport.demand(address, many_ahead, 10.0)
                assert refused.value.code == "RESOURCE_EXHAUSTED", refused.value
                assert "no space left on device" in refused.value.message
                assert str(data_dir / "future_nonces") in refused.value.message
            finally:
                await transport.close()
            # Keeps serving every fold it acknowledged (the replay floor still rises).
            assert await _served_all(address, acked) == []
            assert int(floor_file.read_text()) > floor_before  # raised in place
            stats = await _stats(address)
            acknowledged_here = len(acked.folds) - 6
            assert stats["commits"] == commits_before + acknowledged_here, (stats, acked.refused)
            # the calls and the future-dated demand
            assert stats["disk_full_refusals"] >= sum(acked.refused.values()) + 1
            # Logged once for the whole episode (one interval), not once per call.
            assert len(log_events(log, "disk_full")) == 1, log_events(log, "disk_full")
            noisy = [
                e for e in log_events(log, "rpc_rejected") if "no space" in str(e.get("reason"))
            ]
            assert noisy == [], noisy

            filler.unlink()  # space returns
            async with _hoplog(address) as stub:
                seqs = await _append(stub, next_seq, 50)
                await _commit(stub, "after", seqs, acked)
                await _compact(stub, {"head_after": seqs[:20]}, acked)
            transport = GrpcTransport()
            try:
                fold = acked.folds["after"]
                ahead = build_demand(Identity.generate(), fold.obligation, now=_now_ms() + 3_000)
                (answer,) = await transport.demand(address, [ahead.to_bytes()], 10.0)
                assert answer.hops
            finally:
                await transport.close()
            assert len(log_events(log, "disk_space_returned")) == 1
        finally:
            node.stop()
        # Every acknowledged fold served by a restarted node; nothing unresolvable.
        node = OriginProcess(data_dir, log)
        try:
            address = await node.address()
            assert await _served_all(address, acked) == []
            stats = await _stats(address)
            assert stats["provenance_unresolvable"] == 0
        finally:
            node.stop()
        store = await HopStore.open(data_dir, None)
        try:
            assert await store.integrity_check() == "ok"
        finally:
            await store.close()
        print(f"full disk: acked={len(acked.folds)} refused={json.dumps(acked.refused)}")


async def test_full_disk_refuses_an_evidence_file_naming_it_and_writes_it_once_space_returns(
    tmp_path: Path,
) -> None:
    with small_disk(tmp_path / "disk", "8m") as disk:
        holder = OriginProcess(disk / "holder", tmp_path / "holder.log", name="holder")
        origin: OriginProcess | None = None
        try:
            holder_address = await holder.address()
            # A refusing origin on another disk delivers a value to the holder.
            origin = OriginProcess(
                tmp_path / "origin",
                tmp_path / "origin.log",
                PROVNET_FAULT="refuse",
                PROVNET_PEERS=f"holder={holder_address}",
            )
            origin_address = await origin.address()
            async with operator_channel(origin_address) as channel:
                stub = hoplog_pb2_grpc.HopLogStub(channel)
                await _append(stub, 1, 5)
                await stub.CommitFold(
                    hoplog_pb2.CommitFoldRequest(value_ref="v", seqs=[1, 2, 3, 4, 5], value=b"v"),
                    timeout=30,
                )
                await deliver_pb2_grpc.DeliverStub(channel).Forward(
                    deliver_pb2.ForwardRequest(value_ref="v", peer="holder"), timeout=30
                )
            evidence_dir = disk / "holder" / "evidence"
            filler = fill_disk(disk)
            async with operator_channel(holder_address) as channel:
                deliver = deliver_pb2_grpc.DeliverStub(channel)
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await deliver.Rehydrate(deliver_pb2.RehydrateRequest(value_ref="v"), timeout=30)
                _assert_disk_full(refused.value, evidence_dir)
                assert "refused evidence file" in (refused.value.details() or "")
                # Nothing half-written is left, and the holder is still up.
                assert list(evidence_dir.glob("*")) == []
                assert (await _stats(holder_address))["disk_full_refusals"] >= 1
                filler.unlink()
                reply = await deliver.Rehydrate(
                    deliver_pb2.RehydrateRequest(value_ref="v"), timeout=30
                )
            (outcome,) = reply.outcomes
            assert outcome.outcome == "refused", outcome
            written = Path(outcome.evidence_path)
            assert written.parent == evidence_dir
            verdict = verify_evidence(written.read_bytes(), now=_now_ms())
            assert verdict.kind is EvidenceKind.REFUSED
        finally:
            if origin is not None:
                origin.stop()
            holder.stop()


def _flip_hop_byte(db_file: Path, seq: int) -> None:
    """Change one byte of hop ``seq``'s stored bytes in the database file itself."""
    data = bytearray(db_file.read_bytes())
    marker = f'"hop_id":"h{seq:06d}"'.encode()
    at = data.find(marker)
    assert at >= 0, f"hop {seq} not found in {db_file}"
    assert data.find(marker, at + 1) < 0, f"hop {seq} found twice in {db_file}"
    data[at + len(marker) - 2] ^= 0x01  # a digit of the hop id: still a byte of the hop
    with db_file.open("r+b") as fh:
        fh.seek(at + len(marker) - 2)
        fh.write(bytes([data[at + len(marker) - 2]]))
        fh.flush()


async def test_flipped_byte_in_the_store_is_a_signed_store_corrupted_refusal_then_no_start(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "origin"
    log = tmp_path / "origin.log"
    acked = Acked()
    node = OriginProcess(data_dir, log)
    try:
        async with _hoplog(await node.address()) as stub:
            await _append(stub, 1, 30)
            await _commit(stub, "bad", list(range(1, 11)), acked)
            await _compact(
                stub, {"good": list(range(11, 21)), "head_bad": list(range(21, 31))}, acked
            )
    finally:
        node.stop()
    node = OriginProcess(data_dir, log)
    try:
        address = await node.address()  # the start-up check found nothing damaged
        _flip_hop_byte(data_dir / "hops.sqlite3", 4)  # under the running node
        _flip_hop_byte(data_dir / "hops.sqlite3", 24)  # a fold under a signed head
        evidence_dir = tmp_path / "evidence"
        transport = GrpcTransport()
        holder = Holder(
            Identity.generate(),
            transport,
            reasks=0,
            cache=False,
            evidence_dir=evidence_dir,
            resolve_address=lambda _: address,
        )
        try:
            outcomes = []
            for ref in ("bad", "head_bad"):
                report = await holder.rehydrate(ref, [acked.folds[ref]])
                (outcome,) = report.outcomes
                assert outcome.outcome is Outcome.REFUSED, outcome
                assert "STORE_CORRUPTED" in outcome.detail, outcome.detail
                assert report.hops == ()
                outcomes.append(outcome)
            # The rest of what it holds is still served.
            good = await holder.rehydrate("good", [acked.folds["good"]])
            assert good.outcomes[0].outcome is Outcome.SERVED
        finally:
            await transport.close()
        stats = await _stats(address)
        assert stats["store_corrupted"] == 2
        assert stats["provenance_unresolvable"] == 0
        assert len(log_events(log, "store_corrupted")) == 2
    finally:
        node.stop()
    # provnet evidence verify: the origin's own admitted loss, not bad data.
    for outcome in outcomes:
        verified = subprocess.run(
            provnet_argv("evidence", "verify", outcome.evidence_path),
            capture_output=True,
            text=True,
            env=child_env(),
            check=False,
        )
        assert verified.returncode == 0, verified.stderr
        assert "VALID refused (proof, admitted_loss)" in verified.stdout, verified.stdout
        assert "bad_data" not in verified.stdout
    # Restarted on the damaged store: refused, one line naming the damage.
    line = _start_refused(data_dir)
    assert "seq 4) damaged" in line, line


def _start_refused(data_dir: Path) -> str:
    """Start ``provnet node`` on ``data_dir``; it must refuse: its one error line."""
    started = subprocess.run(
        provnet_argv(
            "node", "--name", "origin", "--listen", "127.0.0.1:0", "--data-dir", str(data_dir)
        ),
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=60,
        check=False,
    )
    assert started.returncode == 2, (started.stdout, started.stderr)
    errors = [line for line in started.stderr.splitlines() if line.startswith("provnet: error:")]
    assert len(errors) == 1, started.stderr
    assert "Traceback" not in started.stderr
    assert str(data_dir) in errors[0]
    return errors[0]


async def test_node_refuses_to_start_on_a_damaged_btree_page_in_one_line(tmp_path: Path) -> None:
    data_dir = tmp_path / "origin"
    node = OriginProcess(data_dir, tmp_path / "origin.log")
    try:
        async with _hoplog(await node.address()) as stub:
            for start in range(1, 2_001, 500):
                seqs = await _append(stub, start, 500)
                await _commit(stub, f"v{start}", seqs, Acked())
    finally:
        node.stop()
    db_file = data_dir / "hops.sqlite3"
    page = 4096
    data = bytearray(db_file.read_bytes())
    assert len(data) > 8 * page
    data[3 * page + 1] ^= 0xFF  # the header of a b-tree page: its first freeblock
    data[3 * page + 3] ^= 0x7F  # and its cell count
    db_file.write_bytes(bytes(data))
    line = _start_refused(data_dir)
    assert "database damaged" in line or "database corrupt" in line, line


@pytest.mark.parametrize("pending", [False, True])
async def test_a_commit_refused_by_a_full_disk_leaves_no_count_and_no_queued_bytes(
    tmp_path: Path, pending: bool
) -> None:
    with small_disk(tmp_path / "disk", "4m") as disk:
        identity = Identity.generate()
        store = await HopStore.open(disk / "log", identity.node_id, provenance_pending=pending)
        try:
            sign = fold_signer(identity, serve_until_ms=_now_ms() + 3_600_000, issued_at_ms=1)
            hops = [
                HopInput(s, synthetic_hop(identity.node_id, store.epoch, s)) for s in range(1, 4001)
            ]
            fill_disk(disk)
            with pytest.raises(StoreFull, match="no space left on device") as refused:
                await store.commit_fold(
                    epoch=store.epoch, value_ref="v", fold_seq=0, hops=hops, sign=sign, now_ms=1
                )
            assert str(disk / "log" / "hops.sqlite3") in str(refused.value)
            assert (await store.counters())["commits"] == 0
            assert store._pending_hops == {}
            assert await store.next_fold_seq(identity.node_id, store.epoch, "v") == 0
        finally:
            await store.close()
