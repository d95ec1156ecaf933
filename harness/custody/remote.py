"""``provnet experiment custody --cluster`` / ``--nodes``: the sweep on running nodes.

The running nodes hold and witness: the first one given (or the cluster's
first) is the holder, the next the witness. The parties that depart —
origins and custodians — are extra node processes this command starts
(``provnet node``, as ``provnet cluster smoke`` starts its extra nodes, on
loopback, accepting the operator key's control calls) and stops itself:

- a trial's origin gets its hops (``HopLog.Append``) and commits them
  (``HopLog.CommitCompaction``, the promised deadline the sweep's), and the
  driver delivers the value to the holder as the origin's ``send`` does;
- a party that departs has its process stopped (SIGTERM, then SIGKILL) and
  its data directory removed; a new process with a new identity takes its
  place in the next trial;
- the holder process demands the folds (``Deliver.Rehydrate``, the witness
  named), verifies them and records its evidence; the driver reads the
  report.

With a CA (``--tls-ca``, ``$PROVNET_TLS_CA``, or a cluster started with
``cluster up --tls``) every call is TLS and the extra processes serve TLS with
a certificate issued under that CA for this run (:mod:`harness.custody.remote_tls`).

The running nodes are left as found: nothing is started or stopped on them,
no setting of theirs changes. What they keep is what any holder keeps of
values delivered to it (the held values, evidence files under their
evidence directory), in refs of this session only.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.cli_errors import RunFailed, UsageError
from harness.custody.remote_tls import CustodyTls, resolve_tls
from harness.custody.settings import CustodyError, CustodySettings
from harness.custody.trials import TrialPool, _fields, cell_goal
from harness.events import Hop
from nodes.messages import CommittedCompaction, Delivery, RehydrationReport
from nodes.transport import CallFailed

__all__ = ["RemotePool", "run_on_running"]

_CONTROL_TIMEOUT_S = 30.0
_START_TIMEOUT_S = 60.0


@dataclass(slots=True)
class _Proc:
    """An extra node process this command started."""

    name: str
    node_id: str
    address: str
    record: Any
    proc: Any
    data_dir: Path
    next_seq: int = 1


@dataclass(frozen=True, slots=True)
class _Member:
    name: str
    node_id: str
    address: str


class RemotePool(TrialPool):
    """:class:`~harness.custody.trials.TrialPool` whose holder and witness are running
    nodes and whose departing parties are extra node processes started here."""

    def __init__(
        self,
        settings: CustodySettings,
        root: Path,
        members: tuple[tuple[str, str], ...],
        credentials: Any,
        tls: CustodyTls | None = None,
    ) -> None:
        super().__init__(settings, root)
        from nodes.control import NodeClients

        self.members = members
        self.credentials = credentials
        self.tls = tls
        self.clients = NodeClients(
            credentials, timeout=_CONTROL_TIMEOUT_S, tls=None if tls is None else tls.files()
        )
        self._serving: tuple[Path, Path] | None = None
        self.clients.on_call = self._count
        self.session = f"custody-{time.time_ns() // 1_000_000:x}"
        self.remote_holder: _Member | None = None
        self.remote_witness: _Member | None = None
        self._procs: list[_Proc] = []

    def _with_tls(self, spec: Any) -> Any:
        """``spec`` serving TLS when the running nodes do: the CA, and the run's
        certificate for the extra nodes (issued at the first use)."""
        if self.tls is None:
            return spec
        if self._serving is None:
            self._serving = self.tls.issue(self.root / "tls")
        cert, key = self._serving
        return dataclasses.replace(spec, tls_ca=self.tls.ca, tls_cert=cert, tls_key=key)

    def _count(self, call: Any) -> None:
        """Every answered control call in the phase it was made in (commit, deliver…)."""
        self.meter.counts().rpcs += 1

    async def _member(self, name: str, address: str) -> _Member:
        try:
            info = await self.clients.at(address).info(timeout=5.0)
        except CallFailed as exc:
            why = None if self.tls is None else await self.tls.failure(address)
            if why is not None:
                raise RunFailed(
                    f"running node {name} at {address}: TLS: {why}; nothing was started"
                ) from None
            raise RunFailed(f"running node {name} at {address} does not answer: {exc}") from None
        return _Member(name, info.node_id, address)

    async def open(self) -> None:
        name, address = self.members[0]
        self.remote_holder = await self._member(name, address)
        if self.settings.witness and len(self.members) > 1:
            self.remote_witness = await self._member(*self.members[1])

    def _need_holder(self) -> _Member:
        if self.remote_holder is None:
            raise CustodyError("the running holder is not connected (RemotePool.open)")
        return self.remote_holder

    async def close(self) -> None:
        procs, self._procs = self._procs, []
        results = await asyncio.gather(*(self._stop_proc(p) for p in procs), return_exceptions=True)
        await self.clients.close()
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            raise errors[0]

    async def _stop_proc(self, p: _Proc) -> None:
        from nodes.cluster import stop_node

        await asyncio.to_thread(stop_node, p.record, grace=2.0, proc=p.proc)
        await asyncio.to_thread(shutil.rmtree, p.data_dir, ignore_errors=True)

    # ----------------------------------------------------------------- node operations

    async def _groups_for(self, k: int, count: int, mode: Any, rng: Any) -> list[Any]:
        """``count`` groups of extra node processes: an origin started with its ``k``
        custodians (``--custodians``, ``--custody-k``), each custodian with the origin
        pinned (``Custody.Take`` is accepted only from the head's origin as a pinned
        peer), each with its operator label (``--operator``).

        A process's settings are fixed when it starts, so a group with a departed
        party is rebuilt whole: its surviving processes are retired (stopped and
        removed; not departures) and a new group started. With operators placed
        without regard to each other (``operator``), every group is rebuilt every
        trial, so its labels are a fresh draw as the closed form assumes.
        """
        from harness.custody.settings import Departures
        from harness.custody.trials import _Group

        if k == 0:
            return await super()._groups_for(k, count, mode, rng)
        groups = self._groups.setdefault(k, [])
        fresh_every_trial = mode is Departures.OPERATOR
        stale = [
            g for g in groups[:count] if fresh_every_trial or any(p.departed for p in g.parties)
        ]
        await asyncio.gather(
            *(self._remove_node(p.handle) for g in stale for p in g.parties if not p.departed)
        )
        wanted = [g.slot for g in stale] + list(range(len(groups), count))
        built = await asyncio.gather(*(self._group(k, mode, rng) for _ in wanted))
        for slot, parties in zip(wanted, built, strict=True):
            origin, *custodians = parties
            group = _Group(slot, origin, custodians)
            if slot < len(groups):
                groups[slot] = group
            else:
                groups.append(group)
        return groups[:count]

    async def _group(self, k: int, mode: Any, rng: Any) -> list[Any]:
        from harness.custody.trials import ROLE_CUSTODIAN, ROLE_ORIGIN, _Party
        from nodes.app import load_or_create_identity
        from nodes.cluster import NodeSpec, free_ports, start_nodes

        names: list[str] = []
        for role in (ROLE_ORIGIN, *([ROLE_CUSTODIAN] * k)):
            self._serial += 1
            names.append(f"{'o' if role == ROLE_ORIGIN else 'c'}{self._serial}")
        taken: list[str] = []
        operators = []
        for _ in names:
            operators.append(self._operator(rng, taken, mode))
            taken.append(operators[-1])
        ports = free_ports(len(names))
        ids = [
            (await asyncio.to_thread(load_or_create_identity, self.root / "nodes" / n)).node_id
            for n in names
        ]
        pinned = [f"{n}=127.0.0.1:{p},{i}" for n, p, i in zip(names, ports, ids, strict=True)]
        members = tuple(f"{n}={a}" for n, a in self.members)
        keys = (self.credentials.key_id,) if self.credentials is not None else ()
        specs = [
            self._with_tls(
                NodeSpec(
                    name=n,
                    port=p,
                    data_dir=self.root / "nodes" / n,
                    log_file=self.root / "logs" / f"{n}.log",
                    peers=members + (tuple(pinned[1:]) if i == 0 else (pinned[0],)),
                    operator_keys=keys,
                    custodians=tuple(names[1:]) if i == 0 else (),
                    custody_k=k if i == 0 else 0,
                    operator=operators[i],
                )
            )
            for i, (n, p) in enumerate(zip(names, ports, strict=True))
        ]
        started = await asyncio.to_thread(start_nodes, specs, timeout=_START_TIMEOUT_S)
        parties = []
        for i, ((record, proc), spec) in enumerate(zip(started, specs, strict=True)):
            handle = _Proc(spec.name, ids[i], record.address, record, proc, spec.data_dir)
            self._procs.append(handle)
            party = _Party(handle, ROLE_ORIGIN if i == 0 else ROLE_CUSTODIAN, operators[i])
            self.by_id[handle.node_id] = party
            parties.append(party)
        return parties

    async def _new_node(self, name: str) -> Any:
        from nodes.cluster import NodeSpec, free_ports, start_node

        (port,) = free_ports(1)
        keys = (self.credentials.key_id,) if self.credentials is not None else ()
        spec = NodeSpec(
            name=name,
            port=port,
            data_dir=self.root / "nodes" / name,
            log_file=self.root / "logs" / f"{name}.log",
            peers=tuple(f"{n}={a}" for n, a in self.members),
            operator_keys=keys,
        )
        spec = self._with_tls(spec)
        record, proc = await asyncio.to_thread(start_node, spec, timeout=_START_TIMEOUT_S)
        p = _Proc(name, "", record.address, record, proc, spec.data_dir)
        self._procs.append(p)
        info = await self.clients.at(record.address).info(timeout=_CONTROL_TIMEOUT_S)
        p.node_id = info.node_id
        return p

    async def _remove_node(self, handle: Any) -> None:
        """Gone for good: the process stopped and its data directory removed."""
        self._procs.remove(handle)
        await self._stop_proc(handle)

    async def _custody_hops(self, g: Any) -> list[int]:
        """Hops each custodian process holds as custodian (its ``Node.Stats``)."""
        return [
            (await self.clients.at(c.handle.address).stats(timeout=_CONTROL_TIMEOUT_S))[
                "custody_hops"
            ]
            for c in g.custodians
        ]

    async def _append_commit(
        self, g: Any, hops: list[Hop], value_ref: str
    ) -> tuple[float, CommittedCompaction]:
        handle = g.origin.handle
        # A long-lived process keeps its epoch: each trial its own range of seqs.
        seqs = [handle.next_seq + i for i in range(len(hops))]
        handle.next_seq += len(hops)
        client = self.clients.at(handle.address)
        await client.append([json.dumps(_fields(h)).encode("utf-8") for h in hops], seqs)
        started = time.perf_counter()
        committed = await client.commit_compaction(
            [(value_ref, seqs, b"")], deadline_ms=self.settings.deadline_ms
        )
        return started, committed

    async def _send(self, handle: Any, delivery: Delivery) -> Delivery:
        holder = self._need_holder()
        _, sent = await self.clients.send(holder.address, delivery, _CONTROL_TIMEOUT_S)
        return sent

    async def _demand(self, value_ref: str) -> RehydrationReport:
        holder = self._need_holder()
        witnesses = [self.remote_witness.name] if self.remote_witness is not None else []
        timeout = (self.settings.reasks + 3) * self.settings.deadline_ms / 1000 + 30.0
        report: RehydrationReport = await self.clients.at(holder.address).rehydrate(
            value_ref, witnesses, timeout=timeout
        )
        return report

    def value_ref(self, g: Any) -> str:
        return f"{self.session}/g{g.slot}"


async def _play_remote(
    settings: CustodySettings,
    cells: list[Any],
    members: tuple[tuple[str, str], ...],
    credentials: Any,
    root: Path,
    tick: Any,
    tls: CustodyTls | None = None,
) -> None:
    import random

    pool = RemotePool(settings, root, members, credentials, tls)
    try:
        await pool.open()
        for i, (cell, trials) in enumerate(cells):
            rng = random.Random(f"{settings.seed}:{cell.mode.value}:{cell.k}:{cell.p}:{i}")
            await pool.play_to_goal(cell, trials, rng, tick, goal=cell_goal(settings))
    finally:
        await pool.close()


def run_on_running(args: argparse.Namespace, settings: CustodySettings) -> int:
    """Play ``settings`` with the running nodes as holder and witness (module docstring)."""
    from tqdm import tqdm

    from harness._outdir import staged_dir
    from harness.boundary.cli import _cluster_members, _members
    from harness.cli_common import prepare_out
    from harness.custody.report import cost_line, print_outcome, write_results
    from harness.custody.runner import growing_tick, plan_cells
    from harness.runner import progress_disabled
    from nodes.auth import operator_credentials
    from nodes.config import LogFormat
    from nodes.logging import configure_logging

    if args.transport != "memory":
        raise UsageError(f"--transport {args.transport}: running nodes are reached remotely")
    home: Path | None = None
    if args.cluster is not None:
        from nodes.home import Home

        members = _cluster_members(args.cluster)
        home = Home.resolve(args.cluster or None).root
    else:
        try:
            members = _members(args.nodes)
        except argparse.ArgumentTypeError as exc:
            raise UsageError(f"--nodes: {exc}") from None
    tls = resolve_tls(args)
    credentials = operator_credentials(home)
    prepare_out(args.out)
    configure_logging(LogFormat.JSON, "warning")
    plan = plan_cells(settings)
    over = "over TLS" if tls is not None else "in plaintext"
    where = (
        f"running nodes {over} (holder {members[0][0]}; departing parties: extra node processes)"
    )
    base = args.node_dir if args.node_dir is not None else (home / "custody" if home else None)
    if base is not None:
        base.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with staged_dir(args.out) as partial:
        bar = tqdm(
            total=sum(n for _, n in plan),
            desc="custody trials",
            unit="trial",
            disable=progress_disabled(args.progress),
            leave=False,
        )
        try:
            with tempfile.TemporaryDirectory(prefix="provnet-custody-", dir=base) as tmp:
                asyncio.run(
                    _play_remote(
                        settings, plan, members, credentials, Path(tmp), growing_tick(bar), tls
                    )
                )
        except CustodyError as exc:
            raise UsageError(str(exc)) from None
        except CallFailed as exc:
            raise RunFailed(f"on running nodes: {exc}") from None
        finally:
            bar.close()
        wall = time.perf_counter() - started
        cells = [c for c, _ in plan]
        write_results(partial, settings, cells, wall_seconds=wall, where=where)
    if args.cost_line:
        print(cost_line(cells, where))
    else:
        print_outcome(cells, wall, where, args.out)
    return 0
