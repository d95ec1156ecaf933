"""The attest policy file: which attester may raise which axis, and the run clock.

The file (YAML; ``experiments/attest-policy.yaml`` is the default)::

    type: attest-policy
    lifetime_steps: 125      # an attestation expires this many steps after issue
    restore_below: 0.55      # ask for restoration when reconstruction < this …
    attesters:               # … and a reconstruction-coupled gate blocks
      attester:              # node name, resolved to its node id when the run starts
        axes: {reconstruction: 1.0}   # axis: ceiling (A3)
        taints: []           # taint kinds it may discharge (A5), e.g. [unverified_web]
    revocations: {}          # node name: step from which its attestations stop counting (A7)

Node names are resolved to node ids once the nodes have their keys, giving
the :class:`contracts.attest.TrustPolicy` that :func:`contracts.attest.apply_attestations`
checks. Taint authority is this file's extension of A3 to taints: an
attestation that discharges a taint of a kind its attester is not granted is
rejected as a whole (the contract names discharged taints; who may name
which is policy).

Time: attestations carry milliseconds. A run's clock is deterministic —
step ``s`` is :func:`run_ms` ``(s)`` = a fixed start + ``s`` seconds — so
expiry and revocation fall on the same decisions in every run and with any
number of workers. The start lies in the future of any wall clock the run
meets, so nodes that check expiry against their own clock accept what is
valid in run time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from contracts.attest import TrustPolicy
from contracts.statements import Axis

__all__ = [
    "RUN_START_MS",
    "STEP_MS",
    "AttestPolicy",
    "AttestPolicyError",
    "AttesterGrant",
    "ResolvedPolicy",
    "run_ms",
    "taint_kind",
]

#: Run time of step 0 (2030-03-17 UTC): later than any wall clock a run meets.
RUN_START_MS = 1_900_000_000_000
#: Run time of one step.
STEP_MS = 1000


def run_ms(step: int) -> int:
    """Run time (ms) of ``step``."""
    return RUN_START_MS + step * STEP_MS


def taint_kind(taint: str) -> str:
    """``taint:unverified_web:12`` → ``unverified_web``."""
    parts = taint.split(":")
    return parts[1] if len(parts) >= 3 and parts[0] == "taint" else ""


class AttestPolicyError(ValueError):
    """A malformed policy file (message: file, key, what was expected)."""


@dataclass(frozen=True, slots=True)
class AttesterGrant:
    axes: Mapping[Axis, float] = field(default_factory=dict)
    taints: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class ResolvedPolicy:
    """The policy with node ids: the contract's trust policy plus taint grants."""

    trust: TrustPolicy
    taints: Mapping[str, frozenset[str]]

    def taints_allowed(self, attester: str, discharged: tuple[str, ...]) -> list[str]:
        """The discharged taints whose kind ``attester`` is not granted (empty: fine)."""
        granted = self.taints.get(attester, frozenset())
        return [t for t in discharged if taint_kind(t) not in granted]


@dataclass(frozen=True, slots=True)
class AttestPolicy:
    """The policy file, by node name (see the module docstring)."""

    lifetime_steps: int = 125
    restore_below: float = 0.55
    attesters: Mapping[str, AttesterGrant] = field(
        default_factory=lambda: {"attester": AttesterGrant({Axis.RECONSTRUCTION: 1.0})}
    )
    revocations: Mapping[str, int] = field(default_factory=dict)

    def with_grant(self, name: str, grant: AttesterGrant | None) -> AttestPolicy:
        attesters = {k: v for k, v in self.attesters.items() if k != name}
        if grant is not None:
            attesters[name] = grant
        return replace(self, attesters=attesters)

    def with_revocation(self, name: str, step: int) -> AttestPolicy:
        return replace(self, revocations={**self.revocations, name: step})

    def with_lifetime(self, steps: int) -> AttestPolicy:
        if steps < 1:
            raise AttestPolicyError(f"lifetime_steps must be >= 1, got {steps}")
        return replace(self, lifetime_steps=steps)

    def resolve(self, node_ids: Mapping[str, str]) -> ResolvedPolicy:
        def node(name: str) -> str:
            if name not in node_ids:
                known = ", ".join(sorted(node_ids))
                raise AttestPolicyError(f"policy names node {name!r}, not in the run ({known})")
            return node_ids[name]

        return ResolvedPolicy(
            TrustPolicy(
                grants={node(n): dict(g.axes) for n, g in self.attesters.items()},
                revocations={node(n): run_ms(s) for n, s in self.revocations.items()},
            ),
            {node(n): g.taints for n, g in self.attesters.items()},
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "attest-policy",
            "lifetime_steps": self.lifetime_steps,
            "restore_below": self.restore_below,
            "attesters": {
                n: {
                    "axes": {a.value: c for a, c in sorted(g.axes.items())},
                    "taints": sorted(g.taints),
                }
                for n, g in sorted(self.attesters.items())
            },
            "revocations": dict(sorted(self.revocations.items())),
        }

    @classmethod
    def from_obj(cls, obj: Any, where: str = "policy") -> AttestPolicy:
        def bad(key: str, expected: str) -> AttestPolicyError:
            return AttestPolicyError(f"{where}: {key}: expected {expected}")

        if not isinstance(obj, dict) or obj.get("type") != "attest-policy":
            raise bad("type", "a mapping with type: attest-policy")
        unknown = set(obj) - {"type", "lifetime_steps", "restore_below", "attesters", "revocations"}
        if unknown:
            raise bad(sorted(unknown)[0], "no such key")
        lifetime = obj.get("lifetime_steps", 125)
        if isinstance(lifetime, bool) or not isinstance(lifetime, int) or lifetime < 1:
            raise bad("lifetime_steps", f"an integer >= 1, got {lifetime!r}")
        below = obj.get("restore_below", 0.55)
        if isinstance(below, bool) or not isinstance(below, int | float) or not 0 < below <= 1:
            raise bad("restore_below", f"a number in (0, 1], got {below!r}")
        raw = obj.get("attesters", {})
        if not isinstance(raw, dict):
            raise bad("attesters", "a mapping of node name to grant")
        attesters: dict[str, AttesterGrant] = {}
        for name, grant in raw.items():
            key = f"attesters.{name}"
            if not isinstance(name, str) or not isinstance(grant, dict):
                raise bad(key, "a mapping with axes and taints")
            if set(grant) - {"axes", "taints"}:
                raise bad(f"{key}.{sorted(set(grant) - {'axes', 'taints'})[0]}", "no such key")
            axes_raw = grant.get("axes", {})
            if not isinstance(axes_raw, dict):
                raise bad(f"{key}.axes", "a mapping of axis to ceiling")
            axes: dict[Axis, float] = {}
            for axis_name, ceiling in axes_raw.items():
                try:
                    axis = Axis(axis_name)
                except ValueError:
                    names = ", ".join(a.value for a in Axis)
                    raise bad(f"{key}.axes.{axis_name}", f"one of {names}") from None
                if (
                    isinstance(ceiling, bool)
                    or not isinstance(ceiling, int | float)
                    or not 0 <= ceiling <= 1
                ):
                    raise bad(f"{key}.axes.{axis_name}", f"a ceiling in [0, 1], got {ceiling!r}")
                axes[axis] = float(ceiling)
            taints = grant.get("taints", [])
            if not isinstance(taints, list) or not all(isinstance(t, str) and t for t in taints):
                raise bad(f"{key}.taints", "a list of taint kinds such as unverified_web")
            attesters[name] = AttesterGrant(axes, frozenset(taints))
        revs = obj.get("revocations", {})
        if not isinstance(revs, dict) or not all(
            isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in revs.values()
        ):
            raise bad("revocations", "a mapping of node name to a step >= 0")
        return cls(int(lifetime), float(below), attesters, dict(revs))

    @classmethod
    def load(cls, path: Path) -> AttestPolicy:
        try:
            obj = yaml.safe_load(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise AttestPolicyError(f"{path}: cannot read: {exc.strerror or exc}") from None
        except yaml.YAMLError as exc:
            raise AttestPolicyError(f"{path}: not YAML: {exc}") from None
        return cls.from_obj(obj, str(path))
