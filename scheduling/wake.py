"""When a new task's workflow first needs a worker.

A task created for tomorrow has nothing to do until its first run is dispatched. Started with a
start delay, its workflow is held by the server until then: no workflow task runs at creation,
so the create costs the engine about what a bare workflow start costs, and the first workflow
task both writes the task's row and dispatches the run. Started at once, the same task costs a
workflow task now (row and timer) and another at the wake.

The price: until the wake, the workflow has run no code. Updates (what the API sends) and
Temporal cancellation wake it at once; a plain signal is recorded but only handled at the wake,
still before the run; a query fails until then.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from scheduling.jitter import jitter_offset


def first_wake_delay(
    *, task_id: str, first_fire: datetime | None, jitter_seconds: float, lead_seconds: float,
    now: datetime, minimum_seconds: float,
) -> timedelta | None:
    """How long the server may hold a new task's workflow: until its first run is dispatched
    (the fire, plus its jitter, minus the lead). None when that is less than
    ``minimum_seconds`` away, when there is no first fire, or when ``minimum_seconds`` is 0."""
    if minimum_seconds <= 0 or first_fire is None:
        return None
    instant = first_fire + jitter_offset(task_id, first_fire, jitter_seconds)
    delay = instant - timedelta(seconds=lead_seconds) - now
    return delay if delay.total_seconds() >= minimum_seconds else None
