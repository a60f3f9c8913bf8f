"""The preview's pure parts: the schedule in words, the fire list and its hook for skipped fires."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from scheduling.preview import describe, upcoming, upcoming_of_new
from scheduling.spec import TaskSpec

NOW = datetime(2026, 12, 5, 12, tzinfo=UTC)


def spec(**fields: Any) -> TaskSpec:
    return TaskSpec.model_validate({"task_name": "t", "job_details": {"type": "handler", "name": "noop"},
                                    **fields})


@pytest.mark.parametrize(("fields", "words"), [
    ({"schedule_type": "cron", "cron": "0 10 * * *", "timezone": "Europe/Berlin"},
     "At 10:00, every day, in Europe/Berlin"),
    ({"schedule_type": "cron", "cron": "*/15 * * * * *"},
     "Every 15 seconds, every minute, every hour, every day, in UTC"),
    ({"schedule_type": "cron", "cron": "30 2 * * *", "dst_policy": {"gap": "skip"}, "max_runs": 3},
     "At 02:30, every day, in UTC; a time a daylight saving change skips does not run, at most 3 runs"),
    ({"schedule_type": "interval", "interval_seconds": 7200}, "Every 2 hours"),
    ({"schedule_type": "interval", "interval_seconds": 90, "interval_mode": "fixed_delay",
      "end_date": "2027-01-01T00:00:00Z"},
     "Every 90 seconds after the previous run finished, until 2027-01-01T00:00:00+00:00"),
    ({"schedule_type": "once", "run_at": "2027-01-01T09:00:00Z", "timezone": "America/New_York"},
     "Once, at 2027-01-01T04:00:00-05:00 (America/New_York)"),
])
def test_describe(fields: dict[str, Any], words: str) -> None:
    assert describe(spec(**fields)) == words


def test_a_skipped_fire_is_listed_with_its_reason_and_not_counted_as_a_run() -> None:
    daily = spec(schedule_type="cron", cron="0 9 * * *", max_runs=3)
    first = datetime(2026, 12, 6, 9, tzinfo=UTC)

    def weekend(fire: datetime) -> str | None:
        return "calendar: weekend" if fire.weekday() >= 5 else None

    fires = upcoming(daily, task_id="x", first=first, anchor=NOW, limit=10, runs_left=3, skip=weekend)
    # Sunday skipped, then three weekdays run: max_runs counts runs, not skips.
    assert [(f.scheduled_at.day, f.skipped) for f in fires] == [
        (6, "calendar: weekend"), (7, None), (8, None), (9, None)]


def test_limit_and_bounds_end_the_list() -> None:
    hourly = spec(schedule_type="interval", interval_seconds=3600, start_date="2026-12-06T00:00:00Z",
                  end_date="2026-12-06T05:00:00Z")
    fires = upcoming_of_new(hourly, NOW, 1000)
    assert [f.scheduled_at for f in fires] == [datetime(2026, 12, 6, h, tzinfo=UTC) for h in range(6)]
    assert len(upcoming_of_new(hourly, NOW, 2)) == 2
    once = spec(schedule_type="once", run_at="2026-12-06T00:00:00Z")
    assert [f.scheduled_at for f in upcoming_of_new(once, NOW, 10)] == [datetime(2026, 12, 6, tzinfo=UTC)]


def test_instants_carry_the_jitter_of_the_task_id() -> None:
    jittered = spec(schedule_type="interval", interval_seconds=600, jitter_seconds=60)
    fires = upcoming_of_new(jittered, NOW, 5, task_id="abc")
    offsets = [f.instant - f.scheduled_at for f in fires if f.instant is not None]
    assert len(offsets) == 5 and all(timedelta(0) <= o < timedelta(seconds=60) for o in offsets)
    assert all(f.instant is None for f in upcoming_of_new(jittered, NOW, 5))
