"""The SSRF guard: at task creation and at every connect, redirects and rebinding included."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.jobs import JobActivities
from activities.payloads import JobInput
from outbound.egress import EgressPolicy, EgressRefused, guarded_client, static_resolver
from scheduling.spec import HttpJob
from tests.target import TargetServer

HOSTS = {
    "allowed.test": ["127.0.0.1"],
    "loopback.test": ["127.0.0.1"],
    "private.test": ["10.0.0.1"],
    "metadata.test": ["169.254.169.254"],
    "public.test": ["93.184.215.14"],
}


@pytest.mark.parametrize("address", ["127.0.0.1", "10.0.0.1", "172.16.5.4", "192.168.1.1",
                                     "169.254.169.254", "100.64.0.1", "0.0.0.0", "224.0.0.1",
                                     "::1", "fe80::1", "fc00::1", "::ffff:127.0.0.1", "240.0.0.1"])
def test_non_public_addresses_refused(address: str) -> None:
    with pytest.raises(EgressRefused):
        EgressPolicy().check_address("h", address)


def test_public_and_allowlisted_addresses_pass() -> None:
    EgressPolicy().check_address("h", "93.184.215.14")
    EgressPolicy().check_address("h", "2606:2800:220:1::1")
    policy = EgressPolicy.from_list(["10.1.0.0/16", "Internal.Example"])
    policy.check_address("x", "10.1.2.3")
    policy.check_address("internal.example", "10.9.9.9")
    with pytest.raises(EgressRefused):
        policy.check_address("x", "10.2.0.1")


@pytest.mark.parametrize("entry", ["10.0.0.0/33", "10.0.0.300", "10.0.0.0/8/8", "0x0a.0.0.1",
                                   "billing internal", "*.internal"])
def test_a_mistyped_allow_entry_fails_the_start(entry: str) -> None:
    # Read as a host name, "10.0.0.0/33" would have allowed nothing, without a word.
    with pytest.raises(ValueError, match="SCHEDULER_EGRESS_ALLOW") as raised:
        EgressPolicy.from_list(["127.0.0.1", entry])
    assert repr(entry) in str(raised.value)


@pytest.mark.parametrize("url", ["http://loopback.test/x", "http://private.test/", "http://metadata.test/latest/meta-data",
                                 "http://127.0.0.1:8080/", "http://[::1]/", "http://169.254.169.254/"])
async def test_create_time_check_refuses(url: str) -> None:
    with pytest.raises(EgressRefused):
        await EgressPolicy(resolver=static_resolver(HOSTS)).check_url(url)


async def test_create_time_check_passes_public_and_unresolvable() -> None:
    policy = EgressPolicy(resolver=static_resolver(HOSTS))
    await policy.check_url("https://public.test/hook")
    await policy.check_url("https://not-yet-in-dns.test/hook")


async def _run(policy: EgressPolicy, url: str) -> None:
    async with guarded_client(policy) as http:
        jobs = JobActivities(http=http, handlers={}, client=None)
        await ActivityEnvironment().run(jobs.run_job, JobInput(
            execution_id="t:1", task_id="t", tenant_id="x", scheduled_at=datetime.now(UTC),
            job=HttpJob(type="http", url=url, method="GET"),
        ))


@pytest.fixture
def local_names(target: TargetServer) -> Iterator[EgressPolicy]:
    yield EgressPolicy.from_list(["allowed.test"], resolver=static_resolver(HOSTS))


async def test_allowlisted_local_target_is_reached(target: TargetServer, local_names: EgressPolicy) -> None:
    await _run(local_names, f"http://allowed.test:{target.port}/ok")
    assert [r.path for r in target.received] == ["/ok"]


@pytest.mark.parametrize("name", ["loopback.test", "private.test", "metadata.test"])
async def test_connect_time_check_refuses_without_sending(target: TargetServer, local_names: EgressPolicy, name: str) -> None:
    with pytest.raises(ApplicationError) as failure:
        await _run(local_names, f"http://{name}:{target.port}/secret")
    assert failure.value.type == "EgressRefused" and failure.value.non_retryable
    assert target.received == []


@pytest.mark.parametrize("destination", ["http://127.0.0.1:{port}/internal", "http://10.0.0.1/",
                                         "http://169.254.169.254/latest/meta-data/", "http://metadata.test/"])
async def test_every_redirect_is_checked(target: TargetServer, local_names: EgressPolicy, destination: str) -> None:
    to = destination.format(port=target.port)
    with pytest.raises(ApplicationError) as failure:
        await _run(local_names, f"http://allowed.test:{target.port}/redirect?to={to}")
    assert failure.value.type == "EgressRefused"
    assert [r.path for r in target.received] == ["/redirect"]  # the hop itself was never made


async def test_dns_rebinding_is_caught_at_connect(target: TargetServer) -> None:
    answers = iter([["93.184.215.14"], ["127.0.0.1"]])

    async def rebinding(host: str, port: int) -> list[str]:
        return next(answers)

    policy = EgressPolicy(resolver=rebinding)
    url = f"http://rebind.test:{target.port}/x"
    await policy.check_url(url)  # at creation the name looked public
    with pytest.raises(ApplicationError) as failure:
        await _run(policy, url)
    assert failure.value.type == "EgressRefused"
    assert target.received == []


# ------------------------------------------------------------- host forms and own ports

@pytest.mark.parametrize("url", [
    "http://0177.0.0.1/", "http://0x7f.0.0.1/", "http://0x7f000001/", "http://2130706433/",
    "http://127.1/", "http://127.0.1/", "http://017700000001/", "http://1.2.3.4.5/",
    "http://08.8.8.8/", "http://8.8.8.010/",
])
async def test_numeric_hosts_in_other_forms_are_refused_before_resolving(url: str) -> None:
    asked: list[str] = []

    async def resolver(host: str, port: int) -> list[str]:
        asked.append(host)
        return ["93.184.215.14"]

    with pytest.raises(EgressRefused):
        await EgressPolicy(resolver=resolver).check_url(url)
    assert asked == []  # refused on its form, not on what a resolver made of it


@pytest.mark.parametrize(("url", "why"), [
    ("http://a..b/", "not a valid host name"),
    ("http://xn--/", "not a valid"),
    ("http://xn--zz-/", "not a valid"),
    ("http://-a.example/", "not a valid host name"),
    ("http://" + "a" * 64 + ".example/", "not a valid host name"),
    ("http://" + ".".join(["a" * 60] * 5) + "/", "not a valid host name"),
    ("http://exa%41mple.com/", "not a valid host name"),
    ("http://[fe80::1%25eth0]/", "zone id"),
    ("http://[::1/", "not a valid URL"),
    ("http://a:99999/", "(?i)port"),
    ("http://a:0/", "not a TCP port"),
    ("http://a:+80/", "not a valid URL"),
    ("http://ＥＸＡＭＰＬＥ.com/", "not a valid URL"),
    ("ftp://example.com/", "http"),
])
async def test_malformed_urls_are_refused_with_a_reason(url: str, why: str) -> None:
    with pytest.raises(EgressRefused, match=why):
        await EgressPolicy(resolver=static_resolver(HOSTS)).check_url(url)


async def test_usual_urls_pass() -> None:
    policy = EgressPolicy(resolver=static_resolver({**HOSTS, "xn--bcher-kva.example": ["93.184.215.14"]}))
    for url in ("https://public.test/hook", "https://PUBLIC.test:8443/a?b=c", "http://public.test./",
                "https://bücher.example/", "http://user:pw@public.test/", "http://[2606:2800:220:1::1]:8080/",
                "http://93.184.215.14/", "http://a_b.public.test/"):
        await policy.check_url(url)


OWN = frozenset({8000, 7233, 8233, 9464, 9465})


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000/task/create", "http://localhost:7233/",
                                 "http://[::1]:8233/", "http://127.0.0.1:9464/metrics",
                                 "http://loopback.test:9465/metrics", "http://[::ffff:127.0.0.1]:8000/"])
async def test_own_ports_are_refused_even_where_loopback_is_allowed(url: str) -> None:
    dev = EgressPolicy.from_list(["127.0.0.0/8", "::1/128", "localhost", "loopback.test"],
                                 resolver=static_resolver({**HOSTS, "localhost": ["127.0.0.1"]}),
                                 own_ports=OWN)
    with pytest.raises(EgressRefused, match="scheduler's own"):
        await dev.check_url(url)
    await dev.check_url("http://127.0.0.1:8001/")  # loopback itself stays allowed


def test_own_ports_on_public_addresses_are_just_ports() -> None:
    EgressPolicy(own_ports=OWN).check_address("h", "93.184.215.14", 8000)


async def test_own_port_is_refused_at_connect_without_sending(target: TargetServer) -> None:
    # The target stands for the API: loopback is allowlisted, its port is the scheduler's own.
    dev = EgressPolicy.from_list(["127.0.0.1", "allowed.test"], resolver=static_resolver(HOSTS),
                                 own_ports={target.port})
    for url in (f"http://allowed.test:{target.port}/task/create", target.url("/task/create")):
        with pytest.raises(ApplicationError) as failure:
            await _run(dev, url)
        assert failure.value.type == "EgressRefused" and "own" in str(failure.value)
    assert target.received == []


async def test_redirect_to_an_own_port_is_refused(target: TargetServer) -> None:
    dev = EgressPolicy.from_list(["127.0.0.1", "allowed.test"], resolver=static_resolver(HOSTS),
                                 own_ports={8000})
    with pytest.raises(ApplicationError) as failure:
        await _run(dev, f"http://allowed.test:{target.port}/redirect?to=http://127.0.0.1:8000/x")
    assert failure.value.type == "EgressRefused"
    assert [r.path for r in target.received] == ["/redirect"]


async def test_malformed_host_at_connect_is_refused_not_resolved(target: TargetServer) -> None:
    # A redirect's Location is parsed by the client, not by the create-time check.
    with pytest.raises(ApplicationError) as failure:
        await _run(EgressPolicy.from_list(["allowed.test"], resolver=static_resolver(HOSTS)),
                   f"http://allowed.test:{target.port}/redirect?to=http://a..b/")
    assert failure.value.type == "EgressRefused"


async def test_a_host_whose_first_address_is_down_is_reached_at_the_next(target: TargetServer) -> None:
    # Nothing listens on 127.0.0.3: its refusal sends the call to the host's other address.
    policy = EgressPolicy.from_list(
        ["127.0.0.0/8"], resolver=static_resolver({"two.test": ["127.0.0.3", "127.0.0.1"]}))
    await _run(policy, f"http://two.test:{target.port}/x")  # raises unless answered 2xx
    assert [r.path for r in target.received] == ["/x"]
