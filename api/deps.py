"""Request dependencies: the task service, the Temporal gateway and the calling tenant."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from api.errors import Unauthorized
from api.service import Principal, TaskService, in_thread
from store.keys import find_active_key

bearer = HTTPBearer(auto_error=False, description="API key of a tenant: `Authorization: Bearer <key>`")


def get_service(request: Request) -> TaskService:
    """The task service built in the app's lifespan."""
    service: TaskService = request.app.state.service
    return service


ServiceDep = Annotated[TaskService, Depends(get_service)]


async def get_principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Principal:
    """The tenant of the presented API key; 401 when missing, unknown or revoked."""
    if credentials is None or credentials.scheme.lower() != "bearer" or not credentials.credentials:
        raise Unauthorized(
            "send an API key as `Authorization: Bearer <key>`", headers={"WWW-Authenticate": "Bearer"}
        )
    service = get_service(request)
    row = await in_thread(find_active_key, service.engine, credentials.credentials)
    if row is None:
        raise Unauthorized("the API key is unknown or revoked", headers={"WWW-Authenticate": "Bearer"})
    return Principal(tenant_id=row.tenant_id, is_admin=row.is_admin)


TenantDep = Annotated[Principal, Depends(get_principal)]
