"""The pure decision of what to do with due fires: missed-run x overlap policies, max_runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tests.workflows.helpers import spec
from workflows.plan import plan_due_fires
from workflows.state import QueuedRun, TaskState, Trigger

T0 = datetime(2026, 6, 1, 10, 0, tzinfo=UTC)
HALF_HOUR = timedelta(minutes=30)


def state(next_fire_at: datetime | None = T0 + HALF_HOUR, **fields: Any) -> TaskState:
    spec_fields = {k: fields.pop(k) for k in list(fields) if k not in TaskState.model_fields}
    spec_fields.setdefault("schedule_type", "interval")
    spec_fields.setdefault("interval_seconds", 1800)
    return TaskState(
        task_id="t",
        tenant_id="t1",
        spec=spec(**spec_fields),
        created_at=T0,
        anchor=T0,
        next_fire_at=next_fire_at,
        **fields,
    )


def decided(plan: Any) -> list[tuple[str, timedelta, str | None]]:
    return [(d.action, d.scheduled_at - T0, d.reason) for d in plan.decisions]


def test_catchup_is_capped_at_max_catchup_runs_keeping_the_newest() -> None:
    plan = plan_due_fires(
        state(missed_run_policy="catchup", max_catchup_runs=2),
        T0 + 130 * timedelta(minutes=1),
        running=False,
    )
    assert decided(plan) == [
        ("skip", HALF_HOUR, "missed"),
        ("skip", 2 * HALF_HOUR, "missed"),
        ("queue", 3 * HALF_HOUR, None),
        ("queue", 4 * HALF_HOUR, None),
    ]
    assert plan.next_fire_at == T0 + 5 * HALF_HOUR


def test_single_catchup_skips_every_missed_fire_when_one_is_on_time() -> None:
    plan = plan_due_fires(
        state(missed_run_policy="single_catchup"), T0 + 4 * HALF_HOUR, running=False
    )
    assert decided(plan) == [
        ("skip", HALF_HOUR, "missed"),
        ("skip", 2 * HALF_HOUR, "missed"),
        ("skip", 3 * HALF_HOUR, "missed"),
        ("run", 4 * HALF_HOUR, None),
    ]


def test_an_on_time_fire_after_catch_ups_obeys_the_overlap_policy() -> None:
    now = T0 + 4 * HALF_HOUR + timedelta(seconds=5)
    for policy, action in [
        ("skip", "skip"),
        ("buffer_one", "buffer"),
        ("allow", "run"),
        ("cancel_running", "cancel_running"),
    ]:
        plan = plan_due_fires(
            state(missed_run_policy="catchup", overlap_policy=policy), now, running=False
        )
        assert [d.action for d in plan.decisions] == ["queue"] * 3 + [action]
        assert [d.trigger for d in plan.decisions][:3] == [Trigger.CATCHUP] * 3


def test_a_buffered_fire_replacing_another_does_not_use_up_max_runs() -> None:
    waiting = [QueuedRun(scheduled_at=T0 + HALF_HOUR)]
    current = state(
        next_fire_at=T0 + 2 * HALF_HOUR,
        overlap_policy="buffer_one",
        max_runs=3,
        run_count=1,
        queue=waiting,
    )
    plan = plan_due_fires(current, T0 + 2 * HALF_HOUR, running=True)
    assert decided(plan) == [("buffer", 2 * HALF_HOUR, None)]
    # one run done, one waiting (the replaced one no longer counts): one more fire to come
    assert plan.next_fire_at == T0 + 3 * HALF_HOUR


def test_max_runs_ends_the_schedule_once_every_run_is_planned() -> None:
    plan = plan_due_fires(state(max_runs=2, run_count=1), T0 + HALF_HOUR, running=False)
    assert decided(plan) == [("run", HALF_HOUR, None)]
    assert plan.next_fire_at is None


def test_fires_inside_a_pause_are_skipped_and_later_ones_are_not() -> None:
    resumed = T0 + 3 * HALF_HOUR + timedelta(minutes=1)
    plan = plan_due_fires(state(resumed_at=resumed), resumed, running=False)
    assert decided(plan) == [
        ("skip", HALF_HOUR, "paused"),
        ("skip", 2 * HALF_HOUR, "paused"),
        ("skip", 3 * HALF_HOUR, "paused"),
    ]
    assert plan.next_fire_at == T0 + 4 * HALF_HOUR


def test_a_skipped_fixed_delay_fire_plans_the_next_one_from_now() -> None:
    now = T0 + 5 * HALF_HOUR
    plan = plan_due_fires(
        state(interval_mode="fixed_delay", missed_run_policy="skip"), now, running=False
    )
    assert decided(plan) == [("skip", HALF_HOUR, "missed")]
    assert plan.next_fire_at == now + HALF_HOUR
    ran = plan_due_fires(
        state(interval_mode="fixed_delay", missed_run_policy="catchup"), now, running=False
    )
    assert decided(ran) == [("queue", HALF_HOUR, None)]
    assert ran.next_fire_at is None  # planned when that run completes


def test_catchup_window_skips_missed_fires_older_than_the_window() -> None:
    # Down from 10:30 to 12:10: fires at 10:30, 11:00, 11:30 and 12:00 came due.
    plan = plan_due_fires(
        state(missed_run_policy="catchup", catchup_window_seconds=3600),
        T0 + timedelta(hours=2, minutes=10),
        running=False,
    )
    assert decided(plan) == [
        ("skip", HALF_HOUR, "outside_window"),
        ("skip", 2 * HALF_HOUR, "outside_window"),
        ("queue", 3 * HALF_HOUR, None),
        ("queue", 4 * HALF_HOUR, None),
    ]


def test_jittered_fire_is_due_only_at_its_jittered_instant() -> None:
    offset = timedelta(seconds=42)
    early = plan_due_fires(state(), T0 + HALF_HOUR + timedelta(seconds=41), running=False,
                           offset=lambda _: offset)
    assert early.decisions == [] and early.next_fire_at == T0 + HALF_HOUR
    due = plan_due_fires(state(), T0 + HALF_HOUR + offset, running=False, offset=lambda _: offset)
    assert decided(due) == [("run", HALF_HOUR, None)]
