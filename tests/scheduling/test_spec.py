"""Task spec validation: every refusal names the field and says what is wrong."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from scheduling.spec import (
    MissedRunPolicy,
    ScheduleType,
    TaskChanges,
    TaskSpec,
    TimingError,
    check_timing,
)

NOW = datetime(2026, 6, 1, 10, 0, tzinfo=UTC)
JOB = {"type": "handler", "name": "noop"}
CRON = {"task_name": "t", "job_details": JOB, "schedule_type": "cron", "cron": "0 10 * * *"}


def refusal(**fields: Any) -> str:
    """The validation message for a spec built from CRON with ``fields`` changed."""
    body = {**CRON, **fields}
    with pytest.raises(ValidationError) as caught:
        TaskSpec.model_validate({k: v for k, v in body.items() if v is not None})
    error = caught.value.errors()[0]
    return f"{'.'.join(str(p) for p in error['loc'])}: {error['msg']}"


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"cron": "61 * * * *"}, "cron: Value error, invalid cron expression '61 * * * *'"),
        (
            {"cron": "* * *"},
            "cron: Value error, cron must have 5 fields (or 6 with seconds first), got 3",
        ),
        (
            {"timezone": "Mars/Olympus"},
            "timezone: Value error, unknown IANA time zone 'Mars/Olympus'",
        ),
        (
            {"start_date": "2026-07-01T00:00:00"},
            "start_date: Value error, start_date needs a time zone offset",
        ),
        (
            {"start_date": "2026-07-02T00:00:00Z", "end_date": "2026-07-01T00:00:00Z"},
            ": Value error, end_date must be after start_date",
        ),
        (
            {"schedule_type": "cron", "cron": None},
            ": Value error, cron is required when schedule_type is 'cron'",
        ),
        (
            {"schedule_type": "once", "cron": None},
            ": Value error, run_at is required when schedule_type is 'once'",
        ),
        (
            {"schedule_type": "interval", "cron": None},
            ": Value error, interval_seconds is required when schedule_type is 'interval'",
        ),
        (
            {"run_at": "2026-07-01T00:00:00Z"},
            ": Value error, run_at does not apply to schedule_type 'cron'",
        ),
        (
            {"schedule_type": "interval", "cron": None, "interval_seconds": -5},
            "interval_seconds: Input should be greater than 0",
        ),
        ({"task_name": "x" * 201}, "task_name: String should have at most 200 characters"),
        ({"task_name": ""}, "task_name: String should have at least 1 character"),
        ({"max_runs": 0}, "max_runs: Input should be greater than or equal to 1"),
        ({"colour": "blue"}, "colour: Extra inputs are not permitted"),
        (
            {"job_details": {"type": "http", "url": "ftp://example.com/x"}},
            "job_details.http.url: Value error, must be an absolute http:// or https:// URL",
        ),
        (
            {"job_details": {"type": "carrier-pigeon"}},
            "job_details: Input tag 'carrier-pigeon' found using 'type'",
        ),
        (
            {"overlap_policy": "sometimes"},
            "overlap_policy: Input should be 'skip', 'buffer_one', 'allow' or 'cancel_running'",
        ),
    ],
)
def test_invalid_specs_are_refused_naming_the_field(fields: dict[str, Any], expected: str) -> None:
    assert refusal(**fields).startswith(expected)


def test_reserved_http_headers_cannot_be_set() -> None:
    job = {"type": "http", "url": "https://example.com/x", "headers": {"Idempotency-Key": "mine"}}
    assert "Idempotency-Key" in refusal(job_details=job)


def test_missed_run_policy_defaults_from_priority() -> None:
    base = TaskSpec.model_validate(CRON)
    assert base.effective_missed_run_policy() is MissedRunPolicy.SINGLE_CATCHUP
    assert (
        base.model_copy(update={"priority": "high"}).effective_missed_run_policy()
        is MissedRunPolicy.CATCHUP
    )
    assert (
        base.model_copy(update={"priority": "low"}).effective_missed_run_policy()
        is MissedRunPolicy.SKIP
    )
    explicit = TaskSpec.model_validate({**CRON, "priority": "low", "missed_run_policy": "catchup"})
    assert explicit.effective_missed_run_policy() is MissedRunPolicy.CATCHUP


def test_check_timing_refuses_the_past() -> None:
    once = TaskSpec.model_validate(
        {**CRON, "schedule_type": "once", "cron": None, "run_at": NOW - timedelta(minutes=2)}
    )
    with pytest.raises(ValueError, match="run_at is more than a minute in the past"):
        check_timing(once, NOW)
    check_timing(
        once.model_copy(update={"run_at": NOW - timedelta(seconds=30)}), NOW
    )  # clock skew is fine
    ended = TaskSpec.model_validate({**CRON, "end_date": NOW - timedelta(seconds=1)})
    with pytest.raises(ValueError, match="end_date is in the past"):
        check_timing(ended, NOW)


def test_changes_are_validated_against_the_whole_spec() -> None:
    base = TaskSpec.model_validate(CRON)
    assert TaskChanges(cron="30 12 * * *").apply_to(base).cron == "30 12 * * *"
    with pytest.raises(ValidationError, match="invalid cron expression"):
        TaskChanges(cron="nope nope nope nope nope").apply_to(base)
    with pytest.raises(ValidationError, match="interval_seconds is required"):
        TaskChanges(schedule_type=ScheduleType.INTERVAL).apply_to(base)


def test_changing_the_schedule_type_drops_the_old_schedule_fields() -> None:
    base = TaskSpec.model_validate({**CRON, "max_runs": 3})
    changed = TaskChanges(schedule_type=ScheduleType.INTERVAL, interval_seconds=60).apply_to(base)
    assert changed.cron is None and changed.max_runs is None and changed.interval_seconds == 60


def test_a_past_run_at_is_accepted_when_the_task_asks_for_catch_up() -> None:
    past = {**CRON, "schedule_type": "once", "cron": None, "run_at": NOW - timedelta(hours=2)}
    for policy in ("single_catchup", "catchup"):
        check_timing(TaskSpec.model_validate({**past, "missed_run_policy": policy}), NOW)
    # the default from priority is not a request to catch up
    for fields in ({"priority": "high"}, {"missed_run_policy": "skip"}):
        with pytest.raises(ValueError, match="or set missed_run_policy to single_catchup"):
            check_timing(TaskSpec.model_validate({**past, **fields}), NOW)


def test_a_past_run_at_older_than_its_catchup_window_is_refused_as_never_running() -> None:
    past = {**CRON, "schedule_type": "once", "cron": None, "run_at": NOW - timedelta(hours=2),
            "missed_run_policy": "catchup"}
    with pytest.raises(TimingError, match="run_at is older than catchup_window_seconds=60") as raised:
        check_timing(TaskSpec.model_validate({**past, "catchup_window_seconds": 60}), NOW)
    assert raised.value.field == "run_at"
    check_timing(TaskSpec.model_validate({**past, "catchup_window_seconds": 3 * 3600}), NOW)
    # On time (within the minute) it runs whatever its window: not refused.
    check_timing(TaskSpec.model_validate({**past, "run_at": NOW - timedelta(seconds=40),
                                          "catchup_window_seconds": 10}), NOW)
    # Jitter may delay its instant into the minute: it may run on time. Not a week's delay.
    jittered = {**past, "jitter_seconds": 300, "catchup_window_seconds": 60}
    check_timing(TaskSpec.model_validate({**jittered, "run_at": NOW - timedelta(minutes=3)}), NOW)
    with pytest.raises(TimingError, match="run_at is older"):
        check_timing(TaskSpec.model_validate({**jittered, "run_at": NOW - timedelta(days=7)}), NOW)
    dates = {**CRON, "schedule_type": "dates", "cron": None, "missed_run_policy": "single_catchup",
             "catchup_window_seconds": 600}
    with pytest.raises(TimingError, match="dates is older") as raised:
        check_timing(TaskSpec.model_validate(
            {**dates, "dates": [NOW - timedelta(hours=3), NOW - timedelta(hours=2)]}), NOW)
    assert raised.value.field == "dates"
    # One date left to run (in the window, or to come): accepted, the others are skipped.
    for last in (NOW - timedelta(minutes=5), NOW + timedelta(hours=1)):
        check_timing(TaskSpec.model_validate({**dates, "dates": [NOW - timedelta(hours=2), last]}), NOW)


def test_a_change_is_judged_on_what_it_sets_not_on_a_stored_cron_or_zone() -> None:
    stored = TaskSpec.model_validate({"task_name": "old", "job_details": {"type": "handler", "name": "noop"},
                                      "schedule_type": "cron", "cron": "R 3 * * *", "timezone": "Factory"})
    later_end = stored.model_copy(update={"end_date": NOW + timedelta(days=30)})
    check_timing(later_end, NOW, stored)  # the end moved; its cron and zone are the task's own
    with pytest.raises(TimingError, match="cron"):
        check_timing(later_end, NOW)  # as a new task: refused
    with pytest.raises(TimingError, match="cron"):
        check_timing(later_end.model_copy(update={"cron": "H 4 * * *"}), NOW, stored)
    with pytest.raises(TimingError, match="timezone"):
        check_timing(stored.model_copy(update={"cron": "0 3 * * *", "timezone": "localtime"}), NOW, stored)
