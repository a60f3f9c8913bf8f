"""Workload 2, steady: one-time tasks spread evenly over a window, then interval tasks firing
every second; lateness and an exactly-once count of every run.

All tasks are created before the first instant (so creation does not disturb the firing).
Temporal Schedules are not run here: they have whole-second resolution and the spread is
finer (the herd compares them). `--steady-topologies single,split,single,split` runs the scheduler
once per listed worker topology, alternating, to compare them within one session.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from typing import Any

from bench.firing import HISTORY_LABEL, Fired, Plan, fire_scheduler
from bench.firing_baselines import fire_apscheduler, fire_bare
from bench.measure import Report, Target, fmt, percentile, summary, table, targets_table
from bench.stack import TOPOLOGIES, WORKER_TOPOLOGY

RATE_GUESS = {"scheduler": 40.0, "bare": 100.0, "apscheduler": math.inf}
TARGET_P99_S = 0.010


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of this workload."""
    parser.add_argument("--steady-tasks", type=int, default=600, help="one-time tasks spread over the window")
    parser.add_argument("--steady-seconds", type=float, default=60.0, help="the spread window")
    parser.add_argument("--interval-tasks", type=int, default=100, help="interval tasks")
    parser.add_argument("--interval-seconds", type=int, default=60, help="how many fires each")
    parser.add_argument("--interval-every", type=int, default=1, help="the interval tasks' period (s)")
    parser.add_argument("--steady-margin", type=float, default=15.0)
    parser.add_argument(
        "--steady-topologies", default=None,
        help="run the scheduler once per listed worker topology, in order, each on a fresh "
             f"stack (comma separated, of {', '.join(TOPOLOGIES)}; e.g. single,split,single,split); "
             "default: the stack's default topology once")
    parser.add_argument("--steady-baselines", default="bare,apscheduler",
                        help="baselines to run after the scheduler (comma separated; empty: none)")


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
        interval_every=args.interval_every,
    )


def scheduler_runs(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(label, topology) of each scheduler run: `scheduler` alone, or one label per listed run."""
    if not args.steady_topologies:
        return [("scheduler", WORKER_TOPOLOGY.get())]
    chosen = [t.strip() for t in args.steady_topologies.split(",") if t.strip()]
    unknown = set(chosen) - set(TOPOLOGIES)
    if unknown:
        raise SystemExit(f"unknown topologies: {sorted(unknown)}; known: {sorted(TOPOLOGIES)}")
    return [(f"scheduler {topology} #{i}", topology) for i, topology in enumerate(chosen, 1)]


async def run(args: argparse.Namespace) -> Report:
    """Run the plan on the scheduler (per topology), then on the chosen baselines."""
    fired: dict[str, Fired] = {}
    for label, topology in scheduler_runs(args):
        print(f"steady: {label} ({topology}) ...", flush=True)
        token = WORKER_TOPOLOGY.set(topology)
        try:
            fired[label] = await fire_scheduler(
                lambda: steady_plan("scheduler", args), history_sample=args.history_sample
            )
        finally:
            WORKER_TOPOLOGY.reset(token)
    baselines = {"bare": fire_bare, "apscheduler": fire_apscheduler}
    for system in (b.strip() for b in args.steady_baselines.split(",") if b.strip()):
        print(f"steady: {system} ...", flush=True)

        def plan(system: str = system) -> Plan:
            return steady_plan(system, args)

        fired[system] = await baselines[system](plan)
    schedulers = [name for name in fired if name.startswith("scheduler")]
    rows = []
    data: dict[str, Any] = {}
    samples: dict[str, list[float]] = {}
    for system, result in fired.items():
        counts = result.exactly_once()
        entry: dict[str, Any] = {"exactly_once": counts, "notes": result.notes,
                                 "statuses": dict(result.statuses), "slack_seconds": result.slack_seconds}
        for kind in ("once", "interval"):
            if kind == "interval" and not args.interval_tasks:
                continue
            lateness = result.lateness(kind)
            s = summary(lateness)
            label = f"{system} (executions table)" if system in schedulers else system
            s["p90"] = percentile(lateness, 90)
            s["over_target"] = sum(late > TARGET_P99_S for late in lateness)
            rows.append([label, kind, str(len(lateness)), fmt(s["p50"] * 1000, " ms"),
                         fmt(s["p90"] * 1000, " ms"), fmt(s["p99"] * 1000, " ms"),
                         fmt(s["max"] * 1000, " ms"), str(s["over_target"]), ""])
            entry[f"{kind}_lateness_s"] = s
            samples[f"{system} {kind}"] = lateness
        rows[-1][-1] = (f"{counts['present']}/{counts['expected']} run, skipped {counts['skipped']}, "
                        f"lost {counts['lost']}, dup {counts['duplicates']}, unexpected {counts['unexpected']}")
        if system in schedulers:
            entry["cross_check"] = {k: v for k, v in result.cross_check.items() if k != "job_start_lateness"}
            history = result.cross_check.get("job_start_lateness", [])
            if history:
                s = summary(history)
                rows.append([f"{system} ({HISTORY_LABEL})", "both", str(len(history)),
                             fmt(s["p50"] * 1000, " ms"), fmt(percentile(history, 90) * 1000, " ms"),
                             fmt(s["p99"] * 1000, " ms"), fmt(s["max"] * 1000, " ms"),
                             str(sum(late > TARGET_P99_S for late in history)), ""])
                entry["job_start_history_s"] = s
        data[system] = entry
    targets = []
    for name in schedulers:
        sched = data[name]
        for kind, what in (("once", "one-time"), ("interval", "interval")):
            if f"{kind}_lateness_s" not in sched:
                continue
            target = Target(f"{name}: steady {what} p99 (table) ≤ 10 ms",
                            sched[f"{kind}_lateness_s"]["p99"], TARGET_P99_S, " s")
            if "bare" in data:
                bare = data["bare"][f"{kind}_lateness_s"]["p99"]
                target.ratio, target.basis = (target.measured / bare if bare else math.nan), "bare"
            targets.append(target)
        targets += [
            Target(f"{name}: no run lost or duplicated (lost + dup)", float(
                sched["exactly_once"]["lost"] + sched["exactly_once"]["duplicates"]), 0.0),
            Target(f"{name}: every due run executed (none skipped)",
                   float(sched["exactly_once"]["skipped"]), 0.0),
        ]
    lines = [
        (f"## Steady: {args.steady_tasks} one-time tasks over {args.steady_seconds:g} s, then "
         f"{args.interval_tasks} interval tasks every {args.interval_every} s, "
         f"{args.interval_seconds} fires each"),
        table(["system", "kind", "runs", "p50", "p90", "p99", "max", "> 10 ms", "exactly once"], rows),
        "",
        targets_table(targets),
    ]
    for system, entry in data.items():
        for note in entry["notes"][:5]:
            lines.append(f"- note {system}: {note}")
    data["topologies"] = dict(scheduler_runs(args))
    data["targets"] = [vars(t) | {"passed": t.passed} for t in targets]
    return Report("steady", "\n".join(lines), data, samples)


if __name__ == "__main__":
    from bench.cli import main

    main({"steady": sys.modules[__name__]})
