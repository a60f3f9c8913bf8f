"""The task service: what each endpoint does, between the database and Temporal."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import anyio
import structlog
from anyio import to_thread
from pydantic import ValidationError
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from activities.handlers import Handler, args_check
from activities.workflow_jobs import WorkflowJobRules
from api.backfill import backfill
from api.calendars import CalendarService, judged_again
from api.compute import FireMath
from api.database import in_thread
from api.errors import (
    InvalidTask,
    NotFound,
    ServiceUnavailable,
    TaskConflict,
    TaskNotFound,
)
from api.idempotency import claim_create, create_request, once, task_of_key
from api.rendering import Rendering
from api.schemas import (
    BackfillIn,
    BackfillOut,
    DeadLetterOut,
    DeadLetterPage,
    ExecutionOut,
    ExecutionPage,
    TaskOut,
    TaskPage,
)
from api.temporal import TemporalGateway
from api.validation import TaskRules, TenantUsage, validate_new_task
from outbound.egress import EgressPolicy
from scheduling import policy
from scheduling.spec import TaskChanges, TaskSpec
from scheduling.status import DeadLetter, ExecutionStatus, ResumeMissed, TaskStatus
from store.batch import BatchWriter
from store.idempotency import complete_key
from store.models import Task, TaskExecution, TaskSnapshot
from store.quotas import ActiveCounts, Quota, quota_and_active, quota_for
from store.tasks import (
    get_execution,
    list_dead_letters,
    list_executions,
    list_tasks,
    read_task,
    scheduled_runs_executed,
    set_dead_letter,
    write_snapshot,
)
from store.upcoming import tasks_due_in_second
from workflows.events import Origin
from workflows.state import TaskState, TaskWorkflowInput

log = structlog.get_logger("task_scheduler.api")
T = TypeVar("T")


@dataclass(frozen=True)
class Principal:
    """Who is calling: a tenant, possibly with admin rights."""

    tenant_id: str
    is_admin: bool = False
    key_id: str | None = None  # the actor of the changes it makes, in the task's history


class TaskService:
    """Creates tasks and relays changes to their workflows."""

    def __init__(
        self,
        engine: Engine,
        temporal: TemporalGateway,
        handlers: Collection[str] | Mapping[str, Handler],
        egress: EgressPolicy | None = None,
        quota_defaults: Quota | None = None,
        workflow_jobs: WorkflowJobRules | None = None,
        *,
        fire_math: FireMath,
    ) -> None:
        self.engine = engine
        self.temporal = temporal
        # No egress policy: the guard's defaults; no workflow job rules: such jobs start nothing.
        checks = {name: check for name, handler in handlers.items()
                  if (check := args_check(handler)) is not None} if isinstance(handlers, Mapping) else {}
        self.rules = TaskRules(frozenset(handlers), egress or EgressPolicy(),
                               workflow_jobs or WorkflowJobRules(), handler_args=checks)
        self.quota_defaults = quota_defaults or Quota()
        self.active_counts = ActiveCounts()
        # No linger: rows that arrive while a commit runs go together into the next one.
        self.writer = BatchWriter(engine, linger=0)
        self.fire_math = fire_math
        self.rendering = Rendering()
        self.calendars = CalendarService(engine, fire_math)

    async def aclose(self) -> None:
        """Stop the row writer (at shutdown, after the last request)."""
        await self.writer.aclose()

    # ------------------------------------------------------------- create and read
    async def create(
        self,
        who: Principal,
        spec: TaskSpec,
        *,
        recurring_only: bool = False,
        body_size: int = 0,
        idempotency_key: str | None = None,
        usage: TenantUsage | None = None,
    ) -> tuple[TaskOut, bool]:
        """Validate, start the workflow, then write the row; 201 means the task will run.

        ``usage`` is the tenant's quota and active count when the caller read them already
        (with the key); otherwise they are read here. Returns the task and whether this call
        created it (False: an earlier request with the same Idempotency-Key and body did)."""
        if idempotency_key is not None:
            earlier = await self._created(who, idempotency_key, create_request(spec, recurring_only))
            if earlier is not None:
                return earlier, False
        now = datetime.now(UTC)
        usage = usage or await self._usage(who.tenant_id)
        await validate_new_task(spec, usage, self.rules, now=now, body_size=body_size,
                                recurring_only=recurring_only, caller=who.tenant_id)
        await self.calendars.check_refs(who.tenant_id, spec)
        await self.calendars.check_runs(who.tenant_id, spec, now)
        task_id = uuid.uuid4().hex
        if idempotency_key is not None:
            task_id = await claim_create(self.engine, who.tenant_id, idempotency_key,
                                         create_request(spec, recurring_only), task_id)
        snapshot = _first_snapshot(task_id, who.tenant_id, spec, now)
        started = await self.temporal.start_task(
            task_id=task_id, tenant_id=who.tenant_id, spec=spec, created_at=now, actor=who.key_id,
            crowd=await self._crowd(snapshot.next_run_at),
        )
        if not started:
            # Same key, same body: the task exists already (or is being created right now).
            return await self._existing(who, snapshot), False
        self.active_counts.created(who.tenant_id)
        await self._write_first_row(snapshot, idempotency_key)
        log.info("task.created", task_id=task_id, tenant=who.tenant_id, schedule=spec.schedule_type.value)
        return TaskOut.of(snapshot), True

    async def _created(self, who: Principal, key: str, request: dict[str, Any]) -> TaskOut | None:
        """The task an earlier create under the tenant's key made (None: the key is new)."""
        # Whatever Temporal still knows: past the namespace's retention a start under the same
        # workflow id would succeed.
        known = await task_of_key(self.engine, who.tenant_id, key, request)
        row = None if known is None else await in_thread(read_task, self.engine, known, who.tenant_id)
        return None if row is None else TaskOut.of(row)

    async def _crowd(self, first_run_at: datetime | None, *, besides: str | None = None) -> int:
        """The tasks (but ``besides``, the one being retimed) due in the second of a task's
        first run: the herd it joins (0 when the database does not say; only how far ahead its
        run is dispatched hangs on it)."""
        if first_run_at is None:
            return 0
        try:
            return await in_thread(tasks_due_in_second, self.engine, first_run_at, besides=besides)
        except (ServiceUnavailable, SQLAlchemyError):
            return 0

    async def _usage(self, tenant_id: str) -> TenantUsage:
        quota, active = await in_thread(
            quota_and_active, self.engine, tenant_id, self.quota_defaults, self.active_counts
        )
        return TenantUsage(quota, active)

    async def _write_first_row(self, snapshot: TaskSnapshot, idempotency_key: str | None) -> None:
        try:
            # Version 0: anything the workflow has written already wins. Concurrent creates
            # share a commit (and a thread hop); each still answers only once its row is stored.
            await self.writer.submit(write_snapshot(self.engine, snapshot))
            if idempotency_key is not None:
                await to_thread.run_sync(
                    lambda: complete_key(self.engine, snapshot.tenant_id, idempotency_key)
                )
        except SQLAlchemyError as exc:
            # The workflow's first step writes the same row, so the task is not lost.
            log.warning("task.row_write_deferred", task_id=snapshot.task_id, error=type(exc).__name__)

    async def _existing(self, who: Principal, snapshot: TaskSnapshot) -> TaskOut:
        for _ in range(40):
            row = await in_thread(read_task, self.engine, snapshot.task_id, who.tenant_id)
            if row is not None:
                return TaskOut.of(row)
            await anyio.sleep(0.05)
        # The winning request has started the workflow but not yet written the row.
        return TaskOut.of(snapshot)

    async def get(self, who: Principal, task_id: str) -> TaskOut:
        """A task of the caller's tenant (404 for anyone else's)."""
        tenant = None if who.is_admin else who.tenant_id
        row = await in_thread(read_task, self.engine, task_id, tenant)
        if row is None:
            raise TaskNotFound(f"no task {task_id}")
        return TaskOut.of(row)

    async def list(
        self, who: Principal, *, limit: int, cursor: str | None, status: str | None,
        name: str | None, all_tenants: bool, overdue: bool = False,
    ) -> TaskPage:
        """Tasks newest first with a cursor for the next page; ``overdue``: only those with a
        run overdue now."""
        tenant = None if (all_tenants and who.is_admin) else who.tenant_id
        try:
            rows, next_cursor = await in_thread(
                list_tasks, self.engine, tenant_id=tenant, limit=limit,
                cursor=cursor, status=status, name=name, overdue=overdue,
            )
        except ValueError as exc:
            raise InvalidTask(f"cursor: {exc}", field="cursor") from exc
        return await self.rendering.run(who.tenant_id, lambda: TaskPage(
            items=[TaskOut.of(r) for r in rows], next_cursor=next_cursor))

    async def executions(self, who: Principal, task_id: str, *, limit: int, cursor: str | None) -> ExecutionPage:
        """A task's run history, newest first."""
        task = await self._row(who, task_id)
        try:
            rows, next_cursor = await in_thread(
                list_executions, self.engine, task_id=task_id, limit=limit,
                cursor=cursor, tenant_id=task.tenant_id,
            )
        except ValueError as exc:
            raise InvalidTask(f"cursor: {exc}", field="cursor") from exc
        return ExecutionPage(
            items=[ExecutionOut.from_row(r) for r in rows], next_cursor=next_cursor
        )

    # ------------------------------------------------------------- changes
    async def update(
        self, who: Principal, task_id: str, changes: TaskChanges, *, body_size: int = 0,
        idempotency_key: str | None = None, origin: Origin | None = None,
        request: dict[str, Any] | None = None,
    ) -> TaskOut:
        """Validate the change against the current task and the tenant's quota, then apply it
        in the workflow (once per Idempotency-Key). ``origin`` names it in the task's history
        (default: an update by the caller's key); ``request`` is what the key stands for."""
        request = request or {"update": task_id,
                              "changes": changes.model_dump(mode="json", exclude_unset=True)}
        origin = origin or Origin(actor=who.key_id)
        return await self._once(
            who, idempotency_key, request, task_id,
            lambda request_id: self._update(who, task_id, changes, body_size=body_size,
                                            request_id=request_id, origin=origin),
        )

    async def _update(
        self, who: Principal, task_id: str, changes: TaskChanges, *, body_size: int,
        request_id: str | None, origin: Origin,
    ) -> TaskOut:
        row = await self._row(who, task_id)
        self._refuse_final(row)
        spec = TaskSpec.model_validate(row.spec)
        try:
            new_spec = changes.apply_to(spec)
        except ValidationError as exc:
            if any(error["loc"] for error in exc.errors()):
                raise InvalidTask(_first_error(exc)) from exc
            # The body was valid; it is the task it would make that is not (cron on an
            # interval task, an end_date before the task's start_date).
            raise TaskConflict(f"the change does not fit task {task_id}: {_first_error(exc)}") from exc
        # The task's own tenant: an admin's key may change another tenant's task.
        quota = await in_thread(quota_for, self.engine, row.tenant_id, self.quota_defaults)
        await validate_new_task(new_spec, TenantUsage(quota), self.rules, now=datetime.now(UTC),
                                body_size=body_size, before=spec, caller=who.tenant_id)
        await self.calendars.check_refs(row.tenant_id, new_spec, before=spec)
        if judged_again(spec, new_spec):  # on the workflow's plan, as the preview shows it
            self.fire_math.refuse_if_spent(row.tenant_id)  # before asking the workflow
            await self.calendars.check_change(row.tenant_id, changes,
                                              await self.temporal.state(task_id), datetime.now(UTC))
        herd: dict[str, Any] = {}
        if policy.retimes(spec, new_spec):
            # The herd its next run joins, as a create counts it; the workflow keeps the count
            # only if its next run lands in that second.
            next_run = _first_snapshot(task_id, row.tenant_id, new_spec, datetime.now(UTC)).next_run_at
            herd = {"crowd": await self._crowd(next_run, besides=task_id), "crowd_at": next_run}
        return self._out(await self.temporal.update(task_id, changes, origin,
                                                    request_id=request_id, **herd))

    async def cancel(
        self, who: Principal, task_id: str, task_name: str | None, reason: str | None, *,
        idempotency_key: str | None = None,
    ) -> TaskOut:
        """Cancel a task; its running job is cancelled too."""
        request = {"cancel": task_id, "task_name": task_name, "reason": reason}
        return await self._once(
            who, idempotency_key, request, task_id,
            lambda request_id: self._cancel(who, task_id, task_name, reason, request_id),
        )

    async def _cancel(
        self, who: Principal, task_id: str, task_name: str | None, reason: str | None,
        request_id: str | None,
    ) -> TaskOut:
        row = await self._row(who, task_id)
        if task_name is not None and task_name != row.name:
            raise TaskConflict(
                f"task_name {task_name!r} does not match task {task_id} (named {row.name!r})",
                field="task_name",
            )
        if request_id is None or row.status != TaskStatus.CANCELLED:
            self._refuse_final(row)
        # Else a retry under its key of a cancel whose answer was lost (a 504) may have been
        # taken after all: Temporal answers an update id a workflow took with its outcome, the
        # workflow closed or not (an id it did not take: 409, it has ended).
        self.active_counts.forget(row.tenant_id)  # the task's tenant (an admin may cancel another's)
        return self._out(await self.temporal.cancel(task_id, reason, who.key_id, request_id=request_id))

    async def pause(
        self, who: Principal, task_id: str, reason: str | None, *, idempotency_key: str | None = None
    ) -> TaskOut:
        """Pause a task."""
        async def act(request_id: str | None) -> TaskOut:
            self._refuse_final(await self._row(who, task_id))
            return self._out(await self.temporal.pause(task_id, reason, who.key_id, request_id=request_id))

        request = {"pause": task_id, "reason": reason}
        return await self._once(who, idempotency_key, request, task_id, act)

    async def resume(self, who: Principal, task_id: str, missed: ResumeMissed = ResumeMissed.SKIP,
                     *, idempotency_key: str | None = None) -> TaskOut:
        """Resume a paused task; ``missed`` decides the fires that came during the pause."""
        async def act(request_id: str | None) -> TaskOut:
            self._refuse_final(await self._row(who, task_id))
            return self._out(await self.temporal.resume(task_id, missed, who.key_id,
                                                        request_id=request_id))

        # A plain resume is the request it always was: a key kept from before still matches.
        request = {"resume": task_id} | ({} if missed is ResumeMissed.SKIP else {"missed": missed.value})
        return await self._once(who, idempotency_key, request, task_id, act)

    async def trigger(self, who: Principal, task_id: str, *, idempotency_key: str | None = None) -> TaskOut:
        """Run a task's job now, outside its schedule."""
        async def act(request_id: str | None) -> TaskOut:
            self._refuse_final(await self._row(who, task_id))
            return self._out(await self.temporal.trigger(task_id, who.key_id, request_id=request_id))

        return await self._once(who, idempotency_key, {"trigger": task_id}, task_id, act)

    async def backfill(self, who: Principal, task_id: str, body: BackfillIn, *,
                       idempotency_key: str | None = None) -> BackfillOut:
        """Run a task's past instants again (``api/backfill.py``); once per Idempotency-Key."""
        async def act(request_id: str | None) -> BackfillOut:
            return await backfill(self.engine, self.temporal, self.fire_math,
                                  await self._row(who, task_id), body, request_id, who.key_id,
                                  payer=who.tenant_id)

        if body.dry_run:
            return await act(None)
        request = {"backfill": task_id, **body.model_dump(mode="json")}
        return await once(self.engine, who.tenant_id, idempotency_key, request, act, BackfillOut,
                          task_id=task_id)

    # ------------------------------------------------------------- dead letters
    async def dead_letters(self, who: Principal, *, limit: int, cursor: str | None) -> DeadLetterPage:
        """Open dead letters of the tenant (of everyone for an admin key)."""
        tenant = None if who.is_admin else who.tenant_id
        try:
            rows, next_cursor = await in_thread(
                list_dead_letters, self.engine, tenant_id=tenant, limit=limit,
                cursor=cursor,
            )
        except ValueError as exc:
            raise InvalidTask(f"cursor: {exc}", field="cursor") from exc
        items = [
            DeadLetterOut(**ExecutionOut.from_row(row).model_dump(), task_name=name)
            for row, name in rows
        ]
        return DeadLetterPage(items=items, next_cursor=next_cursor)

    async def replay(
        self, who: Principal, execution_id: str, *, idempotency_key: str | None = None
    ) -> ExecutionOut:
        """Run a dead letter again under the same execution id (same Idempotency-Key on the
        job); once per Idempotency-Key of the request."""
        task_id = execution_id.split(":", 1)[0]
        return await once(
            self.engine, who.tenant_id, idempotency_key, {"replay": execution_id},
            lambda request_id: self._replay(who, execution_id, request_id), ExecutionOut,
            task_id=task_id,
        )

    async def _replay(self, who: Principal, execution_id: str, request_id: str | None) -> ExecutionOut:
        row = await self._dead_letter(who, execution_id, unsent=True)
        task = await self._row(who, row.task_id)
        if task.status == TaskStatus.CANCELLED:
            raise TaskConflict(f"task {task.id} is CANCELLED; its dead letters cannot be replayed")
        # A letter marked replayed whose run has not started again is sent again: the try
        # that marked it may have died before it reached Temporal. The workflow queues a run
        # that is queued or in flight already only once (TaskState.add_replay).
        marked = row.dead_letter == DeadLetter.OPEN
        if marked and not await in_thread(
                set_dead_letter, self.engine, execution_id, state=DeadLetter.REPLAYED):
            raise TaskConflict(f"dead letter {execution_id} is being replayed already")
        try:
            if task.status in (TaskStatus.COMPLETED, TaskStatus.FAILED):
                executed = await in_thread(scheduled_runs_executed, self.engine, task.id)
                await self.temporal.replay_ended(task, execution_id, row.scheduled_at, who.key_id,
                                                 executed=executed, request_id=request_id)
            else:
                await self.temporal.replay(row.task_id, execution_id, row.scheduled_at, who.key_id,
                                           request_id=request_id)
        except Exception:
            if marked:  # a resend leaves the mark to the request that made it
                await in_thread(set_dead_letter, self.engine, execution_id, state=DeadLetter.OPEN,
                                expect=DeadLetter.REPLAYED)
            raise
        row.dead_letter = DeadLetter.REPLAYED
        return ExecutionOut.from_row(row)

    async def dismiss(self, who: Principal, execution_id: str) -> None:
        """Drop a dead letter from the list; its execution row stays."""
        await self._dead_letter(who, execution_id)
        if not await in_thread(set_dead_letter, self.engine, execution_id, state=DeadLetter.DISMISSED):
            raise TaskConflict(f"dead letter {execution_id} is no longer open")

    async def _dead_letter(self, who: Principal, execution_id: str, *, unsent: bool = False) -> TaskExecution:
        """The caller's open dead letter (``unsent``: or one marked replayed whose run has not
        started again: still FAILED)."""
        row = await in_thread(get_execution, self.engine, execution_id)
        if row is None or (not who.is_admin and row.tenant_id != who.tenant_id):
            raise NotFound(f"no open dead letter {execution_id}")
        unstarted = row.dead_letter == DeadLetter.REPLAYED and row.status == ExecutionStatus.FAILED
        if row.dead_letter != DeadLetter.OPEN and not (unsent and unstarted):
            raise NotFound(f"no open dead letter {execution_id}")
        return row

    # ------------------------------------------------------------- helpers
    async def _once(
        self, who: Principal, key: str | None, request: dict[str, Any], task_id: str,
        act: Callable[[str | None], Awaitable[TaskOut]],
    ) -> TaskOut:
        return await once(self.engine, who.tenant_id, key, request, act, TaskOut, task_id=task_id)

    async def _row(self, who: Principal, task_id: str) -> Task:
        tenant = None if who.is_admin else who.tenant_id
        row = await in_thread(read_task, self.engine, task_id, tenant)
        if row is None:
            raise TaskNotFound(f"no task {task_id}")
        return row

    @staticmethod
    def _refuse_final(row: Task) -> None:
        if row.status in (TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED):
            raise TaskConflict(f"task {row.id} is {row.status} and can no longer change")

    @staticmethod
    def _out(state: TaskState) -> TaskOut:
        """The task as its workflow answered a change."""
        now = datetime.now(UTC)
        return TaskOut.of(state.snapshot(state.next_run_at(now), updated_at=now))


def _first_snapshot(task_id: str, tenant_id: str, spec: TaskSpec, now: datetime) -> TaskSnapshot:
    """A new task's row, as its workflow's first write will make it."""
    start = TaskWorkflowInput(task_id=task_id, tenant_id=tenant_id, spec=spec, created_at=now)
    state = start.initial_state()
    return state.snapshot(state.next_run_at(now), updated_at=now)


def _first_error(exc: ValidationError) -> str:
    errors = exc.errors()
    if not errors:
        return str(exc)
    first = errors[0]
    field = ".".join(str(p) for p in first.get("loc", ()))
    msg = str(first.get("msg", "invalid")).removeprefix("Value error, ")
    return f"{field}: {msg}" if field else msg
