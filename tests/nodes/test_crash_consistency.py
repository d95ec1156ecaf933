"""Crash consistency of the hop log with real processes (seed 000, design S5/S6).

A driver process (``python -m tests.nodes.crash_driver``) plays the origin: it
commits folds in a loop under an aggressive concurrent reaper and prints each
commitment only after ``commit_fold`` returned. We SIGKILL it at seeded random
moments, restart it on the same data dir (every start is a new epoch that
recycles hop ids ``h000001``…), and finally check that every commitment ever
acknowledged resolves byte-exact — or, once all its obligations expired, is
absent — and never resolves to other bytes.
"""

from __future__ import annotations

import base64
import json
import os
import queue
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from contracts.errors import ContractError
from contracts.hops import parse_hop
from contracts.merkle import merkle_root
from contracts.signed import open_statement
from contracts.statements import Commitment, Obligation
from nodes.store import HopStore, ResolveStatus

_REPO = Path(__file__).resolve().parents[2]


@dataclass
class Campaign:
    """Everything the client saw over all trials."""

    trials: int = 0
    kills: int = 0
    killed_before_start: int = 0
    killed_in_commit: int = 0  # last line before the kill was "begin": commit_fold in flight
    starts: list[dict[str, Any]] = field(default_factory=list)
    acks: list[dict[str, Any]] = field(default_factory=list)
    partial_lines: int = 0


@dataclass
class Verdict:
    """Outcome of resolving every acknowledged commitment after the campaign."""

    resolved: int = 0
    expired_absent: int = 0
    lost_pending: int = 0
    unresolvable: list[str] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)
    recycled_keys: int = 0
    integrity: str = ""


def _reader(stream: Any, out: queue.Queue[bytes | None]) -> None:
    for line in iter(stream.readline, b""):
        out.put(line)
    out.put(None)


def _parse(line: bytes, campaign: Campaign) -> dict[str, Any] | None:
    if not line.endswith(b"\n"):
        campaign.partial_lines += 1  # cut by the kill: never received as a whole
        return None
    event: dict[str, Any] = json.loads(line)
    return event


def run_trial(data_dir: Path, rng: random.Random, campaign: Campaign, extra: list[str]) -> None:
    """Start the driver, kill it at a random moment, collect what it acknowledged."""
    stderr_path = data_dir.parent / "driver.stderr"
    with stderr_path.open("ab") as stderr:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.nodes.crash_driver",
                "--data-dir",
                str(data_dir),
                "--seed",
                str(rng.randrange(1 << 30)),
                *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=stderr,
            cwd=_REPO,
        )
        lines: queue.Queue[bytes | None] = queue.Queue()
        reader = threading.Thread(target=_reader, args=(proc.stdout, lines), daemon=True)
        reader.start()
        try:
            early = rng.random() < 0.15
            if early:
                # Kill during start-up: open, recovery, integrity check, new epoch.
                time.sleep(rng.uniform(0.0, 0.3))
            else:
                first = lines.get(timeout=30)
                assert first is not None, f"driver exited before start: {stderr_path.read_text()}"
                event = _parse(first, campaign)
                assert event is not None
                assert event["event"] == "start", event
                campaign.starts.append(event)
                time.sleep(rng.uniform(0.0, 0.25))
            proc.send_signal(signal.SIGKILL)
            campaign.kills += 1
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)
            reader.join(timeout=30)
            assert proc.stdout is not None
            proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL, f"driver ended {proc.returncode} before the kill"
    last = ""
    while True:
        line = lines.get_nowait()
        if line is None:
            break
        event = _parse(line, campaign)
        if event is None:
            continue
        if event["event"] == "start":
            campaign.starts.append(event)
        elif event["event"] == "commit":
            campaign.acks.append(event)
        last = event["event"]
    campaign.trials += 1
    if last == "begin":
        campaign.killed_in_commit += 1
    if early and not any(s["pid"] == proc.pid for s in campaign.starts):
        campaign.killed_before_start += 1


def run_campaign(data_dir: Path, trials: int, seed: int, extra: tuple[str, ...] = ()) -> Campaign:
    rng = random.Random(seed)
    campaign = Campaign()
    for _ in range(trials):
        run_trial(data_dir, rng, campaign, list(extra))
    return campaign


async def verify_campaign(data_dir: Path, campaign: Campaign, *, pending: bool = False) -> Verdict:
    """Resolve every acknowledged commitment in the data dir the driver left."""
    verdict = Verdict()
    origins = {s["origin"] for s in campaign.starts}
    assert len(origins) == 1, f"one origin per data dir, saw {origins}"
    origin = origins.pop()
    seen_keys: dict[int, set[str]] = {}
    store = await HopStore.open(data_dir, origin)
    try:
        verdict.integrity = await store.integrity_check()
        now = int(time.time() * 1000)
        for ack in campaign.acks:
            digest = ack["digest"]
            for seq in ack["seqs"]:
                seen_keys.setdefault(seq, set()).add(ack["epoch"])
            envelope = base64.b64decode(ack["commitment"])
            # The acknowledgement itself verifies with the origin's key.
            commitment = open_statement(envelope, Commitment, signer=origin)
            obligation = open_statement(
                base64.b64decode(ack["obligation"]), Obligation, signer=origin
            )
            assert obligation.statement.commitment == digest
            assert commitment.digest == digest
            res = await store.resolve(digest, now_ms=now)
            if res.status is ResolveStatus.FOUND:
                assert res.fold is not None
                problems = []
                if res.fold.envelope != envelope:
                    problems.append("stored commitment bytes differ from the acknowledged ones")
                if merkle_root(res.leaves).hex() != commitment.statement.root:
                    problems.append("leaves do not hash to the acknowledged root")
                for leaf, seq in zip(res.leaves, ack["seqs"], strict=True):
                    try:
                        hop = parse_hop(leaf, origin=origin, epoch=ack["epoch"])
                    except ContractError as exc:
                        problems.append(f"leaf for seq {seq} is not this run's hop: {exc}")
                        continue
                    if hop["hop_id"] != f"h{seq:06d}":
                        problems.append(f"leaf for seq {seq} is hop {hop['hop_id']}")
                if problems:
                    verdict.wrong.append(f"{digest[:16]}: {'; '.join(problems)}")
                else:
                    verdict.resolved += 1
            elif res.status is ResolveStatus.EXPIRED and ack["serve_until"] <= now:
                verdict.expired_absent += 1
            elif (
                pending
                and res.status is ResolveStatus.UNRESOLVABLE
                and res.reason == "pending hops lost before landing"
            ):
                # provenance_pending acknowledged before the cold copy landed:
                # explicitly unresolvable (and counted), never other bytes.
                verdict.lost_pending += 1
            else:
                verdict.unresolvable.append(
                    f"{digest[:16]} ({ack['epoch']}): {res.status} {res.reason}"
                )
        counters = await store.counters()
        if not pending:
            assert counters["provenance_unresolvable"] == 0, counters
    finally:
        await store.close()
    verdict.recycled_keys = sum(1 for epochs in seen_keys.values() if len(epochs) > 1)
    return verdict


def assert_campaign_sound(campaign: Campaign, verdict: Verdict, trials: int) -> None:
    assert campaign.trials == trials
    assert campaign.kills == trials
    assert all(s["integrity"] == "ok" for s in campaign.starts), campaign.starts
    assert verdict.integrity == "ok"
    # Each start is a new epoch: recycled step ids never collide across runs.
    assert len({s["epoch"] for s in campaign.starts}) == len(campaign.starts)
    assert verdict.wrong == [], verdict.wrong[:5]
    assert verdict.unresolvable == [], verdict.unresolvable[:5]
    acked = len(campaign.acks)
    assert verdict.resolved + verdict.expired_absent + verdict.lost_pending == acked
    # The campaign really exercised what it claims to.
    assert acked >= trials, f"only {acked} acknowledgements over {trials} trials"
    assert verdict.expired_absent > 0, "the reaper evicted nothing: no eviction pressure"
    assert verdict.recycled_keys > 0, "no hop id was reused across epochs"
    assert campaign.killed_in_commit > 0, "no kill landed while commit_fold was in flight"


async def test_sigkilled_origin_never_loses_an_acknowledged_commitment(tmp_path: Path) -> None:
    trials = 40
    data_dir = tmp_path / "origin"
    campaign = run_campaign(data_dir, trials, seed=4)
    verdict = await verify_campaign(data_dir, campaign)
    print(
        f"crash campaign: trials={trials} acks={len(campaign.acks)} "
        f"resolved={verdict.resolved} expired_absent={verdict.expired_absent} "
        f"unresolvable={len(verdict.unresolvable)} wrong={len(verdict.wrong)} "
        f"recycled_keys={verdict.recycled_keys} partial_lines={campaign.partial_lines} "
        f"killed_before_start={campaign.killed_before_start} "
        f"killed_in_commit={campaign.killed_in_commit}"
    )
    assert_campaign_sound(campaign, verdict, trials)


@pytest.mark.soak
async def test_soak_500_sigkills_zero_unresolvable(tmp_path: Path) -> None:
    trials = int(os.environ.get("PROVNET_CRASH_TRIALS", "500"))
    assert trials >= 500
    data_dir = tmp_path / "origin"
    campaign = run_campaign(data_dir, trials, seed=500)
    verdict = await verify_campaign(data_dir, campaign)
    print(
        f"soak: trials={trials} acks={len(campaign.acks)} resolved={verdict.resolved} "
        f"expired_absent={verdict.expired_absent} unresolvable={len(verdict.unresolvable)} "
        f"wrong={len(verdict.wrong)} recycled_keys={verdict.recycled_keys} "
        f"killed_in_commit={campaign.killed_in_commit}"
    )
    assert_campaign_sound(campaign, verdict, trials)


async def test_pending_mode_crash_loses_only_explicitly_never_wrong_bytes(tmp_path: Path) -> None:
    trials = 8
    data_dir = tmp_path / "origin"
    campaign = run_campaign(data_dir, trials, seed=8, extra=("--pending",))
    assert all(s["pending"] for s in campaign.starts)
    verdict = await verify_campaign(data_dir, campaign, pending=True)
    print(
        f"pending campaign: trials={trials} acks={len(campaign.acks)} "
        f"resolved={verdict.resolved} expired_absent={verdict.expired_absent} "
        f"lost_pending={verdict.lost_pending} wrong={len(verdict.wrong)}"
    )
    assert_campaign_sound(campaign, verdict, trials)
    # The reconciler landed most folds before the kills.
    assert verdict.resolved > 0


def _run_to_death(data_dir: Path, *flags: str) -> list[dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.nodes.crash_driver", "--data-dir", str(data_dir), *flags],
        capture_output=True,
        timeout=120,
        cwd=_REPO,
        check=False,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    return [json.loads(line) for line in proc.stdout.splitlines()]


def _rows(db: Path, sql: str, *params: object) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


async def test_kill_inside_commit_transaction_leaves_no_trace_of_the_fold(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "origin"
    events = _run_to_death(data_dir, "--kill-in-signer", "6", "--append-ratio", "0")
    start = events[0]
    acks = [e for e in events if e["event"] == "commit"]
    dying = [e for e in events if e["event"] == "dying"]
    assert [a["fold_seq"] for a in acks] == [1, 2, 3, 4, 5]
    assert len(dying) == 1
    assert dying[0]["fold_seq"] == 6
    # Reopening runs recovery; the dying fold's transaction must be gone entirely.
    campaign = Campaign(trials=1, kills=1, starts=[start], acks=acks)
    verdict = await verify_campaign(data_dir, campaign)
    assert verdict.wrong == []
    assert verdict.unresolvable == []
    db = data_dir / "hops.sqlite3"
    epoch = start["epoch"]
    acked_digests = {a["digest"] for a in acks}
    stored = {r[0] for r in _rows(db, "SELECT digest FROM commitments WHERE epoch = ?", epoch)}
    assert stored == acked_digests
    (obligations,) = _rows(db, "SELECT COUNT(*) FROM obligations")
    assert obligations == (len(acks),)
    acked_seqs = {s for a in acks for s in a["seqs"]}
    only_dying = set(dying[0]["seqs"]) - acked_seqs
    assert only_dying, "the dying fold had no hops of its own"
    marks = ",".join("?" * len(only_dying))
    leftover = _rows(
        db, f"SELECT seq FROM hops WHERE epoch = ? AND seq IN ({marks})", epoch, *only_dying
    )
    assert leftover == []
    assert verdict.integrity == "ok"


async def test_fold_is_durable_once_commit_fold_returns_even_if_never_acknowledged(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "origin"
    events = _run_to_death(data_dir, "--kill-after-commit", "4")
    start = events[0]
    acks = [e for e in events if e["event"] == "commit"]
    assert [a["fold_seq"] for a in acks] == [1, 2, 3]
    store = await HopStore.open(data_dir, start["origin"])
    try:
        folds = await store.commitments_for(start["origin"], start["epoch"], "v4", 4)
        assert len(folds) == 1
        res = await store.resolve(folds[0].digest, now_ms=int(time.time() * 1000))
        # Short obligations may have lapsed by now; either way never other bytes.
        assert res.status in (ResolveStatus.FOUND, ResolveStatus.EXPIRED)
        if res:
            assert merkle_root(res.leaves).hex() == folds[0].root
    finally:
        await store.close()
