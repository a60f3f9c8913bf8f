"""Command line shared by `python -m bench` and each `python -m bench.<workload>`."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Mapping, Sequence
from types import ModuleType

from bench.measure import Report, machine, plot, write_results


def parser(workloads: Mapping[str, ModuleType]) -> argparse.ArgumentParser:
    """Flags of the chosen workloads plus the shared ones."""
    root = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    if len(workloads) > 1:
        root.add_argument("--only", default=",".join(workloads), help="workloads to run, comma separated")
    root.add_argument("--history-sample", type=int, default=2000,
                      help="scheduler workflows whose Temporal history is read for when a worker picked "
                           "up each job activity (a run's start without a lead, its dispatch with one; "
                           "0: skip)")
    root.add_argument("--no-plot", action="store_true")
    for name, workload in workloads.items():
        workload.add_arguments(root.add_argument_group(name))
    return root


# The caller names the workload modules it runs (bench/__main__.py, or a workload run as a
# script), so this module imports none of them: no workload imports its own runner back.
def main(workloads: Mapping[str, ModuleType], argv: Sequence[str] | None = None) -> None:
    """Run the workloads (or those of ``--only``), print each table, write JSON and the plot
    under bench/results/."""
    chosen = list(workloads)
    args = parser(workloads).parse_args(argv)
    if hasattr(args, "only"):
        chosen = [w.strip() for w in args.only.split(",") if w.strip()]
        unknown = set(chosen) - set(workloads)
        if unknown:
            sys.exit(f"unknown workloads: {sorted(unknown)}")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    info = machine()
    print(f"# bench {info['date']}  commit {info['commit']}  {info['nproc']} cores  {info['ram_gib']} GiB",
          flush=True)
    reports: list[Report] = []
    for name in chosen:
        report = asyncio.run(workloads[name].run(args))
        print("\n" + report.text + "\n", flush=True)
        reports.append(report)
    path = write_results(reports, vars(args), stamp, info)
    print(f"results: {path}")
    if not args.no_plot:
        image = plot(reports, stamp)
        if image:
            print(f"plot: {image}")
