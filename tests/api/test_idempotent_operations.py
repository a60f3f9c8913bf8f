"""Operations retried as a client retries them, with the same Idempotency-Key: they act once
and answer what they answered first, through the real API, worker and dev server."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import httpx
import pytest
from sqlalchemy import update
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import DeleteWorkflowExecutionRequest
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from api import temporal as gateway
from scheduling.status import workflow_id
from store.models import TASK_TABLE
from tests.api.conftest import ON_BOTH_DATABASES, Stack, serve_api
from tests.api.test_e2e import iso, wait_for_status
from tests.conftest import new_worker
from tests.faults.processes import free_port
from tests.target import TargetServer, hook_comes_up
from workflows.state import TaskState

pytestmark = ON_BOTH_DATABASES

T = TypeVar("T")
HOURLY: dict[str, Any] = {"task_name": "hourly", "job_details": {"type": "handler", "name": "noop"},
                          "schedule_type": "interval", "interval_seconds": 3600}


def _key() -> dict[str, str]:
    return {"Idempotency-Key": f"k-{uuid.uuid4().hex}"}


async def _until(check: Callable[[], Awaitable[T | None]], timeout: float = 40) -> T:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = await check()
        if value:
            return value
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.2)


async def _create(api: httpx.AsyncClient, body: dict[str, Any] = HOURLY) -> str:
    created = await api.post("/task/create", json=body)
    assert created.status_code == 201, created.text
    return str(created.json()["task_id"])


async def _created_then_no_worker(stack: Stack, api: httpx.AsyncClient, queue: str) -> str:
    """A task created while a worker of ``queue`` runs its first workflow task; the worker is
    gone after, with no workflow cache left sticking to it."""
    async with new_worker(stack.env.client, stack.engine, task_queue=queue, max_cached_workflows=0):
        task_id = await _create(api)
        await stack.env.client.get_workflow_handle(workflow_id(task_id)).query("state")
    return task_id


async def _manual_runs(api: httpx.AsyncClient, task_id: str, done: int) -> list[dict[str, Any]]:
    """The task's manual runs, once ``done`` of them have completed."""
    async def completed() -> list[dict[str, Any]]:
        runs = (await api.get(f"/tasks/{task_id}/executions")).json()["items"]
        manual = [r for r in runs if r["trigger"] == "manual"]
        return manual if sum(r["status"] == "COMPLETED" for r in manual) >= done else []
    return await _until(completed)


async def _settled(stack: Stack, task_id: str) -> TaskState:
    """The task's state once every run asked for has ended (none queued, none running)."""
    handle = stack.env.client.get_workflow_handle(workflow_id(task_id))

    async def idle() -> TaskState | None:
        state = await handle.query("state", result_type=TaskState)
        return state if not state.queue and not state.running else None
    return await _until(idle)


def _is_key_conflict(response: httpx.Response) -> bool:
    problem = response.json()
    return response.status_code == 422 and problem.get("field") == "Idempotency-Key"


async def test_a_trigger_sent_twice_with_one_key_runs_once(stack: Stack) -> None:
    async with stack.client() as api:
        task_id = await _create(api)
        key = _key()
        first = await api.post(f"/tasks/{task_id}/trigger", headers=key)
        again = await api.post(f"/tasks/{task_id}/trigger", headers=key)
        assert first.status_code == again.status_code == 202, (first.text, again.text)
        assert again.json() == first.json()
        # Without a key every trigger is a new run.
        assert (await api.post(f"/tasks/{task_id}/trigger")).status_code == 202
        assert (await _settled(stack, task_id)).manual_runs == 2
        assert len(await _manual_runs(api, task_id, done=2)) == 2


async def test_a_trigger_whose_answer_timed_out_is_not_run_again(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first try reaches the workflow but no worker answers in time (504); the client
    retries with its key once a worker is back: the one update Temporal holds is the run."""
    queue = f"idem-{uuid.uuid4()}"
    async with serve_api(stack.env, stack.engine, temporal_task_queue=queue) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60, headers={
                "Authorization": f"Bearer {stack.keys['t1']}"}) as api:
            task_id = await _created_then_no_worker(stack, api, queue)
            usual = gateway.UPDATE_TIMEOUT
            monkeypatch.setattr(gateway, "UPDATE_TIMEOUT", timedelta(seconds=2))
            key = _key()
            lost = await api.post(f"/tasks/{task_id}/trigger", headers=key)
            assert lost.status_code == 504, lost.text
            # The retry waits as long as any: a new worker replays the history first.
            monkeypatch.setattr(gateway, "UPDATE_TIMEOUT", usual)
            async with new_worker(stack.env.client, stack.engine, task_queue=queue):
                retried = await api.post(f"/tasks/{task_id}/trigger", headers=key)
                assert retried.status_code == 202, retried.text
                assert (await api.post(f"/tasks/{task_id}/trigger")).status_code == 202
                # The lost try's run (Temporal held its update) and the one without a key.
                assert (await _settled(stack, task_id)).manual_runs == 2
                assert len(await _manual_runs(api, task_id, done=2)) == 2
                again = await api.post(f"/tasks/{task_id}/trigger", headers=key)
                assert (again.status_code, again.json()) == (202, retried.json())


@pytest.mark.parametrize("row", ["written", "behind"])
async def test_a_cancel_whose_answer_timed_out_answers_its_retry_as_done(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, row: str
) -> None:
    """The cancel reaches the workflow but no worker answers in time (504); once a worker is
    back the task is cancelled, and the retry under the key answers so, not 409, whether the
    task's row says so yet or not."""
    queue = f"idem-{uuid.uuid4()}"
    async with serve_api(stack.env, stack.engine, temporal_task_queue=queue) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60, headers={
                "Authorization": f"Bearer {stack.keys['t1']}"}) as api:
            task_id = await _created_then_no_worker(stack, api, queue)
            monkeypatch.setattr(gateway, "CANCEL_TIMEOUT", timedelta(seconds=2))
            key, body = _key(), {"task_id": task_id, "reason": "done"}
            lost = await api.patch("/task/cancel", json=body, headers=key)
            assert lost.status_code == 504, lost.text
            async with new_worker(stack.env.client, stack.engine, task_queue=queue):
                await wait_for_status(api, task_id, {"CANCELLED"})
                if row == "behind":  # its last write has not landed (the database was away)
                    with stack.engine.begin() as connection:
                        connection.execute(update(TASK_TABLE).where(TASK_TABLE.c.id == task_id)
                                           .values(status="PENDING"))
                retried = await api.patch("/task/cancel", json=body, headers=key)
                assert retried.status_code == 202, retried.text
                assert retried.json()["status"] == "CANCELLED"
                again = await api.patch("/task/cancel", json=body, headers=key)
                assert (again.status_code, again.json()) == (202, retried.json())
                # Without the key, a cancel of a cancelled task is still refused.
                assert (await api.patch("/task/cancel", json=body)).status_code == 409


async def test_a_replay_whose_answer_timed_out_answers_its_retry_as_done(
    stack: Stack, target: TargetServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The replay of an ended task's dead letter reaches Temporal but no worker answers in time
    (504); once a worker is back the run has run again, and the retry under the key answers
    so and runs nothing more."""
    queue = f"idem-{uuid.uuid4()}"
    port = free_port()  # nothing listens here yet: the run fails
    async with serve_api(stack.env, stack.engine, temporal_task_queue=queue) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60, headers={
                "Authorization": f"Bearer {stack.keys['t1']}"}) as api:
            async with new_worker(stack.env.client, stack.engine, task_queue=queue, max_cached_workflows=0):
                created = await api.post("/task/create", json={
                    "task_name": "flaky", "schedule_type": "once", "run_at": iso(datetime.now(UTC)),
                    "job_details": {"type": "http", "url": f"http://127.0.0.1:{port}/hook"},
                    "retry_policy": {"max_attempts": 1}})
                task_id = created.json()["task_id"]
                final = await wait_for_status(api, task_id, {"FAILED"})
            execution_id = final["last_run"]["execution_id"]
            monkeypatch.setattr(gateway, "UPDATE_TIMEOUT", timedelta(seconds=2))
            key = _key()
            lost = await api.post(f"/dead-letters/{execution_id}/replay", headers=key)
            assert lost.status_code == 504, lost.text
            async with hook_comes_up(port) as hits, new_worker(
                    stack.env.client, stack.engine, task_queue=queue):
                await wait_for_status(api, task_id, {"COMPLETED"})
                retried = await api.post(f"/dead-letters/{execution_id}/replay", headers=key)
                await asyncio.sleep(3)  # a second run would show here
                rows = (await api.get(f"/tasks/{task_id}/executions")).json()["items"]
    assert retried.status_code == 202, retried.text
    assert (retried.json()["id"], retried.json()["dead_letter"]) == (execution_id, "replayed")
    assert hits == [execution_id] and [(r["status"], r["dead_letter"]) for r in rows] == [
        ("COMPLETED", "replayed")]  # the replay ran once


async def test_pause_resume_update_and_cancel_retried_act_once_and_answer_the_first_time(
    stack: Stack,
) -> None:
    async with stack.client() as api:
        task_id = await _create(api)
        pause_key, resume_key, update_key, cancel_key = _key(), _key(), _key(), _key()

        paused = await api.post(f"/tasks/{task_id}/pause", json={"reason": "deploy"}, headers=pause_key)
        assert paused.status_code == 202 and paused.json()["status"] == "PAUSED", paused.text
        resumed = await api.post(f"/tasks/{task_id}/resume", headers=resume_key)
        assert resumed.status_code == 202 and resumed.json()["status"] == "PENDING", resumed.text
        # A late retry of the pause answers as the pause did, and does not pause the task again.
        late = await api.post(f"/tasks/{task_id}/pause", json={"reason": "deploy"}, headers=pause_key)
        assert (late.status_code, late.json()) == (202, paused.json())
        assert (await api.get(f"/tasks/{task_id}")).json()["status"] == "PENDING"
        late = await api.post(f"/tasks/{task_id}/resume", headers=resume_key)
        assert (late.status_code, late.json()) == (202, resumed.json())
        # The same key for another body or another operation is refused and changes nothing.
        other = await api.post(f"/tasks/{task_id}/pause", json={"reason": "other"}, headers=pause_key)
        assert _is_key_conflict(other), other.text
        assert _is_key_conflict(await api.post(f"/tasks/{task_id}/trigger", headers=pause_key))
        assert (await api.get(f"/tasks/{task_id}")).json()["status"] == "PENDING"

        renamed = await api.post("/task/update", json={"task_id": task_id, "task_name": "second"},
                                 headers=update_key)
        assert renamed.status_code == 202 and renamed.json()["task_name"] == "second", renamed.text
        third = await api.post("/task/update", json={"task_id": task_id, "task_name": "third"})
        assert third.status_code == 202, third.text
        late = await api.post("/task/update", json={"task_id": task_id, "task_name": "second"},
                              headers=update_key)
        assert (late.status_code, late.json()) == (202, renamed.json())
        changed = await api.post("/task/update", json={"task_id": task_id, "interval_seconds": 7200},
                                 headers=update_key)
        assert _is_key_conflict(changed), changed.text
        task = (await api.get(f"/tasks/{task_id}")).json()
        assert task["task_name"] == "third" and task["schedule"]["interval_seconds"] == 3600, task

        cancelled = await api.patch("/task/cancel", json={"task_id": task_id, "reason": "done"},
                                    headers=cancel_key)
        assert cancelled.status_code == 202, cancelled.text
        await wait_for_status(api, task_id, {"CANCELLED"})
        # A retry of the cancel gets its answer, where a new cancel is told the task has ended.
        late = await api.patch("/task/cancel", json={"task_id": task_id, "reason": "done"},
                               headers=cancel_key)
        assert (late.status_code, late.json()) == (202, cancelled.json())
        fresh = await api.patch("/task/cancel", json={"task_id": task_id, "reason": "done"},
                                headers=_key())
        assert fresh.status_code == 409, fresh.text


async def test_a_dead_letter_replay_retried_with_its_key_replays_once(
    stack: Stack, target: TargetServer
) -> None:
    async with stack.client() as api:
        task_id = await _create(api, {
            "task_name": "always-500", "schedule_type": "once", "run_at": iso(datetime.now(UTC)),
            "job_details": {"type": "http", "url": target.url("/status/500")},
            "retry_policy": {"max_attempts": 1},
        })
        execution_id = (await wait_for_status(api, task_id, {"FAILED"}))["last_run"]["execution_id"]

        def calls() -> int:
            return sum(r.path == "/status/500" for r in target.received)

        async def open_after(n: int) -> bool:
            letters = (await api.get("/dead-letters")).json()["items"]
            return calls() >= n and any(d["id"] == execution_id for d in letters)

        await _until(lambda: open_after(1))
        key = _key()
        replayed = await api.post(f"/dead-letters/{execution_id}/replay", headers=key)
        assert replayed.status_code == 202, replayed.text
        await _until(lambda: open_after(2))  # the replay ran, failed, and is a dead letter again
        late = await api.post(f"/dead-letters/{execution_id}/replay", headers=key)
        assert (late.status_code, late.json()) == (202, replayed.json())
        assert _is_key_conflict(await api.post(f"/tasks/{task_id}/trigger", headers=key))
        # A replay without a key runs it again; a retried replay would have run before it.
        assert (await api.post(f"/dead-letters/{execution_id}/replay")).status_code == 202
        await _until(lambda: open_after(3))
        handle = stack.env.client.get_workflow_handle(workflow_id(task_id))

        async def ended() -> bool:
            return (await handle.describe()).status is not WorkflowExecutionStatus.RUNNING
        await _until(ended)  # the task's last run has ended: no replay is left to run
        assert calls() == 3
        assert {r.key for r in target.received if r.path == "/status/500"} == {execution_id}


async def test_a_key_is_its_tenant_s_own(stack: Stack) -> None:
    key = _key()
    async with stack.client("t1") as mine, stack.client("t2") as theirs:
        my_task, their_task = await _create(mine), await _create(theirs)
        mine_first = await mine.post(f"/tasks/{my_task}/trigger", headers=key)
        assert mine_first.status_code == 202, mine_first.text
        # The other tenant's same key on the first tenant's task gets no stored answer.
        assert (await theirs.post(f"/tasks/{my_task}/trigger", headers=key)).status_code == 404
        their_first = await theirs.post(f"/tasks/{their_task}/trigger", headers=key)
        assert their_first.status_code == 202, their_first.text
        assert their_first.json()["task_id"] == their_task and their_first.json()["tenant_id"] == "t2"
        assert len(await _manual_runs(theirs, their_task, done=1)) == 1
        assert len(await _manual_runs(mine, my_task, done=1)) == 1


async def test_a_create_retried_after_its_workflow_is_gone_returns_the_stored_task(stack: Stack) -> None:
    key = _key()
    async with stack.client() as api:
        first = await api.post("/task/create", json=HOURLY, headers=key)
        assert first.status_code == 201, first.text
        task_id = first.json()["task_id"]
        await wait_for_status(api, task_id, {"PENDING"})
        # As the namespace's retention would: the workflow and its history are deleted.
        client = stack.env.client
        await client.workflow_service.delete_workflow_execution(DeleteWorkflowExecutionRequest(
            namespace=client.namespace, workflow_execution=WorkflowExecution(workflow_id=workflow_id(task_id)),
        ))
        handle = client.get_workflow_handle(workflow_id(task_id))

        async def gone() -> bool:
            try:
                await handle.describe()
            except RPCError as exc:
                return exc.status is RPCStatusCode.NOT_FOUND
            return False

        await _until(gone)
        again = await api.post("/task/create", json=HOURLY, headers=key)
        assert again.status_code == 200, again.text
        stored = (await api.get(f"/tasks/{task_id}")).json()
        # A write of the deleted workflow still in flight may touch the row between the two reads.
        answered = again.json()
        assert datetime.fromisoformat(answered.pop("updated_at")) <= datetime.fromisoformat(stored.pop("updated_at"))
        assert answered == stored and answered["task_id"] == task_id
        assert await gone(), "the retried create started the task's workflow again"
        other = await api.post("/task/create", json={**HOURLY, "task_name": "other"}, headers=key)
        assert _is_key_conflict(other), other.text


async def test_a_key_that_no_record_can_hold_is_refused(stack: Stack) -> None:
    async with stack.client() as api:
        task_id = await _create(api)
        refused = await api.post(f"/tasks/{task_id}/trigger", headers={"Idempotency-Key": "k" * 256})
        assert refused.status_code == 422 and refused.json()["field"] == "Idempotency-Key", refused.text
        runs = (await api.get(f"/tasks/{task_id}/executions")).json()["items"]
        assert runs == []


async def test_the_openapi_document_shows_the_key_on_every_retryable_operation(stack: Stack) -> None:
    async with stack.client() as api:
        paths = (await api.get("/openapi.json")).json()["paths"]
    operations = [("/task/create", "post"), ("/task/recurring", "post"), ("/task/cancel", "patch"),
                  ("/task/update", "post"), ("/tasks/{task_id}/pause", "post"),
                  ("/tasks/{task_id}/resume", "post"), ("/tasks/{task_id}/trigger", "post"),
                  ("/dead-letters/{execution_id}/replay", "post")]
    for path, method in operations:
        headers = [p for p in paths[path][method].get("parameters", []) if p["in"] == "header"]
        assert [(p["name"], p["required"]) for p in headers] == [("Idempotency-Key", False)], path
