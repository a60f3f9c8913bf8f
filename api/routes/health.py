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
        pollers = temporal["pollers"]
        checks["workers"] = (
            f"up: {pollers['workflow']} workflow, {pollers['activity']} activity and "
            f"{pollers['jobs']} job pollers"
            if pollers["workflow"] and pollers["activity"] and pollers["jobs"]
            else "down: no worker polls "
            + ", ".join(f"the {k} queue" for k, v in pollers.items() if not v)
        )
        checks["backlog"] = temporal["backlog"]
    except Exception as exc:
        checks["temporal"] = f"down: {type(exc).__name__}"
        checks["workers"] = "unknown: Temporal is down"
    healthy = all(str(v).startswith("up") for k, v in checks.items() if k != "backlog")
    return healthy, checks


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
    """Prometheus text format."""
    api_metrics = request.app.state.metrics
    try:
        engine = request.app.state.service.engine
        await to_thread.run_sync(lambda: api_metrics.refresh_task_counts(engine))
    except Exception:  # metrics stay up when the database is not
        pass
    return Response(generate_latest(api_metrics.registry), media_type=CONTENT_TYPE_LATEST)
