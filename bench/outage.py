"""Workload, outage: N cron tasks `* * * * *` (a third each with missed_run_policy skip,
single_catchup and catchup), the workers stopped for a while and started again. How long
after the workers return until every missed fire is decided (run or SKIPPED with its reason),
and every fire accounted for, beside bare Temporal (a workflow per task sleeping to each
minute, whose missed fires all run when its worker returns).

`python -m bench.outage --outage-tasks 1000 --outage-down 600`
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sqlite3
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from temporalio.client import Client

from bench.baseline import BareInput
from bench.firing import CONCURRENCY, bounded, iso, parse_db_time, sleep_until
from bench.firing_baselines import result_of
from bench.herd import HttpTarget, notes
from bench.measure import Report, Target, fmt, summary, table, targets_table
from bench.stack import TOPOLOGIES, BareStack, SchedulerStack, api_session

POLICIES = ("skip", "single_catchup", "catchup")
WORKER_ROLES = [role for role, _ in TOPOLOGIES["split"]]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of this workload."""
    parser.add_argument("--outage-tasks", type=int, default=1000, help="cron tasks every minute")
    parser.add_argument("--outage-down", type=float, default=600.0, help="seconds the workers are down")
    parser.add_argument("--outage-before", type=int, default=2, help="minutes of fires before the outage")
    parser.add_argument("--outage-after", type=int, default=3, help="minutes of fires after it")
    parser.add_argument("--outage-systems", default="scheduler,bare", help="systems, in order")
    parser.add_argument("--outage-job", choices=["http", "noop"], default="http",
                        help="the scheduler's job: an HTTP POST to a local target that counts "
                             "each run's Idempotency-Key (a key seen twice is a doubled run), or "
                             "a noop handler, whose attempts past the first count as doubled")


class Timeline:
    """Whole minutes the tasks fire at, and when the workers go down and come back."""

    def __init__(self, args: argparse.Namespace, ready: float) -> None:
        self.first: float = math.ceil((ready + 15) / 60) * 60.0
        # Half a minute after a fire, so the outage starts with no run due.
        self.down_at: float = self.first + int(args.outage_before) * 60 - 30
        self.up_at: float = self.down_at + float(args.outage_down)
        minutes = args.outage_before + math.ceil(args.outage_down / 60) + args.outage_after
        self.instants = [self.first + 60 * k for k in range(minutes)]

    def missed(self, instant: float) -> bool:
        """Due while the workers were down."""
        return self.down_at <= instant < self.up_at


async def outage_window(stack: Any, roles: list[str], timeline: Timeline) -> None:
    """Stop the roles at down_at, start them again at up_at."""
    await sleep_until(timeline.down_at)
    await asyncio.to_thread(stack.halt, roles)
    await sleep_until(timeline.up_at)
    await asyncio.to_thread(stack.restart, roles)


def decided_rows(stack: SchedulerStack) -> list[tuple[str, float, str, str | None, int, float, float]]:
    """(task_id, scheduled_at, status, reason, attempts, started_at, decided_at) of every row."""
    with sqlite3.connect(stack.scheduler_db, timeout=30) as db:
        rows = db.execute("SELECT task_id, scheduled_at, status, reason, attempts, started_at,"
                          " coalesce(finished_at, created_at) FROM task_execution").fetchall()
    return [(r[0], parse_db_time(r[1]), r[2], r[3], r[4] or 0, parse_db_time(r[5]),
             parse_db_time(r[6])) for r in rows]


async def run_scheduler(args: argparse.Namespace) -> dict[str, Any]:
    """Create the tasks, stop the workers across fires, and account for every fire."""
    target = await HttpTarget.started() if args.outage_job == "http" else None
    job: dict[str, Any] = {"type": "handler", "name": "noop"} if target is None else {
        "type": "http", "url": target.url, "method": "POST", "body": {"outage": True}}
    # The HTTP job's target is local: let the stack's egress guard reach it.
    stack = SchedulerStack("scheduler", topology="split",
                           settings={} if target is None else {"SCHEDULER_EGRESS_ALLOW": "127.0.0.1"})
    try:
        await asyncio.to_thread(stack.start)
        timeline = Timeline(args, time.time() + args.outage_tasks / 40)
        policy: dict[str, str] = {}
        async with api_session(stack, CONCURRENCY) as http:
            def create(i: int) -> Callable[[], Awaitable[None]]:
                async def go() -> None:
                    chosen = POLICIES[i % len(POLICIES)]
                    async with http.post("/task/recurring", json={
                            "task_name": f"bench-outage-{i}", "job_details": job,
                            "schedule_type": "cron", "cron": "* * * * *", "timezone": "UTC",
                            "missed_run_policy": chosen, "start_date": iso(timeline.first),
                            "end_date": iso(timeline.instants[-1] + 0.5)}) as answer:
                        if answer.status != 201:
                            raise RuntimeError(f"{answer.status} {(await answer.text())[:200]}")
                        policy[(await answer.json())["task_id"]] = chosen
                return go

            outcomes = await bounded([create(i) for i in range(args.outage_tasks)], CONCURRENCY)
        errors = [o for o in outcomes if isinstance(o, Exception)]
        await outage_window(stack, WORKER_ROLES, timeline)
        expected = len(policy) * len(timeline.instants)
        deadline = timeline.instants[-1] + max(300.0, expected / 20)
        rows = decided_rows(stack)
        while time.time() < deadline:
            rows = decided_rows(stack)
            if time.time() > timeline.instants[-1] and sum(r[2] != "RUNNING" for r in rows) >= expected:
                break
            await asyncio.sleep(2)
        result = account(rows, policy, timeline, delivered=None if target is None else target.keys)
        result["create_errors"] = len(errors)
        if errors:
            result["notes"].append(f"{len(errors)} creates failed, first: {errors[0]}")
        return result
    finally:
        await asyncio.to_thread(stack.stop)
        if target is not None:
            await target.stop()


def account(rows: list[tuple[str, float, str, str | None, int, float, float]], policy: dict[str, str],
            timeline: Timeline, delivered: Counter[str] | None = None) -> dict[str, Any]:
    """Each expected fire once; how the missed ones were decided, and when. ``delivered``: the
    HTTP target's calls per Idempotency-Key (a key seen twice is a doubled run); without it
    a job attempt past the first counts as doubled (a noop cannot tell whether one ran)."""
    seen: Counter[tuple[str, float]] = Counter()
    outcome: Counter[str] = Counter()
    decided_after: list[float] = []
    on_time_lateness: list[float] = []
    by_policy: dict[str, list[float]] = {chosen: [] for chosen in POLICIES}
    reruns = 0
    for task_id, scheduled, status, reason, attempts, started, decided in rows:
        if task_id not in policy:
            continue
        seen[(task_id, round(scheduled, 3))] += 1
        reruns += max(0, attempts - 1)
        if timeline.missed(scheduled):
            outcome[f"{policy[task_id]}: {status}{' ' + reason if reason else ''}"] += 1
            decided_after.append(decided - timeline.up_at)
        elif not math.isnan(started):
            on_time_lateness.append(started - scheduled)
            by_policy[policy[task_id]].append(started - scheduled)
    want = {(t, round(i, 3)) for t in policy for i in timeline.instants}
    doubled = reruns if delivered is None else sum(n - 1 for n in delivered.values() if n > 1)
    notes_ = []
    if reruns:
        notes_.append(f"{reruns} job attempts past the first" + (
            " (counted as doubled: a noop cannot tell whether an earlier attempt ran it)"
            if delivered is None else ""))
    if delivered is not None:
        notes_.append(f"HTTP target: {sum(delivered.values())} calls, "
                      f"{sum(1 for n in delivered.values() if n > 1)} keys more than once")
    p99s = {chosen: summary(late)["p99"] for chosen, late in by_policy.items()}
    notes_.append("on-time p99 by missed-run policy: " + ", ".join(
        f"{chosen} {fmt(p99 * 1000, ' ms')}" for chosen, p99 in p99s.items()))
    return {
        "expected": len(want), "missed_fires": sum(timeline.missed(i) for i in timeline.instants) * len(policy),
        "lost": len(want - set(seen)), "duplicates": sum(n - 1 for n in seen.values() if n > 1) + doubled,
        "unexpected": len(set(seen) - want), "outcome": dict(outcome),
        "decided_after_s": summary(decided_after), "on_time_lateness_s": summary(on_time_lateness),
        "on_time_p99_by_policy_s": p99s,
        "notes": notes_,
    }


async def run_bare(args: argparse.Namespace) -> dict[str, Any]:
    """Bare workflows looping over the minutes; the baseline worker down across fires."""
    stack = BareStack("bare")
    try:
        await asyncio.to_thread(stack.start)
        client = await Client.connect(stack.address)
        timeline = Timeline(args, time.time() + args.outage_tasks / 100)
        keys = [f"bare-outage-{i}" for i in range(args.outage_tasks)]
        await bounded([lambda key=key: client.start_workflow(  # type: ignore[misc]
            "BareWorkflow", BareInput(timeline.instants), id=key, task_queue=stack.task_queue)
            for key in keys], CONCURRENCY)
        await outage_window(stack, ["worker"], timeline)
        await sleep_until(timeline.instants[-1])
        results = await bounded([result_of(client, key) for key in keys], 32)
        decided_after, lateness, ran, notes_ = [], [], Counter[tuple[str, float]](), []
        for key, result in zip(keys, results, strict=True):
            if isinstance(result, Exception):
                notes_.append(f"{key}: {result!r}")
                continue
            for instant, started in result:
                ran[(key, round(instant, 3))] += 1
                if timeline.missed(instant):
                    decided_after.append(started - timeline.up_at)
                else:
                    lateness.append(started - instant)
        want = {(k, round(i, 3)) for k in keys for i in timeline.instants}
        return {
            "expected": len(want), "missed_fires": sum(timeline.missed(i) for i in timeline.instants) * len(keys),
            "lost": len(want - set(ran)), "duplicates": sum(n - 1 for n in ran.values() if n > 1),
            "unexpected": len(set(ran) - want), "outcome": {"all: ran late": len(decided_after)},
            "decided_after_s": summary(decided_after), "on_time_lateness_s": summary(lateness),
            "notes": notes_,
        }
    finally:
        await asyncio.to_thread(stack.stop)


async def run(args: argparse.Namespace) -> Report:
    """Each chosen system, one after another, each on a fresh server."""
    systems = [s.strip() for s in args.outage_systems.split(",") if s.strip()]
    runners = {"scheduler": run_scheduler, "bare": run_bare}
    data: dict[str, Any] = {}
    rows = []
    for system in systems:
        print(f"outage: {system} ...", flush=True)
        data[system] = result = await runners[system](args)
        decided, late = result["decided_after_s"], result["on_time_lateness_s"]
        rows.append([system, str(result["expected"]), str(result["missed_fires"]), str(result["lost"]),
                     str(result["duplicates"]), fmt(decided["p50"], " s"), fmt(decided["max"], " s"),
                     fmt(late["p99"] * 1000, " ms"),
                     "; ".join(f"{k} {v}" for k, v in sorted(result["outcome"].items()))])
    targets = [Target(f"outage: {system} fires lost + doubled", float(r["lost"] + r["duplicates"]), 0.0)
               for system, r in data.items() if system == "scheduler"]
    text = "\n".join([
        f"## Outage: {args.outage_tasks} cron tasks every minute, workers down {args.outage_down:g} s",
        table(["system", "fires", "missed", "lost", "dup", "missed decided after return p50",
               "… max", "on-time p99", "how the missed fires ended"], rows),
        "",
        targets_table(targets),
        *notes(data),
    ])
    data["targets"] = [vars(t) | {"passed": t.passed} for t in targets]
    return Report("outage", text, data, {})


if __name__ == "__main__":
    from bench.cli import main

    main({"outage": sys.modules[__name__]})
