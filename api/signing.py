"""A tenant's signing secrets over the API: read (made on first use) and rotated."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from cryptography.fernet import InvalidToken
from pydantic import BaseModel, ConfigDict
from sqlalchemy import Engine

from api.database import in_thread
from api.errors import RateLimited, ServiceUnavailable
from store.signing import LiveSecret, RotationsContended, SecretBox, live_secrets, rotate_secret

_EXAMPLE: dict[str, Any] = {"secrets": [
    {"secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "created_at": "2026-12-05T09:00:00Z",
     "expires_at": None},
    {"secret": "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD", "created_at": "2026-11-01T12:00:00Z",
     "expires_at": "2026-12-06T09:00:00Z"},
]}


class SigningSecretOut(BaseModel):
    """A secret that signs the tenant's deliveries; one with ``expires_at`` was rotated out and
    signs beside the current one until then."""

    secret: str
    created_at: datetime
    expires_at: datetime | None


class SigningSecrets(BaseModel):
    """The tenant's live signing secrets, the current one first."""

    model_config = ConfigDict(json_schema_extra={"examples": [_EXAMPLE]})

    secrets: list[SigningSecretOut]

    @classmethod
    def of(cls, live: list[LiveSecret]) -> SigningSecrets:
        return cls(secrets=[SigningSecretOut(secret=s.secret, created_at=s.created_at,
                                             expires_at=s.expires_at) for s in live])


class SigningService:
    """Reads and rotates a tenant's signing secrets."""

    def __init__(self, engine: Engine, box: SecretBox, window: timedelta) -> None:
        self._engine, self._box, self._window = engine, box, window

    async def secrets(self, tenant_id: str) -> SigningSecrets:
        """The live secrets; the first is made on first use."""
        with _readable():
            return SigningSecrets.of(await in_thread(
                live_secrets, self._engine, tenant_id, datetime.now(UTC), self._box))

    async def rotate(self, tenant_id: str) -> SigningSecrets:
        """A new current secret; the replaced one signs on for the rotation window."""
        with _readable():
            try:
                return SigningSecrets.of(await in_thread(
                    rotate_secret, self._engine, tenant_id, datetime.now(UTC), self._window,
                    self._box))
            except RotationsContended as exc:
                raise RateLimited(f"{exc}; nothing changed, try again",
                                  headers={"Retry-After": "1"}) from exc


@contextmanager
def _readable() -> Iterator[None]:
    """Secrets stored under another key are an operator's error, answered as such (503)."""
    try:
        yield
    except InvalidToken as exc:
        raise ServiceUnavailable("the signing secrets cannot be decrypted with "
                                 "SCHEDULER_SIGNING_KEY (was the key changed?)") from exc
