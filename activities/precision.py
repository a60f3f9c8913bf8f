"""Starting every run of a herd within milliseconds of its instant on the jobs worker's one
event loop: the runs due at one instant wake together, start before the cyclic collector may
run, and start before any of their bookkeeping. Each keeps its place by its measured gain in
the herd benchmark (docs/capacity.md, "Herds")."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

# The runs waiting for each instant, per event loop: one timer sets their event.
_wakes: dict[tuple[asyncio.AbstractEventLoop, float], asyncio.Event] = {}


async def sleep_until(instant: datetime) -> None:
    """Return at ``instant`` on this worker's clock, in one loop pass with all runs due then."""
    at = instant.timestamp()
    if (delay := at - time.time()) > 0:
        await _wake_for(at, delay)
        _collector_after_this_pass()
    # The loop's timers count on the monotonic clock: if the wall clock lags it, wait the rest.
    if (delay := at - time.time()) > 0:
        await asyncio.sleep(delay)


def after_the_starts(callback: Callable[..., object], *args: Any) -> None:
    """Run ``callback(*args)`` once the runs woken with this one have started, in order."""
    # A run's bookkeeping in line would delay the start of every run behind it in the pass.
    asyncio.get_running_loop().call_soon(callback, *args)


async def queued_bookkeeping_done() -> None:
    """Let what ``after_the_starts`` queued so far run before going on."""
    await asyncio.sleep(0)


async def _wake_for(at: float, delay: float) -> None:
    """Sleep with every run due at ``at`` on one timer, so that the loop wakes them in one pass."""
    # Timers of their own, set a few microseconds apart, can straddle the pass: the later ones
    # then wake behind all the bookkeeping the first ones queued.
    loop = asyncio.get_running_loop()
    key = (loop, at)
    if (wake := _wakes.get(key)) is None:
        wake = _wakes[key] = asyncio.Event()
        loop.call_later(delay, lambda: _wakes.pop(key).set())
    await wake.wait()


def _collector_after_this_pass() -> None:
    """Hold the cyclic collector until the runs woken in this loop pass have all started."""
    # A full collection over a herd's waiting runs, started by their own allocations halfway
    # through the pass, would make every run after it that much later.
    if gc.isenabled():
        gc.disable()
        asyncio.get_running_loop().call_soon(gc.enable)
