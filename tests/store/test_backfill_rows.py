"""The row of an instant a backfill runs again: reopened by the backfill's start, replaced
whole by its outcome, never reopened by its own late writes (SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine

from store.backfill import rows_by_id
from store.models import ExecutionRecord
from store.tasks import get_execution
from tests.store.writes import jobs_worker_completed, jobs_worker_started, workflow_rows

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
LATER = T0 + timedelta(days=3)


def run(status: str, **fields: object) -> ExecutionRecord:
    return ExecutionRecord.model_validate({
        "id": "a:1", "task_id": "a", "tenant_id": "t1", "scheduled_at": T0, "instant": T0,
        "status": status, **fields})


def failed_earlier(engine: Engine) -> None:
    workflow_rows(engine, run("FAILED", attempts=3, started_at=T0, finished_at=T0 + timedelta(seconds=1),
                              error="HttpStatus: answered 500", http_status=500, dead_letter="open"))


def test_a_backfills_start_reopens_the_row_and_its_outcome_replaces_the_earlier(any_engine: Engine) -> None:
    failed_earlier(any_engine)
    jobs_worker_started(any_engine, run("RUNNING", trigger="backfill", attempts=1, started_at=LATER))
    reopened = get_execution(any_engine, "a:1")
    assert reopened is not None
    assert (reopened.status, reopened.trigger, reopened.dead_letter, reopened.error) == (
        "RUNNING", "backfill", None, None)
    jobs_worker_completed(any_engine, run("COMPLETED", trigger="backfill", attempts=1, started_at=LATER,
                                          finished_at=LATER + timedelta(seconds=1), http_status=200))
    workflow_rows(any_engine, run("COMPLETED", trigger="backfill", attempts=1, started_at=LATER,
                                  finished_at=LATER + timedelta(seconds=1), http_status=200,
                                  reason="backfilled; before: FAILED (HttpStatus: answered 500)"))
    row = get_execution(any_engine, "a:1")
    assert row is not None
    assert (row.status, row.trigger, row.http_status, row.error, row.dead_letter, row.started_at) == (
        "COMPLETED", "backfill", 200, None, None, LATER)
    assert row.reason == "backfilled; before: FAILED (HttpStatus: answered 500)"


def test_a_late_start_of_the_backfill_run_never_reopens_its_own_outcome(any_engine: Engine) -> None:
    failed_earlier(any_engine)
    jobs_worker_started(any_engine, run("RUNNING", trigger="backfill", attempts=1, started_at=LATER))
    workflow_rows(any_engine, run("COMPLETED", trigger="backfill", attempts=1, started_at=LATER,
                                  finished_at=LATER + timedelta(seconds=1), http_status=200))
    # attempt 1's start written again, late in its batch; a retry's start has no start time
    jobs_worker_started(any_engine, run("RUNNING", trigger="backfill", attempts=1, started_at=LATER))
    jobs_worker_started(any_engine, run("RUNNING", trigger="backfill", attempts=2))
    row = get_execution(any_engine, "a:1")
    assert row is not None and (row.status, row.attempts) == ("COMPLETED", 1)


def test_a_later_backfill_reopens_an_earlier_backfills_row(any_engine: Engine) -> None:
    workflow_rows(any_engine, run("COMPLETED", trigger="backfill", attempts=1, started_at=T0,
                                  finished_at=T0 + timedelta(seconds=1), http_status=200))
    jobs_worker_started(any_engine, run("RUNNING", trigger="backfill", attempts=1, started_at=LATER))
    row = get_execution(any_engine, "a:1")
    assert row is not None and (row.status, row.started_at) == ("RUNNING", LATER)


def test_rows_by_id_reads_only_the_tasks_own_tenants_rows(any_engine: Engine) -> None:
    failed_earlier(any_engine)
    assert set(rows_by_id(any_engine, "a", "t1", ["a:1", "a:2"])) == {"a:1"}
    assert rows_by_id(any_engine, "a", "t2", ["a:1"]) == {}
    assert rows_by_id(any_engine, "b", "t1", ["a:1"]) == {}
