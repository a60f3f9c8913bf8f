"""Where the API's database calls run: a point read on SQLite in place on the event loop, anything
on a server database on a thread, and no request dependency on a thread."""

from __future__ import annotations

import inspect
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError

from api.app import create_app
from api.database import in_thread
from api.errors import ServiceUnavailable
from store.engine import make_engine


@pytest.fixture
def sqlite(tmp_path: Path) -> Iterator[Engine]:
    engine = make_engine(f"sqlite:///{tmp_path / 'calls.db'}")
    yield engine
    engine.dispose()


def _thread_of(engine: Engine, seen: list[int]) -> int:
    seen.append(threading.get_ident())
    return len(seen)


async def test_a_store_call_runs_on_a_thread(sqlite: Engine) -> None:
    seen: list[int] = []
    assert await in_thread(_thread_of, sqlite, seen) == 1
    assert seen and seen[0] != threading.get_ident()


def _outage(engine: Engine) -> None:
    raise OperationalError("SELECT 1", {}, Exception("unable to open database file"))


async def test_a_database_outage_is_a_503(sqlite: Engine) -> None:
    with pytest.raises(ServiceUnavailable):
        await in_thread(_outage, sqlite)


def _calls(dependant: Dependant) -> Iterator[Any]:
    for dependency in dependant.dependencies:
        yield dependency.call
        yield from _calls(dependency)


def _routes(routes: list[Any]) -> Iterator[Any]:
    """Every route, also those of the routers the app includes (no dependencies of their own)."""
    for route in routes:
        yield route
        included = getattr(route, "original_router", None)
        if included is not None:
            yield from _routes(included.routes)


def test_every_request_dependency_is_a_coroutine() -> None:
    # FastAPI runs a dependency written as a plain function (or plain generator) on a thread,
    # and that trip cost 0.3-0.6 ms of CPU per request under a burst: every dependency stays a
    # coroutine or an async generator (entered on the loop, as an async context manager).
    app = create_app()
    plain = set()
    routes = [route for route in _routes(app.routes) if isinstance(route, APIRoute)]
    assert len(routes) > 10
    for route in routes:
        for call in _calls(route.dependant):
            target = call if inspect.isfunction(call) else type(call).__call__
            if not (inspect.iscoroutinefunction(target) or inspect.isasyncgenfunction(target)):
                plain.add(f"{route.path}: {getattr(call, '__qualname__', call)}")
    assert not plain, sorted(plain)
