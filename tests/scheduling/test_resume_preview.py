"""What a resume would do with the fires of a pause, for each choice, from the workflow's rules."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from scheduling.policy import Flight, Position, on_resume
from scheduling.resume import MAX_RESUME_DECIDED, decide_resume
from scheduling.spec import MissedRunPolicy, TaskSpec
from scheduling.status import ResumeMissed, SkipReason, Trigger

T0 = datetime(2026, 3, 8, 4, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def make_spec(**fields: object) -> TaskSpec:
    return TaskSpec.model_validate(
        {"task_name": "p", "job_details": {"type": "handler", "name": "noop"},
         "schedule_type": "interval", **fields})


def paused(spec: TaskSpec, fires_before_pause: int = 0) -> Position:
    """A task created at T0, paused 30 s after it, its next fire the first of the pause."""
    first = T0 + MINUTE * (fires_before_pause + 1)
    return Position(spec=spec, task_id="task-1", anchor=T0, next_fire_at=first, paused=True,
                    paused_at=T0 + timedelta(seconds=30) + MINUTE * fires_before_pause)


def outcomes(spec: TaskSpec, missed: ResumeMissed, now: datetime) -> list[tuple[int, str]]:
    """(minute of the fire, how it runs or why it is skipped), oldest first."""
    choice = decide_resume(paused(spec), Flight(), missed, now)
    return [(int((f.scheduled_at - T0) / MINUTE), f.trigger or "" if f.runs else f.skipped or "")
            for f in choice.fires]


def test_skip_records_every_fire_of_the_pause_skipped_paused() -> None:
    spec = make_spec(interval_seconds=60, missed_run_policy="catchup")
    choice = decide_resume(paused(spec), Flight(), ResumeMissed.SKIP, T0 + 10 * MINUTE + timedelta(seconds=5))
    assert [f.scheduled_at for f in choice.fires] == [T0 + MINUTE * m for m in range(1, 11)]
    assert {f.skipped for f in choice.fires} == {SkipReason.PAUSED}
    assert (choice.runs, choice.skipped, choice.more) == (0, 10, 0)


def test_policy_catchup_runs_the_newest_on_time_and_catches_up_to_the_cap() -> None:
    spec = make_spec(interval_seconds=60, missed_run_policy="catchup", max_catchup_runs=3)
    got = outcomes(spec, ResumeMissed.POLICY, T0 + 10 * MINUTE + timedelta(seconds=5))
    assert got == [(m, SkipReason.CATCHUP_CAP) for m in range(1, 7)] + [
        (7, Trigger.CATCHUP), (8, Trigger.CATCHUP), (9, Trigger.CATCHUP), (10, Trigger.SCHEDULE)]


def test_policy_skip_runs_only_a_fire_still_on_time() -> None:
    spec = make_spec(interval_seconds=60, missed_run_policy="skip")
    on_time = outcomes(spec, ResumeMissed.POLICY, T0 + 10 * MINUTE + timedelta(seconds=5))
    assert on_time == [(m, SkipReason.MISSED) for m in range(1, 10)] + [(10, Trigger.SCHEDULE)]
    ended = spec.model_copy(update={"end_date": T0 + 10 * MINUTE})  # no fire after minute 10
    late = outcomes(ended, ResumeMissed.POLICY, T0 + 10 * MINUTE + timedelta(seconds=61))
    assert late == [(m, SkipReason.MISSED) for m in range(1, 11)]


def test_policy_single_catchup_late_runs_the_newest_once() -> None:
    spec = make_spec(interval_seconds=60, missed_run_policy=MissedRunPolicy.SINGLE_CATCHUP,
                     end_date=(T0 + 10 * MINUTE).isoformat())
    got = outcomes(spec, ResumeMissed.POLICY, T0 + 10 * MINUTE + timedelta(seconds=61))
    assert got == [(m, SkipReason.MISSED) for m in range(1, 10)] + [(10, Trigger.CATCHUP)]


def test_policy_skips_fires_older_than_the_catchup_window() -> None:
    spec = make_spec(interval_seconds=60, missed_run_policy="catchup", catchup_window_seconds=150)
    got = outcomes(spec, ResumeMissed.POLICY, T0 + 5 * MINUTE + timedelta(seconds=5))
    assert got == [(1, SkipReason.OUTSIDE_WINDOW), (2, SkipReason.OUTSIDE_WINDOW),
                   (3, Trigger.CATCHUP), (4, Trigger.CATCHUP), (5, Trigger.SCHEDULE)]


def test_a_long_pause_lists_the_newest_and_counts_the_rest() -> None:
    spec = make_spec(interval_seconds=10, missed_run_policy="catchup", max_catchup_runs=5)
    position = Position(spec=spec, task_id="task-1", anchor=T0, next_fire_at=T0 + timedelta(seconds=10),
                        paused=True, paused_at=T0 + timedelta(seconds=5))
    now = T0 + timedelta(hours=10, seconds=2)  # 3,600 fires, many passes of the policy
    choice = decide_resume(position, Flight(), ResumeMissed.POLICY, now, limit=1000)
    assert (choice.runs, choice.skipped, choice.more, len(choice.fires)) == (6, 3594, 2600, 1000)
    assert choice.fires[-1].scheduled_at == T0 + timedelta(hours=10)
    assert [f.trigger for f in choice.fires if f.runs] == [Trigger.CATCHUP] * 5 + [Trigger.SCHEDULE]
    skip = decide_resume(position, Flight(), ResumeMissed.SKIP, now, limit=1000)
    assert (skip.runs, skip.skipped, skip.more) == (0, 3600, 2600)


def test_nothing_due_in_the_pause_decides_nothing() -> None:
    spec = make_spec(interval_seconds=60)
    choice = decide_resume(paused(spec), Flight(), ResumeMissed.POLICY, T0 + timedelta(seconds=45))
    assert (choice.runs, choice.skipped, choice.fires) == (0, 0, [])


def test_on_resume_leaves_a_one_time_tasks_fire_to_its_policy() -> None:
    once = make_spec(run_at=(T0 + MINUTE).isoformat(), schedule_type="once")
    position = Position(spec=once, task_id="task-1", anchor=T0, next_fire_at=T0 + MINUTE,
                        paused=True, paused_at=T0)
    for missed in ResumeMissed:
        assert on_resume(position, missed, T0 + 2 * MINUTE).resumed_at is None
    recurring = make_spec(interval_seconds=60)
    held = on_resume(paused(recurring), ResumeMissed.SKIP, T0 + 2 * MINUTE)
    assert (held.paused, held.resumed_at) == (False, T0 + 2 * MINUTE)
    assert on_resume(paused(recurring), ResumeMissed.POLICY, T0 + 2 * MINUTE).resumed_at is None


def test_a_pause_too_long_to_decide_in_full_says_so() -> None:
    spec = make_spec(interval_seconds=1, missed_run_policy="catchup")
    position = Position(spec=spec, task_id="task-1", anchor=T0, next_fire_at=T0 + timedelta(seconds=1),
                        paused=True, paused_at=T0)
    choice = decide_resume(position, Flight(), ResumeMissed.POLICY, T0 + timedelta(hours=30))
    assert not choice.complete and choice.runs == 0
    assert choice.skipped == MAX_RESUME_DECIDED and choice.more == MAX_RESUME_DECIDED - 1000
    assert decide_resume(position, Flight(), ResumeMissed.POLICY, T0 + timedelta(hours=1)).complete
