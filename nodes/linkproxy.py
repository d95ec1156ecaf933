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

**Per source** (``sources``; ``--from``, ``PROVNET_LINK_FROM``): one proxy in
front of a target can stand for every directed link *into* it. Each
:class:`SourceLink` names a source (a host name, resolved by the proxy, or
an IP address) and the settings of the link from that source; a connection
is matched by its peer address and gets that link — its own delay, jitter,
bandwidth (shared only by that source's connections), drop, blackhole and
draws — while connections from any other address get the proxy's own
settings. Host names are resolved again whenever a connection comes from an
address no source matched (concurrent ones share one resolution), so a
source that starts after the proxy, or restarts with a new address, is
recognised on its first connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ipaddress
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
    "SourceLink",
    "parse_bandwidth",
    "parse_sources",
]

#: Largest chunk read at once from either side.
CHUNK_BYTES = 64 * 1024
#: Chunks in flight per direction of a connection before reading pauses.
QUEUE_CHUNKS = 256
#: How long the proxy waits to connect to its target before giving up on a client.
CONNECT_TIMEOUT_S = 10.0
#: Bound on one resolution of the source names.
RESOLVE_TIMEOUT_S = 2.0


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
    "sources": "PROVNET_LINK_FROM",
}

#: Settings a source's link may set (the rest of a LinkSpec is the proxy's).
_SOURCE_KEYS = ("delay_ms", "jitter_ms", "bandwidth", "drop", "drop_mode", "blackhole", "seed")

_SUFFIX = {"": 1, "k": 1_000, "m": 1_000_000, "g": 1_000_000_000}


def _where(key: str) -> str:
    flag = "from" if key == "sources" else key.replace("_", "-")
    return f"--{flag} (${LINK_ENV_VARS[key]})"


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
class SourceLink:
    """The link from one source into the proxy's target (see the module docstring).

    ``source``: a host name or an IP address. ``settings``: field → value of
    the settings this link changes (keys of :data:`_SOURCE_KEYS`, values as
    given); the others are the proxy's own.
    """

    source: str
    settings: tuple[tuple[str, str], ...] = ()


def parse_sources(text: str) -> tuple[SourceLink, ...]:
    """``SOURCE:key=value,key=value;SOURCE:...`` (``PROVNET_LINK_FROM``, ``--from``).

    ``SOURCE`` is a host name, an IPv4 address or a bracketed IPv6 address; keys
    are the proxy's settings (``delay_ms`` or ``delay-ms``, ``jitter_ms``,
    ``bandwidth``, ``drop``, ``drop_mode``, ``blackhole``, ``seed``). A source
    with no settings (``b:``) gets the proxy's own. Each source at most once.
    """
    links: list[SourceLink] = []
    seen: set[str] = set()
    for entry in (e.strip() for e in text.split(";")):
        if not entry:
            continue
        if entry.startswith("["):
            end = entry.find("]")
            source, rest = entry[1:end], entry[end + 1 :]
            if end < 0 or not rest.startswith(":"):
                raise LinkConfigError(
                    f"{_where('sources')}: expected [IPv6]:key=value,..., got {entry!r}"
                )
            rest = rest[1:]
        else:
            source, sep, rest = entry.partition(":")
            if not sep:
                raise LinkConfigError(
                    f"{_where('sources')}: expected SOURCE:key=value,..., got {entry!r}"
                )
        source = source.strip()
        if not source or any(c.isspace() or c in ",=" for c in source):
            raise LinkConfigError(f"{_where('sources')}: bad source name {source!r} in {entry!r}")
        if source in seen:
            raise LinkConfigError(f"{_where('sources')}: source {source!r} given twice")
        seen.add(source)
        settings: list[tuple[str, str]] = []
        for item in (i.strip() for i in rest.split(",")):
            if not item:
                continue
            key, sep, value = item.partition("=")
            key = key.strip().replace("-", "_")
            if not sep or key not in _SOURCE_KEYS:
                raise LinkConfigError(
                    f"{_where('sources')}: source {source!r}: expected key=value with a key"
                    f" among {', '.join(_SOURCE_KEYS)}, got {item!r}"
                )
            settings.append((key, value.strip()))
        links.append(SourceLink(source, tuple(settings)))
    return tuple(links)


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
    sources: tuple[SourceLink, ...] = ()

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
        sources = raw.get("sources")
        if isinstance(sources, (list, tuple)):
            sources = ";".join(str(s) for s in sources)
        if sources not in (None, ""):
            kwargs["sources"] = parse_sources(str(sources))
        spec = cls(**kwargs)  # type: ignore[arg-type]
        for link in spec.sources:
            spec.for_source(link)  # every source's settings are checked here
        return spec

    def for_source(self, link: SourceLink) -> LinkSpec:
        """The spec of the link from ``link.source``: this one with its settings changed."""
        raw: dict[str, object] = {
            "listen": f"{self.listen[0]}:{self.listen[1]}",
            "target": f"{self.target[0]}:{self.target[1]}",
            "delay_ms": self.delay_ms,
            "jitter_ms": self.jitter_ms,
            "bandwidth": str(self.bandwidth),
            "drop": self.drop,
            "drop_mode": self.drop_mode.value,
            "blackhole": str(self.blackhole),
            "seed": "" if self.seed is None else str(self.seed),
        }
        raw.update(dict(link.settings))
        try:
            return LinkSpec.from_mapping(raw)
        except LinkConfigError as exc:
            raise LinkConfigError(f"{_where('sources')}: source {link.source!r}: {exc}") from None

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
        text = self._describe_link()
        for link in self.sources:
            text += f"; from {link.source}: {self.for_source(link)._describe_link()}"
        return text

    def _describe_link(self) -> str:
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
class _Link:
    """One directed link's state: its spec, draws, capacity per direction, counters."""

    spec: LinkSpec
    rng: random.Random
    stats: LinkStats = field(default_factory=LinkStats)
    up: _Direction = field(default_factory=_Direction)
    down: _Direction = field(default_factory=_Direction)


@dataclass(slots=True, eq=False)
class _Conn:
    client: asyncio.StreamWriter
    link: _Link
    upstream: asyncio.StreamWriter | None = None
    reset: bool = False
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


def _ip(text: str) -> str:
    """An address in one spelling (an IPv4-mapped IPv6 address as IPv4)."""
    try:
        ip = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return text
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


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
        #: totals over every link of the proxy (its own and each source's)
        self.stats = LinkStats()
        self._default = _Link(dataclasses.replace(spec, sources=()), random.Random(spec.seed))
        self._sources: dict[str, _Link] = {}
        for i, source in enumerate(spec.sources, start=1):
            own = spec.for_source(source)
            # a source's own seed, else the proxy's offset by its place (draws differ)
            seeded = any(key == "seed" for key, _ in source.settings)
            seed = own.seed if seeded or spec.seed is None else spec.seed + i
            self._sources[source.source] = _Link(own, random.Random(seed))
        self._by_ip: dict[str, str] = {}
        self._resolving: asyncio.Future[None] | None = None
        self._server: asyncio.Server | None = None
        self._conns: set[_Conn] = set()

    @property
    def source_stats(self) -> dict[str, LinkStats]:
        """Counters of each source's link, by source as configured."""
        return {name: link.stats for name, link in self._sources.items()}

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
        if self._resolving is not None:
            self._resolving.cancel()
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

    @staticmethod
    def _dropped(link: _Link) -> bool:
        return link.spec.drop > 0 and link.rng.random() < link.spec.drop

    def _count(self, link: _Link, name: str, n: int = 1) -> None:
        """Add ``n`` to a counter of the proxy's totals and of the connection's link."""
        for stats in (self.stats, link.stats):
            setattr(stats, name, getattr(stats, name) + n)

    def _reset(self, conn: _Conn) -> None:
        if not conn.reset:
            conn.reset = True
            self._count(conn.link, "resets")
        _rst(conn.client)
        if conn.upstream is not None:
            _rst(conn.upstream)

    async def _resolve_sources(self) -> None:
        """Map the addresses of every source name (again) to its source."""
        loop = asyncio.get_running_loop()
        for name in self._sources:
            try:
                infos = await asyncio.wait_for(
                    loop.getaddrinfo(name, None, type=socket.SOCK_STREAM), RESOLVE_TIMEOUT_S
                )
            except (OSError, TimeoutError):
                continue  # not started yet, or gone: connections from it use the default
            for info in infos:
                self._by_ip[_ip(str(info[4][0]))] = name

    async def _resolve_once(self) -> None:
        """One resolution at a time; callers arriving meanwhile wait for that one."""
        if self._resolving is None or self._resolving.done():
            self._resolving = asyncio.ensure_future(self._resolve_sources())
        await asyncio.shield(self._resolving)

    async def _link_for(self, writer: asyncio.StreamWriter) -> _Link:
        """The link of the connection's source (matched by peer address), else the default."""
        if not self._sources:
            return self._default
        peer = writer.get_extra_info("peername")
        ip = _ip(str(peer[0])) if peer else ""
        name = self._by_ip.get(ip)
        if name is None and ip:
            await self._resolve_once()
            name = self._by_ip.get(ip)
        return self._sources[name] if name is not None else self._default

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = _Conn(client=writer, link=self._default)
        self._conns.add(conn)
        try:
            conn.link = await self._link_for(writer)
        except BaseException:
            self._conns.discard(conn)
            writer.close()
            raise
        self._count(conn.link, "connections")
        self._count(conn.link, "open_connections")
        try:
            await self._serve(conn, reader)
        finally:
            self._count(conn.link, "open_connections", -1)
            self._conns.discard(conn)
            if not conn.reset:
                writer.close()
                if conn.upstream is not None:
                    conn.upstream.close()

    async def _serve(self, conn: _Conn, reader: asyncio.StreamReader) -> None:
        link = conn.link
        spec = link.spec
        if spec.blackhole:
            self._count(link, "blackholed")
            with contextlib.suppress(ConnectionError):
                while await reader.read(CHUNK_BYTES):
                    pass
            return
        match spec.drop_mode:
            case DropMode.CONNECTION:
                if self._dropped(link):
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
            self._count(link, "connect_failures")
            self._reset(conn)
            return
        conn.upstream = up_writer
        conn.tasks = [
            asyncio.ensure_future(self._pump(conn, reader, up_writer, link.up, to_target=True)),
            asyncio.ensure_future(
                self._pump(conn, up_reader, conn.client, link.down, to_target=False)
            ),
        ]
        await asyncio.gather(*conn.tasks, return_exceptions=True)

    @staticmethod
    def _release_at(
        link: _Link, now: float, size: int, direction: _Direction, previous: float
    ) -> float:
        spec = link.spec
        sent = now
        if spec.bandwidth:
            start = max(now, direction.busy_until)
            direction.busy_until = start + size / spec.bandwidth
            sent = direction.busy_until
        delay = spec.delay_ms
        if spec.jitter_ms:
            delay += link.rng.uniform(-spec.jitter_ms, spec.jitter_ms)
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
        spec = conn.link.spec
        per_chunk = spec.drop_mode is DropMode.CHUNK and spec.drop > 0

        async def read() -> None:
            previous = 0.0
            while True:
                try:
                    data = await src.read(CHUNK_BYTES)
                except ConnectionError:
                    data = _EOF
                at = self._release_at(conn.link, loop.time(), len(data), link, previous)
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
                if per_chunk and self._dropped(conn.link):
                    self._reset(conn)
                    return
                dst.write(data)
                self._count(
                    conn.link, "bytes_to_target" if to_target else "bytes_from_target", len(data)
                )
                try:
                    await dst.drain()
                except ConnectionError:
                    self._reset(conn)
                    return
        finally:
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reading
