"""The workload of a simulation, read from YAML, and the cells it is played as.

A workload file is a YAML mapping; every key is optional (defaults below)
and unknown keys are errors, as in the experiment's config
(:mod:`harness.config`, whose reader this module uses)::

    agents: 100              # N, or a list of N to sweep (growth fit)
    seeds: 1                 # a count or a list
    steps: 150               # experiment steps per delegation (decision every 5)
    cadence: 25              # compaction cadence of the agents' memories
    profile: med             # degradation profile of the experiment
    deadline_ms: 1000        # what origins promise (serve deadline)
    horizon_s: 3600          # simulated time every agent lives (its delegation renewed)
    graph:
      max_depth: 10          # longest delivery chain (origin .. holder), hops
      p_forward: 0.5         # chance a delegation is forwarded (relays in the chain)
      max_fan_in: 3          # most origins whose values one holder merges
    network:                 # harness.simulate.network.LinkModel
      rtt_median_ms: 80
      rtt_sigma: 0.6
      jitter: 0.1
      loss: 0.01
      rto_ms: 1000
      think_s: 15            # mean pause before an origin's delivery (the pace)
    churn:                   # Pareto up/down times; exponential permanent departures
      up_scale_s: 600
      down_scale_s: 30
      alpha: 1.5
      departure_rate_per_h: 0.0
    adversary:
      fraction: 0.1          # f in [0, 1): the share of faulty agents of every role
      faults: [refuse, tamper, equivocate, slow, drop]   # what a faulty origin plays
      roles: [origin, relay, holder, witness]            # roles that may be faulty

**Cells.** Agents are grouped into delegations (*cells*): one holder, one
witness, 1..``max_fan_in`` origins whose values the holder's values merge
(fan-in), and — with probability ``p_forward`` — relays, so the chain from
the first origin to the holder has 1..``max_depth`` hops. Cells are drawn
until they hold N agents (the last one is cut to fit, keeping at least an
origin, a holder and a witness). Each cell plays boundary runs of ``steps``
on the real node core (:mod:`harness.simulate.engine`), one after the other
on the same nodes until its agents have lived ``horizon_s``: each run is a new
epoch in which the origins append and commit afresh under new obligations (the
delegation renewed), so no obligation has to outlive one run.

**Adversaries.** Every agent of a cell — origin, relay, holder, witness —
is faulty with probability ``f``, independently (``adversary.roles`` says which
roles may be), so a share f of the agents of every role is faulty, whatever
the cell's size. A faulty origin runs a fault drawn uniformly from
``faults``; a faulty relay or holder lies (it tries to frame the faithful
origins of the values it holds) and a faulty witness lies (it covers its
colluders and frames the faithful): :mod:`harness.simulate.adversary`.
All of a cell's faulty agents collude. The share actually drawn is reported.

**Churn** applies to origins and witnesses (the nodes a holder needs
later); holders and relays stay up.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from harness.boundary.choices import BOUNDARY_FAULTS
from harness.boundary.records import BoundarySettings
from harness.config import DEFAULT_PROFILES, ConfigError, _Reader
from harness.simulate.adversary import LIAR
from harness.simulate.network import Availability, LinkModel, SimNetwork, churn_schedule
from nodes.config import DEFAULT_SERVE_FOR_MS
from nodes.faults import FaultMode

#: The longest expected pace of a cell (s): half the obligations' lifetime,
#: leaving room for the spread of exponential think times and round trips.
MAX_CELL_S = DEFAULT_SERVE_FOR_MS / 2000

#: The most runs one cell plays to cover its horizon (a pace far below the horizon).
MAX_RUNS_PER_CELL = 1000

#: The faults an adversarial origin can play (every boundary fault but none).
ADVERSARY_FAULTS: tuple[FaultMode, ...] = tuple(
    f for f in BOUNDARY_FAULTS if f is not FaultMode.NONE
)

__all__ = [
    "ADVERSARY_FAULTS",
    "Cell",
    "ChurnModel",
    "Workload",
    "WorkloadError",
    "build_cells",
    "load_workload",
]


class WorkloadError(ConfigError):
    """A workload that cannot be read or built; the message names the key and what was expected."""


@dataclass(frozen=True, slots=True)
class ChurnModel:
    up_scale_s: float = 0.0
    down_scale_s: float = 30.0
    alpha: float = 1.5
    departure_rate_per_h: float = 0.0


@dataclass(frozen=True, slots=True)
class Workload:
    agents: tuple[int, ...] = (100,)
    seeds: tuple[int, ...] = (0,)
    steps: int = 150
    cadence: int = 25
    profile: str = "med"
    deadline_ms: int = 1000
    max_depth: int = 10
    p_forward: float = 0.5
    max_fan_in: int = 3
    link: LinkModel = field(default_factory=lambda: LinkModel(think_s=15.0))
    churn: ChurnModel = field(default_factory=ChurnModel)
    fraction: float = 0.0
    faults: tuple[FaultMode, ...] = ADVERSARY_FAULTS
    roles: tuple[str, ...] = ("origin", "relay", "holder", "witness")
    horizon_s: float = 3600.0

    @property
    def run_s(self) -> float:
        """The expected virtual seconds of one run of a cell: four deliveries per decision."""
        return 4 * (self.steps // 5) * self.link.think_s

    @property
    def runs_per_cell(self) -> int:
        """Runs a cell plays one after the other, each a fresh epoch with fresh
        obligations, so that the cell's agents live ``horizon_s`` (one without a pace)."""
        return max(1, math.ceil(self.horizon_s / self.run_s)) if self.run_s > 0 else 1


@dataclass(frozen=True, slots=True)
class Cell:
    """One delegation: its boundary settings, network model and who is faulty."""

    index: int
    settings: BoundarySettings
    network: SimNetwork
    departed: tuple[str, ...]
    #: node name -> fault label (an origin's fault mode, or "liar") of its faulty agents
    faulty: tuple[tuple[str, str], ...] = ()
    #: node name -> virtual time of its permanent departure
    departures: tuple[tuple[str, float], ...] = ()

    @property
    def agents(self) -> int:
        return len(self.settings.specs())

    @property
    def fault(self) -> FaultMode:
        return self.settings.fault


# --------------------------------------------------------------------------- reading


def _fail(source: str, key: str, expected: str, got: object) -> WorkloadError:
    return WorkloadError(f"{source}: key '{key}': expected {expected}, got {got!r}")


def _number(r: _Reader, key: str, default: float, low: float, *, open_low: bool = False) -> float:
    if key not in r.data:
        return default
    value = r.data[key]
    bound = f"> {low:g}" if open_low else f"≥ {low:g}"
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _fail(r.source, f"{r.prefix}{key}", f"a number {bound}", value)
    if value < low or (open_low and value == low):
        raise _fail(r.source, f"{r.prefix}{key}", f"a number {bound}", value)
    return float(value)


def _section(r: _Reader, key: str, allowed: set[str]) -> _Reader:
    sub = r.mapping(key)
    if sub is None:
        return _Reader(r.source, {}, f"{key}.")
    sub.check_keys(allowed)
    return sub


def parse_workload(data: object, source: str = "<workload>") -> Workload:
    """A :class:`Workload` from parsed YAML; :class:`WorkloadError` names what is wrong."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise WorkloadError(f"{source}: expected a YAML mapping at top level, got {data!r}")
    r = _Reader(source, data, "")
    try:
        r.check_keys(
            {"agents", "seeds", "steps", "cadence", "profile", "deadline_ms", "horizon_s"}
            | {"graph", "network", "churn", "adversary"}
        )
        agents = r.int_list("agents", (100,), 3)
        if (
            "seeds" in data
            and isinstance(data["seeds"], int)
            and not isinstance(data["seeds"], bool)
        ):
            seeds = tuple(range(r.int_value("seeds", data["seeds"], 1)))
        else:
            seeds = r.int_list("seeds", (0,), 0)
        steps = r.int_("steps", 150, 5)
        cadence = r.int_("cadence", 25, 1)
        profile = data.get("profile", "med")
        if profile not in DEFAULT_PROFILES:
            raise r.fail("profile", f"one of {', '.join(DEFAULT_PROFILES)}", profile)
        deadline_ms = r.int_("deadline_ms", 1000, 1)
        horizon_s = _number(r, "horizon_s", 3600.0, 0.0, open_low=True)
        g = _section(r, "graph", {"max_depth", "p_forward", "max_fan_in"})
        max_depth = g.int_("max_depth", 10, 1)
        p_forward = g.prob("p_forward", 0.5)
        max_fan_in = g.int_("max_fan_in", 3, 1)
        n = _section(
            r, "network", {"rtt_median_ms", "rtt_sigma", "jitter", "loss", "rto_ms", "think_s"}
        )
        link = LinkModel(
            rtt_median_ms=_number(n, "rtt_median_ms", 80.0, 0.0),
            rtt_sigma=_number(n, "rtt_sigma", 0.6, 0.0),
            jitter=n.prob("jitter", 0.1),
            loss=_number(n, "loss", 0.0, 0.0),
            rto_ms=_number(n, "rto_ms", 1000.0, 0.0, open_low=True),
            think_s=_number(n, "think_s", 15.0, 0.0),
        )
        # A cell's origins commit folds whose obligations run for the node's
        # serve_for (one hour) and are not renewed during the cell: its
        # deliveries must fit in that window, or the holder rightly refuses an
        # expired head. Expected pace: four deliveries per decision.
        expected_s = 4 * (steps // 5) * link.think_s
        if expected_s > MAX_CELL_S:
            raise n.fail(
                "think_s",
                f"a think time with 4 × {steps // 5} decisions × think_s ≤ {MAX_CELL_S:g} s"
                f" (obligations last {DEFAULT_SERVE_FOR_MS // 1000} s)",
                n.data.get("think_s"),
            )
        if expected_s > 0 and horizon_s / expected_s > MAX_RUNS_PER_CELL:
            raise r.fail(
                "horizon_s",
                f"a horizon of at most {MAX_RUNS_PER_CELL} runs of a cell"
                f" ({MAX_RUNS_PER_CELL} × {expected_s:g} s at this pace)",
                data.get("horizon_s"),
            )
        if link.loss >= 1.0:
            raise n.fail("loss", "a probability in [0, 1)", n.data["loss"])
        c = _section(
            r,
            "churn",
            {"up_scale_s", "down_scale_s", "alpha", "departure_rate_per_h"},
        )
        churn = ChurnModel(
            up_scale_s=_number(c, "up_scale_s", 0.0, 0.0),
            down_scale_s=_number(c, "down_scale_s", 30.0, 0.0),
            alpha=_number(c, "alpha", 1.5, 0.0, open_low=True),
            departure_rate_per_h=_number(c, "departure_rate_per_h", 0.0, 0.0),
        )
        a = _section(r, "adversary", {"fraction", "faults", "roles"})
        fraction = _number(a, "fraction", 0.0, 0.0)
        if fraction >= 1.0:
            raise a.fail("fraction", "a number f ≥ 0 and < 1", a.data["fraction"])
        faults = _faults(a)
        roles = _roles(a)
    except WorkloadError:
        raise
    except ConfigError as exc:
        raise WorkloadError(str(exc)) from None
    return Workload(
        agents, seeds, steps, cadence, profile, deadline_ms, max_depth, p_forward,
        max_fan_in, link, churn, fraction, faults, roles, horizon_s,
    )  # fmt: skip


def _faults(a: _Reader) -> tuple[FaultMode, ...]:
    if "faults" not in a.data:
        return ADVERSARY_FAULTS
    value = a.data["faults"]
    names = [f.value for f in ADVERSARY_FAULTS]
    expected = f"a non-empty list of fault modes from {', '.join(names)}"
    if not isinstance(value, list) or not value or any(v not in names for v in value):
        raise a.fail("faults", expected, value)
    return tuple(FaultMode(v) for v in dict.fromkeys(value))


ROLES = ("origin", "relay", "holder", "witness")


def _roles(a: _Reader) -> tuple[str, ...]:
    if "roles" not in a.data:
        return ROLES
    value = a.data["roles"]
    if not isinstance(value, list) or any(v not in ROLES for v in value):
        raise a.fail("roles", f"a list of roles from {', '.join(ROLES)}", value)
    return tuple(dict.fromkeys(value))


def load_workload(path: Path) -> Workload:
    """Read and check a workload file (:class:`WorkloadError` naming file and key)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read workload: {exc.strerror or exc}") from exc
    except UnicodeDecodeError:
        raise WorkloadError(f"{path}: expected a UTF-8 YAML file") from None
    try:
        data: Any = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise WorkloadError(f"{path}: not valid YAML{where}: expected a YAML mapping") from None
    return parse_workload(data, str(path))


# --------------------------------------------------------------------------- cells


def _shape(rng: random.Random, w: Workload, room: int) -> tuple[int, int]:
    """(origins, relays) of one cell that fits in ``room`` agents (>= 3)."""
    origins = rng.randint(1, w.max_fan_in)
    relays = (
        rng.randint(1, w.max_depth - 1) if w.max_depth > 1 and rng.random() < w.p_forward else 0
    )
    while origins + relays + 2 > room:  # cut to fit: relays first, keep one origin
        if relays:
            relays -= 1
        else:
            origins -= 1
    return origins, relays


def build_cells(w: Workload, agents: int, seed: int) -> list[Cell]:
    """The cells of one run (N agents, one seed): deterministic in (workload, N, seed)."""
    rng = random.Random(f"cells/{agents}/{seed}")
    cells: list[Cell] = []
    left = agents
    while left >= 3:
        origins, relays = _shape(rng, w, left)
        if left - (origins + relays + 2) in (1, 2):  # never leave a remainder too small
            relays += left - (origins + relays + 2)
        size = origins + relays + 2
        left -= size
        index = len(cells)
        names = ["origin", *(f"relay{i}" for i in range(1, relays + 1)), "holder"]
        origin_names = ["origin", *(f"origin{i}" for i in range(2, origins + 1))]
        faulty: dict[str, str] = {}
        origin_faults: list[FaultMode] = []
        for name in origin_names:
            bad = "origin" in w.roles and rng.random() < w.fraction
            fault = rng.choice(w.faults) if bad else FaultMode.NONE
            origin_faults.append(fault)
            if bad:
                faulty[name] = fault.value
        for name, role in [*((n, "relay") for n in names[1:-1]), ("holder", "holder")]:
            if role in w.roles and rng.random() < w.fraction:
                faulty[name] = LIAR
        if "witness" in w.roles and rng.random() < w.fraction:
            faulty["witness"] = LIAR
        settings = BoundarySettings(
            cadences=(w.cadence,),
            profiles=(w.profile,),
            seeds=tuple(
                seed * 100_000_000 + index * MAX_RUNS_PER_CELL + r for r in range(w.runs_per_cell)
            ),
            steps=w.steps,
            fault=origin_faults[0],
            chain=tuple(names),
            origins=origins,
            deadline_ms=w.deadline_ms,
            origin_faults=tuple(origin_faults),
        )
        availability: dict[str, Availability] = {}
        departed: list[str] = []
        departures: list[tuple[str, float]] = []
        if w.churn.up_scale_s > 0 or w.churn.departure_rate_per_h > 0:
            for name in [*settings.origin_names(), settings.witness_name]:
                crng = random.Random(f"churn/{agents}/{seed}/{index}/{name}")
                avail, leave = churn_schedule(
                    crng,
                    w.horizon_s,
                    up_scale_s=w.churn.up_scale_s,
                    down_scale_s=w.churn.down_scale_s,
                    alpha=w.churn.alpha,
                    departure_rate_per_h=w.churn.departure_rate_per_h,
                )
                availability[name] = avail
                if leave is not None:
                    departed.append(name)
                    departures.append((name, leave))
        network = SimNetwork(seed * 100_000 + index, w.link, availability)
        cells.append(
            Cell(
                index, settings, network, tuple(departed), tuple(faulty.items()),
                tuple(departures),
            )
        )  # fmt: skip
    return cells
