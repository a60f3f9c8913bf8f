"""Assembles the Temporal workers: the one place that wires activities to their dependencies.

There are two Temporal workers: one on the task queue for the task workflows and their
bookkeeping, one on ``<task queue>-jobs`` for job runs, with many slots, since a run dispatched
ahead of its instant waits in its slot. A worker process runs one of them or both (its role)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
from sqlalchemy import Engine
from temporalio.client import Client
from temporalio.common import MetricGauge, MetricMeter
from temporalio.worker import (
    PollerBehavior,
    PollerBehaviorAutoscaling,
    UnsandboxedWorkflowRunner,
    Worker,
    WorkflowRunner,
)
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from activities.bookkeeping import BookkeepingActivities
from activities.calendars import CalendarActivities
from activities.handlers import Handler, load_handlers
from activities.jobs import JobActivities
from activities.notify import NotifyActivities
from activities.options import RunOptions, RunOptionsActivities
from activities.share import DEFAULT_SLOTS, SlotShare
from activities.signing import Signer
from activities.workflow_jobs import WorkflowJobRules
from config.settings import SigningSettings
from config.temporal import jobs_queue
from outbound.calls import Outbound, OutboundLimits
from store.batch import BatchWriter
from store.signing import SecretBox
from workflows.registry import WORKFLOWS


@dataclass
class ActivitySet:
    """Activities by the worker that hosts them."""

    workflow_side: list[Any]
    jobs: list[Any]
    job_slots: int  # the jobs worker's activity slots, shared out among tenants


def build_activities(
    *,
    engine: Engine,
    http: httpx.AsyncClient,
    client: Client | None,
    extra_handlers: Mapping[str, Handler] | None = None,
    limits: OutboundLimits | None = None,
    workflow_jobs: WorkflowJobRules | None = None,
    meter: MetricMeter | None = None,
    run_options: RunOptions | None = None,
    signing: SigningSettings | None = None,
    job_slots: int = DEFAULT_SLOTS,
) -> ActivitySet:
    """Every activity the task workflow calls, bound to its dependencies (``workflow_jobs``:
    what workflow jobs may start, none by default; ``limits``: the bounds of HTTP calls, the
    settings' defaults by default; ``meter``: where the calls waiting for a slot are counted;
    ``run_options``: the lead and history limit of the task workflows, none and 10,000 by
    default; ``signing``: the key of the tenants' signing secrets, the development one by
    default; ``job_slots``: the jobs worker's slots, each tenant's share taken from them)."""
    writer = BatchWriter(engine)
    waiting = None if meter is None else http_waiting_gauge(meter)
    # One per process: jobs and webhooks of a tenant share its slots.
    outbound = Outbound(http, limits or OutboundLimits(), waiting)
    signer = Signer(engine, SecretBox((signing or SigningSettings()).key.get_secret_value()))
    jobs = JobActivities(
        http=http,
        handlers=load_handlers(extra_handlers),
        client=client,
        workflow_jobs=workflow_jobs,
        engine=engine,
        writer=writer,
        outbound=outbound,
        signer=signer,
        share=SlotShare(job_slots),
    )
    books = BookkeepingActivities(engine, writer)
    notes = NotifyActivities(http, outbound, signer)
    options = RunOptionsActivities(run_options or RunOptions())
    calendars = CalendarActivities(engine)
    return ActivitySet(
        workflow_side=[books.record, books.completed_row, notes.notify, options.run_options, calendars.calendar_dates,
                       calendars.calendar_changes],
        jobs=[jobs.run_job],
        job_slots=job_slots,
    )


def http_waiting_gauge(meter: MetricMeter) -> MetricGauge:
    """The worker metric of HTTP calls waiting for a slot, by ``reason`` (tenant, host)."""
    return meter.create_gauge(
        "scheduler_http_calls_waiting",
        "HTTP calls (jobs and webhooks) waiting for a slot of their tenant or of its host",
    )


# Activity polls of the jobs worker, as many as the backlog of its queue calls for (the SDK's
# poller autoscaling): a herd dispatched ahead arrives as thousands of activity tasks at once.
def jobs_polls(slots: int) -> PollerBehavior:
    """5 to 100 autoscaled polls; never more than the worker has slots."""
    return PollerBehaviorAutoscaling(
        minimum=min(5, slots), initial=min(20, slots), maximum=min(100, slots)
    )


# Workflow task polls of the workflows worker: as many as the server's backlog calls for. With
# the SDK's fixed five, one of which polls the task queue itself (the rest wait on the sticky
# queue of workflows already cached), the first workflow task of each new task queued up while
# tasks were created faster than that one poll fetched them: in a herd of 10,000 the last third
# first ran minutes after its creation, past its instant.
WORKFLOW_POLLS = PollerBehaviorAutoscaling(minimum=2, initial=5, maximum=50)

# Heartbeats reach the server at least every second, so a cancel reaches a job fast.
_HEARTBEATS: dict[str, Any] = {
    "max_heartbeat_throttle_interval": timedelta(seconds=1),
    "default_heartbeat_throttle_interval": timedelta(seconds=1),
}


# Activity slots of the workflows worker, where webhook deliveries are its only regular
# activity: async, so one waiting for its tenant's HTTP slots costs a coroutine. A tenant's
# deliveries beyond its HTTP slots wait in worker slots (up to activities/notify.py's
# WAIT_FOR_SLOT_SECONDS), so there are many; past them the server hands the backlog out
# round-robin by tenant (config/temporal.py, task_priority).
NOTIFY_SLOTS = 500


def build_workflow_worker(
    client: Client,
    *,
    task_queue: str,
    activities: ActivitySet,
    notify_slots: int = NOTIFY_SLOTS,
    max_concurrent_workflow_tasks: int = 200,
    max_cached_workflows: int = 4000,
    sandboxed: bool = True,
    shutdown_grace: timedelta = timedelta(0),
) -> Worker:
    """The worker of the task queue: task workflows, their bookkeeping (local activities) and
    webhook deliveries (a stop gives those going ``shutdown_grace`` to finish)."""
    # Without the sandbox a workflow run does not re-import its module: cheaper starts and a
    # smaller cache, the determinism of the code resting on its replay tests instead.
    runner: WorkflowRunner = SandboxedWorkflowRunner() if sandboxed else UnsandboxedWorkflowRunner()
    return Worker(
        client,
        task_queue=task_queue,
        workflows=list(WORKFLOWS),
        activities=activities.workflow_side,
        max_concurrent_activities=notify_slots,
        # Bookkeeping is async and batched: many may wait on one commit.
        max_concurrent_local_activities=2000,
        max_concurrent_workflow_tasks=max_concurrent_workflow_tasks,
        max_cached_workflows=max_cached_workflows,
        workflow_task_poller_behavior=WORKFLOW_POLLS,
        workflow_runner=runner,
        graceful_shutdown_timeout=shutdown_grace,
        **_HEARTBEATS,
    )


def build_jobs_worker(
    client: Client,
    *,
    task_queue: str,
    activities: ActivitySet,
    shutdown_grace: timedelta = timedelta(0),
) -> Worker:
    """The worker of ``<task queue>-jobs``: job runs, each waiting in its slot for its instant.
    A stop hands the waiting runs back at once and gives the started jobs ``shutdown_grace``
    to finish (activities/on_time.py)."""
    return Worker(
        client,
        task_queue=jobs_queue(task_queue),
        activities=activities.jobs,
        max_concurrent_activities=activities.job_slots,
        activity_task_poller_behavior=jobs_polls(activities.job_slots),
        graceful_shutdown_timeout=shutdown_grace,
        **_HEARTBEATS,
    )

