"""Python handlers a task can run by name; applications add their own via an entry point group.

A handler is ``async def handler(ctx: HandlerContext) -> Any``. A plain function works too: it
runs on a thread of its own (PLAIN_THREADS of them), so a blocking one never holds the worker's
event loop, which every tenant's runs share. It beats with ``ctx.heartbeat`` (the activity's own
``heartbeat`` needs the loop). A run that times out leaves it running on its thread to its end,
as nothing can stop a thread: plain functions that hang fill the threads for every tenant, so
one that may block long should be async. Register it in your package's metadata::

    [project.entry-points."task_scheduler.handlers"]
    send_digest = "myapp.jobs:send_digest"
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import inspect
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from importlib.metadata import entry_points
from typing import Any

import structlog

ENTRY_POINT_GROUP = "task_scheduler.handlers"

log = structlog.get_logger("task_scheduler.handlers")


@dataclass
class HandlerContext:
    """What a handler gets: its arguments and the run's identity; ``heartbeat`` keeps it alive."""

    args: dict[str, Any]
    execution_id: str
    task_id: str
    scheduled_at: datetime
    heartbeat: Callable[..., None] = field(default=lambda *details: None)


Handler = Callable[[HandlerContext], Awaitable[Any] | Any]


async def noop(ctx: HandlerContext) -> None:
    """Does nothing; useful to test schedules."""
    return None


async def log_message(ctx: HandlerContext) -> dict[str, Any]:
    """Logs its arguments and returns them."""
    log.info("handler.log", execution_id=ctx.execution_id, task_id=ctx.task_id, args=ctx.args)
    return ctx.args


# A handler may say which arguments it takes: ``check_args(args)``, an attribute set with
# ``checks_args``, raises ValueError or TypeError for arguments it would fail on. The API runs
# it when a task is created or changed (422), not only every run.
ArgsCheck = Callable[[dict[str, Any]], object]


def checks_args(check: ArgsCheck) -> Callable[[Handler], Handler]:
    """Declare ``check`` as the handler's check of its arguments."""
    def declare(handler: Handler) -> Handler:
        setattr(handler, "check_args", check)  # noqa: B010 - a function's own attribute
        return handler
    return declare


def args_check(handler: Handler) -> ArgsCheck | None:
    """The handler's check of its arguments, if it declares one."""
    check = getattr(handler, "check_args", None)
    return check if callable(check) else None


def _sleep_seconds(args: dict[str, Any]) -> float:
    given = args.get("seconds", 1)
    try:  # a number, or one written as a string (as it always was taken)
        seconds = float(given) if isinstance(given, int | float | str) and not isinstance(given, bool) else None
    except ValueError:
        seconds = None
    if seconds is None or not 0 <= seconds <= 86400:
        raise ValueError(f"sleep: seconds must be a number from 0 to 86400, not {given!r}")
    return seconds


@checks_args(_sleep_seconds)
async def sleep(ctx: HandlerContext) -> dict[str, float]:
    """Sleeps ``seconds`` (default 1), heartbeating every second so it can be cancelled."""
    seconds = _sleep_seconds(ctx.args)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while (left := deadline - loop.time()) > 0:
        ctx.heartbeat(left)
        await asyncio.sleep(min(1.0, left))
    return {"slept_seconds": seconds}


def load_handlers(extra: Mapping[str, Handler] | None = None) -> dict[str, Handler]:
    """Every handler registered under the entry point group, plus ``extra`` (tests, embedding)."""
    found: dict[str, Handler] = {"noop": noop, "log": log_message, "sleep": sleep}
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        try:
            found[entry.name] = entry.load()
        except Exception as exc:  # one broken plugin must not take the worker down
            log.error("handler.load_failed", name=entry.name, error=str(exc))
    found.update(extra or {})
    return found


# Threads for plain-function handlers, shared by the worker's runs.
PLAIN_THREADS = 16
_plain: ThreadPoolExecutor | None = None


def _is_async(handler: Handler) -> bool:
    """An async function, or an object whose call is one."""
    call = type(handler).__call__ if not inspect.isroutine(handler) else None
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(call)


async def call_handler(handler: Handler, ctx: HandlerContext) -> Any:
    """Call a handler: an async one on the event loop, a plain function on a handler thread,
    its beats handed back to the loop."""
    if _is_async(handler):
        result = handler(ctx)
    else:
        global _plain
        if _plain is None:
            _plain = ThreadPoolExecutor(PLAIN_THREADS, thread_name_prefix="handler")
        loop = asyncio.get_running_loop()
        beat = ctx.heartbeat

        def beat_on_the_loop(*details: Any) -> None:
            loop.call_soon_threadsafe(beat, *details)

        threaded = dataclasses.replace(ctx, heartbeat=beat_on_the_loop)
        # The activity's context goes along: activity.info() works in the handler.
        result = await loop.run_in_executor(_plain, contextvars.copy_context().run, handler, threaded)
    if inspect.isawaitable(result):
        result = await result
    return result
