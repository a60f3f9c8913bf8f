"""What makes a new task valid: every rule beyond the body's own types, in one function.

The body models (``api/schemas.py``) and ``TaskSpec`` (``scheduling/spec.py``) refuse what is
malformed on its face: a bad cron, an unknown field, a value out of bounds. ``validate_new_task``
adds what needs the clock, the deployment or the tenant: a schedule that can still run, job and
notify URLs the egress guard lets through, a registered handler, a workflow job the tenant may
start, and the tenant's quota. Create, update (the task as it would be after the change) and a
dry run of a create all call it, so a task is accepted on the same terms on every path.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from activities.handlers import ArgsCheck
from activities.workflow_jobs import WorkflowJobRules, refusal
from api.errors import InvalidTask, PayloadTooLarge, QuotaExceeded
from api.pace import ShortestGaps, may_come_closer
from outbound.egress import EgressPolicy, EgressRefused
from scheduling import policy
from scheduling.fire import first_fire
from scheduling.spec import (
    HandlerJob,
    HttpJob,
    ScheduleType,
    TaskSpec,
    TimingError,
    WorkflowJob,
    check_durations,
    check_start,
    check_timing,
)
from store.quotas import Quota


@dataclass(frozen=True)
class TenantUsage:
    """A tenant's quota and how many of its tasks are active."""

    quota: Quota
    active: int | None = None  # None: not counted, as for a change to a task that counts already


@dataclass(frozen=True)
class TaskRules:
    """What this deployment lets a task use: its handlers, the egress guard, workflow jobs."""

    handlers: frozenset[str] = frozenset()
    egress: EgressPolicy = field(default_factory=EgressPolicy)
    workflow_jobs: WorkflowJobRules = field(default_factory=WorkflowJobRules)
    # Remembers recent cron schedules' fires: one per API process, so that creates share it.
    gaps: ShortestGaps = field(default_factory=ShortestGaps)
    # The checks of their arguments the handlers declare (activities.handlers.checks_args).
    handler_args: Mapping[str, ArgsCheck] = field(default_factory=dict)


async def validate_new_task(
    spec: TaskSpec,
    usage: TenantUsage,
    rules: TaskRules,
    *,
    now: datetime,
    body_size: int = 0,
    recurring_only: bool = False,
    before: TaskSpec | None = None,
    caller: str = "",
) -> None:
    """Pass if ``spec`` may be the tenant's task at ``now``; else raise the first rule's 4xx.
    ``caller``: the tenant whose share of the lookup threads resolves the URLs' hosts."""
    # ``before``: the task as it is, when ``spec`` is a change of it. The 4xx is InvalidTask (422),
    # PayloadTooLarge (413) or QuotaExceeded (403), naming the field or limit at fault. Nothing is
    # saved or changed (only the URLs' host names are resolved), so a dry run may call it too.
    if recurring_only and spec.schedule_type is ScheduleType.ONCE:
        raise InvalidTask(
            "schedule_type: /task/recurring takes 'cron' or 'interval'; use /task/create "
            "for a one-time task",
            field="schedule_type",
        )
    _check_timing(spec, now, before)
    _check_durations(spec, before)
    if before is None:
        _check_first_fire(spec, now)  # a change: its workflow checks the schedule it leaves
    await _check_targets(spec, rules, caller, before)
    _check_quota(spec, usage, rules.gaps, now=now, body_size=body_size, before=before)
    _check_workflow_job(spec, usage.quota, rules.workflow_jobs)


def _check_timing(spec: TaskSpec, now: datetime, before: TaskSpec | None) -> None:
    if before is not None and not policy.timing_judged(before, spec):
        return
    try:
        check_timing(spec, now, before)
        check_start(spec)
    except TimingError as exc:
        raise InvalidTask(str(exc), field=exc.field) from exc


def _check_durations(spec: TaskSpec, before: TaskSpec | None) -> None:
    try:
        check_durations(spec, before)
    except TimingError as exc:
        raise InvalidTask(str(exc), field=exc.field) from exc


def _check_first_fire(spec: TaskSpec, now: datetime) -> None:
    """Refuse a new task whose schedule has no fire at all: its window holds none (end_date),
    or a daylight saving gap it skips holds its only one."""
    if first_fire(spec, now) is None:
        name, message = policy.why_no_run(spec)
        raise InvalidTask(message, field=name)


async def _check_targets(spec: TaskSpec, rules: TaskRules, caller: str,
                         before: TaskSpec | None = None) -> None:
    """Refuse a URL the egress guard blocks, or a handler this deployment does not have."""
    job = spec.job_details
    if isinstance(job, HttpJob):
        await _check_url(rules.egress, job.url, "job_details.url", caller)
    if spec.notify is not None:
        await _check_url(rules.egress, spec.notify.url, "notify.url", caller)
    if isinstance(job, HandlerJob) and job.name not in rules.handlers:
        known = ", ".join(sorted(rules.handlers))
        raise InvalidTask(
            f"job_details.name: no handler named {job.name!r} is registered (known: {known})",
            field="job_details.name",
        )
    # A job's arguments are judged when they are given: a change of something else keeps
    # the ones the task was accepted with.
    judged = before is None or before.job_details != job
    if isinstance(job, HandlerJob) and judged and (check := rules.handler_args.get(job.name)) is not None:
        try:
            check(job.args)
        except (ValueError, TypeError) as exc:
            raise InvalidTask(f"job_details.args: {exc}", field="job_details.args") from exc


async def _check_url(egress: EgressPolicy, url: str, name: str, caller: str) -> None:
    try:
        await egress.check_url(url, tenant=caller)
    except EgressRefused as exc:
        raise InvalidTask(f"{name}: {exc}", field=name) from exc


def _check_quota(
    spec: TaskSpec, usage: TenantUsage, gaps: ShortestGaps, *, now: datetime, body_size: int,
    before: TaskSpec | None,
) -> None:
    """Refuse a task past any of the tenant's limits, naming the limit and its value."""
    # With ``before``, only the limits of the parts that change: a task that a later, tighter
    # quota would refuse keeps working and can still be renamed or paused.
    quota = usage.quota
    if body_size > quota.max_body_bytes:
        raise PayloadTooLarge(
            f"the body has {body_size} bytes; this tenant's limit is max_body_bytes={quota.max_body_bytes}"
        )
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
    # An update that keeps the pace and narrows the window (or keeps it) keeps the gaps.
    if before is None or may_come_closer(before, spec):
        gap = gaps.shortest_gap(spec, now)
        if gap is not None and gap < quota.min_interval_seconds:
            name = ("interval_seconds" if spec.interval_seconds is not None
                    else "dates" if spec.dates is not None else "cron")
            raise InvalidTask(
                f"{name}: runs would be {gap:g}s apart; this tenant's limit is "
                f"min_interval_seconds={quota.min_interval_seconds:g}",
                field=name,
            )
    if usage.active is not None and usage.active >= quota.max_active_tasks:
        raise QuotaExceeded(
            f"the tenant has {usage.active} active tasks; its limit is "
            f"max_active_tasks={quota.max_active_tasks}"
        )


def _check_workflow_job(spec: TaskSpec, quota: Quota, rules: WorkflowJobRules) -> None:
    """Refuse a workflow job the deployment or the tenant's grant (in ``quota``) does not allow."""
    # The job activity checks the same again before it starts the workflow.
    job = spec.job_details
    if not isinstance(job, WorkflowJob):
        return
    refused = refusal(job, rules, granted_types=quota.workflow_types,
                      granted_queues=quota.workflow_task_queues)
    if refused is not None:
        raise InvalidTask(str(refused), field=refused.field)
