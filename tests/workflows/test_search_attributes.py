"""The search attributes operators filter on in Temporal: TaskStatus shows PENDING, PAUSED and
the final states, never the RUNNING of a run in progress (that is on the task row); every
change of what it shows is one upsert, and a one-time task upserts once in its life."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

from sqlalchemy import Engine
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import DescribeWorkflowExecutionRequest
from temporalio.testing import WorkflowEnvironment

from scheduling.status import TaskStatus
from store.tasks import read_task
from tests.conftest import new_worker
from tests.workflows.helpers import Blocker, TaskHandle, handler_job, spec, start_task, until
from workflows import attributes, describe
from workflows.task import PLANNING_AND_TRUST, REPORTED_STARTS, TaskWorkflow


async def _shown(env: WorkflowEnvironment, handle: TaskHandle) -> Any:
    """TaskStatus as Temporal shows it (read alone: the time-skipping server answers an unset
    NextRunAt in a form the SDK cannot decode)."""
    described = await env.client.workflow_service.describe_workflow_execution(
        DescribeWorkflowExecutionRequest(namespace=env.client.namespace,
                                         execution=WorkflowExecution(workflow_id=handle.id)))
    info = described.workflow_execution_info
    [status] = env.client.data_converter.payload_converter.from_payloads(
        [info.search_attributes.indexed_fields["TaskStatus"]])
    return status


async def _upserted_statuses(env: WorkflowEnvironment, handle: TaskHandle) -> list[Any]:
    """Every TaskStatus the workflow's history upserted, in order."""
    statuses = []
    async for event in handle.fetch_history_events():
        if event.HasField("upsert_workflow_search_attributes_event_attributes"):
            fields = event.upsert_workflow_search_attributes_event_attributes.search_attributes
            if "TaskStatus" in fields.indexed_fields:
                statuses.append(env.client.data_converter.payload_converter.from_payloads(
                    [fields.indexed_fields["TaskStatus"]]))
    return [status for [status] in statuses]


async def test_task_status_in_temporal_never_shows_a_run_in_progress(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    now = await time_env.get_current_time()
    blocker = Blocker()
    task = spec(schedule_type="interval", interval_seconds=3600, start_date=now + timedelta(minutes=5),
                job_details=handler_job("block"), heartbeat_timeout_seconds=2)
    async with new_worker(time_env.client, sqlite_engine, handlers={"block": blocker}) as worker:
        handle = await start_task(time_env, worker.task_queue, task)
        result = asyncio.create_task(handle.result())  # lets the clock skip to the first fire
        await asyncio.wait_for(blocker.started.wait(), timeout=30)
        state_id = (await handle.query(TaskWorkflow.query_state)).task_id

        async def row_is(status: str) -> bool:
            row = read_task(sqlite_engine, state_id, "t1")
            return row is not None and row.status == status

        # The run is reported started and written: the row shows RUNNING, Temporal PENDING,
        # with the next fire already as NextRunAt.
        await until(lambda: row_is("RUNNING"))
        running = await _shown(time_env, handle)
        next_run = (await handle.describe()).typed_search_attributes.get(attributes.NEXT_RUN_AT)
        # Paused while the run goes on: both show PAUSED; resumed: the row RUNNING again.
        await handle.execute_update(TaskWorkflow.pause_update, "a moment")
        await until(lambda: row_is("PAUSED"))
        paused = await _shown(time_env, handle)
        await handle.execute_update(TaskWorkflow.resume_update)
        await until(lambda: row_is("RUNNING"))
        resumed = await _shown(time_env, handle)
        await handle.execute_update(TaskWorkflow.cancel_update, "done")
        final = await asyncio.wait_for(result, timeout=30)
        ended = await _shown(time_env, handle)
        upserted = await _upserted_statuses(time_env, handle)

    assert final.status is TaskStatus.CANCELLED and final.cancelled_count == 1
    assert (running, paused, resumed, ended) == ("PENDING", "PAUSED", "PENDING", "CANCELLED")
    assert next_run is not None and abs(next_run - (now + timedelta(minutes=65))) < timedelta(seconds=1)
    # One upsert for each change of what it shows (the start's was PENDING).
    assert upserted == ["PAUSED", "PENDING", "CANCELLED"]


async def _written(env: WorkflowEnvironment, handle: TaskHandle) -> tuple[list[set[str]], list[str]]:
    """The attributes of each upsert in the history, and the patch ids of its patch markers."""
    upserts, patches = [], []
    async for event in handle.fetch_history_events():
        if event.HasField("upsert_workflow_search_attributes_event_attributes"):
            fields = event.upsert_workflow_search_attributes_event_attributes.search_attributes
            upserts.append(set(fields.indexed_fields))
        marker = event.marker_recorded_event_attributes
        if event.HasField("marker_recorded_event_attributes") and marker.marker_name == "core_patch":
            patches.append(env.client.data_converter.payload_converter.from_payloads(
                [marker.details["patch-data"].payloads[0]])[0]["id"])
    return upserts, patches


async def test_a_one_time_task_upserts_once_and_asks_no_patch(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    now = await time_env.get_current_time()
    gate = Blocker()
    run_at = (now + timedelta(minutes=5)).replace(microsecond=0)
    task = spec(schedule_type="once", run_at=run_at, job_details=handler_job("gate"),
                heartbeat_timeout_seconds=2)
    async with new_worker(time_env.client, sqlite_engine, handlers={"gate": gate}) as worker:
        handle = await start_task(time_env, worker.task_queue, task)
        result = asyncio.create_task(handle.result())
        await asyncio.wait_for(gate.started.wait(), timeout=30)
        task_id = (await handle.query(TaskWorkflow.query_state)).task_id

        async def running() -> bool:
            row = read_task(sqlite_engine, task_id, "t1")
            return row is not None and row.status == "RUNNING"

        # The run is reported started: the row has no next run any more; Temporal still shows
        # the run's instant until the task's one upsert at its end.
        await until(running)
        row = read_task(sqlite_engine, task_id, "t1")
        shown = (await handle.describe()).typed_search_attributes.get(attributes.NEXT_RUN_AT)
        gate.open.set()
        final = await asyncio.wait_for(result, timeout=30)
        ended = await _shown(time_env, handle)
        upserts, patches = await _written(time_env, handle)

    assert final.status is TaskStatus.COMPLETED and final.success_count == 1
    assert row is not None and row.next_run_at is None
    assert shown == run_at
    assert ended == "COMPLETED"
    assert upserts == [{"TaskStatus", "NextRunAt"}]
    assert patches == []


async def test_a_start_from_an_older_api_asks_the_patches_and_runs_the_same(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    # An API of release 1 or before starts without a release in the input: the workflow asks
    # its patches, as every history recorded before asked them.
    now = await time_env.get_current_time()
    task = spec(schedule_type="once", run_at=(now + timedelta(minutes=5)).replace(microsecond=0))
    async with new_worker(time_env.client, sqlite_engine) as worker:
        handle = await start_task(time_env, worker.task_queue, task, release=0)
        final = await asyncio.wait_for(handle.result(), timeout=30)
        upserts, patches = await _written(time_env, handle)

    assert final.status is TaskStatus.COMPLETED and final.success_count == 1
    assert patches == [REPORTED_STARTS, PLANNING_AND_TRUST]
    assert upserts == [{"TemporalChangeVersion"}, {"TemporalChangeVersion"},
                       {"TaskStatus", "NextRunAt"}]


def test_task_name_shows_the_longest_start_of_the_name_that_fits() -> None:
    assert attributes.shown_name("ui-visible") == "ui-visible"
    assert attributes.shown_name("a" * 200) == "a" * 200
    for name in ("\U0001F600" * 200, "é" * 200, "a" * 100 + "\U0001F600" * 100):
        shown = attributes.shown_name(name)
        assert name.startswith(shown) and len(json.dumps(shown)) <= attributes.NAME_BYTES
        assert len(json.dumps(name[:len(shown) + 1])) > attributes.NAME_BYTES


def test_a_summary_keeps_its_tail_and_cuts_its_head_to_fit() -> None:
    tail = " at 2026-12-07T10:00:00+00:00"
    assert describe.summary("POST https://example.com/hook", tail) == "POST https://example.com/hook" + tail
    for head in ("POST https://example.com/" + "a" * 2000, "\U0001F600" * 200):
        told = describe.summary(head, tail)
        assert told.endswith(tail) and head.startswith(told.removesuffix(tail))
        assert len(json.dumps(told)) <= describe.SUMMARY_BYTES
