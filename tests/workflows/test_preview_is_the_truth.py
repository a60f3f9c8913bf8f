"""Preview is the truth: random schedules (cron, interval, once; zones with DST changes of an
hour, 30 minutes and at midnight; every DST policy; jitter; start and end dates; max_runs;
calendars that skip or shift the fires of a date) run
through the real TaskWorkflow on the time-skipping server, and their execution rows are the
fires the preview listed: the same fire times, the same instants, nothing else.

``PREVIEW_EXAMPLES`` (default 12) tasks run one after another, seeds ``PREVIEW_SEED`` (default 0)
onwards; a failure names its seed.
"""

from __future__ import annotations

import os
import random
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import Engine

from api.calendars import by_calendar
from api.preview import _shown_shifted
from scheduling.calendars import CalendarPlan
from scheduling.policy import Position
from scheduling.preview import upcoming_of_new
from scheduling.spec import TaskSpec
from scheduling.status import TaskStatus
from store.calendars import add_calendar, calendar_dates
from store.models import Calendar
from tests.conftest import new_worker, start_time_skipping
from tests.workflows.helpers import executions, spec, start_task
from workflows.state import TaskState

EXAMPLES = int(os.environ.get("PREVIEW_EXAMPLES", "12"))
SEED = int(os.environ.get("PREVIEW_SEED", "0"))
SCHEDULE = {"schedule_type", "cron", "timezone", "start_date", "end_date", "interval_seconds",
            "run_at", "dst_policy", "max_runs", "jitter_seconds", "exclude_calendars"}
ZONES = ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "America/Santiago", "UTC"]


def changes_within_a_year(zone: ZoneInfo, now: datetime) -> list[datetime]:
    """The instants of the zone's offset changes from two days after ``now`` to a year after
    (for UTC: two ordinary days)."""
    found, moment = [], now.replace(minute=0, second=0, microsecond=0) + timedelta(days=2)
    while moment < now + timedelta(days=366):
        step = moment + timedelta(minutes=30)
        if moment.astimezone(zone).utcoffset() != step.astimezone(zone).utcoffset():
            found.append(step)
        moment = step
    return found or [moment - timedelta(days=100), moment - timedelta(days=200)]


def random_fields(rng: random.Random, now: datetime) -> dict[str, Any]:
    """A task's schedule around a DST change after ``now``, drawn from ``rng``."""
    zone_name = rng.choice(ZONES)
    zone = ZoneInfo(zone_name)
    change = rng.choice(changes_within_a_year(zone, now))
    start = (change - timedelta(minutes=rng.choice([20, 45, 90, 150, 1500]))).replace(second=0)
    fields: dict[str, Any] = {"timezone": zone_name, "max_runs": rng.randint(2, 4),
                              "jitter_seconds": rng.choice([0, 0, 7, 300]),
                              "dst_policy": {"gap": rng.choice(["shift", "skip"]),
                                             "repeated": rng.choice(["first", "last", "both"])}}
    kind = rng.choices(["cron", "interval", "once"], weights=[6, 2, 1])[0]
    if kind == "once":
        return {"schedule_type": "once", "run_at": start + timedelta(hours=1),
                "timezone": zone_name, "jitter_seconds": fields["jitter_seconds"]}
    if rng.random() < 0.3:
        fields["end_date"] = start + timedelta(hours=rng.choice([3, 30]))
    fields["start_date"] = start
    if kind == "interval":
        return {**fields, "schedule_type": "interval", "interval_seconds": rng.choice([1800, 3600, 5400])}
    wall = change.astimezone(zone)
    hour, minute = wall.hour, rng.choice([0, 15, 30, 45])
    expression = rng.choice([
        f"{minute} {hour} * * *", f"{minute} {(hour - 1) % 24} * * *", f"{minute} * * * *",
        f"0,30 {(hour - 1) % 24}-{hour} * * *", f"{minute} */2 * * *",
    ])
    return {**fields, "schedule_type": "cron", "cron": expression}


async def test_the_workflow_runs_exactly_the_fires_the_preview_lists(sqlite_engine: Engine) -> None:
    for seed in range(SEED, SEED + EXAMPLES):
        # A server of its own per task: its clock starts at the real now (a server's clock
        # leaps on after each task), so every task meets the DST change it was drawn around.
        env = await start_time_skipping()
        try:
            async with new_worker(env.client, sqlite_engine) as worker:
                now = await env.get_current_time()
                rng = random.Random(seed)
                fields, task_id = random_fields(rng, now), f"preview-{seed}"
                fields |= with_calendar(rng, fields, sqlite_engine, task_id)
                task = spec(**fields)
                handle = await start_task(env, worker.task_queue, task, task_id=task_id)
                state = await handle.result()
        finally:
            await env.shutdown()
        check(seed, task, task_id, state, sqlite_engine)


def with_calendar(rng: random.Random, fields: dict[str, Any], engine: Engine,
                  task_id: str) -> dict[str, Any]:
    """Half the recurring tasks exclude a calendar holding the local date of their first
    fires (skipped, or shifted to the next day)."""
    if fields["schedule_type"] == "once" or rng.random() < 0.5:
        return {}
    day = fields["start_date"].astimezone(ZoneInfo(fields["timezone"])).date()
    day += timedelta(days=rng.choice([0, 0, 1]))
    add_calendar(engine, Calendar(id=f"cal-{task_id}", tenant_id="t1", name="closed",
                                  dates=[day.isoformat()]))
    return {"exclude_calendars": [{"calendar_id": f"cal-{task_id}", "shift": rng.random() < 0.5}]}


def check(seed: int, task: TaskSpec, task_id: str, state: TaskState, engine: Engine) -> None:
    """The task's rows are the fires its preview lists, all run."""
    preview = upcoming_of_new(task, state.created_at, 1000, task_id=task_id)
    if task.exclude_calendars:  # the dates as the API's preview reads them, and its verdict
        refs = task.exclude_calendars
        dates = calendar_dates(engine, "t1", [r.calendar_id for r in refs],
                               range(state.created_at.year - 1, state.created_at.year + 3))
        position = Position(spec=task, task_id=task_id, anchor=state.created_at, next_fire_at=None,
                            calendar=CalendarPlan.of(refs, dates, task.zone()))
        preview = _shown_shifted(upcoming_of_new(task, state.created_at, 1000, task_id=task_id,
                                                 skip=by_calendar(position)), position)
    rows = executions(engine, task_id)
    what = f"seed {seed}: {task.model_dump(include=SCHEDULE)}"
    assert state.status is TaskStatus.COMPLETED, what
    # A fire the preview lists as skipped is a SKIPPED row; every other one ran at its instant.
    assert [(row.scheduled_at, row.status, None if row.status == "SKIPPED" else row.instant)
            for row in rows] == [
        (fire.scheduled_at, "SKIPPED", None) if fire.skipped else
        (fire.scheduled_at, "COMPLETED", fire.instant) for fire in preview], what
    if os.environ.get("PREVIEW_SHOW"):
        print(seed, task.cron, task.timezone, task.dst_policy, [(f.local, f.note) for f in preview])
