"""The boundary benchmark's side-by-side bare round trip (``InRunEcho``).

A short gRPC slice with the probe installed: one bare echo call after the
rehydrating decisions (never inside one), each decision's rehydration and
Serve call timed, decisions unchanged, the echo server stopped with the
nodes and the player's and transport's calls restored afterwards.
The ratio itself is measured by running the script, not here.
"""

from __future__ import annotations

from types import ModuleType

from harness.boundary import topology
from harness.boundary.choices import TransportKind
from harness.boundary.runner import BoundarySettings, overall_fingerprints, run_boundary
from harness.config import ExperimentConfig
from nodes.transport import GrpcTransport
from tests.scripts import load_script


def _bench() -> ModuleType:
    return load_script("benchmarks/bench_boundary.py", "bench_boundary_under_test")


def test_in_run_echo_probes_after_rehydrating_decisions_and_restores_the_player() -> None:
    bench = _bench()
    cfg = ExperimentConfig()
    settings = BoundarySettings(cadences=(25,), seeds=(0,), steps=150)
    plain = run_boundary(cfg, settings, progress=False)
    grpc = BoundarySettings(cadences=(25,), seeds=(0,), steps=150, transport=TransportKind.GRPC)
    originals = (
        topology.LocalOps.rehydrate,
        topology.LocalOps.deliver,
        topology.Topology.close,
        GrpcTransport.ask,
    )
    probe = bench.InRunEcho()
    probe.install()
    try:
        outcome = run_boundary(cfg, grpc, progress=False)
    finally:
        probe.uninstall()
    assert (
        topology.LocalOps.rehydrate,
        topology.LocalOps.deliver,
        topology.Topology.close,
        GrpcTransport.ask,
    ) == originals
    rehydrations = sum(c.rehydrations for c in outcome.arm_costs.values())
    assert rehydrations > 0
    # one echo per rehydrating decision, made before the next delivery (a
    # decision at the very end of the run has no delivery after it)
    assert rehydrations - 1 <= len(probe.samples_ms) <= rehydrations
    assert all(t > 0 for t in probe.samples_ms)
    assert probe.spent_s > 0
    # inside each rehydrating decision: the holder's whole rehydration, and the
    # one Serve.Demand call of a faithful one, which takes part of it
    assert len(probe.rehydrate_ms) == rehydrations
    assert len(probe.serve_call_ms) == rehydrations
    for call, whole in zip(probe.serve_call_ms, probe.rehydrate_ms, strict=True):
        assert 0 < call < whole
    assert probe._server is None  # stopped with the nodes
    assert probe._channel is None
    # the probes decide nothing: the same decisions as without them
    assert overall_fingerprints(outcome)[1] == overall_fingerprints(plain)[1]
