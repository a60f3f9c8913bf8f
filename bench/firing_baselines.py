"""Fire a plan on the baselines: bare Temporal workflows, Temporal Schedules and APScheduler.

Each gets its own fresh dev server (or none, for APScheduler); lateness and exactly-once are
counted as for the scheduler (bench/firing.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleCalendarSpec,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleRange,
    ScheduleSpec,
    ScheduleState,
)

from bench.baseline import BareInput
from bench.firing import CONCURRENCY, Fired, Plan, bounded, sleep_until
from bench.stack import BareStack


async def fire_bare(plan_at: Callable[[], Plan], *, cpu: bool = False) -> Fired:
    """Bare Temporal: one minimal workflow per task, sleeping until each instant (``cpu``:
    measure CPU per fire)."""
    stack = BareStack("bare")
    try:
        await asyncio.to_thread(stack.start)
        client = await Client.connect(stack.address)
        plan = plan_at()
        expected = plan.expected()
        fired = Fired("bare", plan)
        began = time.time()

        def start(key: str, instants: list[float]) -> Callable[[], Awaitable[Any]]:
            return lambda: client.start_workflow(
                "BareWorkflow", BareInput(instants), id=f"bare-{key}", task_queue=stack.task_queue)

        outcomes = await bounded([start(k, v) for k, v in expected.items()], CONCURRENCY)
        fired.create_seconds = time.time() - began
        fired.slack_seconds = min(min(v) for v in expected.values()) - time.time()
        fired.create_errors = sum(isinstance(o, Exception) for o in outcomes)
        waiting = wait_visibility(client, "BareWorkflow", len(expected), plan, fired)
        await (fired.measure_cpu(stack, waiting) if cpu else waiting)
        results = await bounded([result_of(client, f"bare-{key}") for key in expected], 32)
        for key, result in zip(expected, results, strict=True):
            if isinstance(result, Exception):
                fired.notes.append(f"bare-{key}: {result!r}")
                continue
            for instant, started in result:
                fired.add(key, instant, started)
        return fired
    finally:
        await asyncio.to_thread(stack.stop)


def result_of(client: Client, workflow_id: str) -> Callable[[], Awaitable[Any]]:
    """A call that waits for the workflow's result."""
    return lambda: client.get_workflow_handle(workflow_id).result()


async def wait_visibility(client: Client, workflow_type: str, count: int, plan: Plan, fired: Fired) -> None:
    """Wait, polling visibility every 2 s after the last instant, until `count` have completed."""
    await sleep_until(plan.last_instant)
    deadline = plan.last_instant + max(120.0, plan.runs / 10)
    done = 0
    while time.time() < deadline:
        done = (await client.count_workflows(
            f"WorkflowType = '{workflow_type}' AND ExecutionStatus = 'Completed'")).count
        if done >= count:
            return
        await asyncio.sleep(2)
    fired.notes.append(f"timed out waiting: {done}/{count} {workflow_type} completed")


# ----------------------------------------------------------------------------- schedules
def once_spec(instant: float) -> ScheduleSpec:
    """A calendar spec matching exactly one whole second (UTC)."""
    at = datetime.fromtimestamp(instant, UTC)
    return ScheduleSpec(calendars=[ScheduleCalendarSpec(
        second=[ScheduleRange(at.second)], minute=[ScheduleRange(at.minute)],
        hour=[ScheduleRange(at.hour)], day_of_month=[ScheduleRange(at.day)],
        month=[ScheduleRange(at.month)], year=[ScheduleRange(at.year)], day_of_week=[ScheduleRange(0, 6)],
    )])


async def fire_schedules(plan_at: Callable[[], Plan]) -> Fired:
    """Temporal Schedules: one schedule per task, each starting a tiny workflow per fire.

    Schedules have whole-second resolution, so the plan's instants must be whole seconds.
    """
    stack = BareStack("schedules")
    try:
        await asyncio.to_thread(stack.start)
        client = await Client.connect(stack.address)
        plan = plan_at()
        expected = plan.expected()
        fired = Fired("schedules", plan)
        began = time.time()

        def create(key: str, instants: list[float]) -> Callable[[], Awaitable[Any]]:
            if key.startswith("once"):
                spec = once_spec(instants[0])
            else:
                spec = ScheduleSpec(
                    intervals=[] if plan.cron else [
                        ScheduleIntervalSpec(every=timedelta(seconds=plan.interval_every))],
                    cron_expressions=[plan.cron] if plan.cron else [],
                    start_at=datetime.fromtimestamp(instants[0], UTC),
                    end_at=datetime.fromtimestamp(instants[-1] + 0.5, UTC),
                )
            schedule = Schedule(
                action=ScheduleActionStartWorkflow("ScheduledWorkflow", id=f"sched-{key}", task_queue=stack.task_queue),
                spec=spec,
                policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.ALLOW_ALL),
                state=ScheduleState(limited_actions=True, remaining_actions=len(instants)),
            )
            return lambda: client.create_schedule(f"sched-{key}", schedule)

        outcomes = await bounded([create(k, v) for k, v in expected.items()], CONCURRENCY)
        fired.create_seconds = time.time() - began
        fired.slack_seconds = min(min(v) for v in expected.values()) - time.time()
        errors = [o for o in outcomes if isinstance(o, Exception)]
        fired.create_errors = len(errors)
        if errors:
            fired.notes.append(f"{len(errors)} schedule creates failed, first: {errors[0]!r}")
        await wait_visibility(client, "ScheduledWorkflow", plan.runs, plan, fired)
        ids = [w.id async for w in client.list_workflows("WorkflowType = 'ScheduledWorkflow'")]
        results = await bounded([result_of(client, i) for i in ids], 32)
        for workflow_id, result in zip(ids, results, strict=True):
            if isinstance(result, Exception):
                fired.notes.append(f"{workflow_id}: {result!r}")
                continue
            # The workflow id is "sched-<key>-<nominal time>"; the key is what we count by.
            key = workflow_id.removeprefix("sched-").rsplit("-", 3)[0]
            fired.add(key, result[0], result[1])
        return fired
    finally:
        await asyncio.to_thread(stack.stop)


# ----------------------------------------------------------------------------- apscheduler
async def fire_apscheduler(plan_at: Callable[[], Plan]) -> Fired:
    """APScheduler 3 AsyncIOScheduler in this process (in memory, not durable)."""
    # APScheduler 3 ships no type hints.
    from apscheduler.schedulers.asyncio import (  # type: ignore[import-untyped, import-not-found, unused-ignore]
        AsyncIOScheduler,
    )
    from apscheduler.triggers.cron import CronTrigger  # type: ignore[import-untyped, import-not-found, unused-ignore]
    from apscheduler.triggers.date import DateTrigger  # type: ignore[import-untyped, import-not-found, unused-ignore]
    from apscheduler.triggers.interval import (  # type: ignore[import-untyped, import-not-found, unused-ignore]
        IntervalTrigger,
    )

    plan = plan_at()
    expected = plan.expected()
    fired = Fired("apscheduler", plan)
    scheduler = AsyncIOScheduler(
        timezone=UTC, job_defaults={"misfire_grace_time": None, "coalesce": False, "max_instances": 1000}
    )
    began = time.time()

    def job_for(key: str, instant: float | None) -> Callable[[], Awaitable[None]]:
        async def job() -> None:
            now = time.time()
            # An interval job does not know its fire time; it is the nearest second of its grid.
            every = plan.interval_every
            at = instant if instant is not None else (
                plan.interval_start + round((now - plan.interval_start) / every) * every)
            fired.add(key, at, now)
        return job

    for key, instants in expected.items():
        if key.startswith("once"):
            scheduler.add_job(job_for(key, instants[0]), DateTrigger(datetime.fromtimestamp(instants[0], UTC)))
        else:
            bounds = {"start_date": datetime.fromtimestamp(instants[0], UTC),
                      "end_date": datetime.fromtimestamp(instants[-1] + 0.5, UTC)}
            if plan.cron is None:
                trigger = IntervalTrigger(seconds=plan.interval_every, timezone=UTC, **bounds)
            else:  # the five crontab fields by name, as from_crontab reads them, with bounds
                fields = dict(zip(("minute", "hour", "day", "month", "day_of_week"),
                                  plan.cron.split(), strict=True))
                trigger = CronTrigger(timezone=UTC, **fields, **bounds)
            scheduler.add_job(job_for(key, None), trigger)
    fired.create_seconds = time.time() - began
    scheduler.start()
    fired.slack_seconds = min(min(v) for v in expected.values()) - time.time()
    try:
        await sleep_until(plan.last_instant)
        deadline = plan.last_instant + 60
        while sum(len(s) for s in fired.starts.values()) < plan.runs and time.time() < deadline:
            await asyncio.sleep(0.2)
    finally:
        scheduler.shutdown(wait=False)
    return fired
