"""One tenant's webhook deliveries that hang do not hold back another tenant's: the server hands
the workflows worker's delivery backlog out round-robin by tenant (config/temporal.py,
tenant_fairness), so another tenant's alert takes the next free slot."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine
from temporalio.testing import WorkflowEnvironment

from activities.handlers import HandlerContext
from tests.conftest import new_worker
from tests.target import TargetServer
from tests.workflows.helpers import handler_job, spec
from workflows.starter import start_task_workflow

NOISY_TASKS = 24
SLOTS = 4  # few, so that the noisy tenant's first deliveries fill them all


async def _fail(ctx: HandlerContext) -> None:
    raise RuntimeError("fails, so that its task's webhook hears 'failed'")


async def _failing_task(env: WorkflowEnvironment, queue: str, tenant: str, run_at: datetime,
                        url: str) -> None:
    await start_task_workflow(
        env.client, task_queue=queue, task_id=uuid.uuid4().hex, tenant_id=tenant,
        spec=spec(task_name=f"{tenant}-task", schedule_type="once", run_at=run_at,
                  job_details=handler_job("fail"), retry_policy={"max_attempts": 1},
                  notify={"url": url, "events": ["failed"]}),
        created_at=datetime.now(UTC))


async def test_a_tenants_hanging_webhooks_do_not_hold_back_another_tenants_alert(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine, target: TargetServer
) -> None:
    queue = f"notify-{uuid.uuid4()}"
    now = datetime.now(UTC)
    for _ in range(NOISY_TASKS):  # their webhook never answers: each delivery holds its slot 10 s
        await _failing_task(dev_env, queue, "noisy", now + timedelta(seconds=2), target.url("/hang"))
    # Fails once the noisy tenant's deliveries hold every slot and more wait behind them.
    await _failing_task(dev_env, queue, "quiet", now + timedelta(seconds=5), target.url("/quiet"))
    async with new_worker(dev_env.client, sqlite_engine, task_queue=queue, handlers={"fail": _fail},
                          notify_slots=SLOTS):
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while not any(r.path == "/quiet" for r in target.received):
            assert loop.time() < deadline, "the quiet tenant's alert never came"
            await asyncio.sleep(0.2)
    arrived = [r.path for r in target.received]
    before = arrived[:arrived.index("/quiet")]
    # In queue order it would wait for every noisy delivery (NOISY_TASKS, SLOTS at a time, 10 s
    # each); handed out by tenant it takes the first slot freed, one round of SLOTS later.
    assert before.count("/hang") <= 2 * SLOTS, before
