"""Measure what one fire of a task costs: Temporal history events, state transitions, and rows
written to the scheduler's database. The figures in docs/capacity.md come from this script.

    .venv/bin/python -m bench.fire_cost              # ~1 minute
    .venv/bin/python -m bench.fire_cost --json out.json --interval 10

It starts its own Temporal dev server (SQLite file in WAL mode, the task search attributes,
no UI), runs the production worker assembly (``worker.build``) against a fresh SQLite task
database, starts tasks with ``workflows.starter.start_task_workflow`` (the call the API makes),
waits for them to end, and then reads:

- each workflow's history, counted by event type;
- each workflow's ``state_transition_count`` (DescribeWorkflowExecution), the unit Temporal's
  history service does its persistence work in;
- every SQL statement and transaction on the task database, attributed to its task.

The cost of one more fire is the difference between a task with ``--runs`` fires and the same
task with 2 fires, divided by the difference in fires: start and end costs cancel out. The same
is measured for ``bench.baseline.BareWorkflow`` (sleep, then one empty activity), the floor any
workflow-per-task design pays.

``--db-seconds N`` also measures how many fires per second the database takes: threads write
the bookkeeping of a fire as the worker does (``store.tasks``: the RUNNING row when the job
starts, then the final row with the task row) for distinct tasks as fast as they can, one
transaction each, and the same writes from 200 concurrent fires through
``store.batch.BatchWriter`` (many fires share a commit), on SQLite (the dev default) and on a
throwaway PostgreSQL cluster with default durability (fsync and synchronous_commit on).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping
from contextlib import AsyncExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, event
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker

from activities.handlers import HandlerContext
from activities.options import RunOptions
from bench.baseline import BareInput, BareWorkflow, empty
from bench.db_fires import free_port, measure_db
from outbound.egress import EgressPolicy, guarded_client
from scheduling.spec import TaskSpec
from scheduling.status import workflow_id
from store.engine import make_engine, migrate
from worker.build import build_activities, build_jobs_worker, build_workflow_worker
from worker.dev import SQLITE_PRAGMA_FLAGS, temporal_binary
from workflows.attributes import DEFINITIONS
from workflows.starter import start_task_workflow

ROOT = Path(__file__).resolve().parent.parent  # the checkout: its commit names the figures
LEAD_SECONDS = 5.0  # SCHEDULER_DISPATCH_LEAD_SECONDS default


# ----------------------------------------------------------------- the dev server
@contextmanager
def dev_server(data: Path) -> Iterator[str]:
    """A headless dev server on a free port, with the SQLite settings of `task-scheduler dev`;
    yields host:port."""
    port = free_port()
    command = [
        temporal_binary(), "server", "start-dev", "--ip", "127.0.0.1", "--port", str(port),
        "--headless", "--db-filename", str(data / "temporal.db"),
        *SQLITE_PRAGMA_FLAGS, "--log-level", "error",
    ]
    for name, kind in DEFINITIONS.items():
        command += ["--search-attribute", f"{name}={kind}"]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("the dev server did not start") from None
                time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


# ----------------------------------------------------------------- database statements
@dataclass
class DbCount:
    statements: Counter[str] = field(default_factory=Counter)  # "INSERT task_execution" -> n
    transactions: int = 0  # commits that carried at least one write of this task


class StatementCounter:
    """Counts statements and commits on an engine, attributed to the tasks they concern.

    A commit counts once for every task that wrote in it, and once in ``commits``: when writes
    of several tasks are batched into one transaction, ``commits`` is the smaller number."""

    def __init__(self, engine: Engine, task_ids: set[str]) -> None:
        self.by_task: dict[str, DbCount] = defaultdict(DbCount)
        self.commits = 0
        self._task_ids = task_ids
        self._lock = threading.Lock()
        self._open: dict[int, set[str]] = defaultdict(set)
        event.listen(engine, "before_execute", self._before_execute)
        event.listen(engine, "commit", self._commit)

    def _owner(self, params: Mapping[str, Any]) -> str | None:
        for value in params.values():
            if isinstance(value, str):
                task = value.split(":", 1)[0]
                if task in self._task_ids:
                    return task
        return None

    def _before_execute(self, conn: Any, clause: Any, multiparams: Any, params: Any,
                        options: Any) -> None:
        try:
            compiled = clause.compile(dialect=conn.dialect)
        except Exception:  # noqa: BLE001 - text() and DDL are not bookkeeping
            return
        # Values come bound in the clause, or as the execute call's parameters (one dict or a list).
        given = [dict(compiled.params), *(p for p in (params, *(multiparams or ()))
                                          if isinstance(p, Mapping))]
        owner = next((o for o in map(self._owner, given) if o is not None), None)
        if owner is None:
            return
        verb = str(compiled).lstrip().split(None, 1)[0].upper()
        table = getattr(getattr(clause, "table", None), "name", "?")
        with self._lock:
            self.by_task[owner].statements[f"{verb} {table}"] += 1
            self._open[id(conn)].add(owner)

    def _commit(self, conn: Any) -> None:
        with self._lock:
            owners = self._open.pop(id(conn), set())
            if owners:
                self.commits += 1
            for owner in owners:
                self.by_task[owner].transactions += 1


# ----------------------------------------------------------------- scenarios
@dataclass
class Scenario:
    name: str
    spec: dict[str, Any]
    lead: float
    task_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    fires: int = 1
    bare: bool = False  # bench.baseline.BareWorkflow instead of TaskWorkflow

    @property
    def workflow_id(self) -> str:
        return f"bare-{self.task_id}" if self.bare else workflow_id(self.task_id)


FLAKY_SEEN: set[str] = set()


async def flaky(ctx: HandlerContext) -> None:
    """Fails the first attempt of every run, succeeds on the second (one retry per fire)."""
    if ctx.execution_id not in FLAKY_SEEN:
        FLAKY_SEEN.add(ctx.execution_id)
        raise RuntimeError("first attempt fails on purpose")


def scenarios(now: datetime, interval: float, runs: int) -> list[Scenario]:
    """The tasks measured; all start at once and fire every ``interval`` seconds."""
    noop = {"type": "handler", "name": "noop"}
    run_at = (now + timedelta(seconds=interval)).isoformat()
    found: list[Scenario] = []
    for lead in (0.0, LEAD_SECONDS):
        tag = f"lead{lead:g}"
        found.append(Scenario(f"once/{tag}", {
            "task_name": "once", "job_details": noop, "schedule_type": "once", "run_at": run_at,
        }, lead))
        for n in (2, runs):
            found.append(Scenario(f"interval x{n}/{tag}", {
                "task_name": f"interval-{n}", "job_details": noop, "schedule_type": "interval",
                "interval_seconds": interval, "max_runs": n,
            }, lead, fires=n))
    found.append(Scenario("interval x2, 1 retry per fire/lead0", {
        "task_name": "flaky", "job_details": {"type": "handler", "name": "flaky"},
        "schedule_type": "interval", "interval_seconds": interval, "max_runs": 2,
        "retry_policy": {"max_attempts": 3, "initial_interval_seconds": 0.5},
    }, 0.0, fires=2))
    for n in (1, 2, runs):
        found.append(Scenario(f"bare x{n}", {}, 0.0, fires=n, bare=True))
    return found


@dataclass
class Measured:
    events: Counter[str]
    history_length: int
    state_transitions: int
    db: DbCount


async def measure(interval: float, runs: int) -> tuple[list[Scenario], dict[str, Measured], int]:
    """Run every scenario on a fresh dev server and read back what each cost."""
    with tempfile.TemporaryDirectory(prefix="fire-cost-") as tmp, dev_server(Path(tmp)) as address:
        client = await Client.connect(address, data_converter=pydantic_data_converter)
        bare_client = await Client.connect(address)  # the bench baseline uses the default converter
        engine = make_engine(f"sqlite:///{tmp}/scheduler.db")
        migrate(engine)
        queue = f"measure-{uuid.uuid4().hex[:8]}"
        now = datetime.now(UTC)
        plan = scenarios(now, interval, runs)
        counter = StatementCounter(engine, {s.task_id for s in plan if not s.bare})
        async with guarded_client(EgressPolicy.from_list(["127.0.0.1"])) as http, AsyncExitStack() as up:
            # The lead is the workflow worker's: one pair of workers, on its own queue, per lead.
            for lead in {s.lead for s in plan if not s.bare}:
                activities = build_activities(engine=engine, http=http, client=client,
                                              extra_handlers={"flaky": flaky},
                                              run_options=RunOptions(lead_seconds=lead))
                lead_queue = f"{queue}-lead{lead:g}"
                await up.enter_async_context(build_workflow_worker(
                    client, task_queue=lead_queue, activities=activities))
                await up.enter_async_context(build_jobs_worker(
                    client, task_queue=lead_queue, activities=activities))
            bare_worker = Worker(bare_client, task_queue=f"{queue}-bare",
                                 workflows=[BareWorkflow], activities=[empty])
            async with bare_worker:
                for s in plan:
                    if s.bare:
                        instants = [(now + timedelta(seconds=interval * k)).timestamp()
                                    for k in range(1, s.fires + 1)]
                        await bare_client.start_workflow(
                            BareWorkflow.run, BareInput(instants=instants), id=s.workflow_id,
                            task_queue=f"{queue}-bare",
                        )
                        continue
                    await start_task_workflow(
                        client, task_queue=f"{queue}-lead{s.lead:g}", task_id=s.task_id,
                        tenant_id="measure", spec=TaskSpec.model_validate(s.spec), created_at=now,
                    )
                for s in plan:
                    await client.get_workflow_handle(s.workflow_id).result()
        results: dict[str, Measured] = {}
        for s in plan:
            handle = client.get_workflow_handle(s.workflow_id)
            history = await handle.fetch_history()
            events = Counter(
                EventType.Name(e.event_type).removeprefix("EVENT_TYPE_") for e in history.events
            )
            info = (await handle.describe()).raw_description.workflow_execution_info
            results[s.name] = Measured(events, info.history_length, info.state_transition_count,
                                       counter.by_task[s.task_id])
        engine.dispose()
    return plan, results, counter.commits


# ----------------------------------------------------------------- report
def _count(event: str) -> Callable[[Measured], float]:
    return lambda m: m.events[event]


ROWS: list[tuple[str, Callable[[Measured], float]]] = [
    ("history events", lambda m: m.history_length),
    *[(f"  {name}", _count(name)) for name in (
        "TIMER_STARTED", "TIMER_FIRED", "TIMER_CANCELED", "ACTIVITY_TASK_SCHEDULED",
        "ACTIVITY_TASK_STARTED", "ACTIVITY_TASK_COMPLETED", "MARKER_RECORDED",
        "WORKFLOW_TASK_SCHEDULED", "WORKFLOW_TASK_STARTED", "WORKFLOW_TASK_COMPLETED",
        "UPSERT_WORKFLOW_SEARCH_ATTRIBUTES",
    )],
    ("state transitions", lambda m: m.state_transitions),
    ("DB transactions (with a write of the task)", lambda m: m.db.transactions),
    ("DB statements", lambda m: sum(m.db.statements.values())),
    ("  INSERT task (upsert)", lambda m: m.db.statements["INSERT task"]),
    ("  INSERT task_execution (upsert)", lambda m: m.db.statements["INSERT task_execution"]),
    ("  UPDATE task", lambda m: m.db.statements["UPDATE task"]),
]


def report(plan: list[Scenario], results: dict[str, Measured], runs: int) -> dict[str, Any]:
    """Print the Markdown tables; return the figures as JSON-able data."""
    data: dict[str, Any] = {"tasks": {}, "per_fire": {}}
    for s in plan:
        m = results[s.name]
        data["tasks"][s.name] = {
            "fires": s.fires, "events": dict(m.events), "history_length": m.history_length,
            "state_transitions": m.state_transitions, "db_transactions": m.db.transactions,
            "db_statements": dict(m.db.statements),
        }
    print("\n### Whole workflow, start to end\n")
    names = [s.name for s in plan]
    print("| measure | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    for label, get in ROWS:
        print(f"| {label} | " + " | ".join(f"{get(results[n]):g}" for n in names) + " |")

    print(f"\n### One more fire: (workflow with {runs} fires - same with 2 fires) / {runs - 2}\n")
    columns = {"lead 0": ("interval x{}/lead0", None),
               "lead 5 s (default)": (f"interval x{{}}/lead{LEAD_SECONDS:g}", None),
               "bare workflow": ("bare x{}", None)}
    print("| measure | " + " | ".join(columns) + " | one retry, extra (lead 0) |")
    print("|---|" + "---:|" * (len(columns) + 1))
    for label, get in ROWS:
        cells = []
        for column, (pattern, _) in columns.items():
            many, two = results[pattern.format(runs)], results[pattern.format(2)]
            value = (get(many) - get(two)) / (runs - 2)
            cells.append(f"{value:g}")
            data["per_fire"].setdefault(column, {})[label.strip()] = value
        retry = (get(results["interval x2, 1 retry per fire/lead0"])
                 - get(results["interval x2/lead0"])) / 2
        cells.append(f"{retry:+g}")
        data["per_fire"].setdefault("retry_extra", {})[label.strip()] = retry
        print(f"| {label} | " + " | ".join(cells) + " |")
    return data


def main() -> None:
    """Measure and print; optionally write the figures as JSON."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--interval", type=float, default=10.0,
                        help="seconds between fires (keep it above the 5 s dispatch lead)")
    parser.add_argument("--runs", type=int, default=5, help="fires of the longer interval task")
    parser.add_argument("--db-seconds", type=float, default=0.0,
                        help="also measure the database's fires/s for this long (0: skip)")
    parser.add_argument("--db-threads", type=int, default=4)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    if args.runs < 3:
        parser.error("--runs must be at least 3")
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                          check=False, capture_output=True, text=True).stdout.strip()
    started = datetime.now(UTC)
    plan, results, commits = asyncio.run(measure(args.interval, args.runs))
    print(f"measured {started:%Y-%m-%d %H:%M} UTC at commit {head or '?'}, interval "
          f"{args.interval:g} s, {os.cpu_count()} CPUs")
    data = report(plan, results, args.runs)
    writes = sum(m.db.transactions for m in results.values())
    data["db_commits_total"] = commits
    print(f"\nDB commits over the whole run: {commits} (tasks took part in {writes}; fewer "
          "commits than that means writes of several tasks shared a commit)")
    if args.db_seconds > 0:
        rates = measure_db(args.db_seconds, args.db_threads)
        data["db_fires_per_second"] = rates
        print(f"\n### Database: fires/s ({args.db_threads} threads, {args.db_seconds:g} s each)\n")
        print("| database | fires/s |")
        print("|---|---:|")
        for name, rate in rates.items():
            print(f"| {name} | {rate:.0f} |")
    if args.json:
        data.update(commit=head, date=started.isoformat(), interval=args.interval)
        args.json.write_text(json.dumps(data, indent=2))


if __name__ == "__main__":
    main()
