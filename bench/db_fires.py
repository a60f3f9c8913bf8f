"""How many fires per second the scheduler's database takes: the rows one fire writes
(``store.tasks``), one transaction each from several threads, and the same writes batched
through ``store.batch.BatchWriter``, on SQLite (WAL) and on a throwaway PostgreSQL cluster with
default durability. Used by ``measure_fire_cost.py --db-seconds``."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import Engine

from store.engine import make_engine, migrate
from store.models import ExecutionRecord, TaskSnapshot
from store.tasks import write_record, write_started


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])



def _fire_rows(task: str, fire: int, created: datetime) -> tuple[TaskSnapshot, ExecutionRecord]:
    scheduled = created + timedelta(seconds=fire)
    snapshot = TaskSnapshot(
        task_id=task, tenant_id="probe", name="probe", schedule_type="interval",
        spec={"schedule_type": "interval"}, status="PENDING",
        next_run_at=scheduled + timedelta(seconds=1), created_at=created, updated_at=created,
        state_version=3 * fire + 1,
    )
    record = ExecutionRecord(id=f"{task}:{scheduled.isoformat()}", task_id=task,
                             tenant_id="probe", scheduled_at=scheduled, status="RUNNING",
                             attempts=1, started_at=scheduled)
    return snapshot, record


def db_fires_per_second(engine: Engine, seconds: float, threads: int) -> float:
    """Fires per second the database takes, one transaction per write group: the RUNNING row
    when the job starts, the final row with the task row at the end (``store.tasks``), every
    thread on tasks of its own."""
    stop = time.monotonic() + seconds
    done = [0] * threads

    def writer(index: int) -> None:
        created = datetime.now(UTC)
        tasks = [uuid.uuid4().hex for _ in range(50)]
        fire = 0
        while time.monotonic() < stop:
            snapshot, record = _fire_rows(tasks[fire % len(tasks)], fire, created)
            with engine.begin() as connection:
                write_started(engine, record)(connection)
            final = record.model_copy(update={"status": "COMPLETED", "finished_at": record.started_at})
            with engine.begin() as connection:
                write_record(engine, [final], snapshot.model_copy(
                    update={"state_version": 3 * fire + 2, "last_run_status": "COMPLETED"}))(connection)
            fire += 1
        done[index] = fire

    workers = [threading.Thread(target=writer, args=(i,)) for i in range(threads)]
    started = time.monotonic()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return sum(done) / (time.monotonic() - started)


def db_fires_per_second_batched(engine: Engine, seconds: float, concurrent: int) -> float | None:
    """The same writes through ``store.batch.BatchWriter`` (many fires share a commit), from
    ``concurrent`` fires in flight at once; None when this version has no batch writer."""
    try:
        from store.batch import BatchWriter
    except ImportError:
        return None

    async def run() -> float:
        writer = BatchWriter(engine)
        stop = time.monotonic() + seconds
        created = datetime.now(UTC)

        async def fires() -> int:
            task, fire = uuid.uuid4().hex, 0
            while time.monotonic() < stop:
                snapshot, record = _fire_rows(task, fire, created)
                await writer.submit(write_started(engine, record))
                final = record.model_copy(update={"status": "COMPLETED"})
                await writer.submit(write_record(engine, [final], snapshot.model_copy(
                    update={"state_version": 3 * fire + 2})))
                fire += 1
            return fire

        started = time.monotonic()
        counts = await asyncio.gather(*(fires() for _ in range(concurrent)))
        return sum(counts) / (time.monotonic() - started)

    return asyncio.run(run())


@contextmanager
def postgres_cluster(root: Path) -> Iterator[str]:
    """A throwaway PostgreSQL cluster with default durability; yields its URL."""
    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    if not initdb or not pg_ctl:
        raise SystemExit("initdb/pg_ctl not found: PostgreSQL is needed for --db-seconds")
    run_as: list[str] = []
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root
        shutil.chown(root, user="nobody")
        run_as = ["runuser", "-u", "nobody", "--"]
    data, port = root / "data", free_port()
    subprocess.run([*run_as, initdb, "-D", str(data), "-U", "scheduler", "--auth=trust"],
                   check=True, capture_output=True)
    subprocess.run([*run_as, pg_ctl, "-D", str(data), "-l", str(root / "log"), "-w", "-o",
                    f"-p {port} -k {root} -c listen_addresses=127.0.0.1", "start"],
                   check=True, capture_output=True)
    try:
        yield f"postgresql://scheduler@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*run_as, pg_ctl, "-D", str(data), "-m", "fast", "stop"],
                       check=False, capture_output=True)


def measure_db(seconds: float, threads: int) -> dict[str, float]:
    """Fires per second on SQLite (WAL) and on PostgreSQL, this machine."""
    rates: dict[str, float] = {}

    def probe(name: str, engine: Engine) -> None:
        rates[name] = db_fires_per_second(engine, seconds, threads)
        batched = db_fires_per_second_batched(engine, seconds, concurrent=200)
        if batched is not None:
            rates[f"{name}, batched"] = batched

    with tempfile.TemporaryDirectory(prefix="fire-db-") as tmp:
        engine = make_engine(f"sqlite:///{tmp}/scheduler.db")
        migrate(engine)
        probe("sqlite", engine)
        engine.dispose()
    # Its own top-level directory: when run as root the cluster runs as another user.
    root = Path(tempfile.mkdtemp(prefix="fire-pg-"))
    try:
        with postgres_cluster(root) as url:
            engine = make_engine(url, pool_size=threads)
            migrate(engine)
            probe("postgresql", engine)
            engine.dispose()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return rates
