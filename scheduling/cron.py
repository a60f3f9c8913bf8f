"""Cron expressions: parsing and the next fire time in a time zone, with explicit DST rules.

Rules (see docs/scheduling.md):
- 5 fields (minute hour day month weekday), or 6 with seconds first.
- A wall time that does not exist (spring forward) runs at the first valid instant after it.
- A wall time that happens twice (fall back) runs once, on its first occurrence, when the hour
  field names specific hours; an expression whose hour field is `*` keeps one run per real
  hour through the change.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from croniter import croniter


class CronError(ValueError):
    """The expression is not a cron expression this scheduler accepts."""


def parse_cron(expression: str) -> int:
    """Validate an expression and return its field count (5 or 6)."""
    fields = expression.split()
    if len(fields) not in (5, 6):
        raise CronError(f"cron must have 5 fields (or 6 with seconds first), got {len(fields)}")
    try:
        valid = croniter.is_valid(expression, second_at_beginning=len(fields) == 6)
    except Exception:  # croniter raises assorted errors on odd input
        valid = False
    if not valid:
        raise CronError(f"invalid cron expression {expression!r}")
    return len(fields)


def _hour_field(expression: str) -> str:
    fields = expression.split()
    return fields[2] if len(fields) == 6 else fields[1]


def next_cron_fire(expression: str, zone: ZoneInfo, after: datetime) -> datetime:
    """The first fire time strictly after ``after`` (UTC in, UTC out)."""
    six = len(expression.split()) == 6
    # croniter needs an explicit base; without one it would read the real clock.
    local_after = after.astimezone(zone)
    iterator = croniter(expression, local_after, second_at_beginning=six)
    hourly = _hour_field(expression) in ("*", "*/1")
    for _ in range(4):
        candidate: datetime = iterator.get_next(datetime)
        if candidate <= local_after:
            continue
        if not hourly and _is_second_occurrence(candidate, zone):
            continue
        return candidate.astimezone(UTC)
    raise CronError(f"cron {expression!r} has no next fire time after {after.isoformat()}")


def _is_second_occurrence(moment: datetime, zone: ZoneInfo) -> bool:
    """True when this wall time already happened one offset change earlier (fall back)."""
    utc_moment = moment.astimezone(UTC)
    wall = utc_moment.astimezone(zone).replace(tzinfo=None)
    for hours in (1, 2):
        earlier = (utc_moment - timedelta(hours=hours)).astimezone(zone)
        if earlier.replace(tzinfo=None) == wall:
            return True
    return False
