"""``nodes.auth.ControlAuth`` and ``nodes.control_replay.ControlReplay`` on their own:
the order of the checks, the nonce pools strangers cannot drain, the durable record.

The attacks themselves run against node processes in ``test_control_plane.py``;
these pin the rules those rely on, with a fixed clock.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from contracts.identity import Identity
from nodes.auth import (
    ControlAuth,
    ControlCallPredatesRestart,
    ControlCredentials,
    NotAuthenticated,
    PermissionDenied,
)
from nodes.control_replay import (
    CONTROL_FLOOR_FILENAME,
    CONTROL_FLOOR_LEASE_MS,
    CONTROL_FUTURE_FILENAME,
    MAX_CONTROL_FUTURE_NONCES_PER_KEY,
    ControlReplay,
)
from nodes.errors import RequestTooLarge

APPEND = "/provnet.v1.HopLog/Append"
DELIVER = "/provnet.v1.Deliver/Deliver"
NODE = Identity.generate().node_id
OPERATOR = ControlCredentials(Identity.generate())
NOW = 1_800_000_000.0


def _auth(replay: ControlReplay | None = None, **kw: int) -> ControlAuth:
    return ControlAuth(
        {OPERATOR.key_id},
        node_id=NODE,
        node_name="n",
        clock=lambda: NOW,
        replay=replay,
        **kw,  # type: ignore[arg-type]
    )


def _signed(
    creds: ControlCredentials, method: str, body: bytes = b"x", **kw: float
) -> tuple[tuple[str, str], ...]:
    return creds.metadata(method, body, target=NODE, now=kw.get("now", NOW))


def test_a_replayed_nonce_is_refused_before_its_signature_is_looked_at() -> None:
    auth = _auth()
    signed = _signed(OPERATOR, APPEND)
    assert auth.claim(APPEND, signed) is not None
    garbled = tuple((k, "00" * 64 if k == "x-provnet-sig" else v) for k, v in signed)
    with pytest.raises(NotAuthenticated, match="replayed"):
        auth.claim(APPEND, garbled)


def test_a_stranger_key_is_denied_an_operator_method_whatever_it_signed() -> None:
    auth = _auth()
    stranger = ControlCredentials(Identity.generate())
    garbled = tuple(
        (k, "00" * 64 if k == "x-provnet-sig" else v) for k, v in _signed(stranger, APPEND)
    )
    with pytest.raises(PermissionDenied, match="not an operator key"):
        auth.claim(APPEND, garbled)


def test_the_body_must_be_the_one_signed() -> None:
    auth = _auth()
    claim = auth.claim(APPEND, _signed(OPERATOR, APPEND, b"signed bytes"))
    assert claim is not None
    with pytest.raises(NotAuthenticated, match="is not the request signed"):
        auth.check_body(claim, b"other bytes")
    auth.check_body(claim, b"signed bytes")


def test_no_stranger_key_fills_the_nonce_memory_nor_strangers_the_operators() -> None:
    auth = _auth(max_nonces=8, max_nonces_per_key=3)
    first = ControlCredentials(Identity.generate())
    for _ in range(3):
        auth.claim(DELIVER, _signed(first, DELIVER))
    with pytest.raises(RequestTooLarge, match="cap 3 per key"):
        auth.claim(DELIVER, _signed(first, DELIVER))
    # Other keys fill the strangers' pool ...
    for _ in range(5):
        auth.claim(DELIVER, _signed(ControlCredentials(Identity.generate()), DELIVER))
    with pytest.raises(RequestTooLarge, match="keys this node does not know"):
        auth.claim(DELIVER, _signed(ControlCredentials(Identity.generate()), DELIVER))
    # ... and the operator's calls still have all of theirs.
    for _ in range(8):
        assert auth.claim(APPEND, _signed(OPERATOR, APPEND)) is not None


def test_a_pinned_peer_shares_the_operators_pool() -> None:
    peer = ControlCredentials(Identity.generate())
    auth = ControlAuth(
        {OPERATOR.key_id},
        node_id=NODE,
        peer_keys={peer.key_id},
        clock=lambda: NOW,
        max_nonces=4,
        max_nonces_per_key=1,
    )
    for _ in range(4):
        claim = auth.claim(DELIVER, _signed(peer, DELIVER))
        assert claim is not None
        assert claim.known


def test_the_floor_and_future_nonces_survive_a_restart(tmp_path: Path) -> None:
    window = 60_000
    replay = ControlReplay(tmp_path, window, clock=lambda: NOW)
    auth = _auth(replay)
    now_ms = int(NOW * 1000)
    on_time = _signed(OPERATOR, APPEND)
    ahead = _signed(OPERATOR, APPEND, now=NOW + 10)

    async def accept(metadata: tuple[tuple[str, str], ...]) -> None:
        claim = auth.claim(APPEND, metadata)
        assert claim is not None
        await auth.settle(claim)

    asyncio.run(accept(on_time))
    asyncio.run(accept(ahead))
    # The call on time moved the floor past it; the one ahead did not move it further.
    floor = int((tmp_path / CONTROL_FLOOR_FILENAME).read_text())
    assert floor == now_ms + CONTROL_FLOOR_LEASE_MS
    assert len((tmp_path / CONTROL_FUTURE_FILENAME).read_text().splitlines()) == 1
    # A new run, the same clock: both calls refused, each for its reason.
    again = _auth(ControlReplay(tmp_path, window, clock=lambda: NOW))
    with pytest.raises(ControlCallPredatesRestart, match="before this node's restart"):
        again.claim(APPEND, on_time)
    with pytest.raises(NotAuthenticated, match="replayed"):
        again.claim(APPEND, ahead)


def test_future_dated_calls_are_capped_per_key(tmp_path: Path) -> None:
    auth = _auth(ControlReplay(tmp_path, 60_000, clock=lambda: NOW))
    stranger = ControlCredentials(Identity.generate())

    async def flood() -> None:
        for _ in range(MAX_CONTROL_FUTURE_NONCES_PER_KEY):
            claim = auth.claim(DELIVER, _signed(stranger, DELIVER, now=NOW + 20))
            assert claim is not None
            await auth.settle(claim)
        with pytest.raises(RequestTooLarge, match="dated ahead"):
            auth.claim(DELIVER, _signed(stranger, DELIVER, now=NOW + 20))
        # The operator's own are not counted against strangers.
        claim = auth.claim(APPEND, _signed(OPERATOR, APPEND, now=NOW + 20))
        assert claim is not None

    asyncio.run(flood())


def test_the_future_nonce_file_is_rewritten_once_mostly_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each future-dated call appends a line; lines of calls long past are dropped by a
    rewrite once the file holds twice what is remembered, so it does not grow for ever."""
    from nodes import control_replay

    monkeypatch.setattr(control_replay, "_COMPACT_FUTURE_LINES", 2)
    clock = [NOW]
    replay = ControlReplay(tmp_path, 60_000, clock=lambda: clock[0])
    path = tmp_path / CONTROL_FUTURE_FILENAME

    async def ahead(n: int) -> None:
        for i in range(n):
            now_ms = int(clock[0] * 1000)
            await replay.record(OPERATOR.key_id, f"nonce{i:012d}{n}", now_ms + 10_000, now_ms)

    asyncio.run(ahead(4))
    assert len(path.read_text().splitlines()) == 4
    clock[0] += 120  # every one of them long past
    asyncio.run(ahead(1))
    # (the rewrite keeps only what is still remembered: the call just made)
    assert len(path.read_text().splitlines()) == 1
    assert ControlReplay(tmp_path, 60_000, clock=lambda: clock[0]).future.keys() == {
        (OPERATOR.key_id, "nonce0000000000001")
    }


def test_a_damaged_control_floor_is_refused_naming_the_file(tmp_path: Path) -> None:
    from nodes.errors import StoreCorrupt

    (tmp_path / CONTROL_FLOOR_FILENAME).write_text("12x\n")
    with pytest.raises(StoreCorrupt, match=r"control floor .*control_floor.*'12x'"):
        ControlReplay(tmp_path, 60_000)
