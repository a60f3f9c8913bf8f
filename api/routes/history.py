"""The task history endpoints: events, spec versions and rollback."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Query, Response, status

from api.cursors import CursorQuery
from api.deps import ServiceDep
from api.history import rollback, task_events, task_versions
from api.ratelimit import ReaderDep, WriterDep
from api.routes.common import ERRORS, OPERATION_RESPONSES, OperationKeyHeader
from api.routes.tasks import TaskIdPath
from api.schemas import EventPage, RollbackRequest, TaskOut, VersionPage, problem_responses

router = APIRouter(tags=["tasks"])

Limit = Annotated[int, Query(ge=1, le=500)]
ROLLBACK_RESPONSES = {
    **OPERATION_RESPONSES,
    **problem_responses({404: "no such task for this tenant, or the task has no such version"}),
}


# A page of events or versions may hold hundreds of specs: its JSON is made off the event loop.
@router.get("/tasks/{task_id}/events", responses=ERRORS, response_model=EventPage)
async def list_task_events(
    task_id: TaskIdPath, who: ReaderDep, service: ServiceDep, limit: Limit = 50,
    cursor: CursorQuery = None,
) -> Response:
    """Every change of a task (who, when, what), newest first."""
    page = await task_events(service, who, task_id, limit=limit, cursor=cursor)
    return await service.rendering.json(who.tenant_id, page)


@router.get("/tasks/{task_id}/versions", responses=ERRORS, response_model=VersionPage)
async def list_task_versions(
    task_id: TaskIdPath, who: ReaderDep, service: ServiceDep, limit: Limit = 50,
    cursor: CursorQuery = None,
) -> Response:
    """The versions of a task's spec (create, updates, rollbacks), newest first."""
    page = await task_versions(service, who, task_id, limit=limit, cursor=cursor)
    return await service.rendering.json(who.tenant_id, page)


@router.post("/tasks/{task_id}/rollback", status_code=status.HTTP_202_ACCEPTED,
             responses=ROLLBACK_RESPONSES)
async def rollback_task(
    task_id: TaskIdPath,
    body: Annotated[RollbackRequest, Body(openapi_examples={"to-version-1": {"value": {"version": 1}}})],
    who: WriterDep,
    service: ServiceDep,
    idempotency_key: OperationKeyHeader = None,
) -> TaskOut:
    """Restore the spec of one of the task's versions, as an update (a new version)."""
    return await rollback(service, who, task_id, body.version, idempotency_key=idempotency_key)
