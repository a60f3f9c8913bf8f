"""Drives the stack through its REST API, as a product team would: bodies of the tasks the
fault tests create, and a client that retries a create with the same Idempotency-Key on any
API replica until one acknowledges it."""

from __future__ import annotations

import asyncio
import itertools
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx


def http_job(url: str, *, timeout: float = 10) -> dict[str, Any]:
    return {"type": "http", "url": url, "timeout_seconds": timeout}


def sleep_job(seconds: float) -> dict[str, Any]:
    return {"type": "handler", "name": "sleep", "args": {"seconds": seconds}}


def fast_retries(attempts: int = 5, initial: float = 1.0) -> dict[str, Any]:
    return {"max_attempts": attempts, "initial_interval_seconds": initial,
            "backoff_coefficient": 1.5, "maximum_interval_seconds": 3}


def interval_task(name: str, job: dict[str, Any], every: float, *, until: datetime,
                  **policies: Any) -> dict[str, Any]:
    """A fixed-rate interval task that ends at ``until``, with small timeouts for tests."""
    return {"task_name": name, "job_details": job, "schedule_type": "interval",
            "interval_seconds": every, "end_date": until.isoformat(),
            "heartbeat_timeout_seconds": 3, "retry_policy": fast_retries(), **policies}


def once_task(name: str, job: dict[str, Any], at: datetime, **policies: Any) -> dict[str, Any]:
    return {"task_name": name, "job_details": job, "schedule_type": "once",
            "run_at": at.isoformat(), "heartbeat_timeout_seconds": 3,
            "retry_policy": fast_retries(), **policies}


def now() -> datetime:
    return datetime.now(UTC)


def later(seconds: float) -> datetime:
    return now() + timedelta(seconds=seconds)


class Api:
    """A tenant's client of one or more API replicas."""

    def __init__(self, bases: list[str], key: str, *, timeout: float = 30) -> None:
        self.bases = list(bases)
        self._turn = itertools.count()
        self.http = httpx.AsyncClient(timeout=timeout, headers={"Authorization": f"Bearer {key}"})

    async def close(self) -> None:
        await self.http.aclose()

    def _base(self) -> str:
        return self.bases[next(self._turn) % len(self.bases)]

    async def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One request to the next replica (no retry)."""
        return await self.http.request(method, self._base() + path, **kwargs)

    async def create(self, body: dict[str, Any], *, key: str | None = None,
                     within: float = 60) -> dict[str, Any]:
        """Create a task; with ``key``, retry on any replica until one acknowledges it (201, or
        200 for a retry of a create that had reached Temporal)."""
        deadline = time.monotonic() + within
        headers = {"Idempotency-Key": key} if key else {}
        last: object = None
        while time.monotonic() < deadline:
            try:
                response = await self.request("POST", "/task/create", json=body, headers=headers)
            except httpx.HTTPError as exc:  # the replica died or is down
                last = exc
            else:
                if response.status_code in (200, 201):
                    return dict(response.json())
                if response.status_code not in (429, 502, 503, 504):
                    raise AssertionError(f"create answered {response.status_code}: {response.text}")
                last = response.status_code
            if key is None:
                raise AssertionError(f"create failed without an Idempotency-Key to retry: {last}")
            await asyncio.sleep(0.5)
        raise AssertionError(f"create not acknowledged in {within}s (last: {last})")
