"""Egress guard for HTTP jobs: a scheduler that calls URLs its users give must not become a
way into the private network (SSRF).

Targets that resolve to loopback, private, link-local (cloud metadata 169.254.169.254
included), multicast, reserved or unspecified addresses are refused unless an operator
allowlists the host or network. The check runs when a task is created and again at connect
time, on the address actually connected to, for every connection, redirects included, so a
DNS answer that changes after creation (rebinding) is caught.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpcore
import httpx

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], Awaitable[list[str]]]


class EgressRefused(Exception):
    """The target host or address is not allowed."""


def _blocked(ip: Address) -> bool:
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return (
        ip.is_loopback
        or ip.is_private
        or ip.is_link_local
        or ip.is_multicast
        or ip.is_reserved
        or ip.is_unspecified
        or (isinstance(ip, ipaddress.IPv4Address) and ip in ipaddress.ip_network("100.64.0.0/10"))
    )


async def system_resolver(host: str, port: int) -> list[str]:
    """Resolve with the system resolver (getaddrinfo)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def static_resolver(table: Mapping[str, list[str]]) -> Resolver:
    """A resolver from a fixed table (tests); unknown names fail to resolve."""

    async def resolve(host: str, port: int) -> list[str]:
        try:
            return list(table[host])
        except KeyError as exc:
            raise socket.gaierror(f"{host} does not resolve") from exc

    return resolve


@dataclass
class EgressPolicy:
    """Which hosts and networks HTTP jobs may reach beyond the public internet."""

    allow_hosts: frozenset[str] = frozenset()
    allow_networks: tuple[Network, ...] = ()
    resolver: Resolver = field(default=system_resolver)

    @classmethod
    def from_list(cls, entries: Iterable[str], resolver: Resolver = system_resolver) -> EgressPolicy:
        """Build from operator entries: host names, IP addresses or CIDR networks."""
        hosts: set[str] = set()
        networks: list[Network] = []
        for raw in entries:
            entry = raw.strip().lower()
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                hosts.add(entry)
        return cls(frozenset(hosts), tuple(networks), resolver)

    def check_address(self, host: str, address: str) -> None:
        """Refuse a blocked address unless its host or network is allowlisted."""
        ip = ipaddress.ip_address(address.split("%", 1)[0])
        if not _blocked(ip) or host.lower() in self.allow_hosts:
            return
        if any(ip in network for network in self.allow_networks):
            return
        raise EgressRefused(
            f"{host} resolves to {ip}, a non-public address; an operator must allowlist it "
            "(SCHEDULER_EGRESS_ALLOW)"
        )

    async def resolve_checked(self, host: str, port: int) -> list[str]:
        """The host's addresses, all of them allowed (raises EgressRefused otherwise)."""
        try:
            ipaddress.ip_address(host)
            addresses = [host]
        except ValueError:
            addresses = await self.resolver(host, port)
        for address in addresses:
            self.check_address(host, address)
        return addresses

    async def check_url(self, url: str) -> None:
        """Check a job URL when a task is created; a name that does not resolve yet passes
        (it is checked again at every connect)."""
        parsed = httpx.URL(url)
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        try:
            await self.resolve_checked(parsed.host, port)
        except (socket.gaierror, OSError):
            return


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """Resolves each host itself, checks every address, and connects to a checked one."""

    def __init__(self, policy: EgressPolicy) -> None:
        self._policy = policy
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = await self._policy.resolve_checked(host, port)
        # TLS still verifies against the host name: only the TCP target is pinned.
        return await self._inner.connect_tcp(
            addresses[0], port, timeout=timeout, local_address=local_address,
            socket_options=socket_options,
        )

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
        raise EgressRefused("unix sockets are not a job target")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def guarded_client(policy: EgressPolicy, *, max_redirects: int = 5) -> httpx.AsyncClient:
    """The HTTP client of job activities: every connection goes through the egress guard."""
    transport = httpx.AsyncHTTPTransport(trust_env=False)
    # httpx has no public hook for the network backend; swap the pool for one that uses ours.
    transport._pool = httpcore.AsyncConnectionPool(
        ssl_context=httpx.create_ssl_context(trust_env=False),
        max_connections=200,
        max_keepalive_connections=50,
        network_backend=GuardedBackend(policy),
    )
    return httpx.AsyncClient(
        transport=transport, follow_redirects=True, max_redirects=max_redirects, trust_env=False
    )
