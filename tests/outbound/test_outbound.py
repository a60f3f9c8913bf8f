"""Outbound calls are bounded: no answer, redirect or webhook reply is read past the cap, the
timeout is a deadline for the whole call, and one tenant's hanging targets hold up none of
another tenant's runs (and what waits shows in the worker's /metrics). Real local servers."""

from __future__ import annotations

import asyncio
import re
import resource
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime

import httpx
import pytest
from pydantic import ValidationError
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

import activities.notify
from activities.jobs import JobActivities
from activities.notify import NotifyActivities
from activities.payloads import JobInput, JobResult, Notification
from config.settings import Settings
from config.telemetry import make_runtime
from outbound.calls import DeadlineExceeded, Outbound, OutboundLimits
from outbound.egress import EgressPolicy, guarded_client, static_resolver
from scheduling.spec import HttpJob
from tests.outbound.hostile_target import HostileTarget
from tests.target import TargetServer
from worker.build import http_waiting_gauge

BIG = 500 * 1024 * 1024
# What loopback socket buffers and a few chunks hold: far less than any of those bodies.
SENT_AT_MOST = 32 * 1024 * 1024
LOOPBACK = EgressPolicy.from_list(["127.0.0.1"])
NAMES = EgressPolicy.from_list(
    ["hang.test", "ok.test"],
    resolver=static_resolver({"hang.test": ["127.0.0.1"], "ok.test": ["127.0.0.1"]}),
)


def _job(url: str, *, tenant: str = "a", timeout: float = 10.0, run: str = "1") -> JobInput:
    return JobInput(
        execution_id=f"t:{tenant}:{run}", task_id="t", tenant_id=tenant,
        scheduled_at=datetime.now(UTC),
        job=HttpJob(type="http", url=url, method="GET", timeout_seconds=timeout),
    )


def _note(url: str) -> Notification:
    return Notification(url=url, event="failed", task_id="t", tenant_id="a", task_name="n",
                        at=datetime.now(UTC))


async def _run(jobs: JobActivities, job: JobInput) -> JobResult:
    return await ActivityEnvironment().run(jobs.run_job, job)


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def _until(condition: Callable[[], bool], timeout: float = 20) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.02)


# ----------------------------------------------------------------- body cap

@pytest.mark.parametrize("path", ["/big/{n}", "/big-redirect/{n}"], ids=["answer", "redirect"])
async def test_a_huge_answer_or_redirect_is_read_no_further_than_the_cap(
    hostile: HostileTarget, path: str
) -> None:
    before = _peak_rss_mib()
    async with guarded_client(LOOPBACK) as http:
        jobs = JobActivities(http=http, handlers={}, client=None)
        result = await _run(jobs, _job(hostile.url(path.format(n=BIG))))
    assert result.http_status == 200 and len((result.response_snippet or "").encode()) <= 1024
    assert hostile.paths[-1] == ("/ok" if "redirect" in path else path.format(n=BIG))
    assert hostile.sent < SENT_AT_MOST, f"the worker took {hostile.sent / 2**20:.0f} MiB"
    assert _peak_rss_mib() - before < 100


async def test_a_webhook_reply_is_read_no_further_than_the_cap(hostile: HostileTarget) -> None:
    async with guarded_client(LOOPBACK) as http:
        status = await ActivityEnvironment().run(
            NotifyActivities(http).notify, _note(hostile.url(f"/big/{BIG}"))
        )
    assert status == 200
    assert hostile.sent < SENT_AT_MOST, f"the worker took {hostile.sent / 2**20:.0f} MiB"


async def test_a_compressed_answer_is_kept_decoded_within_the_cap(hostile: HostileTarget) -> None:
    async with guarded_client(LOOPBACK) as http:
        jobs = JobActivities(http=http, handlers={}, client=None)
        result = await _run(jobs, _job(hostile.url(f"/gzip/{10 * 2**20}")))
    assert result.response_snippet == "ab" * 512


async def test_a_redirect_loop_still_fails_after_the_allowed_hops(hostile: HostileTarget) -> None:
    async with guarded_client(LOOPBACK) as http:
        jobs = JobActivities(http=http, handlers={}, client=None)
        with pytest.raises(ApplicationError) as failure:
            await _run(jobs, _job(hostile.url("/loop")))
    assert failure.value.type == "HttpConnectionError" and "TooManyRedirects" in failure.value.message
    assert hostile.paths == ["/loop"] * 6  # the first request and five redirects


# ----------------------------------------------------------------- deadline

@pytest.mark.parametrize("path", ["/trickle/10", "/slow-redirect/5"], ids=["trickle", "redirects"])
async def test_the_timeout_is_a_deadline_for_the_whole_call(hostile: HostileTarget, path: str) -> None:
    async with guarded_client(LOOPBACK) as http:
        jobs = JobActivities(http=http, handlers={}, client=None)
        started = time.monotonic()
        with pytest.raises(ApplicationError) as failure:
            await _run(jobs, _job(hostile.url(path), timeout=2))
        took = time.monotonic() - started
    # The same failure as a timeout of the client's own: retried, and named so.
    assert failure.value.type == "HttpTimeout" and not failure.value.non_retryable
    assert "timed out after 2" in failure.value.message
    assert took < 2 + 1.5, f"the 2 s job ran {took:.1f} s"


async def test_a_webhook_call_has_a_deadline_too(
    hostile: HostileTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(activities.notify, "DEADLINE_SECONDS", 1.0)
    async with guarded_client(LOOPBACK) as http:
        started = time.monotonic()
        with pytest.raises(ApplicationError) as failure:
            await ActivityEnvironment().run(NotifyActivities(http).notify, _note(hostile.url("/trickle/6")))
        took = time.monotonic() - started
    assert "webhook unreachable" in failure.value.message and not failure.value.non_retryable
    assert took < 1 + 1.5


# ----------------------------------------------------------------- slots per tenant and host

def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _waiting(metrics: str, reason: str) -> int | None:
    found = re.search(rf'^scheduler_http_calls_waiting{{[^}}]*reason="{reason}"[^}}]*}} (\d+)',
                      metrics, flags=re.MULTILINE)
    return int(found.group(1)) if found else None


async def test_a_tenant_whose_target_hangs_holds_up_no_other_tenants_run(hostile: HostileTarget) -> None:
    limits = OutboundLimits()  # the settings' defaults
    hanging = 4 * limits.per_tenant  # as many as the whole pool of the shared client once was
    port = _free_port()
    runtime = make_runtime(f"127.0.0.1:{port}")  # the worker's own metrics endpoint
    async with guarded_client(NAMES) as http:
        outbound = Outbound(http, limits, http_waiting_gauge(runtime.metric_meter))
        jobs = JobActivities(http=http, handlers={}, client=None, outbound=outbound)
        envs = [ActivityEnvironment() for _ in range(hanging)]
        runs_of_a = [
            asyncio.create_task(env.run(jobs.run_job, _job(
                hostile.url("/hang", "hang.test"), tenant="a", timeout=120, run=str(i))))
            for i, env in enumerate(envs)
        ]
        try:
            await _until(lambda: outbound.waiting == {
                "tenant": hanging - limits.per_tenant, "host": limits.per_tenant - limits.per_host})
            async with httpx.AsyncClient() as scraper:
                metrics = (await scraper.get(f"http://127.0.0.1:{port}/metrics")).text
            assert _waiting(metrics, "tenant") == hanging - limits.per_tenant
            assert _waiting(metrics, "host") == limits.per_tenant - limits.per_host

            started = time.monotonic()
            result = await _run(jobs, _job(hostile.url("/ok", "ok.test"), tenant="b", timeout=3))
            took = time.monotonic() - started
            assert result.http_status == 200 and took < 3, f"tenant b's run took {took:.1f} s"
            assert hostile.paths.count("/hang") == limits.per_host
        finally:
            for env in envs:
                env.cancel()
            await asyncio.gather(*runs_of_a, return_exceptions=True)
    assert outbound.waiting == {"tenant": 0, "host": 0}


async def test_a_hanging_host_holds_up_only_the_calls_to_it(hostile: HostileTarget) -> None:
    limits = OutboundLimits(per_tenant=10, per_host=3)
    async with guarded_client(NAMES) as http:
        outbound = Outbound(http, limits)
        jobs = JobActivities(http=http, handlers={}, client=None, outbound=outbound)
        envs = [ActivityEnvironment() for _ in range(5)]
        stuck = [asyncio.create_task(env.run(jobs.run_job, _job(
            hostile.url("/hang", "hang.test"), timeout=120, run=str(i)))) for i, env in enumerate(envs)]
        try:
            await _until(lambda: outbound.waiting["host"] == 2)
            result = await _run(jobs, _job(hostile.url("/ok", "ok.test"), timeout=3, run="ok"))
            assert result.http_status == 200
            assert hostile.paths.count("/hang") == 3
        finally:
            for env in envs:
                env.cancel()
            await asyncio.gather(*stuck, return_exceptions=True)


async def test_a_webhook_gives_up_waiting_for_a_slot_of_its_tenant(
    hostile: HostileTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(activities.notify, "WAIT_FOR_SLOT_SECONDS", 0.5)
    async with guarded_client(LOOPBACK) as http:
        outbound = Outbound(http, OutboundLimits(per_tenant=1))
        jobs = JobActivities(http=http, handlers={}, client=None, outbound=outbound)
        env = ActivityEnvironment()
        holder = asyncio.create_task(env.run(jobs.run_job, _job(hostile.url("/hang"), timeout=120)))
        try:
            await _until(lambda: "/hang" in hostile.paths)
            with pytest.raises(ApplicationError) as failure:
                await ActivityEnvironment().run(NotifyActivities(http, outbound).notify,
                                                _note(hostile.url("/ok")))
            assert "webhook unreachable: NoSlot" in failure.value.message
        finally:
            env.cancel()
            await asyncio.gather(holder, return_exceptions=True)


async def test_a_cookie_one_target_sets_goes_out_with_no_other_call(hostile: HostileTarget) -> None:
    async with guarded_client(LOOPBACK) as http:
        jobs = JobActivities(http=http, handlers={}, client=None)
        await _run(jobs, _job(hostile.url("/cookie"), tenant="a"))
        await _run(jobs, _job(hostile.url("/ok"), tenant="b"))
    assert hostile.paths == ["/cookie", "/ok"] and hostile.cookies == []


def test_the_pool_must_outlast_what_one_tenant_may_hold() -> None:
    assert Settings().http_max_connections > Settings().http_max_calls_per_tenant
    with pytest.raises(ValidationError, match="SCHEDULER_HTTP_MAX_CONNECTIONS"):
        Settings(http_max_connections=50, http_max_calls_per_tenant=50)


# ----------------------------------------------------------------- headers

@pytest.mark.parametrize("name", ["content-type", "CONTENT-TYPE", "Content-Type"])
async def test_a_jobs_own_content_type_in_any_case_is_the_only_one_sent(
    target: TargetServer, name: str
) -> None:
    job = HttpJob(type="http", url=target.url(), headers={name: "application/vnd.api+json"},
                  body={"a": 1})
    async with guarded_client(LOOPBACK) as http:
        jobs = JobActivities(http=http, handlers={}, client=None)
        result = await _run(jobs, JobInput(execution_id="t:1", task_id="t", tenant_id="a",
                                           scheduled_at=datetime.now(UTC), job=job))
    assert result.http_status == 200
    [request] = target.received
    assert request.headers["Content-Type"] == "application/vnd.api+json"


async def test_a_slow_signing_key_read_counts_against_the_calls_deadline(target: TargetServer) -> None:
    # A delivery's attempt has a fixed time (activities/notify.py): its signature's read must
    # not let the send start after it.
    async def slow_signature() -> dict[str, str]:
        await asyncio.sleep(30)
        return {"webhook-signature": "v1,never"}

    async with guarded_client(LOOPBACK) as http:
        outbound = Outbound(http, OutboundLimits())
        with pytest.raises(DeadlineExceeded):
            await asyncio.wait_for(outbound.call("POST", target.url(), tenant="a", timeout=0.5,
                                                 content=b"{}", sign=slow_signature), timeout=10)
    assert target.received == []
