"""Every ``dst_policy`` through the 2026 and 2027 changes of four zones: an hour each way
(Europe/Berlin, America/New_York), 30 minutes (Australia/Lord_Howe), and at midnight
(America/Santiago)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from pydantic import ValidationError

from scheduling.cron import dst_note, next_cron_fire
from scheduling.spec import DstGap, DstPolicy, DstRepeated, TaskSpec

# The local date of each change: spring forward (a gap) and fall back (a repeat).
CHANGES = {
    "Europe/Berlin": ["2026-03-29", "2026-10-25", "2027-03-28", "2027-10-31"],
    "America/New_York": ["2026-03-08", "2026-11-01", "2027-03-14", "2027-11-07"],
    "Australia/Lord_Howe": ["2026-04-05", "2026-10-04", "2027-04-04", "2027-10-03"],
    "America/Santiago": ["2026-04-04", "2026-09-06", "2027-04-03", "2027-09-05"],
}
POLICIES = [DstPolicy(gap=g, repeated=r) for g, r in itertools.product(DstGap, DstRepeated)]


def transitions(zone: ZoneInfo) -> list[tuple[datetime, timedelta, timedelta]]:
    """Each offset change of 2026 and 2027: its instant, the offset before and after."""
    found = []
    moment = datetime(2026, 1, 1, tzinfo=UTC)
    while moment < datetime(2028, 1, 1, tzinfo=UTC):
        step = moment + timedelta(minutes=15)
        before, after = moment.astimezone(zone).utcoffset(), step.astimezone(zone).utcoffset()
        assert before is not None and after is not None
        if before != after:
            found.append((step, before, after))
        moment = step
    return found


def fires(expression: str, zone: ZoneInfo, low: datetime, high: datetime, dst: DstPolicy) -> list[datetime]:
    """Every fire in (low, high]."""
    found, cursor = [], low
    while (cursor := next_cron_fire(expression, zone, cursor, dst)) <= high:
        found.append(cursor)
    return found


CASES = [(name, policy) for name in CHANGES for policy in POLICIES]


@pytest.mark.parametrize(("name", "policy"), CASES, ids=[f"{n}-{p.gap}-{p.repeated}" for n, p in CASES])
def test_a_daily_wall_time_inside_each_change_follows_the_policy(name: str, policy: DstPolicy) -> None:
    zone = ZoneInfo(name)
    changes = transitions(zone)
    assert [f"{(t + min(a, b)).date()}" for t, a, b in changes] == CHANGES[name]
    for at, old, new in changes:
        # A wall time in the middle of the missing or repeated span, run daily.
        wall = (at + min(old, new) + abs(new - old) / 2).replace(tzinfo=None)
        expression = f"{wall.minute} {wall.hour} * * *"
        day = timedelta(days=1)
        found = fires(expression, zone, at - 2 * day, at + 2 * day, policy)
        outside = [f for f in found if abs(f.astimezone(zone).replace(tzinfo=None) - wall) >= day / 2]
        inside = [f for f in found if f not in outside]
        if new > old:  # spring forward: the wall time does not exist that day
            assert inside == ([] if policy.gap is DstGap.SKIP else [at])
            if inside:
                note = dst_note(expression, zone, at, policy)
                assert note == (f"{wall:%H:%M} does not exist on {wall:%Y-%m-%d} in {name}: "
                                f"runs at {(at + new).replace(tzinfo=None):%H:%M}")
        else:  # fall back: it happens twice
            first, second = wall.replace(tzinfo=UTC) - old, wall.replace(tzinfo=UTC) - new
            expected = {DstRepeated.FIRST: [first], DstRepeated.LAST: [second],
                        DstRepeated.BOTH: [first, second]}[policy.repeated]
            assert inside == expected
            assert all("happens twice" in (dst_note(expression, zone, f, policy) or "") for f in inside)
        # Every other day runs once at the wall time.
        assert all(f.astimezone(zone).replace(tzinfo=None).time() == wall.time() for f in outside)
        assert len(outside) >= 2


@pytest.mark.parametrize("policy", POLICIES, ids=[f"{p.gap}-{p.repeated}" for p in POLICIES])
def test_an_hour_field_of_star_runs_every_real_hour_when_the_clock_goes_back(policy: DstPolicy) -> None:
    zone = ZoneInfo("Europe/Berlin")
    found = fires("30 * * * *", zone, datetime(2026, 10, 24, 23, tzinfo=UTC),
                  datetime(2026, 10, 25, 3, tzinfo=UTC), policy)
    assert [f.hour for f in found] == [23, 0, 1, 2]  # 01:30 CEST, 02:30 CEST, 02:30 CET, 03:30 CET


@pytest.mark.parametrize("gap", list(DstGap))
def test_several_missing_wall_times_merge_into_one_run_or_none(gap: DstGap) -> None:
    zone, policy = ZoneInfo("Europe/Berlin"), DstPolicy(gap=gap)
    found = fires("*/20 * * * *", zone, datetime(2027, 3, 28, 0, 30, tzinfo=UTC),
                  datetime(2027, 3, 28, 1, 30, tzinfo=UTC), policy)
    change = datetime(2027, 3, 28, 1, tzinfo=UTC)
    # 02:00, 02:20 and 02:40 do not exist; 03:00 CEST does.
    assert found == [datetime(2027, 3, 28, 0, 40, tzinfo=UTC), change,
                     change + timedelta(minutes=20)]
    # Under skip, 03:00 is the fire of 03:00 itself: nothing moved into it.
    note = dst_note("*/20 * * * *", zone, change, policy)
    assert note == (None if gap is DstGap.SKIP else
                    "3 times from 02:00 to 02:40 do not exist on 2027-03-28 in Europe/Berlin: "
                    "they run once, at 03:00")


def test_the_default_is_the_documented_rules() -> None:
    assert DstPolicy() == DstPolicy(gap=DstGap.SHIFT, repeated=DstRepeated.FIRST)
    spec = TaskSpec.model_validate({"task_name": "t", "job_details": {"type": "handler", "name": "noop"},
                                    "schedule_type": "cron", "cron": "30 2 * * *"})
    assert spec.dst_policy == DstPolicy()


@pytest.mark.parametrize("bad", [{"gap": "later"}, {"repeated": "twice"}, {"gap": None}, {"other": "x"}])
def test_an_unknown_choice_is_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError, match="dst_policy"):
        TaskSpec.model_validate({"task_name": "t", "job_details": {"type": "handler", "name": "noop"},
                                 "schedule_type": "cron", "cron": "30 2 * * *", "dst_policy": bad})
