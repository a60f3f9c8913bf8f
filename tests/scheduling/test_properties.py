"""Property-based tests of the schedule parser and validators with arbitrary input."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from scheduling.cron import CronError, next_cron_fire, parse_cron
from scheduling.fire import next_fire
from scheduling.spec import DstPolicy, TaskSpec, TimingError, check_durations

DEFAULT_DST = DstPolicy()

ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe"]
moments = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2090, 1, 1),
                       timezones=st.just(UTC))


@given(st.text(max_size=60))
def test_parse_cron_accepts_or_refuses_cleanly(expression: str) -> None:
    try:
        fields = parse_cron(expression)
    except CronError as exc:
        assert str(exc)
    else:
        assert fields in (5, 6)


@given(cron=st.text(max_size=40), zone=st.text(max_size=40), name=st.text(max_size=250),
       interval=st.floats(allow_nan=True, allow_infinity=True))
def test_spec_validation_never_raises_anything_but_validation_errors(cron: str, zone: str, name: str, interval: float) -> None:
    for body in (
        {"task_name": name, "job_details": {"type": "handler", "name": "noop"},
         "schedule_type": "cron", "cron": cron, "timezone": zone},
        {"task_name": name, "job_details": {"type": "http", "url": cron},
         "schedule_type": "interval", "interval_seconds": interval},
    ):
        try:
            TaskSpec.model_validate(body)
        except ValidationError as exc:
            assert exc.errors()


minute = st.one_of(st.just("*"), st.integers(0, 59).map(str), st.integers(1, 30).map(lambda n: f"*/{n}"))
hour = st.one_of(st.just("*"), st.integers(0, 23).map(str), st.integers(1, 12).map(lambda n: f"*/{n}"))
day = st.one_of(st.just("*"), st.integers(1, 28).map(str))
weekday = st.one_of(st.just("*"), st.integers(0, 6).map(str), st.just("1-5"))


@settings(max_examples=300)
@given(m=minute, h=hour, d=day, w=weekday, zone=st.sampled_from(ZONES), after=moments)
def test_next_cron_fire_is_later_and_on_the_schedule(m: str, h: str, d: str, w: str, zone: str, after: datetime) -> None:
    expression = f"{m} {h} {d} * {w}"
    fire = next_cron_fire(expression, ZoneInfo(zone), after, DEFAULT_DST)
    assert fire > after and fire.tzinfo is not None
    tz = ZoneInfo(zone)
    wall = fire.astimezone(tz).replace(tzinfo=None)
    if not croniter.match(expression, wall):
        # Only allowed as the first valid instant after a scheduled wall time that DST skipped.
        skipped = [wall - timedelta(minutes=k) for k in range(1, 61)]
        assert any(croniter.match(expression, t) and _nonexistent(t, tz) for t in skipped), (expression, zone, fire)


def _nonexistent(wall: datetime, tz: ZoneInfo) -> bool:
    return wall.replace(tzinfo=tz).astimezone(UTC).astimezone(tz).replace(tzinfo=None) != wall


@settings(max_examples=300)
@given(interval=st.integers(1, 86400 * 7), origin=moments, offset=st.integers(0, 10**8))
def test_fixed_rate_fires_stay_on_the_grid(interval: int, origin: datetime, offset: int) -> None:
    spec = TaskSpec.model_validate({"task_name": "p", "job_details": {"type": "handler", "name": "noop"},
                                    "schedule_type": "interval", "interval_seconds": interval})
    after = origin + timedelta(seconds=offset)
    fire = next_fire(spec, anchor=origin, after=after)
    assert fire is not None and after < fire <= after + timedelta(seconds=interval)
    assert (fire - origin).total_seconds() % interval == 0


def test_a_spec_stored_before_the_rules_for_new_tasks_still_loads() -> None:
    # New tasks may not use croniter's R, nor durations under a microsecond; a stored spec
    # from before is read as it is (its workflow and the reconciler load it), not refused.
    stored = {"task_name": "old", "job_details": {"type": "handler", "name": "noop"},
              "schedule_type": "cron", "cron": "R 3 * * *", "timezone": "UTC",
              "retry_policy": {"initial_interval_seconds": 4e-7, "maximum_interval_seconds": 1e-6}}
    spec = TaskSpec.model_validate(stored)
    assert spec.cron == "R 3 * * *" and spec.retry_policy.initial_interval_seconds == 4e-7


def test_a_duration_temporal_reads_as_0_is_refused_only_as_a_new_value() -> None:
    base = {"task_name": "d", "job_details": {"type": "handler", "name": "noop"},
            "schedule_type": "interval", "interval_seconds": 60}
    tiny = TaskSpec.model_validate({**base, "retry_policy": {"initial_interval_seconds": 4e-7,
                                                              "maximum_interval_seconds": 1e-6}})
    with pytest.raises(TimingError, match="retry_policy.initial_interval_seconds must be greater than or equal to"):
        check_durations(tiny)
    check_durations(tiny, before=tiny)  # a change of something else keeps what the task has
    check_durations(TaskSpec.model_validate({**base, "auto_resume_after_seconds": 1e-6}))
    with pytest.raises(TimingError, match="auto_resume_after_seconds"):
        check_durations(TaskSpec.model_validate({**base, "auto_resume_after_seconds": 1e-300}),
                        before=TaskSpec.model_validate(base))
