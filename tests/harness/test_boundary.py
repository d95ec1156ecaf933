"""The experiment across the boundary: faithful origins decide as in-process; faulty ones are named.

Real nodes (NodeCore with SQLite hop logs in temp dirs, real Ed25519 keys)
over the in-memory transport, and one small run over real gRPC servers on
loopback. Every run compares itself with the in-process replay of the same
events: the decision-log fingerprint, the per-run gate_metrics rows and
each evaluation.
"""

from __future__ import annotations

import asyncio
import csv
import json
from pathlib import Path
from typing import Any

import pytest

from contracts.evidence import verify_evidence
from contracts.rules import MIN_DEADLINE_MS
from harness.boundary.choices import BOUNDARY_FAULTS, TransportKind
from harness.boundary.runner import (
    BoundaryError,
    BoundaryOutcome,
    BoundarySettings,
    overall_fingerprints,
    run_boundary,
)
from harness.boundary.topology import Topology
from harness.boundary.wire import CryptoMeter, WireMeter, decode_value, encode_value
from harness.cli import main
from harness.config import ExperimentConfig
from harness.events import Decision
from harness.gates import GateView
from harness.replay import Replayer, ReplayParams
from harness.trajectory import generate
from nodes.faults import FaultMode

CFG = ExperimentConfig()
STRUCTURAL = ("structural_min", "structural_perhop")


def _play(out: Path | None = None, **kw: object) -> BoundaryOutcome:
    # A generous deadline unless a test sets one: on a loaded machine a faithful
    # origin must not be timed out (that would be a legitimate, cleared fallback).
    defaults: dict[str, object] = {"seeds": (0,), "steps": 150, "deadline_ms": 10_000}
    settings = BoundarySettings(**{**defaults, **kw})  # type: ignore[arg-type]
    return run_boundary(CFG, settings, out, progress=False)


@pytest.fixture(scope="module")
def faithful() -> BoundaryOutcome:
    return _play(steps=300, seeds=(0, 1))


def _rehydrations(outcome: BoundaryOutcome) -> int:
    return sum(outcome.arm_costs[a].rehydrations for a in STRUCTURAL)


# --------------------------------------------------------------------------- faithful


def test_faithful_origin_decisions_equal_in_process_fingerprint_and_rows(
    faithful: BoundaryOutcome,
) -> None:
    assert len(faithful.runs) == 2
    for run in faithful.runs:
        assert run.n_decisions == 60
        assert run.in_process_fingerprint == run.boundary_fingerprint
        assert run.in_process_rows == run.boundary_rows
        assert sum(rec[3] for rec in run.decisions.values()) == 0
    in_fp, b_fp = overall_fingerprints(faithful)
    assert in_fp == b_fp
    # the comparison is not vacuous: hops really crossed the boundary
    assert _rehydrations(faithful) > 0
    assert all(faithful.arm_costs[a].hops_verified > 0 for a in STRUCTURAL)
    for arm in STRUCTURAL:  # without the cache every verified hop crossed the wire
        assert faithful.wire[(arm, "rehydrate")]["hops_received"] == (
            faithful.arm_costs[arm].hops_verified
        )
    assert faithful.evidence == []


def test_faithful_fingerprint_is_the_plain_replay_fingerprint(faithful: BoundaryOutcome) -> None:
    # The in-process side of the comparison is the ordinary replay, not a copy of it.
    events = generate(0, 300, CFG.decision_every, CFG.degradation_profiles["med"])
    replayer = Replayer(ReplayParams(cadence=25, prose_seed=0, record_curve=False))
    for ev in events:
        replayer.feed(ev)
    assert faithful.runs[0].boundary_fingerprint == replayer.result().fingerprint


def test_rehydration_rpcs_equal_rehydrating_decisions_times_origins(
    faithful: BoundaryOutcome,
) -> None:
    for arm in STRUCTURAL:
        costs = faithful.arm_costs[arm]
        # one origin, cache off: one Serve.Demand per rehydrating decision, no re-asks
        assert costs.demand_rpcs == costs.origins_named == costs.rehydrations
        assert faithful.wire[(arm, "rehydrate")]["rpcs"] == costs.rehydrations
        assert costs.failed_rehydrations == 0
        in_process_needing = costs.inproc_rehydrations
        assert in_process_needing == costs.rehydrations
    for arm in ("ground_truth", "structural_min", "structural_perhop", "prose"):
        assert faithful.wire[(arm, "delivery")]["rpcs"] == faithful.arm_costs[arm].decisions == 120
        assert (arm, "rehydrate") not in faithful.wire or arm in STRUCTURAL


def test_signatures_and_hashes_are_counted_where_they_happen(faithful: BoundaryOutcome) -> None:
    commit = faithful.wire[("origin", "commit")]
    # ONE signature per origin per compaction, however many values it folded
    assert commit["sign_ops"] == faithful.heads_committed
    assert 0 < faithful.heads_committed < faithful.folds_committed
    assert commit["hash_leaves"] >= faithful.hops_appended > 0
    rehydrate = faithful.wire[("structural_min", "rehydrate")]
    # per origin asked: the holder asks unsigned and the origin answers unsigned
    # (design revision 3; a signed demand batch and receipt batch made 2 per origin,
    # per-fold statements 2 per fold); on a faithful serve nobody signs or verifies a
    # signature (bytes reproduce the root under a verified head)
    costs = faithful.arm_costs["structural_min"]
    assert costs.origins_named > 0
    assert rehydrate["sign_ops"] == 0
    assert rehydrate["verify_ops"] == 0
    # served bytes are hashed into their root the first time the holder sees them; a
    # fold served again in the same bytes is compared with them (KnownRoots), not hashed
    assert 0 < rehydrate["hash_leaves"] < costs.hops_verified
    assert rehydrate["sig_ms"] == 0.0
    assert rehydrate["hash_ms"] > 0.0


def test_ground_truth_ships_more_value_bytes_than_the_compacted_arms(
    faithful: BoundaryOutcome,
) -> None:
    gt = faithful.arm_costs["ground_truth"]
    smin = faithful.arm_costs["structural_min"]
    assert gt.value_bytes > smin.value_bytes
    assert smin.statement_bytes > 0
    assert gt.statement_bytes == 0


def test_holder_cache_saves_demands_without_changing_decisions() -> None:
    cached = _play(steps=300, holder_cache=True)
    run = cached.runs[0]
    assert run.fingerprints_equal
    costs = cached.arm_costs["structural_perhop"]
    # smin's demands already verified the same folds perhop carries
    assert costs.rehydrations > 0
    assert costs.demand_rpcs < costs.rehydrations
    # the gates still see every hop; fewer of them cross the wire
    assert cached.wire[("structural_perhop", "rehydrate")]["hops_received"] < costs.hops_verified


def test_faithful_run_over_grpc_decides_as_in_process() -> None:
    outcome = _play(steps=100, transport=TransportKind.GRPC)
    run = outcome.runs[0]
    assert run.fingerprints_equal
    assert run.rows_equal
    assert _rehydrations(outcome) > 0
    calls = outcome.wire[("calls", "by_node")]
    assert calls["origin:Deliver"] == 4 * run.n_decisions
    # one unsigned ask per rehydration (Serve.Ask), no signed demand
    assert calls["holder:Ask"] == _rehydrations(outcome)
    assert "holder:Demand" not in calls


def test_grpc_node_servers_are_stopped_even_when_a_run_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import socket

    import harness.boundary.play as play
    import harness.boundary.runner as boundary

    started: list[Topology] = []
    real_start = boundary.start_topology  # type: ignore[attr-defined]

    async def recording_start(*args: Any, **kwargs: Any) -> Topology:
        topo = await real_start(*args, **kwargs)
        started.append(topo)
        return topo

    async def failing_decide(self: object, step: int, vid: int) -> None:
        raise RuntimeError(f"decision at step {step} failed on purpose")

    monkeypatch.setattr(boundary, "start_topology", recording_start)
    monkeypatch.setattr(play.RunPlayer, "_decide", failing_decide)
    with pytest.raises(RuntimeError, match="on purpose"):
        _play(steps=20, transport=TransportKind.GRPC)
    (topo,) = started
    assert len(topo.nodes) == 3
    for node in topo.nodes:
        host, port = node.address.rsplit(":", 1)
        assert host == "127.0.0.1"
        with socket.socket() as sock:
            sock.settimeout(1.0)
            with pytest.raises(ConnectionRefusedError):
                sock.connect((host, int(port)))


# --------------------------------------------------------------------------- faults


#: The evidence each playable fault leaves (one record per failed rehydration).
FAULT_EVIDENCE: dict[FaultMode, str] = {
    FaultMode.REFUSE: "refused",
    FaultMode.TAMPER: "bad_data",
    # folds are committed under signed tree heads: a second head is a split view
    FaultMode.EQUIVOCATE: "split_view",
    FaultMode.SLOW: "unanswered",
    FaultMode.DROP: "unanswered",
}


def test_every_playable_fault_has_its_expected_evidence_here() -> None:
    # A fault mode added to BOUNDARY_FAULTS is played by the test below only once
    # its expected evidence kind is written down here.
    assert set(FAULT_EVIDENCE) == set(BOUNDARY_FAULTS) - {FaultMode.NONE}


@pytest.mark.parametrize(("fault", "kind"), list(FAULT_EVIDENCE.items()))
def test_faulty_origin_falls_back_to_polarity_and_is_named(
    fault: FaultMode, kind: str, tmp_path: Path
) -> None:
    # Timing faults need a short promise to be quick (the shortest a node signs) and,
    # as each failed rehydration waits it out three times, fewer steps; the others
    # keep the generous default, so a loaded machine cannot turn their proof into a
    # timeout.
    timing = fault in (FaultMode.SLOW, FaultMode.DROP)
    short: dict[str, Any] = {"deadline_ms": MIN_DEADLINE_MS, "steps": 60} if timing else {}
    outcome = _play(tmp_path, fault=fault, **{"steps": 100, **short})
    run = outcome.runs[0]
    failed = sum(outcome.arm_costs[a].failed_rehydrations for a in STRUCTURAL)
    assert failed == _rehydrations(outcome) > 0
    # one accusation per failed rehydration, of the kind the fault produces
    assert outcome.evidence_by_kind == {kind: failed}
    origin_id = outcome.node_ids["origin"]
    for record in outcome.evidence:
        assert record.accused == origin_id
        assert record.verified
        assert not record.correct_origin
        # the file alone proves (or, for silence, records) the failure of that origin
        assert Path(record.path).parent == tmp_path / "evidence"
        verdict = verify_evidence(Path(record.path).read_bytes(), now=2**62)
        assert verdict.accused == origin_id
    assert outcome.correct_accused == 0
    fallbacks = 0
    for (arm, _, mode), (_n, in_proc, boundary, differ, fell_back) in run.decisions.items():
        assert boundary <= in_proc  # a fallback only ever blocks
        if mode != "rehydrate":
            assert differ == 0, (arm, mode)
        fallbacks += fell_back
    assert fallbacks > 0
    # every fallback blocks; where in-process proceeded, the boundary decision differs
    blocked_by_fallback = sum(
        rec[1] - rec[2] for (_, _, mode), rec in run.decisions.items() if mode == "rehydrate"
    )
    assert blocked_by_fallback == sum(rec[3] for rec in run.decisions.values())
    assert not run.fingerprints_equal


def test_slow_origin_within_its_deadline_is_served_and_decides_as_in_process() -> None:
    outcome = _play(steps=100, fault=FaultMode.SLOW, fault_delay_ms=5, deadline_ms=1000)
    run = outcome.runs[0]
    assert run.fingerprints_equal
    assert outcome.evidence == []
    assert set(outcome.outcomes) == {("origin", "served")}
    # the delay is visible in the latency, not in the decisions
    assert min(outcome.arm_costs["structural_min"].rehydration_latencies) >= 0.005


def test_unanswered_origin_is_witness_confirmed_after_one_reask() -> None:
    outcome = _play(steps=60, fault=FaultMode.DROP, deadline_ms=MIN_DEADLINE_MS)
    calls = outcome.wire[("calls", "by_node")]
    rehydrations = _rehydrations(outcome)
    assert rehydrations > 0
    # signed ask + one re-ask each; the first decision asked unsigned before them, and
    # the silent origin was then asked signed first (nodes.client.SIGNED_FIRST_S)
    assert calls["holder:Demand"] == 2 * rehydrations
    assert calls["holder:Ask"] == 1
    assert calls["holder:Challenge"] == rehydrations
    assert calls["witness:Demand"] == rehydrations
    assert outcome.outcomes == {("origin", "unanswered"): rehydrations}


# --------------------------------------------------------------------------- chain, several origins


def test_chain_forwards_the_value_and_the_holder_demands_from_the_origin_directly() -> None:
    outcome = _play(chain=("a", "b", "c"))
    run = outcome.runs[0]
    assert run.fingerprints_equal
    assert run.rows_equal
    calls = outcome.wire[("calls", "by_node")]
    assert calls["a:Deliver"] == calls["b:Deliver"] == 4 * run.n_decisions
    assert calls["c:Ask"] == _rehydrations(outcome) > 0
    assert not any(key.startswith(("b:Ask", "a:Ask", "b:Demand", "a:Demand")) for key in calls)
    assert set(outcome.outcomes) == {("a", "served")}


def test_values_merged_from_two_origins_carry_both_and_each_is_asked() -> None:
    outcome = _play(steps=200, origins=2)
    run = outcome.runs[0]
    assert run.fingerprints_equal
    assert run.rows_equal
    costs = outcome.arm_costs["structural_min"]
    # some decisions needed hops from both origins: one demand each
    assert costs.origins_named > costs.rehydrations > 0
    assert costs.demand_rpcs == costs.origins_asked == costs.origins_named
    assert {name for name, _ in outcome.outcomes} == {"origin", "origin2"}


def test_faulty_origin_among_two_is_the_only_one_accused() -> None:
    outcome = _play(steps=200, origins=2, fault=FaultMode.TAMPER)
    assert outcome.evidence, "the tampering origin was asked at least once"
    assert {e.accused_name for e in outcome.evidence} == {"origin"}
    assert outcome.correct_accused == 0
    assert ("origin2", "served") in outcome.outcomes
    assert not any(name == "origin2" and o != "served" for name, o in outcome.outcomes)


# --------------------------------------------------------------------------- pieces


def test_delivered_value_decodes_to_the_view_the_origin_decided_on() -> None:
    events = generate(3, 120, 5, CFG.degradation_profiles["high"])
    replayer = Replayer(ReplayParams(cadence=10))
    checked = 0
    for ev in events:
        replayer.feed(ev)
        if not isinstance(ev, Decision):
            continue
        state = replayer.smin.values[ev.value_id]
        view = GateView(
            list(state.vec), state.taints, state.visible, state.folded, state.history_truncated
        )
        back = decode_value(encode_value("structural_min", ev.value_id, view, state.blob)).view
        assert list(back.scores) == list(view.scores)
        assert back.tainted_by == view.tainted_by
        assert list(back.visible) == list(view.visible)
        assert back.folded == view.folded
        assert back.history_truncated == view.history_truncated
        checked += back.folded is not None
    assert checked > 0


@pytest.mark.parametrize(
    ("data", "named"),
    [
        (b"not json", "not JSON"),
        (b'{"arm": "x"}', "expected keys"),
        (
            b'{"arm":"a","value_id":1,"scores":[1,1,1,1],"tainted_by":[],"visible":[],'
            b'"folded":null,"blob":null}',
            "scores",
        ),
        (
            b'{"arm":"a","value_id":1,"scores":[1,1,1,1,1],"tainted_by":[],'
            b'"visible":[{"hop_id":"h1"}],"folded":null,"blob":null}',
            "visible[0]",
        ),
    ],
)
def test_malformed_delivered_value_is_rejected_naming_the_field(data: bytes, named: str) -> None:
    with pytest.raises(ValueError, match=named.replace("[", r"\[")):
        decode_value(data)


def test_crypto_meter_counts_through_the_seam_and_restores_the_originals_on_exit() -> None:
    import contracts.merkle
    from contracts.identity import Identity, PublicKey, SignatureCount, observe_signatures

    sign, verify = Identity.sign, PublicKey.verify
    merkle_root = contracts.merkle.merkle_root
    meter = WireMeter()
    identity = Identity.generate()
    with CryptoMeter(meter):
        # counted by the observer of contracts.identity, not by replacing methods
        assert (Identity.sign, PublicKey.verify) == (sign, verify)
        identity.public.verify(identity.sign(b"x"), b"x")
        with pytest.raises(RuntimeError), CryptoMeter(WireMeter()):
            pass
        with (
            pytest.raises(RuntimeError, match="already installed"),
            observe_signatures(SignatureCount()),
        ):
            pass  # pragma: no cover - never entered
        with meter.tagged(("arm", "rehydrate")):
            for _ in range(3):
                signature = identity.sign(b"y")
            identity.public.verify(signature, b"y")
            identity.public.verify(signature, b"y")
        contracts.merkle.merkle_root([b"one leaf"])  # calls leaf_hashes inside: counted once
    assert Identity.sign is sign
    assert PublicKey.verify is verify
    assert contracts.merkle.merkle_root is merkle_root
    identity.sign(b"after")  # not metered any more
    counts = meter.counts(("", ""))
    assert (counts.sign_ops, counts.verify_ops) == (1, 1)
    assert (counts.hash_calls, counts.hash_leaves) == (1, 1)
    tagged = meter.counts(("arm", "rehydrate"))
    assert (tagged.sign_ops, tagged.verify_ops) == (3, 2)
    with observe_signatures(SignatureCount()):  # the meter left the seam free
        pass


def test_unplayable_settings_are_rejected_before_any_node_starts() -> None:
    with pytest.raises(BoundaryError, match="unknown profile"):
        BoundarySettings(profiles=("nosuch",)).validate(CFG)
    with pytest.raises(BoundaryError, match="node names"):
        BoundarySettings(chain=("Origin", "holder")).validate(CFG)
    with pytest.raises(BoundaryError, match="distinct"):
        BoundarySettings(chain=("a", "a")).validate(CFG)
    with pytest.raises(BoundaryError, match="not playable"):
        BoundarySettings(fault=FaultMode.CRASH).validate(CFG)
    with pytest.raises(BoundaryError):
        asyncio.run(_async_reject())


async def _async_reject() -> None:
    from harness.boundary.runner import run_boundary_async

    await run_boundary_async(CFG, BoundarySettings(seeds=()), progress=False)


# --------------------------------------------------------------------------- CLI


def test_cli_writes_costs_decisions_evidence_and_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import structlog

    out = tmp_path / "rb"
    argv = ["experiment", "boundary", "--steps", "80", "--seeds", "1", "--fault", "refuse"]
    try:
        rc = main([*argv, "--out", str(out), "--no-progress"])
    finally:
        # the handler configures node logging process-wide (to this test's stderr)
        structlog.reset_defaults()
    assert rc == 0
    printed = capsys.readouterr().out
    assert "evidence: refused" in printed
    assert "correct origins accused: 0" in printed
    with (out / "boundary_costs.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    settings = {(r["setting"], r["arm"], r["mode"]) for r in rows}
    assert ("in_process", "structural_min", "rehydrate") in settings
    assert ("boundary", "structural_min", "rehydrate") in settings
    assert ("boundary", "origin", "commit") in settings
    with (out / "boundary_evidence.csv").open() as fh:
        evidence = list(csv.DictReader(fh))
    assert evidence
    assert {e["kind"] for e in evidence} == {"refused"}
    meta = json.loads((out / "boundary_meta.json").read_text())
    assert meta["evidence_by_kind"]["refused"] == len(evidence)
    assert "| structural_min | rehydrate |" in (out / "boundary.md").read_text()
    assert (out / "boundary_cost_vs_flips.png").stat().st_size > 0


def test_cli_unknown_profile_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["experiment", "boundary", "--profile", "nosuch", "--out", str(tmp_path / "x")])
    assert rc == 2
    assert "provnet: error: unknown profile" in capsys.readouterr().err


def test_registering_the_boundary_subcommand_imports_neither_grpc_nor_aiosqlite() -> None:
    import subprocess
    import sys

    code = (
        "import sys, argparse, harness.cli_experiment as m\n"
        "p = argparse.ArgumentParser(); m.register(p.add_subparsers())\n"
        "print('grpc' in sys.modules, 'aiosqlite' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split() == ["False", "False"]


def test_kept_node_dir_is_reused_by_a_second_run_with_the_same_keys_and_decisions(
    tmp_path: Path,
) -> None:
    settings = BoundarySettings(seeds=(0,), steps=100, deadline_ms=10_000)
    first = run_boundary(CFG, settings, progress=False, node_dir=tmp_path / "nodes")
    second = run_boundary(CFG, settings, progress=False, node_dir=tmp_path / "nodes")
    assert first.node_ids == second.node_ids
    assert (tmp_path / "nodes" / "origin" / "node.key").exists()
    # a new epoch per run: the same hop ids recommitted, decisions unchanged
    assert first.runs[0].boundary_fingerprint == second.runs[0].boundary_fingerprint
    assert second.runs[0].fingerprints_equal
    # the reused origin restarted and waited out its replay floor, so nobody is accused
    assert second.evidence == []


def test_cost_rows_put_equal_flip_rates_next_to_different_costs(
    faithful: BoundaryOutcome,
) -> None:
    from harness.boundary.report import COST_COLUMNS, cost_rows

    rows = {(r["setting"], r["arm"], r["mode"]): r for r in cost_rows(faithful)}
    assert all(set(r) == set(COST_COLUMNS) for r in rows.values())
    for (setting, arm, mode), row in rows.items():
        if setting != "boundary" or arm == "origin" or mode == "delivery":
            continue
        local = rows[("in_process", arm, mode)]
        for column in ("flip_rate", "false_proceed", "false_stop", "lookups", "decisions"):
            assert row[column] == local[column], (arm, mode, column)
        assert local["rpcs"] == local["delivery_bytes"] == 0
        assert row["delivery_rpcs"] == row["decisions"] == 120
    smin = rows[("boundary", "structural_min", "rehydrate")]
    assert smin["rehydrate_rpcs"] == smin["rehydrating_decisions"]
    assert int(str(smin["rehydrating_decisions"])) > 0
    assert smin["hops_fetched"] == faithful.arm_costs["structural_min"].hops_verified
    assert rows[("boundary", "structural_min", "blind")]["rehydrate_rpcs"] == 0
    commit = rows[("boundary", "origin", "commit")]
    assert commit["decisions"] == faithful.folds_committed


def test_runs_shared_over_worker_processes_give_the_one_process_outputs(tmp_path: Path) -> None:
    # four runs pulled by two workers from a shared queue, the C = 10 runs
    # first: they must come back in the slice's run order
    one = _play(tmp_path / "one", steps=150, seeds=(0, 1), cadences=(25, 10))
    shared = _play(tmp_path / "shared", steps=150, seeds=(0, 1), cadences=(25, 10), workers=2)
    # the same files, figures included (drawn in the worker processes)
    assert [p.name for p in shared.written] == [p.name for p in one.written]
    assert sum(p.suffix == ".png" for p in shared.written) == 3
    for path in shared.written:
        assert path.stat().st_size > 0, path
    assert [r.label for r in shared.runs] == [r.label for r in one.runs]
    assert [r.boundary_fingerprint for r in shared.runs] == [
        r.boundary_fingerprint for r in one.runs
    ]
    assert overall_fingerprints(shared) == overall_fingerprints(one)
    assert [r.boundary_rows for r in shared.runs] == [r.boundary_rows for r in one.runs]
    for arm in STRUCTURAL:
        mine, theirs = shared.arm_costs[arm], one.arm_costs[arm]
        assert (mine.rehydrations, mine.hops_verified, mine.decisions) == (
            theirs.rehydrations,
            theirs.hops_verified,
            theirs.decisions,
        )
    assert shared.folds_committed == one.folds_committed
    assert shared.heads_committed == one.heads_committed
    assert shared.delivery_by_cadence == one.delivery_by_cadence
    assert shared.wire[("calls", "by_node")] == one.wire[("calls", "by_node")]


def test_reported_bytes_do_not_depend_on_the_wall_clock_millisecond(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Wire v4 sends a whole-second time one byte shorter than a time in ms; the
    # same slice played with a wall clock that reads only whole seconds and with
    # one that reads only half seconds must report the same bytes everywhere.
    import time

    from harness.boundary.report import cost_rows

    wall = time.time

    def play(clock: Any) -> tuple[object, ...]:
        monkeypatch.setattr(time, "time", clock)
        try:
            out = _play(steps=60, cadences=(10,))
        finally:
            monkeypatch.setattr(time, "time", wall)
        wire = {
            key: {k: n for k, n in v.items() if k.endswith("_bytes")}
            for key, v in sorted(out.wire.items())
        }
        rows = [{k: v for k, v in r.items() if k.endswith("_bytes")} for r in cost_rows(out)]
        return out.delivery_by_cadence, wire, rows, overall_fingerprints(out)

    whole = play(lambda: float(int(wall())))
    half = play(lambda: int(wall()) + 0.5)
    assert any(sums[2] for sums in whole[0].values())  # type: ignore[attr-defined]
    assert whole == half


def test_run_clock_never_reads_a_whole_second_and_stays_within_a_ms_of_the_wall() -> None:
    from harness.boundary.topology import RunClock

    for wall_ms in (1_780_000_000_000, 1_780_000_000_001, 1_780_000_000_999, 1_780_000_000_500):
        clock = RunClock(lambda ms=wall_ms: ms / 1000)  # type: ignore[misc]
        got = int(clock() * 1000)
        assert got == clock.now_ms()
        assert got % 1000 != 0
        assert 0 <= got - wall_ms <= 1


def test_figures_drawn_in_worker_processes_are_the_files_drawn_here(
    faithful: BoundaryOutcome, tmp_path: Path
) -> None:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from harness.boundary.report import write_outputs

    here = write_outputs(faithful, tmp_path / "here")
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        there = write_outputs(faithful, tmp_path / "there", pool)
    assert [p.name for p in there] == [p.name for p in here]
    assert {p.name for p in here} >= {
        "boundary_costs.png",
        "boundary_cost_vs_flips.png",
        "boundary_bytes_by_cadence.png",
    }
    for a, b in zip(here, there, strict=True):
        assert a.read_bytes() == b.read_bytes(), a.name


def test_parallel_runs_are_dealt_out_longest_first() -> None:
    from harness.boundary.runner import longest_first, slice_tasks

    settings = BoundarySettings(cadences=(25, 10, 50), profiles=("low", "high"), seeds=(0, 1))
    order = longest_first(CFG, settings)
    tasks = slice_tasks(CFG, settings)
    assert sorted(order) == list(range(len(tasks)))
    cadences = [tasks[i][0].cadence for i in order]
    assert cadences == sorted(cadences)  # most compactions first
    assert [i for i in order if tasks[i][0].cadence == 25] == [0, 1, 2, 3]  # stable


def test_compacted_value_with_head_statements_costs_under_the_full_lineage(
    faithful: BoundaryOutcome,
) -> None:
    from harness.boundary.report import cadence_ratios, cost_rows

    (row,) = cadence_ratios(faithful)
    cadence, full, value, statements, ratio = row
    assert cadence == 25
    assert value < full
    assert statements > 0
    # one fold proof per origin and ancestor value, heads mostly as digests
    assert ratio <= 0.75, row
    per_cadence = [r for r in cost_rows(faithful) if r["mode"] == "delivery"]
    assert {r["arm"] for r in per_cadence} == {
        "ground_truth",
        "structural_min",
        "structural_perhop",
        "prose",
    }
    assert all(r["cadence"] == 25 for r in per_cadence)


def test_custody_k_attaches_statements_once_per_head_without_changing_decisions() -> None:
    """--custody-k: deliveries carry the custodians' statements (counted in the
    statement bytes), each in full only on the first delivery of its head; the
    decisions are those without custody."""
    plain = _play(steps=150)
    k1 = _play(steps=150, custody_k=1)
    assert k1.runs[0].fingerprints_equal
    assert [r.boundary_fingerprint for r in k1.runs] == [r.boundary_fingerprint for r in plain.runs]
    a, b = plain.arm_costs["structural_min"], k1.arm_costs["structural_min"]
    assert a.decisions == b.decisions
    added = (b.statement_bytes - a.statement_bytes) / b.decisions
    # a digest (34 B) per delivery with a fold plus a full note per new head:
    # far below one full statement per delivery
    assert 20 < added < 200
