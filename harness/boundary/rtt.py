"""The boundary slice swept over link round-trip times: what crossing costs as the WAN grows.

:func:`run_rtt_sweep` plays the same slice once per RTT, each time on fresh
gRPC nodes of this process with a user-space proxy on every directed link
between two nodes (:mod:`harness.boundary.links`: deliveries, demands,
re-asks, witness challenges and the witness's own demands all cross a
link; each adds ``rtt_ms`` per request/response exchange). RTT 0 still
goes through the proxies, so that point shows what the proxies themselves
cost next to the in-process floor.

Guarantees:

- each RTT is a complete boundary run: decisions are fingerprinted and
  compared with the in-process replay of the same events run by run, so
  ``runs_as_in_process`` says at which RTT the deadlines were still met;
- when a demand's deadline (``--deadline-ms``) is below what the link
  allows, the rehydration ends ``unanswered`` and the evidence names the
  origin — ``accused`` lists every node named at that RTT and
  ``correct_accused`` counts accusations of nodes started faithful;
- in-process is the floor: the in-process rehydrating-decision latencies
  (the same gates on the cold log) measured beside every RTT's runs;
- outputs are written by the caller into a staged folder
  (:func:`harness._outdir.staged_dir`): ``boundary_rtt.csv`` (columns in
  :data:`RTT_COLUMNS`, documented in ``docs/boundary.md``),
  ``boundary_rtt.json``, ``boundary_rtt.md``, ``boundary_rtt.png`` and the
  evidence files under ``evidence/rtt_<ms>ms/``.
"""

from __future__ import annotations

import asyncio
import csv
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from harness.arms import STRUCTURAL_ARMS
from harness.boundary.choices import TransportKind
from harness.boundary.records import (
    BoundaryError,
    BoundaryOutcome,
    BoundarySettings,
    overall_fingerprints,
)
from harness.boundary.report import evidence_file, percentile
from harness.boundary.runner import run_boundary_async
from harness.config import ExperimentConfig

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "RTT_COLUMNS",
    "RTT_TABLE_NOTES",
    "RttPoint",
    "RttSweep",
    "print_rtt_point",
    "print_rtt_sweep",
    "rtt_figure_of",
    "rtt_point",
    "run_rtt_sweep",
    "write_rtt_outputs",
]

#: Columns of ``boundary_rtt.csv`` in order (meanings: docs/boundary.md).
RTT_COLUMNS = [
    "rtt_ms",
    "runs",
    "runs_as_in_process",
    "fingerprint",
    "arm_decisions",
    "rehydrating_decisions",
    "rehydrate_p50_ms",
    "rehydrate_p99_ms",
    "in_process_p50_ms",
    "in_process_p99_ms",
    "delivery_p50_ms",
    "delivery_p99_ms",
    "rpcs_per_decision",
    "rehydrate_rpcs_per_rehydration",
    "bytes_per_decision",
    "rehydrate_bytes_per_rehydration",
    "link_bytes_per_decision",
    "failed_rehydrations",
    "evidence",
    "accused",
    "correct_accused",
    "wall_s",
]


@dataclass(frozen=True, slots=True)
class RttPoint:
    """One RTT of the sweep: the slice's costs and outcome at that RTT (see RTT_COLUMNS)."""

    rtt_ms: float
    runs: int
    runs_as_in_process: int
    fingerprint: str
    in_process_fingerprint: str
    arm_decisions: int
    rehydrating_decisions: int
    rehydrate_p50_ms: float
    rehydrate_p99_ms: float
    in_process_p50_ms: float
    in_process_p99_ms: float
    delivery_p50_ms: float
    delivery_p99_ms: float
    rpcs_per_decision: float
    rehydrate_rpcs_per_rehydration: float
    bytes_per_decision: float
    rehydrate_bytes_per_rehydration: float
    link_bytes_per_decision: float
    failed_rehydrations: int
    evidence: dict[str, int]
    accused: tuple[str, ...]
    correct_accused: int
    wall_s: float
    #: the in-process latencies (s), pooled over the sweep for the floor line
    in_process_latencies: tuple[float, ...] = field(default=(), repr=False)

    def row(self) -> list[object]:
        evidence = ";".join(f"{k}:{v}" for k, v in sorted(self.evidence.items()))
        return [
            f"{self.rtt_ms:g}",
            self.runs,
            self.runs_as_in_process,
            self.fingerprint,
            self.arm_decisions,
            self.rehydrating_decisions,
            f"{self.rehydrate_p50_ms:.3f}",
            f"{self.rehydrate_p99_ms:.3f}",
            f"{self.in_process_p50_ms:.3f}",
            f"{self.in_process_p99_ms:.3f}",
            f"{self.delivery_p50_ms:.3f}",
            f"{self.delivery_p99_ms:.3f}",
            f"{self.rpcs_per_decision:.4f}",
            f"{self.rehydrate_rpcs_per_rehydration:.4f}",
            f"{self.bytes_per_decision:.1f}",
            f"{self.rehydrate_bytes_per_rehydration:.1f}",
            f"{self.link_bytes_per_decision:.1f}",
            self.failed_rehydrations,
            evidence or "none",
            ";".join(self.accused) or "none",
            self.correct_accused,
            f"{self.wall_s:.2f}",
        ]


def _ms(values: Sequence[float], q: float) -> float:
    return percentile(values, q) * 1000.0


def rtt_point(outcome: BoundaryOutcome) -> RttPoint:
    """The sweep's quantities of one boundary run played at ``outcome.settings.rtt_ms``."""
    rtt = outcome.settings.rtt_ms
    if rtt is None:
        raise BoundaryError("rtt_point needs a run played with an added RTT (rtt_ms)")
    arms = [a.value for a in STRUCTURAL_ARMS]
    costs = outcome.arm_costs
    wire = outcome.wire
    decisions = sum(c.decisions for c in costs.values())
    rehydrations = sum(costs[a].rehydrations for a in arms)
    across = [x for a in arms for x in costs[a].rehydration_latencies]
    local = [x for a in arms for x in costs[a].inproc_latencies]
    deliveries = [x for c in costs.values() for x in c.delivery_latencies]

    def total(kind: str, key: str, over: Sequence[str]) -> float:
        return sum(wire.get((a, kind), {}).get(key, 0.0) for a in over)

    all_arms = list(costs)
    delivery_rpcs = total("delivery", "rpcs", all_arms)
    rehydrate_rpcs = total("rehydrate", "rpcs", arms)
    delivery_bytes = total("delivery", "request_bytes", all_arms) + total(
        "delivery", "response_bytes", all_arms
    )
    rehydrate_bytes = total("rehydrate", "request_bytes", arms) + total(
        "rehydrate", "response_bytes", arms
    )
    link = wire.get(("links", "tcp"), {})
    link_bytes = link.get("bytes_to_target", 0.0) + link.get("bytes_from_target", 0.0)
    in_fp, b_fp = overall_fingerprints(outcome)
    accused = tuple(sorted({e.accused_name for e in outcome.evidence}))
    return RttPoint(
        rtt_ms=rtt,
        runs=len(outcome.runs),
        runs_as_in_process=sum(1 for r in outcome.runs if r.fingerprints_equal),
        fingerprint=b_fp,
        in_process_fingerprint=in_fp,
        arm_decisions=decisions,
        rehydrating_decisions=rehydrations,
        rehydrate_p50_ms=_ms(across, 50),
        rehydrate_p99_ms=_ms(across, 99),
        in_process_p50_ms=_ms(local, 50),
        in_process_p99_ms=_ms(local, 99),
        delivery_p50_ms=_ms(deliveries, 50),
        delivery_p99_ms=_ms(deliveries, 99),
        rpcs_per_decision=(delivery_rpcs + rehydrate_rpcs) / decisions if decisions else 0.0,
        rehydrate_rpcs_per_rehydration=rehydrate_rpcs / rehydrations if rehydrations else 0.0,
        bytes_per_decision=(delivery_bytes + rehydrate_bytes) / decisions if decisions else 0.0,
        rehydrate_bytes_per_rehydration=rehydrate_bytes / rehydrations if rehydrations else 0.0,
        link_bytes_per_decision=link_bytes / decisions if decisions else 0.0,
        failed_rehydrations=sum(costs[a].failed_rehydrations for a in arms),
        evidence=outcome.evidence_by_kind,
        accused=accused,
        correct_accused=outcome.correct_accused,
        wall_s=outcome.wall_seconds,
        in_process_latencies=tuple(local),
    )


@dataclass(frozen=True, slots=True)
class RttSweep:
    settings: BoundarySettings
    points: tuple[RttPoint, ...]
    outcomes: tuple[BoundaryOutcome, ...]

    @property
    def in_process_floor_ms(self) -> tuple[float, float]:
        """(p50, p99) of the in-process rehydrating decisions, pooled over every RTT's runs."""
        pooled = [x for p in self.points for x in p.in_process_latencies]
        return _ms(pooled, 50), _ms(pooled, 99)


def _evidence_dir(out: Path | None, rtt: float) -> Path | None:
    return None if out is None else out / "evidence" / f"rtt_{rtt:g}ms"


def run_rtt_sweep(
    cfg: ExperimentConfig,
    settings: BoundarySettings,
    rtts: Sequence[float],
    out: Path | None = None,
    *,
    progress: bool | None = None,
    on_point: Callable[[RttPoint], None] | None = None,
) -> RttSweep:
    """Play ``settings``' slice once per RTT (transport grpc, proxies per link).

    ``on_point`` is called as each RTT completes. With ``out`` the evidence
    files go to ``out/evidence/rtt_<ms>ms/`` and the sweep's files are
    written there (:func:`write_rtt_outputs`).
    """
    if not rtts:
        raise BoundaryError("an RTT sweep needs at least one RTT")
    base = replace(settings, rtt_ms=rtts[0])
    base.validate(cfg)
    points: list[RttPoint] = []
    outcomes: list[BoundaryOutcome] = []
    for i, rtt in enumerate(rtts):
        if progress is not False:
            print(f"rtt {rtt:g} ms ({i + 1}/{len(rtts)})", file=sys.stderr, flush=True)
        outcome = asyncio.run(
            run_boundary_async(
                cfg,
                replace(settings, rtt_ms=rtt),
                evidence_dir=_evidence_dir(out, rtt),
                progress=progress,
            )
        )
        point = rtt_point(outcome)
        points.append(point)
        outcomes.append(outcome)
        if on_point is not None:
            on_point(point)
    sweep = RttSweep(base, tuple(points), tuple(outcomes))
    if out is not None:
        write_rtt_outputs(sweep, out)
    return sweep


# --------------------------------------------------------------------------- files


def slice_label(settings: BoundarySettings) -> str:
    seeds = settings.seeds
    seed_text = (
        f"seeds {seeds[0]}–{seeds[-1]}"
        if len(seeds) > 1 and list(seeds) == list(range(seeds[0], seeds[-1] + 1))
        else "seeds " + ",".join(str(s) for s in seeds)
    )
    cadences = ",".join(str(c) for c in settings.cadences)
    return f"C = {cadences}, {','.join(settings.profiles)}, {seed_text}, {settings.steps} steps"


def conditions_label(settings: BoundarySettings) -> str:
    match settings.transport:
        case TransportKind.GRPC:
            where = "gRPC, nodes in one process, one proxy per directed link"
        case TransportKind.MEMORY | TransportKind.REMOTE:
            where = settings.transport.value
    fault = settings.fault.value
    return f"{where}; fault: {fault}; deadline {settings.deadline_ms} ms"


#: What each column of :func:`rtt_table` means (``boundary_rtt.md`` prints them under it).
RTT_TABLE_NOTES = (
    "Columns (`/dec`: per arm decision point, every arm's deliveries counted):",
    "",
    "- RTT ms: round-trip time added on every link between two nodes by a user-space"
    " proxy; `in-process` is the same slice decided in one process (the floor);",
    "- runs as in-process: runs whose decision log equals the in-process one;",
    "- rehydrating p50 / p99 ms: latency of a decision that needed folded hops (demand,"
    " verification, the gates);",
    "- delivery p50 ms: latency of one delivery, origin to holder;",
    "- RPCs /dec: calls made per arm decision (deliveries; demands, re-asks, witness challenges);",
    "- bytes /dec: protobuf bytes of those calls' requests and responses per arm decision"
    " (what the messages carry, without HTTP/2 or TCP framing);",
    "- rehydr. B: protobuf bytes of the demand and challenge traffic per rehydrating decision;",
    "- link TCP B /dec: bytes the link proxies carried on their TCP connections, both"
    " directions, per arm decision (the messages with gRPC's HTTP/2 framing and"
    " control traffic);",
    "- evidence (accused): evidence records by kind, and the nodes they name.",
)


def rtt_table(sweep: RttSweep) -> str:
    """The sweep as a Markdown table (the command prints it; ``boundary_rtt.md`` holds it)."""
    floor50, floor99 = sweep.in_process_floor_ms
    lines = [
        "| RTT ms | runs as in-process | rehydrating p50 / p99 ms | delivery p50 ms |"
        " RPCs /dec | bytes /dec | rehydr. B | link TCP B /dec | evidence (accused) |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| in-process | – | {floor50:.3f} / {floor99:.3f} | – | 0 | – | – | – | – |",
    ]
    for p in sweep.points:
        evidence = ", ".join(f"{k} {v}" for k, v in sorted(p.evidence.items())) or "none"
        if p.accused:
            evidence += f" ({', '.join(p.accused)})"
        lines.append(
            f"| {p.rtt_ms:g} | {p.runs_as_in_process}/{p.runs} |"
            f" {p.rehydrate_p50_ms:.2f} / {p.rehydrate_p99_ms:.2f} |"
            f" {p.delivery_p50_ms:.2f} | {p.rpcs_per_decision:.2f} |"
            f" {p.bytes_per_decision:,.0f} | {p.rehydrate_bytes_per_rehydration:,.0f} |"
            f" {p.link_bytes_per_decision:,.0f} | {evidence} |"
        )
    return "\n".join(lines) + "\n"


def write_rtt_outputs(sweep: RttSweep, out: Path) -> list[Path]:
    """``boundary_rtt.csv``, ``.json``, ``.md`` and ``.png`` into ``out``; returns the paths."""
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    path = out / "boundary_rtt.csv"
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(RTT_COLUMNS)
        writer.writerows(p.row() for p in sweep.points)
    written.append(path)
    floor50, floor99 = sweep.in_process_floor_ms
    meta = {
        "settings": {k: v for k, v in sweep.settings.to_json().items() if k != "rtt_ms"},
        "rtts_ms": [p.rtt_ms for p in sweep.points],
        "in_process_floor_ms": {"p50": floor50, "p99": floor99},
        "points": [
            {
                **dict(zip(RTT_COLUMNS, p.row(), strict=True)),
                "in_process_fingerprint": p.in_process_fingerprint,
                "evidence": p.evidence,
                "accused": list(p.accused),
                "outcomes": {f"{o}:{k}": n for (o, k), n in sorted(o_.outcomes.items())},
                "evidence_records": [
                    {
                        "run": e.run,
                        "step": e.step,
                        "arm": e.arm,
                        "kind": e.kind,
                        "accused": e.accused_name,
                        "verified": e.verified,
                        "correct_origin": e.correct_origin,
                        "file": evidence_file(e.path, out),
                    }
                    for e in o_.evidence
                ],
                "links": o_.wire.get(("links", "tcp"), {}),
            }
            for p, o_ in zip(sweep.points, sweep.outcomes, strict=True)
        ],
    }
    path = out / "boundary_rtt.json"
    path.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    written.append(path)
    path = out / "boundary_rtt.md"
    path.write_text(
        f"# Boundary cost vs link RTT\n\nSlice: {slice_label(sweep.settings)};"
        f" {conditions_label(sweep.settings)}.\n\n"
        + rtt_table(sweep)
        + "\n"
        + "\n".join(RTT_TABLE_NOTES)
        + "\n",
        encoding="utf-8",
    )
    written.append(path)
    path = out / "boundary_rtt.png"
    rtt_figure(sweep, path)
    written.append(path)
    return written


def print_rtt_point(point: RttPoint) -> None:
    """One line per RTT as it completes (the command's running account)."""
    evidence = ", ".join(f"{k} {v}" for k, v in sorted(point.evidence.items())) or "none"
    accused = f" naming {', '.join(point.accused)}" if point.accused else ""
    print(
        f"rtt {point.rtt_ms:g} ms: rehydrating p50 {point.rehydrate_p50_ms:.2f} ms,"
        f" p99 {point.rehydrate_p99_ms:.2f} ms; {point.rpcs_per_decision:.2f} RPCs and"
        f" {point.bytes_per_decision:,.0f} B per decision; runs as in-process"
        f" {point.runs_as_in_process}/{point.runs}; evidence {evidence}{accused}"
        f" ({point.wall_s:.1f} s)",
        flush=True,
    )


def print_rtt_sweep(sweep: RttSweep, out: Path) -> None:
    """The summary the command ends with: conditions, the table, the files."""
    print(f"boundary RTT sweep ({conditions_label(sweep.settings)}) → {out}/")
    print(f"slice: {slice_label(sweep.settings)}")
    print(rtt_table(sweep), end="")
    fp = {p.in_process_fingerprint for p in sweep.points}
    print(f"fingerprint in-process {', '.join(sorted(fp))}")
    print(
        f"correct origins accused: {sum(p.correct_accused for p in sweep.points)};"
        f" files: boundary_rtt.csv, boundary_rtt.png, boundary_rtt.md, boundary_rtt.json"
    )


def rtt_figure(sweep: RttSweep, path: Path) -> None:
    """``boundary_rtt.png``: :func:`rtt_figure_of` saved to ``path``."""
    import matplotlib.pyplot as plt

    fig = rtt_figure_of(sweep)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def rtt_figure_of(sweep: RttSweep) -> Figure:
    """Latency vs RTT (p50, p99, in-process floor, one RTT) beside bytes and RPCs per decision.

    The one-RTT reference is drawn as the line y = x across the positive RTTs
    of the axis, with a marker at each RTT swept, so it shows with a single
    positive RTT too.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = sweep.points
    xs = [p.rtt_ms for p in points]
    floor50, floor99 = sweep.in_process_floor_ms
    fig, (lat, cost) = plt.subplots(1, 2, figsize=(12, 6.0))

    lat.plot(xs, [p.rehydrate_p50_ms for p in points], "o-", color="tab:blue", label="across p50")
    lat.plot(xs, [p.rehydrate_p99_ms for p in points], "s--", color="tab:blue", label="across p99")
    lat.axhline(floor50, color="dimgray", lw=1.5, label=f"in-process p50 ({floor50:.3f} ms)")
    lat.axhline(
        floor99, color="dimgray", lw=1.5, ls="--", label=f"in-process p99 ({floor99:.3f} ms)"
    )
    positive = [x for x in xs if x > 0]
    if positive:
        lo, hi = min(1.0, min(positive)), max(positive)
        grid = [lo * (hi / lo) ** (k / 60) for k in range(61)]
        lat.plot(grid, grid, ":", color="tab:red", lw=1.5)
        lat.plot(positive, positive, "x:", color="tab:red", ms=7, label="one RTT (y = x)")
    for i, p in enumerate(points):
        lat.annotate(
            f"{p.rehydrate_p50_ms:.1f}",
            (p.rtt_ms, p.rehydrate_p50_ms),
            textcoords="offset points",
            xytext=(6, 4) if i == 0 else (-6, 6),
            ha="left" if i == 0 else "right",
            fontsize=8,
            color="tab:blue",
        )
    lat.set_xscale("symlog", linthresh=1.0)
    lat.set_yscale("log")
    lat.set_xticks(xs)
    lat.set_xticklabels([f"{x:g}" for x in xs])
    lat.set_xlabel("added round-trip time per link (ms)")
    lat.set_ylabel("rehydrating-decision latency (ms, log)")
    lat.set_title("Rehydrating decision: latency vs RTT", fontsize=11)
    lat.grid(True, which="both", alpha=0.3)
    lat.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3)

    cost.plot(
        xs,
        [p.bytes_per_decision for p in points],
        "o-",
        color="tab:green",
        label="protobuf bytes per arm decision",
    )
    cost.plot(
        xs,
        [p.link_bytes_per_decision for p in points],
        "^-",
        color="tab:olive",
        label="TCP bytes through the links per arm decision",
    )
    cost.set_xscale("symlog", linthresh=1.0)
    cost.set_xticks(xs)
    cost.set_xticklabels([f"{x:g}" for x in xs])
    cost.set_xlabel("added round-trip time per link (ms)")
    cost.set_ylabel("bytes per arm decision")
    cost.set_ylim(bottom=0, top=max([p.link_bytes_per_decision for p in points] + [1.0]) * 1.3)
    rpcs = cost.twinx()
    rpcs.plot(
        xs,
        [p.rpcs_per_decision for p in points],
        "s--",
        color="tab:purple",
        label="RPCs per arm decision (right axis)",
    )
    rpcs.set_ylabel("RPCs per arm decision")
    rpcs.set_ylim(bottom=0, top=max([p.rpcs_per_decision for p in points] + [1.0]) * 1.5)
    handles = cost.get_legend_handles_labels()
    more = rpcs.get_legend_handles_labels()
    cost.legend(
        handles[0] + more[0],
        handles[1] + more[1],
        fontsize=8,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.14),
        ncol=2,
    )
    cost.set_title("Bytes and RPCs per decision vs RTT", fontsize=11)
    cost.grid(True, alpha=0.3)

    fig.suptitle(
        f"Boundary cost vs link RTT — {conditions_label(sweep.settings)}\n"
        f"slice: {slice_label(sweep.settings)}",
        fontsize=11,
    )
    fig.tight_layout()
    return fig
