"""Cron next-fire math, with the DST rules of scheduling/cron.py, across the 2026 and 2027
changes in Europe/Berlin (spring: last Sunday of March, 02:00 CET -> 03:00 CEST; autumn: last
Sunday of October, 03:00 CEST -> 02:00 CET)."""

from __future__ import annotations

import copy
import itertools
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from scheduling.cron import CronError, _parsed, check_portable, next_cron_fire, parse_cron
from scheduling.spec import DstPolicy

DEFAULT_DST = DstPolicy()

BERLIN = ZoneInfo("Europe/Berlin")
SPRING = {2026: (3, 29), 2027: (3, 28)}
AUTUMN = {2026: (10, 25), 2027: (10, 31)}


def fires(
    expression: str, after: datetime, until: datetime, zone: ZoneInfo = BERLIN
) -> list[datetime]:
    """Every fire in (after, until]."""
    found = []
    cursor = after
    while (cursor := next_cron_fire(expression, zone, cursor, DEFAULT_DST)) <= until:
        found.append(cursor)
    return found


def local(moment: datetime) -> str:
    return moment.astimezone(BERLIN).strftime("%Y-%m-%d %H:%M %Z")


@pytest.mark.parametrize("year", [2026, 2027])
def test_daily_0230_runs_once_at_three_on_the_spring_change_day(year: int) -> None:
    month, day = SPRING[year]
    found = fires(
        "30 2 * * *",
        datetime(year, month, day - 2, tzinfo=UTC),
        datetime(year, month, day + 2, tzinfo=UTC),
    )
    assert [local(f) for f in found] == [
        f"{year}-03-{day - 2:02d} 02:30 CET",
        f"{year}-03-{day - 1:02d} 02:30 CET",
        # 02:30 does not exist that day: the first valid instant after it is 03:00 CEST
        f"{year}-03-{day:02d} 03:00 CEST",
        f"{year}-03-{day + 1:02d} 02:30 CEST",
    ]


@pytest.mark.parametrize("year", [2026, 2027])
def test_daily_0230_runs_once_on_its_first_occurrence_on_the_autumn_change_day(year: int) -> None:
    month, day = AUTUMN[year]
    change_day = datetime(year, month, day, tzinfo=UTC)
    found = fires("30 2 * * *", change_day - timedelta(days=1), change_day + timedelta(days=2))
    on_change_day = [f for f in found if f.astimezone(BERLIN).date() == change_day.date()]
    # 02:30 happens twice (CEST, then CET an hour later): it runs once, on the first
    assert on_change_day == [datetime(year, month, day, 0, 30, tzinfo=UTC)]
    assert local(on_change_day[0]).endswith("02:30 CEST")
    assert len(found) == 3  # one run a day


@pytest.mark.parametrize("year", [2026, 2027])
@pytest.mark.parametrize("changes", [SPRING, AUTUMN], ids=["spring", "autumn"])
def test_hourly_keeps_one_run_per_real_hour_through_the_change(
    year: int, changes: dict[int, tuple[int, int]]
) -> None:
    month, day = changes[year]
    start = datetime(year, month, day, tzinfo=UTC) - timedelta(hours=6)
    found = fires("0 * * * *", start, start + timedelta(hours=12))
    assert len(found) == 12
    assert all(
        later - earlier == timedelta(hours=1) for earlier, later in itertools.pairwise(found)
    )
    assert all(f.minute == 0 and f.second == 0 for f in found)


def test_hourly_runs_both_occurrences_of_the_repeated_hour() -> None:
    found = fires(
        "30 * * * *", datetime(2026, 10, 24, 23, tzinfo=UTC), datetime(2026, 10, 25, 3, tzinfo=UTC)
    )
    assert [local(f) for f in found] == [
        "2026-10-25 01:30 CEST",
        "2026-10-25 02:30 CEST",
        "2026-10-25 02:30 CET",
        "2026-10-25 03:30 CET",
    ]


def test_named_hours_inside_the_repeated_hour_run_on_the_first_pass_only() -> None:
    found = fires(
        "*/20 2 * * *",
        datetime(2026, 10, 24, 12, tzinfo=UTC),
        datetime(2026, 10, 25, 12, tzinfo=UTC),
    )
    assert [local(f) for f in found] == [
        "2026-10-25 02:00 CEST",
        "2026-10-25 02:20 CEST",
        "2026-10-25 02:40 CEST",
    ]


def test_several_missing_wall_times_collapse_into_one_run_at_the_change() -> None:
    found = fires(
        "*/20 2 * * *", datetime(2026, 3, 28, 12, tzinfo=UTC), datetime(2026, 3, 29, 12, tzinfo=UTC)
    )
    assert [local(f) for f in found] == ["2026-03-29 03:00 CEST"]


def test_next_fire_from_inside_the_repeated_hour() -> None:
    # 02:50 CEST, first pass: the next half hour is 02:00 CET on the second pass, an hour later
    # in wall time but only ten minutes later in real time.
    after = datetime(2026, 10, 25, 0, 50, tzinfo=UTC)
    assert next_cron_fire("0,30 * * * *", BERLIN, after, DEFAULT_DST) == datetime(2026, 10, 25, 1, 0, tzinfo=UTC)
    assert next_cron_fire("30 2 * * *", BERLIN, after, DEFAULT_DST) == datetime(2026, 10, 26, 1, 30, tzinfo=UTC)


def test_daily_cron_keeps_local_wall_time_across_the_change() -> None:
    found = fires(
        "0 10 * * *", datetime(2026, 3, 27, tzinfo=UTC), datetime(2026, 3, 31, tzinfo=UTC)
    )
    assert [local(f) for f in found] == [
        "2026-03-27 10:00 CET",
        "2026-03-28 10:00 CET",
        "2026-03-29 10:00 CEST",
        "2026-03-30 10:00 CEST",
    ]


def test_next_fire_is_strictly_after() -> None:
    at_ten = datetime(2026, 6, 1, 8, tzinfo=UTC)  # 10:00 CEST
    assert next_cron_fire("0 10 * * *", BERLIN, at_ten, DEFAULT_DST) == at_ten + timedelta(days=1)
    assert next_cron_fire("0 10 * * *", BERLIN, at_ten - timedelta(microseconds=1), DEFAULT_DST) == at_ten


def test_walks_of_one_expression_do_not_move_each_other() -> None:
    # The parse of an expression is shared by every call (and every workflow thread): a later
    # walk must not start where an earlier one stopped, whatever their order.
    june, july = datetime(2026, 6, 1, tzinfo=UTC), datetime(2026, 7, 1, tzinfo=UTC)
    assert next_cron_fire("0 10 * * *", BERLIN, july, DEFAULT_DST) == datetime(2026, 7, 1, 8, tzinfo=UTC)
    assert next_cron_fire("0 10 * * *", BERLIN, june, DEFAULT_DST) == datetime(2026, 6, 1, 8, tzinfo=UTC)
    assert next_cron_fire("0 10 * * *", ZoneInfo("UTC"), june, DEFAULT_DST) == datetime(2026, 6, 1, 10, tzinfo=UTC)
    assert fires("0 10 * * *", june, june + timedelta(days=3)) == [
        datetime(2026, 6, day, 8, tzinfo=UTC) for day in (1, 2, 3)
    ]
    # The same text read with seconds first is another expression.
    assert next_cron_fire("0 10 * * * *", ZoneInfo("UTC"), june, DEFAULT_DST) == datetime(2026, 6, 1, 0, 10, tzinfo=UTC)


def test_threads_walking_one_expression_at_once_each_get_their_own_fires() -> None:
    # Workflow activations run on several threads and share the parse of an expression.
    starts = [datetime(2026, 1, 1, tzinfo=UTC) + timedelta(hours=7 * i) for i in range(400)]
    expected = [next_cron_fire("*/7 9-17 * * 1-5", BERLIN, start, DEFAULT_DST) for start in starts]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # hand the interpreter lock over as often as it can be
    try:
        with ThreadPoolExecutor(8) as pool:
            for _ in range(5):
                got = list(pool.map(lambda start: next_cron_fire("*/7 9-17 * * 1-5", BERLIN, start, DEFAULT_DST), starts))
                assert got == expected
    finally:
        sys.setswitchinterval(interval)


def test_walks_leave_the_shared_parse_as_it_was() -> None:
    for expression in ("0 10 * * *", "*/7 9-17 * * 1-5", "0 0 L * *", "0 9 * * 1#2", "0 0 29 2 *",
                       "*/20 * * * * *"):
        parsed = _parsed(expression, len(expression.split()) == 6)
        before = copy.deepcopy((parsed.expanded, parsed.nth_weekday_of_month, parsed.expressions,
                                parsed.nearest_weekday, parsed.cur))
        after = datetime(2026, 1, 1, tzinfo=UTC)
        for _ in range(30):
            after = next_cron_fire(expression, BERLIN, after, DEFAULT_DST)
        assert (parsed.expanded, parsed.nth_weekday_of_month, parsed.expressions,
                parsed.nearest_weekday, parsed.cur) == before, expression


@pytest.mark.parametrize("expression", ["0 0 30 2 *", "0 0 31 4,6,9,11 *", "0 12 30,31 2 *"])
def test_expressions_that_name_no_real_date_are_refused(expression: str) -> None:
    with pytest.raises(CronError, match="names no date that exists"):
        parse_cron(expression)


def test_six_fields_have_seconds_first() -> None:
    after = datetime(2026, 6, 1, 8, 0, 5, tzinfo=UTC)
    assert next_cron_fire("*/15 * * * * *", ZoneInfo("UTC"), after, DEFAULT_DST) == after.replace(second=15)
    assert parse_cron("*/15 * * * * *") == 6
    assert parse_cron("0 10 * * *") == 5


def test_leap_day_cron_finds_the_next_leap_year() -> None:
    found = next_cron_fire("0 0 29 2 *", ZoneInfo("UTC"), datetime(2026, 3, 1, tzinfo=UTC), DEFAULT_DST)
    assert found == datetime(2028, 2, 29, tzinfo=UTC)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("* * * *", "cron must have 5 fields (or 6 with seconds first), got 4"),
        ("* * * * * * *", "got 7"),
        ("61 * * * *", "invalid cron expression '61 * * * *'"),
        ("0 25 * * *", "invalid cron expression"),
        ("every day", "got 2"),
    ],
)
def test_invalid_expressions_are_refused_with_a_message(expression: str, message: str) -> None:
    with pytest.raises(CronError, match=re.escape(message)):
        parse_cron(expression)


@pytest.mark.parametrize("expression", ["R R * * *", "0 R * * *", "0 9 * * R", "H * * * *",
                                        "0 H(0-5) * * *", "0 9,R * * *"])
def test_random_and_hashed_tokens_are_refused_in_a_new_expression(expression: str) -> None:
    # croniter's R picks its time in each process that parses it: each would fire at its own.
    with pytest.raises(CronError, match="R \\(random\\) and H \\(hashed\\) are not supported"):
        check_portable(expression)


def test_month_and_day_names_are_not_taken_for_random_tokens() -> None:
    check_portable("0 9 * MAR,APR FRI")


@pytest.mark.parametrize("expression", ["30 2 * 3 0#2", "0-59 2 * 3 0#2", "* * 2 * 3 0#2"])
def test_a_cron_naming_only_times_of_a_skipped_gap_has_no_next_fire(expression: str) -> None:
    # In New York the second Sunday of March has no 02:00-02:59. Walked one step per gap, the
    # 50 years to the horizon end in no fire (these walked 100,000 steps, or to year 9999).
    york, after = ZoneInfo("America/New_York"), datetime(2026, 12, 7, tzinfo=UTC)
    assert next_cron_fire(expression, york, after, DstPolicy(gap="skip")) is None
    shifted = next_cron_fire(expression, york, after, DEFAULT_DST)
    assert shifted == datetime(2027, 3, 14, 7, 0, tzinfo=UTC)  # 03:00 EDT, as gap shift says


def test_skipping_a_gap_keeps_the_fires_after_it() -> None:
    # Every 20 minutes from 01:00 to 03:59: the gap's 02:00-02:40 go, 03:00 is the next fire.
    york = ZoneInfo("America/New_York")
    before_gap = datetime(2027, 3, 14, 6, 40, tzinfo=UTC)  # 01:40 EST
    found = next_cron_fire("*/20 1-3 * * *", york, before_gap, DstPolicy(gap="skip"))
    assert found == datetime(2027, 3, 14, 7, 0, tzinfo=UTC)


def test_no_fire_past_the_last_representable_year_is_none() -> None:
    assert next_cron_fire("0 0 1 1 *", ZoneInfo("UTC"), datetime(9999, 6, 1, tzinfo=UTC), DEFAULT_DST) is None
