"""The tenants' signing secrets: made on first use, rotated on request, encrypted at rest."""

from __future__ import annotations

import base64
import os
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

import structlog
from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from sqlalchemy import Engine
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session
from sqlmodel import col, select

from config.settings import signing_keys
from store.models import SigningSecret

log = structlog.get_logger("task_scheduler.signing")

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32
# Rotations at once: each that finds another's new secret current rotates that one instead.
ROTATION_TRIES = 10
# Secrets that sign at once: the current one and the ones the last rotations replaced, each
# until its window ends. A rotation past this ends the oldest at once: every delivery is signed
# with each live secret, on the jobs worker's event loop, so their number must stay small.
MAX_LIVE_SECRETS = 3


CONTENDED = "other rotations of this tenant's secret ran at once and took every turn"


class RotationsContended(Exception):
    """A rotation lost to others ROTATION_TRIES times in a row: it made no secret."""


def new_secret() -> str:
    """A fresh signing secret: ``whsec_`` and 32 random bytes in base64 (Standard Webhooks)."""
    return SECRET_PREFIX + base64.b64encode(os.urandom(SECRET_BYTES)).decode()


class SecretBox:
    """Encrypts secrets for the database and decrypts them back (Fernet: AES and an HMAC).

    ``keys`` is one key, or several separated by commas: the first seals, each of them opens,
    so the key can change without a secret becoming unreadable (``resealed``)."""

    def __init__(self, keys: str) -> None:
        fernets = [Fernet(key.encode()) for key in signing_keys(keys)]
        self._first, self._fernet = fernets[0], MultiFernet(fernets)

    def seal(self, secret: str) -> str:
        return self._fernet.encrypt(secret.encode()).decode()

    def open(self, sealed: str) -> str:
        return self._fernet.decrypt(sealed.encode()).decode()

    def resealed(self, sealed: str) -> str | None:
        """``sealed`` under the first key, when another key sealed it; else None."""
        try:
            self._first.decrypt(sealed.encode())
        except InvalidToken:
            return self._fernet.rotate(sealed.encode()).decode()
        return None


@dataclass(frozen=True)
class LiveSecret:
    """A secret that signs now: the current one (no end) or one rotated out, until it ends."""

    secret: str
    created_at: datetime
    expires_at: datetime | None


def live_secrets(engine: Engine, tenant_id: str, now: datetime, box: SecretBox) -> list[LiveSecret]:
    """The tenant's secrets that sign at ``now``, newest first; the first is made on first use."""
    with Session(engine) as session:
        rows = _live(session, tenant_id, now)
        if rows:
            shown = [_shown(row, box) for row in rows]
            _reseal(session, rows, box)
            return shown
        # Two first uses at once make one secret (one current secret per tenant, a unique index).
        _add(session, tenant_id, now, box)
        try:
            session.commit()
        except IntegrityError:
            session.rollback()
        return [_shown(row, box) for row in _live(session, tenant_id, now)]


def rotate_secret(engine: Engine, tenant_id: str, now: datetime, window: timedelta,
                  box: SecretBox) -> list[LiveSecret]:
    """Make a new current secret; the one it replaces signs beside it until ``now + window``,
    and the oldest live ones end now, so that at most MAX_LIVE_SECRETS sign. Returns the live
    secrets, the new one first."""
    for tries_left in reversed(range(ROTATION_TRIES)):
        with Session(engine) as session:
            # Rotations of a tenant take turns on its current secret's row before they touch
            # any other: taking the older rows in different orders, two of them deadlocked on
            # PostgreSQL. One that waited finds the row no longer current and starts again.
            locked = session.scalars(select(SigningSecret).where(
                SigningSecret.tenant_id == tenant_id, col(SigningSecret.expires_at).is_(None))
                .with_for_update()).first()
            live = _live(session, tenant_id, now)
            if locked is None and any(row.expires_at is None for row in live):
                continue
            for kept, row in enumerate(live, start=1):
                ends = now if kept >= MAX_LIVE_SECRETS else now + window
                if row.expires_at is None or row.expires_at > ends:
                    row.expires_at = ends
                    session.add(row)
            session.flush()  # the current one ends before the new one begins
            _add(session, tenant_id, now, box)
            try:
                session.commit()
            except IntegrityError as exc:
                if not tries_left:
                    raise RotationsContended(CONTENDED) from exc
                continue  # another rotation made a current secret meanwhile: rotate that one
            return [_shown(row, box) for row in _live(session, tenant_id, now)]
    raise RotationsContended(CONTENDED)


def _reseal(session: Session, rows: list[SigningSecret], box: SecretBox) -> None:
    """Seal under the first key the secrets an older key sealed (after a key change), so that
    the older key can go once every tenant's secrets have been read."""
    changed = False
    for row in rows:
        if (again := box.resealed(row.secret_encrypted)) is not None:
            row.secret_encrypted, changed = again, True
            session.add(row)
    if changed:
        try:
            session.commit()
        except SQLAlchemyError as exc:  # the secrets were read: sealing again waits for a later read
            session.rollback()
            log.warning("signing.reseal_failed", error=type(exc).__name__)


def _live(session: Session, tenant_id: str, now: datetime) -> list[SigningSecret]:
    query = (select(SigningSecret)
             .where(SigningSecret.tenant_id == tenant_id,
                    (col(SigningSecret.expires_at).is_(None)) | (col(SigningSecret.expires_at) > now))
             # The current one first (no end), then the newest.
             .order_by(col(SigningSecret.expires_at).desc().nulls_first(),
                       col(SigningSecret.created_at).desc(), col(SigningSecret.id)))
    return list(session.scalars(query))


def _add(session: Session, tenant_id: str, now: datetime, box: SecretBox) -> SigningSecret:
    row = SigningSecret(id=uuid.uuid4().hex, tenant_id=tenant_id,
                        secret_encrypted=box.seal(new_secret()), created_at=now)
    session.add(row)
    return row


def _shown(row: SigningSecret, box: SecretBox) -> LiveSecret:
    return LiveSecret(secret=box.open(row.secret_encrypted), created_at=row.created_at,
                      expires_at=row.expires_at)
