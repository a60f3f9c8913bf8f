"""Fault 6: three workers and two APIs under load; one of them at a time is killed -9 and
started again at random (seeded) moments while tasks are created and runs fire. The
invariants hold for every task and every acknowledged create.

The run lasts FAULTS_CHAOS_SECONDS (90 s by default, to fit CI; a 5-minute run is
FAULTS_CHAOS_SECONDS=300). FAULTS_SEED replays a failing schedule of kills and creates."""

from __future__ import annotations

import asyncio
import os
import random
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session
from sqlmodel import col
from temporalio.testing import WorkflowEnvironment

from store.models import Task
from tests.faults.conftest import Stack, make_stack, wait_healthy
from tests.faults.driver import Api, http_job, interval_task, later, now, once_task
from tests.faults.invariants import audit, plans, settle
from tests.faults.processes import PostgresCluster
from tests.target import TargetServer

CHAOS_SECONDS = float(os.environ.get("FAULTS_CHAOS_SECONDS", "90"))
SEED = int(os.environ.get("FAULTS_SEED", "6"))
WORKERS = ("worker-1", "worker-2", "worker-3")
APIS = ("api-1", "api-2")
RECURRING = 24


@pytest.fixture
async def chaos_stack(tmp_path: Path, dev_env: WorkflowEnvironment,
                      pg_cluster: PostgresCluster) -> AsyncIterator[Stack]:
    built = make_stack(tmp_path, temporal=dev_env.client.service_client.config.target_host,
                       database_url=pg_cluster.url, rate_limit_writes="1000/second",
                       rate_limit_reads="1000/second")
    try:
        yield built
    finally:
        built.fleet.close()
        built.engine.dispose()


async def _chaos(stack: Stack, rng: random.Random, until: float, log: list[str]) -> None:
    """Kill one process at a time (-9) and start it again after a few seconds."""
    fleet = stack.fleet
    while time.monotonic() < until - 10:
        await asyncio.sleep(rng.uniform(5, 12))
        victim = rng.choice(WORKERS + WORKERS + APIS)  # workers twice as often
        down = rng.uniform(1, 6)
        log.append(f"t+{time.monotonic() - (until - CHAOS_SECONDS):.0f}s kill -9 {victim} for {down:.1f}s")
        fleet.kill(victim)
        await asyncio.sleep(down)
        if victim.startswith("api"):
            await fleet.start_api(victim)
        else:
            fleet.start_worker(victim)


async def _create_load(api: Api, target: TargetServer, rng: random.Random, until: float,
                       acked: dict[str, str]) -> None:
    """About one create a second, alternating replicas; each retried with its own
    Idempotency-Key until acknowledged."""
    n = 0
    while time.monotonic() < until - 20:
        n += 1
        name = f"once-{n}"
        key = str(uuid.UUID(int=rng.getrandbits(128)))
        job = http_job(target.url(f"/once/{n}" if n % 4 else "/slow/2"))
        body = once_task(name, job, later(rng.uniform(2, 15)))
        body["missed_run_policy"] = "catchup"  # a late one-time run still runs
        acked[name] = (await api.create(body, key=key, within=60))["task_id"]
        await asyncio.sleep(rng.uniform(0.3, 1.2))


@pytest.mark.timeout(CHAOS_SECONDS + 240)
async def test_workers_and_apis_killed_at_random_under_load(
    chaos_stack: Stack, target: TargetServer
) -> None:
    stack, fleet = chaos_stack, chaos_stack.fleet
    rng = random.Random(SEED)
    for name in WORKERS:
        fleet.start_worker(name)
    bases = [await fleet.start_api(name) for name in APIS]
    api = Api(bases, stack.key)
    kills: list[str] = []
    acked: dict[str, str] = {}
    try:
        await wait_healthy(bases[0])
        start = time.monotonic()
        until = start + CHAOS_SECONDS
        ends = later(CHAOS_SECONDS)
        recurring = {}
        for i in range(RECURRING):
            slow = i % 6 == 0  # some runs last long enough to be cut by a kill
            path = "/slow/3" if slow else f"/every/{i}"
            body = interval_task(f"every-{i}", http_job(target.url(path)), 6 if slow else 4,
                                 until=ends, missed_run_policy=("skip", "single_catchup", "catchup")[i % 3])
            recurring[body["task_name"]] = (await api.create(body, key=f"recurring-{SEED}-{i}"))["task_id"]
        await asyncio.gather(
            _chaos(stack, random.Random(rng.random()), until, kills),
            _create_load(api, target, random.Random(rng.random()), until, acked),
        )
        print(f"seed {SEED}, {CHAOS_SECONDS:.0f}s: " + "; ".join(kills))
        for name in WORKERS + APIS:
            assert fleet.alive(name), f"{name} died on its own"
        ids = list(recurring.values()) + list(acked.values())
        remaining = max(0.0, (ends - now()).total_seconds())
        await settle(stack.engine, ids, timeout=remaining + 90)
    finally:
        await api.close()

    report = audit(stack.engine, target.received, ids, planned=plans(stack.engine, ids))
    print(report.render())
    report.assert_holds()
    assert len(kills) >= CHAOS_SECONDS // 20
    # Every acknowledged create is one task, whichever replica answered and however often the
    # client had to retry; and every one-time task ran once.
    with Session(stack.engine) as session:
        per_name = Counter(session.scalars(select(col(Task.name)).where(col(Task.tenant_id) == "faults")))
    assert {n: c for n, c in per_name.items() if c > 1} == {}
    assert set(per_name) == set(acked) | set(recurring)
    for name, task_id in acked.items():
        runs = report.of_task(task_id)
        assert [r.status for r in runs] == ["COMPLETED"], (name, [(r.status, r.reason, r.error) for r in runs])
    for name, task_id in recurring.items():
        assert report.task_rows[task_id].status == "COMPLETED", name
        if report.task_rows[task_id].spec["missed_run_policy"] == "catchup":
            missed = [r.id for r in report.of_task(task_id) if r.reason == "missed"]
            assert not missed, f"{name} (missed_run_policy=catchup) skipped {missed}"
    assert report.executed > RECURRING * CHAOS_SECONDS / 8
