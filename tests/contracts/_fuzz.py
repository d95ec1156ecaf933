"""Mutation fuzzing of envelopes, statements, evidence files and policies.

A seeded ``random.Random`` picks a valid seed input (the golden vectors) and
a mutation: byte level (bit flips, truncation, insertion, deletion,
duplication), JSON level (wrong types, deleted/added/swapped keys, huge or
deeply nested values, wrong payload type, swapped signatures) and
statement level (the payload is mutated and then *re-signed with the right
key*, so the strict statement parsers and the evidence checks are reached,
not only the signature check). Heads, fold proofs, head-cited and split-view
evidence, and receipts judged lazily under a head are fuzzed the same way.

Every input must be accepted (then it verified) or rejected with a
:class:`contracts.ContractError`; anything else is a finding.
"""

from __future__ import annotations

import base64
import copy
import json
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from contracts import (
    Axis,
    ContractError,
    Envelope,
    Evidence,
    FoldProof,
    Identity,
    SignedHead,
    TrustPolicy,
    apply_attestations,
    build_demand,
    canonical_bytes,
    judge_answer,
    judge_fold_answer,
    open_any,
    open_head,
    pae,
    sha256_hex,
    verify_attestation,
    verify_evidence,
    verify_fold,
    verify_served,
)
from tests.contracts._support import DAY, NOW, fixed_identity, make_head_world, make_world
from tests.contracts.vectors_gen import KEY_NAMES, build_vectors

__all__ = ["FuzzReport", "run_fuzz"]

_SERVED: dict[bool | str, Callable[[bytes], object]] = {}

_NASTY: list[Any] = [
    None,
    True,
    0,
    -1,
    2**64,
    -(2**70),
    1e308,
    0.5,
    "",
    "x" * 5000,
    "\u0000\ud7ff\uffff",
    [],
    {},
    [[[[[]]]]],
    {"a": {"b": {"c": None}}},
    "0" * 64,
    "ff" * 32,
    "APPLICATION/VND.PROVNET.RECEIPT+JSON",
    list(range(50)),
]


@dataclass
class FuzzReport:
    inputs: int = 0
    accepted: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    targets: Counter[str] = field(default_factory=Counter)


class _Keys:
    def __init__(self) -> None:
        self.by_id: dict[str, Identity] = {
            fixed_identity(n).node_id: fixed_identity(n) for n in KEY_NAMES
        }

    def resign(self, env: dict[str, Any], payload: bytes) -> dict[str, Any]:
        """Put ``payload`` in ``env`` and sign it with the envelope's original key."""
        out = dict(env)
        out["payload"] = base64.standard_b64encode(payload).decode()
        sigs = env.get("signatures")
        if isinstance(sigs, list) and sigs and isinstance(sigs[0], dict):
            ident = self.by_id.get(str(sigs[0].get("keyid")))
            ptype = env.get("payloadType")
            if ident is not None and isinstance(ptype, str):
                sig = ident.sign(pae(ptype, payload))
                out["signatures"] = [
                    {"keyid": ident.node_id, "sig": base64.standard_b64encode(sig).decode()}
                ]
        return out


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:8]):
            out += _paths(v, (*prefix, i))
    return out


def _get(obj: Any, path: tuple[Any, ...]) -> Any:
    for p in path:
        obj = obj[p]
    return obj


def _set(obj: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    _get(obj, path[:-1])[path[-1]] = value
    return obj


def _mutate_json(rng: random.Random, obj: Any) -> Any:
    obj = copy.deepcopy(obj)
    path = rng.choice(_paths(obj))
    parent = _get(obj, path[:-1]) if path else None
    # Small in-type tweaks dominate so that strict parsing often passes and
    # the semantic checks behind it are exercised too.
    choice = rng.choices(range(8), weights=(2, 1, 1, 1, 8, 1, 1, 1))[0]
    if choice == 0 or not path:
        return _set(obj, path, copy.deepcopy(rng.choice(_NASTY)))
    if choice == 1 and isinstance(parent, dict):
        del parent[path[-1]]
        return obj
    if choice == 2 and isinstance(parent, dict):
        parent[rng.choice(["extra", "type", "v", "origin", ""])] = rng.choice(_NASTY)
        return obj
    if choice == 3 and isinstance(parent, dict) and len(parent) > 1:
        a, b = rng.sample(list(parent), 2)
        parent[a], parent[b] = parent[b], parent[a]
        return obj
    if choice == 4:
        value = _get(obj, path)
        if isinstance(value, int) and not isinstance(value, bool):
            return _set(obj, path, value + rng.choice([-1, 1, 2**31, -(2**31)]))
        if isinstance(value, str) and value:
            i = rng.randrange(len(value))
            return _set(obj, path, value[:i] + rng.choice("0fgZ ~\u00e9") + value[i + 1 :])
        if isinstance(value, list) and value:
            return _set(obj, path, value[: rng.randrange(len(value))] + value[:1] * 2)
    if choice == 5:
        deep: Any = 0
        for _ in range(rng.choice([20, 40, 200])):
            deep = [deep]
        return _set(obj, path, deep)
    if choice == 6:
        return _set(obj, path, "A" * rng.choice([1000, 100_000]))
    return _set(obj, path, [_get(obj, path)] * rng.randrange(2, 5))


def _mutate_bytes(rng: random.Random, data: bytes) -> bytes:
    buf = bytearray(data)
    choice = rng.randrange(6)
    if choice == 0 and buf:
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(buf))
            buf[i] ^= 1 << rng.randrange(8)
    elif choice == 1:
        del buf[rng.randrange(len(buf) + 1) :]
    elif choice == 2:
        i = rng.randrange(len(buf) + 1)
        buf[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
    elif choice == 3 and buf:
        i = rng.randrange(len(buf))
        del buf[i : i + rng.randint(1, 32)]
    elif choice == 4 and buf:
        i, j = sorted(rng.randrange(len(buf)) for _ in range(2))
        buf[j:j] = buf[i:j]
    else:
        buf = bytearray(rng.choice([b"[" * 5000, b'{"a":' * 3000, b"\xff\xfe", b"", b"null"]))
    return bytes(buf)


def _mutate_envelope(rng: random.Random, keys: _Keys, env: Any) -> Any:
    """Mutate the payload JSON and re-sign it, or mutate the envelope itself."""
    choice = rng.randrange(4)
    if not isinstance(env, dict) or not isinstance(env.get("payload"), str):
        return _mutate_json(rng, env)
    if choice <= 1 and str(env.get("payloadType", "")).endswith("+bin"):
        # demands and receipts: mutate the payload bytes and re-sign, so the
        # strict decoder is reached, not only the signature check
        try:
            raw_payload = base64.b64decode(env["payload"])
        except ValueError:
            return _mutate_json(rng, env)
        return keys.resign(env, _mutate_bytes(rng, raw_payload))
    if choice <= 1:
        try:
            payload = json.loads(base64.b64decode(env["payload"]))
        except ValueError:
            return _mutate_json(rng, env)
        mutated = _mutate_json(rng, payload)
        try:
            raw = canonical_bytes(mutated)
        except (ValueError, TypeError):
            raw = json.dumps(mutated).encode()
        return keys.resign(env, raw)
    if choice == 2:
        out = dict(env)
        out["payloadType"] = rng.choice(
            [
                "application/vnd.provnet.commitment+json",
                "application/vnd.provnet.receipt+json",
                "application/vnd.provnet.demand+json",
                "application/vnd.provnet.demand.v2+bin",
                "application/vnd.provnet.receipt.v2+bin",
                "application/vnd.provnet.demand-batch.v3+bin",
                "application/vnd.provnet.receipt-batch.v3+bin",
                "application/vnd.provnet.attestation+json",
                "application/json",
            ]
        )
        return keys.resign(out, base64.b64decode(env["payload"])) if rng.random() < 0.5 else out
    return _mutate_json(rng, env)


def _target_envelope(data: bytes) -> object:
    signed = open_any(data)
    # Whatever is accepted can be carried on: re-encoding must not fail.
    return signed.envelope.to_bytes()


def _target_evidence(data: bytes) -> object:
    verdict = verify_evidence(data, now=NOW + DAY)
    Evidence.from_bytes(data).to_bytes()
    origin = fixed_identity("origin").node_id
    if verdict.accused != origin:
        raise AssertionError(f"evidence accepted against {verdict.accused[:16]}…, not the origin")
    return verdict


def _target_policy(data: bytes) -> object:
    return TrustPolicy.from_bytes(data).to_bytes()


def _target_attestation(data: bytes) -> object:
    attester = fixed_identity("attester").node_id
    policy = TrustPolicy(
        grants={attester: {Axis.RECONSTRUCTION: 1.0, Axis.VERIFICATION: 0.9}},
        revocations={fixed_identity("stranger").node_id: NOW},
    )
    value = sha256_hex(b"provnet golden value")
    outcome = apply_attestations(
        {a: 0.5 for a in Axis}, [data], value_digest=value, policy=policy, now=NOW + 4_000
    )
    if outcome.applied and outcome.applied[0].statement.axis is Axis.RECONSTRUCTION:
        raise AssertionError("reconstruction raised without a rehydration proof")
    return verify_attestation(data, value_digest=value, policy=policy, now=NOW + 4_000)


class _ServedTarget:
    """A mutated receipt judged against the real demand, obligation and commitment."""

    def __init__(self, partial: bool) -> None:
        w = make_world(n_hops=8, serve_until=NOW + DAY)
        self.world = w
        leaves = [1, 6] if partial else None
        self.demand = build_demand(
            w.holder,
            w.obligation,
            now=NOW + 1_000,
            leaves=leaves,
            nonce=("b2" if partial else "a1") * 16,
        )
        self.hops = [w.hops[i] for i in (leaves or range(8))]

    def __call__(self, data: bytes) -> object:
        w = self.world
        answer = judge_answer(
            data,
            self.hops,
            demand=self.demand,
            obligation=w.obligation,
            commitment=w.commitment,
            reported_at=NOW,
        )
        if answer.evidence is not None:
            verify_evidence(answer.evidence, now=NOW)
        return verify_served(
            data, self.hops, demand=self.demand, obligation=w.obligation, commitment=w.commitment
        )


class _HeadServedTarget:
    """A mutated receipt judged lazily for a fold under a verified head."""

    def __init__(self) -> None:
        self.world = make_head_world(values=3, compactions=2)

    def __call__(self, data: bytes) -> object:
        w = self.world
        hops = w.hops["value:42"]
        answer = judge_fold_answer(data, hops, demand=w.demand, fold=w.fold, reported_at=NOW)
        if answer.evidence is not None:
            # Whatever the lazy judge calls evidence must verify standalone.
            verify_evidence(answer.evidence.to_bytes(), now=NOW)
        if answer.served is not None and answer.served.hops != tuple(hops):
            raise AssertionError("lazy judge served other bytes than the committed ones")
        return answer


class _FoldProofTarget:
    """A mutated fold proof, proven under the golden head."""

    def __init__(self, head: bytes) -> None:
        self.head: SignedHead = open_head(head)

    def __call__(self, data: bytes) -> object:
        return verify_fold(FoldProof.from_bytes(data), self.head)


def _one(
    rng: random.Random, keys: _Keys, seeds: dict[str, bytes]
) -> tuple[bytes, Callable[[bytes], object]]:
    name = rng.choice(sorted(seeds))
    if name.endswith(".note"):
        # a signed note is text: mutated as bytes, opened as a head
        return _mutate_bytes(rng, seeds[name]), open_head
    if name == "fold-proof.bin":  # binary: its one encoding, mutated as bytes
        return _mutate_bytes(rng, seeds[name]), _SERVED["fold-proof"]
    data = seeds[name].rstrip(b"\n")
    if name.startswith("evidence"):
        target: Callable[[bytes], object] = _target_evidence
    elif name == "trust-policy.json":
        target = _target_policy
    elif name in ("keys.json", "hops.json", "attestation-hop.json"):
        return _mutate_bytes(rng, data), _target_envelope
    elif name == "receipt-head-served.json" and rng.random() < 0.5:
        target = _SERVED["head"]
    elif name == "attestation.json" and rng.random() < 0.5:
        target = _target_attestation
    elif name.startswith(("receipt-served", "receipt-partial")) and rng.random() < 0.5:
        target = _SERVED[name.startswith("receipt-partial")]
    else:
        target = _target_envelope
    mode = rng.randrange(3)
    if mode == 0:
        return _mutate_bytes(rng, data), target
    obj = json.loads(data)
    if name.startswith("evidence") and mode == 2:
        slots = [
            k
            for k in ("commitment", "obligation", "demand", "receipt", "conflicting")
            if isinstance(obj.get(k), dict)
        ]
        lists = [k for k in ("witness_demands", "witness_reports", "answers") if obj.get(k)]
        if slots or lists:
            pick = rng.choice(slots + lists)
            if pick in lists:
                obj[pick] = [_mutate_envelope(rng, keys, e) for e in obj[pick]]
            else:
                obj[pick] = _mutate_envelope(rng, keys, obj[pick])
            if rng.random() < 0.2 and slots:
                # swapped keys: move one statement into another slot
                a = rng.choice(slots)
                obj[pick], obj[a] = obj.get(a), obj.get(pick)
        else:
            obj = _mutate_json(rng, obj)
    elif name.startswith("evidence") and isinstance(obj.get("proof"), dict) and mode == 1:
        obj["proof"] = _mutate_json(rng, obj["proof"])
    elif target is not _target_evidence and target is not _target_policy and mode == 2:
        obj = _mutate_envelope(rng, keys, obj)
    else:
        obj = _mutate_json(rng, obj)
    try:
        return json.dumps(obj).encode(), target
    except (ValueError, TypeError, RecursionError):
        return data, target


def run_fuzz(n: int, seed: int) -> FuzzReport:
    """Run ``n`` mutated inputs; failures list any non-ContractError outcome."""
    rng = random.Random(seed)
    keys = _Keys()
    seeds = build_vectors()
    _SERVED.clear()
    # each seed receipt is judged against the demand it answers
    _SERVED[False] = _ServedTarget(False)
    _SERVED[True] = _ServedTarget(True)
    _SERVED["head"] = _HeadServedTarget()
    _SERVED["fold-proof"] = _FoldProofTarget(seeds["head.note"])
    # A signature from another envelope, grafted on: swapped signatures.
    extra = Envelope.from_bytes(seeds["commitment.json"].rstrip(b"\n")).to_json()
    receipt = Envelope.from_bytes(seeds["receipt-served.json"].rstrip(b"\n")).to_json()
    receipt["signatures"] = extra["signatures"]
    seeds["swapped-signature.json"] = json.dumps(receipt).encode()
    report = FuzzReport()
    for _ in range(n):
        data, target = _one(rng, keys, seeds)
        report.inputs += 1
        report.targets[getattr(target, "__name__", type(target).__name__)] += 1
        try:
            target(data)
        except ContractError as exc:
            report.rejected[type(exc).__name__] += 1
            continue
        except Exception as exc:
            report.failures.append(f"{type(exc).__name__}: {exc!s:.200} on {data[:200]!r}")
            continue
        report.accepted += 1
    return report
