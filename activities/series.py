"""A series: consecutive fires of one task dispatched together and run on the worker's clock.

A task whose fires come faster than the dispatch lead would otherwise cost a workflow round trip
per fire; a series costs one for many. Inside it the task's policies hold as they do between
single runs: the overlap policy (skip or allow) when a fire comes while a run is still going,
the missed-run policy for fires reached long after their instant (a retry after the worker
died), the retry policy for each run, and the consecutive-failure limit, which stops the series
from starting more runs. Every fire ends as a row written here: a run's outcome, or SKIPPED
with its reason; fires never started (withdrawn, or stopped by the failure limit) go back to
the workflow.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.agenda import Agenda
from activities.contracts import (
    JobFailureDetails,
    JobInput,
    JobResult,
    SeriesFire,
    SeriesInput,
    SeriesOutcome,
    SeriesResult,
)
from activities.instant import sleep_until_instant
from store.records import ExecutionRecord

AttemptFn = Callable[[JobInput, int], Awaitable[JobResult]]
WriteFn = Callable[[ExecutionRecord], Awaitable[None]]
RunningFn = Callable[[str], Awaitable[bool]]
# Heartbeats carry the fires that ended, so a retried series does not run them again; every
# 2 s also lets a cancel, pause or update reach the series in time to withdraw its next fire.
HEARTBEAT_EVERY = 2.0
# A beat waits (at most half a second) until no run of this process is due within 5 ms and
# the runs due just before have had 10 ms to start.
BEAT_CLEAR_OF, BEAT_SETTLE, BEAT_WAITS_AT_MOST = 0.005, 0.01, 0.5
OUTCOME_ERROR_CHARS = 300
# A fire is built this long after the fire before it was due.
BUILD_AFTER = timedelta(milliseconds=10)


class RunRegistry:
    """Which runs are going on: this process knows its own; for others it asks the database.

    A series' first fire must know whether the series before it (maybe on another worker) is
    still running its last fire."""

    KEEP = 50_000

    def __init__(self, lookup: Callable[[str], Awaitable[str | None]] | None = None) -> None:
        self._lookup = lookup
        self._known: OrderedDict[str, bool] = OrderedDict()

    def started(self, execution_id: str) -> None:
        self._known[execution_id] = True
        self._known.move_to_end(execution_id)
        while len(self._known) > self.KEEP:
            self._known.popitem(last=False)

    def ended(self, execution_id: str) -> None:
        if execution_id in self._known:
            self._known[execution_id] = False

    async def is_running(self, execution_id: str) -> bool:
        known = self._known.get(execution_id)
        if known is not None or self._lookup is None:
            return bool(known)
        return await self._lookup(execution_id) == "RUNNING"


def sort_overdue(
    fires: list[SeriesFire], now: datetime, series: SeriesInput
) -> tuple[list[SeriesFire], list[tuple[SeriesFire, str]]]:
    """The fires still to run and those skipped (with the reason), for fires reached long after
    their instant: the same rules the workflow applies to fires it finds missed."""
    limit = timedelta(seconds=series.missed_after_seconds)
    overdue = [f for f in fires if now - f.not_before > limit]
    if not overdue:
        return fires, []
    on_time = [f for f in fires if now - f.not_before <= limit]
    skipped: list[tuple[SeriesFire, str]] = []
    if series.catchup_window_seconds is not None:
        window = timedelta(seconds=series.catchup_window_seconds)
        skipped += [(f, "outside_window") for f in overdue if now - f.scheduled_at > window]
        overdue = [f for f in overdue if now - f.scheduled_at <= window]
    keep: list[SeriesFire] = []
    if series.missed_run_policy == "catchup":
        keep = overdue[-series.max_catchup_runs:]
    elif series.missed_run_policy == "single_catchup" and not on_time:
        keep = overdue[-1:]
    skipped += [(f, "missed") for f in overdue if f not in keep]
    return keep + on_time, skipped


class SeriesRunner:
    """Runs one series: waits for each instant, applies the policies, records every fire."""

    def __init__(
        self, series: SeriesInput, *, attempt: AttemptFn, write: WriteFn, runs: RunRegistry,
        agenda: Agenda,
    ) -> None:
        self._series = series
        self._agenda = agenda
        self._attempt = attempt
        self._write = write
        self._runs = runs
        self._previous = series.previous_execution_id
        self._done: dict[str, SeriesOutcome] = {}
        self._beat_done: list[dict[str, Any]] = []  # the same outcomes, as a heartbeat sends them
        self._running = 0
        self._consecutive = series.consecutive_failures
        self._tripped = False
        self._caught_up: set[str] = set()
        self._waiting: tuple[asyncio.Task[None], asyncio.Event] | None = None
        self._broken: Exception | None = None

    async def run(self) -> SeriesResult:
        series = self._series
        self._done = _resumed(activity.info().heartbeat_details)
        self._beat_done = [o.model_dump(mode="json", exclude_none=True) for o in self._done.values()]
        pending = sorted(
            (f for f in series.fires if f.execution_id not in self._done),
            key=lambda f: f.not_before,
        )
        now = datetime.now(UTC)
        pending, skipped = sort_overdue(pending, now, series)
        # Fires run long after their instant are catch-up runs, as the workflow records them.
        limit = timedelta(seconds=series.missed_after_seconds)
        self._caught_up = {f.execution_id for f in pending if now - f.not_before > limit}
        beat = asyncio.create_task(self._heartbeat())
        jobs: set[asyncio.Task[None]] = set()
        started: set[str] = set()
        try:
            try:
                for fire, reason in skipped:
                    await self._skip(fire, reason)
                for index, fire in enumerate(pending):
                    if fire.not_before <= datetime.now(UTC):
                        # Reached already (fires caught up after a retry): it starts from
                        # here, beside the other fires reached with it.
                        if self._tripped:
                            break
                        job_input, record = self._prepare(fire)
                        if await self._admit(fire, started):
                            self._spawn(jobs, self._run_fire(job_input, record))
                        continue
                    # Built before its instant, and one at a time, once the fire before has
                    # started: not all at the series' start, where the series of many tasks
                    # arrive together. It waits for its instant in a task of its own and
                    # starts right there, so the runs due at one instant start one after
                    # another without each series due with them waking first.
                    reached = asyncio.Event()
                    self._waiting = (self._spawn(jobs, self._fire(fire, started, reached)), reached)
                    if index + 1 == len(pending):
                        break
                    # the runs due now (of every task) start before the next is built
                    await _sleep_until(min(fire.not_before + BUILD_AFTER, pending[index + 1].not_before))
                    await reached.wait()
                    self._raise_if_broken()
                    if self._tripped:
                        break
            except asyncio.CancelledError:
                if not _withdrawn():
                    raise
                # Withdrawn (cancel, pause, update): the fires not reached never run.
                self._withdraw_waiting()
            while jobs:
                try:
                    await asyncio.wait(set(jobs))
                except asyncio.CancelledError:
                    if not _withdrawn():
                        raise
                    # A withdrawal now only stops what has not started: runs going on finish.
                    self._withdraw_waiting()
            self._raise_if_broken()
        except asyncio.CancelledError:
            # The worker is stopping or the series timed out: it is retried, and the retry
            # skips the fires this attempt finished (heartbeat details).
            for job in jobs:
                job.cancel()
            raise
        finally:
            beat.cancel()
        order = {f.execution_id: f.not_before for f in series.fires}
        unrun = [
            f for f in sorted(series.fires, key=lambda f: f.not_before)
            if f.execution_id not in self._done and f.execution_id not in started
        ]
        return SeriesResult(
            outcomes=sorted(self._done.values(), key=lambda o: order[o.execution_id]),
            unrun=[f.scheduled_at for f in unrun],
            tripped=self._tripped,
        )

    async def _fire(self, fire: SeriesFire, started: set[str], reached: asyncio.Event) -> None:
        """One fire: wait for its instant, then run it unless it is not admitted."""
        job_input, record = self._prepare(fire)
        try:
            with self._agenda.waiting(fire.not_before):
                await sleep_until_instant(fire.not_before)
        finally:
            reached.set()
        try:
            admitted = await self._admit(fire, started)
        except Exception as exc:  # the series fails (and is retried) as if it had done this
            self._broken = exc
            return
        if admitted:
            await self._run_fire(job_input, record)

    async def _admit(self, fire: SeriesFire, started: set[str]) -> bool:
        """At a fire's instant: whether it runs. Not once the failure limit has stopped the
        series; under the skip overlap policy, not while a run is going (it is skipped)."""
        if self._tripped:
            return False
        started.add(fire.execution_id)
        if self._series.overlap != "allow" and await self._busy():
            await self._skip(fire, "overlap")
            return False
        return True

    @staticmethod
    def _spawn(jobs: set[asyncio.Task[None]], work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        job = asyncio.create_task(work)
        jobs.add(job)
        job.add_done_callback(jobs.discard)
        return job

    def _withdraw_waiting(self) -> None:
        """The fire still waiting for its instant is not run."""
        if self._waiting is not None and not self._waiting[1].is_set():
            self._waiting[0].cancel()

    def _raise_if_broken(self) -> None:
        if self._broken is not None:
            raise self._broken

    async def _busy(self) -> bool:
        """A run is still going: one of this series, or the last of the series before."""
        if self._running:
            return True
        if self._previous is not None:
            if await self._runs.is_running(self._previous):
                return True
            self._previous = None
        return False

    async def _heartbeat(self) -> None:
        while True:
            # Not between the runs due at an instant: a beat carries every fire done so far.
            await self._agenda.gap(BEAT_CLEAR_OF, settle=BEAT_SETTLE, within=BEAT_WAITS_AT_MOST)
            activity.heartbeat({"done": list(self._beat_done)})
            await asyncio.sleep(HEARTBEAT_EVERY)

    def _finished(self, outcome: SeriesOutcome) -> None:
        """A fire is done and recorded: its outcome goes into every later heartbeat."""
        self._done[outcome.execution_id] = outcome
        self._beat_done.append(outcome.model_dump(mode="json", exclude_none=True))

    async def _skip(self, fire: SeriesFire, reason: str) -> None:
        series = self._series
        now = datetime.now(UTC)
        await self._write(
            ExecutionRecord(
                id=fire.execution_id, task_id=series.task_id, tenant_id=series.tenant_id,
                scheduled_at=fire.scheduled_at, status="SKIPPED", reason=reason, finished_at=now,
            )
        )
        self._finished(SeriesOutcome(
            execution_id=fire.execution_id, scheduled_at=fire.scheduled_at, status="SKIPPED",
            reason=reason, finished_at=now,
        ))

    def _prepare(self, fire: SeriesFire) -> tuple[JobInput, ExecutionRecord]:
        """A fire's job input and the record its attempts fill in."""
        series = self._series
        job_input = JobInput(
            execution_id=fire.execution_id, task_id=series.task_id, tenant_id=series.tenant_id,
            scheduled_at=fire.scheduled_at, job=series.job, not_before=fire.not_before,
            trigger="catchup" if fire.execution_id in self._caught_up else "schedule",
            drift_threshold_seconds=series.drift_threshold_seconds,
            run_timeout_seconds=series.run_timeout_seconds,
        )
        record = ExecutionRecord(
            id=fire.execution_id, task_id=series.task_id, tenant_id=series.tenant_id,
            scheduled_at=fire.scheduled_at, trigger=job_input.trigger, status="FAILED",
        )
        return job_input, record

    async def _run_fire(self, job_input: JobInput, record: ExecutionRecord) -> None:
        self._running += 1
        self._runs.started(job_input.execution_id)
        try:
            await self._execute(job_input, record)
        finally:
            self._running -= 1
            self._runs.ended(job_input.execution_id)
        await self._write(record)
        self._finished(SeriesOutcome(
            execution_id=record.id, scheduled_at=record.scheduled_at, status=record.status,
            # The row has the whole message; the outcome (and the heartbeat) a short one.
            error=record.error[:OUTCOME_ERROR_CHARS] if record.error else None,
            attempts=record.attempts, started_at=record.started_at,
            finished_at=record.finished_at, lateness_ms=record.lateness_ms, drifted=record.drifted,
        ))
        limit = self._series.max_consecutive_failures
        if record.status == "FAILED":
            self._consecutive += 1
            self._tripped = self._tripped or (limit is not None and self._consecutive >= limit)
        else:
            self._consecutive = 0

    async def _execute(self, job_input: JobInput, record: ExecutionRecord) -> None:
        """Every attempt of one fire's run, under the task's retry policy, into its record."""
        series = self._series
        attempt = 1
        while True:
            record.attempts = attempt
            try:
                async with asyncio.timeout(series.run_timeout_seconds):
                    result = await self._attempt(job_input, attempt)
            except TimeoutError:
                retryable, details = True, None
                record.error = (
                    f"the run took longer than run_timeout_seconds={series.run_timeout_seconds:g}"
                )
            except ApplicationError as exc:
                retryable, details = not exc.non_retryable, JobFailureDetails.of(exc.details)
                record.error = str(exc.message)[:2000]
            except Exception as exc:  # anything unforeseen fails the attempt, never the series
                retryable, details = True, None
                record.error = f"{type(exc).__name__}: {exc}"[:2000]
            else:
                record.status, record.error = "COMPLETED", None
                record.started_at = record.started_at or result.started_at
                record.http_status, record.response_snippet = result.http_status, result.response_snippet
                break
            if details is not None:
                record.started_at = record.started_at or details.started_at
                record.http_status, record.response_snippet = details.http_status, details.response_snippet
            if not retryable or attempt >= series.max_attempts:
                record.dead_letter = "open"  # retries are exhausted: listable and replayable
                break
            await asyncio.sleep(_backoff(series, attempt))
            attempt += 1
        record.finished_at = datetime.now(UTC)
        if record.started_at is not None:
            lateness = (record.started_at - record.scheduled_at).total_seconds()
            record.lateness_ms = max(0.0, lateness * 1000)
            threshold = series.drift_threshold_seconds
            record.drifted = threshold is not None and lateness > threshold


def _withdrawn() -> bool:
    """The series was cancelled by its workflow (not stopped by the worker or a timeout)."""
    details = activity.cancellation_details()
    return bool(details and details.cancel_requested and not details.worker_shutdown
                and not details.timed_out)


async def _sleep_until(instant: datetime) -> None:
    delay = (instant - datetime.now(UTC)).total_seconds()
    if delay > 0:
        await asyncio.sleep(delay)


def _backoff(series: SeriesInput, attempt: int) -> float:
    delay = series.initial_interval_seconds * series.backoff_coefficient ** (attempt - 1)
    return float(min(delay, series.maximum_interval_seconds))


def _resumed(details: Any) -> dict[str, SeriesOutcome]:
    """The fires a previous attempt of this series finished, from its last heartbeat."""
    if not details or not isinstance(details[0], dict):
        return {}
    outcomes = [SeriesOutcome.model_validate(o) for o in details[0].get("done", [])]
    return {o.execution_id: o for o in outcomes}
