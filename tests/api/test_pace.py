"""The minimum-interval quota's gap sampling: a walk of a cron schedule is reused by later
creates of the same schedule and gives exactly what a fresh walk from their own `now` gives."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import api.pace
from api.pace import SAMPLE_FIRES, ShortestGaps
from scheduling.fire import next_fire
from scheduling.spec import TaskSpec


def cron(expression: str, zone: str = "Europe/Berlin", **fields: Any) -> TaskSpec:
    return TaskSpec.model_validate({
        "task_name": "t", "job_details": {"type": "handler", "name": "noop"},
        "schedule_type": "cron", "cron": expression, "timezone": zone, **fields,
    })


def fires_afresh(spec: TaskSpec, now: datetime) -> list[datetime]:
    """The definition: the next SAMPLE_FIRES fires after ``now``, walked from ``now``."""
    fires: list[datetime] = []
    cursor: datetime | None = now
    while len(fires) < SAMPLE_FIRES and (cursor := next_fire(spec, anchor=now, after=cursor)):
        fires.append(cursor)
    return fires


def walked_afresh(spec: TaskSpec, now: datetime) -> float | None:
    """The shortest gap among ``fires_afresh``."""
    fires = fires_afresh(spec, now)
    gaps = [(b - a).total_seconds() for a, b in zip(fires, fires[1:], strict=False)]
    return min(gaps) if gaps else None


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[datetime]:
    """The `after` of every next_fire the sampler computes."""
    calls: list[datetime] = []

    def counting(spec: TaskSpec, *, anchor: datetime, after: datetime) -> datetime | None:
        calls.append(after)
        return next_fire(spec, anchor=anchor, after=after)

    monkeypatch.setattr(api.pace, "next_fire", counting)
    return calls


def test_a_later_create_of_the_same_schedule_walks_only_the_new_fires(counted: list[datetime]) -> None:
    gaps = ShortestGaps()
    spec = cron("*/5 * * * *")
    now = datetime(2026, 6, 1, 9, 1, tzinfo=UTC)
    assert gaps.shortest_gap(spec, now) == 300
    assert len(counted) == SAMPLE_FIRES
    counted.clear()
    assert gaps.shortest_gap(spec, now + timedelta(seconds=3)) == 300
    assert counted == []  # no fire passed in between: nothing to walk
    assert gaps.shortest_gap(spec, now + timedelta(minutes=11)) == 300
    assert len(counted) == 2  # two fires passed: two more at the end
    counted.clear()
    assert gaps.shortest_gap(cron("*/5 * * * *", zone="UTC"), now) == 300
    assert len(counted) == SAMPLE_FIRES  # another zone is another schedule


def test_a_create_whose_now_came_a_little_earlier_still_reuses_the_walk(counted: list[datetime]) -> None:
    gaps = ShortestGaps()
    spec = cron("0,1 9 * * *")
    now = datetime(2026, 6, 1, 10, tzinfo=UTC)
    gaps.shortest_gap(spec, now)
    counted.clear()
    assert gaps.shortest_gap(spec, now + timedelta(seconds=30)) == 60
    assert gaps.shortest_gap(spec, now + timedelta(seconds=10)) == walked_afresh(spec, now + timedelta(seconds=10))
    assert counted == []
    assert gaps.shortest_gap(spec, now - timedelta(hours=1)) == 60  # before the walk: a new one
    assert counted[0] == now - timedelta(hours=1)


@pytest.mark.parametrize("seed", range(4))
def test_reused_walks_give_what_a_fresh_walk_gives(seed: int) -> None:
    pick = random.Random(seed)
    expressions = ["*/10 * * * * *", "*/5 * * * *", "30 2 * * *", "0 * * * *", "0,30 2 * * *", "15 1,2,3 * * 0",
                   "0 9 * * 1-5", "*/7 */3 * * *", "59 1 * * *", "*/20 * * * * *"]
    zones = ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "America/Santiago", "UTC"]
    specs = [cron(pick.choice(expressions), pick.choice(zones)) for _ in range(6)]
    specs.append(cron("0 10 * * *", end_date="2026-03-31T00:00:00Z"))  # ends within the sample
    gaps = ShortestGaps(schedules_kept=4)  # fewer than the schedules: some walks are dropped
    now = datetime(2026, 3, 20, tzinfo=UTC)  # the spring changes come within the samples
    for _ in range(120):
        now += timedelta(minutes=pick.choice([0, 1, 7, 90, 600]), seconds=pick.uniform(-50, 50))
        spec = pick.choice(specs)
        assert gaps.shortest_gap(spec, now) == walked_afresh(spec, now), (spec.cron, spec.timezone, now)
        # The very fires sampled, not only their shortest gap (a window shifted by a few
        # fires of a regular schedule has the same gap).
        assert gaps._cron_fires(spec, now) == fires_afresh(spec, now), (spec.cron, spec.timezone, now)


def test_schedules_with_one_run_left_or_none_have_no_gap() -> None:
    gaps = ShortestGaps()
    now = datetime(2026, 6, 1, tzinfo=UTC)
    last_day = cron("0 10 * * *", zone="UTC", end_date="2026-06-01T12:00:00Z")
    assert gaps.shortest_gap(last_day, now) is None
    assert gaps.shortest_gap(last_day, now + timedelta(hours=11)) is None
    two_left = cron("0 10 * * *", zone="UTC", end_date="2026-06-02T12:00:00Z")
    assert gaps.shortest_gap(two_left, now) == 86400


def test_intervals_and_one_time_tasks_are_not_sampled(counted: list[datetime]) -> None:
    gaps = ShortestGaps()
    interval = TaskSpec.model_validate({"task_name": "t", "job_details": {"type": "handler", "name": "noop"},
                                        "schedule_type": "interval", "interval_seconds": 45})
    once = TaskSpec.model_validate({"task_name": "t", "job_details": {"type": "handler", "name": "noop"},
                                    "schedule_type": "once", "run_at": "2026-06-02T00:00:00Z"})
    now = datetime(2026, 6, 1, tzinfo=UTC)
    assert gaps.shortest_gap(interval, now) == 45
    assert gaps.shortest_gap(once, now) is None
    assert counted == []


def test_schedules_that_differ_only_in_their_dst_policy_are_walked_apart() -> None:
    # One walk served both: whichever came first set the other's gap (another tenant's too).
    gaps = ShortestGaps()
    now = datetime(2026, 10, 1, tzinfo=UTC)
    first = cron("30 1 1-7 11 *", "America/New_York")
    both = cron("30 1 1-7 11 *", "America/New_York", dst_policy={"repeated": "both"})
    assert (gaps.shortest_gap(both, now), gaps.shortest_gap(first, now)) == (3600, 86400)
    assert (walked_afresh(both, now), walked_afresh(first, now)) == (3600, 86400)
