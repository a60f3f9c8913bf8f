"""The policy engine: for every scheduled instant of a task, exactly one outcome.

A fire whose instant has come is started, queued behind the run in flight, or SKIPPED with a
reason; a run dispatched ahead of its instant may be withdrawn before it. This module owns
every rule that decides which (missed runs, overlap, catch-up caps, ``max_runs`` and
``end_date``, jitter, drift, retries, dead letters, the circuit breaker); the workflow only
carries its decisions out. Pure: times are arguments, nothing here reads a clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from pydantic import BaseModel, Field

from scheduling.calendars import RUNS, CalendarPlan, Verdict
from scheduling.cron import next_cron_fire
from scheduling.fire import first_fire, next_fire
from scheduling.jitter import jitter_offset
from scheduling.spec import (
    MAX_COOL_DOWN_SECONDS,
    ON_TIME_GRACE,
    IntervalMode,
    MissedRunPolicy,
    OverlapPolicy,
    ScheduleFields,
    ScheduleType,
    TaskSpec,
    outside_catchup_window,
)
from scheduling.status import (
    DeadLetter,
    ExecutionStatus,
    ResumeMissed,
    SkipReason,
    TaskStatus,
    Trigger,
)

# Due fires looked at in one pass: a per-second cron after a day down takes many passes.
FIRES_PER_PASS = 250
# A run dispatched ahead is withdrawn only while its instant is further away than its beat
# and this: a cancel reaches a waiting run at its next heartbeat (at most a beat apart near
# the instant, activities/heartbeats.py), and a run must never be started and then killed by a
# withdrawal.
WITHDRAW_SLACK = timedelta(seconds=1)
# A run is running once its jobs worker reports that the job started. A scheduled run the
# workflow has not heard of UNTAKEN_AFTER past its instant was taken by no worker: its fire
# goes back to the missed-run policy. So an attempt of a scheduled run that would start more
# than CLAIM_AFTER past its instant (or past when it was sent) asks the workflow first; the
# gap between the two leaves a start report sent unasked seconds to arrive.
CLAIM_AFTER = timedelta(seconds=4)
UNTAKEN_AFTER = timedelta(seconds=8)
# HTTP answers that are worth retrying although they are 4xx.
RETRYABLE_4XX = frozenset({408, 429})


class Run(BaseModel):
    """A run to start: its fire time, what asked for it, and its id when it has one already."""

    scheduled_at: datetime
    trigger: Trigger = Trigger.SCHEDULE
    execution_id: str | None = Field(default=None, description="set for a replayed run")
    held: bool = Field(default=False, description="decided to start while the task drained: "
                       "the next workflow run starts it at once, unless it is late by then")


@dataclass(frozen=True)
class Flight:
    """What the policy needs to know of the runs in flight."""

    total: int = 0
    scheduled: int = 0  # runs of the schedule (counted against max_runs)
    started: int = 0  # runs whose worker reported that the job started
    user_started: int = 0  # of those, runs not started by the missed-run policy
    last_fire: datetime | None = None  # the latest fire of the schedule in flight (withdrawn too)
    near: int = 0  # runs waiting for an instant too near to be withdrawn (see may_withdraw)


@dataclass(frozen=True)
class Position:
    """Where a task's schedule stands."""

    spec: TaskSpec
    task_id: str
    anchor: datetime
    next_fire_at: datetime | None
    executed: int = 0  # scheduled runs that ran (max_runs counts these only)
    paused: bool = False  # fires from paused_at on wait for the pause to end
    paused_at: datetime | None = None  # when the last pause was asked (None: not kept)
    resumed_at: datetime | None = None  # when it ended: fires from paused_at up to here were in it
    queue: tuple[Run, ...] = ()
    latest_taken: datetime | None = None  # the newest fire taken from the schedule so far
    calendar: CalendarPlan | None = None  # the dates exclude_calendars names (None: none)

    def instant(self, fire: datetime) -> datetime:
        """When ``fire`` runs: its time (or the day its calendar shifts it to) plus the
        task's jitter (``instant_of``)."""
        shifted = self.verdict(fire).shifted_to
        return instant_of(self.spec, self.task_id, shifted or fire, self.spec.jitter_seconds)

    def verdict(self, fire: datetime) -> Verdict:
        """What the task's calendars make of ``fire`` (``calendar_verdict``)."""
        return calendar_verdict(self, fire)


def calendar_verdict(pos: Position, fire: datetime) -> Verdict:
    """Whether ``fire`` runs as planned, is skipped (SKIPPED ``calendar``) or shifted, and by
    which calendar: the rule preview and the workflow both apply."""
    if pos.calendar is None:
        return RUNS
    following = None if is_fixed_delay(pos.spec) else next_fire(pos.spec, anchor=pos.anchor,
                                                                  after=fire)
    return pos.calendar.verdict(fire, following)


@dataclass
class Due:
    """The decisions of one pass over the due fires."""

    next_fire_at: datetime | None
    queue: list[Run]
    start: list[Run] = field(default_factory=list)
    skipped: list[tuple[datetime, SkipReason]] = field(default_factory=list)
    cancel_running: bool = False
    more: bool = False  # more fires are due than one pass decides: decide again at once
    taken: datetime | None = None  # the newest fire this pass took from the schedule


def instant_of(spec: ScheduleFields, task_id: str, scheduled_at: datetime,
               jitter_seconds: float) -> datetime:
    """When a fire runs: its time plus its jitter, the jitter capped below half the gap to the
    next fire so that instants keep the order of their fires."""
    if jitter_seconds <= 0:
        return scheduled_at
    gap = _gap_after(spec, scheduled_at)
    cap = jitter_seconds if gap is None else min(jitter_seconds, gap.total_seconds() / 2)
    return scheduled_at + jitter_offset(task_id, scheduled_at, cap)


def aimed_instant(spec: TaskSpec, task_id: str, scheduled_at: datetime, trigger: Trigger) -> datetime:
    """The instant a run aims at, which its lateness and drift count from: a fire of the
    schedule (caught up or replayed too) its jittered instant, a run someone asked for its
    own time (no jitter is added to it)."""
    if trigger in (Trigger.MANUAL, Trigger.PROBE):
        return scheduled_at
    return instant_of(spec, task_id, scheduled_at, spec.jitter_seconds)


def _gap_after(spec: ScheduleFields, scheduled_at: datetime) -> timedelta | None:
    if spec.schedule_type is ScheduleType.INTERVAL:
        assert spec.interval_seconds is not None
        return timedelta(seconds=spec.interval_seconds)
    if spec.schedule_type is ScheduleType.CRON:
        assert spec.cron is not None
        following = next_cron_fire(spec.cron, ZoneInfo(spec.timezone), scheduled_at, spec.dst_policy)
        return following - scheduled_at if following is not None else None
    if spec.schedule_type is ScheduleType.DATES:
        later = [d for d in spec.dates or [] if d > scheduled_at]
        return later[0] - scheduled_at if later else None
    return None


def is_fixed_delay(spec: ScheduleFields) -> bool:
    """fixed_delay plans each fire when the run before it has finished."""
    return (spec.schedule_type is ScheduleType.INTERVAL
            and spec.interval_mode is IntervalMode.FIXED_DELAY)


def runs_left(pos: Position, flight: Flight) -> int | None:
    """Scheduled runs max_runs still allows beyond those executed, in flight or queued."""
    if pos.spec.max_runs is None:
        return None
    queued = sum(1 for run in pos.queue if run.trigger.scheduled)
    return max(0, pos.spec.max_runs - pos.executed - flight.scheduled - queued)


def bounded(candidate: datetime | None, pos: Position, flight: Flight) -> datetime | None:
    """A next fire, or None when end_date or max_runs ends the schedule before it."""
    if candidate is None:
        return None
    if pos.spec.end_date is not None and candidate > pos.spec.end_date:
        return None
    left = runs_left(pos, flight)
    return None if left is not None and left <= 0 else candidate


def decide_due(pos: Position, flight: Flight, now: datetime, *, queued_missed: bool = True) -> Due:
    """Decide every fire whose instant has come by ``now``.

    Only the newest due fire can be on time (and only within ON_TIME_GRACE); every older one
    was missed and goes to the missed-run policy, a fire of the schedule still queued too
    (``queued_missed``; False replays histories from before reported-starts). The on-time
    fire meets the overlap policy when a run of the user's is going; behind catch-up runs it
    queues."""
    spec = pos.spec
    instant = pos.instant

    def following(fire: datetime) -> datetime | None:
        return None if is_fixed_delay(spec) else next_fire(spec, anchor=pos.anchor, after=fire)

    if (end := pause_wake(pos)) is not None and now >= end:
        pos = replace(pos, paused=False, resumed_at=now)  # no fire after the schedule's end

    def ripe(fire: datetime) -> bool:
        # While paused, a fire from the pause on waits for its end (every fire, when the time
        # the pause was asked is not kept).
        held = pos.paused and (pos.paused_at is None or instant(fire) >= pos.paused_at)
        return instant(fire) <= now and not held

    due: list[datetime] = []
    upcoming = pos.next_fire_at
    while upcoming is not None and ripe(upcoming) and len(due) < FIRES_PER_PASS:
        due.append(upcoming)
        upcoming = following(upcoming)
    result = Due(next_fire_at=upcoming, queue=list(pos.queue))
    if not due:
        return result
    policy = spec.effective_missed_run_policy()

    def room(queue: list[Run]) -> int:
        queued_catchups = sum(1 for run in queue if run.trigger is Trigger.CATCHUP)
        return {MissedRunPolicy.CATCHUP: max(0, spec.max_catchup_runs - queued_catchups),
                MissedRunPolicy.SINGLE_CATCHUP: 1 if queued_catchups == 0 else 0,
                MissedRunPolicy.SKIP: 0}[policy]

    keep = room(result.queue)

    if upcoming is not None and ripe(upcoming):
        # More due than a pass takes: if the newest `keep` + 1 lie beyond this pass, every fire
        # of it is missed and not kept; otherwise take the rest of them into this pass.
        ahead: list[datetime] = []
        cursor: datetime | None = upcoming
        while cursor is not None and ripe(cursor) and len(ahead) <= keep:
            ahead.append(cursor)
            cursor = following(cursor)
        if len(ahead) > keep:
            result.more = True
            over = SkipReason.CATCHUP_CAP if policy is MissedRunPolicy.CATCHUP else SkipReason.MISSED
            # Each for the reason a pass would give it (a date the calendars exclude too).
            result.skipped = [(f, SkipReason.CALENDAR if pos.verdict(f).excluded and not _in_pause(pos, f)
                               else _missed_reason(pos, f, now, over)) for f in due]
            result.taken = due[-1]
            return result
        due += ahead
        result.next_fire_at = upcoming = cursor

    paused = [f for f in due if _in_pause(pos, f)]
    result.skipped += [(f, SkipReason.PAUSED) for f in paused]
    due = [f for f in due if f not in paused]
    excluded = [f for f in due if pos.verdict(f).excluded]
    result.skipped += [(f, SkipReason.CALENDAR) for f in excluded]
    due = [f for f in due if f not in excluded]
    # A fire due before a pause was asked is missed: the pause stops it from running on time.
    on_time = [f for f in due[-1:] if now - instant(f) <= ON_TIME_GRACE
               and (pos.paused_at is None or instant(f) >= pos.paused_at)]
    missed = due[: len(due) - len(on_time)]
    if queued_missed and not (on_time and _keeps_newest(flight, spec.overlap_policy)):
        # A fire still queued is older than every due one: no longer the newest, it was missed
        # (unless the on-time fire replaces it as the one that waits, an overlap).
        for old in [run for run in result.queue if run.trigger is Trigger.SCHEDULE and not run.held]:
            result.queue.remove(old)
            back = take_back(replace(pos, queue=tuple(result.queue)), flight, old.scheduled_at,
                             now, missed=True)
            result.queue = back.queue
            result.skipped += back.skipped
        keep = room(result.queue)
    stale = [f for f in missed if outside_catchup_window(spec, f, now)]
    result.skipped += [(f, SkipReason.OUTSIDE_WINDOW) for f in stale]
    missed = missed[len(stale):]
    if policy is MissedRunPolicy.SINGLE_CATCHUP and on_time:
        keep = 0
    kept = missed[len(missed) - keep:] if keep else []
    over = SkipReason.CATCHUP_CAP if policy is MissedRunPolicy.CATCHUP else SkipReason.MISSED
    result.skipped += [(f, over) for f in missed[: len(missed) - len(kept)]]

    left = runs_left(replace(pos, queue=tuple(result.queue)), flight)
    for fire in kept:
        if left is not None and left <= 0:
            break
        left = None if left is None else left - 1
        result.queue.append(Run(scheduled_at=fire, trigger=Trigger.CATCHUP))
    for fire in on_time:
        if left is not None and left <= 0:
            break
        _decide_on_time(result, fire, flight, spec.overlap_policy)
    if not result.start and _delay_from_now(spec, result.queue, flight):
        result.next_fire_at = next_fire(spec, anchor=pos.anchor, after=now)
    result.next_fire_at = bounded(result.next_fire_at, _after(pos, result), flight)
    # Fires beyond max_runs are not taken: they come back if a run in flight does not run.
    decided = [f for f, _ in result.skipped] + [r.scheduled_at for r in result.start] + [
        r.scheduled_at for r in result.queue if r.trigger.scheduled]
    result.taken = max(decided, default=None)
    return result


def _in_pause(pos: Position, fire: datetime) -> bool:
    """The fire came while the task was paused: its instant no earlier than the pause was
    asked (any, when that is not kept), its time no later than the pause ended."""
    if pos.resumed_at is None or fire > pos.resumed_at:
        return False
    return pos.paused_at is None or pos.instant(fire) >= pos.paused_at


def pause_wake(pos: Position) -> datetime | None:
    """When a paused task wakes to record the fires of its pause although it is not resumed:
    once its schedule is over (end_date, plus the most jitter moves a fire), if a fire is
    left. From then on the pause holds none (``decide_due``)."""
    spec = pos.spec
    if not pos.paused or pos.paused_at is None or pos.next_fire_at is None or spec.end_date is None:
        return None
    return spec.end_date + timedelta(seconds=spec.jitter_seconds)


def close_pause(pos: Position, flight: Flight, now: datetime, *, queued_missed: bool = True) -> Due:
    """The fires due so far in a pause, decided before the task ends or its schedule is
    replaced (nothing else would): those inside it SKIPPED paused, older ones missed. None
    starts: a fire due before the pause is never on time."""
    return decide_due(replace(pos, paused=False, resumed_at=now), flight, now,
                      queued_missed=queued_missed)


def _missed_reason(pos: Position, fire: datetime, now: datetime, over: SkipReason) -> SkipReason:
    if _in_pause(pos, fire):
        return SkipReason.PAUSED
    if outside_catchup_window(pos.spec, fire, now):
        return SkipReason.OUTSIDE_WINDOW
    return over


def _decide_on_time(result: Due, fire: datetime, flight: Flight, overlap: OverlapPolicy) -> None:
    run = Run(scheduled_at=fire)
    # Runs held by a drain start at once in the next workflow run: they are going already.
    going = flight.user_started + sum(1 for queued in result.queue if queued.held)
    if going == 0 and (result.queue or flight.total):
        # Behind runs the scheduler itself started or queued (catch-up, or a run someone
        # asked for): the overlap policy is for a slow run of the user's schedule.
        result.queue.append(run)
        return
    if going == 0:
        result.start.append(run)
        return
    if overlap is OverlapPolicy.ALLOW:
        result.start.append(run)
    elif overlap is OverlapPolicy.SKIP:
        result.skipped.append((fire, SkipReason.OVERLAP))
    else:
        # buffer_one and cancel_running keep one scheduled fire waiting: the newest.
        for old in [r for r in result.queue if r.trigger is Trigger.SCHEDULE]:
            result.queue.remove(old)
            result.skipped.append((old.scheduled_at, SkipReason.OVERLAP))
        if overlap is OverlapPolicy.CANCEL_RUNNING:
            result.cancel_running = True
            result.queue.insert(0, run)
        else:
            result.queue.append(run)


def _keeps_newest(flight: Flight, overlap: OverlapPolicy) -> bool:
    """buffer_one and cancel_running keep one scheduled fire waiting while a run of the
    user's is going: the newest (an older waiting one is SKIPPED overlap)."""
    return flight.user_started > 0 and overlap in (OverlapPolicy.BUFFER_ONE,
                                                   OverlapPolicy.CANCEL_RUNNING)


def _after(pos: Position, due: Due) -> Position:
    """The position once the pass's decisions are taken (for the max_runs budget)."""
    started = sum(1 for run in due.start if run.trigger.scheduled)
    return replace(pos, next_fire_at=due.next_fire_at, executed=pos.executed + started,
                   queue=tuple(due.queue))


def next_from_queue(queue: list[Run], flight: Flight, *, paused: bool) -> Run | None:
    """The queued run to start now: the head once nothing is in flight; a run held by a drain
    (already decided to start) or someone asked for also when the runs in flight only wait
    for instants far enough to be withdrawn (a nearer one runs first). A pause holds the
    schedule's runs (catch-up, buffered, held), not the ones someone asked for."""
    waiting = [run for run in queue if not (paused and run.trigger.scheduled)]
    if not waiting:
        return None
    head = waiting[0]
    asked = not head.trigger.scheduled and flight.started == 0 and flight.near == 0
    if flight.total == 0 or head.held or asked:
        return head
    return None


def stale_in_queue(pos: Position, now: datetime) -> list[Run]:
    """Queued runs of the schedule that can no longer be on time: all but the newest, and the
    newest once its instant is past ON_TIME_GRACE. The missed-run policy decides each again
    (``take_back`` with ``missed``): only the newest due fire can be on time. A run held by a
    drain was decided on time already: it is stale only once past ON_TIME_GRACE."""

    def late(run: Run) -> bool:
        return now - pos.instant(run.scheduled_at) > ON_TIME_GRACE

    held = [run for run in pos.queue if run.held and late(run)]
    scheduled = [run for run in pos.queue if run.trigger is Trigger.SCHEDULE and not run.held]
    if not scheduled:
        return held
    return held + (scheduled if late(scheduled[-1]) else scheduled[:-1])


def may_dispatch_ahead(flight: Flight, queue: list[Run], *, paused: bool, draining: bool) -> bool:
    """The next fire is sent a lead ahead only when nothing else is in flight or waiting: the
    runs of a task then go one by one, whatever its interval, and overlap is decided at the
    instant."""
    return flight.total == 0 and not queue and not paused and not draining


def lead(base_seconds: float, wake_lag_seconds: float, max_seconds: float,
         herd_seconds: float = 0.0) -> timedelta:
    """How far ahead of its instant a run is dispatched: the configured lead, plus twice how
    late the task's last timer fired (a backlogged engine), plus its place in a herd (see
    herd_lead), up to the maximum."""
    if base_seconds <= 0:
        return timedelta(0)
    return timedelta(seconds=min(base_seconds + 2 * wake_lag_seconds + herd_seconds,
                                 max(base_seconds, max_seconds)))


def herd_second(at: datetime) -> datetime:
    """The whole second a run due ``at`` shares with its herd: the tasks due in it are
    dispatched one after another (herd_lead)."""
    return at.replace(microsecond=0)


def retimed_crowd(crowd: int, counted_at: datetime | None, next_run: datetime | None) -> int:
    """The herd a retimed task joins: the tasks counted due in ``counted_at``'s second when the
    change was sent, if the new schedule's next run falls in that second; else none."""
    if counted_at is None or next_run is None or herd_second(counted_at) != herd_second(next_run):
        return 0
    return crowd


def herd_lead(ahead: int, rate: float) -> float:
    """Seconds further ahead a task's runs go when it was created into a herd, ``ahead`` tasks
    due in its first run's second before it: the time the cluster takes to dispatch those at
    ``rate`` a second (0: no herd lead). The herd's dispatches then leave one after another
    before its instant, not all at once; a cron herd meets again at every fire."""
    return ahead / rate if rate > 0 else 0.0


def may_withdraw(instant: datetime, now: datetime, beat: timedelta,
                 held: timedelta = timedelta(0)) -> bool:
    """A waiting run that heartbeats every ``beat`` near its instant can still be withdrawn
    safely (see WITHDRAW_SLACK): 3 s ahead at the usual beat of 2 s; ``held`` more while the
    workflow task's commands, the cancel among them, may be held that long (a slow write)."""
    return instant - now > beat + held + WITHDRAW_SLACK


def must_claim(trigger: Trigger, due: datetime, now: datetime) -> bool:
    """An attempt of a scheduled run this late asks the workflow before it starts the job
    (the only runs the workflow finds untaken, see UNTAKEN_AFTER)."""
    return trigger is Trigger.SCHEDULE and now - due > CLAIM_AFTER


def fresh_grant(granted_at: datetime, now: datetime) -> bool:
    """A late attempt's claim, granted by its workflow at ``granted_at``, may start the job:
    its start report then reaches the workflow before the run could be found untaken
    (UNTAKEN_AFTER after the grant), with the margin an unasked start has (CLAIM_AFTER)."""
    return now - granted_at <= CLAIM_AFTER


def untaken(instant: datetime, now: datetime) -> bool:
    """A scheduled run no worker reported started by now was taken by none: it may no longer
    start unasked (see CLAIM_AFTER), so the workflow decides its fire again."""
    return now - instant >= UNTAKEN_AFTER


def late_limit(trigger: Trigger) -> timedelta | None:
    """How late a run may start before it is refused as missed: the schedule's own runs only
    (catch-up and asked-for runs are late on purpose)."""
    return ON_TIME_GRACE if trigger is Trigger.SCHEDULE else None


def after_finish(pos: Position, flight: Flight, finished_at: datetime) -> datetime | None:
    """fixed_delay's next fire, planned when a scheduled run finishes."""
    return bounded(next_fire(pos.spec, anchor=pos.anchor, after=finished_at), pos, flight)


def take_back(pos: Position, flight: Flight, fire: datetime, now: datetime, *,
              missed: bool = False, outdated: bool = False, in_order: bool = True,
              delay_goes_on: bool = True) -> Due:
    """A fire whose run did not start (withdrawn by a pause or new bounds, refused as late, or
    taken by no worker).

    While nothing after it was decided, it goes back to the schedule and is decided again
    when its time is looked at. Once later fires were decided, or when its instant passed
    unrun (``missed``: late or untaken), it is a missed fire, decided alone by the
    missed-run policy (never by rewinding the schedule over the later ones). A fire of a
    schedule since re-timed (``outdated``) is SKIPPED rescheduled: the new schedule keeps its
    position. A fixed_delay fire SKIPPED so plans the next fire from now when no other run of
    the schedule will (``delay_goes_on``; workflows before it ended there)."""
    spec = pos.spec
    result = Due(next_fire_at=pos.next_fire_at, queue=list(pos.queue))
    if outdated:
        result.skipped.append((fire, SkipReason.RESCHEDULED))
        result.next_fire_at = _reopened(pos, flight, now)
        return result
    if spec.end_date is not None and fire > spec.end_date:
        result.skipped.append((fire, SkipReason.RESCHEDULED))  # past the new end_date
        return result
    later_taken = missed or (pos.latest_taken is not None and pos.latest_taken > fire) or (
        flight.last_fire is not None and flight.last_fire > fire)
    if not later_taken:
        result.next_fire_at = bounded(fire, pos, flight)  # unless max_runs is reached meanwhile
        return result
    policy = spec.effective_missed_run_policy()
    queued = sum(1 for run in pos.queue if run.trigger is Trigger.CATCHUP)
    left = runs_left(pos, flight)
    over = SkipReason.CATCHUP_CAP if policy is MissedRunPolicy.CATCHUP else SkipReason.MISSED
    reason = _missed_reason(pos, fire, now, over)
    room = policy is MissedRunPolicy.CATCHUP and queued < spec.max_catchup_runs
    waiting = [run for run in result.queue if run.trigger is Trigger.CATCHUP]
    single = (missed and policy is MissedRunPolicy.SINGLE_CATCHUP and reason is SkipReason.MISSED
              and all(run.scheduled_at < fire for run in waiting))
    if reason is SkipReason.CATCHUP_CAP and room and (left is None or left > 0):
        _queue_missed(result.queue, fire, in_order=in_order)
    elif single and (left is None or left > 0 or waiting):
        # single_catchup runs the most recent missed fire once: it replaces an older one.
        for old in waiting:
            result.queue.remove(old)
            result.skipped.append((old.scheduled_at, SkipReason.MISSED))
        _queue_missed(result.queue, fire, in_order=in_order)
    else:
        result.skipped.append((fire, reason))
        if result.next_fire_at is None and pos.latest_taken is not None and not is_fixed_delay(spec):
            # max_runs may have ended the schedule counting this run: it did not run.
            result.next_fire_at = bounded(next_fire(spec, anchor=pos.anchor, after=pos.latest_taken),
                                          pos, flight)
        elif delay_goes_on and result.next_fire_at is None and _delay_from_now(spec, result.queue, flight):
            result.next_fire_at = bounded(next_fire(spec, anchor=pos.anchor, after=now), pos, flight)
    return result


def _delay_from_now(spec: TaskSpec, queue: list[Run], flight: Flight) -> bool:
    """fixed_delay plans its next fire when a run of the schedule ends: with none in flight
    or queued to end, the delay counts from now."""
    return is_fixed_delay(spec) and not flight.scheduled and not any(
        run.trigger.scheduled for run in queue)


def _queue_missed(queue: list[Run], fire: datetime, *, in_order: bool) -> None:
    """Queue a missed fire as a catch-up: by its time, or at the head as histories from
    before reported-starts recorded it (``in_order`` False)."""
    run = Run(scheduled_at=fire, trigger=Trigger.CATCHUP)
    if in_order:
        _queue_in_order(queue, run)
    else:
        queue.insert(0, run)


def _queue_in_order(queue: list[Run], run: Run) -> None:
    """Queue a fire of the schedule among the others by its time (the schedule's runs start
    oldest first); before the runs someone asked for when none of the schedule's is older."""
    scheduled = [i for i, queued in enumerate(queue) if queued.trigger.scheduled]
    later = [i for i in scheduled if queue[i].scheduled_at > run.scheduled_at]
    older = [i for i in scheduled if queue[i].scheduled_at < run.scheduled_at]
    queue.insert(later[0] if later else older[-1] + 1 if older else 0, run)


def _reopened(pos: Position, flight: Flight, now: datetime) -> datetime | None:
    """The next fire once a run max_runs counted in advance did not run: a schedule that
    budget had ended goes on after the newest fire it took (from its first, if none)."""
    spec = pos.spec
    if pos.next_fire_at is not None or (is_fixed_delay(spec) and flight.scheduled):
        return pos.next_fire_at  # (a fixed_delay run in flight plans the next fire)
    if is_fixed_delay(spec):
        candidate = next_fire(spec, anchor=pos.anchor, after=now)
    elif pos.latest_taken is None:
        candidate = first_fire(spec, pos.anchor)
    else:
        candidate = next_fire(spec, anchor=pos.anchor, after=pos.latest_taken)
    return bounded(candidate, pos, flight)


@dataclass(frozen=True)
class Change:
    """What an update does to the schedule."""

    next_fire_at: datetime | None
    anchor: datetime
    retimed: bool  # the timing changed
    queue: list[Run] = field(default_factory=list)
    dropped: list[Run] = field(default_factory=list)  # waiting runs the change ends: rescheduled


BOUND_FIELDS = frozenset({"end_date", "max_runs"})


def due_at_cancel(pos: Position, cancelled_at: datetime) -> Due:
    """The fires due by the time the task was cancelled that no pass decided (its workflow's
    worker was away, or the cancel came with a late timer): SKIPPED ``cancelled``, as no run
    starts once cancelled; FIRES_PER_PASS at a time (``more``)."""
    result = Due(next_fire_at=pos.next_fire_at, queue=list(pos.queue))
    fire = pos.next_fire_at
    while fire is not None and pos.instant(fire) <= cancelled_at:
        if len(result.skipped) == FIRES_PER_PASS:
            result.more = True
            break
        result.skipped.append((fire, SkipReason.CANCELLED))
        result.taken = fire
        fire = None if is_fixed_delay(pos.spec) else next_fire(pos.spec, anchor=pos.anchor, after=fire)
    result.next_fire_at = fire
    return result


def why_no_run(spec: TaskSpec, executed: int = 0) -> tuple[str | None, str]:
    """Why a schedule has no fire left (its first or its next is None): the field at fault, or
    None, and what to tell whoever asked for it (naming the field first). A task that could never run is refused, not
    accepted to end at once."""
    if spec.max_runs is not None and executed >= spec.max_runs:
        return "max_runs", (f"max_runs: the task has run {executed} time(s) already; max_runs="
                            f"{spec.max_runs} leaves it no run")
    if spec.end_date is not None:
        return "end_date", (f"end_date: the schedule has no fire before end_date "
                            f"{spec.end_date.isoformat()}: the task would have nothing to run")
    if spec.schedule_type is ScheduleType.CRON and spec.dst_policy.gap == "skip":
        return "dst_policy.gap", (f"dst_policy.gap: every time cron {spec.cron!r} names falls in a "
                                  f"daylight saving gap of {spec.timezone}, and gap 'skip' skips "
                                  f"them: the task would never run (gap 'shift' runs them after it)")
    return None, "the schedule has no fire left: the task would have nothing to run"


def leaves_nothing(change: Change, flight: Flight) -> bool:
    """A schedule change leaves the task nothing to run: no fire, nothing queued or in flight
    (why_no_run says why); it is refused rather than applied to end the task at once."""
    return change.next_fire_at is None and not change.queue and not flight.total


def timing_judged(old: TaskSpec, new: TaskSpec) -> bool:
    """Whether a change is judged on its timing again (check_timing, check_start): it touches
    run_at, dates, start_date or end_date, or retimes the schedule, which starts it over from
    now. Any other change is not (a once task whose run goes on past its run_at can still be
    renamed)."""
    touched = any(getattr(old, name) != getattr(new, name)
                  for name in ("run_at", "dates", "start_date", "end_date"))
    return touched or retimes(old, new)


def schedule_changes(old: TaskSpec, new: TaskSpec) -> set[str]:
    """The schedule fields that changing ``old`` to ``new`` changes."""
    return {name for name in ScheduleFields.model_fields if getattr(new, name) != getattr(old, name)}


def retimes(old: TaskSpec, new: TaskSpec) -> bool:
    """Whether changing ``old`` to ``new`` starts the schedule over (change_schedule): a change
    of its timing, not only of its bounds."""
    return not schedule_changes(old, new) <= BOUND_FIELDS


def change_schedule(pos: Position, flight: Flight, new_spec: TaskSpec, now: datetime, *,
                    keep_held: bool = True) -> Change:
    """The schedule after an update. Changing only end_date or max_runs keeps the timing (a
    fixed-rate grid is not re-anchored; runs withdrawn for it give their fires back, see
    ``give_back``); any other schedule change starts over from now, and keeps of the queue
    the runs someone asked for and those a drain holds (``keep_held``; workflows before it
    dropped them)."""
    changed = schedule_changes(pos.spec, new_spec)
    moved = replace(pos, spec=new_spec)
    asked = [run for run in pos.queue if not run.trigger.scheduled]
    if not changed:
        return Change(pos.next_fire_at, pos.anchor, retimed=False, queue=list(pos.queue))
    if changed <= BOUND_FIELDS:
        # Waiting runs of the schedule past the new bounds no longer run.
        kept: list[Run] = []
        dropped: list[Run] = []
        room = None if new_spec.max_runs is None else max(
            0, new_spec.max_runs - pos.executed - flight.scheduled)
        for run in pos.queue:
            past_end = new_spec.end_date is not None and run.scheduled_at > new_spec.end_date
            if run.trigger.scheduled and (past_end or room is not None and room <= 0):
                dropped.append(run)
                continue
            if run.trigger.scheduled and room is not None:
                room -= 1
            kept.append(run)
        moved = replace(moved, queue=tuple(kept))
        upcoming = pos.next_fire_at
        if upcoming is None and not is_fixed_delay(new_spec):
            # The old bounds had ended the schedule; the new ones may let it go on after the
            # last fire taken.
            after = max(now, flight.last_fire) if flight.last_fire else now
            upcoming = next_fire(new_spec, anchor=pos.anchor, after=after)
        return Change(bounded(upcoming, moved, flight), pos.anchor, retimed=False,
                      queue=kept, dropped=dropped)
    if keep_held:
        # Runs held by a drain came due before the change and were decided to start: they go
        # on, as they would have had the workflow run not been draining.
        asked = [run for run in pos.queue if not run.trigger.scheduled or run.held]
    unqueued = Position(spec=new_spec, task_id=pos.task_id, anchor=now, next_fire_at=None,
                        executed=pos.executed, queue=tuple(asked))
    return Change(bounded(first_fire(new_spec, now), unqueued, flight), now, retimed=True,
                  queue=asked, dropped=[run for run in pos.queue if run not in asked])


def schedule_done(pos: Position, flight: Flight) -> bool:
    """Nothing is due, queued or in flight, and nothing will be: the task has ended (a fire
    withdrawn by a pause is back in ``next_fire_at``; fixed_delay plans after each run)."""
    return pos.next_fire_at is None and not pos.queue and not flight.total


def final_status(spec: TaskSpec, last_run: ExecutionStatus | None) -> tuple[TaskStatus, str | None]:
    """How a task whose schedule is done ends: a one-time task as its run did; a recurring
    one COMPLETED."""
    if spec.schedule_type is not ScheduleType.ONCE:
        return TaskStatus.COMPLETED, None
    if last_run is None:
        return TaskStatus.COMPLETED, "its only run was skipped (see its executions for the reason)"
    return {ExecutionStatus.COMPLETED: TaskStatus.COMPLETED,
            ExecutionStatus.CANCELLED: TaskStatus.CANCELLED}.get(last_run, TaskStatus.FAILED), None


def drifted(spec: TaskSpec, trigger: Trigger, lateness: timedelta) -> bool:
    """A scheduled run that started later than the task's drift threshold after its instant
    (``lateness`` counts from ``aimed_instant``: jitter is never drift)."""
    threshold = spec.drift_threshold_seconds
    return (threshold is not None and trigger is Trigger.SCHEDULE
            and lateness.total_seconds() > threshold)


def dead_letter_of(status: ExecutionStatus, trigger: Trigger = Trigger.SCHEDULE) -> DeadLetter | None:
    """A run that failed after its last retry is dead-lettered (listable, replayable); a
    breaker's probe never is (the breaker tries again; its failure is ``probe_failed``)."""
    return DeadLetter.OPEN if status is ExecutionStatus.FAILED and trigger is not Trigger.PROBE else None


def retryable_http_status(status: int) -> bool:
    """5xx, 408 and 429 are retried; any other 4xx is the request's fault and is not."""
    return status >= 500 or status in RETRYABLE_4XX


def breaker_trips(spec: TaskSpec, consecutive_failures: int) -> str | None:
    """The reason to auto-pause a task after a failed run, or None."""
    limit = spec.max_consecutive_failures
    if limit is None or consecutive_failures < limit:
        return None
    return (f"auto-paused after {consecutive_failures} consecutive failed runs "
            f"(max_consecutive_failures={limit})")


class Probe(BaseModel):
    """A self-healing breaker's next try: when the probe runs, after which cool-down."""

    at: datetime
    cool_down_seconds: float


def first_probe(spec: TaskSpec, paused_at: datetime) -> Probe | None:
    """The probe of a task the breaker has just auto-paused: ``auto_resume_after_seconds``
    after the pause; None when only a user resumes it."""
    cool_down = spec.auto_resume_after_seconds
    if cool_down is None:
        return None
    return Probe(at=paused_at + timedelta(seconds=cool_down), cool_down_seconds=cool_down)


def after_probe(probe: Probe, outcome: ExecutionStatus | None, now: datetime) -> Probe | None:
    """What a probe's end means: None resumes the task (it succeeded); a failure pauses it
    again with the cool-down doubled, up to MAX_COOL_DOWN_SECONDS; a probe that did not run or
    was cancelled (``outcome`` None or CANCELLED) proves nothing and is tried again after the
    same cool-down."""
    if outcome is ExecutionStatus.COMPLETED:
        return None
    cool_down = probe.cool_down_seconds
    if outcome is ExecutionStatus.FAILED:
        cool_down = min(2 * cool_down, MAX_COOL_DOWN_SECONDS)
    return Probe(at=now + timedelta(seconds=cool_down), cool_down_seconds=cool_down)


def probe_due(probe: Probe | None, *, probing: bool, now: datetime) -> bool:
    """The auto-paused task's probe is to start now: its cool-down is over and it is not
    running already."""
    return probe is not None and not probing and now >= probe.at


def resume_held(missed: ResumeMissed, now: datetime) -> datetime | None:
    """The ``resumed_at`` a resume leaves: with ``skip`` the fires inside the pause are
    SKIPPED paused (up to ``now``); with ``policy`` none is, so the missed-run policy decides
    them as after an outage (the newest due may still run on time)."""
    if missed is ResumeMissed.POLICY:
        return None
    return now


def on_resume(pos: Position, missed: ResumeMissed, now: datetime) -> Position:
    """Where the schedule stands once a paused task is resumed at ``now``: no longer paused,
    the fires inside the pause held as ``missed`` says (``resume_held``); a one-time task's
    fire is left to its missed-run policy. ``decide_due`` then decides them."""
    if pos.spec.schedule_type is ScheduleType.ONCE:
        return replace(pos, paused=False)
    return replace(pos, paused=False, resumed_at=resume_held(missed, now))


def overdue_after(spec: dict[str, object], default_seconds: float) -> timedelta:
    """How long a run may not have started past its instant before it is overdue: the task's
    own ``overdue_after_seconds`` (from its stored spec), else the service's default."""
    own = spec.get("overdue_after_seconds")
    return timedelta(seconds=float(own) if isinstance(own, int | float) else default_seconds)
