"""Notification delivery: a task's webhook hears about the events it asked for.

Delivered by a regular activity with its own retries, started without blocking the task: a
broken webhook never delays or fails a run. Every event is logged as well.
"""

from __future__ import annotations

import json

import httpx
import structlog
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.payloads import NOTIFY, Notification
from activities.signing import Signer
from outbound.calls import Outbound
from outbound.egress import EgressRefused
from scheduling.spec import TASK_ID_HEADER

log = structlog.get_logger("task_scheduler.notify")

# The workflow gives one delivery 15 s (workflows/record.py): the wait for a slot of the
# tenant and the call's deadline end before that, so a retry never overlaps a late send.
WAIT_FOR_SLOT_SECONDS = 4.0
DEADLINE_SECONDS = 10.0


class NotifyActivities:
    """Posts notifications through the same egress-guarded HTTP client as jobs."""

    def __init__(self, http: httpx.AsyncClient, outbound: Outbound | None = None,
                 signer: Signer | None = None) -> None:
        # One Outbound per worker: webhooks take the same tenant slots as jobs.
        self._outbound = outbound or Outbound(http)
        self._signer = signer

    @activity.defn(name=NOTIFY)
    async def notify(self, note: Notification) -> int:
        """POST the event as JSON; 2xx is delivered, anything else is retried."""
        content = json.dumps(note.model_dump(mode="json", exclude={"url"})).encode()
        # One id per message, the same on every retry: runs that end in one workflow
        # activation share its time, so the run is in it too.
        message_id = f"{note.task_id}:{note.event}:{note.execution_id or '-'}:{note.at.isoformat()}"
        headers = {"Content-Type": "application/json", "Idempotency-Key": message_id,
                   TASK_ID_HEADER: note.task_id}
        signer = self._signer
        try:
            answer = await self._outbound.call(
                "POST", note.url, tenant=note.tenant_id, content=content, headers=headers,
                timeout=DEADLINE_SECONDS, wait_at_most=WAIT_FOR_SLOT_SECONDS,
                sign=None if signer is None else (
                    lambda: signer.headers(note.tenant_id, message_id, content)),
            )
        except EgressRefused as exc:
            raise ApplicationError(str(exc), type="EgressRefused", non_retryable=True) from exc
        except httpx.HTTPError as exc:
            raise ApplicationError(f"webhook unreachable: {type(exc).__name__}") from exc
        if not 200 <= answer.status < 300:
            raise ApplicationError(f"webhook answered HTTP {answer.status}")
        log.info("notify.delivered", task_id=note.task_id, notify_event=note.event, status=answer.status)
        return answer.status
