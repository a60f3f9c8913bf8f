"""Command line shared by `python -m bench` and each `python -m bench.<workload>`."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Sequence

from bench import create, herd, scale, steady
from bench.measure import Report, machine, plot, write_results

WORKLOADS = {"herd": herd, "steady": steady, "create": create, "scale": scale}


def parser(workloads: Sequence[str]) -> argparse.ArgumentParser:
    """Flags of the chosen workloads plus the shared ones."""
    root = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    if len(workloads) > 1:
        root.add_argument("--only", default=",".join(workloads), help="workloads to run, comma separated")
    root.add_argument("--history-sample", type=int, default=2000,
                      help="scheduler workflows whose Temporal history is read for when a worker picked "
                           "up each job activity (a run's start without a lead, its dispatch with one; "
                           "0: skip)")
    root.add_argument("--no-plot", action="store_true")
    for name in workloads:
        WORKLOADS[name].add_arguments(root.add_argument_group(name))
    return root


def main(workloads: Sequence[str] | None = None, argv: Sequence[str] | None = None) -> None:
    """Run, print each table, write JSON and the plot under bench/results/."""
    chosen = list(workloads or WORKLOADS)
    args = parser(chosen).parse_args(argv)
    if hasattr(args, "only"):
        chosen = [w.strip() for w in args.only.split(",") if w.strip()]
        unknown = set(chosen) - set(WORKLOADS)
        if unknown:
            sys.exit(f"unknown workloads: {sorted(unknown)}")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    info = machine()
    print(f"# bench {info['date']}  commit {info['commit']}  {info['nproc']} cores  {info['ram_gib']} GiB",
          flush=True)
    reports: list[Report] = []
    for name in chosen:
        report = asyncio.run(WORKLOADS[name].run(args))
        print("\n" + report.text + "\n", flush=True)
        reports.append(report)
    path = write_results(reports, vars(args), stamp, info)
    print(f"results: {path}")
    if not args.no_plot:
        image = plot(reports, stamp)
        if image:
            print(f"plot: {image}")
