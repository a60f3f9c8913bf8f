"""The ``record`` activity against a database that hangs (another connection holds its write
lock): an attempt gives up instead of holding its workflow task, its write stays queued, and
a retry while it is queued waits for that write instead of queueing another."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.bookkeeping import WRITE_STALLED_AFTER, BookkeepingActivities
from activities.payloads import Record
from scheduling.status import ExecutionStatus, execution_id
from store.batch import BatchWriter
from store.models import ExecutionRecord
from tests.workflows.helpers import executions, locked_for_writes, until


class _CountingWriter(BatchWriter):
    """The product's batch writer, counting the writes submitted to it."""

    submitted = 0

    async def submit(self, write: object) -> None:
        self.submitted += 1
        await super().submit(write)  # type: ignore[arg-type]


def _recorder(engine: Engine) -> tuple[_CountingWriter, Callable[[Record], Awaitable[None]],
                                       ActivityEnvironment]:
    """The product's record activity on a counting writer, and an environment to run it in."""
    writer = _CountingWriter(engine)
    return writer, BookkeepingActivities(engine, writer).record, ActivityEnvironment()


def _record(task_id: str) -> Record:
    at = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)
    return Record(executions=[ExecutionRecord(
        id=execution_id(task_id, at), task_id=task_id, tenant_id="t1", scheduled_at=at,
        status=ExecutionStatus.SKIPPED, reason="paused", finished_at=at)])


async def test_a_write_into_a_hanging_database_gives_up_and_its_retry_waits_for_it(
    any_engine: Engine
) -> None:
    writer, record_of, env = _recorder(any_engine)
    record = _record("hang")
    try:
        with locked_for_writes(any_engine):
            for _ in range(2):  # the first attempt, then its retry
                with pytest.raises(ApplicationError) as raised:
                    # Bounded well past the stall limit: before, it waited out the lock.
                    await asyncio.wait_for(env.run(record_of, record),
                                           timeout=WRITE_STALLED_AFTER * 5)
                assert raised.value.type == "DatabaseStalled"
                assert not raised.value.non_retryable
            assert writer.submitted == 1
        await until(lambda: asyncio.sleep(0, writer.stalled_for() == 0))  # the commit ended
        await asyncio.wait_for(env.run(record_of, record), timeout=30)
        # The queued write landed; a retry after it writes the same rows once more (an upsert).
        assert writer.submitted == 2
        assert [(r.status, r.reason) for r in executions(any_engine, "hang")] == [("SKIPPED", "paused")]
        # Another record of the same workflow run is written as usual.
        other = _record("other")
        await env.run(record_of, other)
        assert writer.submitted == 3 and len(executions(any_engine, "other")) == 1
    finally:
        await writer.aclose()


async def test_a_write_that_fails_is_not_waited_for_again(sqlite_engine: Engine) -> None:
    writer, record_of, env = _recorder(sqlite_engine)
    with sqlite_engine.begin() as connection:
        connection.exec_driver_sql("DROP TABLE task_execution")
    try:
        for attempt in (1, 2):
            with pytest.raises(Exception, match="task_execution"):
                await env.run(record_of, _record("gone"))
            assert writer.submitted == attempt  # a failed write is submitted afresh
    finally:
        await writer.aclose()


async def test_a_write_left_queued_when_the_writer_stops_fails_and_its_retry_writes_it(
    sqlite_engine: Engine
) -> None:
    writer, record_of, env = _recorder(sqlite_engine)
    record = _record("stopped")
    with locked_for_writes(sqlite_engine):
        with pytest.raises(ApplicationError):
            await env.run(record_of, record)
        await writer.aclose()  # its drain stops with the write still unanswered
    # The retry is not left waiting on a write no one will commit: it writes it afresh.
    await asyncio.wait_for(env.run(record_of, record), timeout=30)
    assert writer.submitted == 2 and len(executions(sqlite_engine, "stopped")) == 1
    await writer.aclose()

