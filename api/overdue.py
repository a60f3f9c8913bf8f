"""The overdue check: the API, not a task's workflow, notices a run that did not come.

A run that has neither started nor been decided ``overdue_after_seconds`` after its instant
(workers down or backlogged, the workflow stuck) raises ``run.overdue``; when it starts or is
decided, or its task comes to rest, ``run.recovered`` follows. Every API replica runs the check;
a conditional write on the task row lets exactly one of them tell each alarm.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime

import httpx
import structlog
from sqlalchemy import Engine

from activities.notify import NotifyActivities
from activities.payloads import Notification
from activities.signing import Signer
from api.database import in_thread
from config.settings import OVERDUE_AFTER_MIN_SECONDS, OverdueSettings
from outbound.calls import Outbound
from scheduling.spec import NotifyEvent, NotifySpec
from scheduling.status import execution_id
from store.overdue import (
    Alarm,
    clear_alarm,
    overdue_runs,
    raise_alarm,
    recovered_runs,
)

log = structlog.get_logger("task_scheduler.overdue")

OVERDUE, RECOVERED = "run.overdue", "run.recovered"
# A webhook gets a few tries from here: the workflow's own retries are not there to help when
# the workers are down, which is when this tells.
ATTEMPTS = 3
BACKOFF_SECONDS = 2.0


class OverdueCheck:
    """Raises and clears overdue alarms, and tells the tasks' webhooks."""

    def __init__(self, engine: Engine, settings: OverdueSettings, notify: NotifyActivities) -> None:
        self._engine, self._settings, self._notify = engine, settings, notify
        self._deliveries: set[asyncio.Task[None]] = set()

    async def check(self, now: datetime | None = None) -> None:
        """One pass: raise the alarms now due, clear those whose run came."""
        now = now or datetime.now(UTC)
        for alarm in await in_thread(overdue_runs, self._engine, now, self._settings.after_seconds,
                                     OVERDUE_AFTER_MIN_SECONDS):
            if await in_thread(raise_alarm, self._engine, alarm, now):
                late = (now - alarm.run_at).total_seconds()
                log.warning("run.overdue", task_id=alarm.task_id, tenant=alarm.tenant_id,
                            run_at=alarm.run_at.isoformat(), late_seconds=round(late, 1))
                self._tell(alarm, OVERDUE, f"not started {late:.0f} s after its instant", now)
        for alarm in await in_thread(recovered_runs, self._engine):
            if await in_thread(clear_alarm, self._engine, alarm):
                log.info("run.recovered", task_id=alarm.task_id, tenant=alarm.tenant_id,
                         run_at=alarm.run_at.isoformat(), outcome=alarm.outcome)
                self._tell(alarm, RECOVERED, alarm.outcome, now)

    async def run(self) -> None:
        """Check every ``check_seconds`` until cancelled; a failed pass is logged and retried."""
        while True:
            try:
                await self.check()
            except Exception:  # the database may be away: the next pass tries again
                log.exception("overdue.check_failed")
            await asyncio.sleep(self._settings.check_seconds)

    def _tell(self, alarm: Alarm, event: str, detail: str | None, now: datetime) -> None:
        """Deliver the event in the background, if the task's webhook asked for it."""
        raw = alarm.spec.get("notify")
        if not isinstance(raw, dict):
            return
        notify = NotifySpec.model_validate(raw)
        if NotifyEvent.OVERDUE not in notify.events:
            return
        # The run's id is its scheduled time's; without jitter that is the instant watched.
        run_id = None if alarm.spec.get("jitter_seconds") else execution_id(alarm.task_id, alarm.run_at)
        note = Notification(
            url=notify.url, event=event, task_id=alarm.task_id, tenant_id=alarm.tenant_id,
            task_name=alarm.name, execution_id=run_id,
            detail=f"run at {alarm.run_at.isoformat()}: {detail}", at=now,
        )
        delivery = asyncio.create_task(self._deliver(note))
        self._deliveries.add(delivery)
        delivery.add_done_callback(self._deliveries.discard)

    async def _deliver(self, note: Notification) -> None:
        for attempt in range(ATTEMPTS):
            try:
                await self._notify.notify(note)
                return
            except Exception as exc:  # a webhook's failure never stops the check
                log.warning("overdue.notify_failed", task_id=note.task_id, notify_event=note.event,
                            attempt=attempt + 1, error=str(exc))
            await asyncio.sleep(BACKOFF_SECONDS * 2**attempt)

    async def aclose(self) -> None:
        """Let the deliveries under way finish, for a moment."""
        if self._deliveries:
            await asyncio.wait(self._deliveries, timeout=5)


@asynccontextmanager
async def overdue_check(engine: Engine, settings: OverdueSettings, http: httpx.AsyncClient,
                        signer: Signer | None) -> AsyncIterator[OverdueCheck]:
    """The check running in the background for as long as the context lasts."""
    check = OverdueCheck(engine, settings, NotifyActivities(http, Outbound(http), signer))
    loop = asyncio.create_task(check.run())
    try:
        yield check
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)
        await check.aclose()
