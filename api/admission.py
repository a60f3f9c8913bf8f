"""What a tenant's quota allows a task: its size, its schedule's pace, its count."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from api.errors import InvalidTask, PayloadTooLarge, QuotaExceeded
from scheduling.spacing import ShortestGaps
from scheduling.spec import HttpJob, TaskSpec
from store.quotas import Quota


@dataclass(frozen=True)
class TenantUsage:
    """A tenant's quota and how many of its tasks are active, as read for one create."""

    quota: Quota
    active: int


def check_quota(
    usage: TenantUsage, spec: TaskSpec, now: datetime, *, body_size: int, gaps: ShortestGaps
) -> None:
    """Refuse a new task past any of the tenant's limits, naming the limit and its value."""
    quota, active = usage.quota, usage.active
    check_body_size(quota, body_size)
    check_task_limits(quota, spec, now, gaps=gaps)
    if active >= quota.max_active_tasks:
        raise QuotaExceeded(
            f"the tenant has {active} active tasks; its limit is "
            f"max_active_tasks={quota.max_active_tasks}"
        )


def check_body_size(quota: Quota, body_size: int) -> None:
    """Refuse a request body over the tenant's max_body_bytes (413)."""
    if body_size > quota.max_body_bytes:
        raise PayloadTooLarge(
            f"the body has {body_size} bytes; this tenant's limit is max_body_bytes={quota.max_body_bytes}"
        )


def check_task_limits(
    quota: Quota, spec: TaskSpec, now: datetime, *, gaps: ShortestGaps,
    before: TaskSpec | None = None,
) -> None:
    """Refuse a task's job headers or schedule past the tenant's limits. With ``before`` (an
    update), only the limits of the parts the update changes: a task that a later, tighter
    quota would refuse keeps working and can still be renamed or paused."""
    job, old_job = spec.job_details, before.job_details if before is not None else None
    old_headers = old_job.headers if isinstance(old_job, HttpJob) else None
    if isinstance(job, HttpJob) and (before is None or job.headers != old_headers):
        size = sum(len(k) + len(v) for k, v in job.headers.items())
        if size > quota.max_header_bytes:
            raise InvalidTask(
                f"job_details.headers: {size} bytes of headers; this tenant's limit is "
                f"max_header_bytes={quota.max_header_bytes}",
                field="job_details.headers",
            )
    seconds_cron = spec.cron is not None and len(spec.cron.split()) == 6
    if seconds_cron and not quota.allow_seconds_cron and (before is None or spec.cron != before.cron):
        raise InvalidTask(
            "cron: a 6-field cron (with seconds) is not allowed for this tenant "
            "(allow_seconds_cron=false)",
            field="cron",
        )
    if before is not None and _pace(spec) == _pace(before):
        return  # the dates only bound the runs; the gaps between them stay as they were
    gap = gaps.shortest_gap(spec, now)
    if gap is not None and gap < quota.min_interval_seconds:
        field = "interval_seconds" if spec.interval_seconds is not None else "cron"
        raise InvalidTask(
            f"{field}: runs would be {gap:g}s apart; this tenant's limit is "
            f"min_interval_seconds={quota.min_interval_seconds:g}",
            field=field,
        )


def _pace(spec: TaskSpec) -> tuple[object, ...]:
    """What sets the gaps between a schedule's runs."""
    return (spec.schedule_type, spec.cron, spec.timezone, spec.interval_seconds)
