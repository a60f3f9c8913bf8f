"""Starting the runs of one instant within milliseconds of it (activities/precision.py)."""

from __future__ import annotations

import asyncio
import gc
import time
from datetime import UTC, datetime, timedelta

from activities import precision
from activities.precision import after_the_starts, queued_bookkeeping_done, sleep_until


async def _wake_together(runs: int) -> tuple[list[tuple[float, bool, bool]], bool]:
    """Each run's (lateness in seconds, collector enabled, began waiting before the instant) as
    it returns from the wait, and whether the wall clock fell measurably behind the loop's."""
    instant_at = datetime.now(UTC) + timedelta(milliseconds=300)
    loop = asyncio.get_running_loop()
    wall, monotonic = time.time(), loop.time()

    async def one() -> tuple[float, bool, bool]:
        early = time.time() < instant_at.timestamp()
        await sleep_until(instant_at)
        return time.time() - instant_at.timestamp(), gc.isenabled(), early

    woken = await asyncio.gather(*(one() for _ in range(runs)))
    lagged = (loop.time() - monotonic) - (time.time() - wall) > 1e-4
    return woken, lagged


async def test_the_runs_of_one_instant_start_with_the_collector_held_until_the_next_pass() -> None:
    assert gc.isenabled()
    woken, lagged = await _wake_together(200)
    assert all(late >= 0 for late, _, _ in woken)
    assert woken[0][2]  # the first run began its wait well before the instant
    # A run that began after the instant (the process descheduled for the whole margin) has
    # nothing to wait for; with a wall clock behind the loop's, each run waits the rest alone.
    if not lagged:
        assert not any(enabled for _, enabled, early in woken if early)
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert gc.isenabled()


async def test_a_collector_turned_off_by_the_process_stays_off() -> None:
    gc.disable()
    try:
        await _wake_together(3)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert not gc.isenabled()
    finally:
        gc.enable()


async def test_the_runs_of_one_instant_wake_before_any_bookkeeping_the_first_one_queues() -> None:
    instant_at = datetime.now(UTC) + timedelta(milliseconds=200)
    queued: list[str] = []
    behind: list[bool] = []

    async def one() -> None:
        await sleep_until(instant_at)
        behind.append(bool(queued))
        after_the_starts(queued.append, "bookkeeping")

    def timers() -> int:
        return sum(at == instant_at.timestamp() for _, at in precision._wakes)

    loop = asyncio.get_running_loop()
    wall, monotonic = time.time(), loop.time()
    runs = [asyncio.create_task(one()) for _ in range(300)]
    await asyncio.sleep(0)
    assert timers() == 1  # one timer for the instant, not one per run
    await asyncio.gather(*runs)
    assert timers() == 0
    # The timer runs on the loop's monotonic clock. Had the wall clock fallen behind it (a VM's
    # clock being slewed), the runs that found it short of their instant waited the rest: they
    # come after the others' bookkeeping, never before it.
    lagged = (loop.time() - monotonic) - (time.time() - wall) > 1e-4
    assert behind == ([False] * 300 if not lagged else sorted(behind)) and not behind[0], behind


async def test_a_run_withdrawn_while_waiting_leaves_the_others_of_its_instant_waiting() -> None:
    instant_at = datetime.now(UTC) + timedelta(milliseconds=200)
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
