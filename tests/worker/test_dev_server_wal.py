"""The embedded dev server's SQLite file: its WAL is checkpointed every 16,000 pages, not at
SQLite's default 1,000, and stays that size however much the server writes."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

from temporalio.client import Client

from tests.conftest import settings_of
from tests.faults.processes import free_port
from worker.dev import WAL_CHECKPOINT_PAGES, dev_server_command, wait_for_port

SQLITE_DEFAULT_CHECKPOINT_PAGES = 1_000
WAL_HEADER_BYTES = 32
FRAME_HEADER_BYTES = 24


def _page_size(db_file: Path) -> int:
    """From the database header: bytes 16-17, big-endian, 1 meaning 65,536."""
    raw = int.from_bytes(db_file.read_bytes()[16:18], "big")
    return 65_536 if raw == 1 else raw


async def _start_many(address: str, count: int, concurrency: int) -> None:
    """Start workflows that no worker will ever run: each start is writes on the server only."""
    for tries_left in reversed(range(60)):  # the port opens before the frontend is healthy
        try:
            client = await Client.connect(address)
            break
        except RuntimeError:
            if not tries_left:
                raise
            await asyncio.sleep(0.5)
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with gate:
            await client.start_workflow("NoWorkerRunsThis", id=f"wal-{i}", task_queue="no-worker")

    await asyncio.gather(*(one(i) for i in range(count)))


async def test_the_wal_outgrows_the_sqlite_default_and_stays_bounded(tmp_path: Path) -> None:
    settings = settings_of(temporal_address=f"127.0.0.1:{free_port()}", temporal_ui_port=free_port(),
                        data_dir=tmp_path)
    log = (tmp_path / "server.log").open("wb")
    server = subprocess.Popen([*dev_server_command(settings), "--headless"], stdout=log,
                              stderr=subprocess.STDOUT)
    try:
        wait_for_port(settings.temporal.address, 60, server)
        # About 250 pages of WAL per start: 600 starts write many times the 16,000 pages.
        await _start_many(settings.temporal.address, 600, 32)
        wal = tmp_path / "temporal.db-wal"
        size = wal.stat().st_size  # the file keeps its largest size until the server closes it
        page = _page_size(tmp_path / "temporal.db")
        frame = page + FRAME_HEADER_BYTES
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()
    # With SQLite's default the file never passed 6 MB under a burst of starts.
    assert size > 4 * SQLITE_DEFAULT_CHECKPOINT_PAGES * frame, size
    # Bounded: checkpointed and reset, overshooting by at most the last transactions' pages.
    assert size <= WAL_HEADER_BYTES + (WAL_CHECKPOINT_PAGES + 2_000) * frame, size
