"""One tenant's backlog in Temporal's queues does not hold back another tenant's work (real dev
server, fairness on): the server hands a backlog of workflow tasks, job runs and webhook
deliveries out round-robin by tenant (config/temporal.py, task_priority), so another tenant's
fire is decided, its run started and its alert sent among the first, not after the backlog."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.api.workflow.v1 import PendingActivityInfo
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from activities.handlers import HandlerContext
from activities.options import RunOptions
from outbound.egress import EgressPolicy, guarded_client
from scheduling.status import workflow_id
from tests.conftest import new_worker
from tests.target import TargetServer
from tests.workflows.helpers import handler_job, spec
from worker.build import ActivitySet, build_activities, build_jobs_worker, build_workflow_worker
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


# A loud tenant's fires, all due at one instant, and a quiet tenant's fire a second later: in
# queue order the quiet one comes after every loud one.
LOUD_TASKS = 80


class Order:
    """A handler that notes the tenant of each run, in the order the runs start."""

    def __init__(self) -> None:
        self.tenants: dict[str, str] = {}  # task id: tenant
        self.ran: list[str] = []

    async def __call__(self, ctx: HandlerContext) -> None:
        self.ran.append(self.tenants[ctx.task_id])


async def _once(env: WorkflowEnvironment, queue: str, order: Order, tenant: str,
                run_at: datetime) -> str:
    task_id = uuid.uuid4().hex
    order.tenants[task_id] = tenant
    await start_task_workflow(
        env.client, task_queue=queue, task_id=task_id, tenant_id=tenant,
        spec=spec(task_name=f"{tenant}-task", schedule_type="once", run_at=run_at,
                  job_details=handler_job("order")),
        created_at=datetime.now(UTC))
    return task_id


async def _loud_and_quiet(env: WorkflowEnvironment, queue: str, order: Order,
                          instant: datetime, after: float = 1) -> None:
    """The loud tenant's fires at ``instant``, then the quiet tenant's ``after`` s later."""
    for _ in range(LOUD_TASKS):
        await _once(env, queue, order, "loud", instant)
    await _once(env, queue, order, "quiet", instant + timedelta(seconds=after))


async def _until(check: Callable[[], bool], what: str, seconds: float = 60) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not check():
        assert asyncio.get_running_loop().time() < deadline, what
        await asyncio.sleep(0.2)


async def _sleep_until(moment: datetime) -> None:
    await asyncio.sleep(max(0.0, (moment - datetime.now(UTC)).total_seconds()))


async def test_after_a_workflow_worker_outage_another_tenants_fire_is_decided_among_the_first(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    # No workflows worker while the tasks are created and come due; the one that comes back
    # takes one workflow task at a time from the backlog.
    client, queue, order = dev_env.client, f"fair-{uuid.uuid4()}", Order()
    instant = datetime.now(UTC) + timedelta(seconds=1)
    await _loud_and_quiet(dev_env, queue, order, instant)
    async with guarded_client(EgressPolicy.from_list(["127.0.0.1"])) as http:
        def activities() -> ActivitySet:
            return build_activities(engine=sqlite_engine, http=http, client=client,
                                    extra_handlers={"order": order})
        await _sleep_until(instant + timedelta(seconds=2))
        async with build_jobs_worker(client, task_queue=queue, activities=activities()):
            async with build_workflow_worker(client, task_queue=queue, activities=activities(),
                                             max_concurrent_workflow_tasks=1):
                await _until(lambda: "quiet" in order.ran, "the quiet tenant's run never ran")
    # Handed out by tenant it came second (three runs); in queue order after 74 to 80 loud ones.
    assert order.ran.index("quiet") < LOUD_TASKS // 10, order.ran


# The runs are sent this long ahead of their instants: they wait in the jobs queue, and the
# jobs worker takes them all before the instants (then each waits in its slot).
LEAD = 30


async def test_after_a_jobs_worker_outage_another_tenants_run_starts_among_the_first(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    # No jobs worker while the runs are sent; the one that comes back takes the backlog. The
    # order it is handed out in is the server's: when it handed each run to the worker.
    client, queue, order = dev_env.client, f"fair-{uuid.uuid4()}", Order()
    instant = datetime.now(UTC) + timedelta(seconds=20 + LEAD)
    async with guarded_client(EgressPolicy.from_list(["127.0.0.1"])) as http:
        def activities() -> ActivitySet:
            return build_activities(engine=sqlite_engine, http=http, client=client,
                                    extra_handlers={"order": order},
                                    run_options=RunOptions(lead_seconds=LEAD))
        async with build_workflow_worker(client, task_queue=queue, activities=activities()):
            # The quiet run is sent 5 s after the loud ones: time for their 80 sends.
            await _loud_and_quiet(dev_env, queue, order, instant, after=5)
            sent = await _sent(client, order, until=instant - timedelta(seconds=5))
            async with build_jobs_worker(client, task_queue=queue, activities=activities()):
                taken = await _taken(client, order, until=instant)
    quiet = sent.pop("quiet")
    ahead = [t for t, at in sent.items() if at < quiet]
    # Under load the loud runs may be sent over more than 5 s: the check needs enough of them.
    assert len(ahead) >= LOUD_TASKS // 4, f"only {len(ahead)} loud runs were sent before the quiet one"
    before = [t for t in ahead if taken[t] < taken["quiet"]]
    # Handed out by tenant, 1 or 2 of the 80 went before it (three copies of this test at once
    # beside other tests); in queue order all 80 did.
    assert len(before) < len(ahead) // 2, (len(before), len(ahead))


async def _sent(client: Client, order: Order, until: datetime) -> dict[str, datetime]:
    """When each task's run was sent (its activity scheduled), once all are; the quiet one
    under its tenant's name."""
    return {_named(order, t): a.scheduled_time.ToDatetime(UTC)
            for t, a in (await _each_run(client, order, until, lambda a: True)).items()}


async def _taken(client: Client, order: Order, until: datetime) -> dict[str, datetime]:
    """When the server handed each task's run to a worker, once all are; the quiet one under
    its tenant's name."""
    started = PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
    return {_named(order, t): a.last_started_time.ToDatetime(UTC)
            for t, a in (await _each_run(client, order, until, lambda a: a.state == started)).items()}


def _named(order: Order, task_id: str) -> str:
    return "quiet" if order.tenants[task_id] == "quiet" else task_id


async def _each_run(client: Client, order: Order, until: datetime,
                    ready: Callable[[PendingActivityInfo], bool]) -> dict[str, PendingActivityInfo]:
    """Each task's run as its workflow describes it, once every one is ``ready``."""
    tasks = list(order.tenants)
    while True:
        described = await asyncio.gather(
            *(client.get_workflow_handle(workflow_id(t)).describe() for t in tasks))
        runs = {t: d.raw_description.pending_activities for t, d in zip(tasks, described, strict=True)}
        if all(len(r) == 1 and ready(r[0]) for r in runs.values()):
            return {t: r[0] for t, r in runs.items()}
        assert datetime.now(UTC) < until, "the runs were not all sent and taken in time"
        await asyncio.sleep(0.2)
