"""The task queues' backlog, published as worker metrics: the signal to autoscale workers on."""

from __future__ import annotations

import asyncio

import structlog
from temporalio.client import Client
from temporalio.runtime import Runtime

from config.temporal import describe_queues

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
    while not stop.is_set():
        try:
            readings = await describe_queues(client, task_queue, timeout=5.0)
        except Exception as exc:  # metrics must never take the worker down
            log.warning("backlog.unavailable", error=type(exc).__name__)
            readings = []
        for reading in readings:
            labels = {"task_queue": reading.task_queue, "type": reading.type}
            count.set(reading.backlog, labels)
            age.set(reading.backlog_age_seconds, labels)
        try:
            await asyncio.wait_for(stop.wait(), every)
        except TimeoutError:
            pass
