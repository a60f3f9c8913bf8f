"""What a caller without a key reaches, and what guessing keys costs: /metrics behind its token,
health answers shared for a second, failed sign-ins limited per address, dev keys only in dev."""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, event
from temporalio.testing import WorkflowEnvironment

from api.temporal import TemporalGateway
from store.engine import make_engine, migrate
from store.keys import DEV_KEY_PREFIX, create_key, ensure_dev_key
from tests.api.conftest import serve_api


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    """A fresh task database with its schema."""
    db = make_engine(f"sqlite:///{tmp_path / 'exposure.db'}")
    migrate(db)
    yield db
    db.dispose()


def served(temporal: WorkflowEnvironment, engine: Engine, /, **settings: Any) -> Any:
    """The API on its own task queue (no worker: health says so, which is beside the point)."""
    return serve_api(temporal, engine, temporal_task_queue=f"exposure-{uuid.uuid4()}", **settings)


async def test_metrics_need_the_token_when_one_is_set_and_livez_never(
        dev_env: WorkflowEnvironment, engine: Engine) -> None:
    async with served(dev_env, engine, metrics_token="scrape-me-0123456789") as url, \
            httpx.AsyncClient(base_url=url) as http:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic c2NyYXBl"}):
            refused = await http.get("/metrics", headers=headers)
            assert refused.status_code == 401, headers
            assert refused.headers["www-authenticate"] == "Bearer"
            assert "scheduler_tasks" not in refused.text
        scraped = await http.get("/metrics", headers={"Authorization": "Bearer scrape-me-0123456789"})
        assert scraped.status_code == 200 and "scheduler_metrics_source_up" in scraped.text
        assert (await http.get("/livez")).json() == {"status": "ok"}
    async with served(dev_env, engine) as url, httpx.AsyncClient(base_url=url) as http:
        assert (await http.get("/metrics")).status_code == 200  # no token set: open, by choice


@pytest.fixture
def counted(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """How often the health checks reached the database and Temporal."""
    calls = {"database": 0, "temporal": 0}

    def on_statement(*args: Any) -> None:
        if args[2].strip().upper() == "SELECT 1":
            calls["database"] += 1

    health = TemporalGateway.health

    async def counted_health(self: TemporalGateway) -> dict[str, Any]:
        calls["temporal"] += 1
        return await health(self)

    event.listen(engine, "before_cursor_execute", on_statement)
    monkeypatch.setattr(TemporalGateway, "health", counted_health)
    yield calls
    event.remove(engine, "before_cursor_execute", on_statement)


async def test_a_flood_of_health_checks_reaches_the_database_and_temporal_once_a_second(
        dev_env: WorkflowEnvironment, engine: Engine, counted: dict[str, int]) -> None:
    async with served(dev_env, engine) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        started = time.monotonic()
        answers = await asyncio.gather(*(http.get(path) for path in ["/checkHealth", "/readyz"] * 50))
        answers += [await http.get("/checkHealth") for _ in range(50)]
        seconds = time.monotonic() - started
        assert {a.status_code for a in answers} <= {200, 503}
        assert all("database" in a.json()["checks"] for a in answers)
        most = math.floor(seconds) + 1  # one check per started second of the flood
        assert 1 <= counted["database"] <= most and 1 <= counted["temporal"] <= most, (counted, seconds)

        before = dict(counted)
        await asyncio.sleep(1.05)  # the shared answer ages out: time passing is the event here
        assert (await http.get("/checkHealth")).json()["checks"]["database"] == "up"
        assert counted == {k: v + 1 for k, v in before.items()}
        for _ in range(20):
            assert (await http.get("/livez")).status_code == 200
        assert counted == {k: v + 1 for k, v in before.items()}  # /livez checks nothing


@pytest.fixture
async def limited(dev_env: WorkflowEnvironment, engine: Engine) -> AsyncIterator[str]:
    """An API that refuses an address after 3 failed sign-ins a minute."""
    async with served(dev_env, engine, rate_limit_auth_failures="3/minute",
                      metrics_token="scrape-me-0123456789") as url:
        yield url


async def test_failed_sign_ins_are_limited_per_address_and_successes_are_not_counted(
        limited: str, engine: Engine) -> None:
    key = create_key(engine, "t1")[1]
    unseen = create_key(engine, "t2")[1]  # right, but never used from this address
    async with httpx.AsyncClient(base_url=limited) as http:
        good = {"Authorization": f"Bearer {key}"}
        for _ in range(10):
            assert (await http.get("/tasks", headers=good)).status_code == 200
        scrape = {"Authorization": "Bearer scrape-me-0123456789"}
        assert (await http.get("/metrics", headers=scrape)).status_code == 200
        wrong = {"Authorization": "Bearer tsk_guess"}
        assert (await http.get("/tasks", headers=wrong)).status_code == 401
        form = await http.post("/ui/login", data={"key": "tsk_guess"})
        assert form.status_code == 401
        assert (await http.get("/metrics", headers=wrong)).status_code == 401

        # The fourth failure within the minute: refused, and a key that has not signed in from
        # this address is not even looked at, right or not.
        for attempt in ({"headers": wrong}, {"headers": {"Authorization": f"Bearer {unseen}"}}):
            refused = await http.get("/tasks", **attempt)  # type: ignore[arg-type]
            assert refused.status_code == 429, refused.text
            assert 1 <= int(refused.headers["retry-after"]) <= 60
            assert "failed sign-ins" in refused.json()["detail"]
        form = await http.post("/ui/login", data={"key": unseen})
        assert form.status_code == 429 and "retry-after" in form.headers
        assert "Too many failed sign-ins" in form.text
        # A key that signed in from here goes on: the address may be a NAT many tenants share,
        # and one's wrong key must not lock the others out.
        assert (await http.get("/tasks", headers=good)).status_code == 200
        previewed = await http.post("/task/preview", headers=good, json={
            "task_name": "x", "job_details": {"type": "handler", "name": "noop"},
            "schedule_type": "interval", "interval_seconds": 3600})
        assert previewed.status_code == 200, previewed.text
        # So does the scraper that got in from here: the guesses do not blind the monitoring.
        assert (await http.get("/metrics", headers=scrape)).status_code == 200
        assert (await http.get("/livez")).status_code == 200


async def test_keys_stored_by_the_dev_launcher_pass_only_in_dev(
        dev_env: WorkflowEnvironment, engine: Engine) -> None:
    generated, chosen = DEV_KEY_PREFIX + "abcdefghijklmnop", "my-own-dev-key-0123"
    ensure_dev_key(engine, "dev", generated)
    ensure_dev_key(engine, "dev", chosen)
    legacy = create_key(engine, "dev", admin=True, key=DEV_KEY_PREFIX + "stored-before")[1]
    tenant = create_key(engine, "t1")[1]
    for env, expected in (("test", 401), ("production", 401), ("dev", 200)):
        async with served(dev_env, engine, env=env, metrics_token="scrape-me-0123456789",
                          signing_key="c2lnbmluZy1rZXktZm9yLXRoZS1jb21wb3NlLXRlc3Q=") as url, \
                httpx.AsyncClient(base_url=url) as http:
            for key in (generated, chosen, legacy):
                answer = await http.get("/tasks", headers={"Authorization": f"Bearer {key}"})
                assert answer.status_code == expected, (env, key, answer.text)
                login = await http.post("/ui/login", data={"key": key})
                assert login.status_code == (303 if expected == 200 else 401), (env, key)
            assert (await http.get("/tasks", headers={"Authorization": f"Bearer {tenant}"})
                    ).status_code == 200
