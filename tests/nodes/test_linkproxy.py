"""The WAN link proxy on loopback: a real echo server and a real grpc.aio server behind it.

Timing checks are lower bounds only (a link must add at least what it
promises; a busy machine may add more), never upper bounds.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from grpc import aio
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer

from harness.cli import main
from nodes.linkproxy import (
    DropMode,
    LinkConfigError,
    LinkProxy,
    LinkSpec,
    SourceLink,
    parse_bandwidth,
    parse_sources,
)

LOOPBACK = "127.0.0.1"


class Echo:
    """A TCP echo server that counts the connections it got."""

    def __init__(self) -> None:
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
        except ConnectionError:
            pass
        finally:
            writer.close()

    @property
    def port(self) -> int:
        assert self.server is not None
        port: int = self.server.sockets[0].getsockname()[1]
        return port


@pytest.fixture
async def echo() -> AsyncIterator[Echo]:
    server = Echo()
    server.server = await asyncio.start_server(server._handle, LOOPBACK, 0)
    try:
        yield server
    finally:
        server.server.close()
        await server.server.wait_closed()


def _spec(target_port: int, **kwargs: object) -> LinkSpec:
    return LinkSpec(listen=(LOOPBACK, 0), target=(LOOPBACK, target_port), **kwargs)  # type: ignore[arg-type]


async def _roundtrip(port: int, payload: bytes) -> tuple[bytes, float]:
    """Send ``payload``, half-close, read everything back; (echo, seconds from first byte)."""
    reader, writer = await asyncio.open_connection(LOOPBACK, port)
    try:
        start = time.perf_counter()
        writer.write(payload)
        await writer.drain()
        writer.write_eof()
        data = await asyncio.wait_for(reader.read(-1), 20)
        return data, time.perf_counter() - start
    finally:
        writer.close()


async def _ping_rtt(port: int, rounds: int) -> list[float]:
    """Per-round RTT of 1-byte ping-pongs on one connection."""
    reader, writer = await asyncio.open_connection(LOOPBACK, port)
    rtts = []
    try:
        for _ in range(rounds):
            start = time.perf_counter()
            writer.write(b"x")
            await writer.drain()
            assert await asyncio.wait_for(reader.readexactly(1), 10) == b"x"
            rtts.append(time.perf_counter() - start)
    finally:
        writer.close()
    return rtts


async def test_without_conditions_bytes_and_half_close_pass_unchanged(echo: Echo) -> None:
    payload = os.urandom(300_000)
    async with LinkProxy(_spec(echo.port)) as proxy:
        data, _ = await _roundtrip(proxy.port, payload)
        assert data == payload
        assert proxy.stats.bytes_to_target == proxy.stats.bytes_from_target == len(payload)
        assert proxy.stats.resets == 0


async def test_delay_adds_at_least_two_delays_to_every_round_trip(echo: Echo) -> None:
    async with LinkProxy(_spec(echo.port, delay_ms=40)) as proxy:
        rtts = await _ping_rtt(proxy.port, 3)
    assert min(rtts) >= 2 * 0.040, rtts


async def test_jitter_delivers_every_byte_intact_and_keeps_the_lower_bound(echo: Echo) -> None:
    # 600 small writes with ±15 ms jitter around 20 ms: a chunk lost or written
    # twice shows in the echo (order itself is kept by the per-direction queue,
    # which no jitter value can change); each round trip is still
    # >= 2 × (delay − jitter).
    payload = b"".join(i.to_bytes(2, "big") for i in range(600))
    async with LinkProxy(_spec(echo.port, delay_ms=20, jitter_ms=15, seed=7)) as proxy:
        reader, writer = await asyncio.open_connection(LOOPBACK, proxy.port)
        for i in range(0, len(payload), 2):
            writer.write(payload[i : i + 2])
            await writer.drain()
        writer.write_eof()
        data = await asyncio.wait_for(reader.read(-1), 20)
        writer.close()
        rtts = await _ping_rtt(proxy.port, 3)
    assert data == payload
    assert min(rtts) >= 2 * 0.005, rtts


async def test_bandwidth_bounds_the_transfer_time_from_below(echo: Echo) -> None:
    payload = os.urandom(200_000)
    async with LinkProxy(_spec(echo.port, bandwidth=1_000_000)) as proxy:
        data, seconds = await _roundtrip(proxy.port, payload)
    assert data == payload
    # 200 kB one way at 1 MB/s is 0.2 s; back again cannot start before the
    # first chunk arrived, so the echo takes at least 0.2 s plus one chunk.
    assert seconds >= 0.2, seconds


async def test_blackhole_accepts_but_never_reaches_the_target(echo: Echo) -> None:
    async with LinkProxy(_spec(echo.port, blackhole=True)) as proxy:
        reader, writer = await asyncio.open_connection(LOOPBACK, proxy.port)
        writer.write(b"hello")
        await writer.drain()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(reader.read(1), 0.3)
        writer.close()
        assert proxy.stats.blackholed == 1
    assert echo.connections == 0


async def test_drop_per_chunk_resets_the_connection(echo: Echo) -> None:
    async with LinkProxy(_spec(echo.port, drop=1.0)) as proxy:
        reader, writer = await asyncio.open_connection(LOOPBACK, proxy.port)
        writer.write(b"hello")
        await writer.drain()
        with pytest.raises(ConnectionResetError):
            await asyncio.wait_for(reader.read(1), 5)
        writer.close()
        assert proxy.stats.resets == 1
        assert proxy.stats.bytes_to_target == 0


async def test_drop_per_connection_resets_before_contacting_the_target(echo: Echo) -> None:
    spec = _spec(echo.port, drop=1.0, drop_mode=DropMode.CONNECTION)
    async with LinkProxy(spec) as proxy:
        reader, writer = await asyncio.open_connection(LOOPBACK, proxy.port)
        with pytest.raises(ConnectionResetError):
            await asyncio.wait_for(reader.read(1), 5)
        writer.close()
    assert echo.connections == 0


async def test_drop_probability_resets_some_connections_not_all(echo: Echo) -> None:
    spec = _spec(echo.port, drop=0.5, drop_mode=DropMode.CONNECTION, seed=1)
    outcomes = []
    async with LinkProxy(spec) as proxy:
        for _ in range(40):
            try:
                data, _ = await _roundtrip(proxy.port, b"ping")
                outcomes.append(data == b"ping")
            except ConnectionError:  # reset, or a broken pipe when writing after it
                outcomes.append(False)
        resets = proxy.stats.resets
    assert 0 < resets < 40
    assert outcomes.count(False) == resets


# ------------------------------------------------------------- per source


async def _echo_from(source_ip: str, port: int, payload: bytes) -> bytes:
    """Send ``payload`` from the local address ``source_ip``, half-close, read it all back."""
    reader, writer = await asyncio.open_connection(LOOPBACK, port, local_addr=(source_ip, 0))
    try:
        writer.write(payload)
        await writer.drain()
        writer.write_eof()
        return await asyncio.wait_for(reader.read(-1), 20)
    finally:
        writer.close()


async def _ping_from(source_ip: str, port: int) -> float:
    reader, writer = await asyncio.open_connection(LOOPBACK, port, local_addr=(source_ip, 0))
    try:
        start = time.perf_counter()
        writer.write(b"x")
        await writer.drain()
        assert await asyncio.wait_for(reader.readexactly(1), 10) == b"x"
        return time.perf_counter() - start
    finally:
        writer.close()


async def test_each_source_gets_its_own_link_into_the_target(echo: Echo) -> None:
    # One proxy in front of the target, three sources on loopback addresses:
    # 127.0.0.2 is partitioned from it, 127.0.0.3 has a 40 ms link, anyone
    # else the proxy's own (no conditions).
    spec = dataclasses.replace(
        _spec(echo.port),
        sources=parse_sources("127.0.0.2:blackhole=true;127.0.0.3:delay_ms=40"),
    )
    async with LinkProxy(spec) as proxy:
        assert await _echo_from("127.0.0.1", proxy.port, b"default") == b"default"
        assert await _ping_from("127.0.0.3", proxy.port) >= 2 * 0.040
        reader, writer = await asyncio.open_connection(
            LOOPBACK, proxy.port, local_addr=("127.0.0.2", 0)
        )
        writer.write(b"hello")
        await writer.drain()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(reader.read(1), 0.3)
        writer.close()
        per = proxy.source_stats
        assert (per["127.0.0.2"].connections, per["127.0.0.2"].blackholed) == (1, 1)
        assert per["127.0.0.2"].bytes_to_target == 0
        assert (per["127.0.0.3"].connections, per["127.0.0.3"].bytes_to_target) == (1, 1)
        assert proxy.stats.connections == 3
        assert proxy.stats.blackholed == 1
    assert echo.connections == 2  # the partitioned source never reached the target


async def test_a_source_named_by_host_name_is_matched_by_its_resolved_address(
    echo: Echo,
) -> None:
    # "localhost" resolves to 127.0.0.1: its connections are reset; another
    # loopback address is not that source and passes.
    spec = dataclasses.replace(
        _spec(echo.port),
        sources=(SourceLink("localhost", (("drop", "1"), ("drop_mode", "connection"))),),
    )
    async with LinkProxy(spec) as proxy:
        with pytest.raises(ConnectionError):
            await _echo_from("127.0.0.1", proxy.port, b"x")
        assert await _echo_from("127.0.0.4", proxy.port, b"other") == b"other"
        assert proxy.source_stats["localhost"].resets == 1
        assert proxy.stats.resets == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("b", "expected SOURCE:key=value"),
        ("b:delay=5", "expected key=value with a key among delay_ms"),
        ("b:delay_ms=5;b:drop=0", "source 'b' given twice"),
        ("[::1:delay_ms=5", "expected [IPv6]:key=value"),
        ("b c:delay_ms=1", "bad source name"),
    ],
)
def test_bad_per_source_settings_name_the_flag_and_variable(text: str, message: str) -> None:
    with pytest.raises(LinkConfigError) as caught:
        parse_sources(text)
    assert "--from ($PROVNET_LINK_FROM)" in str(caught.value)
    assert message in str(caught.value)


def test_per_source_settings_come_from_flags_or_environment_and_inherit_the_rest() -> None:
    env = {
        "PROVNET_LINK_LISTEN": "0.0.0.0:50051",
        "PROVNET_LINK_TARGET": "a:50051",
        "PROVNET_LINK_DELAY_MS": "20",
        "PROVNET_LINK_JITTER_MS": "2",
        "PROVNET_LINK_FROM": "b:delay-ms=5 ; [fd00::2]:blackhole=true;c:",
    }
    spec = LinkSpec.from_env_and_args({}, env)
    assert [s.source for s in spec.sources] == ["b", "fd00::2", "c"]
    b, v6, c = (spec.for_source(s) for s in spec.sources)
    assert (b.delay_ms, b.jitter_ms, b.blackhole) == (5, 2, False)
    assert (v6.delay_ms, v6.blackhole) == (20, True)
    assert c == dataclasses.replace(spec, sources=())
    flags = LinkSpec.from_env_and_args({"sources": ["runner:drop=0.5"]}, env)
    assert [s.source for s in flags.sources] == ["runner"]
    assert flags.for_source(flags.sources[0]).drop == 0.5
    with pytest.raises(LinkConfigError, match=r"source 'b': --drop .* a probability"):
        LinkSpec.from_env_and_args({"sources": ["b:drop=2"]}, env)
    assert "from b: delay 5 ms, jitter ±2 ms" in spec.describe()


# --------------------------------------------------------------------- gRPC


@pytest.fixture
async def health_port() -> AsyncIterator[int]:
    server = aio.server(options=[("grpc.so_reuseport", 0)])
    servicer = HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port(f"{LOOPBACK}:0")
    await server.start()
    await servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    try:
        yield port
    finally:
        await server.stop(None)


async def _check(address: str, timeout: float) -> float:
    async with aio.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        await stub.Check(health_pb2.HealthCheckRequest(), timeout=timeout)  # connection set-up
        start = time.perf_counter()
        reply = await stub.Check(health_pb2.HealthCheckRequest(), timeout=timeout)
        elapsed = time.perf_counter() - start
    assert reply.status == health_pb2.HealthCheckResponse.SERVING
    return elapsed


async def test_grpc_call_through_a_delayed_link_takes_at_least_two_delays(
    health_port: int,
) -> None:
    async with LinkProxy(_spec(health_port, delay_ms=30)) as proxy:
        elapsed = await _check(proxy.address, timeout=10)
    assert elapsed >= 2 * 0.030, elapsed


async def test_grpc_call_into_a_blackhole_ends_in_deadline_exceeded(health_port: int) -> None:
    async with LinkProxy(_spec(health_port, blackhole=True)) as proxy:
        with pytest.raises(aio.AioRpcError) as caught:
            await _check(proxy.address, timeout=0.5)
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


async def test_grpc_call_over_a_dropping_link_is_unavailable(health_port: int) -> None:
    async with LinkProxy(_spec(health_port, drop=1.0)) as proxy:
        with pytest.raises(aio.AioRpcError) as caught:
            await _check(proxy.address, timeout=5)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_a_nodes_fail_fast_call_connects_across_a_link_of_200_ms_rtt(
    health_port: int,
) -> None:
    # Deliver and Challenge do not wait for a channel: the first connection attempt must
    # get the peer's HTTP/2 SETTINGS across the link (one way 100 ms) in time.
    from nodes.transport import GrpcTransport

    transport = GrpcTransport()
    try:
        async with LinkProxy(_spec(health_port, delay_ms=100)) as proxy:
            stub = health_pb2_grpc.HealthStub(transport.channel(proxy.address))
            reply = await stub.Check(health_pb2.HealthCheckRequest(), timeout=10)
    finally:
        await transport.close()
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


# ------------------------------------------------------------ configuration


def test_settings_come_from_flags_before_environment() -> None:
    env = {
        "PROVNET_LINK_LISTEN": "0.0.0.0:50051",
        "PROVNET_LINK_TARGET": "a:50051",
        "PROVNET_LINK_DELAY_MS": "20",
        "PROVNET_LINK_BANDWIDTH": "2M",
        "PROVNET_LINK_DROP_MODE": "connection",
        "PROVNET_LINK_BLACKHOLE": "false",
    }
    spec = LinkSpec.from_env_and_args({"delay_ms": "5", "blackhole": None}, env)
    assert spec.listen == ("0.0.0.0", 50051)
    assert spec.target == ("a", 50051)
    assert spec.delay_ms == 5
    assert spec.bandwidth == 2_000_000
    assert spec.drop_mode is DropMode.CONNECTION
    assert spec.blackhole is False


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"target": "a:1"}, "--listen ($PROVNET_LINK_LISTEN) is required"),
        ({"listen": "x", "target": "a:1"}, "--listen ($PROVNET_LINK_LISTEN): expected host:port"),
        ({"listen": "h:1", "target": "a:1", "delay_ms": "-3"}, "--delay-ms"),
        ({"listen": "h:1", "target": "a:1", "drop": "1.5"}, "--drop ($PROVNET_LINK_DROP)"),
        ({"listen": "h:1", "target": "a:1", "bandwidth": "fast"}, "--bandwidth"),
        ({"listen": "h:1", "target": "a:1", "drop_mode": "packet"}, "expected one of chunk"),
        ({"listen": "h:1", "target": "a:1", "blackhole": "maybe"}, "--blackhole"),
    ],
)
def test_bad_settings_name_the_flag_and_variable(raw: dict[str, str], message: str) -> None:
    with pytest.raises(LinkConfigError) as caught:
        LinkSpec.from_mapping(raw)
    assert message in str(caught.value)


def test_bandwidth_suffixes_are_decimal() -> None:
    assert [parse_bandwidth(t) for t in ("250000", "250k", "2M", "1.5G", "0")] == [
        250_000,
        250_000,
        2_000_000,
        1_500_000_000,
        0,
    ]


def test_cli_rejects_bad_settings_with_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PROVNET_LINK_TARGET", raising=False)
    assert main(["link-proxy", "--listen", "127.0.0.1:0", "--drop", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["provnet: error: --target ($PROVNET_LINK_TARGET) is required"]
    assert main(["link-proxy", "--listen", "127.0.0.1:0", "--target", "a:1", "--drop", "2"]) == 2
    assert "--drop ($PROVNET_LINK_DROP): a probability in [0, 1]" in capsys.readouterr().err


def test_cli_listen_address_in_use_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("PROVNET_LINK_LISTEN", "PROVNET_LINK_TARGET"):
        monkeypatch.delenv(var, raising=False)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["link-proxy", "--listen", f"127.0.0.1:{port}", "--target", "127.0.0.1:1"])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"provnet: error: --listen ($PROVNET_LINK_LISTEN) 127.0.0.1:{port}: ")
    assert "cannot listen" in err[0]


async def test_cli_process_configured_by_environment_delays_and_stops_on_sigterm(
    echo: Echo, tmp_path: Path
) -> None:
    port_file = tmp_path / "port"
    env = {
        **os.environ,
        "PROVNET_LINK_LISTEN": f"{LOOPBACK}:0",
        "PROVNET_LINK_TARGET": f"{LOOPBACK}:{echo.port}",
        "PROVNET_LINK_DELAY_MS": "25",
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "harness", "link-proxy", "--port-file", str(port_file),
        env=env, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        for _ in range(200):
            if port_file.exists() and port_file.read_text().strip():
                break
            if proc.returncode is not None:
                break
            await asyncio.sleep(0.05)
        port = int(port_file.read_text())
        rtts = await _ping_rtt(port, 2)
        assert min(rtts) >= 2 * 0.025, rtts
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 10) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.stderr is not None
    err = (await proc.stderr.read()).decode()
    assert f"→ {LOOPBACK}:{echo.port} (delay 25 ms)" in err
    assert "link-proxy: stopped; 1 connections" in err
