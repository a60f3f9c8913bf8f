"""One tenant's long runs cannot take every slot of a jobs worker (real dev server): a run of
another tenant starts while they hold theirs, and the runs refused for the share run later,
each once, on its first attempt; its retries keep to the share too, each run to its attempts."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine
from temporalio.api.enums.v1 import EventType
from temporalio.testing import WorkflowEnvironment

from activities.handlers import HandlerContext
from activities.share import SlotShare
from outbound.egress import EgressPolicy, guarded_client
from scheduling.status import JobFailure, workflow_id
from store.tasks import list_executions
from tests.conftest import new_worker
from tests.workflows.helpers import far_daily_cron, spec
from worker.build import ActivitySet, build_activities, build_jobs_worker, build_workflow_worker
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
    """A task of ``tenant`` (once, unless ``fields`` say) whose job is the handler ``job``."""
    task_id = uuid.uuid4().hex
    await start_task_workflow(
        env.client, task_queue=queue, task_id=task_id, tenant_id=tenant,
        spec=spec(**{"task_name": job, "schedule_type": "once",
                     "job_details": {"type": "handler", "name": job}, **fields}),
        created_at=datetime.now(UTC))
    return task_id


def test_the_last_tenth_of_the_slots_goes_to_tenants_below_their_fair_share() -> None:
    share = SlotShare(20)  # two slots are the last tenth
    assert all(share.take("a") for _ in range(18))  # a tenant alone fills nine tenths
    assert not share.take("a")
    assert share.take("b")  # a newcomer gets one: it holds none
    assert share.fair() == 6  # 20 // (2 tenants + 1)
    assert share.take("b")  # the last slot: "b" holds fewer than its fair share
    assert share.take("a", refusable=False)  # a retry is never refused
    assert (share.held("a"), share.held("b")) == (19, 2)
    for _ in range(12):
        share.give_back("a")
    # More than a tenth free again: anyone takes a slot; below it, only the fair shares.
    assert share.take("a") and share.take("b")  # 8 and 3 of 11
    assert [share.take("a") for _ in range(8)] == [True] * 7 + [False]  # up to 18 held
    assert share.take("b")
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

    # Four slots: the busy tenant's runs hold three, its fourth is refused and sent again,
    # and the quiet tenant's run takes the last slot.
    async with new_worker(dev_env.client, sqlite_engine, task_queue=queue,
                          handlers={"hold": hold}, max_concurrent_activities=4):
        await until(lambda: final(quiet) == ["COMPLETED"], "the quiet tenant's run never ran")
        assert sum(hold.calls.values()) == 3, hold.calls  # nine tenths, never the last slot
        hold.release.set()
        await until(lambda: all(final(task_id) for task_id in busy), "the busy runs never ended")
    sends = []
    for task_id in busy:
        rows, _ = list_executions(sqlite_engine, task_id=task_id, limit=10)
        assert [(row.status, row.attempts) for row in rows] == [("COMPLETED", 1)], rows
        sends.append(await scheduled_inputs(dev_env, task_id))
    assert hold.calls == Counter(busy), hold.calls
    # The refused run was sent again as it was first sent: due at the same time, so that a
    # worker getting it late must claim it (a re-send due later ran once as a catch-up too).
    resent = [inputs for inputs in sends if len(inputs) > 1]
    assert len(resent) == 1, [len(inputs) for inputs in sends]
    assert {(i["sent_at"], i["not_before"]) for i in resent[0]} == {
        (resent[0][0]["sent_at"], resent[0][0]["not_before"])}
    assert [i["refusable"] for i in resent[0]] == [True] * len(resent[0])


async def refusals(env: WorkflowEnvironment, task_id: str) -> int:
    """The job activities of the task a jobs worker refused."""
    history = await env.client.get_workflow_handle(workflow_id(task_id)).fetch_history()
    return sum(1 for e in history.events
               if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
               and e.activity_task_failed_event_attributes.failure.application_failure_info.type
               == JobFailure.TENANT_BUSY)


async def scheduled_inputs(env: WorkflowEnvironment, task_id: str) -> list[dict[str, Any]]:
    """The JobInput of each job activity the task's workflow scheduled, in order."""
    history = await env.client.get_workflow_handle(workflow_id(task_id)).fetch_history()
    return [json.loads(e.activity_task_scheduled_event_attributes.input.payloads[0].data)
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]


async def test_a_run_refused_until_past_its_instant_goes_to_the_missed_run_policy(
        dev_env: WorkflowEnvironment, sqlite_engine: Engine) -> None:
    queue = f"share-{uuid.uuid4()}"
    now = datetime.now(UTC)
    hold = Hold()
    holder = await create(dev_env, queue, "busy", "hold", run_at=now)

    def rows(task_id: str) -> list[tuple[str, str | None]]:
        found, _ = list_executions(sqlite_engine, task_id=task_id, limit=10)
        return [(row.status, row.reason) for row in found]

    async with new_worker(dev_env.client, sqlite_engine, task_queue=queue,
                          handlers={"hold": hold}, max_concurrent_activities=2):
        deadline = asyncio.get_running_loop().time() + 45
        while hold.calls[holder] == 0:
            assert asyncio.get_running_loop().time() < deadline, "the holder never started"
            await asyncio.sleep(0.2)
        # Two slots: the tenant's holder has one, so these are refused while it runs.
        now = datetime.now(UTC)
        skipped = await create(dev_env, queue, "busy", "hold", run_at=now, missed_run_policy="skip")
        cancelled = await create(dev_env, queue, "busy", "hold", run_at=now)
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


async def test_a_run_sent_again_to_jobs_workers_that_went_down_runs_once(
        dev_env: WorkflowEnvironment, sqlite_engine: Engine) -> None:
    # Refused while its tenant holds the one slot it may, the run is sent again; the jobs
    # worker goes down, and the one that comes back gets it past the time its workflow found
    # it untaken and decided its fire again (catchup). Sent again with its own due time, it
    # claims, is refused, and only the catch-up runs.
    client, queue = dev_env.client, f"share-{uuid.uuid4()}"
    hold, ran = Hold(), Counter[str]()

    async def count(ctx: HandlerContext) -> None:
        ran[ctx.task_id] += 1

    handlers = {"hold": hold, "count": count}
    async with guarded_client(EgressPolicy.from_list(["127.0.0.1"])) as http:
        def activities() -> ActivitySet:
            return build_activities(engine=sqlite_engine, http=http, client=client,
                                    extra_handlers=handlers, job_slots=2)
        async with build_workflow_worker(client, task_queue=queue, activities=activities()):
            async with build_jobs_worker(client, task_queue=queue, activities=activities()):
                await create(dev_env, queue, "busy", "hold", run_at=datetime.now(UTC))
                while not hold.calls:
                    await asyncio.sleep(0.1)
                instant = datetime.now(UTC) + timedelta(seconds=1)
                task_id = await create(dev_env, queue, "busy", "count", run_at=instant,
                                       missed_run_policy="catchup")
                # Refused at its instant, 1 s and 3 s past it: sent again at 7 s.
                while await refusals(dev_env, task_id) < 3:
                    await asyncio.sleep(0.1)
            # No jobs worker until past the time the run is found untaken (8 s).
            await asyncio.sleep((instant + timedelta(seconds=9.5) - datetime.now(UTC)).total_seconds())
            hold.release.set()
            async with build_jobs_worker(client, task_queue=queue, activities=activities()):
                state = await asyncio.wait_for(client.get_workflow_handle(workflow_id(task_id)).result(), 60)
    rows, _ = list_executions(sqlite_engine, task_id=task_id, limit=10)
    assert ran == Counter([task_id]), ran
    assert [row.status for row in rows] == ["COMPLETED"], rows
    assert state["success_count"] == 1, state


class Timed:
    """A handler that takes ``seconds``, then fails if told to; counts each task's calls, and
    in ``going`` the calls of all such handlers at once (``going[1]``: the most)."""

    def __init__(self, seconds: float, going: list[int], *, fails: bool) -> None:
        self.seconds, self.going, self.fails = seconds, going, fails
        self.calls: Counter[str] = Counter()

    async def __call__(self, ctx: HandlerContext) -> None:
        self.calls[ctx.task_id] += 1
        self.going[0] += 1
        self.going[1] = max(self.going)
        try:
            await asyncio.sleep(self.seconds)
        finally:
            self.going[0] -= 1
        if self.fails:
            raise RuntimeError("failing, as asked")


async def test_a_tenants_retries_keep_to_its_share_and_each_run_keeps_its_attempts(
        dev_env: WorkflowEnvironment, sqlite_engine: Engine) -> None:
    # A tenant's retries took slots past its share: its failing runs could hold every slot,
    # and another tenant's run waited until one ended. Refused now like first attempts, a
    # retry is sent again counting on from the attempts made, so no run makes more.
    queue = f"share-{uuid.uuid4()}"
    going = [0, 0]
    failing, slow = Timed(0.2, going, fails=True), Timed(3, going, fails=False)
    retry = {"max_attempts": 3, "initial_interval_seconds": 2, "maximum_interval_seconds": 2}

    def rows(task_id: str) -> list[tuple[str, int]]:
        found, _ = list_executions(sqlite_engine, task_id=task_id, limit=10)
        return [(row.status, row.attempts) for row in found if row.status != "RUNNING"]

    # Four slots: the tenant's attempts hold at most three, the last one is kept for others.
    async with new_worker(dev_env.client, sqlite_engine, task_queue=queue,
                          handlers={"fail": failing, "slow": slow}, max_concurrent_activities=4):
        failed = await create(dev_env, queue, "busy", "fail", run_at=datetime.now(UTC),
                              retry_policy=retry)
        deadline = asyncio.get_running_loop().time() + 60
        while not (failing.calls and going[0] == 0):  # its first attempt failed
            assert asyncio.get_running_loop().time() < deadline, "the run never failed"
            await asyncio.sleep(0.05)
        # Its retry comes while three runs of the tenant hold three slots.
        held = [await create(dev_env, queue, "busy", "slow", run_at=datetime.now(UTC))
                for _ in range(3)]
        while not all(rows(task_id) for task_id in [failed, *held]):
            assert asyncio.get_running_loop().time() < deadline, [rows(t) for t in [failed, *held]]
            await asyncio.sleep(0.2)
    assert going[1] == 3, going
    assert failing.calls == Counter({failed: 3}) and slow.calls == Counter(held), (failing.calls, slow.calls)
    assert rows(failed) == [("FAILED", 3)] and [rows(t) for t in held] == [[("COMPLETED", 1)]] * 3
    # Its retry was refused and sent again with the attempt it made.
    assert max(i["attempts_used"] for i in await scheduled_inputs(dev_env, failed)) == 1


class FailingFirstRun:
    """A handler whose first run fails at every attempt, after a while; later runs succeed.
    Counts each run's calls."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    async def __call__(self, ctx: HandlerContext) -> None:
        self.calls[ctx.execution_id] += 1
        if ctx.execution_id == next(iter(self.calls)):
            await asyncio.sleep(0.5)
            raise RuntimeError("the first run fails, as asked")


RETRY_SLOWLY = {"max_attempts": 10, "initial_interval_seconds": 2, "backoff_coefficient": 1,
                "maximum_interval_seconds": 2}


async def _ran_then_held(env: WorkflowEnvironment, queue: str, failing: FailingFirstRun,
                         hold: Hold, **fields: object) -> str:
    """A busy tenant's task whose first run fails; once it has started, another run of the
    tenant holds the one slot the tenant may hold (of two)."""
    task_id = await create(env, queue, "busy", "failing", retry_policy=RETRY_SLOWLY, **fields)
    await _until(lambda: bool(failing.calls), "the run never started")
    await create(env, queue, "busy", "hold", run_at=datetime.now(UTC))
    await _until(lambda: bool(hold.calls), "the holder never started")
    return task_id


async def _until_refused(env: WorkflowEnvironment, task_id: str) -> None:
    deadline = asyncio.get_running_loop().time() + 45
    while await refusals(env, task_id) < 1:
        assert asyncio.get_running_loop().time() < deadline, "no retry was refused"
        await asyncio.sleep(0.1)


async def _until(check: Callable[[], bool], what: str) -> None:
    deadline = asyncio.get_running_loop().time() + 45
    while not check():
        assert asyncio.get_running_loop().time() < deadline, what
        await asyncio.sleep(0.1)


async def _refused_retry(env: WorkflowEnvironment, queue: str, failing: FailingFirstRun,
                         hold: Hold, **fields: object) -> str:
    """``_ran_then_held``, and a retry of the first run refused."""
    task_id = await _ran_then_held(env, queue, failing, hold, **fields)
    await _until_refused(env, task_id)
    return task_id


def _ended_cancelled_with_its_attempts(engine: Engine, task_id: str, failing: FailingFirstRun,
                                       state: dict[str, Any]) -> None:
    found, _ = list_executions(engine, task_id=task_id, limit=10)
    (run,) = failing.calls
    assert [(r.status, r.attempts) for r in found] == [("CANCELLED", failing.calls[run])], found
    assert (state["cancelled_count"], state["skipped_count"]) == (1, 0), state


async def test_a_refused_retry_of_a_cancelled_task_ends_cancelled_with_its_attempts(
        dev_env: WorkflowEnvironment, sqlite_engine: Engine) -> None:
    # Waiting to be sent again, the run was recorded SKIPPED as if it had never run.
    queue = f"share-{uuid.uuid4()}"
    failing, hold = FailingFirstRun(), Hold()
    async with new_worker(dev_env.client, sqlite_engine, task_queue=queue,
                          handlers={"failing": failing, "hold": hold}, max_concurrent_activities=2):
        task_id = await _refused_retry(dev_env, queue, failing, hold, run_at=datetime.now(UTC))
        handle = dev_env.client.get_workflow_handle(workflow_id(task_id))
        await handle.signal("cancel", "not now")
        state = await asyncio.wait_for(handle.result(), 30)
        hold.release.set()
    _ended_cancelled_with_its_attempts(sqlite_engine, task_id, failing, state)


async def test_a_refused_retry_that_cancel_running_stops_is_not_sent_again(
        dev_env: WorkflowEnvironment, sqlite_engine: Engine) -> None:
    # The cancel found no activity of the run to cancel: the run was sent again later and ran
    # beside the one that replaced it.
    queue = f"share-{uuid.uuid4()}"
    failing, hold = FailingFirstRun(), Hold()
    async with new_worker(dev_env.client, sqlite_engine, task_queue=queue,
                          handlers={"failing": failing, "hold": hold}, max_concurrent_activities=2):
        task_id = await _refused_retry(dev_env, queue, failing, hold, schedule_type="interval",
                                       interval_seconds=8, overlap_policy="cancel_running",
                                       max_runs=2)
        handle = dev_env.client.get_workflow_handle(workflow_id(task_id))

        def rows() -> list[tuple[str, int]]:
            found, _ = list_executions(sqlite_engine, task_id=task_id, limit=10)
            return sorted((r.status, r.attempts) for r in found if r.status != "RUNNING")

        deadline = asyncio.get_running_loop().time() + 45
        while not rows():  # the second fire stops the first run
            assert asyncio.get_running_loop().time() < deadline, "the first run never ended"
            await asyncio.sleep(0.2)
        hold.release.set()
        await asyncio.wait_for(handle.result(), 60)
        made = dict(failing.calls)
        await asyncio.sleep(3)  # a first run sent again would have run again by now
    first, second = failing.calls
    assert failing.calls == made and failing.calls[second] == 1, failing.calls
    assert rows() == [("CANCELLED", failing.calls[first]), ("COMPLETED", 1)], rows()


async def test_a_cancel_in_the_workflow_task_of_a_retrys_refusal_ends_the_run_cancelled(
        dev_env: WorkflowEnvironment, sqlite_engine: Engine) -> None:
    # The workflow worker is down while a retry is refused and the task is cancelled: the
    # worker that comes back gets both in one workflow task. The cancel, taken first, found
    # the run's attempts not yet counted: the run that ran was recorded as never run.
    client, queue = dev_env.client, f"share-{uuid.uuid4()}"
    failing, hold = FailingFirstRun(), Hold()
    async with guarded_client(EgressPolicy.from_list(["127.0.0.1"])) as http:
        activities = build_activities(engine=sqlite_engine, http=http, client=client, job_slots=2,
                                      extra_handlers={"failing": failing, "hold": hold})

        def workflows() -> Any:
            return build_workflow_worker(client, task_queue=queue, activities=activities,
                                         max_cached_workflows=0)

        async with build_jobs_worker(client, task_queue=queue, activities=activities):
            async with workflows():
                task_id = await _ran_then_held(dev_env, queue, failing, hold,
                                               run_at=datetime.now(UTC))
            await _until_refused(dev_env, task_id)  # the retry, refused with none to hear it
            handle = client.get_workflow_handle(workflow_id(task_id))
            await handle.signal("cancel", "not now")
            async with workflows():
                state = await asyncio.wait_for(handle.result(), 30)
            hold.release.set()
    _ended_cancelled_with_its_attempts(sqlite_engine, task_id, failing, state)


@asynccontextmanager
async def _slot_held(env: WorkflowEnvironment,
                     engine: Engine) -> AsyncIterator[tuple[str, Hold, Counter[str]]]:
    """Workers with two job slots, the busy tenant's one held by its ``hold`` run: the queue,
    the hold, and the runs of the ``count`` handler by task."""
    queue = f"share-{uuid.uuid4()}"
    hold, ran = Hold(), Counter[str]()

    async def count(ctx: HandlerContext) -> None:
        ran[ctx.task_id] += 1

    async with new_worker(env.client, engine, task_queue=queue,
                          handlers={"hold": hold, "count": count}, max_concurrent_activities=2):
        await create(env, queue, "busy", "hold", run_at=datetime.now(UTC))
        await _until(lambda: bool(hold.calls), "the holder never started")
        yield queue, hold, ran


async def _paused_while_refused(env: WorkflowEnvironment, engine: Engine,
                                **fields: object) -> list[tuple[str, str | None, int]]:
    """A run of a busy tenant's task refused while another holds the tenant's one slot (of
    two), the task paused, the slot freed, then the task resumed: the task's rows (status,
    trigger, attempts) once it has ended. Its job must not run while the task is paused."""
    async with _slot_held(env, engine) as (queue, hold, ran):
        task_id = await create(env, queue, "busy", "count", **fields)
        await _until_refused(env, task_id)
        handle = env.client.get_workflow_handle(workflow_id(task_id))
        paused = await handle.execute_update("pause_task", args=["not now", None])
        assert paused["status"] == "PAUSED", paused
        hold.release.set()  # a run sent again now would take the slot
        await asyncio.sleep(8)  # past the sends again at 1, 3 and 7 s
        assert not ran, ran
        await handle.execute_update("resume_task", args=["skip", None])
        await asyncio.wait_for(handle.result(), 30)
    assert ran == Counter({task_id: 1}), ran
    found, _ = list_executions(engine, task_id=task_id, limit=10)
    return [(row.status, row.trigger, row.attempts) for row in found]


async def test_a_refused_run_paused_before_it_is_sent_again_does_not_run_while_paused(
        dev_env: WorkflowEnvironment, sqlite_engine: Engine) -> None:
    # Refused at its instant while its tenant held its share, the run was too near its instant
    # for the pause to withdraw it: it was sent again and ran while the task was paused. Its
    # fire goes back to the policy: due before the pause and decided after it, it is missed,
    # and runs once as its priority's single catch-up.
    rows = await _paused_while_refused(dev_env, sqlite_engine, run_at=datetime.now(UTC))
    assert rows == [("COMPLETED", "catchup", 1)], rows


async def test_a_refused_catch_up_paused_does_not_run_while_paused(
        dev_env: WorkflowEnvironment, sqlite_engine: Engine) -> None:
    # A catch-up (its instant is when it is sent) could never be withdrawn: it ran while the
    # task was paused. Withdrawn, its fire goes back to the policy and runs after the resume.
    rows = await _paused_while_refused(
        dev_env, sqlite_engine, run_at=datetime.now(UTC) - timedelta(seconds=90),
        missed_run_policy="single_catchup")
    assert rows == [("COMPLETED", "catchup", 1)], rows


async def test_a_refused_manual_run_still_runs_after_a_schedule_change(
        dev_env: WorkflowEnvironment, sqlite_engine: Engine) -> None:
    # Withdrawn by the change like a run of the schedule, the run someone asked for was
    # recorded SKIPPED rescheduled: a schedule change discarded a trigger.
    cron = await far_daily_cron(dev_env)
    async with _slot_held(dev_env, sqlite_engine) as (queue, hold, ran):
        task_id = await create(dev_env, queue, "busy", "count", schedule_type="cron", cron=cron)
        handle = dev_env.client.get_workflow_handle(workflow_id(task_id))
        await handle.execute_update("trigger_task", args=[None])
        await _until_refused(dev_env, task_id)
        hour = cron.split()[1]
        changed = await handle.execute_update("update_task", {"cron": f"30 {hour} * * *"})
        assert changed["spec"]["cron"] == f"30 {hour} * * *", changed
        hold.release.set()
        await _until(lambda: bool(ran), "the run asked for never ran")
        await handle.signal("cancel", "done")
        await asyncio.wait_for(handle.result(), 30)
    found, _ = list_executions(sqlite_engine, task_id=task_id, limit=10)
    assert [(row.status, row.trigger) for row in found] == [("COMPLETED", "manual")], found
