"""``provnet cluster smoke``: the cross-agent smoke test on a running local cluster.

The cluster's first three nodes play A (origin), B (holder) and C (the next
holder). The steps, each printed as one JSON object when it ends::

    commit        A appends hops and commits a fold -> commitment + obligation
    deliver       A delivers the compacted value to B -> B's signed delivery receipt
    rehydrate_b   B demands the folded hops from A and verifies them (one RPC)
    forward       B forwards the value, unchanged, to C
    rehydrate_c   C demands from A directly (the duty travels with the value, S7);
                  A's serve counter rises once for B and once for C
    tamper        an extra node started with fault 'tamper' commits and delivers to
                  B; B's rehydration yields bad_data evidence, a file under
                  $PROVNET_HOME/evidence that 'provnet evidence verify' accepts
    crash         an extra node started with fault 'crash' commits and delivers to
                  B, then dies on the demand; B records 'unanswered', confirmed by
                  the witnesses it asks (C and A)
    intact        the cluster is as it was found: same pids, all SERVING, and the
                  extra nodes are gone

Each object has ``name``, ``ok``, ``expected``, ``observed`` and ``timings``
(milliseconds); the command exits 1 if any step is not ok. Progress lines go
to stderr while it runs. The extra nodes live under
``$PROVNET_HOME/smoke/<run-id>/`` (data dirs and logs) and are always stopped.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from nodes.cluster import (
    DEFAULT_START_TIMEOUT_S,
    LOOPBACK,
    ClusterError,
    HealthState,
    NodeRecord,
    NodeSpec,
    child_env,
    free_ports,
    is_alive,
    load_state,
    probe_health,
    provnet_argv,
    start_node,
    stop_node,
)
from nodes.home import Home, HomeError, check_node_name
from nodes.methods import method_name
from nodes.refusal import ControlRefused, control_refused, is_refusal

if TYPE_CHECKING:
    from nodes.auth import ControlCredentials
    from nodes.client_tls import ClientTls
    from nodes.control import CallRecord
    from nodes.messages import CommittedFold, NodeInfo, OriginOutcome, RehydrationReport
    from nodes.transport import CallFailed

__all__ = [
    "SMOKE_STEPS",
    "Member",
    "StepResult",
    "cluster_members",
    "run_smoke",
]


#: Hops per fold in the smoke test (each a lineage record as in the experiment).
_FOLD_HOPS = 5
#: Deadline the smoke's obligations promise per demand, kept short so the
#: crash step's 'unanswered' is decided quickly.
_DEADLINE_MS = 1500
_SERVE_FOR_MS = 10 * 60 * 1000
_RPC_TIMEOUT_S = 10.0
_REHYDRATE_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class StepResult:
    """One smoke step's outcome, printed as one JSON object."""

    name: str
    ok: bool
    expected: str
    observed: dict[str, Any]
    timings: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ok": self.ok,
            "expected": self.expected,
            "observed": self.observed,
            "timings": {k: round(v, 2) for k, v in self.timings.items()},
        }


class _StepFailed(Exception):
    def __init__(self, observed: dict[str, Any]) -> None:
        super().__init__(json.dumps(observed, default=str))
        self.observed = observed


def _fold_hops(tag: str, count: int = _FOLD_HOPS) -> list[bytes]:
    """``count`` lineage records shaped like the experiment's hops (spec §3)."""
    hops = []
    for step in range(1, count + 1):
        first = step == 1
        hop = {
            "hop_id": f"h{step:06d}",
            "step": step,
            "op": "fetch" if first else "summarize",
            "axis_deltas": {"verification": 0.45} if first else {"fidelity": 0.9},
            "taints_added": [f"taint:unverified_web:{step}"] if first else [],
            "parent_hop_ids": [] if first else [f"h{step - 1:06d}"],
            "smoke": tag,
        }
        hops.append(json.dumps(hop, sort_keys=True).encode())
    return hops


#: The step timings a call's duration is reported under (``timings`` of its step).
_TIMING_OF = {
    method_name("HopLog", "Append"): "append_ms",
    method_name("HopLog", "CommitFold"): "commit_fold_ms",
    method_name("Deliver", "Forward"): "forward_ms",
    method_name("Deliver", "Rehydrate"): "rehydrate_ms",
}


class _Driver:
    """The smoke test's calls to cluster nodes (:class:`nodes.control.NodeClients`:
    one signed channel per address, every call with a deadline, shed calls retried)."""

    def __init__(self, credentials: ControlCredentials | None, tls: ClientTls) -> None:
        from nodes.control import NodeClients

        self.credentials = credentials
        self.clients = NodeClients(
            credentials, timeout=_RPC_TIMEOUT_S, on_call=self._timed, tls=tls.files()
        )
        self.timings: dict[str, float] = {}

    def _timed(self, call: CallRecord) -> None:
        label = _TIMING_OF.get(call.method)
        if label is not None:
            self.timings[label] = call.ms

    async def close(self) -> None:
        await self.clients.close()

    async def info(self, address: str) -> NodeInfo:
        return await self.clients.at(address).info()

    async def counters(self, address: str) -> dict[str, int]:
        return await self.clients.at(address).stats()

    async def commit(self, address: str, value_ref: str, tag: str) -> CommittedFold:
        client = self.clients.at(address)
        hops = _fold_hops(tag)
        # Fresh sequence numbers on every run, so smoke runs can repeat on one cluster.
        base = time.time_ns() // 1_000_000 * 100
        seqs = await client.append(hops, [base + i for i in range(len(hops))])
        return await client.commit_fold(
            value_ref,
            seqs,
            serve_for_ms=_SERVE_FOR_MS,
            deadline_ms=_DEADLINE_MS,
            value=f"compacted value {value_ref}".encode(),
        )

    async def forward(self, address: str, value_ref: str, peer: str) -> bytes:
        """The peer's signed delivery receipt."""
        return await self.clients.at(address).forward(value_ref, peer)

    async def rehydrate(
        self, address: str, value_ref: str, witnesses: list[str]
    ) -> RehydrationReport:
        return await self.clients.at(address).rehydrate(
            value_ref, witnesses, timeout=_REHYDRATE_TIMEOUT_S
        )


def _outcomes(reply: RehydrationReport) -> list[dict[str, Any]]:
    return [
        {
            "origin": o.origin,
            "outcome": o.outcome.value,
            "detail": o.detail,
            "asks": o.asks,
            "witnesses_asked": o.witnesses_asked,
            "witnesses_unanswered": o.witnesses_unanswered,
            "witness_confirmed": o.witness_confirmed,
            "evidence_path": o.evidence_path,
        }
        for o in reply.outcomes
    ]


@dataclass(frozen=True, slots=True)
class Member:
    """A cluster node the smoke test talks to; ``pid`` is known for local clusters only."""

    name: str
    address: str
    pid: int | None = None

    @classmethod
    def parse_list(cls, text: str) -> tuple[Member, ...]:
        """``name=host:port`` entries separated by ';', ',' or spaces (e.g. Compose services)."""
        members = []
        for entry in re.split(r"[;,\s]+", text.strip()):
            if not entry:
                continue
            name, sep, address = entry.partition("=")
            host, colon, port = address.rpartition(":")
            if not sep or not colon or not host or not port.isdigit():
                raise ValueError(f"--nodes entry {entry!r}: expected name=host:port")
            members.append(cls(check_node_name(name), address))
        if len(members) < 3:
            raise ValueError(f"--nodes {text!r}: the smoke test needs 3 nodes (A, B, C)")
        return tuple(members)


@dataclass(slots=True)
class _Run:
    """State shared by the steps of one smoke run."""

    home: Home
    run_id: str
    driver: _Driver
    start_timeout: float
    say: Callable[[str], None]
    members: tuple[Member, ...]
    #: Host under which the cluster reaches the smoke's extra nodes.
    extra_host: str = LOOPBACK
    #: TLS: the CA nodes are verified with, and the extra nodes' (ca, cert, key).
    ca_pem: bytes | None = None
    extra_tls: tuple[Path, Path, Path] | None = None
    ids: dict[str, str] = field(default_factory=dict)
    value_ref: str = ""
    #: Merkle root (hex) of A's committed fold, as signed by A.
    root: str = ""
    a_serves_before: int = 0
    extra_pids: list[int] = field(default_factory=list)

    @property
    def a(self) -> Member:
        return self.members[0]

    @property
    def b(self) -> Member:
        return self.members[1]

    @property
    def c(self) -> Member:
        return self.members[2]

    @property
    def run_dir(self) -> Path:
        return self.home.smoke_dir / self.run_id


# --------------------------------------------------------------------------- steps


async def _step_commit(run: _Run) -> dict[str, Any]:
    run.value_ref = f"smoke-{run.run_id}"
    reply = await run.driver.commit(run.a.address, run.value_ref, run.run_id)
    observed = {
        "origin": run.a.name,
        "value_ref": run.value_ref,
        "commitment_bytes": len(reply.commitment),
        "obligation_bytes": len(reply.obligation),
        "provenance_pending": reply.provenance_pending,
    }
    if not reply.commitment or not reply.obligation or reply.provenance_pending:
        raise _StepFailed(observed)
    observed.update(_check_commitment(run, reply.commitment, reply.obligation))
    return observed


def _check_commitment(run: _Run, commitment: bytes, obligation: bytes) -> dict[str, Any]:
    """Verify A's statements with contracts: the driver does not take a node's word for it."""
    from contracts import ContractError, verify_delivery

    try:
        c, o = verify_delivery(
            commitment, obligation, now=time.time_ns() // 1_000_000, origin=run.ids[run.a.name]
        )
    except ContractError as exc:
        raise _StepFailed({"verify": f"{type(exc).__name__}: {exc}"}) from exc
    run.root = c.statement.root
    observed = {
        "commitment": c.digest[:16],
        "obligation": o.digest[:16],
        "leaf_count": c.statement.leaf_count,
        "root": c.statement.root[:16],
    }
    if c.statement.leaf_count != _FOLD_HOPS:
        raise _StepFailed(observed)
    return observed


async def _step_deliver(run: _Run) -> dict[str, Any]:
    receipt = await run.driver.forward(run.a.address, run.value_ref, run.b.name)
    observed = {
        "from": run.a.name,
        "to": run.b.name,
        "delivery_receipt_bytes": len(receipt),
    }
    if not receipt:
        raise _StepFailed(observed)
    return observed


def _served_by(run: _Run, reply: RehydrationReport) -> tuple[bool, dict[str, Any]]:
    """Served by A, in one RPC, and the returned hops hash to the root A signed."""
    from contracts import merkle_root

    outcomes = _outcomes(reply)
    hops = [h.hop for h in sorted(reply.hops, key=lambda h: h.leaf_index)]
    root_matches = bool(hops) and merkle_root(hops).hex() == run.root
    observed: dict[str, Any] = {
        "outcomes": outcomes,
        "hops": len(hops),
        "rpcs": reply.rpcs,
        "complete": reply.complete,
        "hops_hash_to_signed_root": root_matches,
    }
    ok = (
        len(outcomes) == 1
        and outcomes[0]["origin"] == run.ids[run.a.name]
        and outcomes[0]["outcome"] == "served"
        and len(hops) == _FOLD_HOPS
        and root_matches
        and reply.rpcs == 1
        and reply.complete
    )
    return ok, observed


async def _step_rehydrate_b(run: _Run) -> dict[str, Any]:
    run.a_serves_before = (await run.driver.counters(run.a.address)).get("serves", 0)
    reply = await run.driver.rehydrate(run.b.address, run.value_ref, [run.c.address])
    ok, observed = _served_by(run, reply)
    observed["holder"] = run.b.name
    if not ok:
        raise _StepFailed(observed)
    return observed


async def _step_forward(run: _Run) -> dict[str, Any]:
    receipt = await run.driver.forward(run.b.address, run.value_ref, run.c.name)
    observed = {
        "from": run.b.name,
        "to": run.c.name,
        "delivery_receipt_bytes": len(receipt),
    }
    if not receipt:
        raise _StepFailed(observed)
    return observed


async def _step_rehydrate_c(run: _Run) -> dict[str, Any]:
    reply = await run.driver.rehydrate(run.c.address, run.value_ref, [run.b.address])
    ok, observed = _served_by(run, reply)
    serves_after = (await run.driver.counters(run.a.address)).get("serves", 0)
    observed["holder"] = run.c.name
    observed["origin_serves_delta"] = serves_after - run.a_serves_before
    # B's and C's demands both reached A: C asked the origin itself, not B.
    if not ok or serves_after - run.a_serves_before != 2:
        raise _StepFailed(observed)
    return observed


@contextmanager
def _extra_node(
    run: _Run, name: str, fault: str
) -> Iterator[tuple[NodeRecord, subprocess.Popen[bytes]]]:
    (port,) = free_ports(1, "" if run.extra_host != LOOPBACK else LOOPBACK)
    spec = NodeSpec(
        name=name,
        port=port,
        # Reachable from other hosts only when the cluster is elsewhere (Compose).
        host=LOOPBACK if run.extra_host == LOOPBACK else "0.0.0.0",
        advertise=None if run.extra_host == LOOPBACK else f"{run.extra_host}:{port}",
        data_dir=run.run_dir / "nodes" / name,
        log_file=run.run_dir / "logs" / f"{name}.log",
        peers=tuple(f"{m.name}={m.address}" for m in run.members),
        evidence_dir=run.home.evidence_dir / name,
        fault=fault,
        operator_keys=(
            (run.driver.credentials.key_id,) if run.driver.credentials is not None else ()
        ),
        tls_ca=None if run.extra_tls is None else run.extra_tls[0],
        tls_cert=None if run.extra_tls is None else run.extra_tls[1],
        tls_key=None if run.extra_tls is None else run.extra_tls[2],
    )
    run.say(f"starting extra node {name} (fault {fault}) on {spec.address}")
    record, proc = start_node(spec, timeout=run.start_timeout)
    run.extra_pids.append(record.pid)
    try:
        yield record, proc
    finally:
        outcome = stop_node(record, grace=2.0, proc=proc)
        run.say(f"extra node {name} stopped ({outcome}, exit code {proc.returncode})")


def _verify_evidence_file(path: Path) -> tuple[int, str]:
    """Run the real ``provnet evidence verify`` on ``path``: (exit code, its output)."""
    done = subprocess.run(
        provnet_argv("evidence", "verify", str(path)),
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.returncode, (done.stdout + done.stderr).strip()


def _evidence_file(run: _Run, kind: str, outcome: OriginOutcome) -> Path:
    """The holder's own evidence file when this machine sees it, else a copy of its bytes.

    A local holder writes under ``$PROVNET_HOME/evidence/<holder>/``; a holder in
    another container does not share that directory, so the bytes it returned
    are written under this run's ``$PROVNET_HOME/evidence/smoke-<run-id>/``.
    """
    written = Path(outcome.evidence_path) if outcome.evidence_path else None
    if written is not None and written.is_file() and written.read_bytes() == outcome.evidence:
        return written
    path = run.home.evidence_dir / f"smoke-{run.run_id}" / f"{kind}-{outcome.origin[:16]}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(outcome.evidence))
    return path


async def _fault_commit_and_deliver(run: _Run, record: NodeRecord, tag: str) -> tuple[str, str]:
    value_ref = f"smoke-{run.run_id}-{tag}"
    info = await run.driver.info(record.address)
    reply = await run.driver.commit(record.address, value_ref, f"{run.run_id}-{tag}")
    if not reply.commitment or not reply.obligation:
        raise _StepFailed({"origin": record.name, "commit": "no commitment/obligation returned"})
    delivered = await run.driver.forward(record.address, value_ref, run.b.name)
    if not delivered:
        raise _StepFailed({"origin": record.name, "deliver": "no delivery receipt"})
    return value_ref, str(info.node_id)


async def _step_tamper(run: _Run) -> dict[str, Any]:
    with _extra_node(run, f"t-{run.run_id[-6:]}", "tamper") as (record, _proc):
        value_ref, origin_id = await _fault_commit_and_deliver(run, record, "tamper")
        reply = await run.driver.rehydrate(run.b.address, value_ref, [run.c.address])
    outcomes = _outcomes(reply)
    observed: dict[str, Any] = {
        "origin": record.name,
        "outcomes": outcomes,
        "hops": len(reply.hops),
    }
    mine = [o for o in reply.outcomes if o.origin == origin_id]
    if len(mine) != 1 or mine[0].outcome != "bad_data" or not mine[0].evidence or reply.hops:
        raise _StepFailed(observed)
    path = _evidence_file(run, "bad_data", mine[0])
    code, said = _verify_evidence_file(path)
    observed.update({"evidence_file": str(path), "verify_exit": code, "verify_said": said})
    # The verifier must accept it and name the tamperer, nobody else.
    if code != 0 or origin_id not in said:
        raise _StepFailed(observed)
    return observed


async def _step_crash(run: _Run) -> dict[str, Any]:
    with _extra_node(run, f"k-{run.run_id[-6:]}", "crash") as (record, proc):
        value_ref, origin_id = await _fault_commit_and_deliver(run, record, "crash")
        reply = await run.driver.rehydrate(run.b.address, value_ref, [run.c.address, run.a.address])
        try:
            exit_code: int | None = proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            exit_code = None
    outcomes = _outcomes(reply)
    observed: dict[str, Any] = {
        "origin": record.name,
        "origin_exit_code": exit_code,
        "outcomes": outcomes,
    }
    mine = [o for o in reply.outcomes if o.origin == origin_id]
    if (
        exit_code is None
        or len(mine) != 1
        or mine[0].outcome != "unanswered"
        or not mine[0].witness_confirmed
        or not mine[0].evidence
    ):
        raise _StepFailed(observed)
    # A suspicion, not a proof: still a file a third party can check.
    path = _evidence_file(run, "unanswered", mine[0])
    code, said = _verify_evidence_file(path)
    observed.update({"evidence_file": str(path), "verify_exit": code, "verify_said": said})
    if code != 0 or origin_id not in said:
        raise _StepFailed(observed)
    return observed


async def _step_intact(run: _Run) -> dict[str, Any]:
    ids = {m.name: str((await run.driver.info(m.address)).node_id) for m in run.members}
    health = {m.name: str(probe_health(m.address, tls_ca=run.ca_pem)) for m in run.members}
    pids_alive = {m.name: is_alive(m.pid) for m in run.members if m.pid is not None}
    extra_alive = [pid for pid in run.extra_pids if is_alive(pid)]
    observed = {
        "health": health,
        "same_node_ids": ids == run.ids,
        "pids_alive": pids_alive,
        "extra_nodes_started": len(run.extra_pids),
        "extra_nodes_alive": extra_alive,
    }
    if (
        ids != run.ids
        or extra_alive
        or not all(pids_alive.values())
        or any(h != HealthState.SERVING for h in health.values())
    ):
        raise _StepFailed(observed)
    return observed


@dataclass(frozen=True, slots=True)
class _Step:
    name: str
    expected: str
    run: Callable[[_Run], Awaitable[dict[str, Any]]]
    needs: tuple[str, ...] = ()


_STEPS = (
    _Step(
        "commit", "A commits a fold: signed commitment and obligation, not pending", _step_commit
    ),
    _Step(
        "deliver",
        "A delivers the value to B: B signs a delivery receipt",
        _step_deliver,
        ("commit",),
    ),
    _Step(
        "rehydrate_b",
        "B rehydrates from A in one RPC: served, all hops verified",
        _step_rehydrate_b,
        ("deliver",),
    ),
    _Step(
        "forward",
        "B forwards the value to C: C signs a delivery receipt",
        _step_forward,
        ("deliver",),
    ),
    _Step(
        "rehydrate_c",
        "C rehydrates from A directly (A serves once more): served, all hops verified",
        _step_rehydrate_c,
        ("forward", "rehydrate_b"),
    ),
    _Step(
        "tamper",
        "a tampering origin: B records bad_data evidence that 'provnet evidence verify' accepts",
        _step_tamper,
    ),
    _Step(
        "crash",
        "an origin that dies on the demand: B records unanswered, confirmed by witnesses, "
        "in an evidence file that 'provnet evidence verify' accepts",
        _step_crash,
    ),
    _Step(
        "intact", "the cluster is as found: same pids, all SERVING, extra nodes gone", _step_intact
    ),
)
#: Step names in the order they run (and print).
SMOKE_STEPS = tuple(step.name for step in _STEPS)


async def _run_steps(run: _Run, emit: Callable[[StepResult], None]) -> list[StepResult]:
    from nodes.transport import CallFailed

    results: list[StepResult] = []
    done: dict[str, bool] = {}
    try:
        for member in run.members:
            try:
                run.ids[member.name] = str((await run.driver.info(member.address)).node_id)
            except CallFailed as exc:
                raise ClusterError(
                    f"node {member.name} at {member.address}: provnet.v1.Node/Info failed: "
                    f"{exc.code}: {exc.message}"
                ) from exc
        for step in _STEPS:
            name, expected = step.name, step.expected
            run.driver.timings = {}
            run.say(f"smoke step {name}: {expected}")
            start = time.perf_counter()
            missing = [n for n in step.needs if not done.get(n)]
            if missing:
                ok, observed = False, {"skipped": f"needs {', '.join(missing)}"}
            else:
                try:
                    observed, ok = await step.run(run), True
                except _StepFailed as exc:
                    observed, ok = exc.observed, False
                except ClusterError as exc:
                    observed, ok = {"error": str(exc)}, False
                except CallFailed as exc:  # a node answered with an error status
                    if is_refusal(exc):
                        # A set-up mistake: every later step would deviate the same way.
                        raise _refused(run, exc) from None
                    observed, ok = {"error": f"{type(exc).__name__}: {exc}"}, False
                except Exception as exc:  # a reply that does not parse, a failed check
                    observed, ok = {"error": f"{type(exc).__name__}: {exc}"}, False
            timings = dict(run.driver.timings)
            timings["step_ms"] = (time.perf_counter() - start) * 1000.0
            result = StepResult(name, ok, expected, observed, timings)
            done[name] = ok
            results.append(result)
            emit(result)
            run.say(f"smoke step {name}: {'ok' if ok else 'DEVIATES'}")
    finally:
        await run.driver.close()
    return results


def _refused(run: _Run, exc: CallFailed) -> ControlRefused:
    """The error for a node refusing the smoke test's control call (the node called,
    else the one its answer names)."""
    member = next((m for m in run.members if m.address == exc.address), None)
    if member is not None:
        name, address = member.name, member.address
    else:
        named = re.search(r"node '([a-z0-9_-]+)'", exc.message)
        name = named.group(1) if named else "?"
        address = exc.address
    creds = run.driver.credentials
    return control_refused(name, address, exc, signer=None if creds is None else creds.key_id)


def smoke_credentials(home: Home, local: bool) -> ControlCredentials | None:
    """The operator key the smoke test signs control calls with.

    ``$PROVNET_OPERATOR_KEY_FILE`` if set (a Compose cluster's key), else the
    local cluster's ``<home>/operator.key`` (created with the cluster).
    """
    from nodes.auth import operator_credentials
    from nodes.cluster import operator_key

    found = operator_credentials(home.root)
    if found is None and local:
        found = operator_key(home)
    return found


def cluster_members(home: Home) -> tuple[Member, ...]:
    """The first three nodes of the local cluster recorded under ``home``, all SERVING."""
    state = load_state(home)
    if state is None:
        raise ClusterError(f"no cluster recorded under {home.root}; run 'provnet cluster up'")
    if len(state.nodes) < 3:
        raise ClusterError(f"the smoke test needs 3 nodes; the cluster has {len(state.nodes)}")
    for record in state.nodes:
        if not is_alive(record.pid):
            raise ClusterError(
                f"node {record.name} (pid {record.pid}) is not running; "
                "see 'provnet cluster status'"
            )
    return tuple(Member(r.name, r.address, r.pid) for r in state.nodes[:3])


def run_smoke(
    home: Home,
    *,
    members: tuple[Member, ...] | None = None,
    extra_host: str = LOOPBACK,
    start_timeout: float = DEFAULT_START_TIMEOUT_S,
    progress: Callable[[str], None] | None = None,
    out: IO[str] | None = None,
    tls: ClientTls | None = None,
) -> list[StepResult]:
    """Run every smoke step and print one JSON line per step to ``out``.

    ``members`` (A, B, C) default to the local cluster recorded under ``home``;
    extra fault nodes are started locally and advertised as ``extra_host``.
    ``tls`` (:mod:`nodes.client_tls`): every call is TLS, verified against its
    CA, and the extra nodes serve TLS (its certificate, or one made with the
    CA key beside the CA); a TLS setting that cannot work raises
    :class:`nodes.tls.TlsError` before anything runs.
    Raises ``ClusterError`` if a member is not SERVING before the first step.
    """
    from nodes.client_tls import ClientTls, reachability

    say = progress or (lambda _msg: None)
    tls = tls or ClientTls()
    chosen = cluster_members(home) if members is None else members
    ca_pem = tls.ca_pem()
    for member in chosen:
        health = probe_health(member.address, timeout=2.0, tls_ca=ca_pem)
        if health is not HealthState.SERVING:
            raise ClusterError(
                f"node {member.name} at {member.address}"
                f" {reachability(member.address, ca_pem, str(health))}"
            )
    try:
        home.ensure()
    except HomeError as exc:
        raise ClusterError(str(exc)) from None
    run_id = time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + f"-{time.time_ns() % 1000000:06d}"
    extra_tls = None
    if tls.ca is not None:
        # the nodes dial the extra nodes by extra_host: their certificate names it
        cert, key = tls.serving(home.smoke_dir / run_id / "tls", extra_host)
        extra_tls = (tls.ca, cert, key)
    run = _Run(
        home=home,
        run_id=run_id,
        driver=_Driver(smoke_credentials(home, members is None), tls),
        start_timeout=start_timeout,
        say=say,
        members=chosen,
        extra_host=extra_host,
        ca_pem=ca_pem,
        extra_tls=extra_tls,
    )

    def emit(result: StepResult) -> None:
        if out is not None:
            print(json.dumps(result.to_json(), sort_keys=True), file=out, flush=True)

    return asyncio.run(_run_steps(run, emit))
