"""Signing a tenant's deliveries in a worker: its live secrets, read from the database once per
tenant every CACHE_SECONDS (a herd of one tenant reads them once), then Standard Webhooks
headers for each call (``outbound.signing``)."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

import structlog
from cryptography.fernet import InvalidToken
from sqlalchemy import Engine

from activities.payloads import job_failure
from outbound.signing import signed_headers
from scheduling.status import JobFailure
from store.signing import LiveSecret, SecretBox, live_secrets

log = structlog.get_logger("task_scheduler.signing")

# A rotation reaches the workers within this time; the replaced secret signs on meanwhile.
CACHE_SECONDS = 30.0


class Signer:
    """Signs deliveries with each tenant's live secrets."""

    def __init__(self, engine: Engine, box: SecretBox) -> None:
        self._engine, self._box = engine, box
        self._cached: dict[str, tuple[float, list[LiveSecret]]] = {}
        self._reading: dict[str, asyncio.Task[list[LiveSecret]]] = {}

    async def headers(self, tenant_id: str, message_id: str, body: bytes) -> dict[str, str]:
        """The ``webhook-*`` headers of one delivery; a retryable failure when the tenant's
        secrets cannot be read and none are cached."""
        now = datetime.now(UTC)
        secrets = [s.secret for s in await self._secrets(tenant_id)
                   if s.expires_at is None or s.expires_at > now]
        return signed_headers(secrets, message_id, int(now.timestamp()), body)

    async def _secrets(self, tenant_id: str) -> list[LiveSecret]:
        cached = self._cached.get(tenant_id)
        if cached is not None and time.monotonic() - cached[0] < CACHE_SECONDS:
            return cached[1]
        reading = self._reading.get(tenant_id)
        if reading is None:  # one read per tenant at a time, however many calls wait on it
            reading = asyncio.create_task(asyncio.to_thread(
                live_secrets, self._engine, tenant_id, datetime.now(UTC), self._box))
            self._reading[tenant_id] = reading
            reading.add_done_callback(lambda _: self._reading.pop(tenant_id, None))
        try:
            secrets = await asyncio.shield(reading)
        except InvalidToken as exc:
            raise job_failure(JobFailure.SIGNING_UNAVAILABLE,
                              "the tenant's signing secrets cannot be decrypted with "
                              "SCHEDULER_SIGNING_KEY (was the key changed?)") from exc
        except Exception as exc:
            if cached is not None:
                # The database is away: sign on with what was read, and ask it again only
                # after another CACHE_SECONDS (the calls meanwhile do not wait on it).
                log.warning("signing.secrets_stale", tenant=tenant_id, error=str(exc))
                self._cached[tenant_id] = (time.monotonic(), cached[1])
                return cached[1]
            raise job_failure(JobFailure.SIGNING_UNAVAILABLE,
                              f"not sent: the tenant's signing secret could not be read ({exc})"
                              ) from exc
        self._cached[tenant_id] = (time.monotonic(), secrets)
        return secrets
