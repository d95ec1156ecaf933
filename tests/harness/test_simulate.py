"""``provnet simulate``: the real node core on virtual time.

The engine check plays the boundary experiment's default slice (origin,
holder, witness: three nodes) on the virtual-time loop and gets the decision
fingerprints the in-process replay pins (tests/harness/test_determinism.py).
"""

from __future__ import annotations

import asyncio
import csv
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import fields
from pathlib import Path

import pytest

from harness.boundary.choices import TransportKind
from harness.boundary.records import BoundarySettings
from harness.boundary.topology import RunClock, start_topology
from harness.cli import main
from harness.config import ExperimentConfig
from harness.simulate.adversary import LIAR, CellLedger
from harness.simulate.clock import EPOCH_S, VirtualTimeLoop, run_virtual
from harness.simulate.engine import CellResult, play_cells, play_slice
from harness.simulate.network import Availability, LinkModel, SimNetwork
from harness.simulate.report import confidence_interval, loglog_slope, summarise
from harness.simulate.run import CellRow, run_simulation
from harness.simulate.workload import Workload, build_cells, parse_workload
from nodes.faults import FaultMode
from nodes.store import StoreMode
from tests.foreground import sigint_default

CFG = ExperimentConfig()

#: The in-process replay fingerprints of med / cadence 25 / 500 steps, seeds 0 and 1.
PINNED_DEFAULT_SLICE = (
    "0cee7f0c57e7aaa94ae246bbd0d0bfdacd7bd1f69f50476c5e106dc61881f79a",
    "c3729baa9cff026307cdffee651a2d3deeb0ba26a6fc51fd0b75e269b5c393e2",
)


def test_virtual_loop_skips_idle_time_and_keeps_thread_work_real() -> None:
    async def main(loop: VirtualTimeLoop) -> tuple[float, float, float, bool]:
        await asyncio.sleep(3600)
        timed_out = False
        try:
            async with asyncio.timeout(5):
                await asyncio.sleep(10)
        except TimeoutError:
            timed_out = True
        before = loop.time()
        # a thread's work is waited for in real time: the clock stands still meanwhile
        await asyncio.to_thread(time.sleep, 0.05)
        return before, loop.time(), loop.wall(), timed_out

    before, after, wall, timed_out = run_virtual(main)
    assert before == 3605.0
    assert after == before
    assert wall == EPOCH_S + 3605.0
    assert timed_out


def test_default_boundary_slice_on_virtual_time_has_the_pinned_fingerprints() -> None:
    settings = BoundarySettings()  # origin -> holder, witness; seeds 0, 1; 500 steps
    assert len(settings.specs()) == 3
    outcome = play_slice(CFG, settings)
    assert [r.boundary_fingerprint for r in outcome.runs] == list(PINNED_DEFAULT_SLICE)
    assert all(r.fingerprints_equal and r.rows_equal for r in outcome.runs)
    assert outcome.evidence == []
    # the holder really rehydrated across the boundary, on the real node core
    assert outcome.arm_costs["structural_min"].rehydrations > 0


def test_nodes_started_for_a_simulation_read_the_virtual_clock(tmp_path: Path) -> None:
    async def main(loop: VirtualTimeLoop) -> tuple[int, int]:
        topo = await start_topology(
            tmp_path,
            BoundarySettings().specs(),
            TransportKind.MEMORY,
            deadline_ms=1000,
            reasks=1,
            store_mode=StoreMode.SCRATCH,
            clock=RunClock(wall=loop.wall),
        )
        try:
            first = topo.holder.core.now_ms()
            await asyncio.sleep(7200)
            return first, topo.origins[0].core.now_ms()
        finally:
            await topo.close()

    first, later = run_virtual(main)
    assert abs(first - EPOCH_S * 1000) <= 1
    assert abs(later - (EPOCH_S + 7200) * 1000) <= 1


# --------------------------------------------------------------------------- workload, runs

SMALL = {
    "agents": 9,
    "steps": 25,
    "horizon_s": 60,  # two runs a cell at this pace (4 × 5 decisions × 2 s each)
    "network": {"loss": 0.05, "think_s": 2},
    "churn": {"up_scale_s": 30, "down_scale_s": 20, "departure_rate_per_h": 2},
    "adversary": {"fraction": 0.33, "faults": ["tamper", "equivocate", "refuse", "drop"]},
}


def _columns(rows: list[CellRow]) -> list[tuple[object, ...]]:
    # every column, virtual times included: the node core reads the loop's clock
    return [tuple(getattr(r, f.name) for f in fields(CellRow)) for r in rows]


def test_a_seed_gives_the_same_cells_decisions_evidence_and_costs() -> None:
    w = parse_workload(SMALL)
    first = run_simulation(CFG, w, progress=False)
    second = run_simulation(CFG, w, progress=False)
    assert _columns(first.rows) == _columns(second.rows)
    # and the run is not vacuous: the network, churn and adversaries were all at work
    assert sum(r.losses for r in first.rows) > 0
    assert sum(r.faulty_agents for r in first.rows) > 0
    assert sum(r.proofs_honest for r in first.rows) == 0  # accuracy, liars at work
    assert all(r.decisions == 10 for r in first.rows)  # 2 runs × 5 decisions
    # the same rows, in the same order, from two worker processes
    shared = run_simulation(CFG, w, progress=False, workers=2)
    assert _columns(shared.rows) == _columns(first.rows)
    other = run_simulation(CFG, parse_workload({**SMALL, "seeds": [1]}), progress=False)
    assert _columns(other.rows) != _columns(first.rows)


def test_cells_fill_n_agents_with_chains_up_to_depth_and_fan_in() -> None:
    w = parse_workload({"agents": 400, "graph": {"max_depth": 10, "max_fan_in": 3}})
    cells = build_cells(w, 400, 0)
    assert sum(c.agents for c in cells) == 400
    depths = [len(c.settings.chain) - 1 for c in cells]
    assert max(depths) == 10
    assert min(depths) == 1
    assert {c.settings.origins for c in cells} == {1, 2, 3}
    for c in cells:
        c.settings.validate(CFG)  # every cell is a playable boundary slice


def test_network_round_trips_take_virtual_time_and_keep_the_decisions() -> None:
    settings = BoundarySettings(seeds=(0,), steps=25)
    net = SimNetwork(0, LinkModel(rtt_median_ms=100.0, rtt_sigma=0.0, jitter=0.0))
    plain, wan = play_cells(CFG, [(settings, None), (settings, net)])
    assert plain.virtual_seconds < 0.01  # nothing in a faithful run waits
    # every call waits one 100 ms round trip on the virtual clock
    assert wan.virtual_seconds >= 0.1 * net.calls / 2 > 0
    assert [r.boundary_fingerprint for r in wan.outcome.runs] == [
        r.boundary_fingerprint for r in plain.outcome.runs
    ]


def test_an_origin_that_is_down_is_unanswered_never_proven() -> None:
    always_down = {"origin": Availability(((0.0, math.inf),))}
    settings = BoundarySettings(seeds=(0,), steps=50)
    (cell,) = play_cells(CFG, [(settings, SimNetwork(0, LinkModel(), always_down))])
    kinds = {e.kind for e in cell.outcome.evidence}
    assert kinds <= {"unanswered"}
    assert cell.outcome.arm_costs["structural_min"].failed_rehydrations > 0


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("adversary:\n  fraction: 1.0\n", "key 'adversary.fraction': expected a number f ≥ 0"),
        ("graph:\n  max_depth: 0\n", "key 'graph.max_depth': expected an integer ≥ 1"),
        ("graph:\n  max_fan_in: two\n", "key 'graph.max_fan_in': expected an integer ≥ 1"),
        ("agents: 2\n", "key 'agents': expected an integer ≥ 3"),
        ("network:\n  loss: 1\n", "key 'network.loss': expected a probability in [0, 1)"),
        ("adversary:\n  faults: [lie]\n", "key 'adversary.faults': expected a non-empty list"),
        ("churn:\n  alpha: 0\n", "key 'churn.alpha': expected a number > 0"),
        ("graph: {depth: 3}\n", "unknown key 'graph.depth'"),
        ("agents: [\n", "not valid YAML (line 2)"),
    ],
)
def test_bad_workload_is_one_error_line_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, named: str
) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(text, encoding="utf-8")
    assert main(["simulate", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1
    assert err[0].startswith(f"provnet: error: {path}: ")
    assert named in err[0]
    assert not (tmp_path / "out").exists()


def test_cli_writes_the_result_files_with_intervals_and_growth(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text("steps: 25\nagents: [6, 12]\nseeds: 2\nhorizon_s: 300\n", encoding="utf-8")
    out = tmp_path / "out"
    assert main(["simulate", str(path), "--out", str(out), "--no-progress"]) == 0
    with (out / "summary.csv").open(encoding="utf-8") as fh:
        summary = list(csv.DictReader(fh))
    honest = [r for r in summary if r["quantity"] == "proofs_against_honest"]
    assert [(r["agents"], r["mean"], r["seeds"]) for r in honest] == [
        ("6", "0", "2"),
        ("12", "0", "2"),
    ]
    assert all(r["ci95_half_width"] != "" for r in summary if r["seeds"] == "2")
    with (out / "growth.csv").open(encoding="utf-8") as fh:
        growth = {r["cost"]: r["loglog_exponent"] for r in csv.DictReader(fh)}
    assert set(growth) == {"rpcs", "bytes", "sign_ops", "verify_ops"}
    assert all(v != "" for v in growth.values())
    assert "## Growth with N" in (out / "summary.md").read_text(encoding="utf-8")
    for figure in ("cost_vs_n.png", "completeness.png", "time_to_evidence_cdf.png"):
        assert (out / figure).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "agents.csv").read_text(encoding="utf-8").startswith("agents_total,seed,cell,")
    quantities = {r["quantity"] for r in summary}
    assert {"stored_hops_per_agent", "rpcs_per_agent_hour"} <= quantities


def test_confidence_interval_and_loglog_slope() -> None:
    mean, half = confidence_interval([1.0, 2.0, 3.0, 4.0, 5.0])
    assert mean == 3.0
    assert half == pytest.approx(2.776 * math.sqrt(2.5 / 5))
    assert loglog_slope([100, 1000, 10000], [5.0, 5.0, 5.0]) == pytest.approx(0.0)
    assert loglog_slope([100, 1000, 10000], [1.0, 10.0, 100.0]) == pytest.approx(1.0)


def test_the_built_in_workload_is_the_documented_defaults() -> None:
    # `provnet simulate` without a file and an empty file play the same workload
    assert Workload() == parse_workload({})
    assert Workload().link.think_s == 15.0
    assert Workload().runs_per_cell == 2  # 2 × 30 decisions × 4 × 15 s: one simulated hour


def test_a_cell_lives_its_horizon_on_renewed_obligations() -> None:
    # runs of 4 × 5 decisions × 10 s: 200 s expected, an obligation lasts 3,600 s;
    # a 2-hour horizon is 36 runs, each renewing the cell's folds and obligations
    w = parse_workload({"agents": 3, "steps": 25, "horizon_s": 7200, "network": {"think_s": 10}})
    assert w.runs_per_cell == 36
    result = run_simulation(CFG, w, progress=False)
    (row,) = result.rows
    assert row.decisions == 36 * 5
    assert 0.8 * 7200 < row.virtual_s < 1.2 * 7200  # the agents lived the horizon
    assert row.rehydrations > 0
    assert row.failed_rehydrations == 0  # no fold past its obligation, none expired
    agent_hours = [q for n, q, m, _, _ in summarise(result) if q == "rpcs_per_agent_hour" and m > 0]
    assert agent_hours


def test_a_pace_that_outlives_the_obligations_is_refused_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "w.yaml"
    path.write_text("steps: 150\nnetwork:\n  think_s: 60\n", encoding="utf-8")
    assert main(["simulate", str(path), "--out", str(tmp_path / "out")]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "key 'network.think_s': expected a think time with 4 × 30 decisions" in line


def test_ctrl_c_stops_the_run_closes_its_nodes_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.Popen(
        # Large enough that no machine finishes it before the interrupt (1,000
        # agents are tens of seconds of play).
        [sys.executable, "-m", "harness", "simulate", "--agents", "5000", "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        preexec_fn=sigint_default,
    )
    try:
        time.sleep(6.0)  # well inside the run's play
        assert proc.poll() is None
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "provnet: interrupted"
    assert "Traceback" not in err
    assert not out.exists()


# --------------------------------------------------------------------------- adversaries


def _ledgered(settings: BoundarySettings, faulty: dict[str, str]) -> tuple[CellResult, CellLedger]:
    ledger = CellLedger(faulty)
    (cell,) = play_cells(CFG, [(settings, SimNetwork(0, LinkModel()))], observers=[ledger])
    return cell, ledger


def test_lying_holder_and_witness_frame_a_faithful_origin_but_prove_nothing() -> None:
    settings = BoundarySettings(seeds=(0,), steps=50)
    _, ledger = _ledgered(settings, {"holder": LIAR, "witness": LIAR})
    kinds = {(f.kind, f.verdict) for f in ledger.forgeries}
    # every forgery was tried, and a verifier accepted none of them as a proof
    assert {("refused", "rejected"), ("bad_data", "rejected")} <= kinds
    assert not [f for f in ledger.forgeries if f.verdict == "proof"]
    # the colluding witness confirmed the framed silence: a suspicion, never more
    assert ("unanswered", "suspicion") in kinds
    assert ledger.witness_lies > 0


def test_a_faithful_witness_clears_a_lying_holders_framing() -> None:
    settings = BoundarySettings(seeds=(0,), steps=50)
    _, ledger = _ledgered(settings, {"holder": LIAR})
    framed = [f for f in ledger.forgeries if f.kind == "unanswered"]
    assert framed
    assert all(f.verdict == "rejected" for f in framed)
    assert all("cleared" in f.reason for f in framed)


def test_a_colluding_witness_covers_a_dropping_origin() -> None:
    settings = BoundarySettings(seeds=(0,), steps=50, fault=FaultMode.DROP)
    _, ledger = _ledgered(settings, {"origin": "drop", "witness": LIAR})
    assert any(s.origin == "origin" and s.outcome == "unanswered" for s in ledger.stamps)
    assert not any(s.recorded for s in ledger.stamps)  # never confirmed: nothing kept
    honest, _ = _ledgered(settings, {"origin": "drop"})
    assert honest.outcome.evidence  # a faithful witness confirms the same silence


def test_every_role_is_faulty_at_the_asked_fraction() -> None:
    w = parse_workload({"agents": 3000, "adversary": {"fraction": 0.33}})
    cells = build_cells(w, 3000, 0)
    roles: dict[str, list[bool]] = {}
    for c in cells:
        faulty = dict(c.faulty)
        for spec in c.settings.specs():
            roles.setdefault(spec.role.value, []).append(spec.name in faulty)
        assert [s.fault.value for s in c.settings.specs() if s.role.value == "origin"] == [
            faulty.get(n, "none") for n in c.settings.origin_names()
        ]
    for role, flags in roles.items():
        assert abs(sum(flags) / len(flags) - 0.33) < 0.05, role


# --------------------------------------------------------------------------- clock seam


def _timed_cell() -> tuple[float, list[tuple[float, str, str, bool]], list[tuple[str, int]]]:
    """A cell whose timing is all deadlines: a dropping and a slow origin, lossy links."""
    settings = BoundarySettings(
        seeds=(0,),
        steps=50,
        origins=2,
        fault=FaultMode.DROP,
        origin_faults=(FaultMode.DROP, FaultMode.SLOW),
    )
    ledger = CellLedger({"origin": "drop", "origin2": "slow"})
    net = SimNetwork(0, LinkModel(loss=0.05, think_s=3.0))
    (cell,) = play_cells(CFG, [(settings, net)], observers=[ledger])
    stamps = [(s.t, s.origin, s.outcome, s.recorded) for s in ledger.stamps]
    return cell.virtual_seconds, stamps, [(e.kind, e.step) for e in cell.outcome.evidence]


def test_a_simulated_run_does_not_read_wall_time(monkeypatch: pytest.MonkeyPatch) -> None:
    plain = _timed_cell()
    assert any(outcome == "unanswered" for _, _, outcome, _ in plain[1])  # deadlines ran out
    # the process's monotonic clock racing ahead (5 s a reading) changes nothing: the
    # node core's budgets, re-asks and deadlines are all on the loop's virtual clock
    ticks = [1e6]

    def racing() -> float:
        ticks[0] += 5.0
        return ticks[0]

    monkeypatch.setattr(time, "monotonic", racing)
    assert _timed_cell() == plain


def test_an_origin_down_whenever_asked_could_not_be_exposed() -> None:
    always_down = {"origin": Availability(((0.0, math.inf),))}
    settings = BoundarySettings(seeds=(0,), steps=50, fault=FaultMode.TAMPER)
    ledger = CellLedger({"origin": "tamper"}, always_down)
    play_cells(CFG, [(settings, SimNetwork(0, LinkModel(), always_down))], observers=[ledger])
    asked = [s for s in ledger.stamps if s.origin == "origin"]
    assert asked  # the holder asked, the tampering origin never got to answer
    assert not any(s.up for s in asked)
    assert {s.outcome for s in asked} == {"unanswered"}
