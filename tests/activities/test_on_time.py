"""Waiting for a run's instant and refusing a late one (activities/on_time.py)."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import pytest
from temporalio.activity import ActivityCancellationDetails
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.on_time import (
    WaitingRuns,
    heartbeat_while_waiting,
    refuse_if_late,
    wait_for_instant,
)
from activities.payloads import JobInput
from scheduling.spec import HandlerJob
from scheduling.status import JobFailure


def _run(**fields: object) -> JobInput:
    return JobInput.model_validate({
        "execution_id": "t:1", "task_id": "t", "tenant_id": "x",
        "scheduled_at": datetime.now(UTC), "job": HandlerJob(type="handler", name="noop"), **fields,
    })


async def test_a_run_sent_ahead_starts_at_its_instant() -> None:
    instant = datetime.now(UTC) + timedelta(milliseconds=50)
    await wait_for_instant(_run(not_before=instant), WaitingRuns())
    assert datetime.now(UTC) >= instant


async def test_a_run_past_its_instant_starts_at_once() -> None:
    await asyncio.wait_for(wait_for_instant(
        _run(not_before=datetime.now(UTC) - timedelta(hours=1)), WaitingRuns()), 0.05)


async def _cancelled_while_waiting(details: ActivityCancellationDetails) -> ApplicationError:
    """How a run waiting for its instant an hour away ends when cancelled so."""
    env = ActivityEnvironment()
    waiting = asyncio.create_task(
        env.run(wait_for_instant, _run(not_before=datetime.now(UTC) + timedelta(hours=1)), WaitingRuns()))
    await asyncio.sleep(0.01)
    env.cancel(details)
    with pytest.raises(ApplicationError) as refused:
        await waiting
    return refused.value


async def test_a_run_cancelled_before_its_instant_is_withdrawn() -> None:
    refused = await _cancelled_while_waiting(ActivityCancellationDetails(cancel_requested=True))
    assert refused.type == JobFailure.WITHDRAWN and refused.non_retryable


async def test_a_run_whose_worker_stops_before_its_instant_is_handed_back() -> None:
    # Its workflow sends it again, due at the same instant, as it does a run refused for its
    # tenant's share (workflows/inflight.py).
    refused = await _cancelled_while_waiting(ActivityCancellationDetails(worker_shutdown=True))
    assert refused.type == JobFailure.TENANT_BUSY and refused.non_retryable


async def test_a_run_waiting_when_its_worker_starts_to_stop_is_handed_back_at_once() -> None:
    # A stop with a grace cancels nothing until the grace ends; the waiting run goes back first.
    env = ActivityEnvironment()
    waiting = asyncio.create_task(
        env.run(wait_for_instant, _run(not_before=datetime.now(UTC) + timedelta(hours=1)), WaitingRuns()))
    await asyncio.sleep(0.01)
    env.worker_shutdown()
    with pytest.raises(ApplicationError) as refused:
        await asyncio.wait_for(waiting, 1)
    assert refused.value.type == JobFailure.TENANT_BUSY and refused.value.non_retryable


async def test_a_withdrawal_that_comes_with_the_stop_withdraws_the_run() -> None:
    # Handed back, a run withdrawn at the same moment would be sent again.
    env = ActivityEnvironment()
    waiting = asyncio.create_task(
        env.run(wait_for_instant, _run(not_before=datetime.now(UTC) + timedelta(hours=1)), WaitingRuns()))
    await asyncio.sleep(0.01)
    env.worker_shutdown()
    env.cancel(ActivityCancellationDetails(cancel_requested=True))
    with pytest.raises(ApplicationError) as refused:
        await waiting
    assert refused.value.type == JobFailure.WITHDRAWN


async def test_a_run_whose_instant_comes_with_the_stop_runs() -> None:
    # Handed back, it would be sent again only after its instant: late.
    env = ActivityEnvironment()
    instant = datetime.now(UTC) + timedelta(milliseconds=30)
    waiting = asyncio.create_task(env.run(wait_for_instant, _run(not_before=instant), WaitingRuns()))
    await asyncio.sleep(0.01)
    time.sleep(0.05)  # noqa: ASYNC251 - the loop stands still past the instant: its wake and the stop meet
    env.worker_shutdown()
    await asyncio.wait_for(waiting, 1)
    assert datetime.now(UTC) >= instant


async def test_a_job_going_when_its_worker_starts_to_stop_goes_on() -> None:
    # Past its instant the job has the worker's grace to finish: the stop cancels nothing.
    async def run_job(job_input: JobInput) -> str:
        await wait_for_instant(job_input, WaitingRuns())
        await asyncio.sleep(0.2)  # the job
        return "ran"

    env = ActivityEnvironment()
    going = asyncio.create_task(
        env.run(run_job, _run(not_before=datetime.now(UTC) + timedelta(milliseconds=20))))
    await asyncio.sleep(0.1)
    env.worker_shutdown()
    assert await going == "ran"


def test_a_run_past_its_grace_is_refused_as_late() -> None:
    late = _run(not_before=datetime.now(UTC) - timedelta(seconds=90), late_after_seconds=60)
    with pytest.raises(ApplicationError) as refused:
        refuse_if_late(late, started_before=False)
    assert refused.value.type == JobFailure.LATE and refused.value.non_retryable


def test_a_run_within_its_grace_or_one_that_had_started_runs() -> None:
    refuse_if_late(_run(not_before=datetime.now(UTC) - timedelta(seconds=30), late_after_seconds=60),
                   started_before=False)
    refuse_if_late(_run(not_before=datetime.now(UTC) - timedelta(seconds=90), late_after_seconds=60),
                   started_before=True)


def test_a_run_that_waited_in_the_queue_counts_from_when_it_was_sent() -> None:
    queued = _run(scheduled_at=datetime.now(UTC) - timedelta(seconds=300),
                  sent_at=datetime.now(UTC) - timedelta(seconds=10), late_after_seconds=60)
    refuse_if_late(queued, started_before=False)


@pytest.mark.parametrize(("beat", "expected"), [(2.0, 2), (6.0, 1)])
async def test_a_waiting_run_heartbeats_as_far_apart_as_its_beat(beat: float, expected: int) -> None:
    # 8 s from its instant, watched for 3 s: at once, then a beat later (a fifth of the rest
    # would be 1.6 s).
    beats: list[float] = []
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *_: beats.append(asyncio.get_running_loop().time())
    run = _run(not_before=datetime.now(UTC) + timedelta(seconds=8), beat_seconds=beat)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(env.run(heartbeat_while_waiting, run, timedelta(seconds=30)), 3)
    assert len(beats) == expected, beats
