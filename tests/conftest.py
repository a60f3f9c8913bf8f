"""Shared fixtures: Temporal environments (time-skipping and real dev server), databases,
a local HTTP target server, and a worker factory that registers the production activities."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from sqlalchemy import Engine
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.handlers import Handler
from activities.options import RunOptions
from activities.share import DEFAULT_SLOTS
from activities.workflow_jobs import WorkflowJobRules
from config.settings import Settings, setting_fields
from outbound.egress import EgressPolicy, guarded_client
from store.engine import make_engine, migrate
from tests.faults.processes import PostgresCluster
from tests.target import TargetServer
from worker.build import NOTIFY_SLOTS, build_activities, build_jobs_worker, build_workflow_worker
from worker.dev import FAIRNESS_FLAGS
from workflows import attributes

BIN = Path(sys.executable).parent

# Property tests check what the code returns, not how fast: on the shared 2-core machine a
# single example once took 1.2 s (a stall of the machine) against Hypothesis' 200 ms deadline.
settings.register_profile("shared-machine", deadline=None)
settings.load_profile("shared-machine")


def _binary(name: str) -> str:
    found = shutil.which(name, path=str(BIN)) or shutil.which(name)
    if not found:
        raise RuntimeError(f"{name} not found; run `make test` so the virtualenv has it")
    return found


async def register_search_attributes(client: Client) -> None:
    """Register the task search attributes on a server that does not know them yet."""
    kinds = {"Keyword": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
             "Datetime": IndexedValueType.INDEXED_VALUE_TYPE_DATETIME}
    await client.operator_service.add_search_attributes(
        AddSearchAttributesRequest(
            namespace=client.namespace,
            search_attributes={name: kinds[kind] for name, kind in attributes.DEFINITIONS.items()},
        )
    )


@pytest.fixture
async def time_env() -> AsyncIterator[WorkflowEnvironment]:
    """A time-skipping test server of the test's own (it starts in a tenth of a second).

    One server per test: time skips to the next timer of any workflow on it, so a workflow
    another test left behind would move this test's clock and lock its skipping.

    Its clock starts at the wall clock's time of day: a test waits for fires it places itself.
    It hands a workflow an update ahead of a signal that it records before the update, so a
    replay takes the two in the other order: a test where a run's start report (a signal) can
    meet an update in one workflow task belongs on ``dev_env``."""
    env = await start_time_skipping()
    yield env
    await env.shutdown()


async def start_time_skipping() -> WorkflowEnvironment:
    """A fresh time-skipping test server that knows the task search attributes."""
    env = await WorkflowEnvironment.start_time_skipping(
        data_converter=pydantic_data_converter,
        test_server_existing_path=_binary("temporal-test-server"),
    )
    await register_search_attributes(env.client)
    return env


@pytest.fixture(scope="session")
async def dev_env() -> AsyncIterator[WorkflowEnvironment]:
    """A real Temporal dev server (in memory) with the task search attributes."""
    keys = [attributes.TASK_ID, attributes.TENANT_ID, attributes.TASK_NAME,
            attributes.TASK_STATUS, attributes.SCHEDULE_TYPE, attributes.NEXT_RUN_AT]
    env = await WorkflowEnvironment.start_local(
        data_converter=pydantic_data_converter,
        dev_server_existing_path=_binary("temporal"),
        search_attributes=keys,
        # One partition per task queue: Temporal orders a backlog by priority within a
        # partition, and the priority test wants to see that order exactly.
        dev_server_extra_args=[
            "--dynamic-config-value", "frontend.enableUpdateWorkflowExecution=true",
            "--dynamic-config-value", "matching.numTaskqueueReadPartitions=1",
            "--dynamic-config-value", "matching.numTaskqueueWritePartitions=1",
            *FAIRNESS_FLAGS,
        ],
    )
    yield env
    await env.shutdown()


@pytest.fixture
def sqlite_engine(tmp_path: Path) -> Iterator[Engine]:
    """A migrated SQLite database in a temp dir."""
    engine = make_engine(f"sqlite:///{tmp_path / 'test.db'}")
    migrate(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def pg_cluster() -> Iterator[PostgresCluster]:
    """A PostgreSQL cluster of this test alone, which it may stop and start."""
    cluster = PostgresCluster()
    cluster.init()
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.destroy()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A throwaway PostgreSQL cluster started with initdb/pg_ctl in a temp dir."""
    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    if not initdb or not pg_ctl:
        pytest.fail("PostgreSQL binaries initdb/pg_ctl are required for the PostgreSQL tests")
    root = Path(tempfile.mkdtemp(prefix="ts-pg-"))
    data = root / "data"
    port = _free_port()
    env = dict(os.environ)
    run_as: list[str] = []
    if os.geteuid() == 0:
        # PostgreSQL refuses to run as root: run the cluster as an unprivileged user.
        user = "postgres" if _has_user("postgres") else "nobody"
        shutil.chown(root, user=user)
        run_as = ["runuser", "-u", user, "--"]
    subprocess.run([*run_as, initdb, "-D", str(data), "-U", "scheduler", "--auth=trust", "-E", "UTF8"],
                   check=True, capture_output=True, env=env)
    subprocess.run(
        [*run_as, pg_ctl, "-D", str(data), "-l", str(root / "log"), "-w", "-o",
         f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off", "start"],
        check=True, capture_output=True, env=env,
    )
    try:
        yield f"postgresql://scheduler@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*run_as, pg_ctl, "-D", str(data), "-m", "immediate", "stop"],
                       capture_output=True, env=env)
        shutil.rmtree(root, ignore_errors=True)


def _has_user(name: str) -> bool:
    import pwd

    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def new_postgres_database(postgres_url: str) -> str:
    """The URL of a new, migrated, empty database on the throwaway cluster."""
    from sqlalchemy import text

    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = make_engine(postgres_url)
    with admin.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text(f"CREATE DATABASE {name}"))
    admin.dispose()
    url = postgres_url.rsplit("/", 1)[0] + f"/{name}"
    engine = make_engine(url)
    migrate(engine)
    engine.dispose()
    return url


@pytest.fixture
def postgres_engine(postgres_url: str) -> Iterator[Engine]:
    """A migrated, empty database on the throwaway cluster."""
    engine = make_engine(new_postgres_database(postgres_url))
    yield engine
    engine.dispose()


@pytest.fixture(params=["sqlite", "postgres"])
def any_engine(request: pytest.FixtureRequest) -> Engine:
    """The same test on SQLite and on PostgreSQL."""
    return request.getfixturevalue(f"{request.param}_engine")  # type: ignore[no-any-return]


@pytest.fixture
async def target() -> AsyncIterator[TargetServer]:
    """A real HTTP server on 127.0.0.1 that records every request it gets."""
    server = TargetServer()
    await server.start()
    yield server
    await server.stop()


@asynccontextmanager
async def new_worker(
    client: Client,
    engine: Engine,
    *,
    task_queue: str | None = None,
    handlers: Mapping[str, Handler] | None = None,
    egress: EgressPolicy | None = None,
    workflow_jobs: WorkflowJobRules | None = None,
    run_options: RunOptions | None = None,
    max_cached_workflows: int = 4000,
    max_concurrent_activities: int = DEFAULT_SLOTS,
    notify_slots: int = NOTIFY_SLOTS,
) -> AsyncIterator[Worker]:
    """A worker on a fresh task queue with exactly the production activities.

    HTTP jobs go through the egress guard; by default it allowlists loopback only, for the
    local target server. Workflow jobs start nothing unless ``workflow_jobs`` allows it. Its
    task workflows dispatch without a lead unless ``run_options`` give one."""
    queue = task_queue or f"tq-{uuid.uuid4()}"
    policy = egress or EgressPolicy.from_list(["127.0.0.1"])
    async with guarded_client(policy) as http:
        activities = build_activities(
            engine=engine, http=http, client=client, extra_handlers=handlers,
            workflow_jobs=workflow_jobs, run_options=run_options, job_slots=max_concurrent_activities,
        )
        main = build_workflow_worker(client, task_queue=queue, activities=activities,
                                     notify_slots=notify_slots, max_cached_workflows=max_cached_workflows)
        jobs = build_jobs_worker(client, task_queue=queue, activities=activities)
        async with main, jobs:
            yield main


def settings_of(**names: Any) -> Settings:
    """Settings from names as the environment spells them, without the prefix
    (``api_port=8100`` is ``SCHEDULER_API_PORT``); an unknown name is an error."""
    paths = {env.removeprefix("SCHEDULER_").lower(): path for path, env, _ in setting_fields()}
    nested: dict[str, Any] = {}
    for name, value in names.items():
        group, _, field = paths[name].partition(".")
        if field:
            nested.setdefault(group, {})[field] = value
        else:
            nested[group] = value
    return Settings(**nested)
