"""A user-space WAN link: a TCP proxy that delays, shapes, drops or blackholes one link.

One :class:`LinkProxy` stands for one directed link *to* a target (a node):
it listens on ``listen`` and forwards every accepted connection to ``target``,
byte stream for byte stream. gRPC runs over TCP, so the link acts on the TCP
stream in chunks (whatever one ``read`` returns, at most
:data:`CHUNK_BYTES`), in both directions, each direction on its own:

``delay_ms``, ``jitter_ms``
    Each chunk is written onward no earlier than ``delay + U(-jitter, +jitter)``
    milliseconds (clamped at 0) after the proxy read it. Release times never go
    backwards within a direction of a connection, so jitter never reorders
    bytes (TCP would not either). A request/response exchange therefore gains
    at least ``2 × (delay − jitter)``; with no jitter, at least ``2 × delay``.
    Reading continues while earlier chunks wait, so delay alone does not cut
    throughput (a window of :data:`QUEUE_CHUNKS` chunks per direction).
``bandwidth`` (bytes/s, 0 = unlimited)
    The link's capacity per direction, shared by all its connections: a chunk
    of ``n`` bytes occupies the link for ``n / bandwidth`` seconds after the
    previous chunk left it, then travels ``delay``. Moving ``N`` bytes one way
    takes at least ``N / bandwidth`` seconds.
``drop`` (probability in [0, 1]) and ``drop_mode``
    ``chunk`` (default): before forwarding a chunk, with probability ``drop``
    the connection is reset instead — both sides get a TCP RST and the chunk
    is lost. ``connection``: each accepted connection is reset, with
    probability ``drop``, before anything is forwarded. A dropped TCP segment
    would merely be retransmitted; a reset is what a lossy or flapping WAN
    path costs an RPC (gRPC sees ``UNAVAILABLE``).
``blackhole``
    Connections are accepted and their bytes read and discarded; nothing is
    forwarded, the target is never contacted and nothing is answered (a
    partition: gRPC calls end in ``DEADLINE_EXCEEDED``).

``seed`` makes jitter and drop decisions reproducible. Closing (half-close
included) is passed on in order after the bytes before it. The proxy is
configured by flags or by ``PROVNET_LINK_*`` variables
(:data:`LINK_ENV_VARS`), like a node: ``provnet link-proxy``.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import assert_never

__all__ = [
    "CHUNK_BYTES",
    "LINK_ENV_VARS",
    "QUEUE_CHUNKS",
    "DropMode",
    "LinkConfigError",
    "LinkProxy",
    "LinkSpec",
    "LinkStats",
    "parse_bandwidth",
]

#: Largest chunk read at once from either side.
CHUNK_BYTES = 64 * 1024
#: Chunks in flight per direction of a connection before reading pauses.
QUEUE_CHUNKS = 256
#: How long the proxy waits to connect to its target before giving up on a client.
CONNECT_TIMEOUT_S = 10.0


class LinkConfigError(ValueError):
    """A link setting is missing or malformed; the message names flag, variable and value."""


class DropMode(StrEnum):
    CHUNK = "chunk"  # each forwarded chunk: reset the connection with probability p
    CONNECTION = "connection"  # each accepted connection: reset it at once with probability p


#: LinkSpec field → environment variable.
LINK_ENV_VARS: Mapping[str, str] = {
    "listen": "PROVNET_LINK_LISTEN",
    "target": "PROVNET_LINK_TARGET",
    "delay_ms": "PROVNET_LINK_DELAY_MS",
    "jitter_ms": "PROVNET_LINK_JITTER_MS",
    "bandwidth": "PROVNET_LINK_BANDWIDTH",
    "drop": "PROVNET_LINK_DROP",
    "drop_mode": "PROVNET_LINK_DROP_MODE",
    "blackhole": "PROVNET_LINK_BLACKHOLE",
    "seed": "PROVNET_LINK_SEED",
}

_SUFFIX = {"": 1, "k": 1_000, "m": 1_000_000, "g": 1_000_000_000}


def _where(key: str) -> str:
    return f"--{key.replace('_', '-')} (${LINK_ENV_VARS[key]})"


def _address(key: str, value: str) -> tuple[str, int]:
    host, sep, port = value.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise LinkConfigError(f"{_where(key)}: expected host:port, got {value!r}")
    return host.strip("[]"), int(port)


def _number(key: str, value: object) -> float:
    try:
        number = float(str(value))
    except ValueError:
        raise LinkConfigError(f"{_where(key)}: expected a number, got {value!r}") from None
    if number != number or number < 0:  # NaN or negative
        raise LinkConfigError(f"{_where(key)}: must be a number >= 0, got {value!r}")
    return number


def parse_bandwidth(text: str) -> int:
    """Bytes per second: an integer with an optional decimal suffix k, M or G (``2M``)."""
    raw = text.strip().lower().removesuffix("b/s").removesuffix("/s")
    suffix = raw[-1:] if raw[-1:] in ("k", "m", "g") else ""
    digits = raw[: len(raw) - len(suffix)]
    try:
        value = float(digits)
    except ValueError:
        raise ValueError(f"expected bytes/s such as 250000 or 2M, got {text!r}") from None
    if value != value or value < 0:
        raise ValueError(f"expected bytes/s >= 0, got {text!r}")
    return int(value * _SUFFIX[suffix])


def _bool(key: str, value: object) -> bool:
    text = str(value).strip().lower()
    if text in {"1", "true", "yes", "on"}:
        return True
    if text in {"0", "false", "no", "off", ""}:
        return False
    raise LinkConfigError(f"{_where(key)}: expected true/false, got {value!r}")


@dataclass(frozen=True, slots=True)
class LinkSpec:
    """What one link does to the bytes crossing it (see the module docstring)."""

    listen: tuple[str, int]
    target: tuple[str, int]
    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    bandwidth: int = 0
    drop: float = 0.0
    drop_mode: DropMode = DropMode.CHUNK
    blackhole: bool = False
    seed: int | None = None

    def __post_init__(self) -> None:
        for key in ("delay_ms", "jitter_ms"):
            value = getattr(self, key)
            if not value >= 0:
                raise LinkConfigError(f"{_where(key)}: must be >= 0 ms, got {value!r}")
        if self.bandwidth < 0:
            raise LinkConfigError(f"{_where('bandwidth')}: must be >= 0, got {self.bandwidth}")
        if not 0.0 <= self.drop <= 1.0:
            raise LinkConfigError(f"{_where('drop')}: a probability in [0, 1], got {self.drop!r}")

    @classmethod
    def from_mapping(cls, raw: Mapping[str, object]) -> LinkSpec:
        """Build from field → value (strings as given on a command line or in the environment)."""
        for required in ("listen", "target"):
            if raw.get(required) in (None, ""):
                raise LinkConfigError(f"{_where(required)} is required")
        kwargs: dict[str, object] = {
            "listen": _address("listen", str(raw["listen"])),
            "target": _address("target", str(raw["target"])),
        }
        for key in ("delay_ms", "jitter_ms", "drop"):
            if raw.get(key) not in (None, ""):
                kwargs[key] = _number(key, raw[key])
        if raw.get("bandwidth") not in (None, ""):
            try:
                kwargs["bandwidth"] = parse_bandwidth(str(raw["bandwidth"]))
            except ValueError as exc:
                raise LinkConfigError(f"{_where('bandwidth')}: {exc}") from None
        if raw.get("drop_mode") not in (None, ""):
            try:
                kwargs["drop_mode"] = DropMode(str(raw["drop_mode"]).lower())
            except ValueError:
                choices = ", ".join(m.value for m in DropMode)
                raise LinkConfigError(
                    f"{_where('drop_mode')}: expected one of {choices}, got {raw['drop_mode']!r}"
                ) from None
        if raw.get("blackhole") not in (None, ""):
            kwargs["blackhole"] = _bool("blackhole", raw["blackhole"])
        if raw.get("seed") not in (None, ""):
            try:
                kwargs["seed"] = int(str(raw["seed"]))
            except ValueError:
                raise LinkConfigError(
                    f"{_where('seed')}: expected an integer, got {raw['seed']!r}"
                ) from None
        return cls(**kwargs)  # type: ignore[arg-type]

    @classmethod
    def from_env_and_args(cls, args: Mapping[str, object], env: Mapping[str, str]) -> LinkSpec:
        """Flag value if given (not None), else the ``PROVNET_LINK_*`` variable, else default."""
        raw: dict[str, object] = {}
        for key, var in LINK_ENV_VARS.items():
            value = args.get(key)
            if value is None or value is False:
                value = env.get(var)
            if value is not None:
                raw[key] = value
        return cls.from_mapping(raw)

    def describe(self) -> str:
        parts = [f"delay {self.delay_ms:g} ms"]
        if self.jitter_ms:
            parts.append(f"jitter ±{self.jitter_ms:g} ms")
        if self.bandwidth:
            parts.append(f"bandwidth {self.bandwidth} B/s")
        if self.drop:
            parts.append(f"drop {self.drop:g} per {self.drop_mode.value}")
        if self.blackhole:
            parts = ["blackhole"]
        return ", ".join(parts)


@dataclass(slots=True)
class LinkStats:
    """Counters of one proxy (read them from the proxy's own event loop)."""

    connections: int = 0
    resets: int = 0  # connections reset by drop or by a failure on the link, not by close()
    blackholed: int = 0
    connect_failures: int = 0
    bytes_to_target: int = 0
    bytes_from_target: int = 0
    open_connections: int = 0


@dataclass(slots=True)
class _Direction:
    """Shared state of one direction of the link: when its capacity is next free."""

    busy_until: float = 0.0


@dataclass(slots=True, eq=False)
class _Conn:
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None
    reset: bool = False
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


_EOF = b""


def _rst(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP RST (linger 0), not an orderly FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class LinkProxy:
    """The proxy of one link; ``async with LinkProxy(spec) as proxy`` serves until exit."""

    def __init__(self, spec: LinkSpec) -> None:
        self.spec = spec
        self.stats = LinkStats()
        self._rng = random.Random(spec.seed)
        self._server: asyncio.Server | None = None
        self._up = _Direction()
        self._down = _Direction()
        self._conns: set[_Conn] = set()

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        if self._server is None:
            raise RuntimeError("link proxy is not started")
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    @property
    def address(self) -> str:
        return f"{self.spec.listen[0]}:{self.port}"

    async def start(self) -> None:
        host, port = self.spec.listen
        self._server = await asyncio.start_server(self._handle, host, port, reuse_address=True)

    async def close(self) -> None:
        """Stop listening and reset every open connection (not counted as drops)."""
        if self._server is not None:
            self._server.close()
        for conn in list(self._conns):
            conn.reset = True
            _rst(conn.client)
            if conn.upstream is not None:
                _rst(conn.upstream)
        tasks = [t for conn in self._conns for t in conn.tasks]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def __aenter__(self) -> LinkProxy:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------ per connection

    def _dropped(self) -> bool:
        return self.spec.drop > 0 and self._rng.random() < self.spec.drop

    def _reset(self, conn: _Conn) -> None:
        if not conn.reset:
            conn.reset = True
            self.stats.resets += 1
        _rst(conn.client)
        if conn.upstream is not None:
            _rst(conn.upstream)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = _Conn(client=writer)
        self._conns.add(conn)
        self.stats.connections += 1
        self.stats.open_connections += 1
        try:
            await self._serve(conn, reader)
        finally:
            self.stats.open_connections -= 1
            self._conns.discard(conn)
            if not conn.reset:
                writer.close()
                if conn.upstream is not None:
                    conn.upstream.close()

    async def _serve(self, conn: _Conn, reader: asyncio.StreamReader) -> None:
        spec = self.spec
        if spec.blackhole:
            self.stats.blackholed += 1
            with contextlib.suppress(ConnectionError):
                while await reader.read(CHUNK_BYTES):
                    pass
            return
        match spec.drop_mode:
            case DropMode.CONNECTION:
                if self._dropped():
                    self._reset(conn)
                    return
            case DropMode.CHUNK:
                pass
            case _:
                assert_never(spec.drop_mode)
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(*spec.target), CONNECT_TIMEOUT_S
            )
        except (OSError, TimeoutError):
            self.stats.connect_failures += 1
            self._reset(conn)
            return
        conn.upstream = up_writer
        conn.tasks = [
            asyncio.ensure_future(self._pump(conn, reader, up_writer, self._up, to_target=True)),
            asyncio.ensure_future(
                self._pump(conn, up_reader, conn.client, self._down, to_target=False)
            ),
        ]
        await asyncio.gather(*conn.tasks, return_exceptions=True)

    def _release_at(self, now: float, size: int, link: _Direction, previous: float) -> float:
        spec = self.spec
        sent = now
        if spec.bandwidth:
            start = max(now, link.busy_until)
            link.busy_until = start + size / spec.bandwidth
            sent = link.busy_until
        delay = spec.delay_ms
        if spec.jitter_ms:
            delay += self._rng.uniform(-spec.jitter_ms, spec.jitter_ms)
        return max(previous, sent + max(delay, 0.0) / 1000.0)

    async def _pump(
        self,
        conn: _Conn,
        src: asyncio.StreamReader,
        dst: asyncio.StreamWriter,
        link: _Direction,
        *,
        to_target: bool,
    ) -> None:
        """Read from ``src``, hold each chunk until its release time, write it to ``dst``."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(QUEUE_CHUNKS)
        per_chunk = self.spec.drop_mode is DropMode.CHUNK and self.spec.drop > 0

        async def read() -> None:
            previous = 0.0
            while True:
                try:
                    data = await src.read(CHUNK_BYTES)
                except ConnectionError:
                    data = _EOF
                at = self._release_at(loop.time(), len(data), link, previous)
                previous = at
                await queue.put((at, data))
                if not data:
                    return

        reading = asyncio.ensure_future(read())
        try:
            while True:
                at, data = await queue.get()
                wait = at - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                if not data:
                    if dst.can_write_eof():
                        with contextlib.suppress(OSError):
                            dst.write_eof()
                    return
                if per_chunk and self._dropped():
                    self._reset(conn)
                    return
                dst.write(data)
                if to_target:
                    self.stats.bytes_to_target += len(data)
                else:
                    self.stats.bytes_from_target += len(data)
                try:
                    await dst.drain()
                except ConnectionError:
                    self._reset(conn)
                    return
        finally:
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reading
