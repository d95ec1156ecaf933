"""``provnet keys new|show`` and ``provnet evidence verify``.

Exit codes: 0 success / valid evidence; 1 evidence that does not verify
(the reason is printed); 2 unreadable input (missing file, bad JSON, bad key
file), printed as ``provnet: error: …``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

__all__ = ["register"]


def _error(message: str) -> int:
    print(f"provnet: error: {message}", file=sys.stderr)
    return 2


def _keys_new(args: argparse.Namespace) -> int:
    from contracts.identity import Identity, save_identity

    path = Path(args.path)
    retired: Path | None = None
    try:
        identity = Identity.generate()
        if args.force and path.exists():
            retired = _retire_key(path)
        save_identity(identity, path, overwrite=args.force)
    except FileExistsError:
        return _error(f"{path}: key file exists (use --force to replace it)")
    except OSError as exc:
        return _error(f"{path}: cannot write key file ({exc.strerror})")
    if retired is not None:
        print(f"retired {retired} (the replaced key, kept: statements it signed still verify)")
    print(f"node_id {identity.node_id}")
    print(f"key     {path} (mode 0600)")
    return 0


def _retire_key(path: Path) -> Path:
    """Keep the key ``--force`` replaces as ``<name>.retired-<node id prefix>-<UTC time>``.

    A hard link: same bytes, same 0600 mode, no window without the file.
    """

    from contracts.errors import KeyFileError
    from contracts.identity import load_identity

    try:
        tag = load_identity(path).node_id[:16]
    except KeyFileError:
        tag = "unreadable"
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    for n in range(100):
        suffix = "" if n == 0 else f"-{n}"
        target = path.with_name(f"{path.name}.retired-{tag}-{stamp}{suffix}")
        try:
            os.link(path, target)
        except FileExistsError:
            continue
        return target
    raise FileExistsError(f"{path}: too many retired keys named {stamp}")


def _keys_show(args: argparse.Namespace) -> int:
    from contracts.errors import KeyFileError
    from contracts.identity import load_identity

    try:
        identity = load_identity(args.path)
    except KeyFileError as exc:
        return _error(str(exc))
    if args.json:
        print(json.dumps({"node_id": identity.node_id, "public_key": identity.node_id}))
    else:
        print(f"node_id {identity.node_id}")
    return 0


def _evidence_verify(args: argparse.Namespace) -> int:
    from contracts.canonical import MAX_DOCUMENT_BYTES
    from contracts.errors import ContractError, EncodingError
    from contracts.evidence import Evidence, verify_clearing, verify_evidence

    path = Path(args.file)
    if args.min_witnesses < 1:
        return _error(f"--min-witnesses must be at least 1, got {args.min_witnesses}")
    try:
        with path.open("rb") as fh:
            # Bounded read: never pull an arbitrarily large file into memory.
            data = fh.read(MAX_DOCUMENT_BYTES + 1)
    except OSError as exc:
        return _error(f"{path}: cannot read ({exc.strerror})")
    if len(data) > MAX_DOCUMENT_BYTES:
        return _error(f"{path}: larger than {MAX_DOCUMENT_BYTES} bytes; not an evidence file")
    try:
        evidence = Evidence.from_bytes(data)
    except EncodingError as exc:
        return _error(f"{path}: not an evidence file: {exc}")
    now = args.now if args.now is not None else int(time.time() * 1000)
    receipt = b""
    if args.cleared_by is not None:
        try:
            receipt = Path(args.cleared_by).read_bytes()[: MAX_DOCUMENT_BYTES + 1]
        except OSError as exc:
            return _error(f"--cleared-by {args.cleared_by}: cannot read ({exc.strerror})")
    demand: bytes | None = None
    if args.answering is not None:
        if args.cleared_by is None:
            return _error(f"--answering {args.answering}: needs --cleared-by RECEIPT")
        try:
            demand = Path(args.answering).read_bytes()[: MAX_DOCUMENT_BYTES + 1]
        except OSError as exc:
            return _error(f"--answering {args.answering}: cannot read ({exc.strerror})")
    try:
        if args.cleared_by is not None:
            verdict = verify_clearing(
                evidence, receipt, now=now, min_witnesses=args.min_witnesses, demand=demand
            )
        else:
            verdict = verify_evidence(evidence, now=now, min_witnesses=args.min_witnesses)
    except ContractError as exc:
        if args.json:
            print(json.dumps({"valid": False, "kind": evidence.kind.value, "reason": str(exc)}))
        else:
            print(f"INVALID {evidence.kind.value} against {evidence.accused}: {exc}")
        return 1
    if args.json:
        print(
            json.dumps(
                {
                    "valid": True,
                    "kind": verdict.kind.value,
                    "level": verdict.level.value,
                    "status": verdict.status.value,
                    "accused": verdict.accused,
                    "commitment": verdict.commitment,
                    "obligation": verdict.obligation,
                    "witnesses": list(verdict.witnesses),
                    "re_asks": verdict.re_asks,
                    "reason": verdict.reason,
                }
            )
        )
    else:
        print(f"VALID {verdict.kind.value} ({verdict.level.value}, {verdict.status.value})")
        print(f"accused    {verdict.accused}")
        print(f"commitment {verdict.commitment}")
        if verdict.obligation is not None:
            print(f"obligation {verdict.obligation}")
        print(f"reason     {verdict.reason}")
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    keys = sub.add_parser("keys", help="node identities (Ed25519 key files)")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    new = keys_sub.add_parser("new", help="generate a key file (mode 0600) and print its node id")
    new.add_argument("path", help="key file to create")
    new.add_argument(
        "--force",
        action="store_true",
        help="replace an existing key file (the old key is kept as a retired file)",
    )
    new.set_defaults(handler=_keys_new)
    show = keys_sub.add_parser("show", help="print the node id of a key file")
    show.add_argument("path", help="key file (refused if group/other can read it)")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(handler=_keys_show)

    evidence = sub.add_parser("evidence", help="evidence that an origin failed an obligation")
    ev_sub = evidence.add_subparsers(dest="evidence_command", required=True, metavar="ACTION")
    verify = ev_sub.add_parser(
        "verify",
        help="verify an evidence file by itself (exit 0 valid, 1 invalid, 2 unreadable)",
    )
    verify.add_argument("file", help="evidence JSON file")
    verify.add_argument(
        "--now", type=int, default=None, help="time to judge deadlines at, ms since epoch"
    )
    verify.add_argument(
        "--min-witnesses",
        type=int,
        default=1,
        help="witness reports that confirm an unanswered suspicion (default 1)",
    )
    verify.add_argument("--json", action="store_true", help="print the verdict as JSON")
    verify.add_argument(
        "--cleared-by",
        default=None,
        metavar="RECEIPT",
        help="a later receipt of the accused (DSSE envelope file) that clears the suspicion",
    )
    verify.add_argument(
        "--answering",
        default=None,
        metavar="DEMAND",
        help="with --cleared-by: the holder's demand (DSSE envelope file) that receipt"
        " answers, which orders it after the suspicion on the holder's own clock",
    )
    verify.set_defaults(handler=_evidence_verify)
