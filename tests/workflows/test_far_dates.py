"""Task rows stay correct for workflow runs started centuries ahead, as a time-skipping
server's clock gets after many tests, and for runs that start later than others."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine

from scheduling.status import TaskStatus
from store.tasks import list_executions, read_task
from tests.conftest import new_worker, start_time_skipping
from tests.workflows.helpers import spec, start_task
from workflows.record import RUN_WRITES, state_version

BIGINT_MAX = 2**63 - 1


def test_later_runs_outrank_every_write_of_earlier_runs() -> None:
    first = datetime(2026, 11, 30, 12, tzinfo=UTC)
    later = first + timedelta(milliseconds=1)
    # a run's last possible write still loses to the first write of a run started 1 ms later
    assert state_version(first, RUN_WRITES - 1) < state_version(later, 0)
    assert state_version(first, 1) < state_version(first, 2)
    # a history holds at most 51,200 events, each row write at least one of them
    assert RUN_WRITES > 51_200


def test_the_version_fits_a_signed_64_bit_column_for_far_dates() -> None:
    for year in (2262, 2300, 3000, 6400):
        assert state_version(datetime(year, 12, 31, 23, 59, tzinfo=UTC), RUN_WRITES - 1) <= BIGINT_MAX


async def test_a_task_whose_run_starts_after_2262_keeps_its_row(sqlite_engine: Engine) -> None:
    # ms since 1970 times 10**6 passes 2**63 in April 2262: the row write failed and its
    # local activity retried forever, so the task never got past its first write
    env = await start_time_skipping()
    try:
        await env.sleep(datetime(2300, 1, 1, tzinfo=UTC) - await env.get_current_time())
        now = await env.get_current_time()
        assert now.year == 2300
        run_at = now + timedelta(hours=1)
        async with new_worker(env.client, sqlite_engine) as worker:
            handle = await start_task(env, worker.task_queue, spec(schedule_type="once", run_at=run_at))
            state = await handle.result()
    finally:
        await env.shutdown()

    assert state.status is TaskStatus.COMPLETED
    row = read_task(sqlite_engine, state.task_id, "t1")
    assert row is not None and row.status == "COMPLETED" and row.run_count == 1
    assert BIGINT_MAX >= row.state_version > state_version(now - timedelta(seconds=1), 0)
    runs, _ = list_executions(sqlite_engine, task_id=state.task_id, limit=10)
    assert [(r.status, r.scheduled_at) for r in runs] == [("COMPLETED", run_at)]
