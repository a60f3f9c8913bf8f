"""Whatever URL a client sends, the egress check answers with its own refusal or lets it pass:
never another exception (which the API would turn into a 500)."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from outbound.egress import EgressPolicy, EgressRefused, target_host
from outbound.special_addresses import non_public

LABEL_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"
labels = st.one_of(
    st.text(LABEL_CHARS, max_size=70),
    st.text(max_size=20),  # any unicode, surrogates and controls included
    st.text(st.characters(categories=("L", "M", "N")), min_size=1, max_size=20),  # IDNA material
    st.text("abcdefghijklmnopqrstuvwxyz0123456789-", max_size=20).map(lambda s: "xn--" + s),
    st.sampled_from(["", "-", "_", "xn--", "%41", "%00", "\\", "@", "ß", "ﬀ", "\u200d", "Ｅ"]),
)
names = st.builds(
    lambda parts, dot: ".".join(parts) + dot,
    st.lists(labels, min_size=1, max_size=6), st.sampled_from(["", ".", ".."]),
)


def _ipv4_forms(address: ipaddress.IPv4Address, style: str, split: int) -> str:
    """An IPv4 address written the ways resolvers accept: octal, hex, one to four parts."""
    octets = list(address.packed)
    parts = {1: [int(address)], 2: [octets[0], int.from_bytes(bytes(octets[1:]))],
             3: [octets[0], octets[1], int.from_bytes(bytes(octets[2:]))], 4: octets}[split]
    formats: dict[str, Callable[[int], str]] = {
        "dec": str, "oct": lambda n: "0" + format(n, "o"), "hex": hex,
        "HEX": lambda n: "0X" + format(n, "X"), "pad": lambda n: f"{n:04d}",
    }
    fmt = formats[style]
    return ".".join(fmt(n) for n in parts)


ipv4_hosts = st.builds(
    _ipv4_forms, st.ip_addresses(v=4), st.sampled_from(["dec", "oct", "hex", "HEX", "pad"]),
    st.integers(1, 4),
)
zones = st.one_of(st.just(""), st.text(LABEL_CHARS, min_size=1, max_size=8).map(lambda z: "%25" + z),
                  st.text(LABEL_CHARS, min_size=1, max_size=8).map(lambda z: "%" + z))
ipv6_hosts = st.builds(
    lambda address, zone, mapped: f"[{f'::ffff:{address.ipv4_mapped}' if mapped and address.ipv4_mapped else address}{zone}]",
    st.one_of(st.ip_addresses(v=6), st.ip_addresses(v=4).map(lambda a: ipaddress.IPv6Address(f"::ffff:{a}"))),
    zones, st.booleans(),
)
hosts = st.one_of(names, ipv4_hosts, ipv6_hosts, st.ip_addresses(v=4).map(str),
                  st.text(max_size=30))
ports = st.one_of(st.just(""), st.integers(-5, 70_000).map(lambda p: f":{p}"),
                  st.text("0123456789+- x٨", max_size=7).map(lambda p: ":" + p))
urls = st.one_of(
    st.builds(
        lambda scheme, user, host, port, path: f"{scheme}://{user}{host}{port}{path}",
        st.sampled_from(["http", "https", "HTTP", "ftp", "file", ""]),
        st.sampled_from(["", "user@", "u:p@", "a@b@", "evil.com\\@", "@"]),
        hosts, ports,
        st.sampled_from(["", "/", "/x?y=1", "#frag", "?q", "/../..", "\\x", " /x"]),
    ),
    st.text(max_size=60),
)
answers = st.lists(st.one_of(st.ip_addresses().map(str), st.sampled_from(["fe80::1%eth0", "junk"])),
                   max_size=3)


DEV_LOOPBACK = ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128")


class Resolving:
    """Answers every name with the drawn addresses, after encoding it the way getaddrinfo
    does (which raises UnicodeError on labels it cannot encode); remembers what it answered."""

    def __init__(self, addresses: list[str]) -> None:
        self.addresses = addresses
        self.answered: list[str] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        host.encode("idna")
        self.answered = self.addresses
        return self.addresses


@settings(max_examples=1500, suppress_health_check=[HealthCheck.too_slow])
@given(urls, answers, st.booleans())
@example("http://0177.0.0.1/", ["93.184.215.14"], False)
@example("http://a..b/", ["93.184.215.14"], False)
@example("http://xn--/", ["93.184.215.14"], False)
@example("http://[fe80::1%25eth0]:8080/", [], True)
@example("http://LOCALHOST", ["fe80::1"], True)
@example("http://localhost:7233/", ["127.0.0.1"], True)
async def test_check_url_raises_nothing_but_its_refusal(url: str, addresses: list[str], dev: bool) -> None:
    resolver = Resolving(addresses)
    policy = EgressPolicy.from_list(["127.0.0.0/8", "::1/128", "localhost"] if dev else [],
                                    resolver=resolver, own_ports={8000, 7233})
    try:
        await policy.check_url(url)
    except EgressRefused as refused:
        assert str(refused)
        return
    # What passed is a public or allowlisted literal, a name that did not resolve, or a name
    # whose every answer is public, allowlisted, or an answer for an allowlisted name; and
    # nothing off the public internet on a port of the scheduler's own.
    parsed = httpx.URL(url)
    host, port = parsed.host, parsed.port or (443 if parsed.scheme == "https" else 80)
    allowlisted_name = dev and host.removesuffix(".") == "localhost"
    try:
        reached = [ipaddress.ip_address(host)]
    except ValueError:
        reached = [ipaddress.ip_address(a.split("%", 1)[0]) for a in resolver.answered]
    for ip in reached:
        found = non_public(ip)
        if found is None:
            continue
        assert port not in (8000, 7233)
        assert allowlisted_name or (dev and found.carrier in ("", "IPv4-mapped")
                                    and any(found.judged in net for net in DEV_LOOPBACK))


@given(hosts)
def test_target_host_is_canonical_or_refused(host: str) -> None:
    try:
        canonical = target_host(host)
    except EgressRefused:
        return
    assert canonical == canonical.lower() and canonical.isascii()
    assert target_host(canonical) == canonical
    try:
        ipaddress.ip_address(canonical)
    except ValueError:
        # A name: every label is 1-63 characters and it does not end in a number.
        labels = canonical.removesuffix(".").split(".")
        assert all(1 <= len(label) <= 63 for label in labels) and not labels[-1].isdigit()
        canonical.encode("idna")  # what getaddrinfo does first never fails on it


@given(ipv4_hosts)
def test_ipv4_in_any_form_but_four_decimals_is_refused(host: str) -> None:
    parts = host.split(".")
    canonical = len(parts) == 4 and all(p.isdigit() and str(int(p)) == p for p in parts)
    if canonical:
        assert target_host(host) == host
    else:
        with pytest.raises(EgressRefused):
            target_host(host)
