"""Workload, reminders: one-time tasks created open-loop at a steady rate, each due a fixed
delay after its create, so creates and fires overlap. Create latency (from the moment each
create was due to be sent, so a backlog counts) and fire lateness, beside bare Temporal
starting a workflow that sleeps the same delay, at the same offered rate.

`python -m bench.reminders --reminders-rate 100 --reminders-seconds 200 --reminders-delay 60`
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from temporalio.client import Client

from bench.baseline import BareInput
from bench.firing import (
    Fired,
    Plan,
    bounded,
    cpu_lines,
    iso,
    read_executions,
    sleep_until,
    wait_scheduler,
)
from bench.firing_baselines import result_of, wait_visibility
from bench.herd import notes
from bench.measure import Report, Target, fmt, ratio, summary, table, targets_table
from bench.stack import BACKLOG_BOUND, BareStack, SchedulerStack, api_session
from config.settings import ApiSettings

# Creates in flight at most; a create waiting for a slot still counts from when it was due.
IN_FLIGHT = 256


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of this workload."""
    parser.add_argument("--reminders-rate", type=float, default=100.0, help="creates per second")
    parser.add_argument("--reminders-seconds", type=float, default=200.0, help="how long creates go on")
    parser.add_argument("--reminders-delay", type=float, default=60.0, help="each task is due this long after its create")
    parser.add_argument("--reminders-systems", default="scheduler,bare",
                        help="systems to run, in order (comma separated)")


def sends(args: argparse.Namespace, start: float) -> list[float]:
    """When each create is due to be sent (epoch seconds, whole milliseconds like the instants
    the API takes)."""
    count = int(args.reminders_rate * args.reminders_seconds)
    return [round(start + i / args.reminders_rate, 3) for i in range(count)]


class Refused(Exception):
    """The create was refused with Retry-After (429 or 503): nothing was created."""


@dataclass
class Sent:
    """What came back of the creates sent open-loop."""

    latencies: list[float] = field(default_factory=list)  # answered 201, seconds from due
    errors: int = 0
    refused: set[int] = field(default_factory=set)
    refusal_latencies: list[float] = field(default_factory=list)


async def open_loop(due: list[float], send: Callable[[int], Awaitable[None]]) -> Sent:
    """Send create i at due[i] whatever came back before, never again after a refusal."""
    gate = asyncio.Semaphore(IN_FLIGHT)
    sent = Sent()

    async def one(i: int) -> None:
        await sleep_until(due[i])
        async with gate:
            try:
                await send(i)
            except Refused:
                sent.refused.add(i)
                sent.refusal_latencies.append(time.time() - due[i])
                return
            except Exception:  # noqa: BLE001 - counted, and the first reported by the caller
                sent.errors += 1
                return
        sent.latencies.append(time.time() - due[i])

    await asyncio.gather(*(one(i) for i in range(len(due))))
    return sent


async def fire_scheduler(args: argparse.Namespace) -> tuple[Fired, Sent]:
    """POST /task/create open-loop; lateness from the executions table."""
    stack = SchedulerStack("scheduler", settings={BACKLOG_BOUND: str(  # as in production
        ApiSettings.model_fields["max_workflow_backlog_seconds"].default)})
    try:
        await asyncio.to_thread(stack.start)
        due = sends(args, time.time() + 2)
        plan = Plan(once=[round(t + args.reminders_delay, 3) for t in due])
        fired = Fired("scheduler", plan)
        ids: dict[str, str] = {}
        before = stack.cpu()
        async with api_session(stack, IN_FLIGHT, timeout=120) as http:
            async def send(i: int) -> None:
                async with http.post("/task/create", json={
                        "task_name": f"bench-once-{i}", "job_details": {"type": "handler", "name": "noop"},
                        "schedule_type": "once", "run_at": iso(plan.once[i])}) as answer:
                    if answer.status in (429, 503) and "Retry-After" in answer.headers:
                        raise Refused(answer.status)
                    if answer.status != 201:
                        raise RuntimeError(f"{answer.status} {(await answer.text())[:200]}")
                    ids[(await answer.json())["task_id"]] = f"once-{i}"

            sent = await open_loop(due, send)
            fired.create_errors, plan.refused = sent.errors, sent.refused
        await wait_scheduler(stack, plan, len(ids), fired)
        await fired.cpu_since(stack, before, len(ids))
        for task_id, scheduled, started, status, reason, _ in read_executions(stack):
            fired.statuses[status] += 1
            key = ids.get(task_id)
            if key is None:
                continue
            if status == "SKIPPED" or math.isnan(started):
                fired.skipped[(key, round(scheduled, 3))] = reason or status
            else:
                fired.add(key, scheduled, started)
        return fired, sent
    finally:
        await asyncio.to_thread(stack.stop)


async def fire_bare(args: argparse.Namespace) -> tuple[Fired, Sent]:
    """Bare Temporal: start_workflow open-loop, each workflow sleeping to its instant."""
    stack = BareStack("bare")
    try:
        await asyncio.to_thread(stack.start)
        client = await Client.connect(stack.address)
        due = sends(args, time.time() + 2)
        plan = Plan(once=[round(t + args.reminders_delay, 3) for t in due])
        fired = Fired("bare", plan)
        before = stack.cpu()

        async def send(i: int) -> None:
            await client.start_workflow("BareWorkflow", BareInput([plan.once[i]]), id=f"bare-once-{i}",
                                        task_queue=stack.task_queue)

        sent = await open_loop(due, send)
        fired.create_errors = sent.errors
        await wait_visibility(client, "BareWorkflow", len(due), plan, fired)
        results = await _results(client, len(due))
        await fired.cpu_since(stack, before, len(due) - len(sent.refused) - sent.errors)
        for i, result in enumerate(results):
            if isinstance(result, Exception):
                fired.notes.append(f"bare-once-{i}: {result!r}")
                continue
            for instant, started in result:
                fired.add(f"once-{i}", instant, started)
        return fired, sent
    finally:
        await asyncio.to_thread(stack.stop)


async def _results(client: Client, count: int) -> list[Any]:
    return await bounded([result_of(client, f"bare-once-{i}") for i in range(count)], 32)


async def run(args: argparse.Namespace) -> Report:
    """Each chosen system on a fresh server, one after another."""
    systems = [s.strip() for s in args.reminders_systems.split(",") if s.strip()]
    rows, data, samples = [], {}, {}
    spent: list[tuple[str, Fired]] = []
    fire_p99: dict[str, float] = {}
    create_p99: dict[str, float] = {}
    missed_creates: dict[str, int] = {}  # refused or unanswered
    for system in systems:
        print(f"reminders: {system} ...", flush=True)
        if system == "scheduler":
            fired, sent = await fire_scheduler(args)
        elif system == "bare":
            fired, sent = await fire_bare(args)
        else:
            raise SystemExit(f"unknown system {system!r}")
        lateness = fired.lateness()
        spent.append((f"per task created, {system}", fired))
        late, create, counts = summary(lateness), summary(sent.latencies), fired.exactly_once()
        refusal = summary(sent.refusal_latencies)
        fire_p99[system], create_p99[system] = late["p99"], create["p99"]
        missed_creates[system] = len(sent.refused) + fired.create_errors
        samples[f"{system} reminders"] = lateness
        rows.append([system, str(counts["expected"]), str(len(sent.refused)),
                     fmt(refusal["p99"] * 1000, " ms"), str(fired.create_errors),
                     str(counts["skipped"]), str(counts["lost"]), str(counts["duplicates"]),
                     fmt(create["p50"] * 1000, " ms"), fmt(create["p99"] * 1000, " ms"),
                     fmt(late["p50"] * 1000, " ms"), fmt(late["p99"] * 1000, " ms"),
                     fmt(late["max"] * 1000, " ms")])
        data[system] = {"lateness_s": late, "create_latency_s": create, "exactly_once": counts,
                        "create_errors": fired.create_errors, "refused": len(sent.refused),
                        "refusal_latency_s": refusal, "statuses": dict(fired.statuses),
                        "cpu_per_task_ms": fired.cpu_per_fire_ms, "notes": fired.notes}
    targets = []
    if "scheduler" in fire_p99 and "bare" in fire_p99:
        targets = [
            Target("reminders fire p99 ≤ 0.05 × bare", fire_p99["scheduler"], 0.05 * fire_p99["bare"],
                   " s", ratio(fire_p99["scheduler"], fire_p99["bare"]), "bare"),
            Target("reminders create p99 ≤ 1.5 × bare start p99", create_p99["scheduler"],
                   1.5 * create_p99["bare"], " s", ratio(create_p99["scheduler"], create_p99["bare"]), "bare"),
            # The p99s count answered creates only: a create refused or unanswered is a miss too.
            Target("reminders creates refused or unanswered ≤ bare's", missed_creates["scheduler"],
                   missed_creates["bare"]),
        ]
    text = "\n".join([
        f"## Reminders: creates at {args.reminders_rate:g}/s for {args.reminders_seconds:g} s, each "
        f"due {args.reminders_delay:g} s after its create",
        table(["system", "tasks", "refused", "refusal p99", "create errors", "skipped",
               "lost", "dup", "create p50", "create p99", "fire p50", "fire p99", "fire max"], rows),
        "",
        targets_table(targets),
        *notes(data),
        *cpu_lines(spent, window="from the first create"),
    ])
    out: dict[str, Any] = dict(data)
    out["targets"] = [vars(t) | {"passed": t.passed} for t in targets]
    return Report("reminders", text, out, samples)


if __name__ == "__main__":
    from bench.cli import main

    main({"reminders": sys.modules[__name__]})
