"""Workload, sustained fires: interval tasks every second at several rates (tasks = fires per
second); at each rate the lateness p99, the runs skipped and their reasons, on the scheduler
and on bare Temporal. The highest rate each holds with p99 ≤ 1 s and nothing skipped, and what
each does beyond it.

`python -m bench.sustained --sustained-rates 25,50,75,100 --sustained-seconds 60`
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections import Counter
from typing import Any

from bench.firing import Fired, Plan, cpu_lines, fire_scheduler
from bench.firing_baselines import fire_bare
from bench.herd import notes
from bench.measure import Report, Target, fmt, summary, table, targets_table

HOLD_P99_S = 1.0
CREATE_GUESS = {"scheduler": 40.0, "bare": 100.0}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of this workload."""
    parser.add_argument("--sustained-rates", default="25,50,75,100",
                        help="fires per second to try (interval tasks every 1 s), comma separated")
    parser.add_argument("--sustained-seconds", type=int, default=60, help="fires of each task")
    parser.add_argument("--sustained-systems", default="scheduler,bare", help="systems, in order")


def rate_plan(system: str, rate: int, seconds: int) -> Plan:
    """`rate` tasks every second from a whole second after their creation."""
    start = float(math.ceil(time.time() + rate / CREATE_GUESS[system] + 15))
    return Plan(once=[], interval_tasks=rate, interval_start=start, interval_fires=seconds,
                interval_every=1)


def held(p99: float, skipped: int, lost: int, duplicates: int) -> bool:
    """A rate is held when the p99 is within bound and every fire ran once."""
    return p99 <= HOLD_P99_S and skipped == lost == duplicates == 0


async def run(args: argparse.Namespace) -> Report:
    """Every rate on every system, each on a fresh server."""
    rates = [int(r) for r in args.sustained_rates.split(",") if r.strip()]
    systems = [s.strip() for s in args.sustained_systems.split(",") if s.strip()]
    rows, data, samples = [], {}, {}
    best: dict[str, float] = {system: 0.0 for system in systems}
    runs: list[tuple[str, Fired]] = []
    for rate in rates:
        for system in systems:
            print(f"sustained {rate}/s: {system} ...", flush=True)

            def plan(system: str = system, rate: int = rate) -> Plan:
                return rate_plan(system, rate, args.sustained_seconds)

            if system == "scheduler":
                fired = await fire_scheduler(plan, history_sample=0, cpu=True)
            elif system == "bare":
                fired = await fire_bare(plan, cpu=True)
            else:
                raise SystemExit(f"unknown system {system!r}")
            runs.append((f"{system} {rate}/s", fired))
            lateness = fired.lateness()
            s, counts = summary(lateness), fired.exactly_once()
            reasons = Counter(fired.skipped.values())
            ok = held(s["p99"], counts["skipped"], counts["lost"], counts["duplicates"])
            if ok:
                best[system] = max(best[system], float(rate))
            samples[f"{system} {rate}/s"] = lateness
            rows.append([system, f"{rate}/s", str(counts["expected"]), str(counts["present"]),
                         ", ".join(f"{n} {r}" for r, n in reasons.items()) or "0",
                         str(counts["lost"]), str(counts["duplicates"]), fmt(s["p50"] * 1000, " ms"),
                         fmt(s["p99"] * 1000, " ms"), fmt(s["max"] * 1000, " ms"),
                         "held" if ok else "not held"])
            data[f"{rate}/{system}"] = {"lateness_s": s, "exactly_once": counts,
                                        "skipped": dict(reasons), "held": ok, "notes": fired.notes,
                                        "cpu_per_fire_ms": fired.cpu_per_fire_ms}
    targets = _targets(best, data)
    text = "\n".join([
        f"## Sustained fires: interval tasks every 1 s, {args.sustained_seconds} fires each",
        table(["system", "rate", "runs due", "ran", "skipped", "lost", "dup", "p50", "p99", "max",
               f"p99 ≤ {HOLD_P99_S:g} s, none skipped"], rows),
        "",
        "Highest rate held: " + ", ".join(f"{system} {fmt(rate)}/s" for system, rate in best.items()),
        "",
        targets_table(targets),
        "",
        *cpu_lines(runs),
        *notes(data),
    ])
    out: dict[str, Any] = dict(data)
    out["highest_rate_held"] = best
    out["targets"] = [vars(t) | {"passed": t.passed} for t in targets]
    return Report("sustained", text, out, samples)


def _targets(best: dict[str, float], data: dict[str, Any]) -> list[Target]:
    """The scheduler holds at least bare's rate; at every rate no run is lost or doubled."""
    found = []
    if "scheduler" in best and "bare" in best:
        found.append(Target("sustained: highest rate held ≥ bare's", best["scheduler"], best["bare"],
                            "/s", None, "bare", higher_is_better=True))
    lost_or_doubled = sum(entry["exactly_once"]["lost"] + entry["exactly_once"]["duplicates"]
                          for key, entry in data.items() if key.endswith("/scheduler"))
    if any(key.endswith("/scheduler") for key in data):
        found.append(Target("sustained: scheduler runs lost + doubled, every rate",
                            float(lost_or_doubled), 0.0))
    return found


if __name__ == "__main__":
    from bench.cli import main

    main({"sustained": sys.modules[__name__]})
