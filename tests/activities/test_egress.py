"""The SSRF guard: at task creation and at every connect, redirects and rebinding included."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.contracts import JobInput
from activities.egress import EgressPolicy, EgressRefused, guarded_client, static_resolver
from activities.jobs import JobActivities
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
