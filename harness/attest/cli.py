"""Flags and handlers of ``provnet experiment attest`` and ``provnet attest verify``.

``experiment attest`` plays rows (:mod:`harness.attest.rows`) over the
death-spiral run — or, with ``--matrix``, the main matrix — across the
boundary with an attester node and writes the files of
:mod:`harness.attest.report`. ``attest verify FILE`` checks an attestation
bundle file alone under the verifier's trust policy (``--policy``, the
attest-policy YAML; none: no attester trusted; the file's own policy is
unsigned and never applied): exit 0 valid, 1 invalid, 2 unreadable (as
``provnet evidence verify``, with the same size and depth bounds). Heavy
imports happen only when a handler runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from harness.cli_common import (
    DEFAULT_CONFIG,
    add_progress_flags,
    load_experiment_config,
    positive_int,
    prepare_out,
)
from harness.cli_errors import UsageError

if TYPE_CHECKING:
    from harness.attest.policy import ResolvedPolicy

__all__ = ["DEFAULT_POLICY", "DEFAULT_VERIFY_POLICY", "configure", "register"]

DEFAULT_POLICY = Path("experiments/attest-policy.yaml")
_DEFAULT_LIFETIMES = (5, 25, 625, 5000)


def _members(text: str) -> tuple[tuple[str, str], ...]:
    from harness.boundary.cli import _members as members

    return members(text)


def _running_slice(args: argparse.Namespace, matrix: bool, steps: int | None) -> object:
    """The :class:`~harness.attest.runner.AttestSlice` on running nodes
    (``--cluster``/``--nodes``), roles by name; every name checked before anything runs."""
    from harness.attest.runner import AttestSlice
    from harness.boundary.choices import TransportKind
    from harness.boundary.cli import _tls_ca
    from nodes.attester import AttesterFault

    control_home = ""
    if args.cluster is not None:
        from harness.boundary.cli import _cluster_members
        from nodes.home import Home

        members = _cluster_members(args.cluster)
        control_home = str(Home.resolve(args.cluster or None).root)
    else:
        members = args.nodes
    if args.transport != "memory":
        raise UsageError(f"--transport {args.transport}: running nodes are reached remotely")
    names = [n for n, _ in members]
    chain = tuple(p.strip() for p in args.chain.split(",")) if args.chain else tuple(names[:2])
    if len(chain) != 2 or any(n not in names for n in chain) or chain[0] == chain[1]:
        raise UsageError(
            f"--chain: expected origin,holder: two of the running nodes ({', '.join(names)}),"
            f" got {','.join(chain)}"
        )
    if args.witness == "none":
        witness = ""
    elif args.witness is not None:
        if args.witness not in names or args.witness in chain:
            raise UsageError(
                f"--witness: expected a running node besides {','.join(chain)}"
                f" ({', '.join(names)}) or 'none', got {args.witness!r}"
            )
        witness = args.witness
    else:
        free = [n for n in names if n not in chain]
        witness = free[0] if free else ""
    modes = [f.value for f in AttesterFault]
    attesters: list[tuple[str, str]] = []
    for entry in (args.attesters or "").split(","):
        entry = entry.strip()
        if not entry:
            continue
        mode, sep, name = entry.partition("=")
        if not sep or mode not in modes or name not in names:
            raise UsageError(
                f"--attesters: expected MODE=NAME with MODE one of {', '.join(modes)} and"
                f" NAME a running node ({', '.join(names)}), got {entry!r}"
            )
        attesters.append((mode, name))
    return AttestSlice(
        matrix,
        steps,
        TransportKind.REMOTE,
        nodes=tuple(members),
        attesters=tuple(attesters),
        control_home=control_home,
        chain=chain,
        witness_name=witness,
        tls_ca=_tls_ca(args),
    )


def _int_list(text: str) -> tuple[int, ...]:
    return tuple(positive_int(part) for part in text.split(",") if part.strip())


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``experiment attest`` flags to ``parser`` and set its handler."""
    parser.add_argument(
        "--config", type=Path, default=None, help=f"experiment YAML (default: {DEFAULT_CONFIG})"
    )
    parser.add_argument(
        "--policy",
        type=Path,
        default=None,
        help=f"trust policy YAML (default: {DEFAULT_POLICY}, else built-in)",
    )
    parser.add_argument("--out", type=Path, default=Path("results-attest"))
    parser.add_argument(
        "--rows",
        default="all",
        help="rows to play: all, headline (none, honest and the lifetime sweep),"
        " or a comma list such as none,honest,forged_receipts,dishonest:verification"
        " (with --matrix, all means none,honest)",
    )
    parser.add_argument(
        "--lifetimes",
        type=_int_list,
        default=_DEFAULT_LIFETIMES,
        help="extra honest rows with these attestation lifetimes in steps"
        f" (default {','.join(map(str, _DEFAULT_LIFETIMES))})",
    )
    parser.add_argument("--steps", type=positive_int, default=None, help="death-spiral steps")
    parser.add_argument(
        "--matrix", action="store_true", help="play the rows over the main matrix instead"
    )
    parser.add_argument(
        "--transport",
        choices=("memory", "grpc"),
        default="memory",
        help="how the nodes started here reach each other (running nodes: remote)",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--cluster",
        nargs="?",
        const="",
        default=None,
        metavar="PROVNET_HOME",
        help="play on the running local cluster (provnet cluster up) under PROVNET_HOME"
        " (default $PROVNET_HOME, else ./.provnet)",
    )
    where.add_argument(
        "--nodes",
        type=_members,
        default=None,
        help="play on running nodes name=host:port[,…] (e.g. Compose services)",
    )
    parser.add_argument(
        "--chain",
        default=None,
        help="running nodes: origin,holder by name (default: the first two nodes)",
    )
    parser.add_argument(
        "--witness",
        default=None,
        help="running nodes: the witness (default: the first node without a role;"
        " 'none' for no witness)",
    )
    parser.add_argument(
        "--attesters",
        default=None,
        metavar="MODE=NAME[,…]",
        help="running nodes: the attester node of each attester mode it was started with"
        " (provnet node --attest-fault MODE), e.g. none=d; rows whose mode has no"
        " attester node are refused before anything runs",
    )
    parser.add_argument("--workers", type=positive_int, default=1, help="rows played in parallel")
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="re-render the files from --out/attest_results.json without playing",
    )
    from nodes.client_tls import add_tls_flags

    add_tls_flags(parser)
    add_progress_flags(parser)
    parser.set_defaults(handler=_handler)


def _specs(text: str, lifetimes: tuple[int, ...], matrix: bool) -> list[object]:
    from contracts.statements import Axis
    from harness.attest.rows import Row, RowSpec

    honest_sweep = [RowSpec(Row.HONEST, lifetime_steps=n) for n in lifetimes]
    if text == "all" and matrix:
        text = "none,honest"
    if text == "headline":
        return [RowSpec(Row.NONE), RowSpec(Row.HONEST), *honest_sweep]
    if text == "all":
        return [
            RowSpec(Row.NONE),
            RowSpec(Row.HONEST),
            *honest_sweep,
            *(RowSpec(r) for r in Row if r not in (Row.NONE, Row.HONEST, Row.DISHONEST)),
            *(RowSpec(Row.DISHONEST, axis=a) for a in Axis),
        ]
    out: list[object] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, _, axis = part.partition(":")
        try:
            row = Row(name)
            out.append(RowSpec(row, axis=Axis(axis) if axis else None))
        except ValueError:
            rows = ", ".join(r.value for r in Row)
            raise UsageError(
                f"--rows: unknown row {part!r} (one of {rows}; dishonest:AXIS)"
            ) from None
        if row is Row.DISHONEST and not axis:
            raise UsageError(
                "--rows: dishonest needs the axis it is granted, e.g. dishonest:verification"
            )
    return out


def _handler(args: argparse.Namespace) -> int:
    from harness._words import count
    from harness.attest.policy import AttestPolicy, AttestPolicyError
    from harness.attest.report import death_text, row_numbers, write_outputs
    from harness.attest.rows import RowSpec
    from harness.attest.runner import AttestSlice, node_names, play_rows
    from harness.boundary.choices import TransportKind
    from nodes.config import LogFormat
    from nodes.logging import configure_logging
    from nodes.refusal import ControlRefused

    if args.report_only:
        from harness.attest.report import load_results

        if not (args.out / "attest_results.json").is_file():
            raise UsageError(
                f"--report-only: {args.out}/attest_results.json not found; --out must name"
                " a folder an earlier 'provnet experiment attest' wrote"
            )
        try:
            saved = load_results(args.out / "attest_results.json")
            meta = json.loads((args.out / "attest_meta.json").read_text(encoding="utf-8"))
            meta.pop("rows", None)
            written = write_outputs(saved, args.out, meta)
        except OSError as exc:
            where = exc.filename if exc.filename is not None else args.out
            raise UsageError(f"--report-only: {where}: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        print(f"attest: re-rendered {count(len(written), 'file')} in {args.out}/")
        return 0
    cfg = load_experiment_config(args.config, DEFAULT_CONFIG, sweep=False)
    path = args.policy if args.policy is not None else DEFAULT_POLICY
    try:
        policy = (
            AttestPolicy.load(path) if path.exists() or args.policy is not None else AttestPolicy()
        )
    except AttestPolicyError as exc:
        raise UsageError(str(exc)) from None
    if not args.matrix and cfg.death_spiral_run is None:
        raise UsageError(f"{args.config or DEFAULT_CONFIG}: death_spiral_run: expected a mapping")
    specs = [s for s in _specs(args.rows, args.lifetimes, args.matrix) if isinstance(s, RowSpec)]
    running = args.cluster is not None or args.nodes is not None
    if running:
        slice_ = _running_slice(args, args.matrix, args.steps)
        if not isinstance(slice_, AttestSlice):
            raise TypeError("attest slice")
        from harness.attest.attester import attester_fault

        have = dict(slice_.attesters)
        missing = sorted(
            {attester_fault(s.row).value for s in specs if s.row.value != "none"} - set(have)
        )
        if missing:
            raise UsageError(
                f"--attesters: the rows need attester nodes of mode(s) {', '.join(missing)}"
                " (nodes started with provnet node --attest-fault MODE); give them as"
                " MODE=NAME, or play --rows none"
            )
        if args.workers > 1:
            raise UsageError("--workers: running nodes are played by one driver (1)")
    else:
        for flag in ("chain", "witness", "attesters"):
            if getattr(args, flag) is not None:
                raise UsageError(f"--{flag}: applies to running nodes (--cluster or --nodes)")
        if args.tls_ca is not None:
            raise UsageError("--tls-ca: applies to running nodes (--cluster, --nodes)")
        slice_ = AttestSlice(args.matrix, args.steps, TransportKind(args.transport))
    try:
        # A name that is no node of the run (a typo) fails here, before anything runs.
        policy.resolve({name: "0" * 64 for name in node_names(slice_)})
    except AttestPolicyError as exc:
        raise UsageError(f"{path}: {exc}") from None
    prepare_out(args.out)
    configure_logging(LogFormat.JSON, "error")
    from harness.boundary.remote import RemoteError
    from harness.cli_errors import RunFailed

    try:
        results = play_rows(cfg, specs, policy, slice_, workers=args.workers)
    except ControlRefused as exc:
        raise UsageError(str(exc)) from None
    except RemoteError as exc:
        raise RunFailed(f"on running nodes: {exc}") from None
    meta = {
        "config": str(args.config or DEFAULT_CONFIG),
        "policy": policy.to_json(),
        "matrix": args.matrix,
        "transport": slice_.transport.value,
        "nodes": [name for name, _ in slice_.nodes],
        "workers": args.workers,
        "rows": [s.name for s in specs],
    }
    try:
        written = write_outputs(results, args.out, meta)
    except OSError as exc:
        raise UsageError(f"{args.out}: cannot write results: {exc}") from None
    wall = sum(r.wall_seconds for r in results)
    print(
        f"attest: {count(len(results), 'row')}, {wall:.1f} s of row time → {args.out}/"
        f" ({count(len(written), 'file')})"
    )
    for r in results:
        n = row_numbers(r)
        print(
            f"  {r.name:32s} recon agreement {n.recon_agree_before:6.2f}%"
            f" → {n.recon_agree_after:6.2f}%"
            f"  death {death_text(n.death_before)} → {death_text(n.death_after)}"
            f"  changed {n.changed:5d}"
            f"  issued {r.counts.get('attestations_issued', 0):5d}"
            f"  applied {r.counts.get('attestations_applied', 0):5d}"
            f"  fingerprint {r.fingerprint[:16]}"
        )
    return 0


# --------------------------------------------------------------------------- attest verify


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    attest = sub.add_parser("attest", help="attestation bundles (Part 6)")
    a_sub = attest.add_subparsers(dest="attest_command", required=True, metavar="ACTION")
    verify = a_sub.add_parser(
        "verify",
        help="verify an attestation bundle file by itself (exit 0 valid, 1 invalid, 2 unreadable)",
    )
    verify.add_argument("file", type=Path, help="attestation bundle JSON (type attestation-bundle)")
    verify.add_argument(
        "--policy",
        type=Path,
        default=None,
        help="your trust policy, in the attest-policy YAML format of"
        f" {DEFAULT_POLICY} (default: no attester trusted; the file's own policy is"
        " never applied: nothing signs it)",
    )
    verify.add_argument(
        "--node",
        action="append",
        default=[],
        metavar="NAME=ID",
        help="the node id of a node the policy names (repeatable); a policy may also"
        " name attesters by node id",
    )
    verify.add_argument("--at", type=int, default=None, help="time in ms (default: the file's)")
    verify.add_argument("--json", action="store_true", help="print the verdict as JSON")
    verify.set_defaults(handler=_verify)


#: What ``attest verify`` applies without ``--policy``: no attester is trusted.
DEFAULT_VERIFY_POLICY = "default (no attester trusted)"


def _verify_policy(args: argparse.Namespace) -> tuple[ResolvedPolicy, str]:
    """The verifier's policy (``--policy`` resolved with ``--node``) and its name."""
    from contracts._fields import is_digest
    from contracts.attest import TrustPolicy
    from harness.attest.policy import AttestPolicy, AttestPolicyError, ResolvedPolicy

    if args.policy is None:
        if args.node:
            raise UsageError("--node names nodes of a policy: give the policy with --policy")
        return ResolvedPolicy(TrustPolicy(), {}), DEFAULT_VERIFY_POLICY
    nodes: dict[str, str] = {}
    for entry in args.node:
        name, sep, node_id = str(entry).partition("=")
        if not sep or not name or not is_digest(node_id):
            raise UsageError(f"--node {entry!r:.80}: expected NAME=ID, ID 64 hex characters")
        nodes[name] = node_id
    try:
        with args.policy.open("rb") as fh:
            raw = fh.read(_MAX_POLICY_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"{args.policy}: cannot read: {exc.strerror or exc}") from None
    if len(raw) > _MAX_POLICY_BYTES:
        raise UsageError(f"{args.policy}: larger than {_MAX_POLICY_BYTES} bytes; not a policy")
    try:
        policy = AttestPolicy.from_obj(_yaml(raw, args.policy), str(args.policy))
    except AttestPolicyError as exc:
        raise UsageError(str(exc)) from None
    names = {*policy.attesters, *policy.revocations}
    for name in sorted(names):
        if is_digest(name):
            nodes.setdefault(name, name)
        elif name not in nodes:
            raise UsageError(
                f"{args.policy}: names node {name!r}; give its key with --node {name}=<node id>"
                " (or name the attester by node id in the policy)"
            )
    try:
        resolved = policy.resolve(nodes)
    except AttestPolicyError as exc:
        raise UsageError(str(exc)) from None
    return resolved, str(args.policy)


#: Largest policy file ``attest verify`` reads.
_MAX_POLICY_BYTES = 1024 * 1024


def _yaml(raw: bytes, path: Path) -> object:
    import yaml

    try:
        return yaml.safe_load(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    except RecursionError:
        raise UsageError(f"{path}: not a policy: nested too deeply") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"{path}: not YAML: {exc}") from None


def _verify(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from contracts.attest import TrustPolicy
    from contracts.canonical import MAX_DOCUMENT_BYTES, canonical_bytes, sha256_hex
    from contracts.errors import ContractError
    from contracts.signed import open_statement
    from contracts.statements import Attestation
    from harness._words import count
    from harness.attest.bundle import BundleFile, verify_bundle

    applied, source = _verify_policy(args)
    try:
        with args.file.open("rb") as fh:
            # Bounded read: never pull an arbitrarily large file into memory.
            data = fh.read(MAX_DOCUMENT_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"{args.file}: cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_DOCUMENT_BYTES:
        raise UsageError(
            f"{args.file}: larger than {MAX_DOCUMENT_BYTES} bytes; not an attestation bundle"
        )
    try:
        f = BundleFile.from_bytes(data)
    except ContractError as exc:
        raise UsageError(f"{args.file}: not an attestation bundle: {exc}") from None
    if args.at is not None:
        f = replace(f, at_ms=args.at)
    digest = sha256_hex(
        canonical_bytes(
            {
                "trust": applied.trust.to_json(),
                "taints": {k: sorted(v) for k, v in sorted(applied.taints.items())},
            }
        )
    )
    policy = {"source": source, "digest": digest}
    under = f"under policy {source} (sha256 {digest[:16]}…)"
    differs = f.policy.to_bytes() != applied.trust.to_bytes()
    bundled_digest = sha256_hex(f.policy.to_bytes())
    bundled = {"digest": bundled_digest, "applied": False, "differs": differs}
    note = (
        f"note: the file carries its own trust policy (sha256 {bundled_digest[:16]}…),"
        " which differs from the policy applied; nothing signs it, so it was not used"
        if differs
        else ""
    )

    def invalid(reason: str, attester: str = "") -> int:
        if args.json:
            verdict = {"valid": False, "reason": reason, "policy": policy}
            if attester:
                verdict["attester"] = attester
            print(json.dumps({**verdict, "bundled_policy": bundled}))
        else:
            print(f"INVALID attestation in {args.file} {under}: {reason}")
            if note:
                print(note)
        return 1

    # (1) the attestation itself: signature, binding, times, proofs — granted
    # exactly what it claims, so a failure here is the file's, not the policy's
    try:
        claimed = open_statement(f.bundle.attestation, Attestation).statement
        verify_bundle(f, policy=TrustPolicy({claimed.attester: {claimed.axis: claimed.floor}}))
    except ContractError as exc:
        return invalid(str(exc))
    # (2) the verifier's policy: authority (A3), revocation (A7), taint grants (A5)
    try:
        signed = verify_bundle(f, policy=applied.trust)
    except ContractError as exc:
        return invalid(
            f"the attestation verifies, but not under the policy applied: {exc}", claimed.attester
        )
    a = signed.statement
    ungranted = applied.taints_allowed(a.attester, a.discharged)
    if ungranted:
        return invalid(
            f"the attestation verifies, but the policy applied does not let attester"
            f" {a.attester[:16]}… discharge {len(ungranted)} of its taints, e.g. {ungranted[0]}",
            a.attester,
        )
    if args.json:
        print(
            json.dumps(
                {
                    "valid": True,
                    "attestation": signed.digest,
                    "attester": a.attester,
                    "axis": a.axis.value,
                    "floor": a.floor,
                    "discharged": list(a.discharged),
                    "cites": len(a.cites),
                    "policy": policy,
                    "bundled_policy": bundled,
                }
            )
        )
    else:
        print(
            f"VALID attestation {signed.digest[:16]}… by {a.attester[:16]}…: {a.axis.value}"
            f" ≥ {a.floor:g}, {count(len(a.cites), 'receipt')} cited,"
            f" {count(len(a.discharged), 'taint')} discharged, {under}"
        )
        if note:
            print(note)
    sys.stdout.flush()
    return 0
