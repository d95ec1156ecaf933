"""An experiment promises what a node signs: a deadline the origin would refuse on a
request (OUT_OF_RANGE) is refused by the harness's in-process routes too, in the
words of :func:`contracts.rules.promise_refusal`."""

from __future__ import annotations

from pathlib import Path

import pytest

from contracts.rules import MAX_DEADLINE_MS, MIN_DEADLINE_MS, promise_refusal
from harness.boundary.choices import Role, TransportKind
from harness.boundary.records import BoundaryError, BoundarySettings
from harness.boundary.topology import NodeSpec, start_topology
from harness.cli import main
from harness.config import ExperimentConfig
from nodes.errors import PromiseOutOfRange

TOO_FAST = 10
TOO_FAST_SAYS = promise_refusal(deadline_ms=TOO_FAST)


@pytest.mark.parametrize("deadline", [TOO_FAST, MIN_DEADLINE_MS - 1, MAX_DEADLINE_MS + 1])
def test_boundary_settings_promising_what_no_node_signs_are_refused(deadline: int) -> None:
    # before, any deadline >= 1 ms was played: in-process origins signed it
    settings = BoundarySettings(seeds=(0,), steps=10, deadline_ms=deadline)
    with pytest.raises(BoundaryError) as refused:
        settings.validate(ExperimentConfig())
    assert str(refused.value) == promise_refusal(deadline_ms=deadline)


def test_the_smallest_deadline_a_node_signs_is_playable() -> None:
    BoundarySettings(seeds=(0,), steps=10, deadline_ms=MIN_DEADLINE_MS).validate(ExperimentConfig())


def test_experiment_boundary_with_a_10_ms_deadline_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["experiment", "boundary", "--deadline-ms", str(TOO_FAST), "--steps", "10"]
    argv += ["--seeds", "1", "--out", str(tmp_path / "out"), "--no-progress"]
    assert main(argv) == 2
    assert TOO_FAST_SAYS in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


async def test_in_process_nodes_of_a_topology_promising_10_ms_are_refused(
    tmp_path: Path,
) -> None:
    specs = [NodeSpec("origin", Role.ORIGIN), NodeSpec("holder", Role.HOLDER)]
    with pytest.raises(PromiseOutOfRange) as refused:
        await start_topology(tmp_path, specs, TransportKind.MEMORY, deadline_ms=TOO_FAST, reasks=0)
    assert TOO_FAST_SAYS in str(refused.value)
