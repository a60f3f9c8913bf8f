"""What to do with the fire times that have come due: run, queue, or record as skipped.

Pure and deterministic: the workflow calls it with ``workflow.now()``; tests call it directly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

from scheduling.fire import next_fire
from scheduling.spec import IntervalMode, MissedRunPolicy, OverlapPolicy, ScheduleType
from workflows.state import TaskState, Trigger

# A fire found more than this long after its time was missed (the worker or the server was
# down, or the task was paused); younger ones are merely late and run as usual.
MISSED_AFTER = timedelta(seconds=60)
# At most this many due fires are looked at in one pass (a per-second cron after a day down).
MAX_DUE_PER_PASS = 1000

Action = Literal["run", "queue", "buffer", "cancel_running", "skip"]


@dataclass(frozen=True)
class Decision:
    action: Action
    scheduled_at: datetime
    trigger: Trigger = Trigger.SCHEDULE
    reason: str | None = None


@dataclass
class Plan:
    next_fire_at: datetime | None
    decisions: list[Decision] = field(default_factory=list)


def plan_due_fires(
    state: TaskState,
    now: datetime,
    *,
    running: bool,
    offset: Callable[[datetime], timedelta] | None = None,
) -> Plan:
    """Decide every fire due at ``now`` by the missed-run and overlap policies.

    ``offset`` gives each fire's jitter: a fire is due when its time plus its offset is."""
    shift = offset or (lambda _: timedelta(0))
    spec = state.spec
    fixed_delay = (
        spec.schedule_type is ScheduleType.INTERVAL
        and spec.interval_mode is IntervalMode.FIXED_DELAY
    )
    due: list[datetime] = []
    upcoming = state.next_fire_at
    while upcoming is not None and upcoming + shift(upcoming) <= now and len(due) < MAX_DUE_PER_PASS:
        due.append(upcoming)
        # fixed_delay plans its next fire when this run completes
        upcoming = None if fixed_delay else next_fire(spec, anchor=state.anchor, after=upcoming)
    plan = Plan(next_fire_at=upcoming)
    if not due:
        return plan

    budget = None if spec.max_runs is None else spec.max_runs - _consumed(state)
    busy = running or bool(state.queue)
    # buffer_one and cancel_running keep one scheduled fire waiting; a newer fire replaces it
    # (the replaced one is recorded as skipped), so a replacement does not use up a run.
    waiting = any(q.trigger is Trigger.SCHEDULE for q in state.queue)

    def take(decision: Decision) -> None:
        nonlocal budget, busy, waiting
        replacing = decision.action in ("buffer", "cancel_running") and waiting
        if budget is not None and decision.action != "skip" and not replacing:
            if budget <= 0:
                return
            budget -= 1
        if decision.action in ("buffer", "cancel_running"):
            waiting = True
        busy = busy or decision.action != "skip"
        plan.decisions.append(decision)

    if state.resumed_at is not None:
        # Fires that fell inside a pause are recorded, not caught up.
        for scheduled in [f for f in due if f <= state.resumed_at]:
            take(Decision("skip", scheduled, reason="paused"))
        due = [f for f in due if f > state.resumed_at]
    # Only the newest due fire can be on time; older ones were overtaken while nothing ran.
    on_time = [f for f in due[-1:] if now - (f + shift(f)) <= MISSED_AFTER]
    missed = due[: len(due) - len(on_time)]
    window = spec.catchup_window_seconds
    if window is not None:
        for scheduled in [f for f in missed if now - f > timedelta(seconds=window)]:
            take(Decision("skip", scheduled, reason="outside_window"))
        missed = [f for f in missed if now - f <= timedelta(seconds=window)]
    for scheduled, reason in _decide_missed(state, missed, bool(on_time)):
        if reason is None:
            take(Decision("queue", scheduled, Trigger.CATCHUP))
        else:
            take(Decision("skip", scheduled, reason=reason))
    for scheduled in on_time:
        if not busy:
            take(Decision("run", scheduled))
            continue
        policy = spec.overlap_policy
        if policy is OverlapPolicy.SKIP:
            take(Decision("skip", scheduled, reason="overlap"))
        elif policy is OverlapPolicy.BUFFER_ONE:
            take(Decision("buffer", scheduled))
        elif policy is OverlapPolicy.ALLOW:
            take(Decision("run", scheduled))
        else:
            take(Decision("cancel_running", scheduled))
    if fixed_delay and all(d.action == "skip" for d in plan.decisions):
        # No scheduled run will complete to plan the next fire: the delay counts from now.
        plan.next_fire_at = next_fire(spec, anchor=state.anchor, after=now)
    if budget is not None and budget <= 0:
        plan.next_fire_at = None
    return plan


def _decide_missed(
    state: TaskState, missed: list[datetime], have_on_time: bool
) -> list[tuple[datetime, str | None]]:
    """Each missed fire with None (run it) or the reason it is skipped."""
    if not missed:
        return []
    decided: list[tuple[datetime, str | None]] = []
    policy = state.spec.effective_missed_run_policy()
    if policy is MissedRunPolicy.CATCHUP:
        cap = state.spec.max_catchup_runs
        keep = missed[-cap:] if cap else []
        decided += [(f, "missed") for f in missed[: len(missed) - len(keep)]]
        decided += [(f, None) for f in keep]
    elif policy is MissedRunPolicy.SINGLE_CATCHUP and not have_on_time:
        decided += [(f, "missed") for f in missed[:-1]] + [(missed[-1], None)]
    else:
        decided += [(f, "missed") for f in missed]
    return decided


def _consumed(state: TaskState) -> int:
    """Scheduled runs started or waiting, counted against max_runs."""
    asked = (Trigger.MANUAL, Trigger.REPLAY)
    return state.run_count + sum(1 for q in state.queue if q.trigger not in asked)
