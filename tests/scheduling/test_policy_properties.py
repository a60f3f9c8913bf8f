"""Property tests of the policy engine (scheduling/policy.py).

A small model of one task calls the pure functions the way workflows/task.py does, through
random sequences of time passing (and outages: long jumps with no pass and no worker),
runs ending, pauses and resumes, triggers, bound changes, runs dispatched ahead and runs
refused as late. Whatever the sequence, every fire of the schedule is accounted for once.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from activities.heartbeats import MIN_BEAT_SECONDS
from scheduling import policy
from scheduling.fire import first_fire, next_fire
from scheduling.policy import (
    Flight,
    Position,
    Run,
    bounded,
    change_schedule,
    decide_due,
    instant_of,
    late_limit,
    may_dispatch_ahead,
    may_withdraw,
    next_from_queue,
    runs_left,
    schedule_done,
    take_back,
)
from scheduling.spec import MissedRunPolicy, OverlapPolicy, TaskSpec
from scheduling.status import SkipReason, Trigger

# Just before America/New_York springs forward (2026-03-08 07:00 UTC).
T0 = datetime(2026, 3, 8, 4, 0, tzinfo=UTC)
TASK = "task-1"
DISPATCH_SLACK = timedelta(seconds=1)  # as in workflows/task.py
BEAT = timedelta(seconds=MIN_BEAT_SECONDS)  # the model's runs go the usual lead ahead, no herd
# give_back rewinds the schedule to the fire it gives back even when later fires were taken
# since (decided, queued or in flight): they are decided twice (see the xfail tests below).
# Until it is fixed, the model's worker starts a late run instead when refusing it would hit it.
KNOWN_GIVE_BACK_BUG = False
# A max_runs lowered below the runs already queued does not drop the queued ones: they run
# past it (see the xfail test below). Until it is fixed, the model never lowers it that far.
KNOWN_QUEUED_PAST_MAX_RUNS_BUG = False
# allow and cancel_running start an on-time run before the catch-ups queued in the same pass
# (decide_due._decide_on_time): under them only the runs of each trigger keep their order.
IN_ORDER = (OverlapPolicy.SKIP, OverlapPolicy.BUFFER_ONE)
# (expression, zone, its usual gap in seconds: the unit of the random time steps)
CRONS = [("* * * * *", "UTC", 60), ("*/10 * * * * *", "UTC", 10),
         ("*/5 * * * *", "UTC", 300), ("30 * * * *", "America/New_York", 3600)]


def make_spec(**fields: object) -> TaskSpec:
    return TaskSpec.model_validate(
        {"task_name": "p", "job_details": {"type": "handler", "name": "noop"}, **fields})


@dataclass
class Flying:
    run: Run
    instant: datetime
    going: bool = False  # the job has started (on the worker)
    withdrawn: str | None = None
    cancelled: bool = False


@dataclass
class Model:
    """One task: its position, its runs in flight, and the outcome of every fire so far."""

    spec: TaskSpec
    lead: timedelta
    now: datetime = T0
    paused: bool = False
    paused_at: datetime | None = None
    resumed_at: datetime | None = None
    executed: int = 0
    queue: list[Run] = field(default_factory=list)
    flying: list[Flying] = field(default_factory=list)
    ended: list[tuple[Flying, str | None]] = field(default_factory=list)
    outcomes: dict[datetime, str] = field(default_factory=dict)  # fire -> "ran" or a reason
    starts: list[Run] = field(default_factory=list)  # scheduled runs, as their jobs started
    not_owed: set[datetime] = field(default_factory=set)  # fires while max_runs had ended it
    latest_taken: datetime | None = None
    done: bool = False

    def __post_init__(self) -> None:
        self.anchor = self.now
        self.next_fire_at = first_fire(self.spec, self.now)

    # -- what the workflow reads -------------------------------------------------------
    def position(self) -> Position:
        return Position(spec=self.spec, task_id=TASK, anchor=self.anchor,
                        next_fire_at=self.next_fire_at, executed=self.executed,
                        paused=self.paused, paused_at=self.paused_at,
                        resumed_at=self.resumed_at, queue=tuple(self.queue),
                        latest_taken=self.latest_taken)

    def flight(self) -> Flight:  # as workflows/inflight.py RunsInFlight.flight
        live = [f for f in self.flying if f.withdrawn is None]
        started = [f for f in live if f.instant <= self.now]
        scheduled = [f.run.scheduled_at for f in live if f.run.trigger.scheduled]
        every = [f.run.scheduled_at for f in self.flying if f.run.trigger.scheduled]
        return Flight(total=len(self.flying), scheduled=len(scheduled), started=len(started),
                      user_started=sum(1 for f in started if f.run.trigger is not Trigger.CATCHUP),
                      last_fire=max(every, default=None))

    def instant(self, fire: datetime) -> datetime:
        return instant_of(self.spec, TASK, fire, self.spec.jitter_seconds)

    def wake_at(self) -> datetime | None:
        """When the sleeping workflow or a waiting job does something next."""
        times = [f.instant for f in self.flying if not f.going]
        if not self.paused and self.next_fire_at is not None:
            ahead = may_dispatch_ahead(self.flight(), self.queue, paused=False, draining=False)
            times.append(self.instant(self.next_fire_at) - (self.lead if ahead else timedelta(0)))
        return min(times, default=None)

    # -- the workflow's pass (TaskWorkflow._pass) ----------------------------------------
    def pass_(self) -> None:
        for _ in range(1000):
            if self.done:
                return
            self.absorb()
            more = self.decide()  # while paused, the fires due before the pause
            self.start_queued()
            self.dispatch_ahead()
            self.done = schedule_done(self.position(), self.flight())
            if not more:
                return
        raise AssertionError("passes never end")

    def decide(self) -> bool:
        due = decide_due(self.position(), self.flight(), self.now)
        self.next_fire_at, self.queue = due.next_fire_at, due.queue
        self.latest_taken = max(filter(None, [self.latest_taken, due.taken]), default=None)
        catchups = sum(1 for r in self.queue if r.trigger is Trigger.CATCHUP)
        assert catchups <= self.spec.max_catchup_runs, f"{catchups} catch-ups queued"
        for fire, reason in due.skipped:
            assert reason is not SkipReason.PAUSED or self.paused_at is None or (
                self.instant(fire) >= self.paused_at), "a fire due before the pause skipped as paused"
            self.record(fire, reason.value)
        assert not (self.paused and due.start), "a run started in a pause"
        if due.cancel_running:
            for f in self.flying:
                f.cancelled = f.cancelled or f.instant <= self.now
        for run in due.start:
            self.start(run, self.now)
        return due.more

    def start_queued(self) -> None:
        while (run := next_from_queue(self.queue, self.flight(), paused=self.paused)) is not None:
            self.queue.remove(run)
            self.start(run, self.now)

    def dispatch_ahead(self) -> None:
        fire = self.next_fire_at
        if self.paused or fire is None or not self.lead:
            return
        instant = self.instant(fire)
        if instant - self.now > self.lead + DISPATCH_SLACK or not may_dispatch_ahead(
                self.flight(), self.queue, paused=False, draining=False):
            return
        assert instant > self.now, "a due fire was left undecided"
        self.latest_taken = max(filter(None, [self.latest_taken, fire]))
        self.next_fire_at = next_fire(self.spec, anchor=self.anchor, after=fire)
        self.start(Run(scheduled_at=fire), instant)
        self.next_fire_at = bounded(self.next_fire_at, self.position(), self.flight())

    def start(self, run: Run, instant: datetime) -> None:
        self.flying.append(Flying(run, instant))

    def absorb(self) -> None:
        for f, outcome in self.ended:
            fire = f.run.scheduled_at
            if outcome is None:  # did not run: withdrawn (paused, rebound) or refused as late
                assert f.withdrawn in (None, "paused", "rebound")
                back = take_back(self.position(), self.flight(), fire, self.now)
                self.next_fire_at, self.queue = back.next_fire_at, back.queue
                for skipped, reason in back.skipped:
                    self.record(skipped, reason.value)
            elif f.run.trigger.scheduled:  # a manual run does not count
                self.executed += 1
                self.record(fire, "ran")
        self.ended = []
        if self.spec.max_runs is not None:
            assert self.executed <= self.spec.max_runs, "more runs than max_runs"

    def record(self, fire: datetime, outcome: str) -> None:
        assert fire not in self.outcomes, f"{fire} decided twice: {self.outcomes[fire]}, {outcome}"
        self.outcomes[fire] = outcome

    # -- the worker ----------------------------------------------------------------------
    def act(self) -> None:
        """Each waiting job starts at its instant, unless withdrawn, cancelled or too late."""
        for f in list(self.flying):
            limit = late_limit(f.run.trigger)
            if f.cancelled:
                self.end(f, "cancelled")
            elif f.withdrawn is not None:
                self.end(f, None)
            elif not f.going and f.instant <= self.now:
                if limit is not None and self.now - f.instant > limit and not (
                        KNOWN_GIVE_BACK_BUG and self.taken_after(f.run.scheduled_at)):
                    self.end(f, None)
                else:
                    f.going = True
                    if f.run.trigger.scheduled:
                        self.starts.append(f.run)

    def taken_after(self, fire: datetime) -> bool:
        return any(taken > fire for taken in [*self.outcomes, *self.pending()])

    def end(self, f: Flying, outcome: str | None) -> None:
        self.flying.remove(f)
        self.ended.append((f, outcome))

    # -- the steps ----------------------------------------------------------------------
    def advance(self, delta: timedelta) -> None:
        """Time passes with the worker up: jobs start as they come, the workflow wakes at
        every timer."""
        target = self.now + delta
        self.act()
        while not self.done and (wake := self.wake_at()) is not None and wake <= target:
            self.now = max(self.now, wake)
            self.act()
            self.pass_()
            self.act()
        self.now = target
        self.act()
        self.pass_()
        self.act()

    def wake(self) -> None:
        """Time passes until the workflow's next timer or a job's instant."""
        wake = self.wake_at()
        if wake is not None:
            self.advance(max(wake - self.now, timedelta(0)))

    def outage(self, delta: timedelta, workflow_first: bool) -> None:
        """Nothing runs for ``delta``; then the workflow and the jobs' worker come back, one
        before the other. Withdrawals reached their runs before it (policy.may_withdraw)."""
        for f in [f for f in self.flying if f.withdrawn]:
            self.end(f, None)
        self.now += delta
        if not workflow_first:
            self.act()
        self.pass_()

    def finish(self, index: int, status: str) -> None:
        going = [f for f in self.flying if f.going]
        if going:
            self.end(going[index % len(going)], status)
            self.pass_()

    def pause(self) -> None:  # TaskWorkflow._pause
        if not self.paused:
            self.paused, self.paused_at = True, self.now
            self.withdraw("paused")
            self.pass_()

    def resume(self) -> None:  # TaskWorkflow._resume
        if self.paused:
            self.paused, self.resumed_at = False, self.now
            self.pass_()

    def trigger(self) -> None:  # TaskWorkflow._trigger
        self.queue.append(Run(scheduled_at=self.now, trigger=Trigger.MANUAL))
        self.pass_()

    def rebound(self, extra: int) -> None:
        """An update of max_runs alone (TaskWorkflow.update_task), never below the runs that
        have run or are going (or too close to their instant to be withdrawn)."""
        going = sum(1 for f in self.flying if f.run.trigger.scheduled and f.withdrawn is None
                    and (f.going or not may_withdraw(f.instant, self.now, BEAT)))
        if KNOWN_QUEUED_PAST_MAX_RUNS_BUG:
            going = len(self.pending())
        new_spec = self.spec.model_copy(update={"max_runs": self.executed + going + extra or 1})
        if new_spec == self.spec:
            return
        self.withdraw("rebound")
        change = change_schedule(self.position(), self.flight(), new_spec, self.now)
        assert not change.retimed
        if self.next_fire_at is None and change.next_fire_at is not None:
            # The schedule had ended; it goes on from the change (its fires meanwhile are not owed).
            last = max([*self.outcomes, *self.pending()], default=T0)
            self.not_owed |= {g for g in grid(new_spec, self.anchor, change.next_fire_at) if g > last}
        self.spec, self.next_fire_at, self.anchor = new_spec, change.next_fire_at, change.anchor
        self.queue = change.queue
        for run in change.dropped:
            self.record(run.scheduled_at, "rescheduled")
        self.pass_()

    def withdraw(self, reason: str) -> None:
        for f in self.flying:
            if f.withdrawn is None and may_withdraw(f.instant, self.now, BEAT):
                f.withdrawn = reason

    # -- the checks ----------------------------------------------------------------------
    def pending(self) -> list[datetime]:
        """Fires taken from the schedule and not decided yet: in flight or queued."""
        return [r.scheduled_at for r in [*(f.run for f in self.flying), *self.queue]
                if r.trigger.scheduled]

    def check_accounts(self) -> None:
        # A withdrawn run's fire goes back to the schedule once the run has ended.
        back = [f.run.scheduled_at for f in self.flying if f.withdrawn]
        upcoming = min([*back, *filter(None, [self.next_fire_at])], default=None)
        taken = [*self.outcomes, *(fire for fire in self.pending() if fire not in back)]
        assert len(set(taken)) == len(taken), "a fire is both decided and pending, or pending twice"
        until = upcoming or max(taken, default=T0) + timedelta(microseconds=1)
        expected = set(grid(self.spec, self.anchor, until)) - self.not_owed
        assert set(taken) - self.not_owed == expected, "fires lost or invented"
        if self.next_fire_at is not None:
            held = self.paused and self.paused_at is not None and (
                self.instant(self.next_fire_at) >= self.paused_at)  # waits for the resume
            assert held or self.instant(self.next_fire_at) > self.now, "a due fire was left undecided"
        left = runs_left(self.position(), self.flight())
        if upcoming is None:
            # Only max_runs ends these schedules, and manual runs do not count against it.
            assert left == 0, f"the schedule ended with {left} runs left"
        lanes = ([None] if self.spec.overlap_policy in IN_ORDER
                 else [Trigger.SCHEDULE, Trigger.CATCHUP])
        for lane in lanes:
            fires = [r.scheduled_at for r in self.starts if lane in (None, r.trigger)]
            assert fires == sorted(fires), "scheduled jobs started out of order"


def grid(spec: TaskSpec, anchor: datetime, until: datetime, limit: int = 10**6) -> list[datetime]:
    """The fires of the schedule before ``until`` (ignoring max_runs), at most ``limit``."""
    unbounded = spec.model_copy(update={"max_runs": None})
    fires: list[datetime] = []
    fire = first_fire(unbounded, anchor)
    while fire is not None and fire < until and len(fires) < limit:
        fires.append(fire)
        fire = next_fire(unbounded, anchor=anchor, after=fire)
    return fires


@st.composite
def tasks(draw: st.DrawFn) -> tuple[TaskSpec, float, timedelta]:
    """A spec, its usual gap between fires in seconds, and the dispatch lead."""
    if draw(st.booleans()):
        period = draw(st.sampled_from([1, 7, 45, 60, 90, 600, 3600]))
        schedule: dict[str, object] = {"schedule_type": "interval", "interval_seconds": period}
    else:
        cron, zone, period = draw(st.sampled_from(CRONS))
        schedule = {"schedule_type": "cron", "cron": cron, "timezone": zone}
    spec = make_spec(
        **schedule,
        missed_run_policy=draw(st.sampled_from(list(MissedRunPolicy))),
        overlap_policy=draw(st.sampled_from(list(OverlapPolicy))),
        max_runs=draw(st.none() | st.integers(1, 12)),
        max_catchup_runs=draw(st.sampled_from([1, 2, 3, 100])),
        catchup_window_seconds=draw(st.none() | st.sampled_from([2.5, 10.0]).map(lambda k: k * period)),
        jitter_seconds=min(3600.0, draw(st.sampled_from([0.0, 0.3, 3.0])) * period),
    )
    return spec, period, timedelta(seconds=draw(st.sampled_from([0, 2, 10, 30])))


steps = st.lists(st.one_of(
    st.tuples(st.just("advance"), st.floats(0, 2.5)),  # in usual gaps
    st.tuples(st.just("advance"), st.floats(0, 0.3)),
    st.tuples(st.just("wake")), st.tuples(st.just("wake")),
    st.tuples(st.just("outage"), st.floats(3, 60), st.booleans()),
    st.tuples(st.just("finish"), st.integers(0, 3), st.sampled_from(["completed", "failed"])),
    st.tuples(st.just("finish"), st.integers(0, 3), st.sampled_from(["completed", "failed"])),
    st.tuples(st.just("pause")), st.tuples(st.just("resume")), st.tuples(st.just("trigger")),
    st.tuples(st.just("rebound"), st.integers(0, 4)),
), max_size=40)


@settings(max_examples=1000, deadline=None)
@given(task=tasks(), actions=steps)
def test_every_fire_is_decided_once_and_in_order(
    task: tuple[TaskSpec, float, timedelta], actions: list[tuple[object, ...]]
) -> None:
    spec, period, lead = task
    model = Model(spec, lead)
    for name, *args in actions:
        if model.done:
            break
        if name in ("advance", "outage"):
            args[0] = timedelta(seconds=round(float(args[0]) * period, 3))  # type: ignore[arg-type]
        getattr(model, str(name))(*args)
        model.check_accounts()


@settings(max_examples=200, deadline=None)
@given(task=tasks(), start=st.integers(0, 10**9))
def test_instants_keep_the_order_of_their_fires(task: tuple[TaskSpec, float, timedelta], start: int) -> None:
    spec = task[0].model_copy(update={"jitter_seconds": min(3600.0, 5 * task[1])})
    fires = grid(spec, T0 + timedelta(milliseconds=start), T0 + timedelta(days=1000), limit=40)
    instants = [instant_of(spec, TASK, f, spec.jitter_seconds) for f in fires]
    assert all(a < b for a, b in zip(instants, instants[1:], strict=False))


# -- named scenarios -----------------------------------------------------------------------
def missed(count: int, **fields: object) -> tuple[Position, datetime]:
    """A 5-minute interval task that was down over ``count`` fires, now 200 s past the last."""
    spec = make_spec(schedule_type="interval", interval_seconds=300, **fields)
    pos = Position(spec=spec, task_id=TASK, anchor=T0, next_fire_at=T0 + timedelta(seconds=300))
    return pos, T0 + timedelta(seconds=300 * count + 200)


def decide_in_passes(pos: Position, now: datetime) -> tuple[list[tuple[datetime, SkipReason]], list[Run]]:
    """Every due fire decided pass after pass, as the workflow does while nothing starts."""
    skipped: list[tuple[datetime, SkipReason]] = []
    while True:
        due = decide_due(pos, Flight(), now)
        skipped += due.skipped
        pos = replace(pos, next_fire_at=due.next_fire_at, queue=tuple(due.queue))
        if not due.more:
            return skipped, due.queue


def test_more_than_a_thousand_missed_fires_under_single_catchup_run_one_catchup() -> None:
    model = Model(make_spec(schedule_type="interval", interval_seconds=300,
                            missed_run_policy="single_catchup"), timedelta(0))
    model.outage(timedelta(seconds=300 * 1500 + 200), workflow_first=True)
    model.advance(timedelta(0))
    assert list(model.outcomes.values()) == ["missed"] * 1499
    [catchup] = model.flying
    assert catchup.run.trigger is Trigger.CATCHUP and catchup.going
    assert catchup.run.scheduled_at == T0 + timedelta(seconds=300 * 1500)
    model.check_accounts()


def test_catchup_with_a_cap_of_100_queues_exactly_100_of_300_missed() -> None:
    pos, now = missed(300, missed_run_policy="catchup", max_catchup_runs=100)
    skipped, queue = decide_in_passes(pos, now)
    assert [r.trigger for r in queue] == [Trigger.CATCHUP] * 100
    assert [r.scheduled_at for r in queue] == [T0 + timedelta(seconds=300 * k) for k in range(201, 301)]
    assert [reason for _, reason in skipped] == [SkipReason.CATCHUP_CAP] * 200


@pytest.mark.parametrize("fields", [
    {"missed_run_policy": "skip"},
    {"missed_run_policy": "single_catchup"},
    {"missed_run_policy": "catchup", "max_catchup_runs": 100},
    {"missed_run_policy": "catchup", "max_catchup_runs": 400},
    {"missed_run_policy": "catchup", "catchup_window_seconds": 300 * 700},
])
@pytest.mark.parametrize("count", [249, 250, 251, 1000])
def test_fires_decided_in_several_passes_as_in_one(
    monkeypatch: pytest.MonkeyPatch, fields: dict[str, object], count: int
) -> None:
    pos, now = missed(count, **fields)
    in_passes = decide_in_passes(pos, now)
    monkeypatch.setattr(policy, "FIRES_PER_PASS", 10**6)
    assert decide_in_passes(pos, now) == in_passes


# -- scenarios found by the model ------------------------------------------------------------
MINUTE = timedelta(minutes=1)


def test_a_run_refused_late_after_later_fires_were_decided_does_not_decide_them_again() -> None:
    spec = make_spec(schedule_type="interval", interval_seconds=60, missed_run_policy="skip")
    pos = Position(spec=spec, task_id=TASK, anchor=T0, next_fire_at=T0 + MINUTE)
    first = decide_due(pos, Flight(), T0 + MINUTE)
    assert [run.scheduled_at for run in first.start] == [T0 + MINUTE]
    # Its job waits for a worker (a backlog); at +4 min the workflow decides +2, +3 and +4.
    waiting = Flight(total=1, scheduled=1, started=1, user_started=1, last_fire=T0 + MINUTE)
    pos = replace(pos, next_fire_at=first.next_fire_at)
    later = decide_due(pos, waiting, T0 + 4 * MINUTE)
    decided = {fire for fire, _ in later.skipped}
    assert decided == {T0 + k * MINUTE for k in (2, 3, 4)}
    # Then the run reaches a worker, 3 minutes late: refused.
    pos = replace(pos, next_fire_at=later.next_fire_at, latest_taken=later.taken)
    back = take_back(pos, Flight(), T0 + MINUTE, T0 + 4 * MINUTE)
    assert back.skipped == [(T0 + MINUTE, SkipReason.MISSED)]  # decided alone, as missed
    pos = replace(pos, next_fire_at=back.next_fire_at, queue=tuple(back.queue))
    again = decide_due(pos, Flight(), T0 + 4 * MINUTE)
    redecided = {fire for fire, _ in again.skipped} | {r.scheduled_at for r in again.start + again.queue}
    assert not decided & redecided


def test_a_fixed_delay_fire_missed_unrun_plans_the_next_fire_from_then() -> None:
    # fixed_delay plans its next fire when a run of the schedule ends. A run that ended unrun
    # (untaken, or refused as late) and was SKIPPED missed must plan it too, or the task ends.
    spec = make_spec(schedule_type="interval", interval_seconds=60, interval_mode="fixed_delay",
                     missed_run_policy="skip")
    pos = Position(spec=spec, task_id=TASK, anchor=T0, next_fire_at=None, latest_taken=T0 + MINUTE)
    now = T0 + MINUTE + timedelta(seconds=10)
    back = take_back(pos, Flight(), T0 + MINUTE, now, missed=True)
    assert back.skipped == [(T0 + MINUTE, SkipReason.MISSED)]
    assert back.next_fire_at == now + MINUTE
    # A run of the schedule still in flight or queued plans it when it ends.
    going = Flight(total=1, scheduled=1, last_fire=T0)
    assert take_back(pos, going, T0 + MINUTE, now, missed=True).next_fire_at is None
    # Workflows of the releases before ended there (their histories replay so).
    assert take_back(pos, Flight(), T0 + MINUTE, now, missed=True, delay_goes_on=False).next_fire_at is None


def test_lowering_max_runs_holds_the_runs_queued_past_it() -> None:
    spec = make_spec(schedule_type="interval", interval_seconds=60, missed_run_policy="catchup")
    pos = Position(spec=spec, task_id=TASK, anchor=T0, next_fire_at=T0 + MINUTE)
    due = decide_due(pos, Flight(), T0 + 7 * MINUTE)  # back from an outage: 6 catch-ups + 1
    assert len(due.queue) == 7
    first, *queue = due.queue
    going = Flight(total=1, scheduled=1, started=1, last_fire=first.scheduled_at)
    pos = replace(pos, next_fire_at=due.next_fire_at, queue=tuple(queue))
    lowered = spec.model_copy(update={"max_runs": 2})  # while the first catch-up runs
    change = change_schedule(pos, going, lowered, T0 + 7 * MINUTE)
    assert change.next_fire_at is None and not change.retimed
    assert len(change.dropped) == 5  # recorded as rescheduled: past the new max_runs
    queue = change.queue
    started = 1
    while (run := next_from_queue(queue, Flight(), paused=False)) is not None:
        queue.remove(run)
        started += 1
    assert started <= 2


def test_a_long_pause_gives_the_same_reasons_in_several_passes_as_in_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Paused over 950 fires, older ones also outside the catch-up window: one pass says
    # "paused" for all, several passes "outside_window" for the older ones.
    pos, now = missed(1000, missed_run_policy="catchup", catchup_window_seconds=300 * 100)
    pos = replace(pos, resumed_at=T0 + timedelta(seconds=300 * 950))
    in_passes = decide_in_passes(pos, now)
    monkeypatch.setattr(policy, "FIRES_PER_PASS", 10**6)
    assert decide_in_passes(pos, now) == in_passes



def test_under_catchup_the_on_time_fire_queues_behind_the_catch_up_runs() -> None:
    # Back from an outage with catch-up runs queued and one going: the on-time fire is not an
    # overlap of the user's run, it waits its turn behind the runs the scheduler queued.
    spec = make_spec(schedule_type="interval", interval_seconds=60, missed_run_policy="catchup")
    pos = Position(spec=spec, task_id=TASK, anchor=T0, next_fire_at=T0 + MINUTE)
    back = decide_due(pos, Flight(), T0 + 5 * MINUTE)
    assert [r.trigger for r in back.queue] == [Trigger.CATCHUP] * 4 + [Trigger.SCHEDULE]
    first, *rest = back.queue
    going = Flight(total=1, scheduled=1, started=1, user_started=0, last_fire=first.scheduled_at)
    pos = replace(pos, next_fire_at=back.next_fire_at, queue=tuple(rest))
    later = decide_due(pos, going, T0 + 6 * MINUTE)
    assert later.skipped == [] and later.queue[-1] == Run(scheduled_at=T0 + 6 * MINUTE)


def test_under_catchup_a_fire_queued_behind_catch_ups_never_starts_after_a_newer_fire() -> None:
    # Found by the model: back from an outage at 04:03, the on-time 04:03 queues behind the
    # catch-up 04:02, and 04:04 behind both. Once 04:03 runs, 04:05 starts beside it (allow)
    # while 04:04 still waited in the queue as an on-time fire: it started after 04:05.
    spec = make_spec(schedule_type="cron", cron="* * * * *", missed_run_policy="catchup",
                     max_catchup_runs=1, overlap_policy="allow")
    model = Model(spec, timedelta(0))
    model.outage(3 * MINUTE, workflow_first=False)
    for step in ["wake", "wake", "finish", "wake", "wake", "finish", "finish", "wake"]:
        if step == "finish":
            model.finish(0, "completed")
        else:
            model.wake()
        model.check_accounts()
    # 04:03 and 04:04 were missed once a newer fire was decided: they ran as catch-ups.
    assert [(r.scheduled_at - T0, r.trigger) for r in model.starts] == [
        (k * MINUTE, Trigger.CATCHUP) for k in (2, 3, 4)]
