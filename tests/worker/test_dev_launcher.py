"""`task-scheduler dev` (what `make run` starts): the whole stack, stopped by a signal, a
second start that finds every task of the first still scheduled, and parts that exit on their
own started again (up to a limit)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.target import TargetServer
from worker.dev import RESTART_LIMIT


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class DevStack:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.api_port, self.temporal_port, self.ui_port = _free_port(), _free_port(), _free_port()
        self.metrics_port, self.jobs_metrics_port = _free_port(), _free_port()
        self.process: subprocess.Popen[str] | None = None
        self.log = data_dir / "dev.log"

    def start(self) -> None:
        """Start ``task-scheduler dev``; again on new ports if the Temporal dev server lost a
        port it picked for itself to another test's process meanwhile (it binds its own
        services' ports after choosing them)."""
        for _ in range(3):
            if self._started():
                return
            assert "address already in use" in self.log.read_text(), self.log.read_text()[-3000:]
            self.api_port, self.temporal_port, self.ui_port = _free_port(), _free_port(), _free_port()
        raise AssertionError("the dev stack never got its ports: " + self.log.read_text()[-3000:])

    def _started(self) -> bool:
        env = {
            **os.environ,
            "SCHEDULER_DATA_DIR": str(self.data_dir),
            "SCHEDULER_API_PORT": str(self.api_port),
            "SCHEDULER_TEMPORAL_ADDRESS": f"127.0.0.1:{self.temporal_port}",
            "SCHEDULER_TEMPORAL_UI_PORT": str(self.ui_port),
            "SCHEDULER_WORKER_METRICS_PORT": str(self.metrics_port),
            "SCHEDULER_DEV_JOBS_METRICS_PORT": str(self.jobs_metrics_port),
        }
        env.pop("SCHEDULER_DEV_API_KEY", None)
        env.pop("SCHEDULER_DATABASE_URL", None)
        offset = self.log.stat().st_size if self.log.exists() else 0
        out = self.log.open("a")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "dev"], env=env, stdout=out, stderr=subprocess.STDOUT,
            text=True, cwd=Path(__file__).resolve().parents[2],
        )
        deadline = time.monotonic() + 90
        while "Press Ctrl-C to stop" not in self.log.read_text()[offset:]:
            if self.process.poll() is not None:
                return False
            assert time.monotonic() < deadline, self.log.read_text()[-3000:]
            time.sleep(0.2)
        return True

    def stop(self, sig: int = signal.SIGINT) -> int:
        assert self.process is not None
        self.process.send_signal(sig)
        return self.process.wait(timeout=60)

    def api(self) -> httpx.Client:
        key = (self.data_dir / "dev_api_key").read_text().strip()
        return httpx.Client(base_url=f"http://127.0.0.1:{self.api_port}",
                            headers={"Authorization": f"Bearer {key}"}, timeout=30)


@pytest.fixture
def dev_stack(tmp_path: Path) -> Iterator[DevStack]:
    stack = DevStack(tmp_path)
    yield stack
    if stack.log.exists():  # shown only when the test failed: what our parts said last
        ours = [line for line in stack.log.read_text().splitlines() if not line.startswith("time=")]
        print("\n".join(ours[-80:]))
    if stack.process is not None and stack.process.poll() is None:
        stack.process.terminate()  # the launcher stops its children on SIGTERM
        try:
            stack.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            stack.process.kill()
            stack.process.wait()


def _no_child_left(stack: DevStack) -> None:
    ports = (stack.api_port, stack.temporal_port, stack.ui_port, stack.metrics_port,
             stack.jobs_metrics_port)
    for port in ports:
        with socket.socket() as sock:
            assert sock.connect_ex(("127.0.0.1", port)) != 0, f"port {port} still answers"


def test_dev_stack_survives_a_restart(dev_stack: DevStack) -> None:
    dev_stack.start()
    output = dev_stack.log.read_text()
    key = (dev_stack.data_dir / "dev_api_key").read_text().strip()
    assert key in output and f"127.0.0.1:{dev_stack.api_port}" in output
    for port in (dev_stack.metrics_port, dev_stack.jobs_metrics_port):  # two worker processes
        assert f"metrics on http://127.0.0.1:{port}/metrics" in output
        worker_metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        assert "temporal_" in worker_metrics  # the SDK's own worker metrics are served
    with dev_stack.api() as api:
        assert api.get("/checkHealth").status_code == 200
        for port in (dev_stack.api_port, dev_stack.temporal_port, dev_stack.ui_port,
                     dev_stack.metrics_port, dev_stack.jobs_metrics_port):
            aimed = api.post("/task/create", json={  # loopback is a target in dev, these ports not
                "task_name": "own-port", "job_details": {"type": "http", "url": f"http://127.0.0.1:{port}/"},
                "schedule_type": "cron", "cron": "0 10 * * *", "timezone": "UTC",
            })
            assert aimed.status_code == 422 and "own" in aimed.json()["detail"], (port, aimed.text)
        run_at = datetime.now(UTC) + timedelta(seconds=25)
        created = api.post("/task/create", json={
            "task_name": "after-restart", "job_details": {"type": "handler", "name": "noop"},
            "schedule_type": "once", "run_at": run_at.isoformat(),
        })
        assert created.status_code == 201, created.text
        task_id = created.json()["task_id"]
    assert dev_stack.stop(signal.SIGINT) == 0
    _no_child_left(dev_stack)
    assert (dev_stack.data_dir / "temporal.db").exists()

    dev_stack.start()  # the same data directory: the same key, the same tasks
    assert (dev_stack.data_dir / "dev_api_key").read_text().strip() == key
    with dev_stack.api() as api:
        task = api.get(f"/tasks/{task_id}").json()
        assert task["status"] == "PENDING" and task["next_run_at"] is not None
        deadline = time.monotonic() + 90
        while api.get(f"/tasks/{task_id}").json()["status"] != "COMPLETED":
            assert time.monotonic() < deadline, api.get(f"/tasks/{task_id}").json()
            time.sleep(0.5)
        runs = api.get(f"/tasks/{task_id}/executions").json()["items"]
        assert [r["status"] for r in runs] == ["COMPLETED"]

    def metrics(port: int) -> dict[str, Any]:
        return {f.name: f for f in text_string_to_metric_families(
            httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text)}

    jobs = metrics(dev_stack.jobs_metrics_port)  # the run ran in the jobs worker process
    lateness = {s.name: s.value for s in jobs["scheduler_fire_lateness"].samples}
    assert lateness["scheduler_fire_lateness_count"] >= 1
    durations = jobs["scheduler_job_duration"].samples
    assert any(s.labels.get("outcome") == "completed" for s in durations)
    backlog = metrics(dev_stack.metrics_port)["scheduler_task_queue_backlog"].samples
    assert {s.labels["type"] for s in backlog} == {"workflow", "activity"}
    assert dev_stack.stop(signal.SIGTERM) == 0
    _no_child_left(dev_stack)


def test_children_die_with_a_killed_launcher(dev_stack: DevStack) -> None:
    dev_stack.start()
    assert dev_stack.process is not None
    dev_stack.process.kill()  # SIGKILL: the launcher cannot stop its children itself
    dev_stack.process.wait()
    deadline = time.monotonic() + 30
    while True:
        try:
            _no_child_left(dev_stack)
            break
        except AssertionError:
            assert time.monotonic() < deadline, "a child outlived the killed launcher"
            time.sleep(0.5)


async def _log_line(stack: DevStack, pattern: str, *, after: int = 0, timeout: float = 90) -> re.Match[str]:
    """Wait until the launcher's output (from offset ``after``) has a line matching ``pattern``."""
    deadline = time.monotonic() + timeout
    while not (found := re.search(pattern, stack.log.read_text()[after:], re.MULTILINE)):
        assert time.monotonic() < deadline, f"no {pattern!r} in: {stack.log.read_text()[-3000:]}"
        await asyncio.sleep(0.2)
    return found


def _pid(stack: DevStack, name: str) -> int:
    """The pid of the part's current process, as the launcher last printed it."""
    lines = re.findall(rf"^{name} (?:started|restarted) \(pid (\d+)\)$", stack.log.read_text(), re.MULTILINE)
    assert lines, stack.log.read_text()[-3000:]
    return int(lines[-1])


async def _restart_by_kill(stack: DevStack, name: str) -> int:
    """SIGKILL the part by its pid, wait until the launcher restarted it; the new pid."""
    killed = _pid(stack, name)
    mark = len(stack.log.read_text())
    os.kill(killed, signal.SIGKILL)
    await _log_line(stack, rf"^{name} exited with code -9; restarting it in [\d.]+ s$", after=mark)
    restarted = int((await _log_line(stack, rf"^{name} restarted \(pid (\d+)\)$", after=mark))[1])
    assert restarted != killed
    return restarted


async def test_a_killed_part_comes_back_while_a_task_keeps_firing(
    dev_stack: DevStack, target: TargetServer
) -> None:
    dev_stack.start()
    key = (dev_stack.data_dir / "dev_api_key").read_text().strip()
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{dev_stack.api_port}", timeout=30,
                                 headers={"Authorization": f"Bearer {key}"}) as api:
        created = await api.post("/task/create", json={
            "task_name": "tick", "schedule_type": "interval", "interval_seconds": 1,
            "job_details": {"type": "http", "url": target.url("/tick")},
        })
        assert created.status_code == 201, created.text
        await target.wait_for(2, timeout=60)

        for part in ("jobs worker", "worker"):
            await _restart_by_kill(dev_stack, part)
            # Runs reach the target again: the restarted process polls the queue.
            seen = len(target.received)
            await target.wait_for(seen + 3, timeout=90)
            assert all(r.status == 200 for r in target.received[seen:])

        await _restart_by_kill(dev_stack, "api")
        deadline = time.monotonic() + 60
        while True:
            try:
                answer = await api.get(f"/tasks/{created.json()['task_id']}")
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the restarted API does not answer"
                await asyncio.sleep(0.3)
        assert answer.status_code == 200 and answer.json()["status"] in ("PENDING", "RUNNING")
    assert dev_stack.process is not None and dev_stack.process.poll() is None
    assert dev_stack.stop(signal.SIGTERM) == 0
    _no_child_left(dev_stack)


async def test_the_launcher_gives_up_on_a_part_that_keeps_exiting(dev_stack: DevStack) -> None:
    dev_stack.start()
    for _ in range(RESTART_LIMIT):  # each restart waits twice as long as the one before
        await _restart_by_kill(dev_stack, "jobs worker")
    mark = len(dev_stack.log.read_text())
    os.kill(_pid(dev_stack, "jobs worker"), signal.SIGKILL)
    await _log_line(dev_stack, rf"^jobs worker exited with code -9 after {RESTART_LIMIT} restarts "
                               r"within 60 s; giving up: stopping everything$", after=mark)
    assert dev_stack.process is not None
    assert dev_stack.process.wait(timeout=60) == 1
    assert "task-scheduler stopped" in dev_stack.log.read_text()[mark:]
    _no_child_left(dev_stack)


def test_dev_refuses_production_and_starts_nothing(tmp_path: Path) -> None:
    env = {**os.environ, "SCHEDULER_ENV": "production", "SCHEDULER_DATA_DIR": str(tmp_path / "data"),
           "SCHEDULER_METRICS_TOKEN": "scrape-me-0123456789",
           "SCHEDULER_SIGNING_KEY": "c2lnbmluZy1rZXktZm9yLXRoZS1jb21wb3NlLXRlc3Q="}
    env.pop("SCHEDULER_DEV_API_KEY", None)
    ran = subprocess.run([sys.executable, "-m", "cli.main", "dev"], env=env, capture_output=True,
                         text=True, timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert ran.returncode == 2, ran.stderr
    assert "refuses SCHEDULER_ENV=production" in ran.stderr and "task-scheduler api" in ran.stderr
    assert not (tmp_path / "data").exists()  # no database, no key, no child process


def test_dev_refuses_ports_something_else_holds_and_starts_nothing(tmp_path: Path) -> None:
    # Another Temporal server on its address would have been taken for its own.
    stack = DevStack(tmp_path)
    env = {**os.environ, "SCHEDULER_DATA_DIR": str(tmp_path / "data"),
           "SCHEDULER_API_PORT": str(stack.api_port),
           "SCHEDULER_TEMPORAL_ADDRESS": f"127.0.0.1:{stack.temporal_port}",
           "SCHEDULER_TEMPORAL_UI_PORT": str(stack.ui_port),
           "SCHEDULER_WORKER_METRICS_PORT": str(stack.metrics_port),
           "SCHEDULER_DEV_JOBS_METRICS_PORT": str(stack.jobs_metrics_port)}
    env.pop("SCHEDULER_DATABASE_URL", None)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", stack.temporal_port))
        squatter.listen()
        ran = subprocess.run([sys.executable, "-m", "cli.main", "dev"], env=env, capture_output=True,
                             text=True, timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert ran.returncode == 2, ran.stderr
    assert f"127.0.0.1:{stack.temporal_port} (Temporal)" in ran.stderr
    assert "started (pid" not in ran.stdout  # no child process
