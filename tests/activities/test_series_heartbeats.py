"""What a series' heartbeats carry, when they are sent, and how a retried series resumes."""

from __future__ import annotations

import dataclasses
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from activities import series as series_module
from activities.agenda import Agenda
from activities.contracts import JobInput, JobResult, SeriesFire, SeriesInput
from activities.series import RunRegistry, SeriesRunner
from store.records import ExecutionRecord


def _series(*offsets: float) -> SeriesInput:
    now = datetime.now(UTC)
    fires = [SeriesFire(execution_id=f"t:{i}", scheduled_at=now + timedelta(seconds=o),
                        not_before=now + timedelta(seconds=o)) for i, o in enumerate(offsets)]
    return SeriesInput(task_id="t", tenant_id="x", job={"type": "handler", "name": "noop"},  # type: ignore[arg-type]
                       fires=fires)


async def _run(series: SeriesInput, details: list[Any], beats: list[tuple[float, Any]],
               ran: list[str]) -> None:
    async def attempt(job_input: JobInput, number: int) -> JobResult:
        ran.append(job_input.execution_id)
        return JobResult(started_at=datetime.now(UTC))

    async def write(record: ExecutionRecord) -> None:
        return None

    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, heartbeat_details=details)
    env.on_heartbeat = lambda *d: beats.append((time.time(), d))
    runner = SeriesRunner(series, attempt=attempt, write=write, runs=RunRegistry(), agenda=Agenda())
    await env.run(runner.run)


async def test_beats_carry_the_fires_done_and_a_retry_runs_only_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(series_module, "HEARTBEAT_EVERY", 0.004)
    series = _series(0.1, 0.2, 0.3)
    beats: list[tuple[float, Any]] = []
    ran: list[str] = []
    await _run(series, [], beats, ran)
    assert ran == ["t:0", "t:1", "t:2"]
    done_in_beats = [[o["execution_id"] for o in d[0]["done"]] for _, d in beats]
    assert ["t:0"] in done_in_beats and ["t:0", "t:1"] in done_in_beats
    # No beat between the runs due at an instant: none from 5 ms before one to 10 ms after.
    instants = [f.not_before.timestamp() for f in series.fires]
    assert not [t for t, _ in beats for i in instants if i - 0.005 < t < i + 0.01]

    # A retry after the second fire: it resumes from the last beat that had both done.
    last_with_two = next(d for _, d in beats if len(d[0]["done"]) == 2)
    retried: list[str] = []
    await _run(series, list(last_with_two), [], retried)
    assert retried == ["t:2"]
