"""Notification delivery: a task's webhook hears about the events it asked for.

Delivered by a regular activity with its own retries, started without blocking the task: a
broken webhook never delays or fails a run. Every event is logged as well.
"""

from __future__ import annotations

import httpx
import structlog
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.contracts import NOTIFY, Notification
from jobs.egress import EgressRefused

log = structlog.get_logger("task_scheduler.notify")


class NotifyActivities:
    """Posts notifications through the same egress-guarded HTTP client as jobs."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self._http = http

    @activity.defn(name=NOTIFY)
    async def notify(self, note: Notification) -> int:
        """POST the event as JSON; 2xx is delivered, anything else is retried."""
        body = note.model_dump(mode="json", exclude={"url"})
        try:
            response = await self._http.post(
                note.url, json=body, timeout=10,
                headers={"Idempotency-Key": f"{note.task_id}:{note.event}:{note.at.isoformat()}"},
            )
        except EgressRefused as exc:
            raise ApplicationError(str(exc), type="EgressRefused", non_retryable=True) from exc
        except httpx.HTTPError as exc:
            raise ApplicationError(f"webhook unreachable: {type(exc).__name__}") from exc
        if not 200 <= response.status_code < 300:
            raise ApplicationError(f"webhook answered HTTP {response.status_code}")
        log.info("notify.delivered", task_id=note.task_id, notify_event=note.event, status=response.status_code)
        return response.status_code
