"""Cron expressions: parsing and the next fire time in a time zone, with explicit DST rules.

Rules (see docs/scheduling.md):
- 5 fields (minute hour day month weekday), or 6 with seconds first.
- A wall time that does not exist (spring forward) runs at the first valid instant after it.
- A wall time that happens twice (fall back) runs once, on its first occurrence, when the hour
  field names specific hours; an expression whose hour field is `*` keeps one run per real
  hour through the change.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo

from croniter import CroniterBadDateError, croniter


class CronError(ValueError):
    """The expression is not a cron expression this scheduler accepts."""


def parse_cron(expression: str) -> int:
    """Validate an expression and return its field count (5 or 6)."""
    fields = expression.split()
    if len(fields) not in (5, 6):
        raise CronError(f"cron must have 5 fields (or 6 with seconds first), got {len(fields)}")
    try:
        valid = croniter.is_valid(expression, second_at_beginning=len(fields) == 6)
    except Exception:  # noqa: BLE001 - croniter raises assorted errors on odd input
        valid = False
    if not valid:
        raise CronError(f"invalid cron expression {expression!r}")
    try:
        # A walk from a fixed base, not the clock (this runs inside workflows too): croniter
        # looks 50 years ahead, past every cycle of weekdays and leap days.
        copy.copy(_parsed(expression, len(fields) == 6)).get_next(datetime)
    except CroniterBadDateError:
        raise CronError(f"cron {expression!r} names no date that exists (e.g. 30 February)") from None
    return len(fields)


def _hour_field(expression: str) -> str:
    fields = expression.split()
    return fields[2] if len(fields) == 6 else fields[1]


def next_cron_fire(expression: str, zone: ZoneInfo, after: datetime) -> datetime:
    """The first fire time strictly after ``after`` (UTC in, UTC out).

    croniter walks naive wall-clock times (pure calendar arithmetic, no DST guessing); each wall
    time is then mapped to real instants by the rules in this module's docstring.
    """
    six = len(expression.split()) == 6
    hourly = _hour_field(expression) in ("*", "*/1")
    # No wall time earlier than this can map to an instant after ``after``: offsets near
    # ``after`` are the one at ``after`` and the one after a change within the next hours.
    lowest_offset = min(_offset(after, zone), _offset(after + _MAX_SHIFT, zone))
    start = (after.astimezone(UTC) + lowest_offset).replace(tzinfo=None)
    walls = copy.copy(_parsed(expression, six))  # a walk of our own: the cached one stays put
    walls.set_current(start, force=True)
    seconds: list[datetime] = []
    for _ in range(_MAX_STEPS):
        wall: datetime = walls.get_next(datetime)
        first, second = _instants(wall, zone)
        if hourly and second is not None and second > after:
            seconds.append(second)
        if first > after:
            # Instants of first occurrences grow with the wall time, so this is the earliest
            # one; only a repeated (second) occurrence seen on the way can come sooner.
            return min([first, *seconds])
    raise CronError(f"cron {expression!r} has no next fire time after {after.isoformat()}")


@lru_cache(maxsize=1024)
def _parsed(expression: str, six: bool) -> croniter:
    """croniter's parse of an expression, made once: parsing took half of each next fire's time,
    and a create samples 50 fires of a cron task for its minimum-interval quota. Never walked
    itself, only copied, so workflows on several threads may share it: a walk of croniter 7
    copies the parsed fields it changes (tests/scheduling/test_cron.py checks they stay put)."""
    # croniter needs an explicit base; without one it would read the real clock.
    return croniter(expression, _EPOCH, second_at_beginning=six)


_EPOCH = datetime(1970, 1, 1)
# The largest offset change of any zone (Antarctica/Troll: 2 h), with room to spare.
_MAX_SHIFT = timedelta(hours=3)
_MAX_STEPS = 100_000


def _offset(moment: datetime, zone: ZoneInfo) -> timedelta:
    offset = moment.astimezone(zone).utcoffset()
    assert offset is not None
    return offset


def _instants(wall: datetime, zone: ZoneInfo) -> tuple[datetime, datetime | None]:
    """The instant a naive wall time runs at, and its second occurrence when it repeats."""
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    second = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    if first == second:
        return first, None
    if first < second:
        return first, second  # fall back: the wall time happens twice
    # Spring forward: the wall time does not exist; fold=1 reads it with the new offset (an
    # instant before the change), fold=0 with the old one (after it). Run at the change itself.
    return _change_instant(wall, zone, before=second, after=first), None


def _change_instant(
    wall: datetime, zone: ZoneInfo, *, before: datetime, after: datetime
) -> datetime:
    """The first whole second in (before, after] whose wall time is later than ``wall``."""
    low, high = int(before.timestamp()), int(after.timestamp())
    while high - low > 1:
        middle = (low + high) // 2
        if datetime.fromtimestamp(middle, zone).replace(tzinfo=None) > wall:
            high = middle
        else:
            low = middle
    return datetime.fromtimestamp(high, UTC)
