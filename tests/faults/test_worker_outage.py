"""Fault 2: the only worker is killed -9 across several fire times and comes back a minute
later; each task's missed-run policy decides what runs, and SKIPPED rows say what did not."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from store.models import TaskExecution
from tests.faults.conftest import Stack, wait_healthy
from tests.faults.driver import Api, http_job, interval_task, later, now, once_task
from tests.faults.invariants import audit, plans, settle
from tests.target import TargetServer

EVERY = 5
# A fire found more than 60 s late is missed (workflows/plan.py): the one-time tasks are due
# ONCE_AT into the outage (after the dispatch lead of 5 s and its slack), and found DOWN - ONCE_AT
# (more than 60 s) late.
ONCE_AT = 10
DOWN = 76
POLICIES = ("skip", "single_catchup", "catchup")


@pytest.mark.timeout(240)
async def test_worker_down_across_fire_times_then_missed_run_policies_decide(
    stack: Stack, target: TargetServer
) -> None:
    fleet = stack.fleet
    fleet.start_worker("worker")
    api = Api([await fleet.start_api("api")], stack.key)
    try:
        await wait_healthy(api.bases[0])
        kill_at = later(9)
        back_at = kill_at + timedelta(seconds=DOWN)
        ends = back_at + timedelta(seconds=12)
        ids: dict[str, str] = {}
        for policy in POLICIES:
            ids[f"every-{policy}"] = (await api.create(interval_task(
                f"every-{policy}", http_job(target.url(f"/every/{policy}")), EVERY, until=ends,
                missed_run_policy=policy)))["task_id"]
            # Due during the outage, not yet dispatched when the worker dies.
            ids[f"once-{policy}"] = (await api.create(once_task(
                f"once-{policy}", http_job(target.url(f"/once/{policy}")),
                kill_at + timedelta(seconds=ONCE_AT), missed_run_policy=policy)))["task_id"]
        # Due 3 s into the outage: dispatched ahead (5 s) to the worker that then dies.
        ids["stranded-skip"] = (await api.create(once_task(
            "stranded-skip", http_job(target.url("/stranded")), kill_at + timedelta(seconds=3),
            missed_run_policy="skip")))["task_id"]

        await asyncio.sleep(max(0.0, (kill_at - now()).total_seconds()))
        ran = {r.path for r in target.received}
        assert {f"/every/{p}" for p in POLICIES} <= ran, "every interval task ran before the outage"
        fleet.kill("worker")
        await asyncio.sleep(max(0.0, (back_at - now()).total_seconds()))
        assert not [r for r in target.received if r.at > kill_at + timedelta(seconds=1)]
        fleet.start_worker("worker-again")
        await settle(stack.engine, ids.values(), timeout=90)
    finally:
        await api.close()

    report = audit(stack.engine, target.received, ids.values(), planned=plans(stack.engine, ids.values()))
    print(report.render())
    report.assert_holds()

    def runs(name: str, *, trigger: str | None = None, status: str | None = None, reason: str | None = None) -> list[TaskExecution]:
        return [r for r in report.of_task(ids[name])
                if (trigger is None or r.trigger == trigger) and (status is None or r.status == status)
                and (reason is None or r.reason == reason)]

    missed_fires = DOWN // EVERY - 2  # fires due while down, less the newest (on time) and slack
    # skip: the fires of the outage are recorded as missed, none is caught up.
    assert len(runs("every-skip", reason="missed")) >= missed_fires
    assert not runs("every-skip", trigger="catchup")
    # single_catchup: the newest fire was on time when the worker came back and it runs; the
    # older ones are missed (there is nothing left to catch up).
    assert len(runs("every-single_catchup", reason="missed")) >= missed_fires
    assert len(runs("every-single_catchup", trigger="catchup")) <= 1
    # catchup: every fire of the outage runs late, none is missed.
    assert not runs("every-catchup", reason="missed")
    assert len(runs("every-catchup", trigger="catchup", status="COMPLETED")) >= missed_fires
    # A one-time run found a minute late: skipped, or run once by either catch-up policy.
    assert [(r.status, r.reason) for r in runs("once-skip")] == [("SKIPPED", "missed")]
    for policy in ("single_catchup", "catchup"):
        assert [(r.status, r.trigger) for r in runs(f"once-{policy}")] == [("COMPLETED", "catchup")]
    assert not [r for r in target.received if r.path == "/once/skip"]
    # Dispatched to the worker that died and refused as late when it came back: its row says
    # SKIPPED missed, not RUNNING.
    assert [(r.status, r.reason) for r in runs("stranded-skip")] == [("SKIPPED", "missed")]

    # Under the skip policy no run may start more than a minute after its instant, not even one
    # that had been dispatched ahead to the worker that died.
    too_late = []
    for name in ("every-skip", "stranded-skip"):
        for run in runs(name):
            late = [(r.at - run.scheduled_at).total_seconds() for r in target.received if r.key == run.id]
            if run.status != "SKIPPED" and (not late or min(late) > 60 + EVERY):
                too_late.append(f"{name}: {run.id} {run.status} (trigger {run.trigger}, attempts "
                                f"{run.attempts}) started {min(late, default=-1):.0f}s after its instant")
    assert not too_late, "runs started more than a minute late despite missed_run_policy=skip:\n" + (
        "\n".join(too_late))
