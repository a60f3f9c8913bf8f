"""Errors the API answers with, rendered as RFC 9457 problem+json by one set of handlers."""

from __future__ import annotations

import re
from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from scheduling.bounds import PATTERN_MESSAGES

PROBLEM = "application/problem+json"
BODY_PARSE_ERROR = "There was an error parsing the body"
TYPE_BASE = "https://task-scheduler.dev/problems/"
log = structlog.get_logger("task_scheduler.api")

# Fields of the design that this version does not implement yet: refused, never ignored.
NOT_YET_SUPPORTED: frozenset[str] = frozenset()
# Fields that belong to one kind of schedule only.
SCHEDULE_FIELDS = frozenset({"run_at", "cron", "interval_seconds", "max_runs", "dates"})


class ApiError(Exception):
    """Base of the API's errors: a status, a stable type slug and a human message."""

    status = 500
    slug = "internal"
    title = "Internal error"

    def __init__(self, detail: str, *, field: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.field = field
        self.headers = headers or {}


class Unauthorized(ApiError):
    status, slug, title = 401, "unauthorized", "Missing or invalid API key"


class TaskNotFound(ApiError):
    status, slug, title = 404, "task-not-found", "Task not found"


class NotFound(ApiError):
    status, slug, title = 404, "not-found", "Not found"


class InvalidTask(ApiError):
    status, slug, title = 422, "invalid-task", "Invalid task"


class TaskConflict(ApiError):
    status, slug, title = 409, "task-conflict", "Task cannot change in its current state"


class QuotaExceeded(ApiError):
    status, slug, title = 403, "quota-exceeded", "A tenant quota is exceeded"


class PayloadTooLarge(ApiError):
    status, slug, title = 413, "too-large", "Request body too large"


class RateLimited(ApiError):
    status, slug, title = 429, "rate-limited", "Too many requests"


class IdempotencyConflict(ApiError):
    status, slug, title = 422, "idempotency-conflict", "Idempotency-Key reused with another request"


class OutcomeUnknown(ApiError):
    status, slug, title = 504, "outcome-unknown", "The change was sent but its outcome is unknown"


class ServiceUnavailable(ApiError):
    status, slug, title = 503, "unavailable", "A dependency is unavailable"


class Overloaded(ApiError):
    status, slug, title = 503, "overloaded", "The scheduler takes no more creates for now"


def problem(status: int, slug: str, title: str, detail: str, **extra: Any) -> JSONResponse:
    """A problem+json response."""
    body = {"type": TYPE_BASE + slug, "title": title, "status": status, "detail": detail}
    body.update({k: v for k, v in extra.items() if v is not None})
    return JSONResponse(body, status_code=status, media_type=PROBLEM)


# The tags of the discriminated unions in request bodies, by the field that holds the union.
UNION_TAGS = {
    "body": frozenset({"once", "cron", "interval", "dates"}),
    "job_details": frozenset({"http", "handler", "workflow"}),
}


# How pydantic names the member of a plain union an error is about: str-enum[TaskStatus].
_MEMBER_TYPE = re.compile(r"[\w-]+\[.+\]")

METHODS = ("DELETE", "GET", "HEAD", "PATCH", "POST", "PUT")


def _allowed(request: Request) -> list[str]:
    """Every method some route serves at the request's path."""
    routes = request.app.router.routes
    return [method for method in METHODS
            if any(route.matches({**request.scope, "method": method})[0] is Match.FULL
                   for route in routes)]


def _schedule_tag(loc: tuple[Any, ...]) -> str | None:
    """The schedule_type a create body's error lies under, if any."""
    if len(loc) > 1 and loc[0] == "body" and loc[1] in UNION_TAGS["body"]:
        return str(loc[1])
    return None


def _field_path(loc: tuple[Any, ...]) -> str:
    # Only the first element says where (a field may itself be named "body", as an HTTP job's).
    parts = [
        str(p) for i, p in enumerate(loc)
        if not (i == 0 and p in ("body", "query", "path", "header"))
        and not _union_label(loc, i)
    ]
    return ".".join(parts) or "body"


def _union_label(loc: tuple[Any, ...], i: int) -> bool:
    """Whether ``loc[i]`` names a member of a union rather than a field: the tag of a
    discriminated union, followed by the member's field (job_details.http.url), or a plain
    union's member type (status.str-enum[TaskStatus]). A field named as a tag (an update's
    ``cron``, ``dates``) is a field."""
    part = loc[i]
    if isinstance(part, str) and _MEMBER_TYPE.fullmatch(part):
        return True
    return (0 < i < len(loc) - 1 and part in UNION_TAGS.get(str(loc[i - 1]), ())
            and isinstance(loc[i + 1], str))


def _tag_field(error: dict[str, Any]) -> str:
    """The discriminator field of a union whose tag is missing or unknown (job_details.type)."""
    field = _field_path(tuple(error.get("loc", ())))
    tag_field = str(error.get("ctx", {}).get("discriminator", "")).strip("'")
    return f"{field}.{tag_field}" if field != "body" else tag_field


def _message(error: dict[str, Any]) -> str:
    kind = error.get("type", "")
    loc = tuple(error.get("loc", ()))
    field = _field_path(loc)
    name = field.rsplit(".", 1)[-1]
    if kind == "json_invalid":
        return "the body is not valid JSON"
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        context = error.get("ctx", {})
        expected = context.get("expected_tags", "")
        if kind == "union_tag_not_found":
            return f"{_tag_field(error)}: field required (one of {expected})"
        return f"{_tag_field(error)}: {context.get('tag')!r} is not one of {expected}"
    tag = _schedule_tag(loc)
    if kind == "none_required" and tag is not None and field in SCHEDULE_FIELDS:
        return f"{field}: does not apply to schedule_type {tag!r}"
    if kind == "extra_forbidden":
        if name in NOT_YET_SUPPORTED:
            return f"{field}: not supported yet by this version; remove it"
        return f"{field}: unknown field"
    if kind == "missing":
        return f"{field}: field required"
    pattern = error.get("ctx", {}).get("pattern")
    if kind == "string_pattern_mismatch" and pattern in PATTERN_MESSAGES:
        return f"{field}: {PATTERN_MESSAGES[pattern]}"
    msg = str(error.get("msg", "invalid")).removeprefix("Value error, ")
    return f"{field}: {msg}" if field != "body" else msg


def _field(error: dict[str, Any]) -> str:
    loc = tuple(error.get("loc", ()))
    if error.get("type") == "json_invalid":
        return "body"  # its location is a character position, not a field
    if error.get("type") in ("union_tag_invalid", "union_tag_not_found"):
        return _tag_field(error)
    return _field_path(loc)


# A preview's body is a new task or a change, told apart by a task id: the same fields, so the
# same messages as create and update give.
PREVIEW_TAGS = frozenset({"new", "change"})


def _unwrapped(error: dict[str, Any]) -> dict[str, Any]:
    loc = tuple(error.get("loc", ()))
    if len(loc) > 1 and loc[0] == "body" and loc[1] in PREVIEW_TAGS:
        return {**error, "loc": (loc[0], *loc[2:])}
    return error


def validation_problem(errors: list[dict[str, Any]]) -> JSONResponse:
    """422 naming every field at fault."""
    errors = [_unwrapped(e) for e in errors]
    cleaned = [{"field": _field(e), "message": _message(e)} for e in errors]
    return problem(
        422,
        "validation",
        "Request validation failed",
        "; ".join(c["message"] for c in cleaned),
        field=cleaned[0]["field"] if cleaned else None,
        errors=cleaned,
    )


def install_error_handlers(app: FastAPI) -> None:
    """Render every error as problem+json, with no internal detail."""

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        response = problem(exc.status, exc.slug, exc.title, exc.detail, field=exc.field)
        response.headers.update(exc.headers)
        return response

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        return validation_problem(list(exc.errors()))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400 and exc.detail == BODY_PARSE_ERROR:
            # FastAPI's answer to a body it cannot decode (not UTF-8): invalid input, like
            # any other body that is not a JSON object the route takes.
            message = "the body is not valid JSON (send UTF-8 text)"
            return problem(422, "validation", "Request validation failed", message, field="body",
                           errors=[{"field": "body", "message": message}])
        slugs = {404: "not-found", 405: "method-not-allowed", 413: "too-large", 415: "unsupported-media-type"}
        response = problem(
            exc.status_code,
            slugs.get(exc.status_code, "http-error"),
            str(exc.detail) if exc.status_code != 404 else "Not found",
            str(exc.detail),
        )
        if exc.headers:
            response.headers.update(exc.headers)
        if exc.status_code == 405:
            # Starlette names the methods of the first route of the path only; a path served by
            # several routes (GET and POST /calendars) allows all of theirs.
            response.headers["Allow"] = ", ".join(_allowed(request))
        return response

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("api.unexpected_error", path=request.url.path)
        return problem(500, "internal", "Internal error", "an unexpected error occurred")
