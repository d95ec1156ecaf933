"""Part 6 across the boundary: attest restores what it may, and nothing else does.

Real nodes (NodeCore with SQLite hop logs, real Ed25519 keys) over the
in-memory transport for the bulk, and every row of the authority table once
more over real gRPC servers on loopback. The death-spiral run here is
shortened and its penalty raised to 0.1 (death at cycle 7, closed form
6.6), so a run takes seconds; the default config's death cycle 35 is pinned
by its own test.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path

import pytest

from contracts.signed import open_statement
from contracts.statements import Attestation, Axis
from harness.attest.cli import DEFAULT_POLICY
from harness.attest.policy import AttestPolicy, AttestPolicyError, ResolvedPolicy
from harness.attest.report import row_numbers, write_outputs
from harness.attest.rows import ATTESTER, AUTHORITY_ROWS, Row, RowSpec
from harness.attest.runner import AttestSlice, RowResult, play_rows, run_row
from harness.boundary.choices import TransportKind
from harness.cli import main
from harness.config import DeathSpiralConfig, ExperimentConfig
from harness.gates import GATES

FAST = dataclasses.replace(
    ExperimentConfig(),
    reconstruction_penalty=0.1,
    death_spiral_run=DeathSpiralConfig(steps=300, compaction_cadence=25),
)
POLICY = AttestPolicy(lifetime_steps=50)

#: The reason each row's attestations must be rejected for.
EXPECTED_REASON: dict[Row, set[str]] = {
    Row.OUTSIDE_POLICY: {"axis_not_granted"},
    Row.UNGRANTED_AXIS: {"axis_not_granted"},
    Row.ABOVE_CEILING: {"above_ceiling"},
    Row.NO_PROOF: {"no_proof"},
    Row.OTHER_VALUE_RECEIPTS: {"commitments_missing"},
    Row.FORGED_RECEIPTS: {"proof_invalid"},
    Row.TAMPERED_RECEIPTS: {"proof_invalid"},
    Row.PARTIAL_RECEIPTS: {"commitments_missing", "proof_invalid"},
    Row.REPLAYED: {"other_value"},
    Row.EXPIRED: {"expired"},
    Row.REVOKED: {"revoked"},
}

_CACHE: dict[tuple[str, str], RowResult] = {}


def _row(spec: RowSpec, transport: TransportKind = TransportKind.MEMORY) -> RowResult:
    key = (spec.name, transport.value)
    if key not in _CACHE:
        _CACHE[key] = asyncio.run(run_row(FAST, spec, POLICY, AttestSlice(transport=transport)))
    return _CACHE[key]


def _rejected(r: RowResult) -> dict[str, int]:
    return {k[9:]: v for k, v in r.counts.items() if k.startswith("rejected_") and v}


# --------------------------------------------------------------------------- items 1, 2, 6


def test_attest_disabled_reproduces_the_death_cycle_35_of_experiment_run() -> None:
    cfg = dataclasses.replace(ExperimentConfig(), death_spiral_run=DeathSpiralConfig(steps=1000))
    r = asyncio.run(run_row(cfg, RowSpec(Row.NONE), POLICY, AttestSlice()))
    n = row_numbers(r)
    assert n.death_before == 35
    assert n.death_after == 35
    assert n.changed == 0
    # decisions across the boundary are the in-process ones, bit for bit
    assert all(i == b for _, i, b in r.runs)


def test_honest_attester_breaks_the_spiral_by_attestation_only() -> None:
    none, honest = _row(RowSpec(Row.NONE)), _row(RowSpec(Row.HONEST))
    n0, n = row_numbers(none), row_numbers(honest)
    assert n0.death_before == 7
    assert n.death_after is None  # never dies with attest
    assert n.broken_at == 7
    assert n.recon_agree_after > n.recon_agree_before + 20
    assert n.to_block == 0
    assert n.to_proceed == n.changed > 0
    # every change is a reconstruction gate, and it moves towards the oracle
    assert set(n.changed_by_class) == {"reconstruction"}
    assert n.flips_after == n.flips_before - n.changed
    # only reconstruction was raised, and only by applied attestations (A1)
    assert n.raised_by_axis[:4] == (0, 0, 0, 0)
    applied = honest.counts["attestations_applied"] + honest.counts.get("attestations_reused", 0)
    assert 0 < n.raised_by_axis[4] <= applied
    assert honest.fingerprint != none.fingerprint


def test_expired_attestations_are_renewed_by_the_same_mechanism() -> None:
    short = _row(RowSpec(Row.HONEST, lifetime_steps=5))
    long = _row(RowSpec(Row.HONEST, lifetime_steps=500))
    # decisions identical, whatever the lifetime; the price is not
    assert short.fingerprint == long.fingerprint
    assert short.counts.get("held_expired", 0) > 0
    assert short.counts["attestations_issued"] > long.counts["attestations_issued"]
    assert long.counts.get("held_expired", 0) == 0


def test_fingerprint_is_stable_across_runs_and_workers() -> None:
    specs = [RowSpec(Row.HONEST), RowSpec(Row.FORGED_RECEIPTS)]
    one = play_rows(FAST, specs, POLICY, AttestSlice(), workers=1)
    two = play_rows(FAST, specs, POLICY, AttestSlice(), workers=2)
    assert [r.fingerprint for r in one] == [r.fingerprint for r in two]
    assert one[0].fingerprint == _row(RowSpec(Row.HONEST)).fingerprint


# --------------------------------------------------------------------------- item 3


@pytest.mark.parametrize("row", AUTHORITY_ROWS, ids=lambda r: r.value)
def test_attester_without_authority_changes_nothing(row: Row) -> None:
    none, r = _row(RowSpec(Row.NONE)), _row(RowSpec(row))
    n = row_numbers(r)
    rejected = _rejected(r)
    assert r.counts["attestations_issued"] > 0
    assert sum(rejected.values()) > 0
    assert set(rejected) <= EXPECTED_REASON[row]
    if row is Row.REVOKED:
        assert n.changed_after_revocation == 0
        return
    assert r.counts.get("attestations_applied", 0) == 0
    assert n.decisions_raised == 0
    assert n.changed == 0
    assert r.fingerprint == none.fingerprint  # all arms, all modes


def test_taint_discharge_changes_exactly_the_granted_kind_on_blocklist_gates() -> None:
    none, r = _row(RowSpec(Row.NONE)), _row(RowSpec(Row.TAINT_DISCHARGE))
    n = row_numbers(r)
    assert n.changed > 0
    assert n.decisions_raised == 0
    assert set(n.changed_by_class) == {"lineage_blocklist"}
    assert n.to_block == 0
    # it is a change of decision, not a correction: the oracle still sees the taints
    assert n.false_proceed_after == n.false_proceed_before + n.changed
    changed_gates = {
        GATES[gi].name
        for d in r.records
        for gi, (a, b) in enumerate(zip(d.after, d.before, strict=True))
        if a != b
    }
    assert changed_gates <= {"summarize_no_unverified_taint", "payment_no_untrusted_taint"}
    assert r.fingerprint != none.fingerprint


def test_taint_grants_reject_an_attestation_discharging_another_kind() -> None:
    p = POLICY.with_grant(
        "attester", dataclasses.replace(POLICY.attesters["attester"], taints=frozenset({"x"}))
    ).resolve({"attester": "a" * 64})
    assert isinstance(p, ResolvedPolicy)
    assert p.taints_allowed("a" * 64, ("taint:x:1",)) == []
    assert p.taints_allowed("a" * 64, ("taint:x:1", "taint:y:2")) == ["taint:y:2"]


# --------------------------------------------------------------------------- item 4


@pytest.mark.parametrize("axis", [Axis.VERIFICATION, Axis.FRESHNESS, Axis.RECONSTRUCTION])
def test_dishonest_attester_changes_only_what_its_grant_reads(axis: Axis) -> None:
    r = _row(RowSpec(Row.DISHONEST, axis=axis))
    n = row_numbers(r)
    granted = list(Axis).index(axis)
    assert all(c == 0 for i, c in enumerate(n.raised_by_axis) if i != granted)
    if axis is Axis.RECONSTRUCTION:
        # A4 binds even a trusted attester: no receipts, no raise
        assert n.decisions_raised == 0
        assert n.changed == 0
        assert _rejected(r).keys() >= {"no_proof", "axis_not_granted"}
        return
    assert n.raised_by_axis[granted] > 0
    reads = {
        Axis.VERIFICATION: {
            "summarize_freshness_strict",
            "send_email_fresh_verified",
            "archive_all_axes_floor",
            "publish_discounted_thresholds",
        },
        Axis.FRESHNESS: {
            "summarize_freshness_strict",
            "send_email_fresh_verified",
            "archive_all_axes_floor",
            "publish_discounted_thresholds",
        },
    }[axis]
    changed = {
        GATES[gi].name
        for d in r.records
        for gi, (a, b) in enumerate(zip(d.after, d.before, strict=True))
        if a != b
    }
    assert changed
    assert changed <= reads
    assert n.to_block == 0
    assert n.false_proceed_after > n.false_proceed_before


# --------------------------------------------------------------------------- item 5


def test_every_attestation_is_a_hop_the_holder_can_demand_back() -> None:
    r = _row(RowSpec(Row.HONEST))
    assert r.logged == r.counts["attestations_issued"] > 0
    assert r.a6_checked >= 1
    assert r.a6_verified == r.a6_checked


def test_attestation_bundles_verify_from_files_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = [
        _row(RowSpec(Row.NONE)),
        _row(RowSpec(Row.HONEST)),
        _row(RowSpec(Row.FORGED_RECEIPTS)),
    ]
    write_outputs(results, tmp_path, {})
    accepted = tmp_path / "attestations" / "honest-accepted.json"
    forged = tmp_path / "attestations" / "forged_receipts-rejected-proof_invalid.json"
    # the verifier's policy: the shipped one, its attester named by the run's key
    obj = json.loads(accepted.read_bytes())
    attester = open_statement(json.dumps(obj["attestation"]).encode(), Attestation).statement
    shipped = Path(__file__).resolve().parents[2] / DEFAULT_POLICY
    mine = ["--policy", str(shipped), "--node", f"attester={attester.attester}"]
    assert main(["attest", "verify", str(accepted), *mine]) == 0
    assert "VALID" in capsys.readouterr().out
    assert main(["attest", "verify", str(accepted)]) == 1  # no policy given: nobody trusted
    assert main(["attest", "verify", str(forged), *mine]) == 1
    # tampering with the file: another value ref breaks the binding
    obj["value_ref"] = obj["value_ref"] + "x"
    other = tmp_path / "other.json"
    other.write_text(json.dumps(obj))
    assert main(["attest", "verify", str(other), *mine]) == 1
    assert main(["attest", "verify", str(accepted), "--at", "1", *mine]) == 1  # not yet valid
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{")
    assert main(["attest", "verify", str(garbage), *mine]) == 2
    assert "provnet: error:" in capsys.readouterr().err
    assert (tmp_path / "summary.md").read_text().count("never") >= 1


# --------------------------------------------------------------------------- real gRPC servers


#: Every row of items 3–5 over real gRPC servers (``-m long``); a few by default.
GRPC_ROWS = [
    RowSpec(Row.NONE),
    RowSpec(Row.HONEST),
    *(RowSpec(r) for r in AUTHORITY_ROWS),
    RowSpec(Row.TAINT_DISCHARGE),
    RowSpec(Row.DISHONEST, axis=Axis.VERIFICATION),
]
_GRPC_DEFAULT = {"none", "honest", "forged_receipts", "revoked", "taint_discharge"}


@pytest.mark.parametrize(
    "spec",
    [s if s.name in _GRPC_DEFAULT else pytest.param(s, marks=pytest.mark.long) for s in GRPC_ROWS],
    ids=lambda s: s.name,
)
def test_rows_over_grpc_servers_decide_as_over_memory(spec: RowSpec) -> None:
    grpc = _row(spec, TransportKind.GRPC)
    memory = _row(spec)
    assert grpc.fingerprint == memory.fingerprint
    assert _rejected(grpc) == _rejected(memory)
    if spec.row is Row.HONEST:
        assert grpc.a6_verified == grpc.a6_checked >= 1


@pytest.mark.parametrize("transport", [TransportKind.MEMORY, TransportKind.GRPC])
def test_nodes_an_attest_run_starts_keep_scratch_stores_unless_kept(
    transport: TransportKind, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As the boundary runner: nodes whose logs die with the run claim no
    # durability; a kept work_dir gets deployed stores. Same decisions either way.
    from nodes.store import HopStore, StoreMode

    opened: list[tuple[str, StoreMode]] = []
    real_open = HopStore.open.__func__  # type: ignore[attr-defined]

    async def spy(cls: type[HopStore], data_dir: Path, /, *a: object, **kw: object) -> HopStore:
        store: HopStore = await real_open(cls, data_dir, *a, **kw)
        opened.append((Path(data_dir).name, store.mode))
        return store

    monkeypatch.setattr(HopStore, "open", classmethod(spy))
    spec = RowSpec(Row.HONEST)
    scratch = asyncio.run(run_row(FAST, spec, POLICY, AttestSlice(transport=transport)))
    names = {name for name, _ in opened}
    assert ATTESTER in names, names
    assert len(names) >= 3, names  # the topology's nodes and the attester
    assert {mode for _, mode in opened} == {StoreMode.SCRATCH}, opened
    opened.clear()
    kept = asyncio.run(
        run_row(FAST, spec, POLICY, AttestSlice(transport=transport), work_dir=tmp_path)
    )
    assert {name for name, _ in opened} == names
    assert {mode for _, mode in opened} == {StoreMode.DURABLE}, opened
    assert kept.fingerprint == scratch.fingerprint == _row(spec).fingerprint


# --------------------------------------------------------------------------- policy file


def test_shipped_policy_loads_and_bad_ones_name_the_key(tmp_path: Path) -> None:
    shipped = AttestPolicy.load(Path(__file__).parents[2] / "experiments" / "attest-policy.yaml")
    assert shipped == AttestPolicy()
    bad = tmp_path / "p.yaml"
    bad.write_text("type: attest-policy\nattesters: {attester: {axes: {speed: 1.0}}}\n")
    with pytest.raises(AttestPolicyError, match=r"attesters\.attester\.axes\.speed"):
        AttestPolicy.load(bad)
    bad.write_text("type: attest-policy\nlifetime_steps: 0\n")
    with pytest.raises(AttestPolicyError, match="lifetime_steps"):
        AttestPolicy.load(bad)


def test_cli_rejects_a_bad_policy_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "p.yaml"
    bad.write_text("type: nope\n")
    code = main(["experiment", "attest", "--policy", str(bad), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("provnet: error:")
    assert err.count("\n") == 1


# --------------------------------------------------------------------------- A4 under heads


def test_restoration_cites_folds_under_heads_without_a_new_commitment() -> None:
    r = _row(RowSpec(Row.HONEST))
    c = r.counts
    # held folds travel under signed heads and are cited as they are (A4 under
    # heads): the origin signs a restoration head only for values with nothing
    # folded, and no per-fold commitment at all
    assert 0 < c["restoration_folds_committed"] <= c["restorations_unfolded"]
    assert c["restorations_unfolded"] < c["full_rehydrations"]
    # every signature of the attest path, accounted for: per fold rehydrated the
    # holder's demand and the origin's receipt; per attestation the attester's
    # signature and its A6 fold's commitment and obligation; one head per
    # restoration fold
    assert r.wire["structural_min/attest"]["sign_ops"] == (
        2 * c["folds_rehydrated"] + 3 * c["attestations_issued"] + c["restoration_folds_committed"]
    )


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--chain", "a,b"], "--chain: applies to running nodes"),
        (["--nodes", "a=127.0.0.1:1,b=127.0.0.1:2", "--chain", "a,x"], "--chain: expected"),
        (["--nodes", "a=127.0.0.1:1,b=127.0.0.1:2", "--witness", "a"], "--witness: expected"),
        (
            ["--nodes", "a=127.0.0.1:1,b=127.0.0.1:2", "--rows", "honest"],
            "--attesters: the rows need attester nodes of mode(s) none",
        ),
        (
            ["--nodes", "a=127.0.0.1:1,b=127.0.0.1:2", "--attesters", "none=z"],
            "--attesters: expected MODE=NAME",
        ),
    ],
)
def test_running_node_flags_are_checked_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    rc = main(["experiment", "attest", *argv, "--out", str(tmp_path / "x"), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("provnet: error: ")
    assert needle in err
    assert not (tmp_path / "x").exists()
