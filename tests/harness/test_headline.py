"""The Part 5 published numbers (spec §8), reproduced to the last printed digit."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.analysis import Findings, analyze, closed_form_death_cycle
from harness.config import DEFAULT_PROFILES, ExperimentConfig
from harness.events import Decision
from harness.replay import Replayer, ReplayParams
from harness.runner import run_main
from harness.trajectory import generate


@pytest.fixture(scope="module")
def findings(tmp_path_factory: pytest.TempPathFactory) -> Findings:
    # the full default matrix (180 runs + the 5,000-step death spiral): ~2 s on 2 workers
    out = tmp_path_factory.mktemp("results")
    run_main(ExperimentConfig(), out, workers=2, progress=False)
    return analyze(out)


def test_headline_1_irreversible_false_proceed_is_3_47_percent(findings: Findings) -> None:
    assert findings.headline_cell == (25, "med")
    assert findings.irreversible_false_proceed_pct is not None
    assert f"{findings.irreversible_false_proceed_pct:.2f}" == "3.47"


def test_headline_2_min_dies_at_cycle_35_and_perhop_never(findings: Findings) -> None:
    assert findings.death_cycle_min == 35
    assert findings.death_cycle_perhop is None
    by_theta = {d.theta: d for d in findings.death_cycles}
    assert f"{by_theta[0.50].closed_form:.1f}" == "34.3"
    assert by_theta[0.50].empirical_min == 35
    assert f"{by_theta[0.55].closed_form:.1f}" == "29.6"
    assert by_theta[0.55].empirical_min == 29
    assert all(d.empirical_perhop is None for d in findings.death_cycles)
    assert findings.death_spiral_compactions == 200


def test_headline_3_prose_flips_1_39x_structural_min(findings: Findings) -> None:
    assert f"{findings.flip_prose_pct:.2f}" == "9.97"
    assert f"{findings.flip_min_pct:.2f}" == "7.16"
    assert f"{findings.flip_ratio:.2f}" == "1.39"


def test_headline_4_rehydration_costs_459_lookups_and_removes_every_flip(
    findings: Findings,
) -> None:
    assert findings.lineage_lookups_per_100 is not None
    assert f"{findings.lineage_lookups_per_100:.0f}" == "459"
    assert f"{findings.lineage_flip_blind_pct:.2f}" == "8.01"
    assert findings.lineage_flip_rehydrate_pct == 0.0


def test_per_class_flip_rates(findings: Findings) -> None:
    table = {
        r.gate_class: (
            f"{r.prose:.2f}",
            f"{r.structural_min:.2f}",
            f"{r.structural_perhop:.2f}",
        )
        for r in findings.per_class
    }
    assert table == {
        "score": ("2.44", "0.00", "0.00"),
        "reconstruction": ("4.97", "16.17", "0.00"),
        "lineage_blocklist": ("6.82", "8.50", "8.50"),
        "lineage_allowlist": ("29.41", "7.53", "7.53"),
    }


def test_payment_gate_three_ways(findings: Findings) -> None:
    rows = {r.mode: r for r in findings.payment}
    assert f"{rows['blind'].agreement_pct:.2f}" == "91.22"
    assert f"{rows['blind'].false_proceed_pct:.2f}" == "8.78"
    assert rows["blind"].false_stop_pct == 0.0
    assert f"{rows['degrade'].agreement_pct:.2f}" == "95.72"
    assert f"{rows['degrade'].false_stop_pct:.2f}" == "4.28"
    assert rows["degrade"].false_proceed_pct == 0.0
    assert f"{rows['rehydrate'].agreement_pct:.2f}" == "100.00"
    assert f"{rows['rehydrate'].lookups_per_100:.1f}" == "639.9"


def test_drift_only_on_reconstruction(findings: Findings) -> None:
    assert f"{findings.drift_min_reconstruction:.4f}" == "0.2100"
    assert f"{findings.drift_perhop_reconstruction:.4f}" == "0.0191"
    assert findings.drift_base_max == 0.0


def test_hypotheses_pass_pass_pass_fail(findings: Findings) -> None:
    assert [(h.hid, h.verdict) for h in findings.hypotheses] == [
        ("H1", "PASS"),
        ("H2", "PASS"),
        ("H3", "PASS"),
        ("H4", "FAIL"),
    ]
    h4 = findings.hypotheses[3]
    assert "reconstruction" in h4.measured
    assert "lineage_blocklist" in h4.measured


def test_closed_form_scales_as_one_over_p() -> None:
    assert closed_form_death_cycle(0.5, 0.04) == pytest.approx(
        closed_form_death_cycle(0.5, 0.02) / 2, rel=0.02
    )


def test_worked_example_seed_0_step_25_payment_false_proceed() -> None:
    # The write-up's anatomy of one false-proceed: seed 0, C=25, med, step 25.
    events = generate(0, 500, 5, DEFAULT_PROFILES["med"])
    replayer = Replayer(ReplayParams(cadence=25, prose_seed=0))
    for ev in events:
        if isinstance(ev, Decision) and ev.step == 25:
            replayer.feed(ev)
            working = ev.value_id
            break
        replayer.feed(ev)
    oracle = replayer.gt.values[working]
    assert sorted(oracle.taints) == sorted(
        [
            "taint:unverified_web:2",
            "taint:tool_flaky:6",
            "taint:tool_flaky:7",
            "taint:unverified_web:11",
            "taint:stale_cache:16",
            "taint:fallback_model:24",
        ]
    )
    compacted = replayer.smin.values[working]
    assert compacted.taints == {"taint:fallback_model:24"}
    assert compacted.folded is not None
    assert len(compacted.folded.folded_hop_ids) == 21
    _hops, nbytes = replayer.log.fetch(compacted.folded.folded_hop_ids)
    assert f"{nbytes / 1000:.1f}" == "2.6"  # "21 folded hops … 2.6 KB read"
    rows = {(r[0], r[1], r[4]): r for r in replayer.result().gate_rows}
    blind = rows[("structural_min", "payment_no_untrusted_taint", "blind")]
    assert blind[7] == 1  # the false-proceed at step 25
    rehydrated = rows[("structural_min", "payment_no_untrusted_taint", "rehydrate")]
    assert rehydrated[7] == 0
    assert rehydrated[11] == 21


def test_reduced_matrix_keeps_the_structural_findings(tmp_path: Path) -> None:
    # two seeds per cell: the by-construction and polarity findings hold on any subset
    cfg = ExperimentConfig(seeds=(0, 1), death_spiral_run=None)
    run_main(cfg, tmp_path, workers=1, progress=False)
    f = analyze(tmp_path)
    assert f.n_runs == 18
    verdicts = {h.hid: h.verdict for h in f.hypotheses}
    assert verdicts["H1"] == "PASS"
    assert verdicts["H3"] == "PASS"
    assert f.lineage_flip_rehydrate_pct == 0.0
    assert f.drift_base_max == 0.0
    score = next(r for r in f.per_class if r.gate_class == "score")
    assert score.structural_min == 0.0
    assert score.structural_perhop == 0.0


def test_seed_0_c25_med_irreversible_counts() -> None:
    # pinned counts of the worked-example run (seed 0, C=25, med)
    from harness.replay import replay

    result = replay(
        generate(0, 500, 5, DEFAULT_PROFILES["med"]), ReplayParams(cadence=25, prose_seed=0)
    )
    rows = {(r[0], r[1], r[4]): r[5:] for r in result.gate_rows}
    pay = "payment_no_untrusted_taint"
    wire = "send_wire_clean_window"
    # (n, agree, false_proceed, false_stop, proceed, oracle_proceed, lookups, bytes)
    assert rows[("structural_min", pay, "blind")] == (100, 89, 11, 0, 70, 59, 0, 0)
    assert rows[("structural_min", pay, "degrade")] == (100, 98, 0, 2, 57, 59, 0, 0)
    assert rows[("structural_min", pay, "rehydrate")] == (100, 100, 0, 0, 59, 59, 674, 81983)
    assert rows[("structural_min", wire, "blind")] == (100, 94, 0, 6, 70, 76, 0, 0)
    assert rows[("structural_min", wire, "rehydrate")] == (100, 100, 0, 0, 76, 76, 232, 28028)
    assert rows[("prose", pay, "blind")] == (100, 84, 16, 0, 75, 59, 0, 0)
    assert rows[("prose", wire, "blind")] == (100, 76, 0, 24, 52, 76, 0, 0)


def test_analysis_names_the_file_and_column_of_a_corrupt_count(tmp_path: Path) -> None:
    from harness.analysis import AnalysisError

    run_main(ExperimentConfig(seeds=(0,), death_spiral_run=None), tmp_path, workers=1)
    path = tmp_path / "gate_metrics.csv"
    original = path.read_text()
    lines = original.splitlines()
    cells = lines[1].split(",")
    cells[9] = "many"  # the n column
    lines[1] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n")
    expected = re.escape("gate_metrics.csv: column 'n' must be numeric")
    with pytest.raises(AnalysisError, match=expected):
        analyze(tmp_path)
    path.write_text(original)
    (tmp_path / "drift.csv").unlink()
    with pytest.raises(AnalysisError, match=re.escape("drift.csv: missing")):
        analyze(tmp_path)
