"""The Temporal side of the deployment: the one client connection and the queue names."""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass
from datetime import timedelta

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client
from temporalio.common import Priority
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.runtime import Runtime

from config.tracing import temporal_interceptors


def jobs_queue(task_queue: str) -> str:
    """The task queue of job activities: its own slots, so runs waiting for their instant
    never starve workflow and bookkeeping work."""
    return f"{task_queue}-jobs"


# Temporal priority keys of a task's workflow and runs: smaller runs first under a backlog.
PRIORITY_KEYS = {"high": 1, "medium": 3, "low": 5}
# Temporal's bound on a fairness key, in bytes.
FAIRNESS_KEY_MAX_BYTES = 64


def task_priority(priority: str, tenant_id: str) -> Priority:
    """The Temporal priority of a task's workflow, its runs and its webhook deliveries, with
    the tenant as the fairness key: where the server has fairness on, it hands a queue's
    backlog of one priority out round-robin by tenant, so that one tenant's backlog does not
    hold back another's."""
    key = tenant_id
    if len(key.encode()) > FAIRNESS_KEY_MAX_BYTES:
        key = hashlib.blake2b(key.encode(), digest_size=16).hexdigest()
    return Priority(priority_key=PRIORITY_KEYS[priority], fairness_key=key)


async def connect(
    address: str, namespace: str, runtime: Runtime | None = None, *, tracing: bool = False,
    lazy: bool = False,
) -> Client:
    """A Temporal client that speaks pydantic models (and carries traces when tracing is on);
    ``lazy`` connects on the first call instead of now."""
    return await Client.connect(
        address, namespace=namespace, data_converter=pydantic_data_converter, runtime=runtime,
        interceptors=temporal_interceptors(tracing), lazy=lazy,
    )


@dataclass(frozen=True)
class QueueReading:
    """One task queue (of one type) as Temporal describes it."""

    name: str  # workflow, activity or jobs
    task_queue: str
    type: str  # workflow or activity
    pollers: int
    backlog: int
    backlog_age_seconds: float
    dispatch_rate: float = 0.0  # tasks a second the workers took lately


async def describe_queue(client: Client, name: str, task_queue: str, kind: str, *,
                         timeout: float = 3.0) -> QueueReading:
    """One task queue (``kind`` workflow or activity) as the server describes it: approximate
    backlog, how fast workers take its tasks, and the pollers it saw in the last minute. The
    server refreshes the backlog figures every few seconds."""
    kind_enum = (TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW if kind == "workflow"
                 else TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY)
    response = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(namespace=client.namespace, task_queue=TaskQueue(name=task_queue),
                                 task_queue_type=kind_enum, report_stats=True),
        timeout=timedelta(seconds=timeout),
    )
    return QueueReading(
        name=name, task_queue=task_queue, type=kind, pollers=len(response.pollers),
        backlog=int(response.stats.approximate_backlog_count),
        backlog_age_seconds=response.stats.approximate_backlog_age.ToTimedelta().total_seconds(),
        dispatch_rate=float(response.stats.tasks_dispatch_rate),
    )


async def describe_queues(client: Client, task_queue: str, *, timeout: float = 3.0) -> list[QueueReading]:
    """The task queue (workflow and activity side) and the jobs queue, as the server
    describes them (``describe_queue``)."""
    watched = (
        ("workflow", task_queue, "workflow"),
        ("activity", task_queue, "activity"),
        ("jobs", jobs_queue(task_queue), "activity"),
    )
    return list(await asyncio.gather(*(describe_queue(client, *w, timeout=timeout) for w in watched)))
