"""A job dispatched ahead of its instant: waiting for it on the worker's clock, heartbeating
while it waits and while it runs, and refusing a run that comes too late to be on time. How
the wait ends on the millisecond is activities/precision.py's."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from activities.heartbeats import beat_every
from activities.payloads import JobInput, job_failure
from activities.precision import after_the_starts, sleep_until
from scheduling.status import JobFailure


async def wait_for_instant(job_input: JobInput) -> None:
    """Sleep until the run's instant; a cancel before it withdraws the run (nothing ran). A
    worker that starts to stop meanwhile (a deploy) hands the run back at once, while the jobs
    that started get the worker's shutdown grace to finish: its workflow sends the run again,
    due at the same instant, to the next jobs worker, as it does a run refused for its
    tenant's share (workflows/inflight.py answers a ``TenantBusy`` refusal so)."""
    if job_input.not_before is None or job_input.not_before <= datetime.now(UTC):
        return
    waiting = asyncio.current_task()
    assert waiting is not None
    stopping = arrived = False

    async def hand_back_on_shutdown() -> None:
        nonlocal stopping
        await activity.wait_for_worker_shutdown()
        if not arrived:
            stopping = True
            waiting.cancel()

    watch = asyncio.create_task(hand_back_on_shutdown())
    try:
        await sleep_until(job_input.not_before)
    except asyncio.CancelledError:
        cancelled = activity.cancellation_details()
        if stopping:
            waiting.uncancel()  # the cancel was ours
        if stopping or (cancelled is not None and cancelled.worker_shutdown):  # no withdrawal
            raise ApplicationError("the jobs worker is stopping before the run's instant; the "
                                   "run is sent again", type=JobFailure.TENANT_BUSY,
                                   non_retryable=True,
                                   category=ApplicationErrorCategory.BENIGN) from None
        raise job_failure(JobFailure.WITHDRAWN, "withdrawn before its instant: the job did not run",
                          retryable=False) from None
    finally:
        arrived = True
        # After the run has started: a herd's starts in this loop pass come first.
        after_the_starts(watch.cancel)


async def heartbeat_while_waiting(job_input: JobInput, timeout: timedelta | None) -> None:
    """Heartbeat while waiting for the instant, a few times over the remaining wait and every
    beat as it nears (activities/heartbeats.py), so a withdrawal reaches the run in time."""
    not_before = job_input.not_before
    while True:
        activity.heartbeat()
        remaining = (not_before - datetime.now(UTC)).total_seconds() if not_before else 0.0
        await asyncio.sleep(beat_every(remaining, timeout.total_seconds() if timeout else None,
                                       job_input.beat_seconds))


async def heartbeat_forever(timeout: timedelta | None, *details: Any) -> None:
    """Heartbeat often enough that the server sees us alive and can deliver a cancel."""
    every = max(0.5, min(5.0, (timeout.total_seconds() / 3) if timeout else 5.0))
    while True:
        activity.heartbeat(*details)
        await asyncio.sleep(every)


def due_of(job_input: JobInput) -> datetime:
    """When an attempt should start: its instant, or when it was sent if later (a run that
    waited in the queue)."""
    return job_input.not_before or job_input.sent_at or job_input.scheduled_at


def refuse_if_late(job_input: JobInput, *, started_before: bool) -> None:
    """A scheduled run that would start past its grace after its instant, or after it was sent
    (its worker was down or backlogged), does not run: it reports Late, and the workflow's
    missed-run policy decides the fire.
    A retry of a job that had started is a retry, not a late start."""
    limit = job_input.late_after_seconds
    if limit is None or started_before:
        return
    late = (datetime.now(UTC) - due_of(job_input)).total_seconds()
    if late > limit:
        raise job_failure(JobFailure.LATE,
                          f"not started: it reached its worker {late:.0f}s after its instant",
                          retryable=False)
