"""The status page at /ui: server-rendered HTML over the task service, signed in by a cookie.

A browser cannot send a Bearer header, so /ui/login stores the API key in an HttpOnly,
SameSite=Strict cookie (Secure in production), and each page looks the key up exactly as the
API does. Sign-in and sign-out refuse a form sent from another site.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path as FilePath
from typing import Annotated, Any
from urllib.parse import urlsplit

from fastapi import APIRouter, Depends, Form, Path, Query, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from jinja2 import Environment, FileSystemLoader

from api.deps import ServiceDep, admitted_key
from api.errors import ApiError, RateLimited, TaskNotFound
from api.history import task_versions, version_diffs
from api.preview import PreviewOut, Previews
from api.ratelimit import TenantRateLimiter
from api.schemas import ExecutionOut, TaskOut
from api.service import Principal, TaskService
from scheduling.status import TaskStatus

router = APIRouter(prefix="/ui", include_in_schema=False)

COOKIE = "ts_ui_key"
COOKIE_MAX_AGE = 12 * 3600
HISTORY_PAGE = 100
UPCOMING = 5
# No script runs on these pages: even a value that escaped escaping could not execute.
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def when(moment: datetime | None) -> str:
    """A UTC timestamp to the second, or a dash."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if moment else "—"


def relative(moment: datetime | None) -> str:
    """'in 5m' or '3h ago' from now."""
    if moment is None:
        return ""
    seconds = (moment - datetime.now(UTC)).total_seconds()
    size = abs(seconds)
    for unit, length in (("d", 86400), ("h", 3600), ("m", 60)):
        if size >= length:
            amount = f"{size // length:.0f}{unit}"
            break
    else:
        amount = f"{size:.0f}s"
    return f"in {amount}" if seconds >= 0 else f"{amount} ago"


def schedule_of(task: TaskOut) -> str:
    """One line for a task's schedule."""
    spec = task.schedule
    if task.schedule_type == "cron":
        return f"cron {spec.get('cron')} ({spec.get('timezone') or 'UTC'})"
    if task.schedule_type == "interval":
        return f"every {spec.get('interval_seconds'):g}s, {spec.get('interval_mode') or 'fixed_rate'}"
    if task.schedule_type == "dates":
        dates = spec.get("dates") or []
        return f"{len(dates)} dates, the last at {when(datetime.fromisoformat(dates[-1])) if dates else '—'}"
    run_at = spec.get("run_at")
    return f"once at {when(datetime.fromisoformat(run_at)) if run_at else '—'}"


def job_of(task: TaskOut) -> str:
    """The job's kind and target, without headers or body."""
    job = task.job_details
    if job.get("type") == "http":
        return f"HTTP {job.get('method', 'POST')} {job.get('url')}"
    if job.get("type") == "handler":
        return f"handler {job.get('name')}"
    return f"workflow {job.get('workflow_type')} on {job.get('task_queue')}"


def millis(start: datetime | None, end: datetime | None) -> float | None:
    """Milliseconds from start to end, when both are known."""
    return (end - start).total_seconds() * 1000 if start and end else None


def _ms(value: float) -> str:
    """A duration given in ms, with the digits its scale needs: seconds from 10 s, whole ms
    from 10 ms, three significant digits below, and microseconds below 1 ms."""
    size = abs(value)
    if size >= 10_000:
        return f"{value / 1000:g} s"
    if size >= 10:
        return f"{value:,.0f} ms"
    if size >= 1 or value == 0:
        return f"{value:.3g} ms"
    return f"{value * 1000:.3g} µs"


def late_ms(run: ExecutionOut) -> float | None:
    """How late a run started after its instant (its scheduled time before instants were
    recorded), in ms; None until it has started."""
    return millis(run.instant or run.scheduled_at, run.started_at)


def _env() -> Environment:
    env = Environment(
        loader=FileSystemLoader(FilePath(__file__).parent.parent / "templates"),
        autoescape=True, trim_blocks=True, lstrip_blocks=True,
    )
    env.filters.update(when=when, relative=relative, schedule=schedule_of, job=job_of)
    env.globals.update(millis=millis, late_ms=late_ms, duration=_ms,
                       statuses=[s.value for s in TaskStatus])
    return env


templates = Jinja2Templates(env=_env())


# ----------------------------------------------------------------- the lateness chart
@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    status: str
    label: str


@dataclass(frozen=True)
class Chart:
    """An SVG bar chart of start lateness (started_at - instant) per run, oldest first."""

    width: int
    height: int
    left: int
    top: int
    plot_width: float
    plot_height: float
    bars: list[Bar]
    ticks: list[tuple[float, str]]
    summary: str


# The chart's smallest scale, in ms: a microsecond, the resolution of the stored times.
FINEST_MS = 0.001


def _nice_ceiling(value: float) -> float:
    """The smallest of 1, 2 or 5 times a power of ten that is at least ``value`` (> 0)."""
    step = 10.0 ** math.floor(math.log10(value))
    for factor in (1, 2, 5, 10):
        if step * factor >= value * (1 - 1e-9):  # 0.3 / 0.1 is 2.9999999999999996
            return step * factor
    return step * 10


def lateness_chart(runs: list[ExecutionOut], width: int = 960, height: int = 220) -> Chart | None:
    """The chart of the given runs that have started; None when none has."""
    started = sorted((r for r in runs if r.started_at), key=lambda r: r.scheduled_at)
    if not started:
        return None
    values = [late_ms(r) or 0.0 for r in started]
    left, right, top, bottom = 64, 12, 12, 24
    plot_w, plot_h = width - left - right, height - top - bottom
    high = _nice_ceiling(max(max(values), FINEST_MS))
    low = -_nice_ceiling(-min(values)) if min(values) < 0 else 0.0

    def y(value: float) -> float:
        return top + plot_h * (high - value) / (high - low)

    slot = plot_w / len(values)
    bar_w = max(min(slot * 0.7, 36.0), 1.0)
    bars = [
        Bar(
            x=left + slot * i + (slot - bar_w) / 2,
            y=min(y(v), y(0)),
            width=bar_w,
            height=max(abs(y(v) - y(0)), 1.0),
            status=r.status,
            label=f"{when(r.scheduled_at)}: started {_ms(v)} late ({r.status}, {r.trigger})",
        )
        for i, (r, v) in enumerate(zip(started, values, strict=True))
    ]
    marks = {high, high / 2, 0.0, low} if low else {high, high / 2, 0.0}
    ticks = [(y(v), _ms(v)) for v in sorted(marks, reverse=True)]
    p95 = statistics.quantiles(values, n=20, method="inclusive")[-1] if len(values) > 1 else values[0]
    summary = (f"{len(values)} runs · median {_ms(statistics.median(values))} · "
               f"p95 {_ms(p95)} · max {_ms(max(values))}")
    return Chart(width, height, left, top, plot_w, plot_h, bars, ticks, summary)


# ----------------------------------------------------------------- sign-in
async def _upcoming(service: TaskService, viewer: Principal,
                    task_id: str) -> PreviewOut | str:
    """The task's next fires, or why they are not shown (the page shows the rest)."""
    try:
        return await Previews(service).of_task(viewer, task_id, limit=UPCOMING)
    except RateLimited as exc:  # the tenant's budget for listing fires is spent
        return exc.detail
    except ApiError:
        return "The task's workflow cannot be asked right now."


async def get_viewer(request: Request) -> Principal | None:
    """The tenant of the key in the sign-in cookie, as the API's key lookup finds it."""
    key = request.cookies.get(COOKIE)
    if not key:
        return None
    row = await admitted_key(request, key)
    return Principal(tenant_id=row.tenant_id, is_admin=row.is_admin) if row else None


ViewerDep = Annotated[Principal | None, Depends(get_viewer)]


async def over_read_limit(request: Request, viewer: Principal) -> Response | None:
    """A page is a read of the viewer's tenant, counted against its read limit as the API
    counts one: past it, a 429 page with Retry-After (None: the page may be served)."""
    limiter: TenantRateLimiter = request.app.state.rate_limiter
    try:
        await limiter.hit(viewer, "read")
    except RateLimited as exc:
        refused = page(request, "busy.html", {"viewer": viewer, "detail": exc.detail}, 429)
        refused.headers.update(exc.headers)
        return refused
    return None


def page(request: Request, name: str, context: dict[str, Any], code: int = 200) -> HTMLResponse:
    """A rendered template with the page's security headers."""
    response = templates.TemplateResponse(request, name, context, status_code=code)
    response.headers.update(HEADERS)
    return response


def to_login() -> RedirectResponse:
    """Send a visitor without a valid cookie to the sign-in form."""
    response = RedirectResponse("/ui/login", status_code=status.HTTP_303_SEE_OTHER)
    response.delete_cookie(COOKIE, path="/ui")
    return response


@router.get("/login")
async def login_form(request: Request) -> HTMLResponse:
    """The sign-in form."""
    return page(request, "login.html", {"error": None})


def cross_site(request: Request) -> bool:
    """Whether a browser sent this form from another site (a forged sign-in or sign-out):
    its Sec-Fetch-Site says so, or, from a browser without it, an Origin not this host."""
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        return site not in ("same-origin", "none")
    origin = request.headers.get("origin")
    return origin is not None and urlsplit(origin).netloc != request.headers.get("host")


def refused_cross_site(request: Request) -> HTMLResponse:
    return page(request, "login.html", {"error": "Sign in from this site's own form."}, 403)


@router.post("/login")
async def login(request: Request, key: Annotated[str, Form(max_length=500)] = "") -> Response:
    """Check the API key; on success keep it in an HttpOnly cookie and go to the task list."""
    if cross_site(request):
        return refused_cross_site(request)
    try:
        row = await admitted_key(request, key.strip()) if key else None
    except RateLimited as exc:
        refused = page(request, "login.html", {"error": "Too many failed sign-ins from this "
                                                        "address: try again later."}, 429)
        refused.headers.update(exc.headers)
        return refused
    if row is None:
        return page(request, "login.html", {"error": "That API key is unknown or revoked."}, 401)
    response = RedirectResponse("/ui", status_code=status.HTTP_303_SEE_OTHER)
    response.set_cookie(
        COOKIE, key.strip(), max_age=COOKIE_MAX_AGE, path="/ui", httponly=True,
        # In production always: TLS ends at a proxy the API may not know to trust, and the
        # cookie holds the key.
        samesite="strict", secure=request.app.state.production or request.url.scheme == "https",
    )
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    """Forget the key."""
    if cross_site(request):
        return refused_cross_site(request)
    return to_login()


# ----------------------------------------------------------------- pages
@router.get("")
async def tasks_page(
    request: Request,
    viewer: ViewerDep,
    service: ServiceDep,
    status_filter: Annotated[str, Query(alias="status", max_length=20)] = "",
    cursor: Annotated[str | None, Query(max_length=500)] = None,
) -> Response:
    """The tenant's tasks, newest first, optionally of one status."""
    if viewer is None:
        return to_login()
    if (refused := await over_read_limit(request, viewer)) is not None:
        return refused
    chosen = status_filter.upper() if status_filter.upper() in TaskStatus.__members__ else None
    overdue = status_filter.lower() == "overdue"
    tasks = await service.list(
        viewer, limit=50, cursor=cursor, status=chosen, name=None, all_tenants=False,
        overdue=overdue,
    )
    chosen = "overdue" if overdue else chosen
    return page(request, "tasks.html", {"viewer": viewer, "page": tasks, "chosen": chosen})


@router.get("/tasks/{task_id}")
async def task_page(
    request: Request,
    viewer: ViewerDep,
    service: ServiceDep,
    task_id: Annotated[str, Path(min_length=1, max_length=64)],
    cursor: Annotated[str | None, Query(max_length=500)] = None,
) -> Response:
    """A task, its lateness chart, its run history and its spec versions."""
    if viewer is None:
        return to_login()
    if (refused := await over_read_limit(request, viewer)) is not None:
        return refused
    try:
        task = await service.get(viewer, task_id)
    except TaskNotFound:
        return page(request, "not_found.html", {"viewer": viewer, "task_id": task_id}, 404)
    runs = await service.executions(viewer, task_id, limit=HISTORY_PAGE, cursor=cursor)
    versions = await task_versions(service, viewer, task_id, limit=HISTORY_PAGE, cursor=None)
    context = {"viewer": viewer, "task": task, "runs": runs, "chart": lateness_chart(runs.items),
               "upcoming": await _upcoming(service, viewer, task_id),
               "versions": version_diffs(versions.items),
               "calendars": await service.calendars.named(task.tenant_id, task.schedule)}
    return page(request, "task.html", context)
