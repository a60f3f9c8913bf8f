"""Group many small writes into few transactions.

Each caller awaits its own write; the writer gathers what arrives within a few milliseconds
(or up to a batch size) and commits it in one transaction on a thread. A herd of runs due at
one instant then costs a handful of commits instead of one per run. If a batch fails, its
writes are retried one by one, so one bad write fails alone. ``stalled_for`` tells how long
the commit in progress has run: a database that hangs instead of refusing shows there.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Connection, Engine

Write = Callable[[Connection], None]


@dataclass
class _Pending:
    write: Write
    done: asyncio.Future[None]


class BatchWriter:
    """Commits writes in batches; ``await writer.submit(fn)`` returns once ``fn`` is committed."""

    def __init__(self, engine: Engine, *, max_batch: int = 500, linger: float = 0.005) -> None:
        self._engine = engine
        self._max_batch = max_batch
        self._linger = linger
        self._queue: asyncio.Queue[_Pending] | None = None
        self._task: asyncio.Task[None] | None = None
        self._committing_since: float | None = None  # time.monotonic() of the commit's start

    def stalled_for(self) -> float:
        """Seconds the commit in progress has run (0 when none is)."""
        since = self._committing_since
        return 0.0 if since is None else time.monotonic() - since

    async def submit(self, write: Write) -> None:
        """Commit ``write`` (in a batch with others) and return when it is durable."""
        if self._queue is None or self._task is None or self._task.done():
            self._queue = asyncio.Queue()
            self._task = asyncio.create_task(self._drain(self._queue))
        pending = _Pending(write, asyncio.get_running_loop().create_future())
        await self._queue.put(pending)
        await pending.done

    async def aclose(self) -> None:
        """Stop the drain task (writes already submitted have been answered)."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _drain(self, queue: asyncio.Queue[_Pending]) -> None:
        batch: list[_Pending] = []
        try:
            while True:
                batch = [await queue.get()]
                await asyncio.sleep(self._linger)  # let a burst gather
                while len(batch) < self._max_batch and not queue.empty():
                    batch.append(queue.get_nowait())
                self._committing_since = time.monotonic()
                try:
                    results = await asyncio.to_thread(self._commit, [p.write for p in batch])
                finally:
                    self._committing_since = None
                for pending, error in zip(batch, results, strict=True):
                    if pending.done.done():
                        continue
                    if error is None:
                        pending.done.set_result(None)
                    else:
                        pending.done.set_exception(error)
        finally:
            # Stopped: no write left waiting waits forever (its caller may submit it again).
            while not queue.empty():
                batch.append(queue.get_nowait())
            for pending in batch:
                if not pending.done.done():
                    pending.done.set_exception(RuntimeError("the batch writer stopped"))

    def _commit(self, writes: list[Write]) -> list[BaseException | None]:
        try:
            with self._engine.begin() as connection:
                for write in writes:
                    write(connection)
            return [None] * len(writes)
        except Exception:
            if len(writes) == 1:
                raise_one: list[BaseException | None] = []
                try:
                    with self._engine.begin() as connection:
                        writes[0](connection)
                    raise_one.append(None)
                except Exception as exc:
                    raise_one.append(exc)
                return raise_one
        outcomes: list[BaseException | None] = []
        for write in writes:  # one failed: find which, commit the others
            try:
                with self._engine.begin() as connection:
                    write(connection)
                outcomes.append(None)
            except Exception as exc:
                outcomes.append(exc)
        return outcomes
