"""`task-scheduler api` serves with uvicorn's C parser (httptools) on the plain asyncio loop:
h11, the fallback when httptools is missing, cost a create a quarter more of the API's CPU, and
uvloop gave most of the gain back (docs/capacity.md, "API")."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from cli import main as cli


@pytest.mark.parametrize("workers", ["1", "2"])
def test_the_api_command_runs_uvicorn_with_httptools_on_asyncio(
    monkeypatch: pytest.MonkeyPatch, workers: str
) -> None:
    seen: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: seen.update(options, app=app))
    monkeypatch.setenv("SCHEDULER_ENV", "test")
    monkeypatch.setenv("SCHEDULER_DATABASE_AUTO_MIGRATE", "false")

    assert cli.main(["api", "--workers", workers]) == 0

    assert seen["http"] == "httptools"
    assert seen["loop"] == "asyncio"
    config = uvicorn.Config(
        seen["app"], **{k: v for k, v in seen.items() if k in ("http", "loop", "factory")}
    )
    config.load()  # fails if httptools is not installed
    assert config.http_protocol_class is HttpToolsProtocol
    loop_factory = config.get_loop_factory()
    loop = loop_factory() if loop_factory else asyncio.new_event_loop()
    try:
        assert type(loop).__module__.startswith("asyncio"), type(loop)
    finally:
        loop.close()

