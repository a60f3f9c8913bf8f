"""Workload 4, scale: N active recurring tasks (interval, every day, so none fires during the
run): create time, worker and server memory, database sizes, list and get latency."""

from __future__ import annotations

import argparse
import asyncio
import random
import sqlite3
import sys
import time
from typing import Any

import aiohttp
from temporalio.client import Client

from bench.create import post_created, timed
from bench.firing import CONCURRENCY, iso
from bench.measure import Report, Target, fmt, summary, table, targets_table
from bench.stack import SchedulerStack, api_session, drained, file_bytes

GIB = 2**30
MIB = 2**20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of this workload."""
    parser.add_argument("--scale", type=int, default=100_000, help="active recurring tasks")
    parser.add_argument("--scale-requests", type=int, default=300, help="GETs per endpoint for the p99")
    parser.add_argument("--scale-api-workers", type=int, default=1,
                        help="API processes of the scheduler (task-scheduler api --workers)")
    parser.add_argument("--scale-settle", type=float, default=15.0,
                        help="seconds to wait once the work the creates left queued is done, before "
                        "measuring memory and latency")


async def latencies(http: aiohttp.ClientSession, paths: list[str]) -> dict[str, Any]:
    """One client, sequential requests: each request's latency (with its body read)."""
    found = []
    errors = 0
    for path in paths:
        began = time.perf_counter()
        async with http.get(path) as answer:
            await answer.read()
        found.append(time.perf_counter() - began)
        errors += answer.status != 200
    return {"latency_s": summary(found), "errors": errors}


async def run(args: argparse.Namespace) -> Report:
    """Create N recurring tasks through the API, then measure."""
    stack = SchedulerStack("scheduler", api_workers=args.scale_api_workers)
    data: dict[str, Any] = {"tasks": args.scale, "api_workers": args.scale_api_workers}
    try:
        print(f"scale {args.scale}: scheduler ...", flush=True)
        await asyncio.to_thread(stack.start)
        data["idle_worker_rss_mib"] = stack.rss("worker") / MIB
        data["idle_server_rss_mib"] = stack.rss("temporal") / MIB
        start = iso(time.time() + 86400)
        async with api_session(stack, CONCURRENCY) as http:
            def call(i: int) -> Any:
                return lambda: _create(http, i, start)

            data["create"] = await timed([call(i) for i in range(args.scale)], CONCURRENCY)
            print(f"scale: created in {data['create']['seconds']:.0f} s; settling", flush=True)
            # The creates leave first workflow tasks queued behind them (each loads a task
            # into the worker): what is measured is N tasks loaded, so wait until that is done.
            data["drain_s"] = await drained(stack, timeout=3600)
            await asyncio.sleep(args.scale_settle)
            data["worker_rss_mib"] = stack.rss("worker") / MIB
            data["server_rss_mib"] = stack.rss("temporal") / MIB
            data["api_rss_mib"] = stack.rss("api") / MIB
            data["temporal_db_mib"] = file_bytes(stack.temporal_db) / MIB
            data["scheduler_db_mib"] = file_bytes(stack.scheduler_db) / MIB
            with sqlite3.connect(stack.scheduler_db, timeout=30) as db:
                ids = [r[0] for r in db.execute("SELECT id FROM task")]
            data["task_rows"] = len(ids)
            client = await Client.connect(stack.address)
            data["running_workflows"] = (await client.count_workflows(
                "WorkflowType = 'TaskWorkflow' AND ExecutionStatus = 'Running'")).count
            sample = random.Random(7).choices(ids, k=args.scale_requests) if ids else []
            data["list"] = await latencies(http, ["/tasks?limit=100"] * args.scale_requests)
            data["get"] = await latencies(http, [f"/tasks/{i}" for i in sample])
        if dead := stack.check_alive():
            data["notes"] = [f"processes exited: {dead}: {stack.tail(dead[0])}"]
    finally:
        await asyncio.to_thread(stack.stop)
    create = data["create"]
    create, listing, getting = data["create"], data["list"]["latency_s"], data["get"]["latency_s"]
    rows = [
        ["create", (f"{fmt(create['seconds'], ' s')} ({fmt(create['per_s'])}/s, "
                    f"p99 {fmt(create['latency_s']['p99'] * 1000, ' ms')}, errors {create['errors']})")],
        ["queued work done after", fmt(data.get("drain_s"), " s")],
        ["task rows / running workflows", f"{data['task_rows']} / {data['running_workflows']}"],
        ["worker RSS (idle → loaded)",
         f"{fmt(data['idle_worker_rss_mib'], ' MiB')} → {fmt(data['worker_rss_mib'], ' MiB')}"],
        ["server RSS (idle → loaded)",
         f"{fmt(data['idle_server_rss_mib'], ' MiB')} → {fmt(data['server_rss_mib'], ' MiB')}"],
        ["API RSS", fmt(data["api_rss_mib"], " MiB")],
        ["Temporal DB / scheduler DB",
         f"{fmt(data['temporal_db_mib'], ' MiB')} / {fmt(data['scheduler_db_mib'], ' MiB')}"],
        ["GET /tasks?limit=100 p50 / p99",
         f"{fmt(listing['p50'] * 1000, ' ms')} / {fmt(listing['p99'] * 1000, ' ms')}"
         f" (non-200: {data['list']['errors']})"],
        ["GET /tasks/{id} p50 / p99",
         f"{fmt(getting['p50'] * 1000, ' ms')} / {fmt(getting['p99'] * 1000, ' ms')}"
         f" (non-200: {data['get']['errors']})"],
    ]
    targets = [
        Target(f"worker RSS with {args.scale} tasks ≤ 1 GiB", data["worker_rss_mib"], GIB / MIB, " MiB"),
        Target("GET /tasks?limit=100 p99 ≤ 50 ms", data["list"]["latency_s"]["p99"] * 1000, 50.0, " ms"),
        Target("GET /tasks/{id} p99 ≤ 50 ms", data["get"]["latency_s"]["p99"] * 1000, 50.0, " ms"),
        Target("every task running (running workflows)", float(data["running_workflows"]), float(args.scale),
               higher_is_better=True),
    ]
    text = "\n".join([
        f"## Scale: {args.scale} active recurring tasks",
        table(["measure", "value"], rows),
        "",
        targets_table(targets),
        *[f"- note: {n}" for n in data.get("notes", [])],
    ])
    data["targets"] = [vars(t) | {"passed": t.passed} for t in targets]
    return Report("scale", text, data)


async def _create(http: aiohttp.ClientSession, i: int, start: str) -> None:
    await post_created(http, "/task/recurring", {
        "task_name": f"scale-{i}", "job_details": {"type": "handler", "name": "noop"},
        "schedule_type": "interval", "interval_seconds": 86400, "start_date": start})


if __name__ == "__main__":
    from bench.cli import main

    main({"scale": sys.modules[__name__]})
