"""The store's batch writes applied one at a time, each as its product writer issues it."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import Connection, Engine

from store.models import ExecutionRecord, TaskSnapshot
from store.tasks import write_completed, write_record, write_started


def commit(engine: Engine, write: Callable[[Connection], None]) -> None:
    """One write in a transaction of its own."""
    with engine.begin() as connection:
        write(connection)


def workflow_rows(engine: Engine, *records: ExecutionRecord, snapshot: TaskSnapshot | None = None) -> None:
    """Execution rows and the task row after them, as the workflow's ``record`` writes them."""
    commit(engine, write_record(engine, records, snapshot))


def jobs_worker_started(engine: Engine, record: ExecutionRecord) -> None:
    """The jobs worker's RUNNING row of a run that started."""
    commit(engine, write_started(engine, record))


def jobs_worker_completed(engine: Engine, record: ExecutionRecord) -> None:
    """The jobs worker's COMPLETED row, written before the workflow has the outcome."""
    commit(engine, write_completed(engine, record))
