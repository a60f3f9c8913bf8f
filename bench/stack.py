"""The processes a benchmark runs: a fresh Temporal dev server per system, and either the
scheduler's workers and API or the bare baseline worker. Everything binds 127.0.0.1 and is
stopped by its PID.

The scheduler's workers run in one of the topologies below (`BENCH_WORKER_TOPOLOGY`, or
`WORKER_TOPOLOGY.set(...)` around a workload): `split`, the workflows and the job runs in
separate processes as `task-scheduler dev` runs them; `split-2jobs`, with two jobs worker
processes, as the production manifests run them (two of each); or `single`, both in one
`task-scheduler worker --role all` process."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import httpx
import psutil  # type: ignore[import-untyped, unused-ignore]

from worker.dev import FAIRNESS_FLAGS, SERVER_CACHE_FLAGS, SQLITE_PRAGMA_FLAGS
from workflows.attributes import DEFINITIONS

BIN = Path(sys.executable).parent
HOST = "127.0.0.1"

# Worker processes of each topology: (role in the stack, command).
_WORKER = [str(BIN / "task-scheduler"), "worker", "--role"]
TOPOLOGIES: dict[str, list[tuple[str, list[str]]]] = {
    "single": [("worker", [*_WORKER, "all"])],
    "split": [("worker", [*_WORKER, "workflows"]), ("worker-jobs", [*_WORKER, "jobs"])],
    "split-2jobs": [("worker", [*_WORKER, "workflows"]), ("worker-jobs", [*_WORKER, "jobs"]),
                    ("worker-jobs-2", [*_WORKER, "jobs"])],
}
DEFAULT_TOPOLOGY: str = os.environ.get("BENCH_WORKER_TOPOLOGY", "split")
WORKER_TOPOLOGY: ContextVar[str] = ContextVar("worker_topology", default=DEFAULT_TOPOLOGY)


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, timeout: float, process: subprocess.Popen[bytes]) -> None:
    """Block until something listens on the port, or fail if the process died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args!r} exited with code {process.returncode}")
        try:
            with socket.create_connection((HOST, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"nothing listens on {HOST}:{port} after {timeout:.0f}s")


def stop_process(process: subprocess.Popen[bytes], timeout: float = 20) -> None:
    """SIGTERM this one process (by PID), then SIGKILL if it does not exit."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def rss_bytes(process: subprocess.Popen[bytes]) -> int:
    """Resident memory of a process and its children."""
    try:
        root = psutil.Process(process.pid)
        return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)])
    except psutil.Error:
        return 0


def cpu_seconds(process: subprocess.Popen[bytes]) -> float:
    """CPU time (user + system) a process and its children have used so far."""
    try:
        root = psutil.Process(process.pid)
        return sum(sum(p.cpu_times()[:2]) for p in [root, *root.children(recursive=True)])
    except psutil.Error:
        return 0.0


def file_bytes(path: Path) -> int:
    """Size of a SQLite database with its -wal and -shm files."""
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")) if p.exists())


@dataclass
class Stack:
    """A Temporal dev server in a temporary directory plus the processes run against it."""

    name: str
    directory: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="bench-")))
    port: int = 0
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    logs: list[Path] = field(default_factory=list)
    commands: dict[str, tuple[list[str], dict[str, str]]] = field(default_factory=dict)

    @property
    def address(self) -> str:
        """The Temporal gRPC address."""
        return f"{HOST}:{self.port}"

    @property
    def temporal_db(self) -> Path:
        """The dev server's SQLite file."""
        return self.directory / "temporal.db"

    def spawn(self, role: str, command: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Start a child process whose output goes to a log file in the stack directory."""
        log = self.directory / f"{role}.log"
        self.logs.append(log)
        self.commands[role] = (command, env or {})
        with log.open("ab") as out:
            process = subprocess.Popen(
                command, env={**os.environ, **(env or {})}, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.processes[role] = process
        return process

    def start_server(self) -> None:
        """The dev server with the same settings as production's embedded stack (WAL pragmas,
        the cache sized for herds), for every system alike."""
        self.port = free_port()
        command = [
            str(BIN / "temporal"), "server", "start-dev",
            "--ip", HOST, "--port", str(self.port), "--ui-port", str(free_port()), "--headless",
            "--db-filename", str(self.temporal_db),
            *SQLITE_PRAGMA_FLAGS, "--log-level", "warn", *SERVER_CACHE_FLAGS, *FAIRNESS_FLAGS,
        ]
        for name, kind in DEFINITIONS.items():
            command += ["--search-attribute", f"{name}={kind}"]
        server = self.spawn("temporal", command)
        wait_for_port(self.port, 60, server)

    def rss(self, role: str) -> int:
        """Resident memory of one role's processes (`worker` counts `worker-jobs` too)."""
        return sum(rss_bytes(p) for name, p in self.processes.items()
                   if name == role or name.startswith(f"{role}-"))

    def cpu(self) -> dict[str, float]:
        """CPU seconds used so far by each role (`worker` counts `worker-jobs` too)."""
        found: dict[str, float] = {}
        for name, process in self.processes.items():
            role = name.split("-")[0]
            found[role] = found.get(role, 0.0) + cpu_seconds(process)
        return found

    def halt(self, roles: list[str]) -> None:
        """Stop these roles' processes (SIGTERM, then SIGKILL), to start them again later."""
        for role in roles:
            stop_process(self.processes[role])

    def restart(self, roles: list[str]) -> None:
        """Start these roles again with the command and environment they first ran with."""
        for role in roles:
            self.spawn(role, *self.commands[role])

    def check_alive(self) -> list[str]:
        """Roles whose process has exited."""
        return [role for role, p in self.processes.items() if p.poll() is not None]

    def tail(self, role: str, lines: int = 15) -> str:
        """The end of a role's log, for error reports."""
        path = self.directory / f"{role}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, keep: bool = False) -> None:
        """Stop every process, newest first, and remove the directory unless asked to keep it."""
        for process in reversed(list(self.processes.values())):
            stop_process(process)
        if not keep:
            shutil.rmtree(self.directory, ignore_errors=True)


# The API's bound on Temporal's workflow-queue wait (ApiSettings.max_workflow_backlog_seconds).
BACKLOG_BOUND = "SCHEDULER_API_MAX_WORKFLOW_BACKLOG_SECONDS"


@dataclass
class SchedulerStack(Stack):
    """The scheduler as in production: dev server, `task-scheduler worker` (one process per role
    of the topology), `task-scheduler api`."""

    api_port: int = 0
    api_key: str = ""
    api_workers: int = 1
    task_queue: str = "task-scheduler-bench"
    topology: str = field(default_factory=WORKER_TOPOLOGY.get)
    settings: dict[str, str] = field(default_factory=dict)  # more SCHEDULER_* for every process

    @property
    def database_url(self) -> str:
        """The scheduler's SQLite URL."""
        return f"sqlite:///{self.scheduler_db}"

    @property
    def scheduler_db(self) -> Path:
        """The scheduler's SQLite file."""
        return self.directory / "scheduler.db"

    @property
    def api_url(self) -> str:
        """Base URL of the REST API."""
        return f"http://{HOST}:{self.api_port}"

    def start(self) -> None:
        """Migrate, make an API key, start server, worker and API, and wait until healthy."""
        from store.engine import make_engine, migrate
        from store.keys import create_key

        engine = make_engine(self.database_url)
        migrate(engine)
        _, self.api_key = create_key(engine, "bench")
        engine.dispose()
        self.start_server()
        self.api_port = free_port()
        env = {
            "SCHEDULER_TEMPORAL_ADDRESS": self.address,
            "SCHEDULER_DATABASE_URL": self.database_url,
            "SCHEDULER_DATA_DIR": str(self.directory),
            "SCHEDULER_API_HOST": HOST,
            "SCHEDULER_API_PORT": str(self.api_port),
            "SCHEDULER_API_WORKERS": str(self.api_workers),
            "SCHEDULER_TEMPORAL_TASK_QUEUE": self.task_queue,
            "SCHEDULER_ENV": "test",
            "SCHEDULER_LOG_LEVEL": "WARNING",
            "SCHEDULER_DATABASE_AUTO_MIGRATE": "false",
            # The per-tenant rate limits and quota are policy, not capacity: lift them so the
            # benchmark measures what the stack can do (all bench tasks share one tenant).
            "SCHEDULER_RATE_LIMIT_WRITES": "1000000/second",
            "SCHEDULER_RATE_LIMIT_READS": "1000000/second",
            "SCHEDULER_QUOTA_MAX_ACTIVE_TASKS": "10000000",
            # Most workloads create every task before they measure: a create refused while the
            # workers are behind would only stretch that set-up. Reminders, where creates and
            # fires overlap, runs with the product's bound (bench/reminders.py).
            BACKLOG_BOUND: "0",
        } | self.settings
        for role, command in TOPOLOGIES[self.topology]:
            self.spawn(role, command, env)
        api = self.spawn("api", [str(BIN / "task-scheduler"), "api"], env)
        wait_for_port(self.api_port, 60, api)
        self.wait_healthy(60)

    def wait_healthy(self, timeout: float) -> None:
        """Until /checkHealth answers 200 (database, Temporal and a worker are up)."""
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            if dead := self.check_alive():
                raise RuntimeError(f"{dead} exited:\n" + "\n".join(self.tail(r) for r in dead))
            try:
                answer = httpx.get(f"{self.api_url}/checkHealth", timeout=5)
                if answer.status_code == 200:
                    return
                last = answer.text
            except httpx.HTTPError as exc:
                last = repr(exc)
            time.sleep(0.5)
        raise RuntimeError(f"the scheduler stack is not healthy after {timeout:.0f}s: {last}")

    def headers(self) -> dict[str, str]:
        """Authorization for the bench tenant."""
        return {"Authorization": f"Bearer {self.api_key}"}


@dataclass
class BareStack(Stack):
    """A dev server with the baseline worker (bench.baseline) as its own process."""

    task_queue: str = "bench-baseline"

    def start(self, activity_slots: int = 1000) -> None:
        """Start the server and the baseline worker."""
        self.start_server()
        self.spawn(
            "worker",
            [sys.executable, "-m", "bench.baseline", "--address", self.address,
             "--task-queue", self.task_queue, "--activity-slots", str(activity_slots)],
            {"PYTHONPATH": str(Path(__file__).parent.parent)},
        )
        ready = self.directory / "worker.log"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.check_alive():
                raise RuntimeError("baseline worker exited:\n" + self.tail("worker"))
            if ready.exists() and "baseline worker polling" in ready.read_text(errors="replace"):
                return
            time.sleep(0.2)
        raise RuntimeError("baseline worker did not start")


def api_session(stack: SchedulerStack, concurrency: int, timeout: float = 60) -> aiohttp.ClientSession:
    """HTTP client of the driver, keeping up to `concurrency` connections to the API.

    aiohttp rather than httpx: the driver shares the machine with what it measures, and httpx
    spent about 2.5 ms of CPU per request here, aiohttp about 0.4 ms (the Temporal client of the
    baselines about 0.6 ms)."""
    return aiohttp.ClientSession(
        base_url=stack.api_url, headers=stack.headers(), timeout=aiohttp.ClientTimeout(total=timeout),
        connector=aiohttp.TCPConnector(limit=concurrency),
    )


async def drained(stack: Stack, idle_cores: float = 0.15, window: float = 2.0,
                  timeout: float = 600.0) -> float:
    """Seconds until the stack's processes together use less than `idle_cores` of CPU over a
    `window`: the backlog the calls left behind (such as the new tasks' first workflow tasks)
    has been worked off."""
    began = time.perf_counter()
    before = sum(stack.cpu().values())
    while time.perf_counter() - began < timeout:
        await asyncio.sleep(window)
        now = sum(stack.cpu().values())
        if (now - before) / window < idle_cores:
            return max(0.0, time.perf_counter() - began - window)
        before = now
    return timeout
