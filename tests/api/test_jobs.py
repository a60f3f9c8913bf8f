"""Job kinds through the API: another Temporal workflow as the run; the Temporal UI's view."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.worker import Worker

from activities.handlers import ENTRY_POINT_GROUP, load_handlers
from tests.api.conftest import Stack
from tests.api.test_e2e import wait_for_status
from workflows import attributes, describe

BERLIN = ZoneInfo("Europe/Berlin")


@workflow.defn(name="EchoWorkflow", sandboxed=False)
class EchoWorkflow:
    @workflow.run
    async def run(self, region: str, count: int) -> str:
        return f"{region}:{count}"


async def test_workflow_job_runs_existing_workflow_and_waits_for_it(stack: Stack) -> None:
    queue = stack.workflow_queue  # the one the stack lets workflow jobs use, granted to t1
    async with Worker(stack.env.client, task_queue=queue, workflows=[EchoWorkflow]):
        async with stack.client() as api:
            created = await api.post("/task/create", json={
                "task_name": "echo", "schedule_type": "once", "run_at": datetime.now(UTC).isoformat(),
                "job_details": {"type": "workflow", "workflow_type": "EchoWorkflow",
                                "task_queue": queue, "args": ["eu", 3]},
            })
            assert created.status_code == 201, created.text
            task_id = created.json()["task_id"]
            final = await wait_for_status(api, task_id, {"COMPLETED", "FAILED"})
            assert final["status"] == "COMPLETED", final
            execution_id = final["last_run"]["execution_id"]
    child = stack.env.client.get_workflow_handle(f"{execution_id}/workflow")
    assert await child.result() == "eu:3"
    # The task's workflow, its run and the workflow the run started carry the task's priority
    # with its tenant as Temporal's fairness key.
    for handle in (child, stack.env.client.get_workflow_handle(f"task-{task_id}")):
        described = (await handle.describe()).raw_description.workflow_execution_info.priority
        assert (described.priority_key, described.fairness_key) == (3, "t1"), described


async def _workflow_priority(stack: Stack, task_id: str) -> tuple[int, str]:
    handle = stack.env.client.get_workflow_handle(f"task-{task_id}")
    described = (await handle.describe()).raw_description.workflow_execution_info.priority
    return described.priority_key, described.fairness_key


async def test_an_update_of_priority_reaches_the_workflows_own_priority(stack: Stack) -> None:
    async with stack.client() as api:
        created = await api.post("/task/recurring", json={
            "task_name": "reprioritized", "job_details": {"type": "handler", "name": "noop"},
            "schedule_type": "interval", "interval_seconds": 86400, "priority": "low",
        })
        assert created.status_code == 201, created.text
        task_id = created.json()["task_id"]
        assert await _workflow_priority(stack, task_id) == (5, "t1")
        updated = await api.post("/task/update", json={"task_id": task_id, "priority": "high"})
        assert updated.status_code == 202, updated.text
        # Its own workflow tasks kept the priority it started with (its runs took the spec's).
        assert await _workflow_priority(stack, task_id) == (1, "t1")
        renamed = await api.post("/task/update", json={"task_id": task_id, "task_name": "renamed"})
        assert renamed.status_code == 202, renamed.text
        assert await _workflow_priority(stack, task_id) == (1, "t1")


async def test_search_attributes_and_summaries_show_in_temporal(stack: Stack) -> None:
    async with stack.client() as api:
        created = await api.post("/task/recurring", json={
            "task_name": "ui-visible", "job_details": {"type": "handler", "name": "noop"},
            "schedule_type": "cron", "cron": "0 10 * * *", "timezone": "Europe/Berlin",
        })
        task_id = created.json()["task_id"]
        await wait_for_status(api, task_id, {"PENDING"})
    query = (f"TaskId = '{task_id}' AND TenantId = 't1' AND TaskName = 'ui-visible' "
             "AND ScheduleType = 'cron' AND TaskStatus = 'PENDING' AND NextRunAt > '2000-01-01T00:00:00Z'")
    deadline = asyncio.get_running_loop().time() + 20
    while (await stack.env.client.count_workflows(query)).count != 1:
        assert asyncio.get_running_loop().time() < deadline, "task not findable by its search attributes"
        await asyncio.sleep(0.3)
    handle = stack.env.client.get_workflow_handle(f"task-{task_id}")
    timers: list = []
    while not timers:  # the timer is recorded when the workflow task that sets it completes
        assert asyncio.get_running_loop().time() < deadline, "the workflow never slept on a timer"
        history = await handle.fetch_history()
        timers = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED]
        await asyncio.sleep(0.1)
    summary = stack.env.client.data_converter.payload_converter.from_payload(timers[-1].user_metadata.summary, str)
    # The next 10:00 in Berlin, in its offset (+01:00 in winter, +02:00 in summer).
    now = datetime.now(BERLIN)
    day = now.date() if now.hour < 10 else now.date() + timedelta(days=1)
    offset = datetime(day.year, day.month, day.day, 10, tzinfo=BERLIN).isoformat()[-6:]
    assert summary.startswith("sleep until ") and offset in summary and "cron 0 10 * * * Europe/Berlin" in summary


def test_handler_registry_comes_from_entry_points() -> None:
    from importlib.metadata import entry_points

    names = {e.name for e in entry_points(group=ENTRY_POINT_GROUP)}
    assert {"noop", "log", "sleep"} <= names
    async def extra(ctx: object) -> str:
        return "x"
    handlers = load_handlers({"extra": extra})
    assert {"noop", "log", "sleep", "extra"} <= set(handlers)


async def test_a_name_too_big_for_a_search_attribute_is_shown_in_part_and_the_task_lives(
    stack: Stack,
) -> None:
    # 200 characters, within task_name's bound, but 2,402 bytes as Temporal's TaskName value
    # (over its 2 KiB): the create, a rename to it and the task's later operations all work.
    long_name, other = "\U0001F600" * 200, "\U0001F680" * 200
    async with stack.client() as api:
        created = await api.post("/task/create", json={
            "task_name": long_name, "job_details": {"type": "handler", "name": "noop"},
            "schedule_type": "interval", "interval_seconds": 3600})
        assert created.status_code == 201, created.text
        task_id = created.json()["task_id"]
        renamed = await api.post("/task/update", json={"task_id": task_id, "task_name": other})
        assert renamed.status_code == 202, renamed.text
        paused = await api.post(f"/tasks/{task_id}/pause")
        assert paused.status_code == 202, paused.text
        shown = (await api.get(f"/tasks/{task_id}")).json()
        assert (shown["task_name"], shown["status"]) == (other, "PAUSED")
    described = await stack.env.client.get_workflow_handle(f"task-{task_id}").describe()
    name = described.typed_search_attributes.get(attributes.TASK_NAME)
    assert name is not None and 0 < len(name) < 200 and other.startswith(name)
    assert name == attributes.shown_name(other)
    told = await described.static_summary()  # the name it started with, cut to fit
    assert told is not None and told.endswith(" (interval)") and long_name.startswith(told[:-11])
    assert len(json.dumps(told)) <= describe.SUMMARY_BYTES
