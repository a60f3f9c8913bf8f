"""The task queues' backlog, published as worker metrics: the signal to autoscale workers on."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import structlog
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client
from temporalio.runtime import Runtime

from config.temporal import jobs_queue

log = structlog.get_logger("task_scheduler.telemetry")


async def watch_backlog(
    client: Client, runtime: Runtime, task_queue: str, stop: asyncio.Event, every: float = 15.0
) -> None:
    """Publish the task queue's backlog count and age: the signal to autoscale workers on."""
    meter = runtime.metric_meter
    count = meter.create_gauge("scheduler_task_queue_backlog", "approximate tasks waiting in the queue")
    age = meter.create_gauge_float(
        "scheduler_task_queue_backlog_age_seconds", "age of the oldest task waiting in the queue"
    )
    watched = [
        (task_queue, "workflow", TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW),
        (task_queue, "activity", TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY),
        (jobs_queue(task_queue), "activity", TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY),
    ]
    while not stop.is_set():
        for queue, name, kind in watched:
            try:
                response = await client.workflow_service.describe_task_queue(
                    DescribeTaskQueueRequest(
                        namespace=client.namespace,
                        task_queue=TaskQueue(name=queue),
                        task_queue_type=kind,
                        report_stats=True,
                    ),
                    timeout=timedelta(seconds=5),
                )
            except Exception as exc:  # metrics must never take the worker down
                log.warning("backlog.unavailable", error=type(exc).__name__)
                continue
            labels = {"task_queue": queue, "type": name}
            count.set(int(response.stats.approximate_backlog_count), labels)
            age.set(response.stats.approximate_backlog_age.ToTimedelta().total_seconds(), labels)
        try:
            await asyncio.wait_for(stop.wait(), every)
        except TimeoutError:
            pass
