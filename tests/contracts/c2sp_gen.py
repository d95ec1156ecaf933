"""A cosigned C2SP checkpoint from provnet's fixed test keys and clock.

The published vectors (``vectors/c2sp/signed-note.json`` …) come from other
implementations; this one is provnet's own, so another implementation can
check its cosignature and vkey bytes against ours. Keys are the fixed test
keys of ``tests/contracts/_support.py`` (seed ``SHA-256("provnet test key "
+ name)``), the cosignatures are dated at its clock ``NOW``.

Regenerate on purpose (after a deliberate format change) with::

    .venv/bin/python -m tests.contracts.c2sp_gen --write

``test_note.py`` rebuilds it in memory and compares byte for byte.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import sys
from pathlib import Path

from contracts.checkpoint import Checkpoint, cosign_checkpoint, sign_checkpoint
from contracts.note import SIG_TYPE_COSIGNATURE_V1, NoteKey
from tests.contracts._support import NOW, fixed_identity

PATH = Path(__file__).with_name("vectors") / "c2sp" / "provnet-cosigned-checkpoint.json"
ORIGIN = "provnet.test/origin"


def build() -> bytes:
    log = NoteKey(ORIGIN, fixed_identity("origin"))
    witnesses = [
        NoteKey(f"provnet.test/{name}", fixed_identity(name), SIG_TYPE_COSIGNATURE_V1)
        for name in ("witness", "witness2")
    ]
    root = hashlib.sha256(b"provnet c2sp vector root").digest()
    checkpoint = Checkpoint(ORIGIN, 7, root, ("example extension line",))
    note = sign_checkpoint(checkpoint, log)
    timestamp = NOW // 1000
    note = note.with_signatures(
        *(cosign_checkpoint(note, w, timestamp=timestamp) for w in witnesses)
    )
    doc = {
        "source": "provnet: tests/contracts/c2sp_gen.py (fixed test keys, clock NOW)",
        "log_vkey": log.verifier.to_string(),
        "cosigner_vkeys": [w.verifier.to_string() for w in witnesses],
        "origin": ORIGIN,
        "size": checkpoint.size,
        "root": base64.b64encode(root).decode(),
        "extensions": list(checkpoint.extensions),
        "timestamp": timestamp,
        "now_ms": NOW,
        "note": note.to_bytes().decode("utf-8"),
    }
    return (json.dumps(doc, indent=1, ensure_ascii=False) + "\n").encode("utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the vector file")
    args = parser.parse_args(argv)
    built = build()
    if args.write:
        PATH.write_bytes(built)
        return 0
    current = PATH.exists() and PATH.read_bytes() == built
    print(f"{PATH.name}: {'current' if current else 'differs'}")
    return 0 if current else 1


if __name__ == "__main__":
    sys.exit(main())
