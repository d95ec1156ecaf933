"""Golden vectors (byte for byte) and the ``provnet keys|evidence`` commands."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest

from contracts import (
    Envelope,
    Evidence,
    EvidenceKind,
    EvidenceStatus,
    FoldProof,
    SignedHead,
    canonical_bytes,
    merkle_root,
    open_any,
    open_head,
    verify_evidence,
    verify_fold,
)
from contracts.batch import (
    decode_demand_batch,
    decode_receipt_batch,
    demand_payload,
    encode_demand_batch,
    encode_receipt_batch,
    receipt_payload,
)
from contracts.identity import PublicKey
from harness.cli import main as provnet_main
from tests.contracts._support import DAY, NOW
from tests.contracts.vectors_gen import VECTOR_DIR, build_vectors

ENVELOPE_VECTORS = {
    "commitment.json": "origin",
    "obligation.json": "origin",
    "demand.json": "holder",
    "demand-partial.json": "holder",
    "demand-witness.json": "witness",
    "receipt-served.json": "origin",
    "receipt-partial.json": "origin",
    "receipt-expired.json": "origin",
    "receipt-refused.json": "origin",
    "receipt-pending.json": "origin",
    "delivery-receipt.json": "holder",
    "witness-report.json": "witness",
    "attestation.json": "attester",
    "demand-head.json": "holder",
    "receipt-head-served.json": "origin",
}
EVIDENCE_VECTORS = {
    "evidence-bad_data.json": (EvidenceKind.BAD_DATA, EvidenceStatus.PROVEN),
    "evidence-refused.json": (EvidenceKind.REFUSED, EvidenceStatus.PROVEN),
    "evidence-equivocation.json": (EvidenceKind.EQUIVOCATION, EvidenceStatus.PROVEN),
    "evidence-unanswered.json": (EvidenceKind.UNANSWERED, EvidenceStatus.WITNESS_CONFIRMED),
    "evidence-unanswered-cleared.json": (EvidenceKind.UNANSWERED, EvidenceStatus.CLEARED),
    "evidence-bad_data-head.json": (EvidenceKind.BAD_DATA, EvidenceStatus.PROVEN),
    "evidence-refused-head.json": (EvidenceKind.REFUSED, EvidenceStatus.PROVEN),
    "evidence-split_view.json": (EvidenceKind.SPLIT_VIEW, EvidenceStatus.PROVEN),
    "evidence-split_view-consistency.json": (EvidenceKind.SPLIT_VIEW, EvidenceStatus.PROVEN),
    # batched demands and receipts (contracts.batch, payload version 3)
    "evidence-bad_data-batch-v3.json": (EvidenceKind.BAD_DATA, EvidenceStatus.PROVEN),
    "evidence-refused-batch-v3.json": (EvidenceKind.REFUSED, EvidenceStatus.PROVEN),
    "evidence-unanswered-cleared-batch-v3.json": (EvidenceKind.UNANSWERED, EvidenceStatus.CLEARED),
}
#: Batch statements (one envelope, several folds): signer and payload type.
BATCH_VECTORS = {
    "demand-batch-v3.json": ("holder", "application/vnd.provnet.demand-batch.v3+bin"),
    "receipt-batch-v3.json": ("origin", "application/vnd.provnet.receipt-batch.v3+bin"),
}


def _keys() -> dict[str, str]:
    data = json.loads((VECTOR_DIR / "keys.json").read_bytes())
    node_ids: dict[str, str] = data["node_ids"]
    return node_ids


def test_golden_vectors_regenerate_byte_for_byte() -> None:
    built = build_vectors()
    on_disk = {p.name: p.read_bytes() for p in VECTOR_DIR.glob("*.*") if p.is_file()}
    assert sorted(built) == sorted(on_disk)
    for name, data in built.items():
        assert on_disk[name] == data, f"{name} differs; regenerate on purpose with vectors_gen"


@pytest.mark.parametrize(("name", "signer"), sorted(ENVELOPE_VECTORS.items()))
def test_every_statement_vector_verifies_with_its_fixed_key(name: str, signer: str) -> None:
    data = (VECTOR_DIR / name).read_bytes().rstrip(b"\n")
    signed = open_any(data)
    assert signed.signer == _keys()[signer]
    assert Envelope.from_bytes(data).to_bytes() == data
    # Parsing loses nothing: the statement re-encodes to the payload signed,
    # in its kind's one form (a demand or receipt for one fold: a batch of one).
    kind = signed.statement.KIND.value
    if kind in ("demand", "receipt"):
        assert signed.envelope.payload_type.endswith(f"{kind}-batch.v3+bin")
        encode = demand_payload if kind == "demand" else receipt_payload
        assert encode(signed.statement) == signed.envelope.payload  # type: ignore[arg-type]
    else:
        assert signed.envelope.payload_type.endswith("+json")
        assert canonical_bytes(signed.statement.to_json()) == signed.envelope.payload


def test_hop_vector_root_is_the_committed_root() -> None:
    hops = json.loads((VECTOR_DIR / "hops.json").read_bytes())
    leaves = [base64.b64decode(h) for h in hops["hops_b64"]]
    commitment = open_any((VECTOR_DIR / "commitment.json").read_bytes().rstrip(b"\n"))
    assert merkle_root(leaves).hex() == hops["root"]
    assert commitment.statement.to_json()["root"] == hops["root"]


@pytest.mark.parametrize(("name", "expected"), sorted(EVIDENCE_VECTORS.items()))
def test_every_evidence_vector_verifies_standalone(
    name: str, expected: tuple[EvidenceKind, EvidenceStatus]
) -> None:
    evidence = Evidence.from_bytes((VECTOR_DIR / name).read_bytes())
    verdict = verify_evidence(evidence, now=NOW + DAY)
    assert (verdict.kind, verdict.status) == expected
    assert verdict.accused == _keys()["origin"]


def run_cli(*args: str) -> tuple[int, str, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.parametrize(
    "name",
    [
        "evidence-bad_data.json",
        "evidence-bad_data-head.json",
        "evidence-bad_data-batch-v3.json",
    ],
)
def test_cli_evidence_verify_exits_0_for_valid_evidence(name: str) -> None:
    code, out, err = run_cli("evidence", "verify", str(VECTOR_DIR / name), "--json")
    assert code == 0, err
    verdict = json.loads(out)
    assert (verdict["valid"], verdict["kind"], verdict["status"]) == (True, "bad_data", "proven")


def test_cli_evidence_verify_exits_1_with_the_reason_for_invalid_evidence(tmp_path: Path) -> None:
    evidence = json.loads((VECTOR_DIR / "evidence-refused.json").read_bytes())
    # Swap in another key as the accused: nothing verifies with its key.
    evidence["accused"] = _keys()["stranger"]
    path = tmp_path / "framed.json"
    path.write_text(json.dumps(evidence))
    assert provnet_main(["evidence", "verify", str(path), "--now", str(NOW)]) == 1
    code, out, _ = run_cli("evidence", "verify", str(path))
    assert code == 1
    assert out.startswith("INVALID refused against ")
    assert "names signer" in out


@pytest.mark.parametrize("old", ["demand+json", "demand.v2+bin"])
def test_cli_evidence_verify_exits_1_for_evidence_citing_an_earlier_demand_form(
    tmp_path: Path, old: str
) -> None:
    """docs/wire.md: evidence whose demand is in a form no longer read (signed by the
    holder it names, so only the form is wrong) does not verify, naming that form."""
    from contracts.envelope import sign_envelope
    from tests.contracts._support import fixed_identity

    evidence = json.loads((VECTOR_DIR / "evidence-bad_data.json").read_bytes())
    demand = Envelope.from_json(evidence["demand"])
    resigned = sign_envelope(
        fixed_identity("holder"), f"application/vnd.provnet.{old}", demand.payload
    )
    evidence["demand"] = resigned.to_json()
    path = tmp_path / "old-form.json"
    path.write_text(json.dumps(evidence))
    code, out, _ = run_cli("evidence", "verify", str(path), "--now", str(NOW))
    assert code == 1
    assert out.startswith("INVALID bad_data against ")
    assert old in out


def test_cli_evidence_verify_exits_1_for_a_receipt_altered_after_signing(
    tmp_path: Path,
) -> None:
    evidence = json.loads((VECTOR_DIR / "evidence-bad_data-head.json").read_bytes())
    payload = bytearray(base64.b64decode(evidence["receipt"]["payload"]))
    payload[-40] ^= 0x01  # a byte of the signed served root: still a well-formed receipt
    evidence["receipt"]["payload"] = base64.b64encode(bytes(payload)).decode()
    path = tmp_path / "altered.json"
    path.write_text(json.dumps(evidence))
    code, out, _ = run_cli("evidence", "verify", str(path))
    assert code == 1
    assert out.startswith("INVALID bad_data against ")
    assert "does not verify" in out


@pytest.mark.parametrize(("name", "expected"), sorted(BATCH_VECTORS.items()))
def test_every_batch_vector_verifies_with_its_fixed_key_and_re_encodes(
    name: str, expected: tuple[str, str]
) -> None:
    data = (VECTOR_DIR / name).read_bytes().rstrip(b"\n")
    envelope = Envelope.from_bytes(data)
    assert envelope.to_bytes() == data
    signer, payload_type = expected
    assert envelope.payload_type == payload_type
    envelope.verify(PublicKey.from_node_id(_keys()[signer]))
    if "demand" in name:
        batch = decode_demand_batch(envelope.payload)
        assert batch.holder == _keys()[signer]
        assert encode_demand_batch(batch) == envelope.payload
    else:
        receipt = decode_receipt_batch(envelope.payload)
        assert receipt.origin == _keys()[signer]
        assert encode_receipt_batch(receipt) == envelope.payload


def test_cli_evidence_verify_exits_1_for_a_batch_receipt_altered_after_signing(
    tmp_path: Path,
) -> None:
    evidence = json.loads((VECTOR_DIR / "evidence-bad_data-batch-v3.json").read_bytes())
    payload = bytearray(base64.b64decode(evidence["receipt"]["payload"]))
    payload[73] ^= 0x01  # the low byte of the signed issued_at: still well-formed
    evidence["receipt"]["payload"] = base64.b64encode(bytes(payload)).decode()
    path = tmp_path / "altered.json"
    path.write_text(json.dumps(evidence))
    code, out, _ = run_cli("evidence", "verify", str(path))
    assert code == 1
    assert out.startswith("INVALID bad_data against ")
    assert "does not verify" in out


def test_cli_evidence_verify_exits_2_for_unreadable_input(tmp_path: Path) -> None:
    code, _, err = run_cli("evidence", "verify", str(tmp_path / "missing.json"))
    assert code == 2
    assert err.startswith("provnet: error:")
    garbage = tmp_path / "garbage.json"
    garbage.write_bytes(b"[" * 10_000)
    code, _, err = run_cli("evidence", "verify", str(garbage))
    assert code == 2
    assert "nested deeper" in err
    assert "Traceback" not in err


def test_cli_keys_new_and_show_round_trip_and_refuse_open_permissions(tmp_path: Path) -> None:
    path = tmp_path / "node.key"
    code, out, err = run_cli("keys", "new", str(path))
    assert code == 0, err
    node_id = out.split()[1]
    assert (path.stat().st_mode & 0o777) == 0o600
    code, out, _ = run_cli("keys", "show", str(path), "--json")
    assert (code, json.loads(out)["node_id"]) == (0, node_id)
    assert run_cli("keys", "new", str(path))[0] == 2
    path.chmod(0o644)
    code, _, err = run_cli("keys", "show", str(path))
    assert code == 2
    assert "mode 0644" in err


def test_cli_evidence_verify_refuses_an_oversized_file_without_reading_it_all(
    tmp_path: Path,
) -> None:
    big = tmp_path / "big.json"
    with big.open("wb") as fh:
        fh.truncate(64 * 1024 * 1024)  # sparse: 64 MiB of zeros, no disk used
    code, _, err = run_cli("evidence", "verify", str(big))
    assert code == 2
    assert "larger than 8388608 bytes" in err


def _head_vector() -> SignedHead:
    return open_head((VECTOR_DIR / "head.note").read_bytes(), origin=_keys()["origin"])


def test_the_head_vector_is_a_checkpoint_note_by_the_origin() -> None:
    data = (VECTOR_DIR / "head.note").read_bytes()
    head = _head_vector()
    assert head.note == data
    assert data.startswith(f"provnet/{_keys()['origin']}/".encode())


def test_fold_proof_vector_is_proven_under_the_head_vector() -> None:
    head = _head_vector()
    proof = FoldProof.from_bytes((VECTOR_DIR / "fold-proof.bin").read_bytes())
    fold = verify_fold(proof, head)
    assert fold.record.value_ref == "value:42"
    assert proof.to_bytes() == (VECTOR_DIR / "fold-proof.bin").read_bytes()
    demand = open_any((VECTOR_DIR / "demand-head.json").read_bytes().rstrip(b"\n"))
    assert demand.statement.to_json()["obligation"] == head.digest
    assert demand.statement.to_json()["commitment"] == fold.leaf_hash.hex()


def test_cli_evidence_verify_handles_split_views(tmp_path: Path) -> None:
    for name in ("evidence-split_view.json", "evidence-split_view-consistency.json"):
        code, out, err = run_cli("evidence", "verify", str(VECTOR_DIR / name), "--json")
        assert code == 0, err
        verdict = json.loads(out)
        assert (verdict["kind"], verdict["status"]) == ("split_view", "proven")
    evidence = json.loads((VECTOR_DIR / "evidence-split_view.json").read_bytes())
    # The same head twice: it agrees with itself, no split view.
    evidence["conflicting"] = evidence["commitment"]
    same = tmp_path / "same.json"
    same.write_text(json.dumps(evidence))
    code, out, _ = run_cli("evidence", "verify", str(same))
    assert code == 1
    assert out.startswith("INVALID split_view against ")
    evidence["proof"] = "not an object"
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(evidence))
    code, _, err = run_cli("evidence", "verify", str(broken))
    assert code == 2
    assert err.startswith("provnet: error:")


def test_head_form_rehydration_proof_vector_verifies_from_the_file_alone() -> None:
    from contracts.attest import RehydrationProof, verify_rehydration

    proof = RehydrationProof.from_bytes((VECTOR_DIR / "rehydration-proof-head.json").read_bytes())
    head = _head_vector()
    commitment, receipt = verify_rehydration(proof)
    assert proof.obligation == head.note
    assert (
        commitment
        == verify_fold(
            FoldProof.from_bytes((VECTOR_DIR / "fold-proof.bin").read_bytes()), head
        ).leaf_hash.hex()
    )
    served = (VECTOR_DIR / "receipt-head-served.json").read_bytes().rstrip(b"\n")
    assert receipt == open_any(served).digest
