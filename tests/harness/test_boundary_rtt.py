"""The boundary slice over WAN links: a user-space proxy per directed link, swept over RTTs.

Real gRPC nodes in this process, a real :class:`nodes.linkproxy.LinkProxy`
on every directed link between two of them. Where the deadline is met the
decisions equal the in-process ones; where the RTT exceeds the deadline the
rehydrations end ``unanswered`` and the evidence names the origin — the one
node that owed the answer — and nobody else.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from contracts.evidence import EvidenceStatus, verify_evidence
from harness.boundary.choices import TransportKind
from harness.boundary.links import RoutedTransport
from harness.boundary.records import BoundaryError, BoundarySettings
from harness.boundary.rtt import RTT_COLUMNS, run_rtt_sweep
from harness.cli import main
from harness.config import ExperimentConfig
from nodes.config import MIN_DEADLINE_MS

CFG = ExperimentConfig()


def _settings(**kw: object) -> BoundarySettings:
    defaults: dict[str, object] = {
        "seeds": (0,),
        "transport": TransportKind.GRPC,
        "deadline_ms": 10_000,
    }
    return BoundarySettings(**{**defaults, **kw})  # type: ignore[arg-type]


def test_rtt_above_the_deadline_leaves_unanswered_evidence_naming_the_origin_only(
    tmp_path: Path,
) -> None:
    # A round trip on every link longer than the smallest deadline a node signs, that
    # deadline promised (docs/security.md): no demand can be answered in time, the
    # witness's neither.
    deadline = MIN_DEADLINE_MS
    rtt = deadline + 100.0
    settings = _settings(cadences=(10,), steps=30, deadline_ms=deadline, reasks=0)
    sweep = run_rtt_sweep(CFG, settings, [rtt], tmp_path, progress=False)
    (point,) = sweep.points
    (outcome,) = sweep.outcomes
    assert point.rehydrating_decisions > 0
    # Every answer needs >= rtt, the holder waits less. (A holder whose own deadline
    # timer fires late on a loaded machine may still take one in: that only errs
    # towards serving, so it is allowed here; what may never happen is below.)
    assert point.failed_rehydrations > point.rehydrating_decisions // 2
    assert point.evidence == {"unanswered": point.failed_rehydrations}
    assert point.accused == ("origin",)  # never the holder, the witness or anyone else
    origin_id = outcome.node_ids["origin"]
    for record in outcome.evidence:
        assert (record.kind, record.accused_name, record.accused) == (
            "unanswered",
            "origin",
            origin_id,
        )
        assert record.verified
        verdict = verify_evidence(Path(record.path).read_bytes(), now=2**62)
        assert verdict.accused == origin_id
        assert verdict.status is EvidenceStatus.WITNESS_CONFIRMED  # the witness saw it too
    # the links were in the path: a delivery is one request/response over one link
    assert point.delivery_p50_ms >= rtt
    assert point.link_bytes_per_decision > 0
    assert outcome.wire[("links", "tcp")]["links"] == 6  # 3 nodes, every directed pair
    with (tmp_path / "boundary_rtt.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == RTT_COLUMNS
    assert (rows[0]["rtt_ms"], rows[0]["evidence"], rows[0]["accused"]) == (
        f"{rtt:g}",
        f"unanswered:{point.failed_rehydrations}",
        "origin",
    )
    meta = json.loads((tmp_path / "boundary_rtt.json").read_text())
    files = [r["file"] for r in meta["points"][0]["evidence_records"]]
    assert files
    assert all((tmp_path / f).is_file() for f in files)
    assert all(f.startswith(f"evidence/rtt_{rtt:g}ms/") for f in files)


def test_cli_sweep_at_a_small_rtt_decides_as_in_process_and_writes_curve_and_figure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import structlog

    out = tmp_path / "rtt"
    argv = ["experiment", "boundary", "--rtt-ms", "0,3", "--steps", "100", "--seeds", "1"]
    try:
        rc = main([*argv, "--deadline-ms", "10000", "--out", str(out), "--no-progress"])
    finally:
        structlog.reset_defaults()  # the handler configures node logging process-wide
    assert rc == 0
    printed = capsys.readouterr().out
    assert "rtt 3 ms:" in printed
    assert "| in-process |" in printed
    with (out / "boundary_rtt.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [r["rtt_ms"] for r in rows] == ["0", "3"]
    meta = json.loads((out / "boundary_rtt.json").read_text())
    assert meta["settings"]["transport"] == "grpc"
    for row, point in zip(rows, meta["points"], strict=True):
        assert row["runs_as_in_process"] == row["runs"] == "1"
        assert row["fingerprint"] == point["in_process_fingerprint"]
        assert row["evidence"] == "none"
        assert row["accused"] == "none"
        assert int(row["rehydrating_decisions"]) > 0
        assert float(row["link_bytes_per_decision"]) > 0
    # the same slice fingerprints the same at every RTT whose deadlines are met
    assert rows[0]["fingerprint"] == rows[1]["fingerprint"]
    assert float(rows[1]["delivery_p50_ms"]) >= 3.0
    assert (out / "boundary_rtt.png").stat().st_size > 10_000
    assert "| 3 | 1/1 |" in (out / "boundary_rtt.md").read_text()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--rtt-ms", "0,x"], "expected RTTs in ms"),
        (["--rtt-ms", "5,5"], "appears twice"),
        (["--rtt-ms=-1"], "an RTT must be a finite number of ms >= 0"),
        (["--rtt-ms", "5", "--transport", "memory"], "--rtt-ms needs --transport grpc"),
        (["--rtt-ms", "5", "--nodes", "a=127.0.0.1:1,b=127.0.0.1:2"], "provnet link-proxy"),
    ],
)
def test_cli_rejects_bad_rtt_sweeps_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    rc = main(["experiment", "boundary", *extra, "--out", str(tmp_path / "x")])
    assert rc == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err
    assert not (tmp_path / "x").exists()


def test_settings_refuse_an_rtt_without_grpc_nodes_started_here() -> None:
    with pytest.raises(BoundaryError, match="transport grpc"):
        _settings(transport=TransportKind.MEMORY, rtt_ms=5.0).validate(CFG)
    with pytest.raises(BoundaryError, match="rtt_ms must be >= 0"):
        _settings(rtt_ms=-1.0).validate(CFG)


class _Recorder:
    def __init__(self) -> None:
        self.called: list[tuple[str, str]] = []

    async def challenge(self, address: str, **kw: object) -> object:
        self.called.append((address, str(kw["origin_address"])))
        return None


async def test_routed_transport_rewrites_only_the_called_address() -> None:
    inner = _Recorder()
    routed = RoutedTransport(inner, {"127.0.0.1:2": "127.0.0.1:9"})  # type: ignore[arg-type]
    await routed.challenge(
        "127.0.0.1:2",
        commitment=b"",
        obligation=b"",
        demand=b"",
        origin_address="127.0.0.1:2",
        timeout=1.0,
    )
    await routed.challenge(
        "127.0.0.1:3", commitment=b"", obligation=b"", demand=b"", origin_address="", timeout=1.0
    )
    # the witness routes the origin's address over its own link, not the caller's
    assert inner.called == [("127.0.0.1:9", "127.0.0.1:2"), ("127.0.0.1:3", "")]
