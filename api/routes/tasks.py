"""The documented task endpoints."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Path, Query, Request, Response, status
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from api.admission import CreateAdmission, CreateArrival
from api.cursors import CursorQuery
from api.deps import ServiceDep
from api.examples import CREATE_EXAMPLES
from api.ratelimit import CreatorDep, ReaderDep, WriterDep
from api.routes.common import (
    ERRORS,
    KEY_REUSED,
    OPERATION_RESPONSES,
    IdempotencyHeader,
    OperationKeyHeader,
)
from api.schemas import (
    BackfillIn,
    BackfillOut,
    CronTask,
    DatesTask,
    ExecutionPage,
    IntervalTask,
    OnceTask,
    PauseRequest,
    RecurringTaskCreate,
    ResumeRequest,
    TaskCancel,
    TaskCreate,
    TaskFilter,
    TaskOut,
    TaskPage,
    TaskUpdate,
    problem_responses,
)
from scheduling.bounds import Text
from scheduling.status import ResumeMissed, TaskStatus

router = APIRouter(tags=["tasks"])

TaskIdPath = Annotated[Text, Path(min_length=1, max_length=64, description="the task id")]
CreateBody = Annotated[TaskCreate, Body(openapi_examples=CREATE_EXAMPLES)]
RecurringBody = Annotated[
    RecurringTaskCreate,
    Body(openapi_examples={k: v for k, v in CREATE_EXAMPLES.items() if not k.startswith("once")}),
]
CREATE_RESPONSES = {
    **ERRORS,
    **problem_responses({
        403: "a tenant quota is exceeded", 422: KEY_REUSED,
        429: "over the tenant's rate limit, or the tenant has its share of this API process's "
             "creates in progress, or has used its share of its CPU for listing fires (a "
             "calendar check); see Retry-After",
        503: "Temporal or the database is unavailable, this API process has as many creates in "
             "progress as it takes, or Temporal's workflow tasks wait past the bound; see "
             "Retry-After"}),
    200: {"description": "the same Idempotency-Key and body were seen before: the same task",
          "model": TaskOut},
}


async def _create(
    request: Request, response: Response, body: OnceTask | CronTask | IntervalTask | DatesTask,
    caller: CreatorDep, service: ServiceDep, key: str | None, recurring_only: bool,
) -> TaskOut:
    try:
        spec = body.spec()
    except ValidationError as exc:  # rendered as any other invalid body
        raise RequestValidationError(exc.errors()) from exc
    admission: CreateAdmission = request.app.state.admission
    async with admission.tenant(caller.who.tenant_id):
        task, created = await service.create(
            caller.who, spec, recurring_only=recurring_only, body_size=len(await request.body()),
            idempotency_key=key, usage=caller.usage,
        )
    if not created:
        response.status_code = status.HTTP_200_OK
    return task


@router.post("/task/create", status_code=status.HTTP_201_CREATED, responses=CREATE_RESPONSES,
             dependencies=[CreateArrival])
async def create_task(
    request: Request, response: Response, body: CreateBody, caller: CreatorDep, service: ServiceDep,
    idempotency_key: IdempotencyHeader = None,
) -> TaskOut:
    """Create a one-time, cron, interval or explicit-dates task."""
    return await _create(request, response, body, caller, service, idempotency_key, False)


@router.post("/task/recurring", status_code=status.HTTP_201_CREATED, responses=CREATE_RESPONSES,
             dependencies=[CreateArrival])
async def create_recurring_task(
    request: Request, response: Response, body: RecurringBody, caller: CreatorDep, service: ServiceDep,
    idempotency_key: IdempotencyHeader = None,
) -> TaskOut:
    """Create a recurring (cron or interval) task."""
    return await _create(request, response, body, caller, service, idempotency_key, True)


@router.patch("/task/cancel", status_code=status.HTTP_202_ACCEPTED, responses=OPERATION_RESPONSES)
async def cancel_task(
    body: Annotated[TaskCancel, Body(openapi_examples={"cancel": {"value": {"task_id": "0f1e..."}}})],
    who: WriterDep,
    service: ServiceDep,
    idempotency_key: OperationKeyHeader = None,
) -> TaskOut:
    """Cancel a task; a running job is cancelled through its heartbeats."""
    return await service.cancel(
        who, body.task_id, body.task_name, body.reason, idempotency_key=idempotency_key
    )


@router.post("/task/update", status_code=status.HTTP_202_ACCEPTED, responses=OPERATION_RESPONSES)
async def update_task(
    request: Request,
    body: Annotated[
        TaskUpdate,
        Body(openapi_examples={"new-cron": {"value": {"task_id": "0f1e...", "cron": "30 9 * * 1-5"}}}),
    ],
    who: WriterDep,
    service: ServiceDep,
    idempotency_key: OperationKeyHeader = None,
) -> TaskOut:
    """Change a task; the workflow re-plans at once. Answers with the new state."""
    return await service.update(
        who, body.task_id, body.changes(), body_size=len(await request.body()),
        idempotency_key=idempotency_key,
    )


@router.get("/tasks/{task_id}", responses=ERRORS)
async def get_task(task_id: TaskIdPath, who: ReaderDep, service: ServiceDep) -> TaskOut:
    """A task: status, schedule, next run, last run and run counts."""
    return await service.get(who, task_id)


@router.get("/tasks", responses=ERRORS, response_model=TaskPage)
@router.get("/tasks/", include_in_schema=False, response_model=TaskPage)
async def list_tasks(
    who: ReaderDep,
    service: ServiceDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: CursorQuery = None,
    status: Annotated[TaskStatus | TaskFilter | None, Query(
        description="a task status, or `overdue`: the tasks with a run overdue now")] = None,
    name: Annotated[Text | None, Query(max_length=200)] = None,
    all_tenants: Annotated[bool, Query(description="admin keys only")] = False,
) -> Response:
    """Tasks newest first, filtered by status (or overdue) or name, with a cursor for the next
    page."""
    overdue = status == TaskFilter.OVERDUE
    page = await service.list(
        who, limit=limit, cursor=cursor, status=None if overdue or status is None else str(status),
        name=name, all_tenants=all_tenants, overdue=overdue,
    )
    return await service.rendering.json(who.tenant_id, page)  # megabytes: off the event loop


@router.get("/tasks/{task_id}/executions", responses=ERRORS)
async def list_executions(
    task_id: TaskIdPath,
    who: ReaderDep,
    service: ServiceDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: CursorQuery = None,
) -> ExecutionPage:
    """A task's run history (runs and recorded skips), newest first."""
    return await service.executions(who, task_id, limit=limit, cursor=cursor)


@router.post("/tasks/{task_id}/pause", status_code=status.HTTP_202_ACCEPTED, responses=OPERATION_RESPONSES)
async def pause_task(
    task_id: TaskIdPath, who: WriterDep, service: ServiceDep,
    body: Annotated[PauseRequest | None, Body()] = None,
    idempotency_key: OperationKeyHeader = None,
) -> TaskOut:
    """Stop starting runs until resumed (a running job finishes)."""
    return await service.pause(who, task_id, body.reason if body else None, idempotency_key=idempotency_key)


@router.post("/tasks/{task_id}/resume", status_code=status.HTTP_202_ACCEPTED, responses=OPERATION_RESPONSES)
async def resume_task(
    task_id: TaskIdPath, who: WriterDep, service: ServiceDep,
    body: Annotated[ResumeRequest | None, Body()] = None,
    idempotency_key: OperationKeyHeader = None,
) -> TaskOut:
    """Start runs again; fires that fell inside the pause are recorded as skipped, or decided
    by the missed-run policy (``missed``: ``policy``)."""
    missed = body.missed if body else ResumeMissed.SKIP
    return await service.resume(who, task_id, missed, idempotency_key=idempotency_key)


@router.post("/tasks/{task_id}/trigger", status_code=status.HTTP_202_ACCEPTED, responses=OPERATION_RESPONSES)
async def trigger_task(
    task_id: TaskIdPath, who: WriterDep, service: ServiceDep, idempotency_key: OperationKeyHeader = None
) -> TaskOut:
    """Run the task's job now, outside its schedule."""
    return await service.trigger(who, task_id, idempotency_key=idempotency_key)


@router.post("/tasks/{task_id}/backfill", status_code=status.HTTP_202_ACCEPTED,
             responses={**OPERATION_RESPONSES, 200: {"description": "a dry run: what would run",
                                                     "model": BackfillOut}})
async def backfill_task(
    task_id: TaskIdPath, body: BackfillIn, response: Response, who: WriterDep, service: ServiceDep,
    idempotency_key: OperationKeyHeader = None,
) -> BackfillOut:
    """Run the task's schedule instants in [start, end) again, as ``mode`` selects, oldest
    first (202); a dry run answers what would run and changes nothing (200)."""
    answer = await service.backfill(who, task_id, body, idempotency_key=idempotency_key)
    if body.dry_run:
        response.status_code = status.HTTP_200_OK
    return answer
