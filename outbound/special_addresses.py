"""The addresses no job or webhook may reach by default: every range of the IANA IPv4 and IPv6
special-purpose address registries that is not globally reachable, written out here.

Python's ``ipaddress.is_global`` / ``is_private`` are not used: on Python 3.11 they miss ranges
(192.0.0.0/24, for one) and their answers change between Python versions. Addresses that carry
an IPv4 address (IPv4-mapped, NAT64, 6to4, Teredo) are judged by the IPv4 address they carry.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _table(*rows: tuple[str, str]) -> tuple[tuple[Network, str], ...]:
    return tuple((ipaddress.ip_network(cidr), name) for cidr, name in rows)


# IANA IPv4 Special-Purpose Address Registry, the rows marked not globally reachable, and
# multicast. 192.0.0.0/24 is refused whole: its two global rows (192.0.0.9 PCP and
# 192.0.0.10 TURN anycast) are not HTTP services. 192.88.99.0/24 (the deprecated 6to4 relay
# anycast) is refused whole too.
IPV4_NOT_GLOBAL = _table(
    ("0.0.0.0/8", "this network"),
    ("10.0.0.0/8", "private use"),
    ("100.64.0.0/10", "shared address space (carrier-grade NAT)"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link local (cloud metadata)"),
    ("172.16.0.0/12", "private use"),
    ("192.0.0.0/24", "IETF protocol assignments (cloud metadata)"),
    ("192.0.2.0/24", "documentation (TEST-NET-1)"),
    ("192.88.99.0/24", "deprecated 6to4 relay anycast"),
    ("192.168.0.0/16", "private use"),
    ("198.18.0.0/15", "benchmarking"),
    ("198.51.100.0/24", "documentation (TEST-NET-2)"),
    ("203.0.113.0/24", "documentation (TEST-NET-3)"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved"),
    ("255.255.255.255/32", "limited broadcast"),
)

# IANA IPv6 Special-Purpose Address Registry, the rows marked not globally reachable, the
# deprecated site-local and multicast blocks, and everything outside global unicast 2000::/3
# (reserved by the IETF, so no route reaches it). The carriers below are unwrapped first.
IPV6_NOT_GLOBAL = _table(
    ("::1/128", "loopback"),
    ("::/128", "unspecified"),
    ("64:ff9b:1::/48", "local-use IPv4/IPv6 translation"),
    ("100::/64", "discard only"),
    ("100:0:0:1::/64", "dummy prefix"),
    ("2001::/23", "IETF protocol assignments"),
    ("2001:db8::/32", "documentation"),
    ("3fff::/20", "documentation"),
    ("5f00::/16", "segment routing SIDs"),
    ("fc00::/7", "unique local"),
    ("fe80::/10", "link local"),
    ("fec0::/10", "site local (deprecated)"),
    ("ff00::/8", "multicast"),
    ("::/3", "reserved by the IETF"),
    ("4000::/2", "reserved by the IETF"),
    ("8000::/1", "reserved by the IETF"),
)

# The sub-blocks of 2001::/23 that the registry marks globally reachable.
IPV6_GLOBAL_IN_IETF_BLOCK = tuple(ipaddress.IPv6Network(cidr) for cidr in (
    "2001:1::1/128", "2001:1::2/128", "2001:1::3/128",  # PCP, TURN, DNS-SD SRP anycast
    "2001:3::/32",  # AMT
    "2001:4:112::/48",  # AS112-v6
    "2001:20::/28",  # ORCHIDv2
    "2001:30::/28",  # drone remote ID entity tags
))

IPV4_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")
NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
SIX_TO_FOUR = ipaddress.IPv6Network("2002::/16")
TEREDO = ipaddress.IPv6Network("2001::/32")


@dataclass(frozen=True)
class NonPublic:
    """Why an address is not a public target: the address judged (the address itself or the
    IPv4 address it carries), the range it falls in and that range's name."""

    address: Address
    judged: Address
    network: Network
    name: str
    carrier: str = ""

    def __str__(self) -> str:
        where = f"{self.name}, {self.network}"
        if self.carrier:
            return f"{self.address} ({self.carrier} of {self.judged}: {where})"
        return f"{self.address} ({where})"


def non_public(address: Address) -> NonPublic | None:
    """Why the address is not globally reachable, or None when it is."""
    if isinstance(address, ipaddress.IPv4Address):
        return _in_table(address, IPV4_NOT_GLOBAL)
    carried = _carried(address)
    if carried:
        for carrier, inner in carried:
            found = non_public(inner)
            if found is not None:
                return NonPublic(address, inner, found.network, found.name, carrier)
        return None
    if any(address in block for block in IPV6_GLOBAL_IN_IETF_BLOCK):
        return None
    return _in_table(address, IPV6_NOT_GLOBAL)


def _carried(address: ipaddress.IPv6Address) -> list[tuple[str, ipaddress.IPv4Address]]:
    """The IPv4 addresses an IPv6 address carries, each named by how it carries it."""
    bits = int(address)
    if address in IPV4_MAPPED:
        return [("IPv4-mapped", ipaddress.IPv4Address(bits & 0xFFFF_FFFF))]
    if address in NAT64:
        return [("NAT64", ipaddress.IPv4Address(bits & 0xFFFF_FFFF))]
    if address in SIX_TO_FOUR:
        return [("6to4", ipaddress.IPv4Address((bits >> 80) & 0xFFFF_FFFF))]
    if address in TEREDO:
        # 2001:0:<server v4>:<flags>:<port>:<client v4>, the client's port and address inverted.
        return [("Teredo server", ipaddress.IPv4Address((bits >> 64) & 0xFFFF_FFFF)),
                ("Teredo client", ipaddress.IPv4Address(~bits & 0xFFFF_FFFF))]
    return []


def _in_table(address: Address, table: tuple[tuple[Network, str], ...]) -> NonPublic | None:
    for network, name in table:
        if address in network:
            return NonPublic(address, address, network, name)
    return None
