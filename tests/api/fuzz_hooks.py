"""Schemathesis hooks for the fuzz run (loaded through SCHEMATHESIS_HOOKS).

A few values are judged against things no schema can state: the clock (run_at, end_date, a
backfill's range, an interval that fits before end_date), how two fields compare (end_date after
start_date, a retry's maximum interval not below its initial one), DNS and the egress allow-list (URLs), the cron grammar, the IANA time zone
database, the workflow types this deployment allows, the tenant's shortest interval, and an
Idempotency-Key's use by earlier requests, the places the holidays package knows and the
tenant's calendars. Right before a request is sent, each such value
that the schema allows is replaced by one this deployment accepts; values the schema refuses
are left as generated, so a case meant to be refused still is. Everything else is sent as
generated."""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import schemathesis
from pydantic import TypeAdapter, ValidationError

from scheduling.bounds import JsonValue

TARGET_URL = os.environ.get("FUZZ_TARGET_URL", "http://127.0.0.1:9/hook")
WORKFLOW_TYPE = os.environ.get("FUZZ_WORKFLOW_TYPE", "EchoWorkflow")
WORKFLOW_QUEUE = os.environ.get("FUZZ_WORKFLOW_QUEUE", "echo")
DATES = ("start_date", "run_at", "end_date")  # in the order they must come
# The fuzzing tenant's min_interval_seconds: no task of the run fires while it lasts.
SHORTEST_INTERVAL = 3600.0


def _text(value: Any, longest: int, shortest: int = 0) -> bool:
    return isinstance(value, str) and shortest <= len(value) <= longest


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _instant(value: Any) -> bool:
    try:
        return isinstance(value, str) and datetime.fromisoformat(value).tzinfo is not None
    except ValueError:
        return False


def _storable(value: Any) -> bool:
    try:
        TypeAdapter(JsonValue).validate_python(value)
    except ValidationError:
        return False
    return True


def _task_fields(body: dict[str, Any]) -> None:
    job = body.get("job_details")
    if isinstance(job, dict):
        # Any JSON, says the schema; what a database stores, says the API (no NUL, bounded depth).
        for name, empty in (("body", None), ("args", {} if job.get("type") == "handler" else [])):
            values = job.get(name)
            if isinstance(values, dict | list) and name == "args":
                items = values.values() if isinstance(values, dict) else values
                if not all(_storable(item) for item in items):
                    job[name] = empty
            elif name == "body" and not _storable(values):
                job[name] = empty
        if _text(job.get("url"), 2048):
            job["url"] = TARGET_URL
        if _text(job.get("workflow_type"), 200, shortest=1):
            job["workflow_type"] = WORKFLOW_TYPE
        if job.get("type") == "workflow" and (job.get("task_queue") is None or _text(job["task_queue"], 200)):
            job["task_queue"] = WORKFLOW_QUEUE
    notify = body.get("notify")
    if isinstance(notify, dict) and _text(notify.get("url"), 2048):
        notify["url"] = TARGET_URL
    if _text(body.get("cron"), 200):
        body["cron"] = "0 10 * * *"
    if _text(body.get("timezone"), 64):
        body["timezone"] = "Europe/Berlin"
    interval = body.get("interval_seconds")
    if _number(interval) and 0.000001 <= interval < SHORTEST_INTERVAL:
        body["interval_seconds"] = SHORTEST_INTERVAL
    retry = body.get("retry_policy")
    if isinstance(retry, dict):
        initial = retry.get("initial_interval_seconds", 1.0)
        if _number(initial) and 0 < initial <= 3600 and _number(retry.get("maximum_interval_seconds", 300.0)):
            retry["maximum_interval_seconds"] = max(retry.get("maximum_interval_seconds", 300.0), initial)
    tomorrow = datetime.now(UTC).replace(microsecond=0) + timedelta(days=1)
    for days, name in enumerate(DATES):
        if _instant(body.get(name)):
            body[name] = (tomorrow + timedelta(days=days)).isoformat()
    interval = body.get("interval_seconds")
    if _number(interval) and interval >= 0.000001 and body.get("end_date") is not None:
        # An interval longer than the days to end_date leaves the task no fire: a 422.
        body["interval_seconds"] = SHORTEST_INTERVAL
    dates = body.get("dates")
    if isinstance(dates, list) and dates and all(_instant(d) for d in dates):
        # A dates task: future instants, as far apart as the tenant's shortest interval.
        body["dates"] = [(tomorrow + k * timedelta(seconds=2 * SHORTEST_INTERVAL)).isoformat()
                         for k in range(len(dates))]
    if isinstance(body.get("exclude_calendars"), list):
        body["exclude_calendars"] = []  # an id made up is no calendar of the tenant: a 404
    holidays = body.get("holidays")
    if isinstance(holidays, dict) and _text(holidays.get("country"), 3, shortest=2):
        # The holidays package knows these; other places are a 422.
        holidays["country"] = "DE"
        if holidays.get("subdivision") is not None and _text(holidays["subdivision"], 10, shortest=1):
            holidays["subdivision"] = "BY"


def _backfill_range(body: dict[str, Any]) -> None:
    # A backfill's range lies in the past, start before end.
    if _instant(body.get("start")) and _instant(body.get("end")):
        today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        body["start"] = (today - timedelta(days=2)).isoformat()
        body["end"] = (today - timedelta(days=1)).isoformat()


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: Any) -> None:
    """Pin the values above; a fresh Idempotency-Key for every request."""
    if case.headers and _text(case.headers.get("Idempotency-Key"), 255, shortest=1):
        case.headers["Idempotency-Key"] = uuid.uuid4().hex
    if isinstance(case.body, dict):
        _task_fields(case.body)
        _backfill_range(case.body)
