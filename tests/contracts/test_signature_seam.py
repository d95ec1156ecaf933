"""The seam through which Ed25519 operations are counted (``observe_signatures``)."""

from __future__ import annotations

import ast
import asyncio
import threading
from pathlib import Path

import pytest

from contracts.errors import BadSignature
from contracts.identity import (
    Identity,
    PublicKey,
    SignatureCount,
    observe_signatures,
)

ROOT = Path(__file__).resolve().parents[2]


def test_three_signatures_and_two_verifications_count_as_three_and_two() -> None:
    identity = Identity.from_seed(b"\x01" * 32)
    counted = SignatureCount()
    with observe_signatures(counted) as installed:
        assert installed is counted
        sigs = [identity.sign(b"message %d" % i) for i in range(3)]
        identity.public.verify(sigs[0], b"message 0")
        # a verification that fails is a verification made
        with pytest.raises(BadSignature, match="does not verify"):
            identity.public.verify(sigs[1], b"not message 1")
    assert (counted.signs, counted.verifies) == (3, 2)
    assert counted.seconds > 0.0
    # nothing is counted once the observer is removed
    identity.public.verify(identity.sign(b"after"), b"after")
    assert (counted.signs, counted.verifies) == (3, 2)


def test_a_signature_of_the_wrong_length_is_a_counted_verification() -> None:
    key = Identity.from_seed(b"\x02" * 32).public
    counted = SignatureCount()
    with observe_signatures(counted), pytest.raises(BadSignature, match="3 bytes, not 64"):
        key.verify(b"abc", b"data")
    assert (counted.signs, counted.verifies) == (0, 1)


def test_a_second_observer_is_refused_and_the_first_keeps_counting() -> None:
    identity = Identity.from_seed(b"\x03" * 32)
    first, second = SignatureCount(), SignatureCount()
    with observe_signatures(first):
        with (
            pytest.raises(RuntimeError, match=r"already installed.*SignatureCount"),
            observe_signatures(second),
        ):
            pass  # pragma: no cover - never entered
        identity.sign(b"x")
    assert (first.signs, second.signs) == (1, 0)
    with observe_signatures(second):  # the slot is free again
        identity.sign(b"y")
    assert (first.signs, second.signs) == (1, 1)


def test_operations_on_other_threads_are_all_counted() -> None:
    identity = Identity.from_seed(b"\x04" * 32)
    signature = identity.sign(b"data")
    counted = SignatureCount()
    threads, per_thread = 4, 200

    def work() -> None:
        for _ in range(per_thread):
            identity.sign(b"data")
            identity.public.verify(signature, b"data")

    with observe_signatures(counted):
        pool = [threading.Thread(target=work) for _ in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join(timeout=60)
        assert not any(t.is_alive() for t in pool)
    assert (counted.signs, counted.verifies) == (threads * per_thread, threads * per_thread)


def test_a_task_started_before_the_observer_is_counted_too() -> None:
    # In-process nodes answer gRPC calls in tasks the server spawned before the
    # harness installed its meter; their signatures must count (a context-local
    # meter would miss them).
    identity = Identity.from_seed(b"\x05" * 32)
    counted = SignatureCount()

    async def scenario() -> None:
        go = asyncio.Event()

        async def server_side() -> None:
            await go.wait()
            identity.public.verify(identity.sign(b"served"), b"served")

        task = asyncio.create_task(server_side())
        await asyncio.sleep(0)
        with observe_signatures(counted):
            go.set()
            await asyncio.wait_for(task, timeout=10)

    asyncio.run(scenario())
    assert (counted.signs, counted.verifies) == (1, 1)


def test_no_source_outside_the_tests_replaces_sign_or_verify() -> None:
    offenders = []
    for package in ("contracts", "nodes", "harness", "benchmarks"):
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                targets: list[ast.expr] = []
                if isinstance(node, ast.Assign):
                    targets = list(node.targets)
                elif (
                    isinstance(node, ast.Call)
                    and "setattr"
                    in {getattr(node.func, "id", None), getattr(node.func, "attr", None)}
                    and len(node.args) >= 2
                    and isinstance(node.args[1], ast.Constant)
                    and node.args[1].value in {"sign", "verify"}
                ):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
                for target in targets:
                    if (
                        isinstance(target, ast.Attribute)
                        and target.attr in {"sign", "verify"}
                        and isinstance(target.value, ast.Name)
                        and target.value.id in {"Identity", "PublicKey"}
                    ):
                        offenders.append(f"{path.relative_to(ROOT)}:{target.lineno}")
    assert offenders == [], offenders
    assert Identity.sign.__qualname__ == "Identity.sign"
    assert PublicKey.verify.__qualname__ == "PublicKey.verify"
