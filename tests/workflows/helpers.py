"""Starting task workflows directly (no API) for workflow-semantics tests, and what those tests
need around them: test handlers, a worker that can be stopped, and time passing while it is."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, text
from sqlmodel import SQLModel
from temporalio.api.enums.v1 import EventType
from temporalio.api.testservice.v1 import LockTimeSkippingRequest, UnlockTimeSkippingRequest
from temporalio.client import WorkflowHandle
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.handlers import HandlerContext
from activities.options import RELEASE
from activities.payloads import RUN_JOB, JobInput
from scheduling.fire import first_fire
from scheduling.spec import TaskSpec
from scheduling.status import TaskStatus, workflow_id
from store.models import TaskExecution
from store.tasks import list_executions, read_task
from tests.conftest import new_worker
from workflows import attributes
from workflows.state import TaskState, TaskWorkflowInput
from workflows.task import TaskWorkflow

TaskHandle = WorkflowHandle[TaskWorkflow, TaskState]


def spec(**fields: Any) -> TaskSpec:
    """A task spec with a noop handler job unless told otherwise."""
    fields.setdefault("task_name", "test-task")
    fields.setdefault("job_details", {"type": "handler", "name": "noop"})
    return TaskSpec.model_validate(fields)


async def far_daily_cron(env: WorkflowEnvironment) -> str:
    """A daily UTC cron due about twelve hours from the server's clock: none of its fires falls
    in the minutes a test sleeps, whatever time of day the test runs at."""
    now = await env.get_current_time()
    return f"0 {(now.astimezone(UTC).hour + 12) % 24} * * *"


def handler_job(name: str, **args: Any) -> dict[str, Any]:
    """The job_details of a handler job."""
    return {"type": "handler", "name": name, "args": args}


async def start_task(
    env: WorkflowEnvironment,
    task_queue: str,
    task_spec: TaskSpec,
    *,
    task_id: str | None = None,
    crowd: int = 0,
    release: int = RELEASE,
) -> TaskHandle:
    """Start a task workflow the way the API does (``crowd``: the herd its create counted;
    ``release``: its starter's, 0 for an API from before start inputs carried one)."""
    task_id = task_id or uuid.uuid4().hex
    now = await env.get_current_time()
    return await env.client.start_workflow(
        TaskWorkflow.run,
        TaskWorkflowInput(
            task_id=task_id,
            tenant_id="t1",
            spec=task_spec,
            created_at=now,
            crowd=crowd,
            release=release,
        ),
        id=workflow_id(task_id),
        task_queue=task_queue,
        search_attributes=attributes.initial(
            task_id=task_id,
            tenant_id="t1",
            name=task_spec.task_name,
            schedule_type=task_spec.schedule_type.value,
            next_run_at=first_fire(task_spec, now),
        ),
    )


@asynccontextmanager
async def running_task(
    env: WorkflowEnvironment, task_queue: str, task_spec: TaskSpec, **options: Any
) -> AsyncIterator[TaskHandle]:
    """A started task whose workflow is terminated when the test leaves it running (on a
    shared server, a leftover workflow would go on firing into later tests)."""
    handle = await start_task(env, task_queue, task_spec, **options)
    try:
        yield handle
    finally:
        try:
            await handle.terminate("test over")
        except RPCError:
            pass  # it had already ended


async def sent_jobs(env: WorkflowEnvironment, task_id: str) -> list[tuple[JobInput, datetime]]:
    """Each run_job the task's workflow scheduled, with when its server recorded it."""
    handle = env.client.get_workflow_handle(workflow_id(task_id))
    sent = []
    async for event in handle.fetch_history_events():
        if event.HasField("activity_task_scheduled_event_attributes"):
            scheduled = event.activity_task_scheduled_event_attributes
            if scheduled.activity_type.name == RUN_JOB:
                [job] = await env.client.data_converter.decode(scheduled.input.payloads, [JobInput])
                assert isinstance(job, JobInput)
                sent.append((job, event.event_time.ToDatetime(UTC)))
    return sent


async def task_state(handle: TaskHandle) -> TaskState:
    """The workflow's ``state`` query."""
    return await handle.query(TaskWorkflow.query_state)


def executions(engine: Engine, task_id: str) -> list[TaskExecution]:
    """A task's execution rows, oldest scheduled first."""
    rows, _ = list_executions(engine, task_id=task_id, limit=1000)
    return sorted(rows, key=lambda row: (row.scheduled_at, row.id))


def statuses(rows: Sequence[TaskExecution]) -> list[str]:
    """The status of each row."""
    return [row.status for row in rows]


def stamp(moment: datetime) -> str:
    """An instant as it appears in execution ids: UTC, milliseconds, ``Z``."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# ------------------------------------------------------------------ test handlers
class Blocker:
    """A handler that heartbeats until it is cancelled or the test sets ``open``; tells the
    test when it started."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.open = asyncio.Event()

    async def __call__(self, ctx: HandlerContext) -> None:
        self.started.set()
        try:
            while not self.open.is_set():
                ctx.heartbeat()
                await asyncio.sleep(0.1)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise


class Failing:
    """A handler that always raises; counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, ctx: HandlerContext) -> None:
        self.calls += 1
        raise RuntimeError(f"boom #{self.calls}")


class Flaky:
    """A handler that fails while ``failing`` is set; counts its calls."""

    def __init__(self) -> None:
        self.failing = True
        self.calls = 0

    async def __call__(self, ctx: HandlerContext) -> None:
        self.calls += 1
        if self.failing:
            raise RuntimeError(f"down #{self.calls}")


class SlowFirst:
    """A handler whose first call takes ``seconds`` of real time (heartbeating); later calls
    return at once. On the time-skipping server a running activity holds the clock, so the
    task's clock moves with the real one while the slow run lasts."""

    def __init__(self, seconds: float, *, until_cancelled: bool = False) -> None:
        self.seconds = seconds
        self.until_cancelled = until_cancelled
        self.calls: list[str] = []
        self.cancelled: list[str] = []

    async def __call__(self, ctx: HandlerContext) -> None:
        self.calls.append(ctx.execution_id)
        if len(self.calls) > 1:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.seconds
        try:
            while self.until_cancelled or loop.time() < deadline:
                ctx.heartbeat()
                await asyncio.sleep(0.1)
        except asyncio.CancelledError:
            self.cancelled.append(ctx.execution_id)
            raise


# ------------------------------------------------------------------ downtime
@asynccontextmanager
async def stoppable_worker(
    env: WorkflowEnvironment, engine: Engine, task_queue: str
) -> AsyncIterator[Worker]:
    """A worker with the production workflows and activities that keeps no sticky cache.

    A stopped worker's sticky queue would keep the task's next workflow task forever on the
    time-skipping server (it has no sticky schedule-to-start timeout), so the worker that
    comes back could never pick it up. Without a cache, every workflow task goes to the shared
    queue, as it does on a real server once the sticky timeout passes.
    """
    async with new_worker(env.client, engine, task_queue=task_queue, max_cached_workflows=0) as worker:
        yield worker


async def pass_time_without_worker(
    env: WorkflowEnvironment, handle: TaskHandle, duration: timedelta, *, first_wake: datetime
) -> None:
    """Let ``duration`` pass while no worker runs; ``first_wake`` is the task's next timer.

    When that timer fires, the server holds its clock until a worker completes the workflow
    task it scheduled; with the worker down that would take real time. So: skip to just past
    the timer, release that one hold, skip the rest, and take the hold back so the count is
    balanced when the next worker completes the task.
    """
    start = await env.get_current_time()
    assert start < first_wake < start + duration
    service = env.client.test_service
    scheduled = await _workflow_tasks(handle)
    await env.sleep(first_wake - start + timedelta(milliseconds=1))
    # The server fires the timer on a thread of its own: its workflow task, and the hold with
    # it, can come a moment after the sleep returns. Releasing a hold not yet taken would
    # unbalance the count ("Unbalanced lock and unlock calls", an RPC error on the next sleep).
    deadline = asyncio.get_running_loop().time() + 30
    while await _workflow_tasks(handle) == scheduled:
        assert asyncio.get_running_loop().time() < deadline, "the timer never fired"
        await asyncio.sleep(0.05)
    await service.unlock_time_skipping(UnlockTimeSkippingRequest())
    try:
        await env.sleep(start + duration - await env.get_current_time())
    finally:
        await service.lock_time_skipping(LockTimeSkippingRequest())


async def _workflow_tasks(handle: TaskHandle) -> int:
    """The workflow tasks scheduled so far in the task's history."""
    history = await handle.fetch_history()
    return sum(1 for e in history.events
               if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED)


@contextmanager
def locked_for_writes(engine: Engine) -> Iterator[threading.Event]:
    """The database locked for writing by another connection until the event is set: the
    SQLite file, or every table on PostgreSQL (reads go on, as they do under a slow writer)."""
    release, held = threading.Event(), threading.Event()

    def hold_sqlite() -> None:
        connection = sqlite3.connect(str(engine.url.database), isolation_level=None)
        try:
            connection.execute("BEGIN EXCLUSIVE")
            held.set()
            release.wait(timeout=60)
            connection.execute("ROLLBACK")
        finally:
            connection.close()

    def hold_postgres() -> None:
        tables = ", ".join(table.name for table in SQLModel.metadata.sorted_tables)
        with engine.connect() as connection:
            connection.execute(text(f"LOCK TABLE {tables} IN EXCLUSIVE MODE"))
            held.set()
            release.wait(timeout=60)
            connection.rollback()

    hold = hold_postgres if engine.dialect.name == "postgresql" else hold_sqlite
    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    assert held.wait(timeout=10), "the database was not locked"
    try:
        yield release
    finally:
        release.set()
        thread.join(timeout=10)


async def until(check: Callable[[], Awaitable[bool]], timeout: float = 30) -> None:
    """Poll ``check`` every 0.2 s until it holds; fail after ``timeout`` seconds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.2)


async def cancelled_and_counted(handle: TaskHandle, engine: Engine, calls: Sequence[object]) -> None:
    """Cancel the task, wait for its row to be final, and check its rows against its state: one
    row a fire, none left RUNNING, a COMPLETED row for each of the job's ``calls`` (as many as
    there are once it ended), and the counts of the workflow in the task row."""
    await handle.execute_update(TaskWorkflow.cancel_update, "done")
    final = await handle.result()
    task_id = handle.id.removeprefix("task-")

    async def row_final() -> bool:
        row = read_task(engine, task_id, None)
        return row is not None and row.status == TaskStatus.CANCELLED

    await until(row_final, timeout=60)
    rows = executions(engine, task_id)
    assert Counter(r.scheduled_at for r in rows).most_common(1)[0][1] == 1
    assert not [r for r in rows if r.status == "RUNNING"]
    outcomes = Counter(r.status for r in rows)
    assert outcomes["COMPLETED"] == final.success_count == len(calls), (outcomes, len(calls))
    assert outcomes["SKIPPED"] == final.skipped_count
    row = read_task(engine, task_id, None)
    assert row is not None and (row.run_count, row.skipped_count) == (final.run_count, final.skipped_count)


class FailsOnCancel:
    """Runs until cancelled, then fails (its target answered 500 as the cancel came)."""

    def __init__(self) -> None:
        self.started = asyncio.Event()

    async def __call__(self, ctx: HandlerContext) -> None:
        self.started.set()
        try:
            while True:
                ctx.heartbeat()
                await asyncio.sleep(0.2)
        except asyncio.CancelledError:
            raise RuntimeError("the target answered 500 as the cancel came") from None
