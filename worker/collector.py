"""The worker's garbage collection, between the instants its jobs wait for.

Python's cyclic collector runs when allocations cross a threshold, and nothing allocates more
than the runs due at one instant starting together: an automatic collection then lands on the
instant and delays every run due with it. On the jobs worker here a full pass took 16-37 ms in
a steady run and up to 126 ms on a worker that also hosts the workflows; the interval runs due
at that instant started that late (docs/capacity.md).

With automatic collection off, ``QuietCollector`` collects the same generations about as often
(the interpreter's own thresholds), but only when no run is due within twice the time the last
passes of that generation took. A collection that finds no such gap for long (``overdue``) runs
anyway, so memory stays bounded on a worker whose runs never leave one.
"""

from __future__ import annotations

import asyncio
import gc
import time
from dataclasses import dataclass, field

import structlog

from activities.agenda import Agenda

log = structlog.get_logger("task_scheduler.worker")

# Sleep between looks at the allocation counts: small next to the gaps between instants, and
# ~100 wake-ups a second cost the event loop well under 1% of a core.
TICK = 0.01
# After the last run due at an instant stopped waiting, its start is measured within a loop
# iteration or two: no pass starts before.
SETTLE = 0.01
# A full pass at most this often: the interpreter runs one only once the objects that survived
# young collections grew by a quarter, a ratio it keeps to itself.
FULL_EVERY = 30.0


@dataclass
class _Generation:
    estimate: float  # seconds the last pass took
    overdue: float  # seconds a due pass may wait for a gap before it runs anyway
    due_since: float | None = None
    passes: int = 0
    forced: int = 0


@dataclass
class QuietCollector:
    """Collects garbage when the agenda leaves time for it; see the module docstring."""

    agenda: Agenda
    tick: float = TICK
    full_every: float = FULL_EVERY
    generations: list[_Generation] = field(default_factory=lambda: [
        _Generation(estimate=0.002, overdue=1.0),
        _Generation(estimate=0.005, overdue=2.0),
        _Generation(estimate=0.05, overdue=120.0),
    ])
    _last_full: float = field(default_factory=time.monotonic)

    async def run(self, stop: asyncio.Event) -> None:
        """Collect until ``stop``; automatic collection is off meanwhile and back on after."""
        gc.disable()
        log.info("gc.quiet", tick_ms=round(self.tick * 1000, 1), full_every_s=self.full_every)
        try:
            while not stop.is_set():
                await asyncio.sleep(self.tick)
                self.step()
        finally:
            gc.enable()

    def step(self) -> int | None:
        """One look: the generation collected now, if any."""
        generation = self.due()
        if generation is None:
            return None
        state = self.generations[generation]
        now = time.monotonic()
        if state.due_since is None:
            state.due_since = now
        forced = now - state.due_since > state.overdue
        if not forced and not self.agenda.clear_for(2 * state.estimate, settle=SETTLE):
            return None
        began = time.perf_counter()
        gc.collect(generation)
        took = time.perf_counter() - began
        # A pass shorter than the last still keeps half of that one's guard.
        state.estimate, state.due_since = max(took, state.estimate / 2), None
        state.passes += 1
        if generation == 2:
            self._last_full = now
        if forced:
            state.forced += 1
            log.info("gc.forced", generation=generation, ms=round(took * 1000, 1),
                     waiting_runs=len(self.agenda))
        return generation

    def due(self) -> int | None:
        """The generation the interpreter would collect now were it on (None: none)."""
        young, middle, full = gc.get_threshold()
        counts = gc.get_count()
        if counts[0] <= young:
            return None
        # A collection of one generation counts towards the next, as the interpreter's does.
        if counts[1] + 1 <= middle:
            return 0
        if counts[2] + 1 <= full or time.monotonic() - self._last_full < self.full_every:
            return 1
        return 2
