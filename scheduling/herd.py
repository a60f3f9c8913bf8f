"""How far ahead to dispatch a task's runs when many tasks are due at the same instant.

A worker dispatches runs at a limited rate: N tasks due at one instant need about N / rate
seconds to go out, so the lead of each must cover that. The gauge counts, per second of the
first fire, the tasks created so far (in this process) and gives each new task a lead that
grows with the herd it joins.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime

# Tasks due within this many seconds of each other dispatch as one herd.
NEIGHBOURHOOD = 2


class HerdGauge:
    """Leads for new tasks: the base lead plus the time their herd needs to go out."""

    def __init__(self, base_seconds: float, max_seconds: float, dispatch_rate: float) -> None:
        self.base_seconds = base_seconds
        self.max_seconds = max(max_seconds, base_seconds)
        self.dispatch_rate = dispatch_rate
        self._counts: Counter[int] = Counter()
        self._calls = 0

    def lead_for(self, instant: datetime | None, now: datetime) -> float:
        """Count a task first due at ``instant`` and return the lead it should use."""
        if self.base_seconds <= 0 or instant is None or self.dispatch_rate <= 0:
            return self.base_seconds
        self._forget_before(int(now.timestamp()) - NEIGHBOURHOOD)
        second = int(instant.timestamp())
        self._counts[second] += 1
        herd = sum(self._counts[s] for s in range(second - NEIGHBOURHOOD, second + NEIGHBOURHOOD + 1))
        return min(self.max_seconds, self.base_seconds + (herd - 1) / self.dispatch_rate)

    def _forget_before(self, second: int) -> None:
        self._calls += 1
        if self._calls % 256 == 0:
            for old in [s for s in self._counts if s < second]:
                del self._counts[old]
