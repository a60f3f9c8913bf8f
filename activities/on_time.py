"""A job dispatched ahead of its instant: waiting for it on the worker's clock, heartbeating
while it waits and while it runs, and refusing a run that comes too late to be on time. How
the wait ends on the millisecond is activities/precision.py's."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.heartbeats import beat_every
from activities.payloads import JobInput, job_failure, tenant_busy
from activities.precision import sleep_until
from scheduling.status import JobFailure


class WaitingRuns:
    """The runs of one jobs worker waiting for their instants. When the worker starts to stop
    (a deploy), one watcher hands them all back at once, while the jobs that started get the
    worker's shutdown grace to finish (a watcher per run cost a herd a stalled loop pass)."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        self._handed_back: set[asyncio.Task[Any]] = set()
        self._watch: asyncio.Task[None] | None = None

    def enter(self, task: asyncio.Task[Any]) -> None:
        self._tasks.add(task)
        # In this activity's context: it waits for this run's worker. A stopped worker's
        # watcher has ended; the next worker's first waiting run starts one for it.
        if activity.in_activity() and (self._watch is None or self._watch.done()):
            self._watch = asyncio.create_task(self._hand_back_on_stop())

    def leave(self, task: asyncio.Task[Any]) -> bool:
        """Take the run off the list; True if the stop's watcher had cancelled it."""
        self._tasks.discard(task)
        if task in self._handed_back:
            self._handed_back.discard(task)
            return True
        return False

    async def _hand_back_on_stop(self) -> None:
        await activity.wait_for_worker_shutdown()
        for task in self._tasks - self._handed_back:
            self._handed_back.add(task)
            task.cancel()


async def wait_for_instant(job_input: JobInput, waiting: WaitingRuns, attempt: int = 1) -> None:
    """Sleep until the run's instant; a cancel before it withdraws the run (nothing ran). A
    worker that starts to stop meanwhile hands the run back (``WaitingRuns``): its workflow
    sends it again, due at the same instant, to the next jobs worker, as it does a run refused
    for its tenant's share (workflows/inflight.py answers a ``TenantBusy`` refusal so)."""
    instant = job_input.not_before
    if instant is None or instant <= datetime.now(UTC):
        return
    run = asyncio.current_task()
    assert run is not None
    waiting.enter(run)
    try:
        await sleep_until(instant)
    except asyncio.CancelledError:
        stopping = waiting.leave(run)
        if stopping:
            run.uncancel()  # the watcher's cancel
        cancelled = activity.cancellation_details() if activity.in_activity() else None
        if cancelled is not None and cancelled.cancel_requested:
            raise _withdrawn() from None
        if stopping and datetime.now(UTC) >= instant:
            return  # its instant came in the same loop pass: it runs, within the grace
        if stopping or (cancelled is not None and cancelled.worker_shutdown):
            # Waiting for its instant, no attempt of the run has started its job.
            raise tenant_busy("the jobs worker is stopping before the run's instant; the run "
                              "is sent again", attempt, started=False) from None
        raise _withdrawn() from None
    else:
        waiting.leave(run)


def _withdrawn() -> ApplicationError:
    return job_failure(JobFailure.WITHDRAWN, "withdrawn before its instant: the job did not run",
                       retryable=False)


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
