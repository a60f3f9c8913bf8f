"""Service-wide counts for the operator's metrics: aggregate reads over every tenant's rows.

Each read is one aggregate statement whose answer has a bounded size (a row per status, skip
reason and trigger), however many rows the tables hold; the execution table is read in one pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine, case, func
from sqlalchemy import select as sa_select  # sqlmodel's select takes at most four columns
from sqlalchemy.orm import Session
from sqlmodel import col, select

from store.models import Task, TaskExecution

# Upper bounds of the lateness histogram, in seconds: from a few milliseconds (a run on its
# instant) to the minutes of a catch-up after an outage.
LATENESS_BOUNDS_SECONDS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300,
)


@dataclass(frozen=True)
class Lateness:
    """Cumulative counts of runs whose first attempt started at most each bound late."""

    buckets: tuple[int, ...]  # one per LATENESS_BOUNDS_SECONDS, cumulative
    count: int
    sum_seconds: float


@dataclass(frozen=True)
class ServiceCounts:
    """One reading of the tables: tasks, executions, lateness and open dead letters."""

    tasks: dict[str, int] = field(default_factory=dict)  # by status
    executions: dict[tuple[str, str], int] = field(default_factory=dict)  # by (status, skip reason)
    lateness: dict[str, Lateness] = field(default_factory=dict)  # by trigger
    dead_letters_open: int = 0
    overdue_runs: int = 0  # tasks whose run is overdue now


def task_counts(session: Session) -> dict[str, int]:
    """Tasks by status, all tenants."""
    rows = session.execute(select(Task.status, func.count()).group_by(col(Task.status))).all()
    return {status: int(count) for status, count in rows}


def execution_counts(
    session: Session, bounds_seconds: Sequence[float] = LATENESS_BOUNDS_SECONDS
) -> tuple[dict[tuple[str, str], int], dict[str, Lateness]]:
    """Execution rows by (status, reason), the reason kept for SKIPPED rows only; and the runs'
    start lateness by trigger as cumulative histogram buckets. One pass over the table."""
    lateness = col(TaskExecution.lateness_ms)
    keys = [col(TaskExecution.status), col(TaskExecution.reason), col(TaskExecution.trigger)]
    columns: list[Any] = [
        *keys, func.count(), func.count(lateness), func.sum(lateness),
        *(func.sum(case((lateness <= bound * 1000, 1), else_=0)) for bound in bounds_seconds),
    ]
    rows = session.execute(sa_select(*columns).group_by(*keys)).all()
    totals: dict[tuple[str, str], int] = {}
    started: dict[str, list[float]] = {}  # trigger: [count, sum in ms, *buckets]
    for row in rows:
        status, reason, trigger = row[0], row[1], row[2]
        key = (status, reason if status == "SKIPPED" and reason else "")
        totals[key] = totals.get(key, 0) + int(row[3])
        if row[4]:
            sums = started.setdefault(trigger, [0.0] * (2 + len(bounds_seconds)))
            for i in range(len(sums)):
                sums[i] += float(row[4 + i] or 0)
    histograms = {
        trigger: Lateness(buckets=tuple(int(n) for n in sums[2:]), count=int(sums[0]),
                          sum_seconds=sums[1] / 1000)
        for trigger, sums in started.items()
    }
    return totals, histograms


def open_dead_letters(session: Session) -> int:
    """Runs that exhausted their retries and were neither replayed nor dismissed."""
    query = select(func.count()).select_from(TaskExecution).where(
        col(TaskExecution.dead_letter) == "open"
    )
    return int(session.execute(query).scalar_one())


def overdue_tasks(session: Session) -> int:
    """Tasks with a run overdue now (their alarm raised and not yet cleared)."""
    query = select(func.count()).select_from(Task).where(col(Task.overdue_since).is_not(None))
    return int(session.execute(query).scalar_one())


def read_service_counts(engine: Engine) -> ServiceCounts:
    """Every count above, read in one session."""
    with Session(engine) as session:
        executions, lateness = execution_counts(session)
        return ServiceCounts(
            tasks=task_counts(session),
            executions=executions,
            lateness=lateness,
            dead_letters_open=open_dead_letters(session),
            overdue_runs=overdue_tasks(session),
        )
