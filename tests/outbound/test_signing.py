"""Standard Webhooks signatures as the scheduler makes them, checked with the independent
``standardwebhooks`` package; the signer's secrets read once per tenant, from the database."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from cryptography.fernet import InvalidToken
from sqlalchemy import Engine, text
from standardwebhooks import Webhook, WebhookVerificationError

import store.signing
from activities.signing import Signer
from api.errors import RateLimited, ServiceUnavailable
from api.signing import SigningService
from outbound.signing import signed_headers, traceparent
from store.signing import MAX_LIVE_SECRETS, SecretBox, live_secrets, new_secret, rotate_secret
from tests.target import TargetServer

KEY = SecretBox("dGFzay1zY2hlZHVsZXIgZGV2ZWxvcG1lbnQga2V5ISE=")


def test_every_live_secret_signs_and_each_signature_verifies_alone() -> None:
    old, new = new_secret(), new_secret()
    body = b'{"hello": "world"}'
    headers = signed_headers([new, old], "task:2026-12-05T09:00:00.000Z", int(time.time()), body)
    assert len(headers["webhook-signature"].split(" ")) == 2
    for secret in (new, old):
        assert Webhook(secret).verify(body, headers) == {"hello": "world"}
    with pytest.raises(WebhookVerificationError):
        Webhook(new_secret()).verify(body, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(new).verify(body + b" ", headers)


def test_a_traceparent_names_the_run_and_the_attempt() -> None:
    first, second = traceparent("t:1", 1), traceparent("t:1", 2)
    assert first.split("-")[1] == second.split("-")[1] and first != second


async def test_the_target_refuses_a_bad_or_stale_signature(target: TargetServer) -> None:
    secret = new_secret()
    target.secrets = [secret]
    body = b"{}"
    now = int(time.time())
    async with httpx.AsyncClient() as http:
        good = await http.post(target.url(), content=body, headers=signed_headers([secret], "m1", now, body))
        tampered = await http.post(target.url(), content=b"[]",
                                   headers=signed_headers([secret], "m2", now, body))
        stale = await http.post(target.url(), content=body,
                                headers=signed_headers([secret], "m3", now - 600, body))
        unsigned = await http.post(target.url(), content=body)
    assert [good.status_code, tampered.status_code, stale.status_code, unsigned.status_code] == [
        200, 401, 401, 401]


def test_secrets_are_made_once_rotated_with_a_window_and_encrypted_at_rest(any_engine: Engine) -> None:
    now = datetime.now(UTC)
    [first] = live_secrets(any_engine, "t1", now, KEY)
    assert live_secrets(any_engine, "t1", now, KEY) == [first]
    assert live_secrets(any_engine, "t2", now, KEY) != [first]
    with any_engine.connect() as db:
        stored = [row[0] for row in db.execute(text("SELECT secret_encrypted FROM signing_secret"))]
    assert stored and not any(first.secret in value or first.secret[6:] in value for value in stored)

    new, kept = rotate_secret(any_engine, "t1", now, timedelta(hours=24), KEY)
    assert (new.expires_at, kept.secret, kept.expires_at) == (None, first.secret, now + timedelta(hours=24))
    later = now + timedelta(hours=24, seconds=1)
    assert [s.secret for s in live_secrets(any_engine, "t1", later, KEY)] == [new.secret]
    with pytest.raises(InvalidToken):  # another key cannot read them
        live_secrets(any_engine, "t1", now, SecretBox("YW5vdGhlci1rZXktb2YtdGhpcnR5LXR3by1ieXRlcyE="))


def test_however_often_a_tenant_rotates_at_most_three_secrets_sign(any_engine: Engine) -> None:
    now = datetime.now(UTC)
    made = [live_secrets(any_engine, "t3", now, KEY)[0].secret]
    for n in range(1, 6):
        made.append(rotate_secret(any_engine, "t3", now + timedelta(seconds=n), timedelta(hours=24),
                                  KEY)[0].secret)
    at = now + timedelta(seconds=6)
    live = live_secrets(any_engine, "t3", at, KEY)
    assert len(live) == MAX_LIVE_SECRETS == 3
    # The newest, then the two it replaced most recently, each until its own window ends.
    assert [s.secret for s in live] == made[:-4:-1]
    assert [s.expires_at for s in live] == [None, now + timedelta(seconds=5, hours=24),
                                            now + timedelta(seconds=4, hours=24)]


async def test_the_signer_reads_a_tenants_secrets_once_for_a_herd(sqlite_engine: Engine) -> None:
    signer = Signer(sqlite_engine, KEY)
    body = b"{}"
    signed = await asyncio.gather(*(signer.headers("t1", f"m{n}", body) for n in range(200)))
    [secret] = live_secrets(sqlite_engine, "t1", datetime.now(UTC), KEY)
    for headers in signed:
        Webhook(secret.secret).verify(body, headers)
    with sqlite_engine.connect() as db:
        rows = db.execute(text("SELECT count(*) FROM signing_secret WHERE tenant_id = 't1'")).scalar()
    assert rows == 1


async def test_concurrent_first_uses_make_one_secret(any_engine: Engine) -> None:
    now = datetime.now(UTC)
    made = await asyncio.gather(*(asyncio.to_thread(live_secrets, any_engine, "t9", now, KEY)
                                  for _ in range(8)))
    assert len({tuple(s.secret for s in m) for m in made}) == 1


async def test_rotations_at_once_leave_one_current_secret(any_engine: Engine) -> None:
    now = datetime.now(UTC)
    live_secrets(any_engine, "t7", now, KEY)
    for _ in range(3):  # rounds: they deadlocked on PostgreSQL now and then
        await asyncio.gather(*(asyncio.to_thread(rotate_secret, any_engine, "t7", now,
                                                 timedelta(hours=1), KEY) for _ in range(6)))
        live = live_secrets(any_engine, "t7", now, KEY)
        assert [s.expires_at is None for s in live] == [True] + [False] * (len(live) - 1)
        assert len(live) == MAX_LIVE_SECRETS


async def test_a_rotation_that_loses_every_turn_is_a_429_and_changes_nothing(
        any_engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    # No turn at all: as a rotation that found the current secret replaced at every try.
    service = SigningService(any_engine, KEY, timedelta(hours=1))
    before = await service.secrets("t8")
    monkeypatch.setattr(store.signing, "ROTATION_TRIES", 0)
    with pytest.raises(RateLimited) as refused:
        await service.rotate("t8")
    assert refused.value.headers == {"Retry-After": "1"} and "try again" in refused.value.detail
    assert await service.secrets("t8") == before


async def test_secrets_under_another_key_are_a_503_with_the_reason(sqlite_engine: Engine) -> None:
    live_secrets(sqlite_engine, "t1", datetime.now(UTC), KEY)
    other = SigningService(sqlite_engine, SecretBox("YW5vdGhlci1rZXktb2YtdGhpcnR5LXR3by1ieXRlcyE="),
                           timedelta(hours=1))
    with pytest.raises(ServiceUnavailable, match="SCHEDULER_SIGNING_KEY"):
        await other.secrets("t1")


def test_the_signing_key_changes_without_a_secret_lost(any_engine: Engine) -> None:
    # The new key first, the old after it: the secrets sealed under the old are read, and
    # sealed again under the new as they are, so that the old key can then go.
    now = datetime.now(UTC)
    old_key, new_key = "dGFzay1zY2hlZHVsZXIgZGV2ZWxvcG1lbnQga2V5ISE=", "YW5vdGhlci1rZXktb2YtdGhpcnR5LXR3by1ieXRlcyE="
    [first] = live_secrets(any_engine, "t7", now, SecretBox(old_key))
    with pytest.raises(InvalidToken):  # the new key alone cannot read it yet
        live_secrets(any_engine, "t7", now, SecretBox(new_key))
    both = SecretBox(f"{new_key}, {old_key}")
    assert live_secrets(any_engine, "t7", now, both) == [first]
    assert live_secrets(any_engine, "t7", now, SecretBox(new_key)) == [first]  # re-sealed
    new, kept = rotate_secret(any_engine, "t7", now, timedelta(hours=24), SecretBox(new_key))
    assert kept.secret == first.secret and new.secret != first.secret
