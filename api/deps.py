"""Request dependencies: the task service, the Temporal gateway and the calling tenant."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from fastapi import Depends, Request
from fastapi.exceptions import RequestValidationError
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from api.database import charge_to, in_thread
from api.errors import Unauthorized
from api.service import Principal, TaskService
from api.validation import TenantUsage
from scheduling.bounds import TEXT_MESSAGE, TEXT_PATTERN
from store.keys import ActiveKey, find_active_key, is_dev_key
from store.quotas import key_with_usage

if TYPE_CHECKING:  # api.ratelimit builds on this module's dependencies
    from api.ratelimit import AuthFailureLimiter

T = TypeVar("T")

bearer = HTTPBearer(auto_error=False, description="API key of a tenant: `Authorization: Bearer <key>`")


def service_of(request: Request) -> TaskService:
    """The task service built in the app's lifespan."""
    service: TaskService = request.app.state.service
    return service


async def get_service(request: Request) -> TaskService:
    """``service_of`` as a dependency. Every dependency here is a coroutine: FastAPI sends a
    plain function to a thread and back, which costs CPU on every request."""
    return service_of(request)


ServiceDep = Annotated[TaskService, Depends(get_service)]


async def storable_params(request: Request) -> None:
    """Refuse any path or query parameter the database could not store (422 naming it): one
    guard for every route, so a lookup never sends such text to the database."""
    params = [("path", name, value) for name, value in request.path_params.items()]
    params += [("query", name, value) for name, value in request.query_params.multi_items()]
    errors = [
        {"type": "string_pattern_mismatch", "loc": (where, name), "msg": TEXT_MESSAGE,
         "input": value, "ctx": {"pattern": TEXT_PATTERN}}
        for where, name, value in params if "\x00" in f"{name}{value}"
    ]
    if errors:
        raise RequestValidationError(errors)


CredentialsDep = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]


def _presented_key(credentials: HTTPAuthorizationCredentials | None) -> str:
    if credentials is None or credentials.scheme.lower() != "bearer" or not credentials.credentials:
        raise Unauthorized(
            "send an API key as `Authorization: Bearer <key>`", headers={"WWW-Authenticate": "Bearer"}
        )
    return credentials.credentials


def _unknown_key() -> Unauthorized:
    return Unauthorized("the API key is unknown or revoked", headers={"WWW-Authenticate": "Bearer"})


def client_address(request: Request) -> str:
    """The address failed sign-ins are counted against (the peer, as uvicorn reports it)."""
    return request.client.host if request.client else "unknown"


def auth_failures(request: Request) -> AuthFailureLimiter:
    """The per-address limiter of failed sign-ins built in the app's lifespan."""
    limiter: AuthFailureLimiter = request.app.state.auth_failures
    return limiter


async def admitted(request: Request, key: str, lookup: Callable[..., T | None], *args: Any,
                   key_of: Callable[[T], ActiveKey]) -> T | None:
    """What ``lookup(engine, key, *args)`` finds for a presented key, or None: unknown, revoked,
    or a dev key outside dev. A None counts as a failure of the caller's address, and an
    address over its failure limit gets 429 before the key is looked up, unless the key signed
    in from it lately (``AuthFailureLimiter``)."""
    failures, address = auth_failures(request), client_address(request)
    await failures.refuse_if_over(address, key)
    found = await in_thread(lookup, service_of(request).engine, key, *args)
    if found is None or (not request.app.state.dev_keys and is_dev_key(key_of(found), key)):
        await failures.failed(address)
        return None
    failures.succeeded(address, key)
    charge_to(key_of(found).tenant_id)
    return found


def _itself(found: ActiveKey) -> ActiveKey:
    return found


async def admitted_key(request: Request, key: str) -> ActiveKey | None:
    """``admitted`` for a plain key lookup (the API's and the status page's sign-in)."""
    return await admitted(request, key, find_active_key, key_of=_itself)


async def get_principal(request: Request, credentials: CredentialsDep) -> Principal:
    """The tenant of the presented API key; 401 when missing, unknown or revoked."""
    key = _presented_key(credentials)
    row = await admitted_key(request, key)
    if row is None:
        raise _unknown_key()
    return Principal(tenant_id=row.tenant_id, is_admin=row.is_admin, key_id=row.id)


@dataclass(frozen=True)
class Creator:
    """The caller of a create, with its tenant's quota and active task count."""

    who: Principal
    usage: TenantUsage


async def get_creator(request: Request, credentials: CredentialsDep) -> Creator:
    """``get_principal`` for the create endpoints: the key, the quota and the active count
    are read in one trip to the database (the key afresh, as for every request)."""
    key = _presented_key(credentials)
    service = service_of(request)
    found = await admitted(request, key, key_with_usage, service.quota_defaults,
                           service.active_counts, key_of=lambda found: found[0])
    if found is None:
        raise _unknown_key()
    row, quota, active = found
    return Creator(Principal(tenant_id=row.tenant_id, is_admin=row.is_admin, key_id=row.id),
                   TenantUsage(quota, active))


TenantDep = Annotated[Principal, Depends(get_principal)]
CreatorAuthDep = Annotated[Creator, Depends(get_creator)]
