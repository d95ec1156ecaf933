"""``provnet experiment custody``: closed forms, intervals, trials on real nodes, the CLI.

Every test here is cheap (small sweeps on in-process nodes, seconds); the
±2 point sweep is ``provnet experiment custody --full`` (docs/custody.md).
"""

from __future__ import annotations

import asyncio
import csv
import json
import math
import random
import tempfile
from pathlib import Path

import pytest

from harness.cli import main
from harness.custody.runner import plan_cells
from harness.custody.settings import CellResult, CustodySettings, Departures
from harness.custody.stats import (
    GOAL_HALF_WIDTH,
    PLANNED_HALF_WIDTH,
    closed_form,
    closed_form_random_placement,
    half_width,
    more_trials,
    trials_for,
    wilson,
)
from harness.custody.trials import TrialPool, run_cells

# --------------------------------------------------------------------------- statistics


def test_wilson_matches_the_published_interval() -> None:
    # Wilson (1927) / Newcombe (1998) method 3: 81 of 263 → 0.2553 to 0.3662.
    lo, hi = wilson(81, 263)
    assert (round(lo, 4), round(hi, 4)) == (0.2553, 0.3662)
    # all successes: the upper end is 1, the lower end n / (n + z²)
    lo, hi = wilson(50, 50)
    assert hi == 1.0
    assert lo == pytest.approx(50 / (50 + 1.959963984540054**2))


def _half(a: float, m: int) -> float:
    z = 1.959963984540054
    return z * math.sqrt(a * (1 - a) / m + z * z / (4 * m * m)) / (1 + z * z / m)


def test_trials_for_is_the_fewest_meeting_the_half_width() -> None:
    for a in (0.5, 0.8, 0.992, 1.0):
        n = trials_for(a)
        assert _half(a, n) <= PLANNED_HALF_WIDTH < _half(a, n - 1)
    assert trials_for(0.5) > trials_for(0.8) > trials_for(0.99)


def test_closed_forms() -> None:
    assert closed_form(2, 0.2) == pytest.approx(0.992)
    assert closed_form(0, 0.2) == pytest.approx(0.8)
    # one operator: every party departs with it, whatever k
    assert closed_form_random_placement(3, 0.3, 1) == pytest.approx(0.7)
    # k = 1 on 4 operators: same operator with probability 1/4
    p = 0.3
    assert closed_form_random_placement(1, p, 4) == pytest.approx(1 - (p / 4 + 3 * p * p / 4))


def test_full_plan_meets_the_goal_at_every_cell() -> None:
    plan = plan_cells(CustodySettings(trials=0, departures=(Departures.INDEPENDENT,)))
    assert len(plan) == 20
    for cell, n in plan:
        lo, hi = wilson(round(cell.expected * n), n)
        assert (hi - lo) / 2 <= 0.02, (cell.k, cell.p, n)


def test_a_cell_measured_below_its_closed_form_is_topped_up_to_the_goal() -> None:
    # The two cells the plan alone left wide: 157 of 159 (±2.06) and 158 of 160 (±2.04).
    assert half_width(157, 159) > GOAL_HALF_WIDTH
    assert more_trials(157, 159) > 0
    assert more_trials(158, 160) > 0
    # within the goal: nothing to add
    assert more_trials(1_500, 1_896) == 0
    # A cell whose true availability (98.5%) is below its closed form (99.2%, planned
    # from): the plan alone ends wider than the goal; topped up, within it.
    draws = random.Random(7)
    n = trials_for(closed_form(2, 0.2))
    successes = sum(draws.random() < 0.985 for _ in range(n))
    assert half_width(successes, n) > GOAL_HALF_WIDTH
    rounds = 0
    while extra := more_trials(successes, n):
        successes += sum(draws.random() < 0.985 for _ in range(extra))
        n += extra
        rounds += 1
    assert rounds >= 1
    assert half_width(successes, n) <= GOAL_HALF_WIDTH


# --------------------------------------------------------------------------- trials on nodes


def test_play_to_goal_tops_a_cell_up_on_real_nodes_the_same_way_per_seed() -> None:
    # A coarse goal (±25 pp) so the top-up stays a few dozen trials.
    async def play() -> CellResult:
        settings = CustodySettings(ks=(0,), ps=(0.5,), batch=16, trials=0)
        cell = CellResult(Departures.INDEPENDENT, 0, 0.5, closed_form(0, 0.5))
        with tempfile.TemporaryDirectory() as tmp:
            pool = TrialPool(settings, Path(tmp))
            try:
                await pool.open()
                await pool.play_to_goal(cell, 4, random.Random("goal"), goal=0.25)
            finally:
                await pool.close()
        return cell

    cell = asyncio.run(play())
    assert cell.trials > 4
    assert half_width(cell.available, cell.trials) <= 0.25
    again = asyncio.run(play())
    assert (again.trials, again.available) == (cell.trials, cell.available)


def _play(settings: CustodySettings, k: int, p: float, trials: int) -> CellResult:
    cell = CellResult(Departures.INDEPENDENT, k, p, closed_form(k, p))
    asyncio.run(run_cells(settings, [(cell, trials)]))
    return cell


def test_k0_departed_origin_is_unanswered_witness_confirmed_and_nobody_else_accused() -> None:
    settings = CustodySettings(ks=(0,), ps=(0.5,), batch=12)
    cell = _play(settings, 0, 0.5, 12)
    assert cell.trials == 12
    # at k = 0 a trial is available exactly when its origin stayed
    assert cell.available + cell.departed_origins == 12
    assert 0 < cell.departed_origins < 12  # the seed departs some, not all
    # every departed origin gets one witness-confirmed unanswered record; nobody else
    assert cell.evidence == {("origin", "unanswered", True): cell.departed_origins}
    assert cell.honest_accused == 0
    assert cell.unconfirmed == 0
    assert cell.served_by == {"origin": cell.available}
    # flips happen only where the hops were missing and the oracle would proceed
    assert cell.decisions == 4 * 12
    assert 0 < cell.flips <= 4 * cell.departed_origins


def test_p0_serves_everything_and_flips_nothing() -> None:
    cell = _play(CustodySettings(ks=(0,), ps=(0.0,), batch=6), 0, 0.0, 6)
    assert cell.available == 6
    assert cell.flips == 0
    assert cell.evidence == {}


def test_k1_custodian_serves_when_the_origin_is_gone_and_nobody_honest_is_accused() -> None:
    cell = _play(CustodySettings(ks=(1,), ps=(0.5,), batch=8), 1, 0.5, 8)
    assert cell.trials == 8
    assert cell.custodians_taken == 8  # every value carried its custody statement
    assert cell.commit_signatures == 8 * 2  # the head + one custody statement
    # the custodian held exactly the fold's hops (measured from its store)
    assert cell.hops_per_custodian == [12]
    # some origins departed and their custodians served instead
    assert cell.served_by.get("custodian", 0) > 0
    assert cell.available > 8 - cell.departed_origins
    assert cell.honest_accused == 0
    assert all(departed for (_, _, departed) in cell.evidence)
    # where the hops came back (from either party) the decision is the oracle's
    assert cell.flips <= 4 * (8 - cell.available)


def test_p0_with_custodians_asks_only_the_origin() -> None:
    cell = _play(CustodySettings(ks=(2,), ps=(0.0,), batch=4), 2, 0.0, 4)
    assert cell.available == 4
    assert cell.served_by == {"origin": 4}
    assert cell.custodians_taken == 8
    assert cell.custody_bytes > 0
    assert cell.flips == 0


# --------------------------------------------------------------------------- the CLI


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--k", "5"], "--k: expected custodian counts 0..3"),
        (["--k", "0,0"], "--k: custodian count 0 appears twice"),
        (["--p", "1.5"], "--p: expected a probability in [0, 1)"),
        (["--p", "x"], "--p: expected probabilities in [0, 1)"),
        (["--departures", "sometimes"], "--departures: expected a comma list of independent"),
        (["--deadline-ms", "10"], "--deadline-ms: deadline_ms 10 is outside"),
        (
            ["--k", "0,3", "--operators", "2", "--departures", "operator_placed"],
            "--operators: per-operator placement of k = 3 custodians needs at least 4",
        ),
    ],
)
def test_bad_input_is_one_error_line_naming_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    rc = main(["experiment", "custody", *argv, "--out", str(tmp_path / "x"), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("provnet: error: ")
    assert needle in err
    assert err.count("\n") == 1
    assert not (tmp_path / "x").exists()


def test_cli_writes_csv_summary_figures_with_digests(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import structlog

    out = tmp_path / "rc"
    argv = ["experiment", "custody", "--k", "0", "--p", "0.5", "--trials", "8"]
    argv += ["--departures", "independent", "--batch", "8", "--no-rows"]
    try:
        rc = main([*argv, "--out", str(out), "--no-progress"])
    finally:
        structlog.reset_defaults()  # the handler configures node logging process-wide
    assert rc == 0
    printed = capsys.readouterr().out
    assert "honest parties accused: 0" in printed
    with (out / "custody_availability.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["departures"], r["k"], r["p"], r["trials"]) for r in rows] == [
        ("independent", "0", "0.5", "8")
    ]
    assert float(rows[0]["closed_form"]) == 0.5
    lo, hi = wilson(int(rows[0]["available"]), 8)
    assert float(rows[0]["ci_low"]) == pytest.approx(lo, abs=1e-6)
    assert float(rows[0]["ci_high"]) == pytest.approx(hi, abs=1e-6)
    meta = json.loads((out / "custody_meta.json").read_text())
    assert meta["interval"] == "Wilson score, 95%"
    assert set(meta["files"]) >= {"custody_availability.csv", "summary.md"}
    from harness._outdir import check_digests

    check_digests(out, "custody_meta.json", meta["files"])
    assert (out / "custody_availability.png").stat().st_size > 0
    assert "## Availability: independent departures" in (out / "summary.md").read_text()


def test_death_spiral_row_restores_from_the_custodian_only() -> None:
    """After the origin departs for good, Attest.Restore rehydrates from the
    custodian's fold and the attester signs over it; without a custodian it cannot."""
    from harness.custody.death_spiral import play_death_spiral

    none, one = asyncio.run(play_death_spiral((0, 1)))
    assert (none.rehydrated, none.issued, none.served_by) == (False, 0, "nobody")
    assert "UNAVAILABLE" in none.detail  # the origin's endpoint answers nothing
    # without custodians the spiral holds: reconstruction stays, its gates block
    assert (none.reconstruction_before, none.reconstruction_after) == (0.3, 0.3)
    assert none.blocking_before == none.blocking_after == none.gates > 0
    assert none.bundle == b""
    assert (one.rehydrated, one.issued, one.served_by) == (True, 1, "custodian 1 of 1")
    # raised on the attester's authority (the trust policy), and the gates proceed
    assert (one.reconstruction_before, one.reconstruction_after) == (0.3, 1.0)
    assert (one.blocking_before, one.blocking_after) == (one.gates, 0)
    # provnet attest verify: VALID under the policy, INVALID when no attester is trusted
    assert one.verify_exit == 0
    assert one.detail.startswith("VALID attestation")
    assert one.verify_untrusted_exit == 1
    bundle = json.loads(one.bundle)
    assert bundle["type"] == "attestation-bundle"
    assert bundle["value_ref"] == "death-spiral/v0"


def test_results_at_0_and_100_percent_write_their_figures(tmp_path: Path) -> None:
    """Cells every trial of which was (un)available: the interval ends at 1 (0), and
    the figure's error bars are never negative (a full sweep has such cells)."""
    from harness.custody.report import write_results

    settings = CustodySettings(ks=(0, 3), ps=(0.05,), departures=(Departures.INDEPENDENT,))
    cells = [
        CellResult(
            Departures.INDEPENDENT, 3, 0.05, closed_form(3, 0.05), trials=103, available=103
        ),
        CellResult(Departures.INDEPENDENT, 0, 0.05, closed_form(0, 0.05), trials=7, available=0),
    ]
    assert cells[0].interval[1] == 1.0
    assert cells[1].interval[0] == 0.0
    write_results(tmp_path, settings, cells, wall_seconds=0.0, where="test")
    assert (tmp_path / "custody_availability.png").stat().st_size > 0


def test_departure_modes_side_by_side_in_summary_and_figure(tmp_path: Path) -> None:
    """Cells played under several departure modes get one row per (k, p) with a column
    per mode, and a figure; a (k, p) played under one mode only gets no row."""
    from harness.custody.report import MODES_PNG, write_results

    settings = CustodySettings(ks=(1, 2), ps=(0.5,), departures=tuple(Departures))
    cells = [
        CellResult(Departures.INDEPENDENT, 1, 0.5, 0.75, trials=1_800, available=1_361),
        CellResult(Departures.OPERATOR, 1, 0.5, 0.6875, trials=2_100, available=1_440),
        CellResult(Departures.OPERATOR_PLACED, 1, 0.5, 0.75, trials=1_800, available=1_350),
        CellResult(Departures.OPERATOR, 2, 0.5, 0.78, trials=1_600, available=1_250),
    ]
    write_results(tmp_path, settings, cells, wall_seconds=0.0, where="test")
    summary = (tmp_path / "summary.md").read_text()
    assert "## Departure modes side by side" in summary
    (row,) = [line for line in summary.splitlines() if line.startswith("| 1 | 0.5 | 75.6%")]
    assert row.count(" vs ") == 3
    assert "68.6% (" in row  # 1,440 of 2,100
    assert "75.0% (" in row  # 1,350 of 1,800
    lines = summary.splitlines()
    assert not any(line.startswith("| 2 | 0.5 | ") and " vs " in line for line in lines)
    assert (tmp_path / MODES_PNG).stat().st_size > 0
    meta = json.loads((tmp_path / "custody_meta.json").read_text())
    assert MODES_PNG in meta["files"]
    # one mode only: no section, no figure
    alone = tmp_path / "alone"
    alone.mkdir()
    write_results(alone, settings, cells[:1], wall_seconds=0.0, where="test")
    assert "side by side" not in (alone / "summary.md").read_text()
    assert not (alone / MODES_PNG).exists()


def test_split_view_rows_land_in_csv_and_summary(tmp_path: Path) -> None:
    """The witness-quorum rows next to the availability cells: 0 conflicting heads
    accepted where 2q > n + f, both accepted where not (the bound is tight)."""
    from harness.custody.report import SPLIT_VIEW_CSV, write_results
    from harness.custody.split_view import run_rows

    rows = asyncio.run(run_rows([(3, 2, 0), (3, 2, 1)], root=tmp_path / "nodes"))
    settings = CustodySettings(ks=(0,), ps=(0.5,), departures=(Departures.INDEPENDENT,))
    cell = CellResult(Departures.INDEPENDENT, 0, 0.5, 0.5, trials=1, available=1)
    out = tmp_path / "out"
    out.mkdir()
    write_results(out, settings, [cell], wall_seconds=0.0, where="test", split_view=rows)
    with (out / SPLIT_VIEW_CSV).open() as fh:
        got = {(r["n"], r["q"], r["f"]): r for r in csv.DictReader(fh)}
    assert got[("3", "2", "0")]["conflicting_accepted"] == "0"
    assert got[("3", "2", "0")]["bound_holds"] == "1"
    assert got[("3", "2", "1")]["conflicting_accepted"] == "2"
    assert all(r["honest_accused"] == "0" for r in got.values())
    assert "## Split views against a witness quorum" in (out / "summary.md").read_text()
    meta = json.loads((out / "custody_meta.json").read_text())
    assert SPLIT_VIEW_CSV in meta["files"]


@pytest.mark.long
def test_cli_nodes_departs_extra_processes_and_leaves_the_running_ones_as_found(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--nodes``: holder and witness are running node processes; the origins are
    extra processes started, stopped and removed here (long: ~15 s of processes)."""
    import dataclasses

    import structlog

    from nodes.auth import OPERATOR_KEY_FILENAME, create_operator_key
    from nodes.cluster import NodeSpec, free_ports, peer_list, start_nodes, stop_all

    operator = create_operator_key(tmp_path / OPERATOR_KEY_FILENAME)
    monkeypatch.setenv("PROVNET_OPERATOR_KEY_FILE", str(tmp_path / OPERATOR_KEY_FILENAME))
    names = ["holder", "witness"]
    base = [
        NodeSpec(n, p, tmp_path / n, tmp_path / f"{n}.log")
        for n, p in zip(names, free_ports(2), strict=True)
    ]
    specs = [
        dataclasses.replace(s, peers=peer_list(base, s.name), operator_keys=(operator.key_id,))
        for s in base
    ]
    started = start_nodes(specs, timeout=60.0)
    try:
        nodes = ",".join(f"{r.name}={r.address}" for r, _ in started)
        argv = ["experiment", "custody", "--nodes", nodes, "--k", "0,1", "--p", "0.5"]
        argv += ["--trials", "6", "--batch", "6", "--departures", "independent"]
        argv += ["--node-dir", str(tmp_path / "extra")]
        try:
            rc = main([*argv, "--out", str(tmp_path / "out"), "--no-progress"])
        finally:
            structlog.reset_defaults()
        assert rc == 0, capsys.readouterr().err
        with (tmp_path / "out" / "custody_availability.csv").open() as fh:
            k0, k1 = list(csv.DictReader(fh))
        assert int(k0["available"]) + int(k0["departed_origins"]) == 6
        assert k0["honest_accused"] == k1["honest_accused"] == "0"
        # k = 1: every value carried its custodian's statement, taken by a process
        assert k1["custody_statements"] == "6"
        assert int(k1["available"]) >= 6 - int(k1["departed_origins"])
        # the running nodes as found; the extra nodes and their directories gone
        assert all(p.poll() is None for _, p in started)
        assert list((tmp_path / "extra").iterdir()) == []
    finally:
        stop_all(started, grace=2.0)


def test_a_tls_ca_without_its_key_is_refused_naming_the_missing_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The extra node processes must serve certificates issued under the running
    # nodes' CA: with the CA certificate alone the command says the key is what is
    # missing, before it reaches any node or writes anything.
    import datetime as dt
    import shutil

    from nodes.tls import new_ca

    ca = new_ca(tmp_path / "ca", now=dt.datetime.now(dt.UTC))
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(ca, alone / "ca.pem")
    monkeypatch.setenv("PROVNET_TLS_CA", str(alone / "ca.pem"))
    nodes = "a=127.0.0.1:1,b=127.0.0.1:2"
    argv = ["experiment", "custody", "--nodes", nodes, "--k", "0", "--p", "0.5"]
    rc = main([*argv, "--out", str(tmp_path / "x"), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith(f"provnet: error: --tls-ca ($PROVNET_TLS_CA) {alone / 'ca.pem'}:")
    assert f"its key {alone / 'ca.key'} is missing" in err
    assert err.count("\n") == 1
    assert not (tmp_path / "x").exists()
    # --tls-ca means running nodes: in-process it is a usage error
    rc = main(["experiment", "custody", "--tls-ca", str(ca), "--out", str(tmp_path / "y")])
    assert rc == 2
    assert "--tls-ca: applies to running nodes" in capsys.readouterr().err
    assert not (tmp_path / "y").exists()
