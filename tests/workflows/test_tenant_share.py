"""One tenant's long runs cannot take every slot of a jobs worker (real dev server): a run of
another tenant starts while they hold theirs, and the runs refused for the share run later,
each once, on its first attempt."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine
from temporalio.testing import WorkflowEnvironment

from activities.handlers import HandlerContext
from activities.share import SlotShare
from scheduling.status import workflow_id
from store.tasks import list_executions
from tests.conftest import new_worker
from tests.workflows.helpers import spec
from workflows.starter import start_task_workflow


class Hold:
    """A handler that runs until released; counts its calls by task."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.calls: Counter[str] = Counter()

    async def __call__(self, ctx: HandlerContext) -> None:
        self.calls[ctx.task_id] += 1
        await self.release.wait()


async def create(env: WorkflowEnvironment, queue: str, tenant: str, job: str,
                 **fields: object) -> str:
    """A once task of ``tenant`` whose job is the handler ``job``."""
    task_id = uuid.uuid4().hex
    await start_task_workflow(
        env.client, task_queue=queue, task_id=task_id, tenant_id=tenant,
        spec=spec(task_name=job, schedule_type="once", job_details={"type": "handler", "name": job},
                  **fields),
        created_at=datetime.now(UTC))
    return task_id


def test_a_tenant_alone_has_half_the_slots_and_a_newcomer_always_one() -> None:
    share = SlotShare(8)
    assert [share.take("a") for _ in range(5)] == [True, True, True, True, False]
    assert share.take("b")  # a newcomer gets a slot although "a" is at its share
    assert share.share() == 2  # 8 // (2 tenants + 1)
    assert [share.take("b"), share.take("b"), share.take("a")] == [True, False, False]
    assert share.take("a", refusable=False)  # a retry is never refused
    assert (share.held("a"), share.held("b")) == (5, 2)
    for _ in range(5):
        share.give_back("a")
    assert share.held("a") == 0 and share.share() == 4
    assert SlotShare(1).take("a") and SlotShare(0).take("a")


async def test_a_busy_tenant_leaves_room_for_another(dev_env: WorkflowEnvironment,
                                                      sqlite_engine: Engine) -> None:
    queue = f"share-{uuid.uuid4()}"
    now = datetime.now(UTC)
    hold = Hold()
    busy = [await create(dev_env, queue, "busy", "hold", run_at=now, missed_run_policy="catchup")
            for _ in range(4)]
    quiet = await create(dev_env, queue, "quiet", "noop", run_at=now + timedelta(seconds=2))

    def final(task_id: str) -> list[str]:
        rows, _ = list_executions(sqlite_engine, task_id=task_id, limit=10)
        return [row.status for row in rows if row.status != "RUNNING"]

    async def until(check: object, what: str) -> None:
        deadline = asyncio.get_running_loop().time() + 45
        while not check():  # type: ignore[operator]
            assert asyncio.get_running_loop().time() < deadline, what
            await asyncio.sleep(0.2)

    # Four slots: the busy tenant alone may hold two; the other two of its runs are refused
    # and sent again, and the quiet tenant's run finds a slot.
    async with new_worker(dev_env.client, sqlite_engine, task_queue=queue,
                          handlers={"hold": hold}, max_concurrent_activities=4):
        await until(lambda: final(quiet) == ["COMPLETED"], "the quiet tenant's run never ran")
        assert sum(hold.calls.values()) == 2, hold.calls  # the busy tenant's share, no more
        hold.release.set()
        await until(lambda: all(final(task_id) for task_id in busy), "the busy runs never ended")
    for task_id in busy:
        rows, _ = list_executions(sqlite_engine, task_id=task_id, limit=10)
        assert [(row.status, row.attempts) for row in rows] == [("COMPLETED", 1)], rows
    assert hold.calls == Counter(busy), hold.calls


async def test_a_run_refused_until_past_its_instant_goes_to_the_missed_run_policy(
        dev_env: WorkflowEnvironment, sqlite_engine: Engine) -> None:
    queue = f"share-{uuid.uuid4()}"
    now = datetime.now(UTC)
    hold = Hold()
    holder = await create(dev_env, queue, "busy", "hold", run_at=now)
    # Two slots: the tenant alone may hold one, so these are refused while the holder runs.
    skipped = await create(dev_env, queue, "busy", "hold", run_at=now + timedelta(seconds=1),
                           missed_run_policy="skip")
    cancelled = await create(dev_env, queue, "busy", "hold", run_at=now + timedelta(seconds=1))

    def rows(task_id: str) -> list[tuple[str, str | None]]:
        found, _ = list_executions(sqlite_engine, task_id=task_id, limit=10)
        return [(row.status, row.reason) for row in found]

    async with new_worker(dev_env.client, sqlite_engine, task_queue=queue,
                          handlers={"hold": hold}, max_concurrent_activities=2):
        deadline = asyncio.get_running_loop().time() + 45
        while hold.calls[holder] == 0:
            assert asyncio.get_running_loop().time() < deadline, "the holder never started"
            await asyncio.sleep(0.2)
        await asyncio.sleep(2)
        await dev_env.client.get_workflow_handle(workflow_id(cancelled)).signal("cancel", "not now")
        while not (rows(skipped) and rows(cancelled)):
            assert asyncio.get_running_loop().time() < deadline, (rows(skipped), rows(cancelled))
            await asyncio.sleep(0.2)
        hold.release.set()
        while rows(holder) != [("COMPLETED", None)]:
            assert asyncio.get_running_loop().time() < deadline, rows(holder)
            await asyncio.sleep(0.2)
    assert rows(skipped) == [("SKIPPED", "missed")]
    assert rows(cancelled) == [("SKIPPED", "cancelled")]
    assert hold.calls == Counter([holder])
