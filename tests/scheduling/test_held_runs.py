"""Runs held by a continue-as-new drain (scheduling/policy.py): they start at once in the next
workflow run, oldest first, count as going, and are decided again only once late."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from scheduling.policy import (
    Flight,
    Position,
    Run,
    decide_due,
    next_from_queue,
    stale_in_queue,
)
from scheduling.spec import ON_TIME_GRACE, TaskSpec

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
SECOND = timedelta(seconds=1)


def allow_every_second() -> TaskSpec:
    return TaskSpec.model_validate({
        "task_name": "p", "job_details": {"type": "handler", "name": "noop"},
        "schedule_type": "interval", "interval_seconds": 1, "overlap_policy": "allow"})


def held(*seconds: int) -> tuple[Run, ...]:
    return tuple(Run(scheduled_at=T0 + k * SECOND, held=True) for k in seconds)


def test_held_runs_start_at_once_oldest_first_beside_the_runs_going() -> None:
    queue = [*held(1, 2), Run(scheduled_at=T0 - 5 * SECOND, trigger="catchup")]
    going = Flight(total=2, started=2, user_started=2)
    first = next_from_queue(queue, going, paused=False)
    assert first == queue[0]
    assert next_from_queue(queue[1:], going, paused=False) == queue[1]
    assert next_from_queue(queue[2:], going, paused=False) is None  # a catch-up waits its turn


def test_a_fire_due_as_the_next_workflow_run_starts_is_not_queued_behind_held_runs() -> None:
    spec = allow_every_second()
    pos = Position(spec=spec, task_id="t", anchor=T0, next_fire_at=T0 + 3 * SECOND, queue=held(1, 2))
    due = decide_due(pos, Flight(), T0 + 3 * SECOND)
    assert [r.scheduled_at for r in due.start] == [T0 + 3 * SECOND]  # allow: beside them
    assert due.queue == list(held(1, 2)) and not due.skipped


def test_a_held_run_is_decided_again_only_once_past_the_grace() -> None:
    pos = Position(spec=allow_every_second(), task_id="t", anchor=T0, next_fire_at=None,
                   queue=held(1, 2))
    assert stale_in_queue(pos, T0 + 30 * SECOND) == []
    assert stale_in_queue(pos, T0 + SECOND + ON_TIME_GRACE + SECOND) == list(held(1))
