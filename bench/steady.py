"""Workload 2, steady: one-time tasks spread evenly over a window, then interval tasks firing
every second; lateness and an exactly-once count of every run.

All tasks are created before the first instant (so creation does not disturb the firing).
Temporal Schedules are not run here: they have whole-second resolution and the spread is
finer (the herd compares them).
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

from bench.firing import Fired, Plan, fire_apscheduler, fire_bare, fire_scheduler
from bench.measure import Report, Target, fmt, summary, table, targets_table

RATE_GUESS = {"scheduler": 40.0, "bare": 100.0, "apscheduler": math.inf}
TARGET_P99_S = 0.010


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of this workload."""
    parser.add_argument("--steady-tasks", type=int, default=600, help="one-time tasks spread over the window")
    parser.add_argument("--steady-seconds", type=float, default=60.0, help="the spread window")
    parser.add_argument("--interval-tasks", type=int, default=100, help="interval tasks (every 1 s)")
    parser.add_argument("--interval-seconds", type=int, default=60, help="how many 1 s fires each")
    parser.add_argument("--steady-margin", type=float, default=15.0)


def steady_plan(system: str, args: argparse.Namespace) -> Plan:
    """The spread starts `margin` after the estimated end of creation; intervals follow it."""
    tasks = args.steady_tasks + args.interval_tasks
    guess = RATE_GUESS[system]
    start = time.time() + (tasks / guess + args.steady_margin if guess != math.inf else 3.0)
    step = args.steady_seconds / max(args.steady_tasks, 1)
    return Plan(
        once=[round(start + i * step, 3) for i in range(args.steady_tasks)],
        interval_tasks=args.interval_tasks,
        interval_start=float(math.ceil(start + args.steady_seconds + 2)),
        interval_fires=args.interval_seconds,
    )


async def run(args: argparse.Namespace) -> Report:
    """Run the plan on the scheduler, bare Temporal and APScheduler."""
    fired: dict[str, Fired] = {}
    for system, fire in (("scheduler", None), ("bare", fire_bare), ("apscheduler", fire_apscheduler)):
        print(f"steady: {system} ...", flush=True)

        def plan(system: str = system) -> Plan:
            return steady_plan(system, args)

        if fire is None:
            fired[system] = await fire_scheduler(plan, history_sample=args.history_sample)
        else:
            fired[system] = await fire(plan)
    rows = []
    data: dict[str, Any] = {}
    samples: dict[str, list[float]] = {}
    for system, result in fired.items():
        counts = result.exactly_once()
        entry: dict[str, Any] = {"exactly_once": counts, "notes": result.notes,
                                 "statuses": dict(result.statuses), "slack_seconds": result.slack_seconds}
        for kind in ("once", "interval"):
            lateness = result.lateness(kind)
            s = summary(lateness)
            label = "scheduler (executions table)" if system == "scheduler" else system
            rows.append([label, kind, str(len(lateness)), fmt(s["p50"] * 1000, " ms"),
                         fmt(s["p99"] * 1000, " ms"), fmt(s["max"] * 1000, " ms")])
            entry[f"{kind}_lateness_s"] = s
            samples[f"{system} {kind}"] = lateness
        rows[-2].append(f"{counts['present']}/{counts['expected']} run, skipped {counts['skipped']}, "
                        f"lost {counts['lost']}, dup {counts['duplicates']}, unexpected {counts['unexpected']}")
        rows[-1].append("")
        entry["cross_check"] = {k: v for k, v in result.cross_check.items() if k != "job_start_lateness"}
        data[system] = entry
    history = fired["scheduler"].cross_check.get("job_start_lateness", [])
    if history:
        s = summary(history)
        rows.append(["scheduler (job start, history)", "both", str(len(history)), fmt(s["p50"] * 1000, " ms"),
                     fmt(s["p99"] * 1000, " ms"), fmt(s["max"] * 1000, " ms"), ""])
        samples["scheduler job start"] = history
        data["scheduler"]["job_start_history_s"] = s
    sched = data["scheduler"]
    targets = [
        Target("steady one-time p99 (table) ≤ 10 ms", sched["once_lateness_s"]["p99"], TARGET_P99_S, " s"),
        Target("steady interval p99 (table) ≤ 10 ms", sched["interval_lateness_s"]["p99"], TARGET_P99_S, " s"),
        Target("no run lost or duplicated (lost + dup)", float(
            sched["exactly_once"]["lost"] + sched["exactly_once"]["duplicates"]), 0.0),
        Target("every due run executed (none skipped)", float(sched["exactly_once"]["skipped"]), 0.0),
    ]
    if history:
        targets.insert(2, Target("steady p99 (job start, history) ≤ 10 ms",
                                 sched["job_start_history_s"]["p99"], TARGET_P99_S, " s"))
    for t, base in zip(targets[:2], ("once", "interval"), strict=True):
        bare = data["bare"][f"{base}_lateness_s"]["p99"]
        t.ratio, t.basis = (t.measured / bare if bare else math.nan), "bare"
    lines = [
        (f"## Steady: {args.steady_tasks} one-time tasks over {args.steady_seconds:g} s, then "
         f"{args.interval_tasks} interval tasks every 1 s for {args.interval_seconds} s"),
        table(["system", "kind", "runs", "p50", "p99", "max", "exactly once"], rows),
        "",
        targets_table(targets),
    ]
    for system, entry in data.items():
        for note in entry["notes"][:5]:
            lines.append(f"- note {system}: {note}")
    data["targets"] = [vars(t) | {"passed": t.passed} for t in targets]
    return Report("steady", "\n".join(lines), data, samples)


if __name__ == "__main__":
    from bench.cli import main

    main(["steady"])
