"""Real API, worker, Temporal and PostgreSQL processes for fault tests.

Every process is started as a child and stopped by its own PID (never by name)."""

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
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from worker.dev import FAIRNESS_FLAGS, SERVER_CACHE_FLAGS, SQLITE_PRAGMA_FLAGS
from workflows.attributes import DEFINITIONS

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def process_env(*, temporal: str, database_url: str, task_queue: str, **extra: str) -> dict[str, str]:
    """Environment of an API or worker process of the test stack."""
    env = {
        **os.environ,
        "SCHEDULER_ENV": "test",
        "SCHEDULER_TEMPORAL_ADDRESS": temporal,
        "SCHEDULER_DATABASE_URL": database_url,
        "SCHEDULER_TEMPORAL_TASK_QUEUE": task_queue,
        "SCHEDULER_EGRESS_ALLOW": "127.0.0.1",
        "SCHEDULER_LOG_LEVEL": "WARNING",
        # These tests read /checkHealth right after causing a fault, which an answer shared for
        # a second (the default) could predate.
        "SCHEDULER_API_HEALTH_CACHE_SECONDS": "0",
    }
    env.update({f"SCHEDULER_{k.upper()}": v for k, v in extra.items()})
    return env


def start_process(role: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """`task-scheduler <role>` as a child process logging to a file; role ``dying-api`` is an
    API that dies between a create's workflow start and its row write (tests/faults/dying_api.py)."""
    command = (["-m", "tests.faults.dying_api"] if role == "dying-api"
               else ["-m", "cli.main", role])
    return subprocess.Popen(
        [sys.executable, *command], env=env, cwd=ROOT,
        stdout=log.open("ab"), stderr=subprocess.STDOUT,
    )


def wait_http(url: str, process: subprocess.Popen[bytes], timeout: float = 60) -> None:
    """Wait until the URL answers (any status)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, f"process exited with {process.returncode}"
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise AssertionError(f"{url} did not answer in {timeout}s")


async def await_http(url: str, process: subprocess.Popen[bytes], timeout: float = 60) -> None:
    """Wait until the URL answers (any status), without blocking the event loop (the target
    server of the test runs on it)."""
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(timeout=1) as http:
        while time.monotonic() < deadline:
            assert process.poll() is None, f"process exited with {process.returncode}"
            try:
                await http.get(url)
                return
            except httpx.HTTPError:
                await asyncio.sleep(0.2)
    raise AssertionError(f"{url} did not answer in {timeout}s")


async def await_port(port: int, process: subprocess.Popen[bytes], timeout: float = 60) -> None:
    """Wait until something listens on 127.0.0.1:port (or the process died)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, f"process exited with {process.returncode}"
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return
        except OSError:
            await asyncio.sleep(0.2)
    raise AssertionError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
        process.wait()


def kill9(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process by its PID and reap it: no shutdown code runs."""
    if process.poll() is None:
        os.kill(process.pid, signal.SIGKILL)
    process.wait()


@dataclass
class Fleet:
    """The API and worker processes of one test, by name; ``close`` kills what is left."""

    logs: Path
    env: dict[str, str]
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    api_ports: dict[str, int] = field(default_factory=dict)

    def start_worker(self, name: str, **extra: str) -> subprocess.Popen[bytes]:
        env = {**self.env, **{f"SCHEDULER_{k.upper()}": v for k, v in extra.items()}}
        process = start_process("worker", env, self.logs / f"{name}.log")
        self.processes[name] = process
        return process

    async def start_api(self, name: str, port: int | None = None, role: str = "api",
                        **extra: str) -> str:
        """Start (or restart on its former port) an API process; its base URL once it answers."""
        port = port or self.api_ports.get(name) or free_port()
        self.api_ports[name] = port
        env = {**self.env, "SCHEDULER_API_PORT": str(port),
               **{f"SCHEDULER_{k.upper()}": v for k, v in extra.items()}}
        process = start_process(role, env, self.logs / f"{name}.log")
        self.processes[name] = process
        base = f"http://127.0.0.1:{port}"
        await await_http(f"{base}/livez", process)
        return base

    def kill(self, name: str) -> None:
        kill9(self.processes[name])

    def alive(self, name: str) -> bool:
        return self.processes[name].poll() is None

    def close(self) -> None:
        for process in self.processes.values():
            stop(process)


def temporal_command(db_file: Path, port: int, ui_port: int) -> list[str]:
    """A dev server keeping its state in a SQLite file, with the SQLite settings, the task search
    attributes and the server cache of `task-scheduler dev`."""
    command = [
        str(BIN / "temporal"), "server", "start-dev", "--ip", "127.0.0.1",
        "--port", str(port), "--ui-port", str(ui_port), "--headless",
        "--db-filename", str(db_file),
        *SQLITE_PRAGMA_FLAGS, "--log-level", "warn",
        "--dynamic-config-value", "frontend.enableUpdateWorkflowExecution=true",
        *SERVER_CACHE_FLAGS, *FAIRNESS_FLAGS,  # as the embedded production server runs
    ]
    for name, kind in DEFINITIONS.items():
        command += ["--search-attribute", f"{name}={kind}"]
    return command


@dataclass
class TemporalServer:
    """A Temporal dev server on a SQLite file that a test may kill -9 and start again."""

    db_file: Path
    log: Path
    port: int = field(default_factory=free_port)
    ui_port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> None:
        self.process = subprocess.Popen(
            temporal_command(self.db_file, self.port, self.ui_port), cwd=ROOT,
            stdout=self.log.open("ab"), stderr=subprocess.STDOUT,
        )
        await await_port(self.port, self.process)

    def kill(self) -> None:
        if self.process is not None:
            kill9(self.process)


@dataclass
class PostgresCluster:
    """A throwaway PostgreSQL cluster (initdb/pg_ctl) that a test may stop and start again."""

    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="ts-pg-fault-")))
    port: int = field(default_factory=free_port)
    run_as: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"postgresql://scheduler@127.0.0.1:{self.port}/postgres"

    def init(self) -> None:
        initdb = shutil.which("initdb")
        if initdb is None or shutil.which("pg_ctl") is None:
            raise RuntimeError("PostgreSQL binaries initdb/pg_ctl are required")
        if os.geteuid() == 0:
            # PostgreSQL refuses to run as root: run the cluster as an unprivileged user.
            user = "postgres" if _has_user("postgres") else "nobody"
            shutil.chown(self.root, user=user)
            self.run_as = ["runuser", "-u", user, "--"]
        subprocess.run([*self.run_as, initdb, "-D", str(self.root / "data"), "-U", "scheduler",
                        "--auth=trust", "-E", "UTF8"], check=True, capture_output=True)

    def start(self) -> None:
        subprocess.run(
            [*self.run_as, "pg_ctl", "-D", str(self.root / "data"), "-l", str(self.root / "log"),
             "-w", "-o", f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off",
             "start"],
            check=True, capture_output=True,
        )

    def stop(self, mode: str = "fast") -> None:
        """Stop the server; ``fast`` disconnects every client at once."""
        subprocess.run([*self.run_as, "pg_ctl", "-D", str(self.root / "data"), "-m", mode, "-w", "stop"],
                       capture_output=True)

    def destroy(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


def _has_user(name: str) -> bool:
    import pwd

    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True
