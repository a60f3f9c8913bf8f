"""Cron expressions: parsing and the next fire time in a time zone, with explicit DST rules.

Rules (see docs/scheduling.md):
- 5 fields (minute hour day month weekday), or 6 with seconds first.
- A wall time that does not exist (spring forward) runs at the first valid instant after it
  (the task's ``dst_policy.gap`` = ``shift``), or not at all (``skip``).
- A wall time that happens twice (fall back) runs on its first occurrence, its last, or both
  (``dst_policy.repeated``) when the hour field names specific hours; an expression whose hour
  field is `*` keeps one run per real hour through the change, whatever ``repeated`` says.
The default of ``dst_policy`` is declared in ``scheduling/spec.py``.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Protocol
from zoneinfo import ZoneInfo

from croniter import CroniterBadDateError, croniter


class CronError(ValueError):
    """The expression is not a cron expression this scheduler accepts."""


class DstRules(Protocol):
    """What a task does with a wall time that does not exist or happens twice."""

    @property
    def gap(self) -> str: ...  # "shift" | "skip"

    @property
    def repeated(self) -> str: ...  # "first" | "last" | "both"


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


def check_portable(expression: str) -> None:
    """Refuse croniter's R (random) and H (hashed) times in a new expression: R picks its time
    in each process that parses it, so the API's answer, the preview and each worker would fire
    at times of their own. (A stored expression is not checked: its task keeps loading.)"""
    if any(term[:1].upper() in "RH" or "(" in term for field in expression.split()
           for term in field.split(",")):
        raise CronError(f"cron {expression!r}: R (random) and H (hashed) are not supported")


def _hour_field(expression: str) -> str:
    fields = expression.split()
    return fields[2] if len(fields) == 6 else fields[1]


def next_cron_fire(expression: str, zone: ZoneInfo, after: datetime, dst: DstRules) -> datetime | None:
    """The first fire time strictly after ``after`` (UTC in, UTC out), under ``dst``; None when
    there is none within ``HORIZON`` (every time it names falls in a gap that ``skip`` skips).

    croniter walks naive wall-clock times (pure calendar arithmetic, no DST guessing); each wall
    time is then mapped to real instants by the rules in this module's docstring.
    """
    six = len(expression.split()) == 6
    hourly = _hour_field(expression) in ("*", "*/1")
    keep_first = hourly or dst.repeated != "last"
    keep_second = hourly or dst.repeated != "first"
    # No wall time earlier than this can map to an instant after ``after``: offsets near
    # ``after`` are the one at ``after`` and the one after a change within the next hours.
    lowest_offset = min(_offset(after, zone), _offset(after + _MAX_SHIFT, zone))
    start = (after.astimezone(UTC) + lowest_offset).replace(tzinfo=None)
    walls = copy.copy(_parsed(expression, six))  # a walk of our own: the cached one stays put
    walls.set_current(start, force=True)
    seconds: list[datetime] = []
    for _ in range(_MAX_STEPS):
        try:
            wall: datetime = walls.get_next(datetime)
        except (ValueError, OverflowError):  # past year 9999
            break
        if wall - start > HORIZON:
            break
        first, second, missing = _instants(wall, zone)
        if missing and dst.gap == "skip":
            # Every wall time of this gap is skipped: walk on from its end (one step a gap,
            # however many times of it the expression names).
            walls.set_current(first.astimezone(zone).replace(tzinfo=None) - _SECOND, force=True)
            continue
        if second is not None:
            if keep_second and second > after:
                seconds.append(second)
            if not keep_first:
                continue
        if first > after:
            # Instants of first occurrences grow with the wall time, so this is the earliest
            # one; only a repeated (second) occurrence seen on the way can come sooner.
            return min([first, *seconds])
    return min(seconds, default=None)


def dst_note(expression: str, zone: ZoneInfo, fire: datetime, dst: DstRules) -> str | None:
    """What daylight saving time did to a fire of ``expression``: moved, merged or doubled it."""
    local = fire.astimezone(zone)
    wall = local.replace(tzinfo=None)
    day, name = f"{wall:%Y-%m-%d}", str(zone)
    jump = _offset(fire, zone) - _offset(fire - timedelta(microseconds=1), zone)
    if jump > timedelta(0):
        # Under gap "skip" the missing wall times are no fire: this one is its own wall time's.
        missing = [] if dst.gap == "skip" else _walls_between(expression, wall - jump, wall)
        if not missing:
            return None
        if len(missing) == 1:
            return f"{_clock(missing[0])} does not exist on {day} in {name}: runs at {_clock(wall)}"
        return (f"{len(missing)} times from {_clock(missing[0])} to {_clock(missing[-1])} do not "
                f"exist on {day} in {name}: they run once, at {_clock(wall)}")
    earlier = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    later = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    if earlier >= later:
        return None
    if _hour_field(expression) in ("*", "*/1") or dst.repeated == "both":
        runs = "runs on both"
    else:
        which = "first" if dst.repeated == "first" else "second"
        runs = f"runs on its {which} occurrence only"
    return (f"{_clock(wall)} happens twice on {day} in {name} (UTC{_utc_offset(earlier, zone)}, "
            f"then UTC{_utc_offset(later, zone)}): {runs}")


def missing_walls(expression: str, zone: ZoneInfo, low: datetime, high: datetime) -> list[datetime]:
    """The wall times ``expression`` names between the instants ``low`` and ``high`` that do
    not exist in ``zone`` (naive, in the zone's wall clock)."""
    start = low.astimezone(zone).replace(tzinfo=None)
    end = high.astimezone(zone).replace(tzinfo=None)
    return [wall for wall in _walls_between(expression, start, end) if _instants(wall, zone)[2]]


def _walls_between(expression: str, low: datetime, high: datetime) -> list[datetime]:
    """The wall times in [low, high) that ``expression`` names."""
    walls = copy.copy(_parsed(expression, len(expression.split()) == 6))
    walls.set_current(low - timedelta(seconds=1), force=True)
    found: list[datetime] = []
    while (wall := walls.get_next(datetime)) < high:
        found.append(wall)
    return found


def _clock(wall: datetime) -> str:
    return f"{wall:%H:%M:%S}" if wall.second else f"{wall:%H:%M}"


def _utc_offset(moment: datetime, zone: ZoneInfo) -> str:
    text = moment.astimezone(zone).strftime("%z")
    return f"{text[:3]}:{text[3:]}"


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
# How far ahead a next fire is looked for, as croniter does: past every cycle of weekdays and
# leap days.
HORIZON = timedelta(days=366 * 50)
_SECOND = timedelta(seconds=1)


def _offset(moment: datetime, zone: ZoneInfo) -> timedelta:
    offset = moment.astimezone(zone).utcoffset()
    assert offset is not None
    return offset


def _instants(wall: datetime, zone: ZoneInfo) -> tuple[datetime, datetime | None, bool]:
    """The instant a naive wall time runs at, its second occurrence when it repeats, and
    whether it does not exist (the instant is then the change after it)."""
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    second = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    if first == second:
        return first, None, False
    if first < second:
        return first, second, False  # fall back: the wall time happens twice
    # Spring forward: the wall time does not exist; fold=1 reads it with the new offset (an
    # instant before the change), fold=0 with the old one (after it). Run at the change itself.
    return _change_instant(wall, zone, before=second, after=first), None, True


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
