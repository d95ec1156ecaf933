"""The experiment on running nodes: separate OS processes, every call real gRPC.

Node processes are started with :func:`nodes.cluster.start_nodes` (the code
``provnet cluster up`` uses) on loopback, each with its own key, store and
fault; the slice is played on them by name and compared, run by run, with
the same slice on in-process nodes. Every process is stopped at the end.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.boundary.choices import TransportKind
from harness.boundary.runner import BoundaryOutcome, BoundarySettings, run_boundary
from harness.cli import main
from harness.config import ExperimentConfig
from nodes.auth import OPERATOR_KEY_ENV, OPERATOR_KEY_FILENAME, create_operator_key
from nodes.cluster import NodeRecord, NodeSpec, free_ports, peer_list, start_nodes, stop_all
from nodes.faults import FaultMode

pytestmark = pytest.mark.timeout(300)

CFG = ExperimentConfig()
SLICE: dict[str, object] = {"seeds": (0, 1), "steps": 150, "deadline_ms": 10_000}


class Nodes:
    """Started node processes by name; extra ones can be added (with a fault)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.started: dict[str, tuple[NodeRecord, subprocess.Popen[bytes]]] = {}
        # the nodes authorise this operator key; the runner finds it in root (its home)
        self.operator = create_operator_key(root / OPERATOR_KEY_FILENAME)
        self.faithful = ("a", "b", "c")

    def start(
        self, faults: dict[str, str | None], min_witnesses: dict[str, int] | None = None
    ) -> None:
        names = [*self.started, *faults]
        ports = dict(zip(faults, free_ports(len(faults)), strict=True))
        for name, (running, _) in self.started.items():
            ports[name] = int(running.address.rsplit(":", 1)[1])
        base = [
            NodeSpec(name, ports[name], self.root / name, self.root / f"{name}.log")
            for name in names
        ]
        specs = [
            NodeSpec(
                s.name,
                s.port,
                s.data_dir,
                s.log_file,
                peers=peer_list(base, s.name),
                fault=faults[s.name],
                operator_keys=(self.operator.key_id,),
                min_witnesses=(min_witnesses or {}).get(s.name),
            )
            for s in base
            if s.name in faults
        ]
        for record, proc in start_nodes(specs):
            self.started[record.name] = (record, proc)

    def members(self, *names: str) -> tuple[tuple[str, str], ...]:
        return tuple((n, self.started[n][0].address) for n in names)

    def stop(self) -> None:
        stop_all(list(self.started.values()), grace=2.0)


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nodes]:
    started = Nodes(tmp_path_factory.mktemp("remote-nodes"))
    try:
        # the origins with faults know a, b, c; b (holder) and c (witness) know them back
        started.start({"a": None, "b": None, "c": None})
        yield started
    finally:
        started.stop()


def _remote(nodes: Nodes, members: tuple[tuple[str, str], ...], **kw: object) -> BoundaryOutcome:
    settings = BoundarySettings(
        **{
            **SLICE,
            "transport": TransportKind.REMOTE,
            "nodes": members,
            "control_home": str(nodes.root),
            **kw,
        }  # type: ignore[arg-type]
    )
    return run_boundary(CFG, settings, progress=False)


def _local(**kw: object) -> BoundaryOutcome:
    settings = BoundarySettings(**{**SLICE, **kw})  # type: ignore[arg-type]
    return run_boundary(CFG, settings, progress=False)


def test_running_nodes_decide_as_in_process_nodes_run_by_run(nodes: Nodes) -> None:
    remote = _remote(nodes, nodes.members("a", "b", "c"), chain=("a", "b"), witness_name="c")
    local = _local()
    assert [r.label for r in remote.runs] == [r.label for r in local.runs]
    for r, loc in zip(remote.runs, local.runs, strict=True):
        assert r.boundary_fingerprint == loc.boundary_fingerprint == r.in_process_fingerprint
        assert r.boundary_rows == loc.boundary_rows
    # not vacuous: the holder process fetched hops from the origin process
    rehydrations = sum(
        remote.arm_costs[a].rehydrations for a in ("structural_min", "structural_perhop")
    )
    assert rehydrations > 0
    assert remote.wire[("structural_min", "rehydrate")]["hops_received"] > 0
    assert remote.evidence == []
    calls = remote.wire[("calls", "by_node")]
    assert calls["a:CommitCompaction"] > 0
    # heads travel as the in-process sender sends them: in full once, then as digests.
    # (Remote fold records name longer, session-scoped value refs, hence not equal; a
    # signed head resent with every delivery would more than double the statements.)
    for arm in ("structural_min", "structural_perhop"):
        remote_b = remote.arm_costs[arm].statement_bytes
        assert local.arm_costs[arm].statement_bytes <= remote_b
        assert remote_b < 1.2 * local.arm_costs[arm].statement_bytes
    assert remote.heads_committed == local.heads_committed > 0
    assert calls["b:Rehydrate"] == rehydrations
    assert remote.node_ids["a"] != remote.node_ids["b"]


def test_chain_on_running_nodes_forwards_and_decides_as_in_process(nodes: Nodes) -> None:
    remote = _remote(nodes, nodes.members("a", "b", "c"), chain=("a", "b", "c"), witness=False)
    local = _local(chain=("a", "b", "c"), witness=False)
    assert [r.boundary_fingerprint for r in remote.runs] == [
        r.boundary_fingerprint for r in local.runs
    ]
    assert remote.wire[("calls", "by_node")]["b:Deliver"] > 0  # b's Forward to c


@pytest.mark.parametrize("fault", [FaultMode.REFUSE, FaultMode.TAMPER, FaultMode.EQUIVOCATE])
def test_node_started_with_a_fault_gives_the_in_process_outcomes(
    nodes: Nodes, fault: FaultMode
) -> None:
    name = f"f{fault.value[:3]}"
    nodes.start({name: fault.value})
    remote = _remote(
        nodes, nodes.members(name, "b", "c"), chain=(name, "b"), witness_name="c", seeds=(0,)
    )
    # a running holder keeps folds it verified, so compare with the cached in-process holder
    local = _local(fault=fault, seeds=(0,), holder_cache=True)
    assert remote.settings.fault is fault
    assert [r.boundary_fingerprint for r in remote.runs] == [
        r.boundary_fingerprint for r in local.runs
    ]
    assert remote.runs[0].boundary_fingerprint != remote.runs[0].in_process_fingerprint
    assert remote.evidence_by_kind == local.evidence_by_kind
    assert remote.evidence
    assert all(e.accused_name == name for e in remote.evidence)
    assert all(e.verified for e in remote.evidence)
    if fault is FaultMode.EQUIVOCATE:  # a second head of one compaction slot
        assert "split_view" in remote.evidence_by_kind
    assert remote.correct_accused == 0


def test_without_a_named_witness_a_running_holder_asks_its_peers(nodes: Nodes) -> None:
    # In-process, --no-witness leaves an unanswered demand an unconfirmed suspicion
    # (counted, not evidence). A running holder asked to rehydrate with no witness
    # named asks its own peers instead, so there the suspicion is confirmed and
    # recorded: the results count each case as what it is.
    nodes.start({"d": FaultMode.DROP.value})
    kw: dict[str, object] = {"seeds": (0,), "steps": 60, "deadline_ms": 300, "witness": False}
    remote = _remote(nodes, nodes.members("d", "b"), chain=("d", "b"), **kw)
    local = _local(fault=FaultMode.DROP, holder_cache=True, **kw)
    rehydrations = sum(
        remote.arm_costs[a].rehydrations for a in ("structural_min", "structural_perhop")
    )
    assert rehydrations > 0
    assert local.evidence == []
    assert local.unconfirmed_suspicions == {"origin": rehydrations}
    assert {e.kind for e in remote.evidence} == {"unanswered"}
    assert {e.accused_name for e in remote.evidence} == {"d"}
    assert all(e.verified and e.path for e in remote.evidence)
    assert remote.unconfirmed_suspicions == {}


def test_a_suspicion_the_running_holder_does_not_record_the_driver_does_not_either(
    nodes: Nodes, tmp_path: Path
) -> None:
    """A holder asking two witness confirmations, one witness named: each unanswered
    rehydration comes back with its evidence body but is not recorded by the holder,
    so the driver neither counts nor writes it (an unconfirmed suspicion, as the
    in-process run counts one)."""
    nodes.start({"e": FaultMode.DROP.value})
    nodes.start({"m": None}, min_witnesses={"m": 2})
    kw: dict[str, object] = {"seeds": (0,), "steps": 60, "deadline_ms": 300}
    settings = BoundarySettings(
        **{
            **SLICE,
            **kw,
            "transport": TransportKind.REMOTE,
            "nodes": nodes.members("e", "m", "c"),
            "chain": ("e", "m"),
            "witness_name": "c",
            "control_home": str(nodes.root),
        }  # type: ignore[arg-type]
    )
    out = tmp_path / "out"
    remote = run_boundary(CFG, settings, out, progress=False)
    rehydrations = sum(
        remote.arm_costs[a].rehydrations for a in ("structural_min", "structural_perhop")
    )
    assert rehydrations > 0
    holder_evidence = nodes.root / "m" / "evidence"
    assert not list(holder_evidence.glob("*.json")), "the holder recorded a suspicion"
    assert remote.evidence == []
    assert remote.unconfirmed_suspicions == {"e": rehydrations}
    assert not list((out / "evidence").glob("*.json"))
    # The in-process holder with too few confirmations (none: no witness) likewise.
    local = _local(fault=FaultMode.DROP, holder_cache=True, witness=False, **kw)
    assert local.evidence == []
    assert local.unconfirmed_suspicions == {"origin": rehydrations}


def test_origin_killed_during_a_run_is_named_unanswered_and_the_run_completes(
    nodes: Nodes, tmp_path: Path
) -> None:
    nodes.start({"k": None})
    pid = nodes.started["k"][0].pid
    seen = [0]

    def kill_after_some_decisions() -> None:
        seen[0] += 1
        if seen[0] == 12:
            os.kill(pid, signal.SIGKILL)

    settings = BoundarySettings(
        **{
            **SLICE,
            "seeds": (0,),
            "deadline_ms": 300,
            "transport": TransportKind.REMOTE,
            "nodes": nodes.members("k", "b", "c"),
            "chain": ("k", "b"),
            "witness_name": "c",
            "control_home": str(nodes.root),
        }  # type: ignore[arg-type]
    )
    outcome = run_boundary(
        CFG, settings, tmp_path / "out", progress=False, on_decision=kill_after_some_decisions
    )
    assert seen[0] == 30  # every decision of the run was played
    assert outcome.evidence, "no evidence after the origin was killed"
    assert {e.kind for e in outcome.evidence} == {"unanswered"}
    assert {e.accused_name for e in outcome.evidence} == {"k"}
    assert all(e.verified for e in outcome.evidence)
    assert all(Path(e.path).is_file() for e in outcome.evidence)
    assert outcome.outcomes.get(("k", "lost"), 0) >= 1
    assert outcome.correct_accused == 0  # k counts as correct no more once lost


def test_cli_cluster_home_plays_on_the_recorded_cluster(
    nodes: Nodes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import structlog

    from nodes.cluster import ClusterState
    from nodes.home import Home

    home = Home(tmp_path / "home")
    home.ensure()
    # the cluster's operator key lives in its home, as 'provnet cluster up' leaves it
    shutil.copy2(nodes.root / OPERATOR_KEY_FILENAME, home.root / OPERATOR_KEY_FILENAME)
    ClusterState(tuple(nodes.started[n][0] for n in ("a", "b", "c"))).save(home.state_file)
    out = tmp_path / "out"
    try:
        code = main(
            [
                "experiment",
                "boundary",
                "--cluster",
                str(home.root),
                "--out",
                str(out),
                "--seeds",
                "1",
                "--steps",
                "100",
                "--no-progress",
            ]
        )
    finally:
        # the handler configures node logging process-wide (to this test's stderr)
        structlog.reset_defaults()
    printed = capsys.readouterr().out
    assert code == 0
    assert "(remote, fault none)" in printed
    assert "runs deciding exactly as in-process: 1/1" in printed
    assert (out / "boundary_costs.csv").is_file()


def test_cli_rejects_a_role_on_a_node_that_is_not_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "experiment",
            "boundary",
            "--nodes",
            "a=127.0.0.1:1,b=127.0.0.1:2",
            "--chain",
            "a,z",
            "--out",
            str(tmp_path / "o"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "z" in err
    assert "not among the running nodes" in err


def test_control_calls_without_the_operator_key_are_refused_by_the_nodes(
    nodes: Nodes, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # No key anywhere: the runner's control calls are unsigned and the node refuses them.
    monkeypatch.delenv(OPERATOR_KEY_ENV, raising=False)
    roles: dict[str, object] = {"chain": ("a", "b"), "witness_name": "c", "seeds": (0,)}
    with pytest.raises(Exception, match="UNAUTHENTICATED"):
        _remote(nodes, nodes.members("a", "b", "c"), **roles, control_home="")
    # A key the nodes do not authorise: signed, but not permitted.
    create_operator_key(tmp_path / OPERATOR_KEY_FILENAME)
    with pytest.raises(Exception, match="PERMISSION_DENIED"):
        _remote(nodes, nodes.members("a", "b", "c"), **roles, control_home=str(tmp_path))
