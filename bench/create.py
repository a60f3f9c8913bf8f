"""Workload 3, create: POST /task/create from 32 concurrent clients; tasks/s and latency.

Baselines on fresh servers: `client.start_workflow` of the bare workflow and
`client.create_schedule`, both at the same concurrency. Tasks are due a day later, so
nothing fires while creating.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import aiohttp
import psutil  # type: ignore[import-untyped, unused-ignore]
from temporalio.client import Client, Schedule, ScheduleActionStartWorkflow

from bench.baseline import BareInput
from bench.firing import CONCURRENCY, iso
from bench.firing_baselines import once_spec
from bench.measure import Report, Target, fmt, ratio, summary, table, targets_table
from bench.stack import BareStack, SchedulerStack, Stack, api_session, drained

DAY = 86400.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of this workload."""
    parser.add_argument("--create", type=int, default=2000, help="tasks created per system")
    parser.add_argument("--create-concurrency", type=int, default=CONCURRENCY)
    parser.add_argument("--create-rounds", type=int, default=1,
                        help="scheduler and bare runs each, in alternating order, pooled")
    parser.add_argument("--create-api-workers", type=int, default=1,
                        help="API processes of the scheduler (task-scheduler api --workers)")
    parser.add_argument("--create-cron", default="", metavar="EXPR",
                        help="the scheduler creates cron tasks of this expression (Europe/Berlin) "
                        "instead of one-time tasks due in a day; the baselines are unchanged")


async def timed(calls: Sequence[Callable[[], Awaitable[Any]]], concurrency: int,
                keep: bool = False, stack: Stack | None = None) -> dict[str, Any]:
    """Run the calls `concurrency` at a time: rate, latency percentiles and errors (and with
    `keep`, every latency, for pooling rounds; with `stack`, the CPU its processes and this
    driver spent per call, also once the work the calls left queued is done)."""
    cpu_before = _cpu(stack)
    gate = asyncio.Semaphore(concurrency)
    latencies: list[float] = []
    errors: list[str] = []

    async def one(call: Callable[[], Awaitable[Any]]) -> None:
        async with gate:
            began = time.perf_counter()
            try:
                await call()
                latencies.append(time.perf_counter() - began)
            except Exception as exc:  # noqa: BLE001 - counted and shown, never retried
                errors.append(repr(exc)[:200])

    began = time.perf_counter()
    await asyncio.gather(*(one(c) for c in calls))
    elapsed = time.perf_counter() - began
    cpu_after = _cpu(stack)
    result = {"per_s": len(latencies) / elapsed, "seconds": elapsed, "latency_s": summary(latencies),
              "errors": len(errors), "first_error": errors[0] if errors else None,
              "cpu_s": {role: cpu_after[role] - cpu_before.get(role, 0.0) for role in cpu_after},
              "calls": len(calls)}
    if stack is not None:
        # What the calls left for later (e.g. workflow tasks queued behind the starts) is part
        # of their cost: wait until the stack is quiet and count that too.
        result["drain_s"] = await drained(stack)
        cpu_done = _cpu(stack)
        result["cpu_s_drained"] = {role: cpu_done[role] - cpu_before.get(role, 0.0)
                                   for role in cpu_done}
    return result | ({"latencies": latencies} if keep else {})


def _cpu(stack: Stack | None) -> dict[str, float]:
    found = stack.cpu() if stack is not None else {}
    own = psutil.Process().cpu_times()
    return found | {"driver": own.user + own.system}


def pooled(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Rounds of one system as one sample: rate over their summed time, percentiles of all
    their latencies, and each round's rate."""
    latencies = [x for r in rounds for x in r["latencies"]]
    seconds = sum(r["seconds"] for r in rounds)
    errors = [r["first_error"] for r in rounds if r["first_error"]]
    calls = sum(r["calls"] for r in rounds)
    cpu_ms = {role: 1000 * sum(r["cpu_s"].get(role, 0.0) for r in rounds) / calls
              for role in rounds[0]["cpu_s"]}
    drained_ms = {role: 1000 * sum(r["cpu_s_drained"].get(role, 0.0) for r in rounds) / calls
                  for role in rounds[0]["cpu_s_drained"]}
    drain_s = sum(r["drain_s"] for r in rounds)
    return {"per_s": len(latencies) / seconds, "seconds": seconds, "latency_s": summary(latencies),
            "errors": sum(r["errors"] for r in rounds), "first_error": errors[0] if errors else None,
            "rounds_per_s": [r["per_s"] for r in rounds], "cpu_ms_per_task": cpu_ms,
            "drain_s": drain_s, "per_s_drained": len(latencies) / (seconds + drain_s),
            "cpu_ms_per_task_drained": drained_ms}


async def post_created(http: aiohttp.ClientSession, path: str, body: dict[str, Any]) -> None:
    """POST a task; anything but 201 is an error."""
    async with http.post(path, json=body) as answer:
        text = await answer.text()
        if answer.status != 201:
            raise RuntimeError(f"{answer.status} {text[:150]}")


async def scheduler_creates(count: int, concurrency: int, api_workers: int = 1,
                            cron: str = "") -> dict[str, Any]:
    """POST /task/create with one-time tasks due in a day (or cron tasks of ``cron``)."""
    stack = SchedulerStack("scheduler", api_workers=api_workers)
    try:
        await asyncio.to_thread(stack.start)
        async with api_session(stack, concurrency) as http:
            when: dict[str, Any] = (
                {"schedule_type": "cron", "cron": cron, "timezone": "Europe/Berlin"} if cron
                else {"schedule_type": "once", "run_at": iso(time.time() + DAY)})

            def call(i: int) -> Callable[[], Awaitable[None]]:
                return lambda: post_created(http, "/task/create", {
                    "task_name": f"create-{i}", "job_details": {"type": "handler", "name": "noop"},
                    **when})

            return await timed([call(i) for i in range(count)], concurrency, keep=True, stack=stack)
    finally:
        await asyncio.to_thread(stack.stop)


async def temporal_creates(kind: str, count: int, concurrency: int) -> dict[str, Any]:
    """start_workflow (bare) or create_schedule (schedules) on a fresh dev server."""
    stack = BareStack(kind)
    try:
        await asyncio.to_thread(stack.start)
        client = await Client.connect(stack.address)
        due = time.time() + DAY

        def start(i: int) -> Callable[[], Awaitable[Any]]:
            return lambda: client.start_workflow(
                "BareWorkflow", BareInput([due]), id=f"bare-{i}", task_queue=stack.task_queue)

        def schedule(i: int) -> Callable[[], Awaitable[Any]]:
            return lambda: client.create_schedule(f"sched-{i}", Schedule(
                action=ScheduleActionStartWorkflow("ScheduledWorkflow", id=f"sched-{i}",
                                                   task_queue=stack.task_queue),
                spec=once_spec(due)))

        call = start if kind == "bare" else schedule
        return await timed([call(i) for i in range(count)], concurrency, keep=True, stack=stack)
    finally:
        await asyncio.to_thread(stack.stop)


async def run(args: argparse.Namespace) -> Report:
    """Create on each system and compare."""
    kinds = ["scheduler", "bare"]
    runs: dict[str, list[dict[str, Any]]] = {kind: [] for kind in [*kinds, "schedules"]}
    for n in range(args.create_rounds):
        # Alternate the order, so that load which drifts over the run falls on all sides.
        for kind in kinds if n % 2 == 0 else kinds[::-1]:
            print(f"create: {kind} (round {n + 1}) ...", flush=True)
            if kind == "scheduler":
                runs[kind].append(await scheduler_creates(
                    args.create, args.create_concurrency, args.create_api_workers, args.create_cron))
            else:
                runs[kind].append(await temporal_creates(kind, args.create, args.create_concurrency))
    print("create: schedules ...", flush=True)
    runs["schedules"].append(await temporal_creates("schedules", args.create, args.create_concurrency))
    results = {kind: pooled(rounds) for kind, rounds in runs.items()}
    api = f" ({args.create_api_workers} API processes)" if args.create_api_workers > 1 else ""
    what = f", cron tasks `{args.create_cron}`" if args.create_cron else ""
    labels = {"scheduler": f"scheduler POST /task/create{what}{api}",
              "bare": "bare start_workflow", "schedules": "schedules create_schedule"}
    rows = [[labels[k], str(args.create * len(runs[k])), fmt(r["per_s"]),
             fmt(r["latency_s"]["p50"] * 1000, " ms"), fmt(r["latency_s"]["p99"] * 1000, " ms"),
             str(r["errors"]), " / ".join(fmt(x) for x in r["rounds_per_s"]),
             _cpu_cell(r["cpu_ms_per_task"]), fmt(r["drain_s"], " s"), fmt(r["per_s_drained"]),
             _cpu_cell(r["cpu_ms_per_task_drained"])]
            for k, r in results.items()]
    sched, bare = results["scheduler"], results["bare"]
    # A create answers once its task is durable; bare's start leaves its first workflow task
    # queued, so the drained rate compares the same work done.
    targets = [
        Target("create p99 ≤ 1.5 × bare start p99", sched["latency_s"]["p99"] * 1000,
               1.5 * bare["latency_s"]["p99"] * 1000, " ms",
               ratio(sched["latency_s"]["p99"], bare["latency_s"]["p99"]), "bare"),
        Target("drained create rate ≥ 0.9 × bare's", sched["per_s_drained"],
               0.9 * bare["per_s_drained"], "/s", ratio(sched["per_s_drained"], bare["per_s_drained"]),
               "bare", higher_is_better=True),
        Target("create errors", float(sched["errors"]), 0.0),
    ]
    text = "\n".join([
        f"## Create: {args.create} tasks per round at {args.create_concurrency} concurrent clients, "
        f"{args.create_rounds} round(s)",
        table(["system", "N", "tasks/s", "p50", "p99", "errors", "tasks/s per round",
               "CPU ms per task", "drain after", "tasks/s drained", "CPU ms per task drained"],
              rows),
        "",
        "Drained: until the processes use under 0.15 of a core, i.e. the work the creates left "
        "queued (first workflow tasks) is done; the rate then counts that time too.",
        "",
        targets_table(targets),
        *[f"- note {k}: first error {r['first_error']}" for k, r in results.items() if r["errors"]],
    ])
    return Report("create", text, {**results, "targets": [vars(t) | {"passed": t.passed} for t in targets]})


def _cpu_cell(cpu: dict[str, float]) -> str:
    """CPU per task by process, in a fixed order: where the time of one create goes."""
    order = [r for r in ("temporal", "worker", "api", "driver") if r in cpu]
    return " / ".join(f"{'server' if r == 'temporal' else r} {cpu[r]:.1f}" for r in order) + \
        f" = {sum(cpu.values()):.1f}"


if __name__ == "__main__":
    from bench.cli import main

    main({"create": sys.modules[__name__]})
