"""Workload 1, herd: N one-time tasks all due at one instant T (= end of creation + margin).

`python -m bench.herd --herd 1000,10000` prints p50/p99/max lateness and the drain rate for
the scheduler and the baselines, then the targets with their ratios.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections import Counter
from typing import Any

from aiohttp import web

from bench.firing import HISTORY_LABEL, Fired, Plan, fire_scheduler
from bench.firing_baselines import fire_apscheduler, fire_bare, fire_schedules
from bench.measure import Report, Target, fmt, ratio, summary, table, targets_table

# Creation rates assumed when placing T, so that creating ends before T − margin. The
# scheduler's workers poll as much as the server's backlog asks, so its creates share the
# server with each new task's first workflow task and the dispatch of its run: 31 to 39
# tasks/s for a herd of 10,000 on the 2-core machine (bare leaves its first workflow tasks
# queued behind the starts).
RATE_GUESS = {"scheduler": 25.0, "bare": 100.0, "schedules": 60.0, "apscheduler": math.inf}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of this workload."""
    parser.add_argument("--herd", default="1000,10000", help="herd sizes, comma separated")
    parser.add_argument("--herd-margin", type=float, default=15.0,
                        help="seconds between the end of creation and T (more than any wake lead)")
    parser.add_argument("--schedules-max", type=int, default=1000,
                        help="largest herd also run on Temporal Schedules (they drain slowly)")
    parser.add_argument("--herd-job", choices=["noop", "http"], default="noop",
                        help="the scheduler's job: a noop handler, or a signed HTTP POST to a "
                             "local target (the baselines keep their noop)")


def herd_plan(system: str, size: int, margin: float, job: dict[str, Any] | None = None) -> Plan:
    """All `size` tasks at one whole second, far enough ahead for creation to finish."""
    lead = size / RATE_GUESS[system] + margin if RATE_GUESS[system] != math.inf else 3.0
    return Plan(once=[float(math.ceil(time.time() + lead))] * size, job=job)


def row(label: str, fired: Fired | None, lateness: list[float], size: int) -> list[str]:
    """One table row."""
    s = summary(lateness)
    counts = fired.exactly_once() if fired else {}
    return [
        label, str(size), str(len(lateness)), str(counts.get("lost", "-")), str(counts.get("duplicates", "-")),
        fmt(s["p50"] * 1000, " ms"), fmt(s["p99"] * 1000, " ms"), fmt(s["max"] * 1000, " ms"),
        fmt(fired.drain_rate()) if fired else "-",
        fmt(fired.create_seconds, " s") if fired else "-", fmt(fired.slack_seconds, " s") if fired else "-",
    ]


async def run(args: argparse.Namespace) -> Report:
    """Run every herd size on every system."""
    sizes = [int(s) for s in str(args.herd).split(",") if s.strip()]
    target = await HttpTarget.started() if args.herd_job == "http" else None
    job = None if target is None else {"type": "http", "url": target.url, "method": "POST",
                                       "body": {"herd": True}}
    try:
        return await _run(args, sizes, job, target)
    finally:
        if target is not None:
            await target.stop()


async def _run(args: argparse.Namespace, sizes: list[int], job: dict[str, Any] | None,
               target: HttpTarget | None) -> Report:
    rows: list[list[str]] = []
    targets: list[Target] = []
    data: dict[str, Any] = {}
    samples: dict[str, list[float]] = {}
    for size in sizes:
        systems = ["scheduler", "bare", "apscheduler"]
        if size <= args.schedules_max:
            systems.insert(2, "schedules")
        fired: dict[str, Fired] = {}
        for system in systems:
            print(f"herd {size}: {system} ...", flush=True)

            def plan(system: str = system, size: int = size) -> Plan:
                return herd_plan(system, size, args.herd_margin,
                                 job if system == "scheduler" else None)

            if system == "scheduler":
                # The HTTP job's target is local: let the stack's egress guard reach it.
                allow = {"SCHEDULER_EGRESS_ALLOW": "127.0.0.1"} if job is not None else None
                fired[system] = await fire_scheduler(plan, history_sample=args.history_sample,
                                                     settings=allow)
            elif system == "bare":
                fired[system] = await fire_bare(plan)
            elif system == "schedules":
                fired[system] = await fire_schedules(plan)
            else:
                fired[system] = await fire_apscheduler(plan)
        p99: dict[str, float] = {}
        for system, result in fired.items():
            lateness = result.lateness()
            label = system
            if system == "scheduler":
                label = "scheduler (executions table)" if job is None else (
                    f"scheduler (signed HTTP, {target.signed if target else 0} calls signed)")
            if system == "scheduler" and target is not None:
                # The target knows what an HTTP job delivered: a key it saw twice is a doubled run.
                twice = sum(1 for n in target.keys.values() if n > 1)
                result.doubled = twice
                result.notes.append(f"signed HTTP: {sum(target.keys.values())} deliveries, "
                                    f"{twice} keys delivered more than once")
                target.keys.clear()
                target.signed = 0
            rows.append(row(label, result, lateness, size))
            p99[system] = summary(lateness)["p99"]
            samples[f"{system} n={size}"] = lateness
            data[f"{size}/{system}"] = _data(result, size, lateness)
        history = fired["scheduler"].cross_check.get("job_start_lateness", [])
        if history:
            s = summary(history)
            rows.append([f"scheduler ({HISTORY_LABEL})", str(size), str(len(history)), "", "",
                         fmt(s["p50"] * 1000, " ms"), fmt(s["p99"] * 1000, " ms"), fmt(s["max"] * 1000, " ms"),
                         "", "", ""])
            data[f"{size}/scheduler"]["job_start_history"] = s
        targets += herd_targets(size, p99)
    text = "\n".join([
        "## Herd: N one-time tasks due at one instant",
        table(["system", "N", "runs", "lost", "dup", "p50", "p99", "max", "drain runs/s", "create", "slack"], rows),
        "",
        targets_table(targets),
        *notes(data),
    ])
    data["targets"] = [vars(t) | {"passed": t.passed} for t in targets]
    return Report("herd", text, data, samples)


class HttpTarget:
    """A local HTTP server the scheduler's jobs POST to; counts the signed calls and the calls
    per Idempotency-Key (a key seen twice is a run delivered twice, whatever its attempts)."""

    def __init__(self, runner: web.AppRunner, url: str) -> None:
        self._runner, self.url, self.signed = runner, url, 0
        self.keys: Counter[str] = Counter()

    @classmethod
    async def started(cls) -> HttpTarget:
        app = web.Application()
        runner = web.AppRunner(app, access_log=None)
        target = cls(runner, "")

        async def answer(request: web.Request) -> web.Response:
            await request.read()
            target.signed += "webhook-signature" in request.headers
            target.keys[request.headers.get("Idempotency-Key", "")] += 1
            return web.json_response({"ok": True})

        app.router.add_post("/herd", answer)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        target.url = f"http://{host}:{port}/herd"
        return target

    async def stop(self) -> None:
        await self._runner.cleanup()


def herd_targets(size: int, p99: dict[str, float]) -> list[Target]:
    """Herd of 1,000: p99 ≤ 2 × APScheduler's, ≤ 0.01 × bare's, ≤ 0.002 × Schedules'; of
    10,000: ≤ 3 × APScheduler's and ≤ 0.01 × bare's (the baselines run)."""
    value = p99["scheduler"]
    bounds = {"apscheduler": 2.0, "bare": 0.01, "schedules": 0.002} if size < 5000 else \
        {"apscheduler": 3.0, "bare": 0.01}
    return [Target(f"herd {size} p99 (table) ≤ {factor} × {system}", value, factor * p99[system], " s",
                   ratio(value, p99[system]), system)
            for system, factor in bounds.items() if system in p99]


def _data(result: Fired, size: int, lateness: list[float]) -> dict[str, Any]:
    return {
        "lateness_s": summary(lateness),
        "drain_runs_per_s": result.drain_rate(),
        "exactly_once": result.exactly_once(),
        "create_seconds": result.create_seconds,
        "create_errors": result.create_errors,
        "slack_seconds": result.slack_seconds,
        "statuses": dict(result.statuses),
        "notes": result.notes,
        "cross_check": {k: v for k, v in result.cross_check.items() if k != "job_start_lateness"},
    }


def notes(data: dict[str, Any]) -> list[str]:
    """Anything that went wrong, printed under the tables."""
    lines = []
    for key, value in data.items():
        if not isinstance(value, dict):
            continue
        for note in value.get("notes", [])[:5]:
            lines.append(f"- note {key}: {note}")
        if value.get("slack_seconds", 1) < 0:
            lines.append(f"- WARNING {key}: creation ended after T; lateness of that run is not comparable")
    return ["", *lines] if lines else []


if __name__ == "__main__":
    from bench.cli import main

    main({"herd": sys.modules[__name__]})
