"""Dead letters: runs that exhausted their retries, listable, replayable, dismissable."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response, status

from api.cursors import CursorQuery
from api.deps import ServiceDep
from api.ratelimit import ReaderDep, WriterDep
from api.routes.common import ERRORS, OPERATION_RESPONSES, OperationKeyHeader
from api.schemas import DeadLetterPage, ExecutionOut
from scheduling.bounds import Text

router = APIRouter(tags=["dead letters"])
ExecutionIdPath = Annotated[Text, Path(min_length=1, max_length=200, description="the execution id")]


@router.get("/dead-letters", responses=ERRORS)
async def list_dead_letters(
    who: ReaderDep,
    service: ServiceDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: CursorQuery = None,
) -> DeadLetterPage:
    """Open dead letters of the tenant, newest first."""
    return await service.dead_letters(who, limit=limit, cursor=cursor)


@router.post("/dead-letters/{execution_id}/replay", status_code=status.HTTP_202_ACCEPTED,
             responses=OPERATION_RESPONSES)
async def replay_dead_letter(
    execution_id: ExecutionIdPath, who: WriterDep, service: ServiceDep,
    idempotency_key: OperationKeyHeader = None,
) -> ExecutionOut:
    """Run the failed run again under the same execution id (same Idempotency-Key on the job)."""
    return await service.replay(who, execution_id, idempotency_key=idempotency_key)


@router.delete("/dead-letters/{execution_id}", status_code=status.HTTP_204_NO_CONTENT, responses=ERRORS,
               response_class=Response)
async def dismiss_dead_letter(execution_id: ExecutionIdPath, who: WriterDep, service: ServiceDep) -> Response:
    """Dismiss a dead letter; its execution row stays in the run history."""
    await service.dismiss(who, execution_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
