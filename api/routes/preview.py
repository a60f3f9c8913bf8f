"""Previews of a schedule: of a task not saved, of a change before it is made, of a saved task."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Query, Request
from fastapi.exceptions import RequestValidationError
from pydantic import Discriminator, Tag, ValidationError

from api.deps import ServiceDep
from api.examples import CREATE_EXAMPLES, PAUSED_UPCOMING_EXAMPLE, PREVIEW_EXAMPLE
from api.preview import PreviewOut, Previews
from api.ratelimit import CreatorDep, ReaderDep
from api.routes.common import ERRORS
from api.routes.tasks import TaskIdPath
from api.schemas import TaskCreate, TaskUpdate, problem_responses
from scheduling.preview import DEFAULT_PREVIEW, MAX_PREVIEW

router = APIRouter(tags=["tasks"])


def _kind(body: Any) -> str:
    """A body with a task id is a change of that task; any other, a new task."""
    if isinstance(body, dict):
        return "change" if "task_id" in body else "new"
    return "change" if isinstance(body, TaskUpdate) else "new"


PreviewBody = Annotated[
    Annotated[TaskCreate, Tag("new")] | Annotated[TaskUpdate, Tag("change")],
    Discriminator(_kind),
    Body(openapi_examples={
        **CREATE_EXAMPLES,
        "change": {"summary": "A change of a saved task: its fires before and after",
                   "value": {"task_id": "0f1e...", "cron": "30 9 * * 1-5"}},
    }),
]
LimitQuery = Annotated[int, Query(ge=1, le=MAX_PREVIEW, description="how many fires to list")]
PREVIEW_RESPONSES: dict[int | str, dict[str, Any]] = {
    **ERRORS,
    **problem_responses({403: "a tenant quota is exceeded, as create would answer"}),
    200: {"content": {"application/json": {"example": PREVIEW_EXAMPLE}}},
}


async def get_previews(service: ServiceDep) -> Previews:
    """Previews through the app's task service."""
    return Previews(service)


PreviewsDep = Annotated[Previews, Depends(get_previews)]


@router.post("/task/preview", responses=PREVIEW_RESPONSES)
async def preview_task(
    request: Request, body: PreviewBody, caller: CreatorDep, previews: PreviewsDep,
    limit: LimitQuery = DEFAULT_PREVIEW,
) -> PreviewOut:
    """Validate a new task (the body of /task/create) or a change (the body of /task/update)
    exactly as they would be, save nothing, and list the upcoming fires."""
    size = len(await request.body())
    if isinstance(body, TaskUpdate):
        return await previews.of_change(caller.who, body.task_id, body.changes(), limit=limit,
                                        body_size=size)
    try:
        spec = body.spec()
    except ValidationError as exc:  # rendered as any other invalid body
        raise RequestValidationError(exc.errors()) from exc
    return await previews.of_new(caller.who, spec, caller.usage, limit=limit, body_size=size)


UPCOMING_RESPONSES: dict[int | str, dict[str, Any]] = {**ERRORS, 200: {"content": {
    "application/json": {"examples": {
        "active": {"summary": "An active task", "value": PREVIEW_EXAMPLE},
        "paused": {"summary": "A paused task: what resuming now would do, for each choice of "
                   "missed (catchup, max_catchup_runs 1)", "value": PAUSED_UPCOMING_EXAMPLE},
    }}}}}


@router.get("/tasks/{task_id}/upcoming", responses=UPCOMING_RESPONSES)
async def upcoming_fires(
    task_id: TaskIdPath, who: ReaderDep, previews: PreviewsDep, limit: LimitQuery = DEFAULT_PREVIEW,
) -> PreviewOut:
    """A saved task's schedule in words and its upcoming fires, from where its workflow stands;
    for a paused task also what resuming it now would do (``on_resume``)."""
    return await previews.of_task(who, task_id, limit=limit)

