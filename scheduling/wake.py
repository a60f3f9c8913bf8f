"""When a new task's workflow first needs a worker.

A task created for tomorrow has nothing to do now. Started with a start delay, its workflow is
held by the server: no workflow task runs at creation, so the create costs the engine about
what a bare workflow start costs.

- Held for a while (the default, 30 s): the first workflow task (the task's row and its timer)
  runs after the hold instead of during the create. A burst of creates runs at the engine's
  start rate while it lasts up to the hold, and the deferred workflow tasks follow it.
- Held until the first dispatch (no limit): the first workflow task both writes the row and
  dispatches the run, so one workflow task per task is saved, not only deferred.

A burst longer than the hold would meet its own first workflow tasks once the hold ends, at
the rate it creates. ``WakePacer`` spreads the wakes instead: at most a set number per second,
none before its hold ends, so the deferred work runs beside a long burst at a bounded rate and
the rest follows it. A wake the pace would put past its task's first dispatch is held until
that dispatch (whose workflow task then also dispatches the run).

The price: until the wake, the workflow has run no code. Updates (what the API sends) and
Temporal cancellation wake it at once; a plain signal is recorded but only handled at the wake,
still before any run; a query fails until then. A task whose first dispatch is near is not held,
so a short hold always ends well before its first run.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from scheduling.jitter import jitter_offset


class WakePacer:
    """Books the wakes of held tasks at most ``rate`` per second (0: no limit), in one process."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self._next: datetime | None = None

    def book(self, earliest: datetime, latest: datetime) -> datetime:
        """The first free wake at or after ``earliest``; ``latest`` (no wake booked) when the
        first free one is later."""
        if self.rate <= 0 or earliest >= latest:
            return min(earliest, latest)
        wake = earliest if self._next is None else max(earliest, self._next)
        if wake >= latest:
            return latest
        self._next = wake + timedelta(seconds=1 / self.rate)
        return wake

    def booked_until(self, now: datetime) -> float:
        """Seconds from ``now`` until the last booked wake has passed (0 when none is to come)."""
        return 0.0 if self._next is None else max(0.0, (self._next - now).total_seconds())


def first_wake_delay(
    *, task_id: str, first_fire: datetime | None, jitter_seconds: float, lead_seconds: float,
    now: datetime, minimum_seconds: float, maximum_seconds: float = 0.0,
    pacer: WakePacer | None = None,
) -> timedelta | None:
    """How long the server may hold a new task's workflow: ``maximum_seconds``, or until its
    first run is dispatched (the fire, plus its jitter, minus the lead) when that is sooner or
    ``maximum_seconds`` is 0. A ``pacer`` may put the wake later, never past the dispatch.
    None when the dispatch is less than ``minimum_seconds`` away, when there is no first fire,
    or when ``minimum_seconds`` is 0."""
    if minimum_seconds <= 0 or first_fire is None:
        return None
    instant = first_fire + jitter_offset(task_id, first_fire, jitter_seconds)
    delay = instant - timedelta(seconds=lead_seconds) - now
    if delay.total_seconds() < minimum_seconds:
        return None
    if maximum_seconds <= 0:
        return delay
    held = min(delay, timedelta(seconds=maximum_seconds))
    if pacer is None:
        return held
    return pacer.book(now + held, now + delay) - now
