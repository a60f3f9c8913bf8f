"""Instants (not in `make bench`): how soon the runs of many series due at one instant start, in
one process, without a server.

    .venv/bin/python -m bench.instants                      # 100 series of 20 fires, 1 s apart
    .venv/bin/python -m bench.instants --series 200 --fires 10

Each series is the jobs worker's real `run_series` activity (in the SDK's ActivityEnvironment)
with the `noop` handler, writing its rows to a SQLite file through the worker's batch writer.
Automatic garbage collection is off, as the jobs worker's quiet collection keeps it off the
instants. Prints the lateness of the runs (start minus instant, the first instant left out:
the series arrive there), and per instant the median start of the first and the last run.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import tempfile
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from temporalio.testing import ActivityEnvironment

from activities.contracts import HandlerJob, SeriesFire, SeriesInput, SeriesResult
from activities.handlers import load_handlers
from activities.jobs import JobActivities
from store.batch import BatchWriter
from store.engine import make_engine, migrate
from worker.logging import configure_logging


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    cli = argparse.ArgumentParser(prog="python -m bench.instants", description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    cli.add_argument("--series", type=int, default=100, help="series due at the same instants")
    cli.add_argument("--fires", type=int, default=20, help="fires of each series, 1 s apart")
    return cli.parse_args(argv)


async def run(series_count: int, fires: int, directory: Path) -> list[SeriesResult]:
    engine = make_engine(f"sqlite:///{directory / 'instants.db'}")
    migrate(engine)
    writer = BatchWriter(engine)
    first = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=3)
    every = [
        SeriesInput(
            task_id=(task_id := uuid.uuid4().hex), tenant_id="bench",
            job=HandlerJob(type="handler", name="noop"),
            fires=[SeriesFire(execution_id=f"{task_id}-{k}", scheduled_at=first + timedelta(seconds=k),
                              not_before=first + timedelta(seconds=k)) for k in range(fires)],
        )
        for _ in range(series_count)
    ]
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        async with httpx.AsyncClient() as http:
            jobs = JobActivities(http=http, handlers=load_handlers(), client=None,
                                 engine=engine, writer=writer)
            return list(await asyncio.gather(
                *(ActivityEnvironment().run(jobs.run_series, s) for s in every)
            ))
    finally:
        gc.enable()
        await writer.aclose()
        engine.dispose()


def report(results: list[SeriesResult]) -> str:
    outcomes = [o for r in results for o in r.outcomes if o.started_at is not None]
    first = min(o.scheduled_at for o in outcomes)
    late = sorted(o.lateness_ms or 0.0 for o in outcomes if o.scheduled_at != first)
    by_instant: dict[datetime, list[float]] = {}
    for o in outcomes:
        if o.scheduled_at != first and o.started_at is not None:
            by_instant.setdefault(o.scheduled_at, []).append(
                (o.started_at - o.scheduled_at).total_seconds() * 1000)

    def at(q: float) -> float:
        return late[min(len(late) - 1, int(q * len(late)))]

    firsts = statistics.median(min(v) for v in by_instant.values())
    lasts = statistics.median(max(v) for v in by_instant.values())
    per_run = (lasts - firsts) / max(1, len(results) - 1) * 1000
    return "\n".join([
        f"runs {len(late)} (after the first instant): lateness p50 {at(0.5):.2f} ms, "
        f"p90 {at(0.9):.2f} ms, p99 {at(0.99):.2f} ms, max {late[-1]:.2f} ms",
        f"per instant (median): first run {firsts:.2f} ms, last run {lasts:.2f} ms after it; "
        f"{per_run:.0f} us per run in between",
    ])


def main(argv: list[str] | None = None) -> None:
    args = arguments(argv)
    configure_logging("json", "WARNING")
    with tempfile.TemporaryDirectory(prefix="bench-instants-") as directory:
        results = asyncio.run(run(args.series, args.fires, Path(directory)))
    print(report(results))


if __name__ == "__main__":
    main()
