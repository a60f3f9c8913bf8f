"""How runs wait for their instant: never early, without holding the event loop, and a series'
fire still waiting when the series is withdrawn never runs."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import pytest
from temporalio.testing import ActivityEnvironment

from activities import instant
from activities.agenda import Agenda
from activities.contracts import JobInput, JobResult, SeriesFire, SeriesInput, SeriesResult
from activities.instant import sleep_until_instant
from activities.series import RunRegistry, SeriesRunner
from store.records import ExecutionRecord


async def test_a_run_never_starts_before_its_instant() -> None:
    for _ in range(20):
        at = datetime.now(UTC) + timedelta(milliseconds=15)
        await sleep_until_instant(at)
        assert time.time() >= at.timestamp()


async def test_the_event_loop_runs_on_while_a_run_waits_but_for_the_final_wait() -> None:
    ticks: list[float] = []

    async def ticker() -> None:
        while True:
            ticks.append(time.time())
            await asyncio.sleep(0.001)

    at = datetime.now(UTC) + timedelta(milliseconds=200)
    beat = asyncio.create_task(ticker())
    await sleep_until_instant(at)
    beat.cancel()
    # The loop ran other work through the wait, up to the final wait before the instant.
    assert sum(1 for t in ticks if t < at.timestamp() - instant.FINAL_WAIT_SECONDS) > 10


def _series(*offsets: float, overlap: str = "skip") -> SeriesInput:
    now = datetime.now(UTC)
    fires = [SeriesFire(execution_id=f"t:{i}", scheduled_at=now + timedelta(seconds=o),
                        not_before=now + timedelta(seconds=o)) for i, o in enumerate(offsets)]
    return SeriesInput.model_validate({
        "task_id": "t", "tenant_id": "x", "job": {"type": "handler", "name": "noop"},
        "fires": fires, "overlap": overlap,
    })


def _runner(series: SeriesInput, ran: list[tuple[str, float]], *, runs: RunRegistry | None = None,
            takes: float = 0.0) -> SeriesRunner:
    async def attempt(job_input: JobInput, number: int) -> JobResult:
        ran.append((job_input.execution_id, time.time()))
        await asyncio.sleep(takes)
        return JobResult(started_at=datetime.now(UTC))

    async def write(record: ExecutionRecord) -> None:
        return None

    return SeriesRunner(series, attempt=attempt, write=write, runs=runs or RunRegistry(),
                        agenda=Agenda())


async def test_every_fire_of_several_series_due_together_runs_once_not_before_its_instant() -> None:
    serieses = [_series(0.05, 0.1, 0.15) for _ in range(20)]
    ran: list[list[tuple[str, float]]] = [[] for _ in serieses]
    results = await asyncio.gather(*(
        ActivityEnvironment().run(_runner(s, r).run) for s, r in zip(serieses, ran, strict=True)
    ))
    for series, runs, result in zip(serieses, ran, results, strict=True):
        due = {f.execution_id: f.not_before.timestamp() for f in series.fires}
        assert [i for i, _ in runs] == ["t:0", "t:1", "t:2"]
        assert all(at >= due[i] for i, at in runs)
        assert [o.status for o in result.outcomes] == ["COMPLETED"] * 3 and not result.unrun


async def test_a_withdrawal_leaves_the_waiting_fire_unrun_and_lets_the_running_one_finish() -> None:
    series = _series(0.05, 0.4)
    ran: list[tuple[str, float]] = []
    env = ActivityEnvironment()
    runner = _runner(series, ran, takes=0.2)
    withdrawn = asyncio.create_task(env.run(runner.run))
    await asyncio.sleep(0.15)  # the first run is going, the second fire waits for its instant
    env.cancel()
    result: SeriesResult = await withdrawn
    await asyncio.sleep(0.4)  # past the second instant: nothing more runs
    assert [i for i, _ in ran] == ["t:0"]
    assert [o.execution_id for o in result.outcomes] == ["t:0"]
    assert result.unrun == [series.fires[1].scheduled_at]


async def test_a_fire_due_while_the_run_before_goes_on_is_skipped_under_the_skip_policy() -> None:
    series = _series(0.05, 0.15)
    ran: list[tuple[str, float]] = []
    result = await ActivityEnvironment().run(_runner(series, ran, takes=0.3).run)
    assert [i for i, _ in ran] == ["t:0"]
    assert [(o.execution_id, o.status, o.reason) for o in result.outcomes] == [
        ("t:0", "COMPLETED", None), ("t:1", "SKIPPED", "overlap")]


async def test_a_failed_overlap_lookup_fails_the_series_so_that_it_is_retried() -> None:
    async def lookup(execution_id: str) -> str | None:
        raise RuntimeError("the database is away")

    series = _series(0.05).model_copy(update={"previous_execution_id": "t:earlier"})
    ran: list[tuple[str, float]] = []
    with pytest.raises(RuntimeError, match="the database is away"):
        await ActivityEnvironment().run(_runner(series, ran, runs=RunRegistry(lookup)).run)
    assert ran == []
