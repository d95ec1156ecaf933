"""structural_min and structural_perhop carry identical lineage (why sharing is sound)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.config import DEFAULT_PROFILES
from harness.events import Decision
from harness.gates import GATES, GateView, Mode, evaluate
from harness.replay import Replayer, ReplayParams
from harness.trajectory import generate


@settings(max_examples=20, deadline=None)
@given(
    seed=st.integers(min_value=0, max_value=5_000),
    cadence=st.sampled_from([2, 5, 10, 25]),
    keep=st.sampled_from([1, 3, 5, 8]),
    profile=st.sampled_from(sorted(DEFAULT_PROFILES)),
)
def test_structural_arms_have_the_same_lineage_at_every_decision(
    seed: int, cadence: int, keep: int, profile: str
) -> None:
    replayer = Replayer(ReplayParams(cadence=cadence, keep=keep, penalty=0.05, prose_seed=seed))
    lineage_gates = [g for g in GATES if g.gate_class.is_lineage]
    for ev in generate(seed, 200, 5, DEFAULT_PROFILES[profile]):
        replayer.feed(ev)
        if not isinstance(ev, Decision):
            continue
        a = replayer.smin.values[ev.value_id]
        b = replayer.sper.values[ev.value_id]
        assert [h.hop_id for h in a.visible] == [h.hop_id for h in b.visible]
        assert a.folded == b.folded
        assert a.taints == b.taints
        assert a.vec[:4] == b.vec[:4]
        # and so every lineage decision, in every mode, is the same for both arms
        va = GateView(a.vec, a.taints, a.visible, a.folded, a.history_truncated)
        vb = GateView(b.vec, b.taints, b.visible, b.folded, b.history_truncated)
        for gate in lineage_gates:
            for mode in Mode:
                assert evaluate(gate, va, mode, replayer.log) == evaluate(
                    gate, vb, mode, replayer.log
                )


def test_shared_rows_equal_separately_computed_rows() -> None:
    # the rows of the two structural arms agree on every lineage gate and mode
    replayer = Replayer(ReplayParams(cadence=10, prose_seed=4))
    for ev in generate(4, 500, 5, DEFAULT_PROFILES["high"]):
        replayer.feed(ev)
    rows = replayer.result().gate_rows
    by_arm: dict[str, dict[tuple[object, object], tuple[object, ...]]] = {}
    for row in rows:
        if row[2] in ("lineage_blocklist", "lineage_allowlist"):
            by_arm.setdefault(str(row[0]), {})[(row[1], row[4])] = row[5:]
    assert by_arm["structural_min"] == by_arm["structural_perhop"]
    assert len(by_arm["structural_min"]) == 12
