"""Health, liveness, readiness and metrics: open to any caller but /metrics, which takes the
metrics token when one is set; the health answers are shared for a moment, so that a flood of
them does not become a flood of database and Temporal calls."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

from anyio import to_thread
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text

from api.deps import CredentialsDep, auth_failures, client_address
from api.errors import Unauthorized
from api.service import TaskService

router = APIRouter(tags=["operations"])

Checks = tuple[bool, dict[str, Any]]


class HealthCache:
    """One answer of the health checks, shared by every caller for ``seconds``; callers that
    come while a check runs wait for that check rather than starting their own."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._lock = asyncio.Lock()
        self._answer: Checks | None = None
        self._checked_at = float("-inf")  # when the answer's check started (monotonic)

    async def get(self, check: Callable[[], Awaitable[Checks]]) -> Checks:
        """The shared answer, checked afresh once it is ``seconds`` old."""
        async with self._lock:
            now = time.monotonic()
            if self._answer is None or now - self._checked_at >= self.seconds:
                self._answer, self._checked_at = await check(), now
            return self._answer


async def _checks(request: Request) -> Checks:
    cache: HealthCache = request.app.state.health
    service: TaskService = request.app.state.service
    return await cache.get(lambda: _check(service))


async def _check(service: TaskService) -> Checks:
    checks: dict[str, Any] = {}

    def ping() -> None:
        with service.engine.connect() as connection:
            connection.execute(text("SELECT 1"))

    try:
        # Not through the store calls' bounded threads: a probe must not wait behind a burst of
        # requests' queries, or a busy API would be reported dead.
        await to_thread.run_sync(ping)
        checks["database"] = "up"
    except Exception as exc:  # any failure means down; the reason is named, not raised
        checks["database"] = f"down: {type(exc).__name__}"
    try:
        temporal = await service.temporal.health()
        checks["temporal"] = "up"
        checks["workers"] = _workers_check(temporal)
        checks["backlog"] = temporal["backlog"]
    except Exception as exc:
        checks["temporal"] = f"down: {type(exc).__name__}"
        checks["workers"] = "unknown: Temporal is down"
    healthy = all(str(v).startswith("up") for k, v in checks.items() if k != "backlog")
    return healthy, checks


def _workers_check(temporal: dict[str, Any]) -> str:
    """"up: ..." when a live worker serves the task queue and one the jobs queue, else "down: ...".

    Alive means a recent Temporal worker heartbeat (``TemporalGateway.live_workers``), so a
    worker that went away is down within seconds. On a server that keeps no heartbeats, the
    pollers it saw in the last minute stand in, and the answer says so."""
    workers: dict[str, int] | None = temporal["workers"]
    if workers is None:
        pollers = temporal["pollers"]
        idle = [f"the {name} queue" for name, count in pollers.items() if not count]
        if idle:
            return "down: no worker polled " + ", ".join(idle) + " in the last minute"
        return (f"up: {pollers['workflow']} workflow, {pollers['activity']} activity and "
                f"{pollers['jobs']} job pollers seen in the last minute (no worker heartbeats "
                "on this server)")
    absent = [queue for queue, count in workers.items() if not count]
    if absent:
        return "down: no live worker on " + ", ".join(absent)
    return "up: " + ", ".join(f"{count} on {queue}" for queue, count in workers.items())


@router.get("/checkHealth", responses={503: {"description": "a dependency is down"}})
@router.get("/checkHealth/", include_in_schema=False)
async def check_health(request: Request) -> JSONResponse:
    """200 when the database, Temporal and a worker are all up; else 503 naming what is down."""
    healthy, checks = await _checks(request)
    down = [name for name, value in checks.items()
            if name != "backlog" and not str(value).startswith("up")]
    body: dict[str, Any] = {"status": "ok" if healthy else "unavailable", "checks": checks}
    if down:
        body["down"] = down
    return JSONResponse(body, status_code=200 if healthy else 503)


@router.get("/livez")
async def livez() -> dict[str, str]:
    """The process is alive."""
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"description": "not ready"}})
async def readyz(request: Request) -> JSONResponse:
    """Ready to serve: the database and Temporal answer."""
    healthy, checks = await _checks(request)
    ready = checks.get("database") == "up" and checks.get("temporal") == "up"
    return JSONResponse({"status": "ready" if ready else "not ready", "checks": checks},
                        status_code=200 if ready else 503)


async def _metrics_caller(request: Request, credentials: CredentialsDep) -> None:
    """Nothing when no metrics token is set or the right one is presented; else 401, and an
    address that keeps presenting wrong ones gets 429 as for API keys."""
    token: bytes | None = request.app.state.metrics_token
    if token is None:
        return
    failures, address = auth_failures(request), client_address(request)
    shown = credentials.credentials if credentials else None
    # A scraper that got in from this address lately passes, as a key does: another caller
    # behind the same address guessing must not blind the monitoring.
    await failures.refuse_if_over(address, shown)
    if shown is None or not secrets.compare_digest(shown.encode(), token):
        if shown is not None:  # a guess, not a scraper without a token
            await failures.failed(address)
        raise Unauthorized("/metrics needs `Authorization: Bearer <metrics token>` "
                           "(SCHEDULER_METRICS_TOKEN)", headers={"WWW-Authenticate": "Bearer"})
    failures.succeeded(address, shown)


@router.get("/metrics", response_class=Response,
            responses={401: {"description": "a metrics token is set and was not presented"}},
            # The token is asked for only where one is set: authentication is optional here.
            openapi_extra={"security": [{}, {"HTTPBearer": []}]})
async def metrics(request: Request, credentials: CredentialsDep) -> Response:
    """Prometheus text format: this API's requests, and the whole service (every tenant's tasks
    and runs from the database, the task queues from Temporal) read at scrape time; needs the
    metrics token when SCHEDULER_METRICS_TOKEN is set."""
    await _metrics_caller(request, credentials)
    api_metrics = request.app.state.metrics
    service = request.app.state.service
    await api_metrics.service.refresh(service.engine, service.temporal)
    return Response(generate_latest(api_metrics.registry), media_type=CONTENT_TYPE_LATEST)
