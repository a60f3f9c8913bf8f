"""Fixtures of the fault tests: a stack of real processes (APIs, workers) around a database,
and a PostgreSQL cluster that a test may stop and start."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine
from temporalio.testing import WorkflowEnvironment

from store.engine import make_engine, migrate
from store.keys import create_key
from tests.faults.processes import Fleet, process_env

TENANT = "faults"
DISPATCH_LEAD = 5  # seconds a run is dispatched ahead of its instant


@dataclass
class Stack:
    """A migrated database with a tenant key, and the processes of one test."""

    engine: Engine
    database_url: str
    key: str
    queue: str
    fleet: Fleet

    async def wait_log(self, name: str, event: str, timeout: float = 60, **fields: object) -> None:
        """Wait until process ``name`` logged ``event`` (JSON logs) with the given fields."""
        await wait_log(self.fleet.logs / f"{name}.log", event, timeout, **fields)


def log_events(path: Path, event: str, **fields: object) -> list[dict[str, object]]:
    """The JSON log lines of a process with this event and fields."""
    found: list[dict[str, object]] = []
    if not path.exists():
        return found
    for line in path.read_text(errors="replace").splitlines():
        if event not in line:
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("event") == event and all(entry.get(k) == v for k, v in fields.items()):
            found.append(entry)
    return found


async def wait_log(path: Path, event: str, timeout: float = 60, **fields: object) -> None:
    deadline = time.monotonic() + timeout
    while not log_events(path, event, **fields):
        assert time.monotonic() < deadline, f"{path.name}: no {event} {fields} in {timeout}s"
        await asyncio.sleep(0.2)


async def wait_healthy(base: str, timeout: float = 60) -> dict[str, object]:
    """Wait until the API's /checkHealth answers 200: database, Temporal and a worker are up."""
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(timeout=10) as http:
        while True:
            try:
                response = await http.get(f"{base}/checkHealth")
                if response.status_code == 200:
                    return dict(response.json())
                last: object = response.json()
            except httpx.HTTPError as exc:
                last = exc
            assert time.monotonic() < deadline, f"{base} not healthy in {timeout}s: {last}"
            await asyncio.sleep(0.3)


def make_stack(tmp_path: Path, *, temporal: str, database_url: str, **extra: str) -> Stack:
    """A stack on the given Temporal and database; processes start when the test says."""
    engine = make_engine(database_url)
    migrate(engine)
    _, key = create_key(engine, TENANT)
    queue = f"faults-{uuid.uuid4().hex[:8]}"
    # The tests time their faults around the dispatch lead: pin it rather than follow the default.
    settings = {"auto_migrate": "false", "dispatch_lead_seconds": str(DISPATCH_LEAD), **extra}
    env = process_env(temporal=temporal, database_url=database_url, task_queue=queue, **settings)
    logs = tmp_path / "logs"
    logs.mkdir(exist_ok=True)
    return Stack(engine=engine, database_url=database_url, key=key, queue=queue,
                 fleet=Fleet(logs=logs, env=env))


@pytest.fixture
def stack_settings() -> dict[str, str]:
    """More settings of the stack's processes; a test module overrides this to change them."""
    return {}


@pytest.fixture
async def stack(dev_env: WorkflowEnvironment, tmp_path: Path,
                stack_settings: dict[str, str]) -> AsyncIterator[Stack]:
    """A stack on the session's dev server and a SQLite file; every process killed after."""
    built = make_stack(tmp_path, temporal=dev_env.client.service_client.config.target_host,
                       database_url=f"sqlite:///{tmp_path / 'scheduler.db'}", **stack_settings)
    try:
        yield built
    finally:
        built.fleet.close()
        built.engine.dispose()
