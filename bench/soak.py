"""Soak (not in CI): many recurring tasks for a long time, a fault injected every
minute, then the invariants of the fault tests over every run.

    .venv/bin/python -m bench.soak                                   # 1,000 tasks / 10 s / 30 min
    .venv/bin/python -m bench.soak --tasks 100 --minutes 3           # a short run

The whole stack runs as real processes on 127.0.0.1: a Temporal dev server on a SQLite file,
PostgreSQL (or SQLite with --database sqlite), two workers and two APIs. Faults rotate through
kill -9 of a worker, kill -9 of an API, kill -9 of the Temporal server (restarted on its file)
and a PostgreSQL outage, in a seeded order (--seed replays it). Tasks are `interval` tasks with
an HTTP job to a local target that records every request by Idempotency-Key, their
missed_run_policy cycling skip / single_catchup / catchup, ending at the end of the soak.

Prints runs expected, executed, skipped (by policy and reason), duplicated (must be 0), lost
(must be 0), and lateness percentiles (target arrival minus scheduled instant); exits 1 when an
invariant is broken.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import sys
import tempfile
import time
from collections import Counter, defaultdict
from datetime import timedelta
from pathlib import Path

from tests.faults.conftest import make_stack, wait_healthy
from tests.faults.driver import Api, http_job, interval_task, now
from tests.faults.invariants import Audit, audit, plans, settle
from tests.faults.processes import PostgresCluster, TemporalServer
from tests.target import TargetServer

POLICIES = ("skip", "single_catchup", "catchup")
WORKERS = ("worker-1", "worker-2")
APIS = ("api-1", "api-2")


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    cli = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    cli.add_argument("--tasks", type=int, default=1000)
    cli.add_argument("--every", type=float, default=10.0, help="interval of each task, seconds")
    cli.add_argument("--minutes", type=float, default=30.0)
    cli.add_argument("--fault-every", type=float, default=60.0, help="seconds between faults")
    cli.add_argument("--database", choices=("postgres", "sqlite"), default="postgres")
    cli.add_argument("--seed", type=int, default=6)
    cli.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    return cli.parse_args(argv)


class Soak:
    """The stack, the faults and the bookkeeping of one soak."""

    def __init__(self, args: argparse.Namespace, root: Path) -> None:
        self.args = args
        self.root = root
        self.rng = random.Random(args.seed)
        self.temporal = TemporalServer(db_file=root / "temporal.db", log=root / "temporal.log")
        self.pg = PostgresCluster() if args.database == "postgres" else None
        self.faults: list[str] = []
        self.t0 = time.monotonic()

    def say(self, line: str) -> None:
        print(f"[{time.monotonic() - self.t0:7.1f}s] {line}", flush=True)

    async def fault(self, kind: str) -> None:
        """Inject one fault and repair it."""
        fleet = self.stack.fleet
        if kind == "worker":
            victim, down = self.rng.choice(WORKERS), self.rng.uniform(5, 15)
            self.say(f"fault: kill -9 {victim}, back in {down:.0f}s")
            fleet.kill(victim)
            await asyncio.sleep(down)
            fleet.start_worker(victim)
        elif kind == "api":
            victim, down = self.rng.choice(APIS), self.rng.uniform(3, 10)
            self.say(f"fault: kill -9 {victim}, back in {down:.0f}s")
            fleet.kill(victim)
            await asyncio.sleep(down)
            await fleet.start_api(victim)
        elif kind == "temporal":
            down = self.rng.uniform(5, 20)
            self.say(f"fault: kill -9 the Temporal server, restarted on its file in {down:.0f}s")
            self.temporal.kill()
            await asyncio.sleep(down)
            await self.temporal.start()
        else:
            assert self.pg is not None
            down = self.rng.uniform(10, 30)
            self.say(f"fault: PostgreSQL stopped for {down:.0f}s")
            await asyncio.to_thread(self.pg.stop)
            await asyncio.sleep(down)
            await asyncio.to_thread(self.pg.start)
        self.faults.append(kind)

    async def inject(self, until: float) -> None:
        kinds = ["worker", "api", "temporal"] + (["database"] if self.pg else [])
        order: list[str] = []
        while True:
            await asyncio.sleep(self.args.fault_every)
            if time.monotonic() > until - 15:  # a fault after the last fires proves nothing
                return
            if not order:
                order = self.rng.sample(kinds, len(kinds))
            await self.fault(order.pop(0))

    async def run(self) -> Audit:
        args = self.args
        target = TargetServer()
        await target.start()
        await self.temporal.start()
        if self.pg:
            self.pg.init()
            self.pg.start()
        url = self.pg.url if self.pg else f"sqlite:///{self.root / 'scheduler.db'}"
        self.stack = make_stack(self.root, temporal=self.temporal.address, database_url=url,
                                rate_limit_writes="10000/second", rate_limit_reads="10000/second",
                                reconcile_interval_seconds="30")
        fleet = self.stack.fleet
        try:
            for name in WORKERS:
                fleet.start_worker(name)
            bases = [await fleet.start_api(name) for name in APIS]
            await wait_healthy(bases[0], timeout=120)
            api = Api(bases, self.stack.key, timeout=60)
            ends = now() + timedelta(minutes=args.minutes)
            gate = asyncio.Semaphore(16)

            async def create(i: int) -> str:
                body = interval_task(f"soak-{i}", http_job(target.url(f"/soak/{i}")), args.every,
                                     until=ends, missed_run_policy=POLICIES[i % len(POLICIES)],
                                     heartbeat_timeout_seconds=10)
                async with gate:
                    return str((await api.create(body, key=f"soak-{args.seed}-{i}", within=300))["task_id"])

            self.say(f"creating {args.tasks} tasks every {args.every:g}s until {ends:%H:%M:%S} UTC")
            ids = await asyncio.gather(*(create(i) for i in range(args.tasks)))
            self.say(f"created; faults every {args.fault_every:g}s")
            until = time.monotonic() + (ends - now()).total_seconds()
            await self.inject(until)
            self.say("faults over; waiting for the last runs")
            await settle(self.stack.engine, ids, timeout=max(0.0, until - time.monotonic()) + 300)
            await api.close()
            self.say("settled")
            return audit(self.stack.engine, target.received, ids, planned=plans(self.stack.engine, ids))
        finally:
            fleet.close()
            self.temporal.kill()
            await target.stop()
            if self.pg:
                self.pg.destroy()


def breakdown(report: Audit) -> str:
    """Runs by missed_run_policy: expected, executed, skipped by reason, lost."""
    policy_of = {t.id: t.spec.get("missed_run_policy") or "default" for t in report.task_rows.values()}
    executed: Counter[str] = Counter()
    skipped: dict[str, Counter[str]] = defaultdict(Counter)
    for row in report.rows:
        policy = policy_of[row.task_id]
        if row.status == "SKIPPED":
            skipped[policy][row.reason or "?"] += 1
        elif row.status in ("COMPLETED", "FAILED", "CANCELLED"):
            executed[policy] += 1
    lost = Counter(policy_of[i.split(":", 1)[0]] for i in report.lost)
    lines = ["| missed_run_policy | executed | skipped (by reason) | lost |", "|---|---|---|---|"]
    for policy in sorted(set(policy_of.values())):
        reasons = ", ".join(f"{r} {n}" for r, n in sorted(skipped[policy].items())) or "0"
        lines.append(f"| {policy} | {executed[policy]} | {sum(skipped[policy].values())} ({reasons}) "
                     f"| {lost[policy]} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    root = Path(tempfile.mkdtemp(prefix="ts-soak-"))
    soak = Soak(args, root)
    print(f"# soak: {args.tasks} tasks every {args.every:g}s for {args.minutes:g} min, a fault every "
          f"{args.fault_every:g}s, {args.database}, seed {args.seed}; work dir {root}", flush=True)
    try:
        report = asyncio.run(soak.run())
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    scheduler_lateness = sorted(r.lateness_ms for r in report.rows if r.lateness_ms is not None)

    def pct(values: list[float], p: float) -> str:
        return f"{values[min(len(values) - 1, max(0, round(p / 100 * len(values)) - 1))]:.0f}" if values else "n/a"

    print(f"\nfaults injected: {len(soak.faults)} ({', '.join(soak.faults) or 'none'})")
    print(f"runs expected   {report.expected}")
    print(f"executed        {report.executed}")
    print(f"skipped         {sum(report.skipped.values())} "
          f"({', '.join(f'{r} {n}' for r, n in sorted(report.skipped.items())) or 'none'})")
    print(f"duplicated      {len(report.duplicated)}")
    print(f"lost            {len(report.lost)}")
    print(f"requests        {report.requests} ({report.retried_keys} keys retried after a fault)")
    lat = report.lateness_ms
    print("lateness ms     " + "  ".join(f"p{p:g} {pct(sorted(lat), p)}" for p in (50, 90, 99, 99.9, 100))
          + "   (target arrival - scheduled)")
    print("                " + "  ".join(f"p{p:g} {pct(scheduler_lateness, p)}" for p in (50, 90, 99, 99.9, 100))
          + "   (execution rows, first attempt)")
    print("\n" + breakdown(report))
    problems = report.violations()
    print("\ninvariants: " + ("hold" if not problems else "BROKEN\n  " + "\n  ".join(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
