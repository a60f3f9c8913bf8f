"""The Temporal side of the deployment: the one client connection and the queue names."""

from __future__ import annotations

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.runtime import Runtime

from config.tracing import temporal_interceptors


def jobs_queue(task_queue: str) -> str:
    """The task queue of job activities: its own slots, so runs waiting for their instant
    never starve workflow and bookkeeping work."""
    return f"{task_queue}-jobs"


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
