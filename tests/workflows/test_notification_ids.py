"""A notification's id (`webhook-id`, `Idempotency-Key`) is its own: two runs of one task that
end in one workflow activation are told under two ids, so a receiver deduplicating on the id
drops neither."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter

from sqlalchemy import Engine
from temporalio.testing import WorkflowEnvironment

from activities.handlers import HandlerContext
from outbound.egress import EgressPolicy, guarded_client
from tests.target import TargetServer
from tests.workflows.helpers import handler_job, spec, start_task, task_state, until
from worker.build import build_activities, build_jobs_worker, build_workflow_worker


class Gate:
    """Each run heartbeats until ``go``, then fails."""

    def __init__(self) -> None:
        self.go = asyncio.Event()
        self.started: list[str] = []

    async def __call__(self, ctx: HandlerContext) -> None:
        self.started.append(ctx.execution_id)
        while not self.go.is_set():
            ctx.heartbeat()
            await asyncio.sleep(0.1)
        raise RuntimeError(f"boom {ctx.execution_id}")


async def test_two_runs_failing_in_one_activation_are_told_under_two_ids(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine, target: TargetServer
) -> None:
    gate = Gate()
    queue = f"tq-{uuid.uuid4()}"
    task = spec(schedule_type="interval", interval_seconds=2, overlap_policy="allow",
                max_runs=2, job_details=handler_job("gate"), heartbeat_timeout_seconds=2,
                retry_policy={"max_attempts": 1},
                notify={"url": target.url("/notes"), "events": ["failed"]})
    async with guarded_client(EgressPolicy.from_list(["127.0.0.1"])) as http:
        acts = build_activities(engine=sqlite_engine, http=http, client=dev_env.client,
                                extra_handlers={"gate": gate})
        async with build_jobs_worker(dev_env.client, task_queue=queue, activities=acts):
            async with build_workflow_worker(dev_env.client, task_queue=queue, activities=acts,
                                             max_cached_workflows=0):
                handle = await start_task(dev_env, queue, task)

                async def both_running() -> bool:
                    return len(gate.started) == 2 and len((await task_state(handle)).running) == 2

                await until(both_running, timeout=30)
            # The workflow worker is away while both runs fail: one activation hears both.
            gate.go.set()
            await asyncio.sleep(2)
            async with build_workflow_worker(dev_env.client, task_queue=queue, activities=acts,
                                             max_cached_workflows=0):
                final = await asyncio.wait_for(handle.result(), timeout=60)

                async def both_told() -> bool:
                    return len({r.json()["execution_id"] for r in target.received
                                if r.path == "/notes"}) == 2

                await until(both_told, timeout=30)
    assert final.failure_count == 2
    notes = [r for r in target.received if r.path == "/notes"]
    by_run = {r.json()["execution_id"]: r.headers["webhook-id"] for r in notes}
    assert Counter(by_run.values()).most_common(1)[0][1] == 1, by_run
    for r in notes:  # a retry of one delivery keeps its id
        assert r.headers["webhook-id"] == r.headers["Idempotency-Key"] == by_run[r.json()["execution_id"]]
