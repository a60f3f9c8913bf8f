"""A write carrying one tenant never changes another tenant's task or execution rows, nor
inserts an execution row under another tenant's task, by any writer (direct, batched, the
jobs worker's run rows); each refusal is logged. SQLite and
PostgreSQL alike."""

from __future__ import annotations

from collections.abc import MutableMapping
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine
from structlog.testing import capture_logs

from activities.execution_rows import RunRows
from activities.payloads import JobInput, JobResult
from scheduling.spec import HandlerJob
from store.batch import BatchWriter
from store.models import ExecutionRecord, TaskSnapshot
from store.tasks import (
    get_execution,
    list_dead_letters,
    list_executions,
    read_task,
    save_snapshot,
    write_record,
    write_snapshot,
)
from tests.store.writes import jobs_worker_started, workflow_rows

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
VICTIM, ATTACKER = "tenant-b", "tenant-a"


def snapshot(task_id: str, tenant: str, *, version: int, name: str, status: str = "PENDING") -> TaskSnapshot:
    return TaskSnapshot(
        task_id=task_id, tenant_id=tenant, name=name, schedule_type="cron",
        spec={"cron": "0 10 * * *"}, status=status, next_run_at=T0 + timedelta(hours=1),
        created_at=T0, updated_at=T0, state_version=version,
    )


def execution(execution_id: str, task_id: str, tenant: str, **fields: Any) -> ExecutionRecord:
    return ExecutionRecord(id=execution_id, task_id=task_id, tenant_id=tenant, scheduled_at=T0,
                           **{"status": "RUNNING", **fields})


def refusals(logs: list[MutableMapping[str, Any]]) -> list[MutableMapping[str, Any]]:
    return [entry for entry in logs if entry["event"] == "store.foreign_write_refused"]


def victim_rows(engine: Engine) -> None:
    save_snapshot(engine, snapshot("b-task", VICTIM, version=5, name="payroll"))
    workflow_rows(engine, execution("b-task:1", "b-task", VICTIM, status="COMPLETED", attempts=1,
                                     response_snippet="secret answer"))


def assert_victim_unchanged(engine: Engine) -> None:
    task = read_task(engine, "b-task", VICTIM)
    assert task is not None
    assert (task.tenant_id, task.name, task.status, task.state_version) == (VICTIM, "payroll", "PENDING", 5)
    run = get_execution(engine, "b-task:1")
    assert run is not None
    assert (run.tenant_id, run.task_id, run.status, run.dead_letter, run.response_snippet) == (
        VICTIM, "b-task", "COMPLETED", None, "secret answer")


def test_a_task_row_of_another_tenant_is_not_overwritten(any_engine: Engine) -> None:
    victim_rows(any_engine)
    forged = snapshot("b-task", ATTACKER, version=10**12, name="mine now", status="PAUSED")
    with capture_logs() as logs:
        save_snapshot(any_engine, forged)
    assert_victim_unchanged(any_engine)
    assert read_task(any_engine, "b-task", ATTACKER) is None
    [entry] = refusals(logs)
    assert entry["log_level"] == "warning"
    assert (entry["table"], entry["row_id"], entry["tenant"], entry["owner_tenant"]) == (
        "task", "b-task", ATTACKER, VICTIM)
    # The victim's own later write still lands: its version was never raised by the forgery.
    save_snapshot(any_engine, snapshot("b-task", VICTIM, version=6, name="payroll", status="RUNNING"))
    task = read_task(any_engine, "b-task", VICTIM)
    assert task is not None and task.status == "RUNNING"


def test_an_execution_row_of_another_tenant_is_not_moved_or_changed(any_engine: Engine) -> None:
    victim_rows(any_engine)
    # A final outcome always lands on its own row: here it must not land on B's.
    dead = execution("b-task:1", "a-task", ATTACKER, status="FAILED", attempts=3, dead_letter="open",
                     error="forged")
    same_task = execution("b-task:1", "b-task", ATTACKER, status="FAILED", dead_letter="open")
    other_task = execution("b-task:1", "a-task", VICTIM, status="FAILED", dead_letter="open")
    with capture_logs() as logs:
        workflow_rows(any_engine, dead)
        workflow_rows(any_engine, same_task)
        workflow_rows(any_engine, other_task)  # the right tenant, but the row is another task's
        jobs_worker_started(any_engine, dead.model_copy(update={"trigger": "replay"}))  # a replay reopens only its own row
    assert_victim_unchanged(any_engine)
    assert list_dead_letters(any_engine, tenant_id=ATTACKER, limit=10)[0] == []
    assert [(e["table"], e["tenant"], e["task_id"]) for e in refusals(logs)] == [
        ("task_execution", ATTACKER, "a-task"), ("task_execution", ATTACKER, "b-task"),
        ("task_execution", VICTIM, "a-task"), ("task_execution", ATTACKER, "a-task")]


def test_a_run_and_its_task_row_written_together_change_neither(any_engine: Engine) -> None:
    victim_rows(any_engine)
    with capture_logs() as logs:
        workflow_rows(any_engine, execution("b-task:1", "b-task", ATTACKER, status="FAILED", dead_letter="open"),
                      snapshot=snapshot("b-task", ATTACKER, version=10**12, name="x", status="FAILED"))
    assert_victim_unchanged(any_engine)
    assert {e["table"] for e in refusals(logs)} == {"task", "task_execution"}


def test_a_started_run_of_another_tenant_does_not_touch_its_task(any_engine: Engine) -> None:
    victim_rows(any_engine)
    jobs_worker_started(any_engine, execution("b-task:2", "b-task", ATTACKER, trigger="manual"))
    assert_victim_unchanged(any_engine)  # still PENDING: not shown RUNNING by A's run
    # A's row naming B's task is not inserted: it is listed neither in B's history nor,
    # joined with B's task, among A's dead letters.
    assert get_execution(any_engine, "b-task:2") is None
    rows, _ = list_executions(any_engine, task_id="b-task", limit=10, tenant_id=VICTIM)
    assert [r.id for r in rows] == ["b-task:1"]
    workflow_rows(any_engine, execution("b-task:2", "b-task", ATTACKER, status="FAILED", dead_letter="open"))
    assert list_dead_letters(any_engine, tenant_id=ATTACKER, limit=10)[0] == []


async def test_batched_writes_refuse_the_foreign_one_and_commit_the_rest(any_engine: Engine) -> None:
    victim_rows(any_engine)
    writer = BatchWriter(any_engine)
    try:
        with capture_logs() as logs:
            for write in (
                write_snapshot(any_engine, snapshot("a-task", ATTACKER, version=1, name="own")),
                write_snapshot(any_engine, snapshot("b-task", ATTACKER, version=10**12, name="x")),
                write_record(any_engine, [execution("b-task:1", "b-task", ATTACKER, status="FAILED",
                                                    dead_letter="open")], None),
                write_record(any_engine, [execution("a-task:1", "a-task", ATTACKER, status="COMPLETED")], None),
            ):
                await writer.submit(write)
    finally:
        await writer.aclose()
    assert_victim_unchanged(any_engine)
    own = read_task(any_engine, "a-task", ATTACKER)
    assert own is not None and own.name == "own"
    own_run = get_execution(any_engine, "a-task:1")
    assert own_run is not None and own_run.status == "COMPLETED"
    assert len(refusals(logs)) == 2


async def test_the_jobs_workers_run_rows_refuse_another_tenants_row(any_engine: Engine) -> None:
    victim_rows(any_engine)
    writer = BatchWriter(any_engine)
    rows = RunRows(any_engine, writer)
    forged = JobInput(execution_id="b-task:1", task_id="b-task", tenant_id=ATTACKER, scheduled_at=T0,
                      job=HandlerJob(type="handler", name="noop"))
    try:
        with capture_logs() as logs:
            rows.completed(forged, JobResult(attempt=1, started_at=T0, response_snippet="x"), _Log())
            rows.started(forged, T0, 1, _Log())
            for _ in range(100):  # the RUNNING rows are written beside the job, not awaited
                if len(refusals(logs)) == 2:
                    break
                await writer.submit(lambda connection: None)
    finally:
        await writer.aclose()
    assert_victim_unchanged(any_engine)
    assert len(refusals(logs)) == 2


class _Log:
    """A bound logger stand-in for the run rows' failure lines (none are expected here)."""

    def warning(self, event: str, **fields: Any) -> None:
        raise AssertionError(f"a run row write failed: {event} {fields}")


def test_execution_row_of_another_tenants_task_is_refused(any_engine: Engine) -> None:
    victim_rows(any_engine)
    with capture_logs() as logs:
        # A new row (no row of that id yet) naming B's task under A's tenant, by every writer.
        workflow_rows(any_engine, execution("b-task:forged-1", "b-task", ATTACKER, status="FAILED",
                                             dead_letter="open", error="forged"))
        jobs_worker_started(any_engine, execution("b-task:forged-2", "b-task", ATTACKER))
        workflow_rows(any_engine, execution("b-task:forged-3", "b-task", ATTACKER, status="COMPLETED"))
    for forged in ("b-task:forged-1", "b-task:forged-2", "b-task:forged-3"):
        assert get_execution(any_engine, forged) is None
    assert_victim_unchanged(any_engine)
    assert [(e["table"], e["row_id"], e["tenant"], e["owner_tenant"]) for e in refusals(logs)] == [
        ("task_execution", f"b-task:forged-{n}", ATTACKER, VICTIM) for n in (1, 2, 3)]
    # The task's own tenant still inserts its rows, and so does a run whose task has no row yet.
    workflow_rows(any_engine, execution("b-task:2", "b-task", VICTIM, status="COMPLETED", attempts=1))
    workflow_rows(any_engine, execution("c-task:1", "c-task", ATTACKER, status="COMPLETED"))
    own, unlisted = get_execution(any_engine, "b-task:2"), get_execution(any_engine, "c-task:1")
    assert own is not None and own.status == "COMPLETED" and own.scheduled_at == T0
    assert unlisted is not None and unlisted.tenant_id == ATTACKER
