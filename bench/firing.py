"""Fire a plan of runs on each system and collect when every run started.

A plan is a set of one-time instants (one task each) and optionally some 1 s interval tasks.
Each system gets its own fresh dev server (or none, for APScheduler). Lateness is always
"started − scheduled instant" for each run; exactly-once is checked per (task, instant).
"""

from __future__ import annotations

import asyncio
import math
import random
import sqlite3
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    Client,
)

from bench.stack import SchedulerStack, Stack, api_session, drained

CONCURRENCY = 32
RUN_JOB_ACTIVITY = "run_job"


@dataclass
class Plan:
    """One-time instants (one task each) and interval tasks (every `interval_every` seconds,
    `interval_fires` fires from `interval_start`), all as epoch seconds."""

    once: list[float]
    interval_tasks: int = 0
    interval_start: float = 0.0
    interval_fires: int = 0
    interval_every: int = 1
    # The recurring tasks as cron tasks of this expression (UTC) instead of intervals; its
    # fires must be the interval grid (e.g. `* * * * *` with every 60 from a whole minute).
    cron: str | None = None
    # The scheduler's job: a noop handler unless given (e.g. a signed HTTP call to a target).
    job: dict[str, Any] | None = None
    # One-time tasks whose create was refused (429/503: nothing created): not expected to run.
    refused: set[int] = field(default_factory=set)

    def expected(self) -> dict[str, list[float]]:
        """Task key → the instants it must run at."""
        tasks = {f"once-{i}": [t] for i, t in enumerate(self.once) if i not in self.refused}
        for j in range(self.interval_tasks):
            tasks[f"interval-{j}"] = [self.interval_start + k * self.interval_every
                                      for k in range(self.interval_fires)]
        return tasks

    @property
    def last_instant(self) -> float:
        """When the last run is due."""
        ends = list(self.once)
        if self.interval_tasks:
            ends.append(self.interval_start + (self.interval_fires - 1) * self.interval_every)
        return max(ends)

    @property
    def runs(self) -> int:
        """How many runs are due."""
        return len(self.once) + self.interval_tasks * self.interval_fires


# The CPU window opens this long before the first instant: the scheduler's usual dispatch lead
# (10 s) and a margin, so that the runs sent ahead count (not those of a herd's longer lead).
CPU_WINDOW_AHEAD = 12.0


@dataclass
class Fired:
    """What one system did with a plan."""

    system: str
    plan: Plan
    # (task key, instant) → start times observed (epoch seconds)
    starts: dict[tuple[str, float], list[float]] = field(default_factory=dict)
    create_seconds: float = math.nan
    slack_seconds: float = math.nan  # first instant − end of creation (must be > 0)
    create_errors: int = 0
    notes: list[str] = field(default_factory=list)
    statuses: Counter[str] = field(default_factory=Counter)
    # Runs the scheduler did not run but recorded as SKIPPED (policy), with the reason.
    skipped: dict[tuple[str, float], str] = field(default_factory=dict)
    cross_check: dict[str, Any] = field(default_factory=dict)
    # Job attempts past the first in the scheduler's rows. A no-op job cannot tell whether an
    # earlier attempt ran it (its worker died, or the server gave up on it), so each counts as
    # a doubled run, unless a target counted the deliveries (``doubled``).
    retried: int = 0
    # Runs a target saw more than once (deliveries per Idempotency-Key); None: none counted.
    doubled: int | None = None
    # CPU ms per fire due, by process role (``measure_cpu``; only when asked).
    cpu_per_fire_ms: dict[str, float] = field(default_factory=dict)

    async def measure_cpu(self, stack: Stack, wait: Awaitable[None]) -> None:
        """Run ``wait`` (until every run has finished) and note each role's CPU per fire due,
        from the dispatch lead before the first instant until the stack is idle after the last
        run. Idle CPU counts too: the figure means something only where fires are dense."""
        first = min(min(v) for v in self.plan.expected().values())
        await sleep_until(first - CPU_WINDOW_AHEAD)
        before = stack.cpu()
        await wait
        await self.cpu_since(stack, before, sum(len(v) for v in self.plan.expected().values()))

    async def cpu_since(self, stack: Stack, before: dict[str, float], count: int) -> None:
        """Once the stack is idle, note each role's CPU ms since ``before`` (a ``Stack.cpu``
        reading), per one of ``count``."""
        await drained(stack, timeout=60.0)
        self.cpu_per_fire_ms = cpu_per(before, stack.cpu(), count)

    def add(self, task: str, instant: float, start: float) -> None:
        """Record one observed run start."""
        self.starts.setdefault((task, round(instant, 3)), []).append(start)

    def lateness(self, kind: str | None = None) -> list[float]:
        """Seconds late of the first start of each run (optionally only 'once' or 'interval')."""
        return [
            min(starts) - instant
            for (task, instant), starts in self.starts.items()
            if kind is None or task.startswith(kind)
        ]

    def exactly_once(self) -> dict[str, int]:
        """Runs present, lost (expected but absent), duplicated, and unexpected."""
        want = {(task, round(t, 3)) for task, instants in self.plan.expected().items() for t in instants}
        have = set(self.starts)
        skipped = (want - have) & set(self.skipped)
        lost = sorted(want - have - skipped, key=lambda k: (k[1], k[0]))
        found = []
        if lost:
            found.append("lost runs, first: " + ", ".join(f"{t} at {iso(i)}" for t, i in lost[:4]))
        if skipped:
            found.append(f"runs recorded SKIPPED (not run): {dict(Counter(self.skipped[k] for k in skipped))}")
        if self.retried:
            found.append(f"{self.retried} job attempts past the first" + (
                " (counted as doubled: a no-op cannot tell whether an earlier attempt ran it)"
                if self.doubled is None else "; the target counted the doubled runs"))
        self.notes += [note for note in found if note not in self.notes]
        return {
            "expected": len(want),
            "present": len(want & have),
            "skipped": len(skipped),
            "lost": len(lost),
            "duplicates": sum(len(s) - 1 for s in self.starts.values() if len(s) > 1)
            + (self.retried if self.doubled is None else self.doubled),
            "retried": self.retried,
            "unexpected": len(have - want),
        }

    def drain_rate(self) -> float:
        """Runs per second from the first instant to the last start."""
        if not self.starts:
            return math.nan
        first = min(instant for _, instant in self.starts)
        last = max(min(s) for s in self.starts.values())
        return len(self.starts) / max(last - first, 1e-3)


def iso(epoch: float) -> str:
    """ISO 8601 UTC with milliseconds and Z."""
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_db_time(value: Any) -> float:
    """A datetime read from SQLite (naive UTC text) as epoch seconds."""
    if value is None:
        return math.nan
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


async def bounded(jobs: Iterable[Callable[[], Awaitable[Any]]], limit: int) -> list[Any]:
    """Run coroutine factories with at most `limit` in flight; results in order, errors kept."""
    gate = asyncio.Semaphore(limit)

    async def one(job: Callable[[], Awaitable[Any]]) -> Any:
        async with gate:
            try:
                return await job()
            except Exception as exc:  # noqa: BLE001 - counted by the caller, never hidden
                return exc

    return await asyncio.gather(*(one(j) for j in jobs))


async def sleep_until(epoch: float) -> None:
    """Sleep until the wall clock reaches `epoch`."""
    await asyncio.sleep(max(0.0, epoch - time.time()))


# ----------------------------------------------------------------------------- scheduler
def task_body(key: str, plan: Plan, instants: list[float]) -> tuple[str, dict[str, Any]]:
    """The REST request creating one task of the plan."""
    job = plan.job or {"type": "handler", "name": "noop"}
    if key.startswith("once"):
        return "/task/create", {
            "task_name": f"bench-{key}", "job_details": job, "schedule_type": "once",
            "run_at": iso(instants[0]),
        }
    every: dict[str, Any] = ({"schedule_type": "interval", "interval_seconds": plan.interval_every}
                             if plan.cron is None else
                             {"schedule_type": "cron", "cron": plan.cron, "timezone": "UTC"})
    return "/task/recurring", {
        "task_name": f"bench-{key}", "job_details": job, **every,
        "start_date": iso(plan.interval_start), "end_date": iso(instants[-1] + 0.5),
    }


def cpu_per(before: dict[str, float], after: dict[str, float], count: int) -> dict[str, float]:
    """Each role's CPU ms between two ``Stack.cpu`` readings, per one of ``count``."""
    # A process that exited reads 0: its role counts nothing rather than less than nothing.
    return {role: round(max(0.0, after[role] - before.get(role, 0.0)) * 1000 / max(count, 1), 2)
            for role in after}


def cpu_lines(results: Iterable[tuple[str, Fired]],
              window: str = f"per fire due, from {CPU_WINDOW_AHEAD:g} s before the first instant") -> list[str]:
    """What each system's processes spent per fire (``Fired.measure_cpu``), a line each."""
    return [f"- CPU {window} to idle after the runs, {label}: "
            + ", ".join(f"{role} {ms:.2f} ms" for role, ms in result.cpu_per_fire_ms.items())
            + f" (total {sum(result.cpu_per_fire_ms.values()):.2f} ms)"
            for label, result in results if result.cpu_per_fire_ms]


async def fire_scheduler(plan_at: Callable[[], Plan], *, history_sample: int,
                         settings: dict[str, str] | None = None, cpu: bool = False) -> Fired:
    """The scheduler: tasks created through POST /task/create, runs read from task_execution
    (``settings``: more SCHEDULER_* for its processes; ``cpu``: measure CPU per fire)."""
    stack = SchedulerStack("scheduler", settings=settings or {})
    try:
        await asyncio.to_thread(stack.start)
        plan = plan_at()
        expected = plan.expected()
        fired = Fired("scheduler", plan)
        ids: dict[str, str] = {}
        began = time.time()
        async with api_session(stack, CONCURRENCY) as http:

            def create(key: str) -> Callable[[], Awaitable[None]]:
                async def go() -> None:
                    path, body = task_body(key, plan, expected[key])
                    async with http.post(path, json=body) as answer:
                        if answer.status != 201:
                            raise RuntimeError(f"{answer.status} {(await answer.text())[:200]}")
                        ids[(await answer.json())["task_id"]] = key
                return go

            outcomes = await bounded([create(k) for k in expected], CONCURRENCY)
        errors = [o for o in outcomes if isinstance(o, Exception)]
        fired.create_errors = len(errors)
        if errors:
            fired.notes.append(f"{len(errors)} creates failed, first: {errors[0]}")
        fired.create_seconds = time.time() - began
        fired.slack_seconds = min(min(v) for v in expected.values()) - time.time()
        runs_due = sum(len(expected[key]) for key in ids.values())
        waiting = wait_scheduler(stack, plan, runs_due, fired)
        await (fired.measure_cpu(stack, waiting) if cpu else waiting)
        for task_id, scheduled, started, status, reason, attempts in read_executions(stack):
            fired.statuses[status] += 1
            key = ids.get(task_id)
            if key is None:
                fired.notes.append(f"execution of an unknown task {task_id}")
                continue
            if status == "SKIPPED" or math.isnan(started):
                fired.skipped[(key, round(scheduled, 3))] = reason or status
                continue
            fired.add(key, scheduled, started)
            fired.retried += max(0, attempts - 1)
        if dead := stack.check_alive():
            fired.notes.append(f"processes exited during the run: {dead}: {stack.tail(dead[0])}")
        if history_sample:
            fired.cross_check = await history_cross_check(stack, ids, history_sample)
        fired.cross_check["worker_rss_mib"] = round(stack.rss("worker") / 2**20, 1)
        fired.cross_check["server_rss_mib"] = round(stack.rss("temporal") / 2**20, 1)
        return fired
    finally:
        await asyncio.to_thread(stack.stop)


def read_executions(stack: SchedulerStack) -> list[tuple[str, float, float, str, str | None, int]]:
    """(task_id, scheduled_at, started_at, status, reason, attempts) of every execution row."""
    with sqlite3.connect(stack.scheduler_db, timeout=30) as db:
        rows = db.execute("SELECT task_id, scheduled_at, started_at, status, reason, attempts"
                          " FROM task_execution").fetchall()
    return [(r[0], parse_db_time(r[1]), parse_db_time(r[2]), r[3], r[4], r[5] or 0) for r in rows]


async def wait_scheduler(stack: SchedulerStack, plan: Plan, expected: int, fired: Fired) -> None:
    """Poll the executions table (cheap, off the Temporal path) until every run has finished."""
    await sleep_until(plan.last_instant)
    deadline = plan.last_instant + max(120.0, expected / 10)
    last_count, last_change = -1, time.time()
    while time.time() < deadline:
        with sqlite3.connect(stack.scheduler_db, timeout=30) as db:
            done = db.execute("SELECT count(*) FROM task_execution WHERE status != 'RUNNING'").fetchone()[0]
        if done >= expected:
            return
        if done != last_count:
            last_count, last_change = done, time.time()
        elif time.time() - last_change > 60:
            fired.notes.append(f"no progress for 60 s: {done}/{expected} runs finished")
            return
        await asyncio.sleep(1)
    fired.notes.append(f"timed out waiting: {last_count}/{expected} runs finished")


# The row of the history cross-check. A run dispatched ahead is picked up by a worker before
# its instant and waits there, so for it this is the dispatch, not the job's start: the row is
# shown, not plotted as lateness, and no target is judged on it.
HISTORY_LABEL = "job activity picked up, history"


async def history_cross_check(stack: SchedulerStack, ids: dict[str, str], sample: int) -> dict[str, Any]:
    """When a worker picked up each run's job activity (`ActivityTaskStarted`), from each
    workflow's Temporal history, minus the scheduled instant.

    The executions table holds the job's own start. For a run sent without a lead, the pick-up
    is the same start, measured the way the bare baseline is (job activity start − scheduled
    instant); for a run sent ahead it is the dispatch.
    Only the latest run of each workflow is read (a continued-as-new task shows its recent
    fires).
    """
    client = await Client.connect(stack.address)
    chosen = random.Random(7).sample(sorted(ids), min(sample, len(ids)))

    def one(task_id: str) -> Callable[[], Awaitable[list[tuple[str, float]]]]:
        async def go() -> list[tuple[str, float]]:
            history = await client.get_workflow_handle(f"task-{task_id}").fetch_history()
            scheduled: dict[int, str] = {}
            found = []
            for event in history.events:
                if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                    attrs = event.activity_task_scheduled_event_attributes
                    if attrs.activity_type.name == RUN_JOB_ACTIVITY:
                        scheduled[event.event_id] = attrs.activity_id
                elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                    run = scheduled.get(event.activity_task_started_event_attributes.scheduled_event_id)
                    if run is not None:
                        found.append((run, event.event_time.ToDatetime(UTC).timestamp()))
            return found
        return go

    began = time.time()
    outcomes = await bounded([one(t) for t in chosen], 16)
    lateness = []
    for outcome in outcomes:
        if isinstance(outcome, Exception):
            continue
        for run_id, started in outcome:
            # A run sent again while its first activity is still out has "#n" after its id.
            stamp = run_id.split(":", 1)[1].split("#", 1)[0]
            if stamp.startswith("manual"):
                continue
            lateness.append(started - datetime.fromisoformat(stamp).timestamp())
    return {
        "job_start_lateness": lateness,
        "workflows_read": len(chosen),
        "read_errors": sum(isinstance(o, Exception) for o in outcomes),
        "read_seconds": round(time.time() - began, 1),
    }


# ----------------------------------------------------------------------------- bare
