"""WAN links between the nodes of a boundary run: one user-space proxy per directed link.

:func:`start_links` puts a :class:`nodes.linkproxy.LinkProxy` on every
directed link between two nodes of a started gRPC topology (``a → b`` and
``b → a`` are two links, each with its own proxy and counters) and routes
each node's outgoing calls through the proxies of its own links. Every
proxy delays each direction by half the requested round-trip time, so a
request/response exchange over one link gains at least ``rtt_ms``.

Guarantees:

- **Per link, loopback only.** Proxies listen on ``127.0.0.1:0`` and
  forward to the target node's own loopback address; they are started here
  and stopped by :meth:`Links.close` (the runner calls it in ``finally``,
  also on error or interrupt).
- **Addresses are rewritten at the caller only.** A node's transport maps a
  target node's address to the proxy of the link *from that node*; what the
  nodes sign and advertise (obligations, heads, receipts) is untouched, so a
  witness asked about an origin reaches it over the witness's own link, not
  the holder's.
- **Everything a node sends crosses its link:** deliveries and forwards
  (origin → relay → holder), demands and re-asks (holder → origin), witness
  challenges (holder → witness) and the witness's own demands (witness →
  origin). Calls the runner makes into its own nodes' cores (appending hops,
  committing compactions) are not network traffic in any setting and stay
  direct.
- The metered bytes (protobuf request and response) do not change with the
  link; the proxies count the TCP payload bytes that actually crossed them
  (HTTP/2 framing and headers included), reported by :meth:`Links.stats`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from harness.boundary.topology import Topology
from harness.boundary.wire import MeteredTransport
from nodes.custodian import CustodyTransport
from nodes.linkproxy import LinkProxy, LinkSpec
from nodes.messages import Acknowledgement, Delivery, WitnessReply
from nodes.transport import Answer, CallFailed, ChallengeResult, Transport

__all__ = ["LinkTotals", "Links", "RoutedTransport", "start_links"]


def _host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


class RoutedTransport:
    """A :class:`~nodes.transport.Transport` that reaches some addresses through proxies.

    ``routes`` maps a target address (as signed and advertised) to the
    address of the proxy of this caller's link to it; other addresses are
    reached directly. Only the address called is rewritten — the
    ``origin_address`` a challenge passes on is the witness's to route.
    """

    def __init__(self, inner: Transport, routes: dict[str, str]) -> None:
        self.inner = inner
        self.routes = routes

    def _to(self, address: str) -> str:
        return self.routes.get(address, address)

    async def demand(self, address: str, demands: Sequence[bytes], timeout: float) -> list[Answer]:
        return await self.inner.demand(self._to(address), demands, timeout)

    async def ask(self, address: str, asks: bytes, timeout: float) -> list[Answer]:
        return await self.inner.ask(self._to(address), asks, timeout)

    async def demand_stream(self, address: str, demand: bytes, timeout: float) -> Answer:
        return await self.inner.demand_stream(self._to(address), demand, timeout)

    async def challenge(
        self,
        address: str,
        *,
        commitment: bytes,
        obligation: bytes,
        demand: bytes,
        origin_address: str,
        timeout: float,
    ) -> ChallengeResult:
        return await self.inner.challenge(
            self._to(address),
            commitment=commitment,
            obligation=obligation,
            demand=demand,
            origin_address=origin_address,
            timeout=timeout,
        )

    async def deliver(
        self, address: str, delivery: Delivery, timeout: float, signed: bool = False
    ) -> Acknowledgement:
        return await self.inner.deliver(self._to(address), delivery, timeout, signed)

    async def take_custody(
        self, address: str, head: bytes, fold_proofs: Sequence[bytes], timeout: float
    ) -> tuple[bytes, ...]:
        """``Custody.Take`` through the link (nodes.custodian.CustodyTransport)."""
        inner = self.inner
        if not isinstance(inner, CustodyTransport):
            raise CallFailed("UNIMPLEMENTED", "this transport cannot reach custodians", address)
        return await inner.take_custody(self._to(address), head, fold_proofs, timeout)

    async def add_checkpoint(self, address: str, body: bytes, timeout: float) -> WitnessReply:
        """``Witness.AddCheckpoint`` through the link (nodes.cosigner)."""
        call = getattr(self.inner, "add_checkpoint", None)
        if call is None:
            raise CallFailed("UNIMPLEMENTED", "this transport cannot reach witnesses", address)
        reply: WitnessReply = await call(self._to(address), body, timeout)
        return reply

    async def close(self) -> None:
        await self.inner.close()


@dataclass(frozen=True, slots=True)
class LinkTotals:
    """What crossed the links of a run, summed over every link."""

    links: int
    connections: int
    bytes_to_target: int
    bytes_from_target: int
    resets: int

    @property
    def tcp_bytes(self) -> int:
        return self.bytes_to_target + self.bytes_from_target


class Links:
    """The started proxies of a topology; :meth:`close` stops them all (idempotent)."""

    def __init__(self, rtt_ms: float, proxies: dict[tuple[str, str], LinkProxy]) -> None:
        self.rtt_ms = rtt_ms
        self.proxies = proxies
        self._closed = False

    def stats(self) -> LinkTotals:
        ps = list(self.proxies.values())
        return LinkTotals(
            links=len(ps),
            connections=sum(p.stats.connections for p in ps),
            bytes_to_target=sum(p.stats.bytes_to_target for p in ps),
            bytes_from_target=sum(p.stats.bytes_from_target for p in ps),
            resets=sum(p.stats.resets for p in ps),
        )

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        errors: list[BaseException] = []
        for proxy in self.proxies.values():
            try:
                await proxy.close()
            except Exception as exc:  # keep closing the others
                errors.append(exc)
        if errors:
            raise errors[0]


async def start_links(topo: Topology, rtt_ms: float, *, seed: int = 0) -> Links:
    """A proxy with ``rtt_ms / 2`` one-way delay on every directed link of ``topo``.

    ``topo`` must be a gRPC topology of this process (its nodes' transports
    are :class:`~harness.boundary.wire.MeteredTransport`); each node's
    transport is re-pointed at its own links. On failure every proxy started
    so far is stopped.
    """
    if rtt_ms < 0 or rtt_ms != rtt_ms:
        raise ValueError(f"rtt_ms must be a number >= 0, got {rtt_ms!r}")
    proxies: dict[tuple[str, str], LinkProxy] = {}
    links = Links(rtt_ms, proxies)
    try:
        for index, (src, dst) in enumerate(itertools.permutations(topo.nodes, 2)):
            spec = LinkSpec(
                listen=("127.0.0.1", 0),
                target=_host_port(dst.address),
                delay_ms=rtt_ms / 2.0,
                seed=seed + index,
            )
            proxy = LinkProxy(spec)
            await proxy.start()
            proxies[(src.name, dst.name)] = proxy
        for node in topo.nodes:
            metered = node.core.transport
            if not isinstance(metered, MeteredTransport):
                raise TypeError(f"node {node.name}: links need a metered in-process transport")
            routes = {
                dst.address: proxies[(node.name, dst.name)].address
                for dst in topo.nodes
                if dst.name != node.name
            }
            metered.inner = RoutedTransport(metered.inner, routes)
    except BaseException:
        await links.close()
        raise
    return links
