"""Assembles the Temporal worker: the one place that wires activities to their dependencies."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from sqlalchemy import Engine
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.runtime import Runtime
from temporalio.worker import Worker

from activities.bookkeeping import BookkeepingActivities
from activities.handlers import Handler, load_handlers
from activities.jobs import JobActivities
from workflows.task import TaskWorkflow

WORKFLOWS: Sequence[type] = (TaskWorkflow,)


async def connect(address: str, namespace: str, runtime: Runtime | None = None) -> Client:
    """A Temporal client that speaks pydantic models."""
    return await Client.connect(
        address, namespace=namespace, data_converter=pydantic_data_converter, runtime=runtime
    )


def build_activities(
    *,
    engine: Engine,
    http: httpx.AsyncClient,
    client: Client | None,
    task_queue: str,
    extra_handlers: Mapping[str, Handler] | None = None,
    max_response_bytes: int = 1024,
) -> list[Any]:
    """Every activity the task workflow calls, bound to its dependencies."""
    jobs = JobActivities(
        http=http,
        handlers=load_handlers(extra_handlers),
        client=client,
        default_task_queue=task_queue,
        max_response_bytes=max_response_bytes,
    )
    books = BookkeepingActivities(engine)
    return [jobs.run_job, books.save_task, books.save_execution]


def build_worker(
    client: Client,
    *,
    task_queue: str,
    activities: Sequence[Any],
    executor: ThreadPoolExecutor,
    max_concurrent_activities: int = 1000,
    max_concurrent_workflow_tasks: int = 200,
) -> Worker:
    """The worker for the task queue; sync bookkeeping activities run on ``executor``."""
    return Worker(
        client,
        task_queue=task_queue,
        workflows=list(WORKFLOWS),
        activities=list(activities),
        activity_executor=executor,
        max_concurrent_activities=max_concurrent_activities,
        max_concurrent_local_activities=max(64, executor._max_workers),
        max_concurrent_workflow_tasks=max_concurrent_workflow_tasks,
    )
