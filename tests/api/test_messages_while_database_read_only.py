"""Issue item 5, REST side: cancel, pause, resume and update answer within 2 s and act while
the task database refuses writes (read-only, still readable), with and without an
Idempotency-Key, and the rows catch up once writes are allowed again."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, text
from temporalio.client import WorkflowHandle

from scheduling.status import workflow_id
from store.engine import make_engine
from store.tasks import read_task
from tests.api.conftest import Stack
from tests.api.test_idempotent_operations import HOURLY, _create, _until
from workflows.task import TaskWorkflow

pytestmark = pytest.mark.parametrize("stack", ["postgres"], indirect=True, scope="module")
ACT_WITHIN = 2.0  # seconds: the bound


def _set_read_only(engine: Engine, on: bool) -> None:
    """Make the whole cluster refuse writes (or allow them again), open sessions included."""
    admin = make_engine(engine.url.render_as_string(hide_password=False))
    try:
        with admin.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            if on:
                conn.execute(text("ALTER SYSTEM SET default_transaction_read_only = on"))
            else:
                # A read-only session may still change the cluster's settings once it says so.
                conn.execute(text("SET default_transaction_read_only = off"))
                conn.execute(text("ALTER SYSTEM RESET default_transaction_read_only"))
            conn.execute(text("SELECT pg_reload_conf()"))
    finally:
        admin.dispose()


@contextmanager
def _read_only(engine: Engine) -> Iterator[None]:
    _set_read_only(engine, True)
    try:
        deadline = time.monotonic() + 10
        while True:  # the reload reaches every session on its next statement
            with engine.connect() as conn:
                if conn.execute(text("SHOW default_transaction_read_only")).scalar() == "on":
                    break
            assert time.monotonic() < deadline, "the cluster did not turn read-only"
            time.sleep(0.05)
        yield
    finally:
        _set_read_only(engine, False)


async def _acts(api: httpx.AsyncClient, method: str, url: str, body: Any = None,
                key: str | None = None) -> dict[str, Any]:
    headers = {"Idempotency-Key": key} if key else {}
    started = time.monotonic()
    answer = await api.request(method, url, json=body, headers=headers)
    took = time.monotonic() - started
    assert answer.status_code == 202, (method, url, answer.status_code, answer.text)
    assert took < ACT_WITHIN, (method, url, took)
    result: dict[str, Any] = answer.json()
    return result


@pytest.mark.timeout(180)
async def test_rest_messages_act_within_two_seconds_while_the_database_refuses_writes(stack: Stack) -> None:
    async with stack.client() as api:
        task_id = await _create(api, HOURLY)
        assert await _until(lambda: _row_status(stack, task_id, "PENDING"))
        kept_key, key = f"k-{uuid.uuid4().hex}", f"k-{uuid.uuid4().hex}"
        await _acts(api, "POST", f"/tasks/{task_id}/pause", {"reason": "before"}, key=kept_key)
        await _acts(api, "POST", f"/tasks/{task_id}/resume")
        with _read_only(stack.engine):
            # A key recorded before the outage answers from its record, and refuses another body.
            assert (await _acts(api, "POST", f"/tasks/{task_id}/pause", {"reason": "before"},
                                key=kept_key))["status_reason"] == "before"
            other = await api.post(f"/tasks/{task_id}/pause", json={"reason": "other"},
                                   headers={"Idempotency-Key": kept_key})
            assert other.status_code == 422, other.text
            paused = await _acts(api, "POST", f"/tasks/{task_id}/pause", {"reason": "down"}, key=key)
            assert paused["status"] == "PAUSED"
            resumed = await _acts(api, "POST", f"/tasks/{task_id}/resume", key=f"k-{uuid.uuid4().hex}")
            assert resumed["status"] == "PENDING"
            # A retry under the first key answers as the first try did and acts no more (the
            # update below finds the task resumed).
            again = await _acts(api, "POST", f"/tasks/{task_id}/pause", {"reason": "down"}, key=key)
            assert again["status"] == "PAUSED"
            assert (await api.get(f"/tasks/{task_id}")).status_code == 200  # reads still work
            # What needs a write answers 503, never 500: a create under a key.
            refused = await api.post("/task/create", json=HOURLY,
                                     headers={"Idempotency-Key": f"k-{uuid.uuid4().hex}"})
            assert refused.status_code == 503, refused.text
            updated = await _acts(api, "POST", "/task/update",
                                  {"task_id": task_id, "task_name": "renamed while read-only"},
                                  key=f"k-{uuid.uuid4().hex}")
            assert (updated["task_name"], updated["status"]) == ("renamed while read-only", "PENDING")
            await _acts(api, "PATCH", "/task/cancel", {"task_id": task_id, "reason": "done"})
            handle = stack.env.client.get_workflow_handle_for(TaskWorkflow.run, workflow_id(task_id))
            assert await _until(lambda: _cancelled(handle), timeout=ACT_WITHIN)
            assert read_task(stack.engine, task_id, None).status != "CANCELLED"  # type: ignore[union-attr]
        # Writes allowed again: the row catches up with what the workflow did.
        row = await _until(lambda: _row_status(stack, task_id, "CANCELLED"))
        assert row.name == "renamed while read-only"


async def _row_status(stack: Stack, task_id: str, status: str) -> Any:
    row = read_task(stack.engine, task_id, None)
    return row if row is not None and row.status == status else None


async def _cancelled(handle: WorkflowHandle[Any, Any]) -> bool:
    return (await handle.query(TaskWorkflow.query_state)).status == "CANCELLED"
