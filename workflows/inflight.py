"""The runs of a task in flight: dispatching each job activity (a lead ahead of its instant, or
at it), withdrawing the ones still waiting, and handing back how each ended.

Workflow code: times come from ``workflow.now()``. The only state a run's own coroutine
touches is this object's; the task workflow reads the outcomes under its lock.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, RetryState
from temporalio.exceptions import TimeoutError as TimeoutFailure

with workflow.unsafe.imports_passed_through():
    from activities.heartbeats import waiting_heartbeat_timeout
    from activities.payloads import (
        COMPLETED_ROW,
        RUN_JOB,
        STARTED,
        BusyRefusal,
        CompletedRun,
        JobFailureDetails,
        JobInput,
        JobResult,
        RowAsk,
        RunStart,
    )
    from config.temporal import jobs_queue, task_priority
    from scheduling.policy import (
        UNTAKEN_AFTER,
        Flight,
        Run,
        aimed_instant,
        late_limit,
        may_withdraw,
        untaken,
    )
    from scheduling.spec import TaskSpec
    from scheduling.status import ExecutionStatus, JobFailure, Trigger
    from store.models import ExecutionRecord
    from workflows.describe import describe_job, summary
    from workflows.record import BACKOFF_ON_TIMER, WRITE_HOLDS_COMMANDS

# Room, past the job's own run timeout and the wait for its instant, before the server gives
# up on an attempt whose worker went silent (the heartbeat timeout notices that sooner).
ATTEMPT_SLACK = timedelta(seconds=15)
# The withdrawal of a scheduled run no worker reported started in time (policy.untaken).
UNTAKEN = "untaken"
# The read of a run's row after its last attempt timed out gives up after this.
ROW_READ_TIMEOUT = timedelta(seconds=5)
ROW_READ_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3)
# Why a run sent for a schedule since re-timed did not run (withdrawn, or back unrun).
RESCHEDULED = "rescheduled"
# The withdrawal of a pause.
PAUSED = "paused"
# A run a jobs worker refused (its tenant held its share of the slots) is sent again after
# this, doubled each time it is refused again, up to the most, but never past its instant.
# Refused this many times, it is sent as one that no worker refuses: it waits in the queue, as
# every run did before the share, and a run someone asked for writes no more history for it.
BUSY_FIRST_DELAY = timedelta(seconds=1)
BUSY_MAX_DELAY = timedelta(seconds=30)
BUSY_RESENDS = 12
# A local activity holds its workflow task's commands until it ends: one that would hold a
# run's cancel waits this timer first, so the task completes with the cancel and the activity
# runs in the next.
SEND_FIRST = timedelta(milliseconds=1)


@dataclass
class Ended:
    """How a run ended: its row (the job ran), or the refusal that kept it from running."""

    run: Run
    run_id: str
    record: ExecutionRecord | None
    refused: JobFailure | None = None
    reason: str | None = None  # why a withdrawn run was withdrawn


@dataclass
class _Flying:
    run: Run
    run_id: str
    instant: datetime
    beat: timedelta  # how often at most it heartbeats near its instant (policy.may_withdraw)
    handle: workflow.ActivityHandle[JobResult]
    send: Callable[..., workflow.ActivityHandle[JobResult]]  # again: _send(refusable, ...)
    withdrawn: str | None = None
    started: bool = False  # its jobs worker reported that the job started
    attempt_started: int = 0  # the run's last attempt a jobs worker reported started
    claimed: datetime | None = None  # when a late attempt was let start (it reports its start next)
    released: bool = False  # a ghost whose activity was cancelled
    outdated: bool = False  # sent for a schedule since re-timed
    # A retry refused for its tenant's share: the attempts the run made, whether its job ran
    # in one, and a cancel of its going job (overlap cancel_running) asked meanwhile.
    attempts_made: int = 0
    ran: bool = False
    stop_asked: bool = False
    aimed: datetime | None = None  # the run's own instant (a late or caught-up run's is past)
    spared: bool = False  # too near its instant when a withdrawal came: it runs
    spared_for: str | None = None  # that withdrawal's reason, kept for a refusal to come
    spared_next: str | None = None  # a later withdrawal's, kept while a pause holds spared_for
    refused: bool = False  # a worker gave it back: none holds it until it is sent again
    sent_at: datetime | None = None  # when it was first sent
    reading: bool = False  # its activity timed out; its row is read (``_completed``): no wait

    @property
    def ghost(self) -> bool:
        """Untaken: its fire went back to the policy; it can no longer start unasked."""
        return self.withdrawn == UNTAKEN

    def unrun(self, reason: str | None) -> str | None:
        """Why the run did not run: a run of a schedule since re-timed, rescheduled (unless
        the task was cancelled)."""
        return RESCHEDULED if self.outdated and self.withdrawn != "cancelled" else reason


class RunsInFlight:
    """Every run of the task between its dispatch and its end."""

    def __init__(self) -> None:
        # By activity id: a run's own id, or a numbered one beside a ghost of the same run.
        self._flying: dict[str, _Flying] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.ended: list[Ended] = []
        # A run is started when its worker says so; False replays histories recorded before,
        # where a run counted as started once its instant had passed.
        self.reported = False
        # How long this workflow task's commands may wait before they reach the server (set
        # by the workflow: a row write in flight holds them): a withdrawal allows for it.
        self.held: Callable[[], timedelta] = lambda: timedelta(0)
        # Whether a local activity waits for the cancels of its workflow task to be sent.
        self.cancels_first = False
        # Whether a run a worker gave back is withdrawn however near its instant (set by the
        # workflow from its release: older runs sent it again, and replay so).
        self.withdraws_refused = False
        # Whether a run a withdrawal spared, found untaken, goes back as that withdrawal's
        # (set from the release as well: older runs gave its fire to the missed-run policy).
        self.untaken_spared = False
        # Whether a pause keeps what it spared until the resume (from the release too).
        self.pause_keeps_spare = False
        # Whether a run a jobs worker ends CancelledWhileRunning is a cancelled run (from the
        # release too: older runs recorded it as a failed one, and replay so).
        self.knows_cancelled_running = False
        # Whether a run whose last attempt timed out after its job started asks its row
        # whether the job completed (from the release too: older runs recorded it failed).
        self.reads_completion = False
        self._cancelled_in: int | None = None  # the history length when a cancel was last sent
        self._sending: asyncio.Task[None] | None = None  # the timer that sends them

    def __len__(self) -> int:
        return len(self._flying)

    def ids(self) -> list[str]:
        """The execution ids in flight."""
        return [f.run_id for f in self._flying.values() if not f.ghost]

    def flight(self, now: datetime) -> Flight:
        """The summary the policy engine decides with; runs being withdrawn do not count, and
        ghosts not at all (their fires were decided again)."""
        counted = [f for f in self._flying.values() if not f.ghost]
        live = [f for f in counted if f.withdrawn is None]
        started = [f for f in live if (f.started if self.reported else f.instant <= now)]
        return Flight(
            total=len(counted) if self.reported else len(self._flying),
            scheduled=sum(1 for f in live if f.run.trigger.scheduled),
            started=len(started),
            user_started=sum(1 for f in started if f.run.trigger is not Trigger.CATCHUP),
            # Withdrawn ones too: their fires come back through policy.take_back.
            last_fire=max((f.run.scheduled_at for f in counted
                           if f.run.trigger.scheduled), default=None),
            near=sum(1 for f in live if self.reported and self._near(f, now)),
        )

    def cancel_reach(self, now: datetime) -> timedelta:
        """How long a cancel sent now may take to reach the runs waiting too near their
        instants to be withdrawn: the longest of their beats, and the hold on this workflow
        task's commands (none such: 0)."""
        beats = [f.beat for f in self._flying.values() if self._near(f, now)]
        return max(beats) + self.holding() if beats else timedelta(0)

    def _near(self, flying: _Flying, now: datetime) -> bool:
        """Not started, and too near its instant to be withdrawn (or spared by a withdrawal:
        once the hold that spared it ends, it may look far enough, but it still runs)."""
        return (not flying.started and not flying.reading
                and (flying.spared or not self._withdrawable(flying, now)))

    def _withdrawable(self, flying: _Flying, now: datetime) -> bool:
        """Far enough from its instant that a cancel sent now reaches it before it starts
        (policy.may_withdraw), even if this workflow task's commands are held (``held``)."""
        return may_withdraw(flying.instant, now, flying.beat, self.holding())

    def holding(self) -> timedelta:
        """How long this workflow task's commands may wait: for a row write, or a row read."""
        reading = any(f.reading for f in self._flying.values())
        return max(self.held(), WRITE_HOLDS_COMMANDS if reading else timedelta(0))

    async def send_cancels(self) -> None:
        """Before a local activity, or before a message answers: let the cancels of this
        workflow task reach the server first (with ``cancels_first``; one timer for all who
        wait). An answer then leaves with the write after them, as without a cancel."""
        while self.cancels_first and self._cancelled_in == workflow.info().get_current_history_length():
            if self._sending is None or self._sending.done():
                self._sending = asyncio.create_task(
                    workflow.sleep(SEND_FIRST, summary="send the cancel first"))
            await asyncio.shield(self._sending)

    def _cancel(self, flying: _Flying) -> None:
        if not flying.handle.done():  # an ended activity takes no cancel: nothing to send
            self._cancelled_in = workflow.info().get_current_history_length()
        flying.handle.cancel()

    def instants(self) -> list[datetime]:
        """The instants of the runs still waiting for them."""
        return [f.instant for f in self._flying.values() if f.withdrawn is None]

    def coming(self, give_back: Collection[str]) -> list[datetime]:
        """The instants of the runs, but those withdrawn for good: a run withdrawn for a reason
        in ``give_back`` still counts, as its fire goes back to the schedule."""
        return [f.instant for f in self._flying.values()
                if f.withdrawn is None or f.withdrawn in give_back]

    def unstarted(self) -> list[datetime]:
        """The own instants of the runs no worker has reported started, but those withdrawn."""
        if not self.reported:
            return []
        return [f.aimed or f.instant for f in self._flying.values()
                if f.withdrawn is None and not f.started]

    def deadlines(self) -> list[datetime]:
        """When each scheduled run not yet reported started is found untaken."""
        return [(f.claimed or f.instant) + UNTAKEN_AFTER for f in self._waiting()]

    def _reported(self, report: RunStart) -> list[_Flying]:
        """The run a worker's report is about: its activity (a ghost and the catch-up of its
        fire share an execution id)."""
        if report.activity_id is not None:
            flying = self._flying.get(report.activity_id)
            return [flying] if flying is not None else []
        return [f for f in self._flying.values() if f.run_id == report.execution_id]

    def report_started(self, report: RunStart) -> bool:
        """A jobs worker reported that the run's job started; True if that is news."""
        for flying in self._reported(report):
            flying.attempt_started = max(flying.attempt_started, report.attempt)
            if not flying.started:
                flying.started = True
                if flying.ghost:
                    workflow.logger.warning("a run found untaken had started",
                                            extra={"run": report.execution_id})
                return True
        return False

    def claim(self, claim: RunStart) -> bool:
        """A jobs worker asks to start a run late: yes while the run is neither withdrawn nor
        a ghost (its fire decided again). It is running once its start is reported; a claim
        whose start never comes (its worker died) is found untaken UNTAKEN_AFTER later."""
        for flying in self._reported(claim):
            if flying.withdrawn is None and not flying.reading:
                flying.claimed = workflow.now()
                return True
        return False

    def take_untaken(self, now: datetime) -> list[Ended]:
        """The scheduled runs no worker reported started in time, their fires to be decided
        again at once. Each stays a ghost until its activity ends: a worker that gets it later
        must claim it (policy.must_claim) and is refused. It is not cancelled: a cancel could
        cross a completion whose start report was late, and kill nothing that could run."""
        found = []
        for flying in self._waiting():
            if untaken(flying.claimed or flying.instant, now):
                flying.withdrawn = UNTAKEN
                # Spared by a pause as too near its instant, and no worker took it: the pause
                # takes its fire (one in the pause), as when a worker gives a run back.
                paused = self.untaken_spared and flying.spared_for == PAUSED
                reason = PAUSED if paused else UNTAKEN
                found.append(Ended(run=flying.run, run_id=flying.run_id, record=None,
                                   refused=JobFailure.LATE, reason=flying.unrun(reason)))
        return found

    def release_ghosts(self) -> None:
        """Cancel the ghosts (the task must continue as new: an activity still waiting in the
        queue for a worker ends at once)."""
        for flying in self._flying.values():
            if flying.ghost and not flying.released:
                flying.released = True
                self._cancel(flying)

    def _waiting(self) -> list[_Flying]:
        if not self.reported:
            return []
        return [f for f in self._flying.values() if f.withdrawn is None and not f.started
                and not f.reading and f.run.trigger is Trigger.SCHEDULE]

    def dispatch(self, spec: TaskSpec, *, task_id: str, tenant_id: str, run: Run, run_id: str,
                 instant: datetime, lead: timedelta, beat: timedelta,
                 spec_version: int | None = None, aimed: datetime | None = None) -> None:
        """Start the job activity of ``run``; it waits on the worker's clock for ``instant``,
        heartbeating every ``beat`` near it (``aimed``: the instant its lateness counts from,
        when a calendar moved it)."""
        # A ghost of this run may still be pending: activity ids must differ.
        key = run_id if run_id not in self._flying else f"{run_id}#{len(self._flying)}"
        while key in self._flying:
            key += "+"
        aimed = aimed or aimed_instant(spec, task_id, run.scheduled_at, run.trigger)
        # Sent again, a run keeps when it was first sent: when it is due (on_time.due_of), so a
        # worker that gets it late claims it, as a late first attempt does.
        send = functools.partial(self._send, spec, key=key, task_id=task_id, tenant_id=tenant_id,
                                 run=run, run_id=run_id, instant=instant, sent_at=workflow.now(),
                                 lead=lead, beat=beat, spec_version=spec_version, aimed=aimed)
        self._flying[key] = _Flying(run=run, run_id=run_id, instant=instant, beat=beat,
                                    handle=send(True), aimed=aimed, send=send,
                                    sent_at=workflow.now())
        record = ExecutionRecord(id=run_id, task_id=task_id, tenant_id=tenant_id,
                                 scheduled_at=run.scheduled_at, instant=aimed, trigger=run.trigger.value,
                                 status=ExecutionStatus.RUNNING, spec_version=spec_version)
        task = asyncio.create_task(self._await(key, record, run, spec.retry_policy.max_attempts))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @staticmethod
    def _send(spec: TaskSpec, refusable: bool, *, key: str, task_id: str, tenant_id: str,
              run: Run, run_id: str, instant: datetime, sent_at: datetime, lead: timedelta,
              beat: timedelta, spec_version: int | None, aimed: datetime,
              attempts_used: int = 0, started: bool = False) -> workflow.ActivityHandle[JobResult]:
        """Schedule the run's job activity (again, after a jobs worker refused it: with the
        attempts left after ``attempts_used``)."""
        wait = max(timedelta(0), instant - workflow.now())
        retry = spec.retry_policy
        # Sent again after a refused retry, its next retries wait as long as the run's would.
        interval = min(retry.initial_interval_seconds * retry.backoff_coefficient ** attempts_used,
                       retry.maximum_interval_seconds)
        late = late_limit(run.trigger)
        return workflow.start_activity(
            RUN_JOB,
            JobInput(
                execution_id=run_id, task_id=task_id, tenant_id=tenant_id,
                scheduled_at=run.scheduled_at, instant=aimed, job=spec.job_details,
                not_before=instant if instant > sent_at else None, sent_at=sent_at,
                trigger=run.trigger, spec_version=spec_version,
                run_timeout_seconds=spec.run_timeout_seconds,
                late_after_seconds=late.total_seconds() if late is not None else None,
                refusable=refusable, beat_seconds=beat.total_seconds(),
                attempts_used=attempts_used, started=started, carries_attempts=True,
            ),
            task_queue=jobs_queue(workflow.info().task_queue),
            result_type=JobResult,
            start_to_close_timeout=timedelta(seconds=spec.run_timeout_seconds) + lead + ATTEMPT_SLACK,
            heartbeat_timeout=timedelta(seconds=waiting_heartbeat_timeout(
                spec.heartbeat_timeout_seconds, wait.total_seconds())),
            retry_policy=RetryPolicy(
                maximum_attempts=max(1, retry.max_attempts - attempts_used),
                initial_interval=timedelta(seconds=interval),
                backoff_coefficient=retry.backoff_coefficient,
                maximum_interval=timedelta(seconds=retry.maximum_interval_seconds),
            ),
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            activity_id=key,
            priority=task_priority(spec.priority, tenant_id),
            summary=summary(describe_job(spec), f" at {instant.isoformat()}"),
        )

    def withdraw(self, reason: str) -> None:
        """Withdraw the runs still far enough from their instants (policy.may_withdraw), and
        those a worker gave back, which no worker holds until they are sent again. A run too
        near is spared, unless a worker gives it back before it starts (``_taken``)."""
        now = workflow.now()
        for flying in self._flying.values():
            if flying.withdrawn is not None or flying.started or (self.withdraws_refused and flying.ran):
                continue
            if self._withdrawable(flying, now) or (self.withdraws_refused and self._given_back(flying)):
                flying.withdrawn = reason
                self._cancel(flying)
            elif self.pause_keeps_spare and flying.spared_for == PAUSED:
                # A pause keeps what it spared until the resume; a later withdrawal (a run
                # asked for, a schedule change) takes it over then.
                flying.spared_next = reason
            else:
                if self.pause_keeps_spare and reason == PAUSED:
                    flying.spared_next = flying.spared_for  # an earlier one's, back at the resume
                flying.spared, flying.spared_for = True, reason

    @staticmethod
    def _given_back(flying: _Flying) -> bool:
        """A run of the schedule a worker gave back: none holds it until it is sent again. (A
        run someone asked for, a replay or a backfill is not withdrawn so: it runs, as one too
        near its instant does.)"""
        return flying.refused and flying.run.trigger.scheduled

    def unspare(self, reason: str) -> None:
        """The withdrawal of ``reason`` is over (a resume): a run it spared is no longer to be
        withdrawn for it if a worker gives it back (but for a later one, if any came)."""
        for flying in self._flying.values():
            if flying.spared_for == reason:
                flying.spared_for, flying.spared_next = flying.spared_next, None

    def outdate(self) -> None:
        """The schedule was re-timed: a run sent for the old one that ends unrun is not given
        back to the new one (``Ended.reason`` is RESCHEDULED)."""
        for flying in self._flying.values():
            flying.outdated = flying.outdated or flying.run.trigger.scheduled

    def cancel_started(self) -> None:
        """Cancel the runs whose job is going (overlap_policy cancel_running)."""
        now = workflow.now()
        for flying in self._flying.values():
            if flying.started if self.reported else flying.instant <= now:
                flying.stop_asked = self.reported
                self._cancel(flying)

    def cancel_all(self) -> None:
        """Cancel every run, waiting or going (the task is cancelled)."""
        for flying in self._flying.values():
            if self.reported and flying.withdrawn == "cancelled":
                continue  # asked once already
            flying.withdrawn = flying.withdrawn or "cancelled"
            self._cancel(flying)

    async def settled(self) -> None:
        """Return once no run is in flight."""
        await workflow.wait_condition(lambda: not self._flying)

    def take_ended(self) -> list[Ended]:
        """The runs that ended since the last call, in the order they ended."""
        ended, self.ended = self.ended, []
        return ended

    async def _taken(self, flying: _Flying) -> JobResult:
        """The run's result. A jobs worker refuses an attempt whose tenant holds its share of
        the worker's slots (activities/share.py), and hands back a run still waiting for its
        instant when it stops (activities/on_time.py): the run is sent again, later and later,
        until one takes it or it is withdrawn (a scheduled run no worker reported started is
        found untaken UNTAKEN_AFTER past its instant, and its fire goes to the policy)."""
        backoff = BUSY_FIRST_DELAY
        for refusals in range(1, BUSY_RESENDS + 1):
            try:
                return await flying.handle
            except ActivityError as err:
                busy = (isinstance(err.cause, ApplicationError)
                        and err.cause.type == JobFailure.TENANT_BUSY)
                if not busy:
                    raise
                assert isinstance(err.cause, ApplicationError)
                # A refused retry counts on (an older jobs worker's refusal tells nothing). Kept
                # before a cancel is looked at: one may have come in this same workflow task.
                made = BusyRefusal.of(err.cause.details)
                flying.attempts_made = max(flying.attempts_made, made.attempts_used)
                flying.ran = flying.ran or made.started
                if self.withdraws_refused:
                    flying.refused = True
                    if (flying.spared_for is not None and not (flying.started or flying.ran)
                            and self._given_back(flying)):
                        # Spared by a withdrawal only for its instant's nearness: now that no
                        # worker holds it, that withdrawal takes it.
                        flying.withdrawn = flying.withdrawn or flying.spared_for
                if self._stopped(flying):
                    raise
                delay, ahead = backoff, flying.instant - workflow.now()
                backoff = min(backoff * 2, BUSY_MAX_DELAY)
                if timedelta(0) < ahead < delay:
                    delay, backoff = ahead, BUSY_FIRST_DELAY  # at its instant, then soon after
                try:
                    await workflow.wait_condition(lambda: self._stopped(flying), timeout=delay)
                except TimeoutError:
                    pass
                if self._stopped(flying):
                    raise
            flying.refused = False
            flying.handle = flying.send(refusals < BUSY_RESENDS, attempts_used=flying.attempts_made,
                                        started=flying.ran or flying.started)
        return await flying.handle

    @staticmethod
    def _stopped(flying: _Flying) -> bool:
        """Withdrawn, or its going job asked to stop: a refused run is not sent again."""
        return flying.withdrawn is not None or flying.stop_asked

    async def _await(self, key: str, record: ExecutionRecord, run: Run, max_attempts: int) -> None:
        run_id = record.id
        ended = Ended(run=run, run_id=run_id, record=record)
        try:
            result = await self._taken(self._flying[key])
            record.status = ExecutionStatus.COMPLETED
            result.fill(record)
        except ActivityError as err:
            cause = err.cause
            kind = cause.type if isinstance(cause, ApplicationError) else None
            flying = self._flying[key]
            details = (JobFailureDetails.of(cause.details)
                       if isinstance(cause, ApplicationError) else None)
            unstarted = not flying.started if self.reported else workflow.now() < flying.instant
            if kind == JobFailure.CANCELLED_RUNNING and self.knows_cancelled_running:
                # Cancelled while its job ran, the start report lost on the way: it ran.
                kind, unstarted = None, False
                cause = CancelledError("cancelled while running")
            elif kind == JobFailure.TENANT_BUSY and flying.attempts_made and (flying.ran or flying.started):
                # A retry refused for its tenant's share, cancelled before it was sent again:
                # the run ran, and ends as a run cancelled while it went on.
                kind = None
                cause = CancelledError("cancelled between attempts")
                details = JobFailureDetails(attempt=flying.attempts_made)
            elif (kind is None and flying.withdrawn and unstarted) or kind == JobFailure.TENANT_BUSY:
                # Cancelled before any worker started it (a backlog, a deploy), or refused for
                # its tenant's share until withdrawn: it did not run.
                kind = JobFailure.WITHDRAWN
            lost = (self.reported and unstarted and kind is None and run.trigger.scheduled
                    and not isinstance(cause, CancelledError) and not _had_started(cause))
            if lost:
                # Timed out with no start reported (its workers died before the job started):
                # it did not run, and its fire goes to the missed-run policy.
                kind = JobFailure.LATE
            if kind in (JobFailure.WITHDRAWN, JobFailure.LATE):
                ended = Ended(run=run, run_id=run_id, record=None, refused=JobFailure(kind),
                              reason=flying.unrun(flying.withdrawn))
            elif isinstance(cause, CancelledError):
                record.status, record.error = ExecutionStatus.CANCELLED, "cancelled while running"
            elif isinstance(cause, TimeoutFailure) and (done := await self._completed(flying, run_id)):
                # The attempt's end never reached the server (its worker cut off from it, or
                # dead after the job): the row the jobs worker wrote says the job completed.
                record.status, details = ExecutionStatus.COMPLETED, None
                done.fill(record)
                record.finished_at = done.finished_at
            else:
                record.status = ExecutionStatus.FAILED
                record.error = (str(cause) if cause is not None else str(err))[:2000]
            if details:
                details.fill(record)
            elif record.status is not ExecutionStatus.COMPLETED:
                record.attempts = _attempts(err, flying, max_attempts)
        flying = self._flying.pop(key)
        if not (flying.ghost and ended.record is None):  # a ghost's fire was decided already
            self.ended.append(ended)


    async def _completed(self, flying: _Flying, run_id: str) -> CompletedRun | None:
        """What the run's job returned, if the jobs worker's row says it completed since the
        run was sent; None as well when the database does not answer within a few tries (the
        run is failed then, as before: waiting longer would hold the task's next fires back as
        overlapping). A ghost's row is its catch-up's: it reads none."""
        if not self.reads_completion or flying.ghost:
            return None
        await self.send_cancels()  # a read holds this workflow task's commands, as a write does
        # Its activity has ended: whatever the read takes, it is no run waiting to start (and
        # it leaves the runs in flight as soon as the read ends).
        flying.reading = True
        try:
            done: CompletedRun | None = await workflow.execute_local_activity(
                COMPLETED_ROW, RowAsk(execution_id=run_id, trigger=flying.run.trigger,
                                      since=flying.sent_at),
                result_type=CompletedRun, start_to_close_timeout=ROW_READ_TIMEOUT,
                retry_policy=ROW_READ_RETRY, local_retry_threshold=BACKOFF_ON_TIMER,
                summary="did the job complete? (its row)")
        except ActivityError:
            return None
        return done


def _attempts(err: ActivityError, flying: _Flying, max_attempts: int) -> int:
    """The attempts of a run that ended with no attempt's word on them (timed out, cancelled):
    every one its retry policy allowed if they ran out, else the last its workers reported
    started, counting those made before it was sent again."""
    if err.retry_state is RetryState.MAXIMUM_ATTEMPTS_REACHED:
        return max(max_attempts, flying.attempts_made + 1)  # the last send made at least one
    return max(flying.attempt_started, flying.attempts_made, 1)


def _had_started(cause: BaseException | None) -> bool:
    """An attempt that timed out after its job started (its start report lost with its
    worker) said so in its last heartbeat."""
    return isinstance(cause, TimeoutFailure) and STARTED in cause.last_heartbeat_details
