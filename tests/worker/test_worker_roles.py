"""`task-scheduler worker --role ...`: the workflows and the job runs in separate processes (or
both in one), as real processes against a real Temporal dev server, with the API in front."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from temporalio.testing import WorkflowEnvironment

from store.engine import make_engine, migrate
from store.keys import create_key
from tests.target import TargetServer

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Process:
    role: str
    process: asyncio.subprocess.Process
    log: Path
    metrics_port: int | None = None

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@dataclass
class RoleStack:
    """A migrated SQLite database, worker processes with the given roles, and the API."""

    directory: Path
    address: str
    api_port: int = field(default_factory=_free_port)
    task_queue: str = field(default_factory=lambda: f"roles-{uuid.uuid4().hex[:8]}")
    processes: list[Process] = field(default_factory=list)
    key: str = ""

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "SCHEDULER_ENV": "test",
            "SCHEDULER_DATA_DIR": str(self.directory),
            "SCHEDULER_DATABASE_URL": f"sqlite:///{self.directory / 'scheduler.db'}",
            "SCHEDULER_DATABASE_AUTO_MIGRATE": "false",
            "SCHEDULER_TEMPORAL_ADDRESS": self.address,
            "SCHEDULER_TEMPORAL_TASK_QUEUE": self.task_queue,
            "SCHEDULER_API_HOST": "127.0.0.1",
            "SCHEDULER_API_PORT": str(self.api_port),
            "SCHEDULER_EGRESS_ALLOW": "127.0.0.1",
        }

    async def spawn(self, role: str, *argv: str, metrics_port: int | None = None) -> Process:
        log = self.directory / f"{role}.log"
        with log.open("wb") as out:
            child = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "cli.main", *argv, env=self.env(), cwd=ROOT,
                stdout=out, stderr=asyncio.subprocess.STDOUT,
            )
        started = Process(role, child, log, metrics_port)
        self.processes.append(started)
        return started

    async def start(self, roles: list[str]) -> None:
        engine = make_engine(self.env()["SCHEDULER_DATABASE_URL"])
        migrate(engine)  # what `task-scheduler migrate` does before the replicas start
        _, self.key = create_key(engine, "roles")
        engine.dispose()
        for role in roles:
            port = _free_port()
            await self.spawn(role, "worker", "--role", role, "--metrics-port", str(port),
                             metrics_port=port)
        await self.spawn("api", "api")

    async def stop(self) -> None:
        for started in reversed(self.processes):
            if started.process.returncode is None:
                started.process.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(started.process.wait(), 30)
                except TimeoutError:
                    started.process.kill()
                    await started.process.wait()

    def api(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=f"http://127.0.0.1:{self.api_port}",
                                 headers={"Authorization": f"Bearer {self.key}"}, timeout=30)

    def alive(self) -> None:
        for started in self.processes:
            assert started.process.returncode is None, (started.role, started.output()[-3000:])

    async def metrics(self, role: str) -> dict[str, list[tuple[str, dict[str, str], float]]]:
        port = next(p.metrics_port for p in self.processes if p.role == role)
        async with httpx.AsyncClient(timeout=10) as http:
            text = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
        return {f.name: [(s.name, s.labels, s.value) for s in f.samples]
                for f in text_string_to_metric_families(text)}


@pytest.fixture
async def role_stack(tmp_path: Path, dev_env: WorkflowEnvironment) -> AsyncIterator[RoleStack]:
    stack = RoleStack(tmp_path, dev_env.client.service_client.config.target_host)
    try:
        yield stack
    finally:
        await stack.stop()


async def _until(check: object, what: str, stack: RoleStack, timeout: float = 90) -> None:
    """Wait for an event (polling its observable effect), failing with the logs if it never comes."""
    assert callable(check)
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        stack.alive()
        assert asyncio.get_running_loop().time() < deadline, (
            what, {p.role: p.output()[-2000:] for p in stack.processes})
        await asyncio.sleep(0.3)


@pytest.mark.parametrize("roles", [["workflows", "jobs"], ["all"]], ids=["split", "one-process"])
async def test_a_task_runs_on_the_worker_processes_of_its_roles(
    role_stack: RoleStack, roles: list[str], target: TargetServer,
) -> None:
    await role_stack.start(roles)
    async with role_stack.api() as api:

        async def healthy() -> bool:
            try:
                return (await api.get("/checkHealth")).status_code == 200
            except httpx.TransportError:
                return False

        # /checkHealth is 200 only with a live worker on the task queue and one on the jobs queue.
        await _until(healthy, "live workers on both queues", role_stack)
        created = await api.post("/task/create", json={
            "task_name": "roles", "schedule_type": "once",
            "run_at": (datetime.now(UTC) + timedelta(seconds=3)).isoformat(),
            "job_details": {"type": "http", "url": target.url("/roles"), "method": "POST"},
        })
        assert created.status_code == 201, created.text
        task_id = created.json()["task_id"]

        async def completed() -> bool:
            return str((await api.get(f"/tasks/{task_id}")).json()["status"]) == "COMPLETED"

        await _until(completed, "the task completes", role_stack)
        runs = (await api.get(f"/tasks/{task_id}/executions")).json()["items"]
    assert [r["status"] for r in runs] == ["COMPLETED"]
    assert [r.path for r in target.received] == ["/roles"]
    assert target.received[0].key == runs[0]["id"]

    # The run was the job process's: its log and its metrics have it, the other's do not.
    jobs_role = roles[-1]
    by_role = {p.role: p for p in role_stack.processes}
    assert "job.start" in by_role[jobs_role].output()
    jobs_metrics = await role_stack.metrics(jobs_role)
    lateness = {name: value for name, _, value in jobs_metrics["scheduler_fire_lateness"]}
    assert lateness["scheduler_fire_lateness_count"] == 1
    # The backlog watcher runs beside the workflows, once per deployment's worker set.
    workflows_metrics = await role_stack.metrics(roles[0])
    assert {labels["task_queue"] for _, labels, _ in workflows_metrics["scheduler_task_queue_backlog"]} == {
        role_stack.task_queue, f"{role_stack.task_queue}-jobs"}
    if roles == ["workflows", "jobs"]:
        assert "job.start" not in by_role["workflows"].output()
        assert "gc.quiet" not in by_role["workflows"].output()
        assert "scheduler_fire_lateness" not in workflows_metrics
        assert "scheduler_task_queue_backlog" not in jobs_metrics
