"""Operations sent with an Idempotency-Key: a retry acts once and gets the first answer."""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import structlog
from pydantic import BaseModel
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from api.database import in_thread
from api.errors import ApiError, IdempotencyConflict, ServiceUnavailable
from scheduling.spec import TaskSpec
from store.idempotency import answer_key, claim_key, find_key, release_key

M = TypeVar("M", bound=BaseModel)
log = structlog.get_logger("task_scheduler.api")


def request_hash(request: dict[str, Any]) -> str:
    """The digest that tells one request from another under the same key."""
    return hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()


def request_id(tenant_id: str, key: str) -> str:
    """The id a tenant's request under a key has in Temporal: the same on every retry. Hex,
    with no '-': the workflow tells a keyed update id from a fresh one so (state.keyed)."""
    # Encoded as a list, so that no tenant id and key pair reads as another pair.
    return hashlib.sha256(json.dumps([tenant_id, key]).encode()).hexdigest()[:32]


def key_conflict() -> IdempotencyConflict:
    """The answer to a key reused for another request."""
    return IdempotencyConflict(
        "Idempotency-Key: this key was already used with another request (another body, "
        "operation or task); send a new key for a new request",
        field="Idempotency-Key",
    )


async def once(
    engine: Engine,
    tenant_id: str,
    key: str | None,
    request: dict[str, Any],
    act: Callable[[str | None], Awaitable[M]],
    answer: type[M],
    *,
    task_id: str,
) -> M:
    """``act(request id)`` under the tenant's key: a retry of the same request gets the first
    answer, another request under the key is a 422; without a key, ``act(None)``."""
    if key is None:
        return await act(None)
    digest = request_hash(request)
    try:
        record = await in_thread(claim_key, engine, tenant_id, key, digest, task_id[:64])
    except (SQLAlchemyError, ServiceUnavailable) as exc:
        # The database refuses writes: a record it holds still answers; a new key acts under its
        # request id unrecorded, so a retry still acts once (the update id, below). Refusing
        # reads as well, it is a 503 here.
        log.warning("idempotency.key_not_kept", tenant=tenant_id, error=type(exc).__name__)
        known = await in_thread(find_key, engine, tenant_id, key)
        if known is None:
            return await act(request_id(tenant_id, key))
        record = known
    if record.request_hash != digest:
        raise key_conflict()
    if record.response is not None:
        return answer.model_validate(record.response)
    # Not answered yet: an earlier try failed, timed out or is still under way. Acting again
    # under the same request id reaches the change that try made, if it made one: Temporal
    # applies an update id once per workflow run and answers a repeat with the first outcome.
    try:
        result = await act(request_id(tenant_id, key))
    except ApiError as exc:
        # Refused as bad input (unknown task, invalid change): nothing was done, so the key is
        # free for the request the client sends instead. A conflict keeps it: it may be an
        # earlier try of this very request that is still under way.
        if 400 <= exc.status < 500 and exc.status != 409:
            # While the database refuses writes the key stays held: answer the refusal anyway.
            with contextlib.suppress(SQLAlchemyError, ServiceUnavailable):
                await in_thread(release_key, engine, tenant_id, key, digest)
        raise
    try:
        kept = await in_thread(answer_key, engine, tenant_id, key, result.model_dump(mode="json"))
    except (SQLAlchemyError, ServiceUnavailable) as exc:
        # The change is made: answer it. A retry acts again under the same id, as above.
        log.warning("idempotency.answer_not_kept", tenant=tenant_id, error=type(exc).__name__)
        return result
    return answer.model_validate(kept)


def create_request(spec: TaskSpec, recurring_only: bool) -> dict[str, Any]:
    """What identifies a create under its key: the endpoint and the task asked for."""
    return {"recurring": recurring_only, "spec": spec.model_dump(mode="json")}


async def task_of_key(engine: Engine, tenant_id: str, key: str, request: dict[str, Any]) -> str | None:
    """The task a create seen under the tenant's key made (None: the key is new); a 422 when
    the key was used for another request."""
    record = await in_thread(find_key, engine, tenant_id, key)
    if record is None:
        return None
    if record.request_hash != request_hash(request):
        raise key_conflict()
    return record.task_id


async def claim_create(
    engine: Engine, tenant_id: str, key: str, request: dict[str, Any], task_id: str
) -> str:
    """The task id of a create under the tenant's key: ``task_id``, or the one an earlier try
    of the same request chose."""
    digest = request_hash(request)
    # Concurrent tries of one request read the same record, so they all start the same workflow
    # id and Temporal lets exactly one of them win. A fresh random id, not one derived from the
    # key: no one can compute another's task id from a key.
    record = await in_thread(claim_key, engine, tenant_id, key, digest, task_id)
    if record.request_hash != digest:
        raise key_conflict()
    return record.task_id
