"""Every non-global range of the IANA special-purpose registries is refused, however an IPv6
address carries it; the globally reachable rows and carriers of public addresses pass."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from outbound.egress import EgressPolicy, EgressRefused
from outbound.special_addresses import (
    IPV4_MAPPED,
    IPV4_NOT_GLOBAL,
    IPV6_GLOBAL_IN_IETF_BLOCK,
    IPV6_NOT_GLOBAL,
    NAT64,
    SIX_TO_FOUR,
    TEREDO,
    Network,
    non_public,
)

V4 = ipaddress.IPv4Address
V6 = ipaddress.IPv6Address
CARRIERS = (IPV4_MAPPED, NAT64, SIX_TO_FOUR, TEREDO)


def six_to_four(v4: str) -> str:
    return str(V6((0x2002 << 112) | (int(V4(v4)) << 80) | 1))


def teredo(server: str, client: str) -> str:
    # 2001:0:<server>:<flags>:<port inverted>:<client inverted>
    bits = (0x2001 << 112) | (int(V4(server)) << 64) | (0x8000 << 48) | ((~1234 & 0xFFFF) << 32)
    return str(V6(bits | (~int(V4(client)) & 0xFFFF_FFFF)))


def nat64(v4: str) -> str:
    return str(V6(int(NAT64.network_address) | int(V4(v4))))


REFUSED = [
    # IPv4, one or more per row of the table
    "0.0.0.0", "0.1.2.3", "10.0.0.1", "10.255.255.255", "100.64.0.1", "100.127.255.254",
    "127.0.0.1", "127.255.255.254", "169.254.169.254", "172.16.0.1", "172.31.255.255",
    "192.0.0.1", "192.0.0.8", "192.0.0.170", "192.0.0.192", "192.0.2.1", "192.88.99.1",
    "192.168.1.1", "198.18.0.1", "198.19.255.255", "198.51.100.7", "203.0.113.9",
    "224.0.0.1", "239.255.255.250", "240.0.0.1", "255.255.255.255",
    # IPv6 rows
    "::1", "::", "64:ff9b:1::1", "100::1", "100:0:0:1::1", "2001:2::1", "2001:10::1",
    "2001:db8::1", "3fff::1", "5f00::1", "fc00::1", "fd12:3456::1", "fe80::1", "febf::1",
    "fec0::1", "ff02::1", "ff0e::1", "::8.8.8.8", "4000::1", "8000::1",
    # carriers of a non-public IPv4 address
    "::ffff:127.0.0.1", "::ffff:10.0.0.1", "::ffff:192.0.0.192",
    six_to_four("127.0.0.1"), six_to_four("10.0.0.1"), six_to_four("169.254.169.254"),
    teredo("65.54.227.120", "192.168.1.10"), teredo("65.54.227.120", "127.0.0.1"),
    teredo("10.0.0.1", "8.8.8.8"),
    nat64("169.254.169.254"), nat64("127.0.0.1"), nat64("192.0.0.192"),
]

PUBLIC = [
    "8.8.8.8", "93.184.215.14", "1.1.1.1", "192.0.1.1", "192.31.196.1", "192.52.193.1",
    "192.175.48.1", "198.20.0.1", "223.255.255.255", "100.128.0.1", "172.32.0.1",
    "2606:4700::1111", "2001:4860:4860::8888", "2001:1::1", "2001:3::1", "2001:4:112::1",
    "2001:20::1", "2001:30::1", "2620:4f:8000::1",
    "::ffff:8.8.8.8", six_to_four("8.8.8.8"), teredo("65.54.227.120", "8.8.4.4"),
    nat64("93.184.215.14"),
]


@pytest.mark.parametrize("address", REFUSED)
def test_each_special_range_is_refused(address: str) -> None:
    assert non_public(ipaddress.ip_address(address)) is not None
    with pytest.raises(EgressRefused, match="not a public address"):
        EgressPolicy().check_address("h", address)


@pytest.mark.parametrize("address", PUBLIC)
def test_globally_reachable_addresses_pass(address: str) -> None:
    assert non_public(ipaddress.ip_address(address)) is None
    EgressPolicy().check_address("h", address)


def test_192_0_0_192_is_refused_although_python_calls_it_global() -> None:
    assert ipaddress.ip_address("192.0.0.192").is_private is False  # why the table exists
    found = non_public(V4("192.0.0.192"))
    assert found is not None and str(found.network) == "192.0.0.0/24"


@pytest.mark.parametrize(("address", "carrier", "carried"), [
    (six_to_four("127.0.0.1"), "6to4", "127.0.0.1"),
    (six_to_four("10.0.0.1"), "6to4", "10.0.0.1"),
    (teredo("65.54.227.120", "192.168.1.10"), "Teredo client", "192.168.1.10"),
    (nat64("169.254.169.254"), "NAT64", "169.254.169.254"),
    ("::ffff:127.0.0.1", "IPv4-mapped", "127.0.0.1"),
])
def test_carriers_are_judged_by_the_ipv4_address_they_carry(address: str, carrier: str, carried: str) -> None:
    if carrier.startswith("Teredo"):  # the test's own encoding, read back by the standard library
        assert V6(address).teredo == (V4("65.54.227.120"), V4(carried))
    found = non_public(V6(address))
    assert found is not None and found.carrier == carrier and str(found.judged) == carried
    assert f"{carrier} of {carried}" in str(found)


def test_an_allowlisted_network_allows_itself_and_its_ipv4_mapped_form_only() -> None:
    dev = EgressPolicy.from_list(["127.0.0.0/8"])
    for address in ("127.0.0.1", "::ffff:127.0.0.1"):
        dev.check_address("h", address)
    for address in (six_to_four("127.0.0.1"), nat64("127.0.0.1"), teredo("65.54.227.120", "127.0.0.1")):
        with pytest.raises(EgressRefused):
            dev.check_address("h", address)  # through a relay: allowlisted only by its own network
    EgressPolicy.from_list(["2002::/16"]).check_address("h", six_to_four("10.0.0.1"))


def _address_in(network: Network) -> st.SearchStrategy[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    first, size, kind = int(network.network_address), network.num_addresses, type(network.network_address)
    offsets = st.one_of(st.just(0), st.just(size - 1), st.integers(0, size - 1))
    return offsets.map(lambda offset: kind(first + offset))  # ip_address(int) makes IPv4 of small ints


def _table_addresses() -> st.SearchStrategy[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    rows = [network for network, _ in IPV4_NOT_GLOBAL + IPV6_NOT_GLOBAL]
    return st.sampled_from(rows).flatmap(_address_in)


@settings(max_examples=3000)
@given(_table_addresses())
def test_every_address_of_the_table_is_refused(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> None:
    # Carriers are judged by what they carry, and the registry's global rows inside
    # 2001::/23 pass: both have their own properties.
    assume(not any(address in carrier for carrier in CARRIERS if carrier.version == address.version))
    assume(not any(address in block for block in IPV6_GLOBAL_IN_IETF_BLOCK))
    with pytest.raises(EgressRefused):
        EgressPolicy().check_address("h", str(address))


V4_TABLE = st.sampled_from([network for network, _ in IPV4_NOT_GLOBAL]).flatmap(_address_in)


@given(V4_TABLE, st.sampled_from(["mapped", "nat64", "6to4", "teredo"]))
def test_every_carrier_of_a_table_address_is_refused(v4: ipaddress.IPv4Address, how: str) -> None:
    wrapped = {"mapped": f"::ffff:{v4}", "nat64": nat64(str(v4)), "6to4": six_to_four(str(v4)),
               "teredo": teredo("65.54.227.120", str(v4))}[how]
    with pytest.raises(EgressRefused):
        EgressPolicy().check_address("h", wrapped)


@given(st.ip_addresses(v=4), st.sampled_from(["mapped", "nat64", "6to4", "teredo"]))
def test_a_carrier_is_refused_exactly_when_its_ipv4_address_is(v4: ipaddress.IPv4Address, how: str) -> None:
    wrapped = {"mapped": f"::ffff:{v4}", "nat64": nat64(str(v4)), "6to4": six_to_four(str(v4)),
               "teredo": teredo("65.54.227.120", str(v4))}[how]
    assert (non_public(V6(wrapped)) is None) == (non_public(v4) is None)
