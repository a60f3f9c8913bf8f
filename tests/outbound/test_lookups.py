"""Host name lookups: a tenant whose targets' name servers never answer holds at most its share
of the lookup threads, so other tenants' runs, webhooks and API checks still resolve, and the
event loop's own threads (row reads and commits) stay free. The name servers are simulated by
the lookup function the threads run (one that blocks for the stuck names); the pool, the
egress guard, the HTTP client and the target server are the real ones."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from activities.jobs import JobActivities
from activities.payloads import JobInput
from outbound import lookups
from outbound.calls import Outbound, OutboundLimits
from outbound.egress import EgressPolicy, guarded_client
from outbound.lookups import Lookups
from scheduling.spec import HttpJob
from tests.outbound.hostile_target import HostileTarget


class NameServers:
    """Answers ``*.ok.test`` with loopback at once; ``*.stuck.test`` blocks until released."""

    def __init__(self) -> None:
        self.released = threading.Event()
        self.stuck_now = 0
        self.stuck_most = 0
        self._lock = threading.Lock()

    def __call__(self, host: str, port: int, **_: Any) -> list[tuple[Any, ...]]:
        if host.endswith(".stuck.test"):
            with self._lock:
                self.stuck_now += 1
                self.stuck_most = max(self.stuck_most, self.stuck_now)
            try:
                self.released.wait(30)
            finally:
                with self._lock:
                    self.stuck_now -= 1
            raise socket.gaierror(f"{host}: the name servers did not answer")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]


@pytest.fixture
def servers() -> Iterator[NameServers]:
    found = NameServers()
    yield found
    found.released.set()


async def _until(condition: Callable[[], bool], timeout: float = 10) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.01)


def _job(url: str, tenant: str, run: int, timeout: float) -> JobInput:
    return JobInput(
        execution_id=f"t:{tenant}:{run}", task_id="t", tenant_id=tenant,
        scheduled_at=datetime.now(UTC),
        job=HttpJob(type="http", url=url, method="GET", timeout_seconds=timeout),
    )


async def test_a_tenant_whose_name_servers_never_answer_holds_up_no_other_tenants_run(
    hostile: HostileTarget, servers: NameServers
) -> None:
    pool = Lookups(lookup=servers)
    egress = EgressPolicy.from_list(["b.ok.test"], resolver=pool.resolve)
    limits = OutboundLimits()  # a tenant may have 50 calls in flight: far more than the threads
    async with guarded_client(egress) as http:
        jobs = JobActivities(http=http, handlers={}, client=None, outbound=Outbound(http, limits))
        envs = [ActivityEnvironment() for _ in range(limits.per_tenant)]
        runs_of_a = [
            asyncio.create_task(env.run(jobs.run_job, _job(
                hostile.url("/ok", f"h{i}.stuck.test"), "a", i, timeout=1)))
            for i, env in enumerate(envs)
        ]
        try:
            await _until(lambda: servers.stuck_now == lookups.PER_TENANT)
            # Every run of a has given up (its deadline is 1 s); its lookups still run.
            await asyncio.wait(runs_of_a, timeout=10)
            assert all(run.done() for run in runs_of_a)
            assert servers.stuck_now == lookups.PER_TENANT
            # A later run of a waits for a's share; b's run finds a thread at once.
            late_a = asyncio.create_task(ActivityEnvironment().run(jobs.run_job, _job(
                hostile.url("/ok", "late.stuck.test"), "a", 99, timeout=30)))
            started = time.monotonic()
            result = await ActivityEnvironment().run(
                jobs.run_job, _job(hostile.url("/ok", "b.ok.test"), "b", 1, timeout=5))
            took = time.monotonic() - started
            assert result.http_status == 200 and took < 3, f"tenant b's run took {took:.1f} s"
            # The loop's own threads, which read and write rows, are free too.
            assert await asyncio.wait_for(asyncio.to_thread(lambda: "row"), 3) == "row"
            assert servers.stuck_most == lookups.PER_TENANT and not late_a.done()
        finally:
            servers.released.set()
            await asyncio.gather(*runs_of_a, return_exceptions=True)
        await _until(lambda: pool.busy("a") == 0)
        with pytest.raises(Exception, match="does not resolve"):
            await late_a


async def test_an_api_check_of_a_url_resolves_within_its_callers_share(
    servers: NameServers,
) -> None:
    pool = Lookups(lookup=servers)
    egress = EgressPolicy(resolver=pool.resolve)
    checks_of_a = [asyncio.create_task(egress.check_url(f"https://h{i}.stuck.test/", tenant="a"))
                   for i in range(3 * lookups.THREADS)]
    try:
        await _until(lambda: servers.stuck_now == lookups.PER_TENANT)
        started = time.monotonic()
        # A public name of b's: resolved (to loopback here) and refused as not public, at once.
        with pytest.raises(Exception, match="not a public address"):
            await egress.check_url("https://x.ok.test/", tenant="b")
        assert time.monotonic() - started < 2
        assert servers.stuck_most == lookups.PER_TENANT
    finally:
        servers.released.set()
    await asyncio.gather(*checks_of_a)  # a name that does not resolve yet passes
    assert pool.busy("a") == 0 and pool.busy("b") == 0


def test_a_lookup_that_outlives_its_event_loop_still_frees_its_tenants_share() -> None:
    # The pool is the process's: a thread that ends after its loop closed freed nothing, and
    # its tenant's share stayed taken for good.
    servers = NameServers()
    pool = Lookups(lookup=servers)

    async def give_up() -> None:
        with lookups.charged_to("z"), pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):
                await pool.resolve("h.stuck.test", 443)

    asyncio.run(give_up())
    assert pool.busy("z") == 1
    servers.released.set()
    deadline = time.monotonic() + 10
    while pool.busy("z") and time.monotonic() < deadline:
        time.sleep(0.01)
    assert pool.busy("z") == 0
