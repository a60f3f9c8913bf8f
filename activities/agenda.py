"""The instants this process's jobs are waiting for, so that the process's own chores (the
garbage collector, worker/collector.py) can keep clear of them."""

from __future__ import annotations

import asyncio
import bisect
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime


class Agenda:
    """Instants (epoch seconds) with how many runs wait for each; and when the last run due
    at an instant stopped waiting, since its start is measured just after that."""

    def __init__(self) -> None:
        self._waiting: dict[float, int] = {}
        self._instants: list[float] = []  # the distinct instants, in order
        self.last_cleared = 0.0

    @contextmanager
    def waiting(self, instant: datetime) -> Iterator[None]:
        """Held by a run for as long as it waits for its instant."""
        at = instant.timestamp()
        count = self._waiting.get(at, 0)
        if count == 0:
            bisect.insort(self._instants, at)
        self._waiting[at] = count + 1
        try:
            yield
        finally:
            self._leave(at)

    def next_due(self) -> float | None:
        """The earliest instant a run still waits for (it may have just passed)."""
        return self._instants[0] if self._instants else None

    def clear_for(self, seconds: float, *, settle: float, now: float | None = None) -> bool:
        """No run is due within ``seconds`` from now, and none stopped waiting within
        ``settle`` before now (runs just woken are still starting)."""
        now = time.time() if now is None else now
        due = self.next_due()
        return (due is None or due - now > seconds) and now - self.last_cleared >= settle

    async def gap(self, seconds: float, *, settle: float, within: float) -> None:
        """Return once ``clear_for(seconds, settle=settle)`` holds, or after ``within`` seconds
        at the latest: for a chore that may come a little late but should not come between
        the runs due at an instant."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            now = time.time()
            if self.clear_for(seconds, settle=settle, now=now):
                return
            due = self.next_due()
            # Until the instant in the way has passed and its runs have started.
            until = max(due if due is not None and due - now <= seconds else now,
                        self.last_cleared) + settle
            await asyncio.sleep(min(max(until - now, 0.001), deadline - time.monotonic()))

    def __len__(self) -> int:
        return sum(self._waiting.values())

    def _leave(self, at: float) -> None:
        count = self._waiting[at] - 1
        if count:
            self._waiting[at] = count
            return
        del self._waiting[at]
        index = bisect.bisect_left(self._instants, at)
        del self._instants[index]
        self.last_cleared = time.time()
