"""The invariants every fault test ends with (shared/DESIGN.md, Invariants), in one checker.

- every planned fire has its execution row: it ran, or it is recorded SKIPPED with a reason
  (a fire without a row is *lost*);
- every run that ran had its effect once: the target saw exactly one distinct Idempotency-Key
  for it (retries of the same key are allowed), and every key the target saw belongs to a
  run recorded as having run (COMPLETED, FAILED or CANCELLED, never SKIPPED);
- no fire ran under two keys (*duplicated*), and nothing ran at an instant no schedule planned;
- every execution row is final and no task is left RUNNING;
- a run's row carries no skip reason (a run that replaced a skip keeps nothing of it; a
  backfill's run keeps the earlier outcome of its instant there).

The checker reads only what a user can see: the database rows and the requests the target
received. It is shared by the fault tests and by ``bench/soak.py``.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session
from sqlmodel import col

from store.models import Task, TaskExecution
from tests.target import Received

FINAL_ROWS = frozenset({"COMPLETED", "FAILED", "CANCELLED", "SKIPPED"})
RAN = frozenset({"COMPLETED", "FAILED", "CANCELLED"})
FINAL_TASKS = frozenset({"COMPLETED", "FAILED", "CANCELLED"})


def stamp(moment: datetime) -> str:
    """The scheduled-time part of an execution id (``<task_id>:<stamp>``)."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def planned_fires(task: Task, *, until: datetime | None = None) -> list[datetime]:
    """The fire times a task's schedule plans, computed here independently of the scheduler.

    Knows ``once`` and fixed-rate ``interval`` schedules without jitter (what the fault tests
    create); ``until`` cuts the list (e.g. at the moment a test stopped a task)."""
    spec = task.spec
    end = _parse(spec.get("end_date"))
    cut = min(x for x in (end, until) if x is not None) if (end or until) else None
    if spec["schedule_type"] == "once":
        run_at = _parse(spec["run_at"])
        assert run_at is not None
        return [run_at] if cut is None or run_at <= cut else []
    assert spec["schedule_type"] == "interval" and spec.get("interval_mode", "fixed_rate") == "fixed_rate"
    assert not spec.get("jitter_seconds") and not spec.get("start_date"), "not modelled here"
    assert cut is not None, "a recurring task needs an end to have a finite plan"
    step = timedelta(seconds=float(spec["interval_seconds"]))
    fires: list[datetime] = []
    k = 1
    while (fire := task.created_at + k * step) <= cut:
        if spec.get("max_runs") is not None and len(fires) >= spec["max_runs"]:
            break
        fires.append(fire)
        k += 1
    return fires


def plans(engine: Engine, task_ids: Iterable[str], *, until: datetime | None = None) -> dict[str, list[datetime]]:
    """The planned fires of each task (see ``planned_fires``)."""
    tasks, _ = load(engine, task_ids)
    return {task_id: planned_fires(task, until=until) for task_id, task in tasks.items()}


def _parse(value: str | None) -> datetime | None:
    if value is None:
        return None
    moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return moment.astimezone(UTC)


@dataclass
class Audit:
    """What happened to every planned fire of a set of tasks, and what broke an invariant."""

    tasks: int = 0
    expected: int = 0
    executed: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    duplicated: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    not_final: list[str] = field(default_factory=list)
    stuck_tasks: list[str] = field(default_factory=list)
    unrecorded: list[str] = field(default_factory=list)
    without_effect: list[str] = field(default_factory=list)
    skipped_without_reason: list[str] = field(default_factory=list)
    ran_with_skip_reason: list[str] = field(default_factory=list)
    requests: int = 0
    retried_keys: int = 0
    lateness_ms: list[float] = field(default_factory=list)
    rows: list[TaskExecution] = field(default_factory=list)
    task_rows: dict[str, Task] = field(default_factory=dict)

    def violations(self) -> list[str]:
        """Every broken invariant, one line each (empty when all hold)."""
        found = []
        for name in ("lost", "duplicated", "unexpected", "not_final", "stuck_tasks", "unrecorded",
                     "without_effect", "skipped_without_reason", "ran_with_skip_reason"):
            items = getattr(self, name)
            if items:
                found.append(f"{name}: {len(items)}: {sorted(items)[:8]}")
        return found

    def assert_holds(self) -> None:
        problems = self.violations()
        assert not problems, "invariants broken:\n  " + "\n  ".join(problems) + "\n" + self.render()

    def percentile(self, p: float) -> float | None:
        if not self.lateness_ms:
            return None
        ordered = sorted(self.lateness_ms)
        return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]

    def render(self) -> str:
        lat = ", ".join(
            f"p{p:g} {v:.0f} ms" for p in (50, 95, 99, 100) if (v := self.percentile(p)) is not None
        )
        skipped = ", ".join(f"{r}={n}" for r, n in sorted(self.skipped.items())) or "none"
        return (
            f"tasks {self.tasks}; runs expected {self.expected}, executed {self.executed}, "
            f"skipped {sum(self.skipped.values())} ({skipped}), duplicated {len(self.duplicated)}, "
            f"lost {len(self.lost)}, unexpected {len(self.unexpected)}; requests {self.requests} "
            f"({self.retried_keys} keys retried); lateness {lat or 'n/a'}"
        )

    def of_task(self, task_id: str) -> list[TaskExecution]:
        """The task's rows, oldest scheduled first."""
        return sorted((r for r in self.rows if r.task_id == task_id), key=lambda r: r.scheduled_at)


def load(engine: Engine, task_ids: Iterable[str]) -> tuple[dict[str, Task], list[TaskExecution]]:
    """The task rows and execution rows of the given tasks."""
    ids = list(task_ids)
    with Session(engine) as session:
        tasks, rows = {}, []
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            for task in session.scalars(select(Task).where(col(Task.id).in_(chunk))):
                tasks[task.id] = task
            rows += list(session.scalars(select(TaskExecution).where(col(TaskExecution.task_id).in_(chunk))))
        session.expunge_all()
    return tasks, rows


def audit(
    engine: Engine,
    received: Sequence[Received],
    task_ids: Iterable[str],
    *,
    planned: Mapping[str, Sequence[datetime]] | None = None,
    http_tasks: Iterable[str] | None = None,
) -> Audit:
    """Check the invariants for ``task_ids``.

    ``planned``: the fires each task must account for (a row each), by task id; a task absent
    from it is not checked for lost fires. ``http_tasks``: tasks whose job calls the target
    (default: every task whose job is http) and so must leave one key per run there."""
    ids = list(task_ids)
    tasks, rows = load(engine, ids)
    report = Audit(tasks=len(ids), rows=rows, task_rows=tasks)
    by_id = {r.id: r for r in rows}
    callers = set(http_tasks) if http_tasks is not None else {
        t.id for t in tasks.values() if t.spec["job_details"]["type"] == "http"
    }

    report.stuck_tasks = [i for i in ids if i not in tasks or tasks[i].status == "RUNNING"]
    for row in rows:
        if row.status not in FINAL_ROWS:
            report.not_final.append(row.id)
        elif row.status == "SKIPPED":
            report.skipped[row.reason or "?"] += 1
            if not row.reason:
                report.skipped_without_reason.append(row.id)
        elif row.reason is not None and row.trigger != "backfill":  # a backfill's tells the earlier
            report.ran_with_skip_reason.append(f"{row.id} ({row.status}, {row.reason})")

    # What the target saw, by key; only keys of these tasks count.
    prefixes = {f"{i}:": i for i in ids}
    first_seen: dict[str, datetime] = {}
    per_key: Counter[str] = Counter()
    for request in received:
        key = request.key
        if key is None or key.split(":", 1)[0] + ":" not in prefixes:
            continue
        per_key[key] += 1
        first_seen.setdefault(key, request.at)
    report.requests = sum(per_key.values())
    report.retried_keys = sum(1 for n in per_key.values() if n > 1)
    for key in per_key:
        seen = by_id.get(key)
        if seen is None or seen.status not in RAN:
            report.unrecorded.append(f"{key} ({seen.status if seen else 'no row'})")

    # A run ran when its row says so; an http run must have reached the target.
    executed = [r for r in rows if r.status in RAN and (r.attempts or r.started_at or r.id in per_key)]
    report.executed = len(executed)
    for row in executed:
        if row.task_id in callers and row.status == "COMPLETED" and row.id not in per_key:
            report.without_effect.append(row.id)

    # Two distinct keys for one fire would be a doubled run.
    fired: dict[tuple[str, str], set[str]] = defaultdict(set)
    # A manual run is its own (numbered) fire.
    for row in executed:
        fired[(row.task_id, row.id if row.trigger == "manual" else stamp(row.scheduled_at))].add(row.id)
    for key in per_key:
        task_id, _, rest = key.partition(":")
        fired[(task_id, key if rest.startswith("manual-") else rest)].add(key)
    report.duplicated = [f"{t}:{s} {sorted(k)}" for (t, s), k in fired.items() if len(k) > 1]

    for task_id, fires in (planned or {}).items():
        report.expected += len(fires)
        wanted = {stamp(f) for f in fires}
        have = {stamp(r.scheduled_at): r for r in rows if r.task_id == task_id and r.trigger in ("schedule", "catchup")}
        report.lost += [f"{task_id}:{s}" for s in sorted(wanted - set(have))]
        report.unexpected += [
            f"{task_id}:{s} ({r.status})" for s, r in have.items()
            if s not in wanted and r.status in RAN
        ]

    for key, at in first_seen.items():
        scheduled = _parse(key.split(":", 1)[1].removeprefix("manual-"))
        if scheduled is not None and not key.split(":", 1)[1].startswith("manual-"):
            report.lateness_ms.append(max(0.0, (at - scheduled).total_seconds() * 1000))
    return report


async def settle(
    engine: Engine,
    task_ids: Iterable[str],
    *,
    timeout: float,
    done: frozenset[str] = FINAL_TASKS,
) -> None:
    """Wait until every task's status is in ``done`` and none of its rows is RUNNING."""
    ids = list(task_ids)
    deadline = time.monotonic() + timeout
    while True:
        tasks, rows = await asyncio.to_thread(load, engine, ids)
        waiting = [i for i in ids if i not in tasks or tasks[i].status not in done]
        running = [r.id for r in rows if r.status not in FINAL_ROWS]
        if not waiting and not running:
            return
        if time.monotonic() > deadline:
            states = Counter(tasks[i].status if i in tasks else "no row" for i in waiting)
            raise AssertionError(
                f"not settled after {timeout:.0f}s: {len(waiting)} tasks not done {dict(states)} "
                f"(e.g. {waiting[:3]}), rows still RUNNING: {running[:5]}"
            )
        await asyncio.sleep(0.5)
