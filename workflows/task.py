"""TaskWorkflow: one durable workflow per task. It sleeps until the next fire, runs the job,
and obeys cancel, pause, resume, trigger, replay and update, by signal or by update.

Every decision about a fire is the policy engine's (``scheduling.policy``); this class carries
them out. Its helpers own their state: ``RunsInFlight`` every run between dispatch and end,
``TaskRecord`` the rows, attributes and notifications. The main loop and the message handlers
change the task only under one lock, so a handler never acts in the middle of a pass.

Determinism: every time comes from ``workflow.now()``; schedule math is the pure code in
``scheduling`` (passed through the sandbox); side effects happen only in activities.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.calendars import (
        CALENDAR_CHANGES,
        CALENDAR_DATES,
        CALENDAR_DATES_TIMEOUT,
        CalendarChangesRequest,
        CalendarDatesRequest,
    )
    from activities.heartbeats import MAX_BEAT_SECONDS, MIN_BEAT_SECONDS, near_beat
    from activities.options import (
        CALENDARS_CHANGED,
        CANCEL_FIRST,
        CANCEL_TRIPS_NOTHING,
        CANCELLED_RUNNING,
        COMPLETION_READ,
        DELAY_GOES_ON,
        HELD_KEPT,
        HERD_BEAT,
        PAUSE_KEEPS_SPARE,
        REFUSED_WITHDRAWN,
        RELEASE,
        ROWS_CARRIED,
        RUN_OPTIONS,
        RUN_OPTIONS_TIMEOUT,
        SPARED_UNTAKEN,
        START_RELEASE,
        RunOptions,
    )
    from activities.payloads import CLAIM_RUN, RUN_STARTED, RunStart
    from scheduling import policy
    from scheduling.calendars import CalendarChanges, CalendarDates
    from scheduling.fire import next_fire
    from scheduling.policy import Run
    from scheduling.spec import (
        NotifyEvent,
        OverlapPolicy,
        TaskChanges,
        check_timing,
    )
    from scheduling.status import (
        FINAL_STATUSES,
        ExecutionStatus,
        ResumeMissed,
        SkipReason,
        TaskStatus,
        Trigger,
        execution_id,
    )
    from store.models import ExecutionRecord
    from workflows import arguments, spans
    from workflows.breaker import Healed, SelfHealing
    from workflows.describe import describe_schedule, summary
    from workflows.events import (
        BACKFILL,
        BACKFILL_DONE,
        BACKFILL_STOPPED,
        CANCEL,
        CREATE,
        PAUSE,
        PROBE_FAILED,
        REPLAY,
        RESTART,
        RESUME,
        SCHEDULER,
        TEMPORAL_SIGNAL,
        TRIGGER,
        Origin,
        SpecChange,
    )
    from workflows.inflight import PAUSED, RESCHEDULED, UNTAKEN, Ended, RunsInFlight
    from workflows.record import WRITE_HOLDS_COMMANDS, TaskRecord
    from workflows.state import (
        Backfill,
        BackfillRequest,
        ReplayRequest,
        TaskState,
        TaskWorkflowInput,
    )

# A timer may fire a few milliseconds before the wake it was set for: this slack keeps that
# from costing a second, tiny timer before the dispatch.
DISPATCH_SLACK = timedelta(seconds=1)
# Withdrawn for these reasons, a run's fire goes back to the schedule and is decided again.
GIVE_BACK = frozenset({PAUSED, "rebound", "asked", UNTAKEN})
# The type of an update refused because the task would be left nothing to run; its details
# name the field at fault.
NEVER_RUNS = "NeverRuns"
# Workflows started from here on count a run as started when its worker reports it, decide an
# untaken run's fire again, and stop every run when cancelled (docs/upgrades.md).
REPORTED_STARTS = "reported-starts"
PAUSED_SHOWS_PAUSED = "paused-shows-paused"
# Workflows from here on: fires due before an update or a cancel are decided first; each run
# takes its options from its worker; the self-healing breaker; task events; backfills;
# calendars; unstarted_at on the row (docs/upgrades.md lists each). One patch for all of them:
# each patch costs every new workflow a marker and a search-attribute upsert, and 12 of them
# made a herd of 1,000 run seconds late (docs/capacity.md).
PLANNING_AND_TRUST = "planning-and-trust"
# How long a cancel waits for the runs it stops to end before it answers, and longer by the
# hold of a slow write on the cancel; while a run waits too near its instant to be withdrawn,
# at least its beat (it hears of the cancel at its next heartbeat, which may come after it
# started), the hold and the slack: never longer than the longest.
CANCEL_SETTLE = timedelta(seconds=10)
# How long a workflow run that would continue as new waits for its rows to be written before
# it hands them to the next run instead (the database refuses them).
HANDOVER_WAIT = timedelta(seconds=3)
CANCEL_SLACK = timedelta(seconds=5)
LONGEST_CANCEL_SETTLE = max(
    CANCEL_SETTLE, timedelta(seconds=MAX_BEAT_SECONDS) + WRITE_HOLDS_COMMANDS + CANCEL_SLACK)
CHANGE_TASK = "change_task"


@workflow.defn(name="TaskWorkflow")
class TaskWorkflow:
    """A task: a schedule, a job, and the record of every run."""

    @workflow.init
    def __init__(self, start: TaskWorkflowInput) -> None:
        self._input = start
        # Until the run has asked its worker (a message that came with the start is handled
        # first): the options of the input, or the defaults.
        self._options = start.frozen_options()
        self._state = start.initial_state()
        self._state.running = []
        self._runs = RunsInFlight()
        if start.release >= START_RELEASE:
            # Started by code that has every patch below: none is asked, so a new workflow run
            # records no patch marker and no TemporalChangeVersion upsert.
            self._runs.reported = self._current = True
        else:
            # Here, not in run: a signal or update that came with the start is handled before run.
            self._runs.reported = workflow.patched(REPORTED_STARTS)
            # False while replaying a history written before PLANNING_AND_TRUST (it implies
            # reported and paused-shows-paused).
            self._current = workflow.patched(PLANNING_AND_TRUST)
        self._healing = SelfHealing(self._state, enabled=self._current)
        self._record = TaskRecord(self._state)
        self._record.events_on = self._current
        if start.unwritten is not None:
            self._record.carry(start.unwritten)
        if start.state is None:
            self._record.event(CREATE, start.actor, spec=True)
        elif start.actor is not None:
            self._record.event(RESTART, start.actor, detail={"reason": self._state.status_reason})
        backfill = self._state.backfill
        if self._current and backfill is not None and backfill.unrecorded_stop:
            # Restarted from the row, which keeps no instants left: the backfill stopped.
            backfill.unrecorded_stop = False
            self._record.event(BACKFILL_STOPPED, start.actor, detail={
                "reason": backfill.reason, "started": backfill.started,
                "left": backfill.total - backfill.started})
        self._lock = asyncio.Lock()
        self._wake = False
        self._start_length = 0

    @workflow.run
    async def run(self, start: TaskWorkflowInput) -> TaskState:
        """Sleep until each fire and run the job, until the task ends."""
        if self._current:
            # A local activity: the worker's answer is recorded, so a replay reads the same.
            self._options = await workflow.execute_local_activity(
                RUN_OPTIONS, result_type=RunOptions, start_to_close_timeout=RUN_OPTIONS_TIMEOUT)
        self._record.release = self._options.release
        self._runs.withdraws_refused = self._options.release >= REFUSED_WITHDRAWN
        self._runs.untaken_spared = self._options.release >= SPARED_UNTAKEN
        self._runs.pause_keeps_spare = self._options.release >= PAUSE_KEEPS_SPARE
        self._runs.knows_cancelled_running = self._options.release >= CANCELLED_RUNNING
        self._runs.reads_completion = self._options.release >= COMPLETION_READ
        if self._options.release >= CANCEL_FIRST:
            self._runs.cancels_first = True
            self._runs.held = self._record.holding
        self._record.before_write = self._runs.send_cancels
        self._record.resend()
        # What the run's start cost in history (with the patch markers of older start inputs).
        self._start_length = workflow.info().get_current_history_length()
        try:
            while True:
                async with self._lock:
                    if await self._pass():
                        break
                if self._draining():
                    self._runs.release_ghosts()
                if self._may_continue_as_new():
                    await self._continue_as_new()
                await self._sleep()
        except asyncio.CancelledError:
            # Cancelled through Temporal itself (`temporal workflow cancel`): stop the runs,
            # record the end, then end as cancelled.
            self._state.status_reason = "workflow cancelled through Temporal"
            if not self._state.cancel_requested:
                self._record.event(CANCEL, TEMPORAL_SIGNAL, detail={"reason": self._state.status_reason})
            if self._current and self._state.cancelled_at is None:
                self._state.cancelled_at = workflow.now()
            await self._stop()
            await workflow.wait_condition(self._record.idle)
            raise
        if self._state.status is TaskStatus.COMPLETED:
            self._record.notify(NotifyEvent.COMPLETED, None, self._state.status_reason or "ended")
        await self._record.delivered()
        await workflow.wait_condition(self._quiet)
        return self._state

    # -- the main loop -------------------------------------------------------------------

    async def _pass(self) -> bool:
        """Act on everything that has happened; True once the task has ended."""
        state = self._state
        self._wake = False
        self._absorb_ended()
        if state.cancel_requested:
            await self._stop()
            return True
        now = workflow.now()
        for ended in self._runs.take_untaken(now):
            self._not_run(ended)
        await self._read_calendars()
        if not state.paused or self._runs.reported:
            self._decide_due()  # while paused, the fires due before the pause (policy.decide_due)
        self._healing.queue_due(now)
        self._start_queued()
        self._start_backfill()  # before the dispatch ahead, which would hold it off for good
        self._dispatch_ahead()
        if policy.schedule_done(state.position(), self._runs.flight(now)) and not self._backfilling():
            last = state.last_run.status if state.last_run else None
            status, reason = policy.final_status(state.spec, last)
            self._state.finish(status, state.status_reason or reason)
            await self._write()
            return True
        self._refresh_status()
        await self._write()
        return False

    def _decide_due(self, *, closing_pause: bool = False) -> bool:
        """Decide the due fires; True if more are due than one pass decides."""
        state = self._state
        now = workflow.now()
        decide = policy.close_pause if closing_pause else policy.decide_due
        due = decide(state.position(), self._runs.flight(now), now, queued_missed=self._runs.reported)
        state.next_fire_at, state.queue = due.next_fire_at, due.queue
        state.latest_taken = max(filter(None, [state.latest_taken, due.taken]), default=None)
        for fire, reason in due.skipped:
            self._record.skip(fire, reason)
        if due.cancel_running:
            self._runs.cancel_started()
        for run in due.start:
            if self._draining() and self._runs.reported:
                # Started by the next workflow run, at once, oldest first: after the runs
                # held by the passes before.
                at = max((i + 1 for i, queued in enumerate(state.queue) if queued.held), default=0)
                state.queue.insert(at, run.model_copy(update={"held": True}))
            elif self._draining():
                state.queue.insert(0, run)  # as recorded before reported-starts
            else:
                self._start(run)
        self._wake = self._wake or due.more
        return due.more

    async def _close_pause(self) -> None:
        """Record the fires of the pause so far before the task ends or its schedule is
        replaced: nothing else would (a long pause, one batch of rows at a time)."""
        while self._state.paused and self._runs.reported and self._decide_due(closing_pause=True):
            await self._write()

    def _start_queued(self) -> None:
        state = self._state
        if self._runs.reported:
            now = workflow.now()
            for stale in policy.stale_in_queue(state.position(), now):
                state.queue.remove(stale)
                back = policy.take_back(state.position(), self._runs.flight(now),
                                        stale.scheduled_at, now, missed=True,
                                        delay_goes_on=self._options.release >= DELAY_GOES_ON)
                state.next_fire_at, state.queue = back.next_fire_at, back.queue
                for skipped, reason in back.skipped:
                    self._record.skip(skipped, reason)
        while not self._draining():
            run = policy.next_from_queue(state.queue, self._runs.flight(workflow.now()),
                                         paused=state.paused)
            if run is None:
                return
            state.queue.remove(run)
            self._start(run)

    def _dispatch_ahead(self) -> None:
        """Send the next run a lead ahead of its instant; the job waits for it on the worker."""
        state = self._state
        now = workflow.now()
        instant, lead = state.next_instant(), self._lead()
        if (instant is None or not lead or state.next_fire_at is None or instant - now > lead + DISPATCH_SLACK
                or not policy.may_dispatch_ahead(self._runs.flight(now), state.queue,
                                                 paused=state.paused, draining=self._draining())):
            return
        fire = state.next_fire_at
        if self._calendar_skips():
            return  # decided at its instant: SKIPPED calendar
        state.latest_taken = max(filter(None, [state.latest_taken, fire]))
        state.next_fire_at = None if policy.is_fixed_delay(state.spec) else next_fire(
            state.spec, anchor=state.anchor, after=fire)
        self._start(Run(scheduled_at=fire), instant=instant)
        state.next_fire_at = policy.bounded(state.next_fire_at, state.position(),
                                            self._runs.flight(now))

    def _start_backfill(self) -> None:
        """Start the backfill's next instant once nothing else of the task is in flight or
        queued; a fire that comes meanwhile meets the overlap policy like any other."""
        backfill, state = self._state.backfill, self._state
        if (backfill is None or not backfill.running or state.paused or self._draining()
                or state.queue or self._runs.flight(workflow.now()).total):
            return
        backfill.current = None
        while backfill.pending:
            item = backfill.pending.pop(0)
            run_id = execution_id(state.task_id, item.scheduled_at)
            if run_id in self._runs.ids():
                continue  # running already, under the same id
            if self._current and backfill.decided_since(item, run_id):
                continue  # the schedule's: it ran, or is still to be decided (queued ones ran first)
            backfill.started += 1
            backfill.current = item
            self._start(Run(scheduled_at=item.scheduled_at, trigger=Trigger.BACKFILL,
                            execution_id=run_id))
            return
        backfill.status = "done"
        self._record.event(BACKFILL_DONE, SCHEDULER, detail={"started": backfill.started})

    def _hold_decided(self, backfill: Backfill) -> None:
        """Note what the schedule has still to decide or run as the backfill is asked."""
        state = self._state
        backfill.undecided_from = state.next_fire_at
        backfill.held = [*self._runs.ids(), *(
            run.execution_id or execution_id(state.task_id, run.scheduled_at, run.trigger)
            for run in state.queue)]

    def _stop_backfill(self, why: str) -> None:
        """Start no more of a running backfill's instants (a pause or a cancel)."""
        backfill = self._state.backfill
        if backfill is not None and backfill.running:
            backfill.stop(why)
            self._record.event(BACKFILL_STOPPED, SCHEDULER, detail={
                "reason": why, "started": backfill.started, "left": len(backfill.pending)})

    def _backfilling(self) -> bool:
        return self._state.backfill is not None and self._state.backfill.running

    def _start(self, run: Run, *, instant: datetime | None = None) -> None:
        state = self._state
        run_id = run.execution_id or execution_id(state.task_id, run.scheduled_at, run.trigger)
        decision = "catchup" if run.trigger is Trigger.CATCHUP else "run"
        span = spans.decided(state.spec, decision, task_id=state.task_id, fire=run.scheduled_at,
                             run_id=run_id, trigger=run.trigger)
        # A fire a calendar shifted aims at its new day: its lateness counts from there.
        shifted = (self._current and bool(state.spec.exclude_calendars)
                   and run.trigger.scheduled)
        aimed = state.position().instant(run.scheduled_at) if shifted else None
        at = instant or workflow.now()
        with spans.current(span):  # the job's spans are children of the decision's
            self._runs.dispatch(state.spec, task_id=state.task_id, tenant_id=state.tenant_id,
                                run=run, run_id=run_id, instant=at, lead=self._lead(),
                                beat=self._beat(at), spec_version=state.spec_version, aimed=aimed)
        self._note_runs()

    def _absorb_ended(self) -> None:
        """Count and record the runs that ended; give back the fires of those that never ran."""
        for ended in self._runs.take_ended():
            if ended.record is None:
                self._not_run(ended)
            else:
                self._ran(ended, ended.record)
        self._note_runs()

    def _not_run(self, ended: Ended) -> None:
        state = self._state
        if ended.run.trigger is Trigger.BACKFILL:
            return  # nothing ran: the instant's row stays as it was
        fire = ended.run.scheduled_at
        spans.decided(state.spec, "withdraw", task_id=state.task_id, fire=fire, run_id=ended.run_id,
                      reason=ended.reason, trigger=ended.run.trigger)
        reported = self._runs.reported
        if self._healing.owns(ended.run_id) and ended.reason not in GIVE_BACK:
            self._probe_ended(None)  # withdrawn or refused: it proves nothing, try again later
            return
        outdated = reported and ended.reason == RESCHEDULED
        if ((ended.run.trigger.scheduled or not reported)
                and (ended.reason in GIVE_BACK or ended.reason is None or outdated)):
            # Refused as late, untaken, or withdrawn by a pause, new bounds or a run someone
            # asked for: the policy decides it again (a late or untaken one as missed; one of
            # a schedule since re-timed is SKIPPED rescheduled).
            now = workflow.now()
            missed = reported and (ended.reason == UNTAKEN or ended.reason is None)
            back = policy.take_back(state.position(), self._runs.flight(now), fire, now,
                                    missed=missed, outdated=outdated, in_order=reported,
                                    delay_goes_on=self._options.release >= DELAY_GOES_ON)
            state.next_fire_at, state.queue = back.next_fire_at, back.queue
            for skipped, reason in back.skipped:
                self._record.skip(skipped, reason)
        elif reported and ended.reason in GIVE_BACK:
            state.queue.insert(0, ended.run)  # a run asked for waits its turn again
        elif ended.run.trigger.scheduled or ended.run.trigger is Trigger.MANUAL:
            reason = SkipReason.CANCELLED if ended.reason == "cancelled" else SkipReason.RESCHEDULED
            self._record.skip(fire, reason, ended.run_id, ended.run.trigger)

    def _ran(self, ended: Ended, record: ExecutionRecord) -> None:
        state, trigger, now = self._state, ended.run.trigger, workflow.now()
        backfill = state.backfill
        if trigger is Trigger.BACKFILL and backfill is not None and backfill.current is not None:
            record.reason = backfill.current.earlier  # the row keeps what it said before
        self._record.finished(record, trigger)
        state.count(record, trigger, rerun=trigger is Trigger.REPLAY and self._runs.reported)
        if state.cancel_requested:
            state.started_before_cancel.append(record.id)
        if policy.is_fixed_delay(state.spec) and trigger.scheduled and not state.cancel_requested:
            state.next_fire_at = policy.after_finish(state.position(), self._runs.flight(now), now)
        if self._healing.owns(record.id):
            self._probe_ended(ExecutionStatus(record.status))
            return
        tripped = policy.breaker_trips(state.spec, state.consecutive_failures)
        # A task being cancelled is not paused by its breaker: it ends as cancelled.
        ending = state.cancel_requested and self._options.release >= CANCEL_TRIPS_NOTHING
        if record.status == ExecutionStatus.FAILED and tripped and not state.paused and not ending:
            reason = self._healing.tripped(tripped, now)
            self._pause(reason)
            self._record.notify(NotifyEvent.AUTO_PAUSED, record.id, reason)

    def _probe_ended(self, outcome: ExecutionStatus | None) -> None:
        """Resume the task after a probe that succeeded; tell of one that failed."""
        run_id = self._state.probing
        healed = self._healing.ended(outcome, workflow.now())
        if healed is Healed.RESUMED:
            self._resume(ResumeMissed.SKIP, SCHEDULER)
            self._record.notify(NotifyEvent.AUTO_RESUMED, run_id, "the probe run succeeded: resumed")
        elif healed is Healed.FAILED:
            self._record.event(PROBE_FAILED, SCHEDULER, detail={"execution_id": run_id,
                                                                "reason": self._state.status_reason})
            self._record.notify(NotifyEvent.PROBE_FAILED, run_id, self._state.status_reason)
        self._wake = True

    async def _stop(self) -> None:
        """Cancel every run and queued run, record them, and end the task CANCELLED."""
        state = self._state
        self._runs.cancel_all()
        self._stop_backfill("cancelled")
        await self._runs.settled()
        self._absorb_ended()
        await self._close_pause()
        await self._skip_due_at_cancel()
        for run in state.queue:
            self._record.skip(run.scheduled_at, SkipReason.CANCELLED, run.execution_id, run.trigger)
        self._state.finish(TaskStatus.CANCELLED, state.status_reason or "cancelled")
        await self._write()

    async def _skip_due_at_cancel(self) -> None:
        """Record the fires that came due before the cancel but that no pass decided."""
        state = self._state
        if state.cancelled_at is None or not self._current:
            return
        more = True
        while more:
            due = policy.due_at_cancel(state.position(), state.cancelled_at)
            state.next_fire_at, more = due.next_fire_at, due.more
            for fire, reason in due.skipped:
                self._record.skip(fire, reason)
            if more:
                await self._write()

    async def _write(self) -> None:
        """Write the rows, with the task's next run as every answer shows it."""
        self._note_runs()
        next_run = self._state.next_run_at(workflow.now(), reported=self._runs.reported)
        if self._runs.reported:
            self._record.write_behind(next_run)  # messages never wait for the database
        else:
            await self._record.write(next_run)

    def _note_runs(self) -> None:
        """Show the runs in flight in the state: their ids, and the instants still to come (a
        run withdrawn whose fire goes back still counts; histories from before reported-starts
        left it out), and the own instant of the oldest run sent or queued and not started."""
        back = GIVE_BACK if self._runs.reported else frozenset()
        self._state.running, self._state.waiting = self._runs.ids(), self._runs.coming(back)
        self._state.in_flight = self._runs.flight(workflow.now())
        if self._current:
            state = self._state
            queued = [policy.aimed_instant(state.spec, state.task_id, run.scheduled_at, run.trigger)
                      for run in state.queue]
            state.unstarted_at = min([*self._runs.unstarted(), *queued], default=None)

    async def _sleep(self) -> None:
        state = self._state
        # Read the clock now: the bookkeeping before took time, and a timer set from a stale
        # "now" would fire that much late.
        now = workflow.now()
        instant = state.next_instant()
        if self._runs.reported:
            wakes = self._runs.deadlines()  # a start report wakes the loop; silence, this
        else:
            wakes = [i for i in self._runs.instants() if i > now]  # a run starts: show RUNNING
        sleep_summary = None
        if instant is not None:
            ahead = policy.may_dispatch_ahead(self._runs.flight(now), state.queue,
                                              paused=state.paused, draining=self._draining())
            ahead = ahead and not self._calendar_skips()
            wakes.append(instant - self._lead() if ahead else instant)
            if (planned := self._planned_instant()) is not None and planned - self._lead() > now:
                wakes.append(planned - self._lead())  # read the calendars before it comes
            sleep_summary = summary(f"sleep until {instant.astimezone(state.spec.zone()).isoformat()} "
                                    f"({describe_schedule(state.spec)})")
        if self._runs.reported and (end := policy.pause_wake(state.position())) is not None:
            wakes.append(end)  # paused past its schedule's end: record the pause and end
        if (probe := self._healing.wake()) is not None:
            wakes.append(probe)  # the breaker's cool-down ends: probe
        timeout = max(min(wakes) - now, timedelta(milliseconds=1)) if wakes else None
        try:
            await workflow.wait_condition(lambda: self._wake or bool(self._runs.ended),
                                          timeout=timeout, timeout_summary=sleep_summary)
        except TimeoutError:
            # How late the timer fired is the backlog this task sees: lead further ahead.
            assert timeout is not None
            state.wake_lag_seconds = max(0.0, (workflow.now() - (now + timeout)).total_seconds())

    # -- helpers of the loop ----------------------------------------------------------------

    def _planned_instant(self) -> datetime | None:
        """The next fire's instant before any calendar shifts it; None without calendars."""
        state = self._state
        if not (self._current and state.spec.exclude_calendars) or state.next_fire_at is None:
            return None
        return policy.instant_of(state.spec, state.task_id, state.next_fire_at,
                                 state.spec.jitter_seconds)

    def _calendar_skips(self) -> bool:
        """The next fire falls on a date the task's calendars exclude (and does not shift)."""
        state = self._state
        return (state.next_fire_at is not None and bool(state.spec.exclude_calendars)
                and state.position().verdict(state.next_fire_at).excluded)

    async def _read_calendars(self) -> None:
        """Read the calendars' dates when the next fire comes near, so that a calendar edited
        after the task was created counts; the answer is in the history, so a replay decides
        the same. If the database does not answer, the dates read last stand."""
        state, now = self._state, workflow.now()
        planned = self._planned_instant()
        if planned is None or planned - now > self._lead() + DISPATCH_SLACK:
            return
        assert state.next_fire_at is not None
        years = sorted({now.year - 1, now.year, now.year + 1, state.next_fire_at.year,
                        state.next_fire_at.year + 1})
        ids = [ref.calendar_id for ref in state.spec.exclude_calendars]
        await self._runs.send_cancels()
        try:
            if self._options.release >= CALENDARS_CHANGED:
                held = {c.calendar_id: c.version for c in state.calendar_dates if c.version}
                changes = await workflow.execute_local_activity(
                    CALENDAR_CHANGES, CalendarChangesRequest(
                        tenant_id=state.tenant_id, calendar_ids=ids, years=years, have=held),
                    result_type=CalendarChanges,
                    schedule_to_close_timeout=CALENDAR_DATES_TIMEOUT, summary="read calendars")
                state.calendar_dates = changes.applied_to(state.calendar_dates)
            else:
                state.calendar_dates = await workflow.execute_local_activity(
                    CALENDAR_DATES, CalendarDatesRequest(
                        tenant_id=state.tenant_id, calendar_ids=ids, years=years),
                    result_type=list[CalendarDates],
                    schedule_to_close_timeout=CALENDAR_DATES_TIMEOUT, summary="read calendars")
        except ActivityError:
            workflow.logger.warning("calendars not read; the dates read last stand")

    def _lead(self) -> timedelta:
        options, state = self._options, self._state
        return policy.lead(options.lead_seconds, state.wake_lag_seconds, options.max_lead_seconds,
                           policy.herd_lead(state.crowd, options.herd_rate))

    def _beat(self, instant: datetime) -> timedelta:
        """How often a run sent now for ``instant`` heartbeats near it: by how much its wait
        exceeds the usual lead (activities/heartbeats.py)."""
        if self._options.release < HERD_BEAT:
            return timedelta(seconds=MIN_BEAT_SECONDS)
        extra = (instant - workflow.now()).total_seconds() - self._options.lead_seconds
        return timedelta(seconds=near_beat(extra))

    def _keeps_held(self) -> bool:
        return self._options.release >= HELD_KEPT

    def _draining(self) -> bool:
        """The history is long: no new run starts here; the next workflow run starts them.
        A run first adds half the limit to what its start cost, so a limit near that cost never
        makes workflow runs that only continue as new."""
        info = workflow.info()
        limit = self._options.history_limit
        return (info.is_continue_as_new_suggested()
                or info.get_current_history_length() > max(limit, self._start_length + limit // 2))

    async def _continue_as_new(self) -> None:
        """Continue as new once the rows are written, or, while the database refuses them, past
        HANDOVER_WAIT with those that fit handed over (Record.unwritten). A message meanwhile
        is acted on first: this returns, and the loop goes on."""
        carried = self._record.unwritten() if self._options.release >= ROWS_CARRIED else None
        waited = False
        try:
            await workflow.wait_condition(
                lambda: self._quiet() or (self._runs.reported and self._wake),
                timeout=HANDOVER_WAIT if carried is not None else None)
        except TimeoutError:
            waited = True
        if not self._may_continue_as_new():
            return
        if not self._quiet():
            if not (waited and workflow.all_handlers_finished()):
                return
            if (carried := self._record.unwritten()) is None:
                return
        self._state.continued_as_new += 1
        # The same task goes on: its creator named the create, not this run.
        workflow.continue_as_new(self._input.model_copy(update={
            "state": self._state, "actor": None, "release": RELEASE,
            "unwritten": None if self._record.idle() else carried}))

    def _quiet(self) -> bool:
        """No handler is running and every row is written: the workflow run may end."""
        return workflow.all_handlers_finished() and self._record.idle()

    def _may_continue_as_new(self) -> bool:
        return self._draining() and not len(self._runs) and not self._runs.ended

    def _refresh_status(self) -> None:
        # An older workflow asks paused-shows-paused here, where the release that wrote its
        # history first asked it: asked earlier, its marker would come before commands the
        # history has before it (a run sent ahead), and the replay fails (TMPRL1100).
        paused_first = self._current or workflow.patched(PAUSED_SHOWS_PAUSED)
        self._state.refresh_status(running=bool(self._runs.flight(workflow.now()).started),
                                   paused_first=paused_first)

    # -- messages ---------------------------------------------------------------------------

    @workflow.query(name="state")
    def query_state(self) -> TaskState:
        """The task's current state."""
        return self._state

    @workflow.signal(name="cancel")
    async def cancel_signal(self, reason: str | None = None, actor: str | None = None) -> None:
        """Cancel the task; a running job is cancelled through its heartbeats."""
        reason, actor = arguments.text(reason, "reason"), arguments.text(actor, "actor")
        if self._runs.reported:
            self._request_cancel(reason, actor)  # at once, even while a pass waits on the database
            return
        async with self._lock:
            self._request_cancel(reason, actor)

    @workflow.signal(name="pause")
    async def pause_signal(self, reason: str | None = None, actor: str | None = None) -> None:
        """Stop starting runs until resumed."""
        reason, actor = arguments.text(reason, "reason"), arguments.text(actor, "actor")
        async with self._lock:
            self._pause(reason, actor or TEMPORAL_SIGNAL)

    @workflow.signal(name="resume")
    async def resume_signal(self, missed: ResumeMissed | None = None,
                            actor: str | None = None) -> None:
        """Start runs again; the fires inside the pause SKIPPED paused, or decided by the
        missed-run policy (``missed`` policy; an unknown one is logged and read as skip)."""
        async with self._lock:
            self._resume(arguments.missed(missed), arguments.text(actor, "actor"))

    @workflow.signal(name="trigger")
    async def trigger_signal(self, actor: str | None = None) -> None:
        """Run the job now, outside the schedule."""
        async with self._lock:
            self._trigger(arguments.text(actor, "actor"))

    async def _answered(self) -> TaskState:
        """The state an update answers, once the cancels of its workflow task are sent: the
        answer leaves after them, with the task's write (RunsInFlight.send_cancels)."""
        await self._runs.send_cancels()
        return self._state

    def _applied(self) -> bool:
        """Whether the update being validated is a keyed request an earlier run of this
        workflow applied already: it passes, to be answered as the first was (_repeated)."""
        info = workflow.current_update_info()
        return info is not None and info.id in self._state.applied_updates

    def _repeated(self) -> bool:
        """Whether the update being handled is a keyed request an earlier run of this workflow
        applied already (a retry after a continue-as-new): it is answered, not applied."""
        info = workflow.current_update_info()
        return self._state.repeated_update(info.id if info is not None else None)

    @workflow.update(name="cancel_task")
    async def cancel_update(self, reason: str | None = None, actor: str | None = None) -> TaskState:
        """Cancel the task and answer with its state."""
        if self._runs.reported:
            # Answer once the task has ended: every run has, none starts after this returns,
            # and the answer lists the runs whose job had started (cancelled through their
            # heartbeats, or ended first: a waiting run hears of the cancel at its next
            # heartbeat).
            self._request_cancel(reason, actor)
            settle = max(CANCEL_SETTLE + self._runs.holding(),
                         self._runs.cancel_reach(workflow.now()) + CANCEL_SLACK)
            try:
                await workflow.wait_condition(lambda: self._state.status in FINAL_STATUSES,
                                              timeout=settle)
            except TimeoutError:
                pass  # still going (a silent worker): the answer lists them as running
            return await self._answered()
        async with self._lock:
            self._request_cancel(reason, actor)
            return self._state

    @workflow.update(name="pause_task")
    async def pause_update(self, reason: str | None = None, actor: str | None = None) -> TaskState:
        """Pause the task and answer with its state."""
        async with self._lock:
            if not self._repeated():
                self._pause(reason, actor or TEMPORAL_SIGNAL)
                await self._write()
        return await self._answered()

    @workflow.update(name="resume_task")
    async def resume_update(self, missed: ResumeMissed | None = None,
                            actor: str | None = None) -> TaskState:
        """Resume the task and answer with its state (``missed`` as for the signal)."""
        async with self._lock:
            if not self._repeated():
                self._resume(missed or ResumeMissed.SKIP, actor)
                await self._write()
        return await self._answered()

    @workflow.update(name="trigger_task")
    async def trigger_update(self, actor: str | None = None) -> TaskState:
        """Queue a run now and answer with the task's state."""
        async with self._lock:
            if not self._repeated():
                self._trigger(actor)
        return await self._answered()

    @workflow.update(name="replay_run")
    async def replay_update(self, request: ReplayRequest) -> TaskState:
        """Run a dead-lettered run again, under its own execution id."""
        async with self._lock:
            if not self._repeated():
                self._state.add_replay(request)
                self._record.event(REPLAY, request.actor, detail={"execution_id": request.execution_id})
                self._make_way()
                self._wake = True
        return await self._answered()

    @workflow.update(name="backfill")
    async def backfill_update(self, request: BackfillRequest) -> TaskState:
        """Run past instants of the schedule again, oldest first, one at a time."""
        async with self._lock:
            if not self._repeated():
                await self._backfill(request)
        return await self._answered()

    async def _backfill(self, request: BackfillRequest) -> None:
        self._state.backfill = Backfill(
            mode=request.mode, start=request.start, end=request.end,
            total=len(request.instants), asked_at=workflow.now(), pending=request.instants)
        if self._current:
            self._hold_decided(self._state.backfill)
        self._record.event(BACKFILL, request.actor, detail={
            "mode": request.mode, "start": request.start.isoformat(),
            "end": request.end.isoformat(), "instants": len(request.instants)})
        self._wake = True
        await self._write()

    @workflow.update(name="update_task")
    async def update_task(self, changes: TaskChanges) -> TaskState:
        """Change the task; the sleeping workflow decides again at once."""
        return await self._change(changes, Origin())

    @workflow.update(name=CHANGE_TASK)
    async def change_task(self, change: SpecChange) -> TaskState:
        """``update_task`` as the API sends it: with who asked, and as what (a rollback)."""
        return await self._change(change.changes, change.origin, change)

    async def _change(self, changes: TaskChanges, origin: Origin,
                      sent: SpecChange | None = None) -> TaskState:
        async with self._lock:
            if not self._repeated():
                await self._apply_change(changes, origin, sent)
        return await self._answered()

    async def _apply_change(self, changes: TaskChanges, origin: Origin,
                            sent: SpecChange | None) -> None:
        state = self._state
        new_spec = changes.apply_to(state.spec)
        if policy.schedule_changes(state.spec, new_spec):
            if self._current:
                # The fires of the old schedule that came due before the change (a late
                # timer, the workflow's worker away) are decided by the old schedule.
                while self._decide_due():
                    await self._write()
            await self._close_pause()
            retimed = policy.retimes(state.spec, new_spec)
            self._runs.withdraw(RESCHEDULED if retimed else "rebound")
            if retimed and self._runs.reported:
                self._runs.outdate()
        change = policy.change_schedule(state.position(), self._runs.flight(workflow.now()),
                                        new_spec, workflow.now(), keep_held=self._keeps_held())
        spec_changed = new_spec != state.spec
        cool_down = new_spec.auto_resume_after_seconds
        healing_changed = cool_down != state.spec.auto_resume_after_seconds
        state.spec = new_spec
        if spec_changed:
            state.spec_version += 1
        self._record.event(origin.action, origin.actor, detail=origin.detail, spec=spec_changed)
        state.next_fire_at, state.anchor, state.queue = change.next_fire_at, change.anchor, change.queue
        if change.retimed:
            state.latest_taken = None
            # Its new instants are not those of the herd it was created into: it joins
            # the one the API counted for its next run, if the change put that run there.
            counted = sent or SpecChange(changes=changes)  # a plain update counts none
            state.crowd = policy.retimed_crowd(counted.crowd, counted.crowd_at,
                                               state.next_instant())
        for old in change.dropped:
            self._record.skip(old.scheduled_at, SkipReason.RESCHEDULED)
        if self._current and healing_changed:
            self._healing.replan(cool_down)
        self._wake = True
        await self._write()

    @cancel_update.validator
    def _validate_cancel(self, reason: str | None = None, actor: str | None = None) -> None:
        arguments.refuse_bad(reason=reason, actor=actor)
        self._refuse_if_final("cancelled")

    @pause_update.validator
    def _validate_pause(self, reason: str | None = None, actor: str | None = None) -> None:
        arguments.refuse_bad(reason=reason, actor=actor)
        if not self._applied():
            self._refuse_if_final("paused")

    @resume_update.validator
    def _validate_resume(self, missed: ResumeMissed | None = None, actor: str | None = None) -> None:
        arguments.refuse_bad(missed=missed, actor=actor)
        if not self._applied():
            self._refuse_if_final("resumed")

    @trigger_update.validator
    def _validate_trigger(self, actor: str | None = None) -> None:
        arguments.refuse_bad(actor=actor)
        if not self._applied():
            self._refuse_if_final("triggered")

    @replay_update.validator
    def _validate_replay(self, request: ReplayRequest) -> None:
        if self._applied():
            return
        self._refuse_if_final("replayed")
        if not request.execution_id.startswith(f"{self._state.task_id}:"):
            raise ApplicationError("that execution is not one of this task's", non_retryable=True)

    @backfill_update.validator
    def _validate_backfill(self, request: BackfillRequest) -> None:
        if self._applied():
            return
        self._refuse_if_final("backfilled")
        if not self._current:
            raise ApplicationError("this task's workflow is older than backfills; it takes them "
                                   "after its next continue-as-new", type="BackfillRefused",
                                   non_retryable=True)
        if self._state.paused:
            raise ApplicationError("task is paused: resume it to backfill", type="BackfillRefused",
                                   non_retryable=True)
        if self._backfilling():
            raise ApplicationError("a backfill of this task is running already",
                                   type="BackfillRefused", non_retryable=True)

    @update_task.validator
    def _validate_update(self, changes: TaskChanges) -> None:
        if self._applied():
            return
        self._refuse_if_final("updated")
        state, new_spec, now = self._state, changes.apply_to(self._state.spec), workflow.now()
        if policy.timing_judged(state.spec, new_spec):
            check_timing(new_spec, now, state.spec)
        if not policy.schedule_changes(state.spec, new_spec):
            return
        # A schedule change that would leave the task nothing to run is refused, not applied
        # to end it at once (a validator: it writes no history, replays never run it).
        flight = self._runs.flight(now)
        change = policy.change_schedule(state.position(), flight, new_spec, now,
                                        keep_held=self._keeps_held())
        if policy.leaves_nothing(change, flight):
            name, message = policy.why_no_run(new_spec, state.executed)
            raise ApplicationError(message, {"field": name}, type=NEVER_RUNS, non_retryable=True)

    @change_task.validator
    def _validate_change(self, change: SpecChange) -> None:
        self._validate_update(change.changes)

    def _refuse_if_final(self, verb: str) -> None:
        if (why := self._state.closed_to(verb)) is not None:
            raise ApplicationError(why, type="TaskFinished", non_retryable=True)

    def _request_cancel(self, reason: str | None, actor: str | None = None) -> None:
        first = not self._state.cancel_requested
        if self._state.request_cancel(reason, workflow.now() if self._runs.reported else None):
            self._stop_backfill("cancelled")
            if first:
                self._record.event(CANCEL, actor, detail={"reason": self._state.status_reason})
            if self._runs.reported:
                self._runs.cancel_all()
            self._wake = True

    def _pause(self, reason: str | None, actor: str = SCHEDULER) -> None:
        if self._state.pause(reason, workflow.now() if self._runs.reported else None):
            self._stop_backfill("paused")
            self._record.event(PAUSE, actor, detail={"reason": self._state.status_reason})
            self._runs.withdraw(PAUSED)
            self._refresh_status()
            self._wake = True
        elif self._current and actor != SCHEDULER and self._healing.stop():
            # A user's pause of an auto-paused task is a user's pause from now: no probe.
            self._state.status_reason = reason or "paused"
            self._record.event(PAUSE, actor, detail={"reason": self._state.status_reason})
            self._wake = True

    def _resume(self, missed: ResumeMissed, actor: str | None = None) -> None:
        missed = ResumeMissed(missed)  # a union's member arrives decoded as its plain value
        if self._state.resume(workflow.now(), missed):
            self._runs.unspare(PAUSED)
            self._record.event(RESUME, actor,
                               detail=None if missed is ResumeMissed.SKIP else {"missed": missed.value})
            self._refresh_status()
            self._wake = True

    def _trigger(self, actor: str | None = None) -> None:
        if self._state.add_manual_run(workflow.now()):
            self._record.event(TRIGGER, actor, detail={"execution_id": self._state.queue[-1].execution_id})
            self._make_way()
            self._wake = True

    def _make_way(self) -> None:
        """A run asked for meets the overlap policy like any fire: a run waiting for its
        instant is withdrawn and its fire decided again at the instant (one too near it to
        withdraw runs first, the asked-for run after it)."""
        if self._runs.reported and self._state.spec.overlap_policy is not OverlapPolicy.ALLOW:
            self._runs.withdraw("asked")

    @workflow.signal(name=RUN_STARTED)
    def run_started(self, report: RunStart) -> None:
        """A jobs worker reports that a run's job started: the run is running from now."""
        if self._runs.report_started(report):
            self._wake = True

    @workflow.update(name=CLAIM_RUN)
    def claim_run(self, claim: RunStart) -> bool | datetime:
        """May this run start this late? Yes unless it was withdrawn or its fire decided again;
        a timed claim is told when it was granted (the run is found untaken from then on)."""
        if not self._runs.claim(claim):
            return False
        self._wake = True
        return workflow.now() if claim.timed else True
