"""The Temporal baselines: the minimal workflow per task ("bare") and the workflow a Temporal
Schedule starts ("schedules"); both run one empty activity that returns its start time.

`python -m bench.baseline --address HOST:PORT --task-queue Q` runs their worker as its own
process, as the scheduler's worker runs.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import time
from dataclasses import dataclass
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import SearchAttributeKey
from temporalio.worker import Worker

ACTIVITY_TIMEOUT = timedelta(seconds=60)
SCHEDULED_START = SearchAttributeKey.for_datetime("TemporalScheduledStartTime")


@dataclass
class BareInput:
    """The instants (epoch seconds) the bare workflow fires at, in order."""

    instants: list[float]


@activity.defn(name="bench_empty")
async def empty() -> float:
    """Does nothing; returns when it started (epoch seconds, worker clock)."""
    return time.time()


@workflow.defn(name="BareWorkflow")
class BareWorkflow:
    """Sleep until each instant, run the empty activity; returns (instant, started) pairs."""

    @workflow.run
    async def run(self, start: BareInput) -> list[list[float]]:
        """Fire once per instant."""
        fired: list[list[float]] = []
        for instant in start.instants:
            wait = instant - workflow.now().timestamp()
            if wait > 0:
                await workflow.sleep(wait)
            started = await workflow.execute_activity(empty, start_to_close_timeout=ACTIVITY_TIMEOUT)
            fired.append([instant, started])
        return fired


@workflow.defn(name="ScheduledWorkflow")
class ScheduledWorkflow:
    """Started by a Schedule: runs the empty activity; returns (intended instant, started)."""

    @workflow.run
    async def run(self) -> list[float]:
        """Fire once."""
        intended = workflow.info().typed_search_attributes.get(SCHEDULED_START)
        started = await workflow.execute_activity(empty, start_to_close_timeout=ACTIVITY_TIMEOUT)
        return [intended.timestamp() if intended else float("nan"), started]


async def serve(address: str, task_queue: str, activity_slots: int) -> None:
    """Poll until SIGTERM; slot limits match the scheduler worker's defaults."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    client = await Client.connect(address)
    worker = Worker(
        client,
        task_queue=task_queue,
        workflows=[BareWorkflow, ScheduledWorkflow],
        activities=[empty],
        max_concurrent_activities=activity_slots,
        max_concurrent_workflow_tasks=200,
    )
    async with worker:
        print("baseline worker polling", task_queue, flush=True)
        await stop.wait()


def main() -> None:
    """Entry point of the baseline worker process."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--address", required=True)
    parser.add_argument("--task-queue", required=True)
    parser.add_argument("--activity-slots", type=int, default=1000)
    args = parser.parse_args()
    asyncio.run(serve(args.address, args.task_queue, args.activity_slots))


if __name__ == "__main__":
    main()
