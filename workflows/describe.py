"""A task's schedule and job in a few words, for timer and activity summaries in the UI."""

from __future__ import annotations

from scheduling.spec import HandlerJob, HttpJob, ScheduleType, TaskSpec, redact_url


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
