"""The self-healing breaker's rules and what a resume does with the pause's fires
(scheduling/policy.py: first_probe, after_probe, probe_due, resume_held)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from scheduling.policy import (
    Due,
    Flight,
    Position,
    Probe,
    after_probe,
    dead_letter_of,
    decide_due,
    first_probe,
    probe_due,
    resume_held,
)
from scheduling.spec import MAX_COOL_DOWN_SECONDS, TaskSpec
from scheduling.status import (
    DeadLetter,
    ExecutionStatus,
    ResumeMissed,
    SkipReason,
    Trigger,
    execution_id,
)

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def spec(**fields: object) -> TaskSpec:
    fields.setdefault("task_name", "t")
    fields.setdefault("job_details", {"type": "handler", "name": "noop"})
    fields.setdefault("schedule_type", "interval")
    fields.setdefault("interval_seconds", 60)
    return TaskSpec.model_validate(fields)


def test_no_probe_without_auto_resume() -> None:
    assert first_probe(spec(), T0) is None


def test_first_probe_comes_after_the_cool_down() -> None:
    probe = first_probe(spec(auto_resume_after_seconds=300), T0)
    assert probe == Probe(at=T0 + timedelta(seconds=300), cool_down_seconds=300)


@pytest.mark.parametrize("value", [0, -1, -0.5, MAX_COOL_DOWN_SECONDS + 1, "60", True])
def test_auto_resume_after_must_be_a_positive_number_up_to_a_day(value: object) -> None:
    with pytest.raises(ValidationError, match="auto_resume_after_seconds"):
        spec(auto_resume_after_seconds=value)


def test_a_passing_probe_resumes() -> None:
    probe = Probe(at=T0, cool_down_seconds=60)
    assert after_probe(probe, ExecutionStatus.COMPLETED, T0 + timedelta(seconds=5)) is None


def test_a_failing_probe_doubles_the_cool_down_from_its_end() -> None:
    probe = Probe(at=T0, cool_down_seconds=60)
    ended = T0 + timedelta(seconds=5)
    assert after_probe(probe, ExecutionStatus.FAILED, ended) == Probe(
        at=ended + timedelta(seconds=120), cool_down_seconds=120)


@pytest.mark.parametrize("outcome", [None, ExecutionStatus.CANCELLED])
def test_a_probe_that_did_not_run_or_was_cancelled_is_no_failure(
        outcome: ExecutionStatus | None) -> None:
    probe = Probe(at=T0, cool_down_seconds=60)
    assert after_probe(probe, outcome, T0) == Probe(at=T0 + timedelta(seconds=60),
                                                    cool_down_seconds=60)


@given(start=st.floats(min_value=0.001, max_value=MAX_COOL_DOWN_SECONDS),
       failures=st.integers(min_value=1, max_value=40))
def test_failing_probes_double_the_cool_down_up_to_a_day(start: float, failures: int) -> None:
    probe = Probe(at=T0, cool_down_seconds=start)
    for _ in range(failures):
        before = probe.cool_down_seconds
        after = after_probe(probe, ExecutionStatus.FAILED, probe.at)
        assert after is not None
        assert after.cool_down_seconds == min(2 * before, MAX_COOL_DOWN_SECONDS)
        assert after.at == probe.at + timedelta(seconds=after.cool_down_seconds)
        probe = after
    assert probe.cool_down_seconds <= MAX_COOL_DOWN_SECONDS


def test_probe_due_once_the_cool_down_is_over_and_none_is_going() -> None:
    probe = Probe(at=T0, cool_down_seconds=60)
    assert not probe_due(probe, probing=False, now=T0 - timedelta(milliseconds=1))
    assert probe_due(probe, probing=False, now=T0)
    assert not probe_due(probe, probing=True, now=T0 + timedelta(hours=1))
    assert not probe_due(None, probing=False, now=T0)


def test_a_failed_probe_is_no_dead_letter() -> None:
    assert dead_letter_of(ExecutionStatus.FAILED, Trigger.PROBE) is None
    assert dead_letter_of(ExecutionStatus.FAILED, Trigger.MANUAL) is DeadLetter.OPEN


def test_probe_runs_have_ids_of_their_own() -> None:
    assert execution_id("abc", T0, Trigger.PROBE) == "abc:probe-2026-12-01T09:00:00.000Z"
    assert not Trigger.PROBE.scheduled  # never counted against max_runs


def _pass_after_resume(policy: str, missed: ResumeMissed, now: datetime, every: int = 60) -> Due:
    """A task paused at 09:00:30 and resumed at ``now``: the pass that follows."""
    pos = Position(spec=spec(missed_run_policy=policy, interval_seconds=every), task_id="abc",
                   anchor=T0, next_fire_at=T0 + timedelta(seconds=every),
                   paused_at=T0 + timedelta(seconds=30), resumed_at=resume_held(missed, now))
    return decide_due(pos, Flight(), now)


def _runs(due: Due) -> list[tuple[datetime, Trigger]]:
    return [(run.scheduled_at, run.trigger) for run in due.start + due.queue]


def test_resume_skip_records_the_pause_fires_skipped_paused() -> None:
    due = _pass_after_resume("catchup", ResumeMissed.SKIP, T0 + timedelta(minutes=10, seconds=30))
    assert _runs(due) == []
    assert due.skipped == [(T0 + timedelta(minutes=m), SkipReason.PAUSED) for m in range(1, 11)]


@pytest.mark.parametrize(("policy", "caught_up", "skipped"), [
    ("catchup", 9, 0), ("single_catchup", 0, 9), ("skip", 0, 9)])
def test_resume_policy_lets_the_missed_run_policy_decide(policy: str, caught_up: int, skipped: int) -> None:
    due = _pass_after_resume(policy, ResumeMissed.POLICY, T0 + timedelta(minutes=10, seconds=30))
    # The newest fire (09:10, 30 s ago) is on time; the nine before it were missed.
    minutes = range(10 - caught_up, 10)
    assert sorted(_runs(due)) == [(T0 + timedelta(minutes=m), Trigger.CATCHUP) for m in minutes] + [
        (T0 + timedelta(minutes=10), Trigger.SCHEDULE)]
    assert [reason for _, reason in due.skipped] == [SkipReason.MISSED] * skipped


def test_resume_policy_single_catchup_runs_the_newest_once_when_none_is_on_time() -> None:
    # Every five minutes, resumed at 09:22: 09:20, the newest, is past the on-time grace.
    due = _pass_after_resume("single_catchup", ResumeMissed.POLICY, T0 + timedelta(minutes=22),
                             every=300)
    assert _runs(due) == [(T0 + timedelta(minutes=20), Trigger.CATCHUP)]
    assert due.skipped == [(T0 + timedelta(minutes=m), SkipReason.MISSED) for m in (5, 10, 15)]
