"""Starting the runs of one instant within milliseconds of it (activities/precision.py)."""

from __future__ import annotations

import asyncio
import gc
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from activities import precision
from activities.precision import after_the_starts, queued_bookkeeping_done, sleep_until

# A round whose runs all missed the instant's timer proves nothing: it is run again.
ROUNDS = 3


@pytest.fixture
def on_the_timer(monkeypatch: pytest.MonkeyPatch) -> set[asyncio.Task[Any]]:
    """The runs that waited on their instant's timer and woke past the instant: those one loop
    pass wakes together. A run that began after its instant (the process descheduled for the
    whole margin) does not wait; one that wakes to a wall clock behind the loop's waits the
    rest alone."""
    woke: set[asyncio.Task[Any]] = set()
    wake_for = precision._wake_for

    async def spy(at: float, delay: float) -> None:
        await wake_for(at, delay)
        if time.time() >= at and (task := asyncio.current_task()) is not None:
            woke.add(task)

    monkeypatch.setattr(precision, "_wake_for", spy)
    return woke


async def _wake_together(runs: int, on_the_timer: set[asyncio.Task[Any]]) -> list[tuple[bool, bool]]:
    """Each run's (woken on the instant's timer, collector enabled) as it returns from the wait."""
    instant_at = datetime.now(UTC) + timedelta(milliseconds=300)

    async def one() -> tuple[bool, bool]:
        await sleep_until(instant_at)
        assert time.time() >= instant_at.timestamp()
        return asyncio.current_task() in on_the_timer, gc.isenabled()

    return await asyncio.gather(*(one() for _ in range(runs)))


async def test_the_runs_of_one_instant_start_with_the_collector_held_until_the_next_pass(
        on_the_timer: set[asyncio.Task[Any]]) -> None:
    assert gc.isenabled()
    for _ in range(ROUNDS):
        woken = await _wake_together(200, on_the_timer)
        held = [enabled for timed, enabled in woken if timed]
        if len(held) > 1:
            break
    assert len(held) > 1, woken
    assert not any(held), woken
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert gc.isenabled()


async def test_a_collector_turned_off_by_the_process_stays_off(
        on_the_timer: set[asyncio.Task[Any]]) -> None:
    gc.disable()
    try:
        await _wake_together(3, on_the_timer)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert not gc.isenabled()
    finally:
        gc.enable()


async def _bookkeeping_round(on_the_timer: set[asyncio.Task[Any]]) -> tuple[int, list[tuple[bool, bool]]]:
    """300 runs of one instant, each queuing its bookkeeping as it wakes: the timers set for
    the instant while they wait, and each run's (woken on the timer, the bookkeeping of a run
    woken on it already done) as it wakes."""
    instant_at = datetime.now(UTC) + timedelta(milliseconds=300)
    done: list[asyncio.Task[Any]] = []
    seen: list[tuple[bool, bool]] = []

    async def one() -> None:
        await sleep_until(instant_at)
        me = asyncio.current_task()
        assert me is not None
        seen.append((me in on_the_timer, any(run in on_the_timer for run in done)))
        after_the_starts(done.append, me)

    def timers() -> int:
        return sum(at == instant_at.timestamp() for _, at in precision._wakes)

    runs = [asyncio.create_task(one()) for _ in range(300)]
    await asyncio.sleep(0)
    waiting = timers()
    await asyncio.gather(*runs)
    assert timers() == 0
    return waiting, seen


async def test_the_runs_of_one_instant_wake_before_any_bookkeeping_the_first_one_queues(
        on_the_timer: set[asyncio.Task[Any]]) -> None:
    for _ in range(ROUNDS):
        waiting, seen = await _bookkeeping_round(on_the_timer)
        if sum(timed for timed, _ in seen) > 1:
            break
    assert waiting == 1  # one timer for the instant, not one per run
    assert sum(timed for timed, _ in seen) > 1, seen
    assert not any(behind for timed, behind in seen if timed), seen


async def test_a_run_withdrawn_while_waiting_leaves_the_others_of_its_instant_waiting() -> None:
    instant_at = datetime.now(UTC) + timedelta(milliseconds=500)
    withdrawn, kept = (asyncio.create_task(sleep_until(instant_at)) for _ in range(2))
    await asyncio.sleep(0)
    withdrawn.cancel()
    await kept
    assert withdrawn.cancelled() and time.time() >= instant_at.timestamp()


async def test_what_a_run_queued_is_done_before_it_goes_on() -> None:
    done: list[str] = []
    after_the_starts(done.append, "start")
    assert done == []
    await queued_bookkeeping_done()
    assert done == ["start"]
