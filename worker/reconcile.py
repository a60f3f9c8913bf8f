"""The reconciler: repairs the rare gap between Temporal and the database.

A task exists in two places: its workflow and its row. The API starts the workflow first and
the workflow writes its own row, so a crash between the two writes leaves at most a short gap.
The reconciler closes what is left, in every worker (it is idempotent):
- a row whose workflow is missing (e.g. Temporal's store was restored from a backup) gets its
  workflow started again from the row; a row whose workflow has ended without saying so (e.g.
  terminated by an operator) is marked with how it ended;
- a running workflow without a row gets its row, from the workflow's own state.

Only a workflow closed by something else than itself can leave a row behind in normal running,
so most passes list just the task workflows terminated, cancelled, failed or timed out since the
pass before. The full comparison, which lists every running task workflow of the window, runs
at start and then at a longer period: on the dev server's SQLite visibility, with 15,000 to
20,000 tasks, its pages took 1 to 10 s each (91 s of listing in 4 minutes).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import structlog
from sqlalchemy import Engine
from sqlalchemy.orm import Session
from sqlmodel import col, select
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from scheduling.fire import next_fire
from scheduling.spec import ScheduleType, TaskSpec
from scheduling.status import workflow_id
from store.events import record_event
from store.models import Task, TaskEventRecord
from store.quotas import ACTIVE_STATUSES
from store.tasks import mark_task, read_task, save_snapshot, scheduled_runs_executed
from store.upcoming import tasks_due_in_second
from workflows.events import MARKED, RECONCILER
from workflows.starter import start_task_workflow, state_from_row
from workflows.state import TaskState

log = structlog.get_logger("task_scheduler.reconcile")

CLOSED_AS = {
    WorkflowExecutionStatus.TERMINATED: ("CANCELLED", "workflow terminated in Temporal"),
    WorkflowExecutionStatus.CANCELED: ("CANCELLED", "workflow cancelled in Temporal"),
    WorkflowExecutionStatus.FAILED: ("FAILED", "workflow failed in Temporal"),
    WorkflowExecutionStatus.TIMED_OUT: ("FAILED", "workflow timed out in Temporal"),
}
# The same statuses in a visibility query.
CLOSED_QUERY = "'Terminated', 'Canceled', 'Failed', 'TimedOut'"
# How long after closing a workflow may still be missing from a visibility listing.
LISTING_LAG = timedelta(seconds=60)
REPAIR_TRIES = 10  # passes that try a failing repair before it is left to the logs


@dataclass
class ReconcileReport:
    full: bool = False
    listed: int = 0  # workflows the pass read from visibility
    restarted: list[str] = field(default_factory=list)
    marked: list[str] = field(default_factory=list)
    rows_written: list[str] = field(default_factory=list)


class Reconciler:
    """Compares recent task rows and task workflows and repairs the differences."""

    def __init__(
        self,
        engine: Engine,
        client: Client,
        task_queue: str,
        *,
        grace: timedelta = timedelta(seconds=30),
        window: timedelta = timedelta(days=1),
        full_every: timedelta = timedelta(hours=1),
    ) -> None:
        self._full_every = full_every
        self._last_full: datetime | None = None
        self._last_pass: datetime | None = None
        self._failed: dict[str, int] = {}  # task id -> repairs of it that failed
        self._engine = engine
        self._client = client
        self._task_queue = task_queue
        self._grace = grace
        self._window = window

    async def run_forever(self, every: timedelta, stop: asyncio.Event) -> None:
        """Reconcile every period until ``stop`` is set; errors are logged and retried."""
        while not stop.is_set():
            try:
                report = await self.reconcile_once()
                if report.restarted or report.marked or report.rows_written:
                    log.warning("reconcile.repaired", **report.__dict__)
            except Exception as exc:  # the next period tries again
                log.error("reconcile.failed", error=f"{type(exc).__name__}: {exc}")
            try:
                await asyncio.wait_for(stop.wait(), every.total_seconds())
            except TimeoutError:
                pass

    async def reconcile_once(self) -> ReconcileReport:
        """The full comparison when it is due (the first pass, then every ``full_every``),
        otherwise a look at the task workflows closed since the pass before."""
        now = datetime.now(UTC)
        earlier = list(self._failed)
        # Every pass looks at the workflows closed since the pass before; the first, at those
        # closed within the window (a terminate while no reconciler ran, of a task of any age).
        since = now - self._window if self._last_pass is None else self._last_pass - LISTING_LAG
        if self._last_pass is None or self._last_full is None or (
            now - self._last_full >= self._full_every
        ):
            report = await self._full_pass(now)
            closed = await self._closed_since(since, now)
            report.listed += closed.listed
            report.marked += [i for i in closed.marked if i not in report.marked]
            report.restarted += [i for i in closed.restarted if i not in report.restarted]
            self._last_full = now
        else:
            report = await self._closed_since(since, now)
        # The repairs that failed in the passes before (a blip of the database or of Temporal):
        # their closes are behind the window of the listing now.
        again = await self._active([i for i in earlier if i in self._failed])
        for gone in set(earlier) - set(again):
            self._failed.pop(gone, None)
        await self._repair_rows(again, now, report)
        self._last_pass = now
        return report

    async def _full_pass(self, now: datetime) -> ReconcileReport:
        """Every row and every running workflow created within the window."""
        report = ReconcileReport(full=True)
        running = await self._running_workflows(now)
        report.listed = len(running)
        await self._rows_without_workflows(now, running, report)
        await self._workflows_without_rows(now, running, report)
        return report

    async def _closed_since(self, since: datetime, now: datetime) -> ReconcileReport:
        """Rows still active whose workflow closed after ``since`` without writing its end."""
        report = ReconcileReport()
        query = (f"WorkflowType = 'TaskWorkflow' AND TaskQueue = '{self._task_queue}' "
                 f"AND ExecutionStatus IN ({CLOSED_QUERY}) AND CloseTime > '{_iso(since)}'")
        closed = {w.id.removeprefix("task-") async for w in self._client.list_workflows(query)
                  if w.id.startswith("task-")}
        report.listed = len(closed)
        if not closed:
            return report

        await self._repair_rows(await self._active(sorted(closed)), now, report)
        return report

    async def _active(self, ids: list[str]) -> list[str]:
        """Those of ``ids`` whose rows are still active."""
        def active(candidates: list[str]) -> list[str]:
            with Session(self._engine) as session:
                return list(session.scalars(select(Task.id).where(
                    col(Task.id).in_(candidates), col(Task.status).in_(ACTIVE_STATUSES)
                )))

        found: list[str] = []
        for start in range(0, len(ids), 500):
            found += await asyncio.to_thread(active, ids[start:start + 500])
        return found

    async def _running_workflows(self, now: datetime) -> dict[str, datetime | None]:
        """Task id -> start of the current run, of every running task workflow of this queue
        started within the window: one listing, not a describe per task."""
        query = (f"WorkflowType = 'TaskWorkflow' AND ExecutionStatus = 'Running' "
                 f"AND TaskQueue = '{self._task_queue}' AND StartTime > '{_iso(now - self._window)}'")
        return {
            w.id.removeprefix("task-"): w.start_time
            async for w in self._client.list_workflows(query)
            if w.id.startswith("task-")
        }

    async def _rows_without_workflows(
        self, now: datetime, running: dict[str, datetime | None], report: ReconcileReport
    ) -> None:
        def recent_ids() -> list[str]:
            with Session(self._engine) as session:
                return list(session.scalars(select(Task.id).where(
                    col(Task.status).in_(ACTIVE_STATUSES),
                    col(Task.created_at) >= now - self._window,
                    col(Task.updated_at) <= now - self._grace,
                )))

        # Only a row whose workflow the listing did not show is looked at closely (the
        # listing may lag a run that has just continued as new: describe tells).
        missing = [i for i in await asyncio.to_thread(recent_ids) if i not in running]
        await self._repair_rows(missing, now, report)

    async def _repair_rows(self, task_ids: list[str], now: datetime, report: ReconcileReport) -> None:
        """Describe each task's workflow: start it again when it is gone, mark the row when it
        closed without writing its end; a running one is left alone."""
        for task_id in task_ids:
            try:
                await self._repair_row(task_id, now, report)
            except Exception as exc:  # one row (say, a spec this release refuses) stops no other
                tries = self._failed.pop(task_id, 0) + 1
                if tries < REPAIR_TRIES:  # the passes after try it again
                    self._failed[task_id] = tries
                log.error("reconcile.row_failed", task_id=task_id, tries=tries,
                          error=f"{type(exc).__name__}: {exc}")
            else:
                self._failed.pop(task_id, None)

    async def _repair_row(self, task_id: str, now: datetime, report: ReconcileReport) -> None:
        # The row as it was before Temporal was asked: a new run of the task that writes it
        # after the answer (a replay, another replica's restart) is not marked ended.
        seen = await asyncio.to_thread(read_task, self._engine, task_id, None)
        if seen is None:
            return
        handle = self._client.get_workflow_handle(workflow_id(task_id))
        try:
            description = await handle.describe()
        except RPCError as exc:
            if exc.status is not RPCStatusCode.NOT_FOUND:
                raise
            if await self._restart(seen, now):
                report.restarted.append(task_id)
            return
        closed = CLOSED_AS.get(description.status) if description.status else None
        if closed is not None:
            status, reason = closed
            if await asyncio.to_thread(mark_task, self._engine, task_id, status=status, reason=reason,
                                       seen_version=seen.state_version):
                await asyncio.to_thread(_record_marked, self._engine, task_id, status, reason)
                report.marked.append(task_id)

    async def _restart(self, row: Task, now: datetime) -> bool:
        """Start the task's workflow again from its row; False if one runs already (another
        replica's)."""
        spec = TaskSpec.model_validate(row.spec)
        if spec.schedule_type is ScheduleType.ONCE:
            upcoming = spec.run_at
        else:
            upcoming = next_fire(spec, anchor=row.created_at, after=now)
        executed = await asyncio.to_thread(scheduled_runs_executed, self._engine, row.id)
        state = state_from_row(row, next_fire_at=upcoming, executed=executed,
                               reason="restarted by the reconciler")
        if (instant := state.next_instant()) is not None:
            # The herd its next run joins, counted as a create counts it.
            state.crowd = await asyncio.to_thread(tasks_due_in_second, self._engine, instant,
                                                  besides=row.id)
        started = await start_task_workflow(
            self._client, task_queue=self._task_queue, task_id=row.id, tenant_id=row.tenant_id,
            spec=spec, created_at=row.created_at, state=state, actor=RECONCILER,
        )
        if started:
            log.warning("reconcile.restarted", task_id=row.id, tenant=row.tenant_id)
        return started

    async def _workflows_without_rows(
        self, now: datetime, running: dict[str, datetime | None], report: ReconcileReport
    ) -> None:
        # A workflow started within the grace period may not have written its row yet.
        until = now - self._grace
        task_ids = [i for i, started in running.items() if started is not None and started < until]
        if not task_ids:
            return

        def known(candidates: list[str]) -> set[str]:
            with Session(self._engine) as session:
                return set(session.scalars(select(Task.id).where(col(Task.id).in_(candidates))))

        present: set[str] = set()
        for start in range(0, len(task_ids), 500):
            present |= await asyncio.to_thread(known, task_ids[start:start + 500])
        for task_id in (t for t in task_ids if t not in present):
            handle = self._client.get_workflow_handle(workflow_id(task_id))
            try:
                state: TaskState = await handle.query("state", result_type=TaskState)
            except RPCError as exc:
                # No worker answers right now; once one runs, the workflow writes its own row.
                log.warning("reconcile.query_failed", task_id=task_id, error=exc.message)
                continue
            snapshot = state.snapshot(state.next_run_at(now), updated_at=now)
            await asyncio.to_thread(save_snapshot, self._engine, snapshot)
            report.rows_written.append(task_id)


def _iso(moment: datetime) -> str:
    """A UTC instant as a visibility query writes it."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _record_marked(engine: Engine, task_id: str, status: str, reason: str) -> None:
    """The task's history notes how its workflow ended without saying so (once per status)."""
    row = read_task(engine, task_id, None)
    if row is None:
        return
    record_event(engine, TaskEventRecord(
        id=f"{task_id}:{RECONCILER.replace(' ', '-')}:{status}", task_id=task_id,
        tenant_id=row.tenant_id, at=datetime.now(UTC), actor=RECONCILER, action=MARKED,
        spec_version=row.spec_version, detail={"status": status, "reason": reason}))
