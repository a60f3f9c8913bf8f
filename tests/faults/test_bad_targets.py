"""Fault 7: targets that hang forever, answer 500 always, answer 404, or answer slowly: the
timeouts, retries and circuit breaker do what each task says, and the other tasks stay on time."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.faults.conftest import Stack, wait_healthy
from tests.faults.driver import Api, http_job, interval_task, later, now
from tests.faults.invariants import FINAL_TASKS, audit, load, planned_fires, settle
from tests.target import TargetServer

HEALTHY = 4


def _retries(attempts: int, initial: float) -> dict[str, float]:
    return {"max_attempts": attempts, "initial_interval_seconds": initial,
            "backoff_coefficient": 1.5, "maximum_interval_seconds": 2}


@pytest.mark.timeout(180)
async def test_hanging_failing_and_slow_targets(stack: Stack, target: TargetServer) -> None:
    fleet = stack.fleet
    fleet.start_worker("worker")
    api = Api([await fleet.start_api("api")], stack.key)
    ends = later(32)
    # name -> (body, attempts per run, failed runs before the breaker pauses the task)
    failing = {
        "hang": (interval_task("hang", http_job(target.url("/hang"), timeout=2), 4, until=ends,
                               retry_policy=_retries(2, 1), max_consecutive_failures=2), 2, 2),
        "err500": (interval_task("err500", http_job(target.url("/status/500")), 4, until=ends,
                                 retry_policy=_retries(3, 0.5), max_consecutive_failures=3), 3, 3),
        "err404": (interval_task("err404", http_job(target.url("/status/404")), 4, until=ends,
                                 retry_policy=_retries(3, 0.5), max_consecutive_failures=2), 1, 2),
    }
    others = {
        "slow": interval_task("slow", http_job(target.url("/slow/2.5"), timeout=10), 4, until=ends),
        # The job may take 6 s but the task allows one attempt 2 s.
        "run-timeout": interval_task("run-timeout", http_job(target.url("/slow/6"), timeout=30), 4,
                                     until=ends, run_timeout_seconds=2,
                                     retry_policy=_retries(1, 1), max_consecutive_failures=None),
        **{f"healthy-{i}": interval_task(f"healthy-{i}", http_job(target.url(f"/ok/{i}")), 2, until=ends)
           for i in range(HEALTHY)},
    }
    try:
        await wait_healthy(api.bases[0])
        ids = {name: (await api.create(body))["task_id"] for name, (body, _, _) in failing.items()}
        ids |= {name: (await api.create(body))["task_id"] for name, body in others.items()}
        await settle(stack.engine, [ids[n] for n in failing], timeout=60, done=frozenset({"PAUSED"}))
        paused_at = now()
        await settle(stack.engine, [ids[n] for n in others], timeout=(ends - now()).total_seconds() + 40)
    finally:
        await api.close()

    tasks, _ = load(stack.engine, ids.values())
    planned = {ids[n]: planned_fires(tasks[ids[n]]) for n in others}
    report = audit(stack.engine, target.received, ids.values(), planned=planned)
    print(report.render())
    report.assert_holds()
    by_key = target.requests_by_key()

    for name, (_, attempts, breaker) in failing.items():
        task, runs = tasks[ids[name]], report.of_task(ids[name])
        # Auto-paused (settled PAUSED above); a pause still on when the end_date passed has
        # recorded its fires and ended the task COMPLETED, its reason kept.
        assert task.status in ("PAUSED", "COMPLETED"), (name, task.status)
        assert "auto-paused" in (task.status_reason or ""), (name, task.status_reason)
        failed = [r for r in runs if r.status == "FAILED"]
        assert len(failed) == breaker, (name, [(r.status, r.reason) for r in runs])
        for run in failed:
            # Every attempt the retry policy allows was made, each one request, one key.
            assert run.attempts == attempts and by_key[run.id] == attempts, (name, run.attempts, by_key[run.id])
            assert run.dead_letter == "open"
        # Nothing ran after the breaker tripped; the fires up to then are all accounted for.
        assert all(r.at <= paused_at for r in target.received if r.path.startswith(f"/{name}"))
        tripped = max(r.finished_at or r.scheduled_at for r in failed)
        wanted = {f for f in planned_fires(task) if f <= tripped}
        assert wanted <= {r.scheduled_at for r in runs}, name
    hang_errors = {r.error for r in report.of_task(ids["hang"]) if r.status == "FAILED"}
    assert all("timed out after 2" in (e or "") for e in hang_errors), hang_errors

    for run in report.of_task(ids["slow"]):
        assert run.status in ("COMPLETED", "SKIPPED"), (run.status, run.error)
    assert [r for r in report.of_task(ids["slow"]) if r.status == "COMPLETED"]

    # The healthy tasks ran every fire, on time, while the others hung and failed.
    for i in range(HEALTHY):
        runs = report.of_task(ids[f"healthy-{i}"])
        assert {r.status for r in runs} == {"COMPLETED"}, [(r.status, r.reason) for r in runs]
        late = [(min(q.at for q in target.received if q.key == r.id) - r.scheduled_at) for r in runs]
        assert max(late) < timedelta(seconds=1.5), f"healthy-{i} ran up to {max(late)} late"
    assert tasks[ids["healthy-0"]].status in FINAL_TASKS

    # run_timeout_seconds bounds each attempt: the job is stopped 2 s after it started (the
    # request reached the target), whether or not the run was dispatched ahead of its instant.
    overran = []
    for run in report.of_task(ids["run-timeout"]):
        sent = [r.at for r in target.received if r.key == run.id]
        if run.status == "SKIPPED" or not sent:
            continue
        took = ((run.finished_at or now()) - min(sent)).total_seconds()
        if run.status != "FAILED" or took > 2 + 1.5:
            overran.append(f"{run.id} {run.status} after {took:.1f}s")
    assert not overran, f"runs outlived run_timeout_seconds=2: {overran}"
