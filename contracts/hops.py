"""Canonical hop bytes: the single byte string a hop is stored, committed,
served and hashed as.

``hop_bytes(fields, origin, epoch)`` is the RFC 8785 canonical JSON of the
hop's own fields plus ``origin`` (node id) and ``epoch``. Binding origin and
epoch into the bytes means a recycled hop id from another run or another
node can never hash to a committed leaf (seed 000: epoch-tagged keys turn
silent misresolution into detectable absence). Nothing is re-serialised
after this point: the Merkle leaf is ``SHA-256(0x00 ‖ hop_bytes)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contracts.canonical import canonical_bytes, parse_json_object
from contracts.errors import BindingMismatch, EncodingError

__all__ = ["MAX_HOP_BYTES", "hop_bytes", "parse_hop"]

#: Largest hop accepted from the wire.
MAX_HOP_BYTES = 64 * 1024


def hop_bytes(fields: Mapping[str, Any], origin: str, epoch: str) -> bytes:
    """RFC 8785 bytes of ``fields`` plus ``origin`` and ``epoch``.

    ``fields`` must not itself carry ``origin``/``epoch`` (``ValueError``):
    those two come from the node that originates the hop.
    """
    clash = {"origin", "epoch"} & set(fields)
    if clash:
        raise ValueError(f"hop fields must not contain {sorted(clash)}; they are added here")
    data = canonical_bytes({**fields, "origin": origin, "epoch": epoch})
    if len(data) > MAX_HOP_BYTES:
        raise ValueError(f"hop is {len(data)} bytes, limit {MAX_HOP_BYTES}")
    return data


def parse_hop(
    data: bytes, *, origin: str | None = None, epoch: str | None = None
) -> dict[str, Any]:
    """Parse served hop bytes; optionally require the given origin and epoch.

    Returns the hop's fields including ``origin`` and ``epoch``. The caller
    should already have checked the bytes against a committed leaf hash.
    """
    hop = parse_json_object(data, what="hop", max_bytes=MAX_HOP_BYTES)
    if not isinstance(hop.get("origin"), str) or not isinstance(hop.get("epoch"), str):
        raise EncodingError("hop: missing string fields 'origin' and 'epoch'")
    if origin is not None and hop["origin"] != origin:
        raise BindingMismatch(f"hop origin {hop['origin'][:16]!r}… is not {origin[:16]}…")
    if epoch is not None and hop["epoch"] != epoch:
        raise BindingMismatch(f"hop epoch {hop['epoch']!r:.40} is not {epoch!r:.40}")
    return hop
