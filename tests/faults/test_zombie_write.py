"""Found by the soak (bench/soak.py) after a Temporal restart under load: a workflow task that
timed out on an overloaded worker still ran its local activities. Its decision (the fire is
due while a run is in flight: skip it, "overlap") was discarded by Temporal, and the retried
workflow task ran that fire instead; but the zombie's late SAVE_EXECUTION(SKIPPED) landed
after the run's RECORD_RUN(COMPLETED) and overwrote it: the target had the run's effect while
its row said SKIPPED.

Local activities are not rolled back with their workflow task, so a bookkeeping write must
never let a skip replace a run. This replays that order of writes against the store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine

from store.models import ExecutionRecord
from store.tasks import get_execution
from tests.store.writes import workflow_rows


def _record(status: str, **fields: object) -> ExecutionRecord:
    scheduled = datetime(2026, 11, 30, 3, 10, 25, 201000, tzinfo=UTC)
    return ExecutionRecord(
        id=f"c1379dc5:{scheduled.isoformat(timespec='milliseconds').replace('+00:00', 'Z')}",
        task_id="c1379dc5", tenant_id="faults", scheduled_at=scheduled, status=status, **fields,
    )


def test_late_skip_from_a_timed_out_workflow_task_does_not_overwrite_a_run(any_engine: Engine) -> None:
    ran = _record("COMPLETED", trigger="catchup", attempts=1, http_status=200,
                  started_at=datetime.now(UTC), finished_at=datetime.now(UTC))
    workflow_rows(any_engine, ran)  # the retried workflow task ran the fire and recorded it
    zombie = _record("SKIPPED", reason="overlap", finished_at=datetime.now(UTC) - timedelta(seconds=10))
    workflow_rows(any_engine, zombie)  # the timed-out task's write arrives afterwards
    row = get_execution(any_engine, ran.id)
    assert row is not None
    assert (row.status, row.reason, row.http_status) == ("COMPLETED", None, 200)


def test_late_skip_does_not_overwrite_a_started_run(any_engine: Engine) -> None:
    workflow_rows(any_engine, _record("RUNNING", attempts=1, started_at=datetime.now(UTC)))
    workflow_rows(any_engine, _record("SKIPPED", reason="overlap"))
    row = get_execution(any_engine, _record("RUNNING").id)
    assert row is not None and row.status == "RUNNING"


def test_a_run_still_replaces_an_earlier_zombie_skip(any_engine: Engine) -> None:
    workflow_rows(any_engine, _record("SKIPPED", reason="overlap"))
    workflow_rows(any_engine, _record("COMPLETED", attempts=1, http_status=200))
    row = get_execution(any_engine, _record("SKIPPED").id)
    assert row is not None and row.status == "COMPLETED"
