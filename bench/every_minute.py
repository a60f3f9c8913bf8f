"""Workload, every minute: N cron tasks `* * * * *` for M minutes, a herd at every minute;
lateness of every run and an exactly-once count, beside bare Temporal (a workflow per task
sleeping to each minute), Temporal Schedules (a cron schedule per task) and APScheduler (cron
triggers).

`python -m bench.every_minute --every-minute-tasks 1000 --every-minute-minutes 5`
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from typing import Any

from bench.firing import HISTORY_LABEL, Fired, Plan, fire_scheduler
from bench.firing_baselines import fire_apscheduler, fire_bare, fire_schedules
from bench.herd import RATE_GUESS, notes
from bench.measure import Report, Target, fmt, ratio, summary, table, targets_table

CRON = "* * * * *"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of this workload."""
    parser.add_argument("--every-minute-tasks", type=int, default=1000, help="cron tasks")
    parser.add_argument("--every-minute-minutes", type=int, default=5, help="fires of each task")
    parser.add_argument("--every-minute-margin", type=float, default=15.0,
                        help="least seconds between the end of creation and the first minute")
    parser.add_argument("--every-minute-systems", default="scheduler,bare,schedules,apscheduler",
                        help="systems to run, in order (comma separated)")


def minute_plan(system: str, args: argparse.Namespace) -> Plan:
    """The first whole minute after creation (at the guessed rate) plus the margin."""
    guess = RATE_GUESS[system]
    ready = time.time() + (args.every_minute_tasks / guess if guess != math.inf else 0.0)
    first = math.ceil((ready + args.every_minute_margin) / 60) * 60.0
    return Plan(once=[], interval_tasks=args.every_minute_tasks, interval_start=first,
                interval_fires=args.every_minute_minutes, interval_every=60, cron=CRON)


async def run(args: argparse.Namespace) -> Report:
    """Run the plan on each chosen system, one after another, each on a fresh server."""
    systems = [s.strip() for s in args.every_minute_systems.split(",") if s.strip()]
    fired: dict[str, Fired] = {}
    for system in systems:
        print(f"every minute: {system} ...", flush=True)

        def plan(system: str = system) -> Plan:
            return minute_plan(system, args)

        if system == "scheduler":
            fired[system] = await fire_scheduler(plan, history_sample=args.history_sample)
        elif system == "bare":
            fired[system] = await fire_bare(plan)
        elif system == "schedules":
            fired[system] = await fire_schedules(plan)
        elif system == "apscheduler":
            fired[system] = await fire_apscheduler(plan)
        else:
            raise SystemExit(f"unknown system {system!r}")
    rows, data, samples, p99 = [], {}, {}, {}
    for system, result in fired.items():
        lateness = result.lateness()
        s, counts = summary(lateness), result.exactly_once()
        p99[system] = s["p99"]
        samples[f"{system} every minute"] = lateness
        rows.append([system, str(counts["expected"]), str(len(lateness)), str(counts["skipped"]),
                     str(counts["lost"]), str(counts["duplicates"]), fmt(s["p50"] * 1000, " ms"),
                     fmt(s["p99"] * 1000, " ms"), fmt(s["max"] * 1000, " ms"),
                     fmt(result.create_seconds, " s"), fmt(result.slack_seconds, " s")])
        data[system] = {"lateness_s": s, "exactly_once": counts, "statuses": dict(result.statuses),
                        "create_seconds": result.create_seconds, "slack_seconds": result.slack_seconds,
                        "notes": result.notes}
    history = fired["scheduler"].cross_check.get("job_start_lateness", []) if "scheduler" in fired else []
    if history:
        s = summary(history)
        rows.append([f"scheduler ({HISTORY_LABEL})", "", str(len(history)), "", "", "",
                     fmt(s["p50"] * 1000, " ms"), fmt(s["p99"] * 1000, " ms"), fmt(s["max"] * 1000, " ms"),
                     "", ""])
    targets = minute_targets(p99)
    text = "\n".join([
        f"## Every minute: {args.every_minute_tasks} cron tasks `{CRON}` for "
        f"{args.every_minute_minutes} minutes",
        table(["system", "runs due", "ran", "skipped", "lost", "dup", "p50", "p99", "max",
               "create", "slack"], rows),
        "",
        targets_table(targets),
        *notes(data),
    ])
    data_out: dict[str, Any] = dict(data)
    data_out["targets"] = [vars(t) | {"passed": t.passed} for t in targets]
    return Report("every_minute", text, data_out, samples)


def minute_targets(p99: dict[str, float]) -> list[Target]:
    """p99 ≤ 2 × APScheduler's, ≤ 0.01 × bare's, ≤ 0.002 × Schedules' (those run)."""
    if "scheduler" not in p99:
        return []
    value = p99["scheduler"]
    bounds = {"apscheduler": 2.0, "bare": 0.01, "schedules": 0.002}
    return [Target(f"every minute p99 ≤ {factor} × {system}", value, factor * p99[system], " s",
                   ratio(value, p99[system]), system)
            for system, factor in bounds.items() if system in p99]


if __name__ == "__main__":
    from bench.cli import main

    main({"every_minute": sys.modules[__name__]})
