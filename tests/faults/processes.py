"""Real API and worker processes for fault tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]


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
        "SCHEDULER_TASK_QUEUE": task_queue,
        "SCHEDULER_EGRESS_ALLOW": "127.0.0.1",
        "SCHEDULER_LOG_LEVEL": "WARNING",
    }
    env.update({f"SCHEDULER_{k.upper()}": v for k, v in extra.items()})
    return env


def start_process(role: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """`task-scheduler <role>` as a child process logging to a file."""
    return subprocess.Popen(
        [sys.executable, "-m", "worker.cli", role], env=env, cwd=ROOT,
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


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
        process.wait()
