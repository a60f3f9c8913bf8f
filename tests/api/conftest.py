"""A real API server (uvicorn on 127.0.0.1) in front of a real worker and dev server."""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from sqlalchemy import Engine
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from activities.options import RunOptions
from api.app import create_app
from cli.main import SERVER_OPTIONS
from config.telemetry import make_runtime
from store.engine import make_engine, migrate
from store.keys import create_key
from store.quotas import set_quota
from tests.conftest import new_postgres_database, new_worker, settings_of
from workflows.registry import workflow_job_rules


@dataclass
class Stack:
    base_url: str
    engine: Engine
    task_queue: str
    keys: dict[str, str]
    env: WorkflowEnvironment
    # The one task queue (and EchoWorkflow the one type) workflow jobs may use; t1 is granted it.
    workflow_queue: str = ""

    def client(self, tenant: str | None = "t1") -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {self.keys[tenant]}"} if tenant else {}
        return httpx.AsyncClient(base_url=self.base_url, headers=headers, timeout=30)


def _bound_socket() -> socket.socket:
    """A socket bound to a free port, handed to the server as it is: no other process can take
    the port between choosing it and serving on it."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock


# A module runs its tests on both databases with: pytestmark = ON_BOTH_DATABASES
ON_BOTH_DATABASES = pytest.mark.parametrize("stack", ["sqlite", "postgres"], indirect=True, scope="module")


def database_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A new, migrated database: SQLite unless the test asks for PostgreSQL (param "postgres")."""
    if getattr(request, "param", "sqlite") == "postgres":
        return new_postgres_database(request.getfixturevalue("postgres_url"))
    path: Path = tmp_path_factory.mktemp("api") / "api.db"
    engine = make_engine(f"sqlite:///{path}")
    migrate(engine)
    engine.dispose()
    return f"sqlite:///{path}"


@pytest.fixture(scope="module")
async def stack(
    dev_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> AsyncIterator[Stack]:
    """API + worker on a fresh task queue and database (SQLite, or PostgreSQL when
    parametrized so), served over real HTTP."""
    engine = make_engine(database_url(request, tmp_path_factory))
    keys = {
        "t1": create_key(engine, "t1")[1],
        "t2": create_key(engine, "t2")[1],
        "admin": create_key(engine, "ops", admin=True)[1],
    }
    queue = f"api-{uuid.uuid4()}"
    allowed: dict[str, Any] = {"temporal_task_queue": queue, "workflow_job_types": "EchoWorkflow",
                               "workflow_job_task_queues": f"{queue}-echo"}
    set_quota(engine, "t1", workflow_types=["EchoWorkflow"], workflow_task_queues=[f"{queue}-echo"])
    settings = settings_of(env="test", **allowed)
    rules = workflow_job_rules(settings)
    # The worker's client heartbeats as a worker process does, so /checkHealth sees it alive
    # (the first heartbeat comes an interval in: a short one, so the stack is up sooner).
    worker_client = await Client.connect(
        dev_env.client.service_client.config.target_host, namespace=dev_env.client.namespace,
        data_converter=pydantic_data_converter,
        runtime=make_runtime(None, heartbeat_every=timedelta(seconds=1)),
    )
    # The workflows worker of a deployment, with its settings' lead (the API passes none).
    async with new_worker(worker_client, engine, task_queue=queue, workflow_jobs=rules,
                          run_options=RunOptions.of(settings)):
        async with serve_api(dev_env, engine, **allowed) as base_url:
            await _until_healthy(base_url)  # the worker's first heartbeat comes an interval in
            yield Stack(base_url, engine, queue, keys, dev_env, f"{queue}-echo")
    engine.dispose()


async def _until_healthy(base_url: str, timeout: float = 30) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    async with httpx.AsyncClient(base_url=base_url, timeout=10) as http:
        while (answer := await http.get("/checkHealth")).status_code != 200:
            assert asyncio.get_running_loop().time() < deadline, answer.text
            await asyncio.sleep(0.2)


@asynccontextmanager
async def serve_api(env: WorkflowEnvironment, engine: Engine, /, **settings: Any) -> AsyncIterator[str]:
    """Serve the API with the given settings on a free port; yields its base URL."""
    sock = _bound_socket()
    port = int(sock.getsockname()[1])
    settings.setdefault("egress_allow", "127.0.0.1")
    settings.setdefault("env", "test")
    # Every test client is 127.0.0.1: a module's wrong keys would add up to the failure limit,
    # which tests/api/test_exposure.py sets and tests on servers of its own.
    settings.setdefault("rate_limit_auth_failures", "10000/minute")
    # Modules share one dev server, and some stop their workers: a create refused because
    # Temporal's queue waits is tests/api/test_admission_backlog.py's, which turns it on.
    settings.setdefault("api_max_workflow_backlog_seconds", 0)
    try:
        app = create_app(settings_of(api_port=port, **settings), engine=engine, client=env.client)
        server = uvicorn.Server(uvicorn.Config(
            app, host="127.0.0.1", port=port, log_level="warning", lifespan="on", **SERVER_OPTIONS
        ))
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            assert not serving.done(), "the API server ended before it started serving"
            await asyncio.sleep(0.02)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.should_exit = True
            await serving
    finally:
        sock.close()
