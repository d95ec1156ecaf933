"""``provnet attest verify``: bounded input, and only the verifier's own trust policy.

The bundle file is untrusted: nested too deeply or too large it is unreadable
(exit 2, one ``provnet: error:`` line, no traceback), and the trust policy it
carries — which nothing signs — is never applied. The verifier gives its own
(``--policy``, the attest-policy YAML format, names resolved with ``--node``);
without one nothing is trusted. The verdict names the policy applied. Run as
the real command, in a child process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from contracts.attest import RehydrationProof, TrustPolicy, build_attestation, restoration_digest
from contracts.serve import answer_demand, build_demand
from contracts.statements import Axis
from harness.attest.bundle import AttestationBundle, BundleFile, HeldFoldBytes
from tests.contracts._support import DAY, NOW, make_world

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "experiments" / "attest-policy.yaml"
VALUE_REF = "run/structural_min/v7"


def _bundle(tmp: Path, *, bundled_ceiling: float = 1.0) -> tuple[Path, str]:
    """A genuine reconstruction bundle (fixed test keys); its file and attester id."""
    w = make_world()
    demand = build_demand(w.holder, w.obligation, now=NOW + 1, nonce="9a" * 16)
    receipt = answer_demand(
        w.origin, demand, obligation=w.obligation, commitment=w.commitment, hops=w.hops, now=NOW + 2
    )
    proof = RehydrationProof.of(
        commitment=w.commitment,
        obligation=w.obligation,
        demand=demand,
        receipt=receipt,
        hops=list(w.hops),
    )
    attestation = build_attestation(
        w.attester,
        value_digest=restoration_digest(VALUE_REF, [w.commitment.digest]),
        axis=Axis.RECONSTRUCTION,
        floor=1.0,
        cites=[receipt.digest],
        issued_at=NOW,
        expires_at=NOW + DAY,
    )
    f = BundleFile(
        AttestationBundle(attestation.to_bytes(), (proof,)),
        VALUE_REF,
        (HeldFoldBytes(w.commitment.to_bytes()),),
        TrustPolicy({w.attester.node_id: {Axis.RECONSTRUCTION: bundled_ceiling}}),
        NOW + 5,
    )
    path = tmp / "bundle.json"
    path.write_bytes(f.to_bytes())
    return path, w.attester.node_id


def _verify(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness", "attest", "verify", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        check=False,
    )


def _policy(tmp: Path, attester: str, ceiling: float) -> Path:
    path = tmp / f"policy-{ceiling}.yaml"
    path.write_text(
        f"type: attest-policy\nattesters:\n  {attester}:\n    axes: {{reconstruction: {ceiling}}}\n"
    )
    return path


def test_deeply_nested_or_oversized_file_is_unreadable_exit_2(tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text('{"type": "attestation-bundle", "attestation": ' + "[" * 200_000 + "}")
    big = tmp_path / "big.json"
    big.write_bytes(b'{"type": "attestation-bundle", "pad": "' + b"x" * (9 << 20) + b'"}')
    for path, says in ((deep, "nested deeper than"), (big, "larger than")):
        out = _verify(path)
        assert out.returncode == 2, out.stderr
        assert "Traceback" not in out.stderr
        assert out.stderr.startswith("provnet: error:")
        assert says in out.stderr


def test_the_bundled_policy_is_never_applied(tmp_path: Path) -> None:
    path, attester = _bundle(tmp_path, bundled_ceiling=0.5)
    mine = _policy(tmp_path, attester, 0.5)
    out = _verify(path, "--policy", mine)
    assert out.returncode == 1
    assert "above the ceiling 0.5" in out.stdout
    assert f"under policy {mine}" in out.stdout
    # raising the ceiling inside the file changes nothing: nothing signs it
    obj = json.loads(path.read_bytes())
    obj["policy"]["grants"][attester]["reconstruction"] = 1.0
    path.write_text(json.dumps(obj))
    out = _verify(path, "--policy", mine)
    assert out.returncode == 1
    assert "above the ceiling 0.5" in out.stdout
    assert "note: the file carries its own trust policy" in out.stdout
    # no policy given: the default trusts no attester, and says so
    out = _verify(path)
    assert out.returncode == 1, out.stdout
    assert "under policy default (no attester trusted)" in out.stdout
    assert "the attestation verifies, but not under the policy applied" in out.stdout
    # the verifier's own policy granting it: valid, and named
    out = _verify(path, "--policy", _policy(tmp_path, attester, 1.0), "--json")
    verdict = json.loads(out.stdout)
    assert out.returncode == 0
    assert verdict["valid"] is True
    assert verdict["policy"]["source"].endswith("policy-1.0.yaml")
    assert verdict["bundled_policy"] == {
        "digest": verdict["bundled_policy"]["digest"],
        "applied": False,
        "differs": False,
    }


def test_the_shipped_policy_file_is_the_format_verify_reads(tmp_path: Path) -> None:
    path, attester = _bundle(tmp_path)
    out = _verify(path, "--policy", SHIPPED, "--node", f"attester={attester}")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith("VALID attestation")
    assert f"under policy {SHIPPED}" in out.stdout
    # a name it cannot resolve is the policy's problem, not the bundle's
    out = _verify(path, "--policy", SHIPPED)
    assert out.returncode == 2
    assert f"{SHIPPED}: names node 'attester'; give its key with --node attester=" in out.stderr
    assert "not an attestation bundle" not in out.stderr
    # another key under the shipped attester's name is not trusted
    other = "ab" * 32
    out = _verify(path, "--policy", SHIPPED, "--node", f"attester={other}")
    assert out.returncode == 1
    assert "may not raise reconstruction" in out.stdout


def test_taint_discharges_need_the_verifiers_taint_grant(tmp_path: Path) -> None:
    w = make_world()
    taint = "taint:unverified_web:3"
    attestation = build_attestation(
        w.attester,
        value_digest=restoration_digest(VALUE_REF, [w.commitment.digest]),
        axis=Axis.VERIFICATION,
        floor=0.9,
        discharged=[taint],
        issued_at=NOW,
        expires_at=NOW + DAY,
    )
    path = tmp_path / "discharge.json"
    path.write_bytes(
        BundleFile(
            AttestationBundle(attestation.to_bytes()),
            VALUE_REF,
            (HeldFoldBytes(w.commitment.to_bytes()),),
            TrustPolicy({w.attester.node_id: {Axis.VERIFICATION: 1.0}}),
            NOW + 5,
        ).to_bytes()
    )
    policy = tmp_path / "taints.yaml"
    for granted, code in (("[]", 1), ("[unverified_web]", 0)):
        policy.write_text(
            "type: attest-policy\nattesters:\n  auditor:\n"
            f"    axes: {{verification: 1.0}}\n    taints: {granted}\n"
        )
        out = _verify(path, "--policy", policy, "--node", f"auditor={w.attester.node_id}", "--json")
        assert out.returncode == code, out.stdout + out.stderr
        verdict = json.loads(out.stdout)
        if code:
            assert "discharge 1 of its taints, e.g. taint:unverified_web:3" in verdict["reason"]
            assert verdict["attester"] == w.attester.node_id
        else:
            assert verdict["discharged"] == [taint]
