"""Health, liveness, readiness and metrics."""

from __future__ import annotations

from typing import Any

from anyio import to_thread
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text

from api.service import TaskService

router = APIRouter(tags=["operations"])


async def _checks(request: Request) -> tuple[bool, dict[str, Any]]:
    service: TaskService = request.app.state.service
    checks: dict[str, Any] = {}

    def ping() -> None:
        with service.engine.connect() as connection:
            connection.execute(text("SELECT 1"))

    try:
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


@router.get("/metrics", response_class=Response)
async def metrics(request: Request) -> Response:
    """Prometheus text format: this API's requests, and the whole service (every tenant's tasks
    and runs from the database, the task queues from Temporal) read at scrape time."""
    api_metrics = request.app.state.metrics
    service = request.app.state.service
    await api_metrics.service.refresh(service.engine, service.temporal)
    return Response(generate_latest(api_metrics.registry), media_type=CONTENT_TYPE_LATEST)
