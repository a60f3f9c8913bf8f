"""A task's schedule and job in a few words, for timer and activity summaries in the UI."""

from __future__ import annotations

import json

from scheduling.spec import HandlerJob, HttpJob, ScheduleType, TaskSpec, redact_url

# What Temporal takes for a summary, as the SDK sends it (JSON, so a character outside ASCII can
# take 12 bytes): its documented limit.
SUMMARY_BYTES = 200


def fitted(text: str, limit: int) -> str:
    """``text``, or its longest start whose JSON (as the SDK sends a string) fits ``limit`` bytes."""
    if len(json.dumps(text)) <= limit:
        return text
    low, high = 0, len(text)  # the longest start that fits: low fits, high does not
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if len(json.dumps(text[:middle])) <= limit else (low, middle)
    return text[:low]


def summary(head: str, tail: str = "") -> str:
    """A timer's, an activity's or a workflow's summary within SUMMARY_BYTES: ``head`` cut
    short where it must, then ``tail`` whole (a short one)."""
    return fitted(head, SUMMARY_BYTES - len(json.dumps(tail)) + 2) + tail


def describe_schedule(spec: TaskSpec) -> str:
    """The schedule in a few words, for timer summaries and the workflow's details."""
    if spec.schedule_type is ScheduleType.CRON:
        return f"cron {spec.cron} {spec.timezone}"
    if spec.schedule_type is ScheduleType.INTERVAL:
        return f"every {spec.interval_seconds:g}s {spec.interval_mode.value}"
    if spec.schedule_type is ScheduleType.DATES:
        return f"{len(spec.dates or [])} dates"
    return f"once at {spec.run_at.isoformat() if spec.run_at else '?'}"


def describe_job(spec: TaskSpec) -> str:
    """The job in a few words (an HTTP job's URL without its secrets), for activity summaries."""
    job = spec.job_details
    if isinstance(job, HttpJob):
        return f"{job.method} {redact_url(job.url)}"
    if isinstance(job, HandlerJob):
        return f"handler {job.name}"
    return f"workflow {job.workflow_type}"
