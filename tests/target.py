"""A real local HTTP target server for jobs: records every request, answers as told, and, when
given the tenant's signing secrets, verifies each request's signature with the independent
``standardwebhooks`` package, refusing a bad or stale one with 401."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import web
from standardwebhooks import Webhook, WebhookVerificationError


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: datetime = field(default_factory=lambda: datetime.now(UTC))
    status: int | None = None  # what the target answered (None: no answer was sent)
    verified: bool | None = None  # its signature checked out (None: not checked)

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None

    @property
    def key(self) -> str | None:
        """The request's Idempotency-Key (the execution id of a run)."""
        return self.headers.get("Idempotency-Key")


@dataclass
class LocalServer:
    """A real HTTP server on 127.0.0.1 and a free port; ``_handle`` answers every request."""

    port: int = 0
    _runner: web.AppRunner | None = None
    _closing: asyncio.Event = field(default_factory=asyncio.Event)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        self._closing.set()  # hanging requests end now, not at the runner's shutdown timeout
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raise NotImplementedError


@dataclass
class TargetServer(LocalServer):
    """Answers ``/status/<code>``, ``/slow/<seconds>``, ``/hang``, ``/redirect?to=<url>``,
    ``/nul/<code>`` (a body with a NUL byte), anything else with 200 and a JSON body."""

    received: list[Received] = field(default_factory=list)
    # The secrets a signature may be made with (a receiver during a rotation takes either).
    secrets: list[str] = field(default_factory=list)
    _event: asyncio.Event = field(default_factory=asyncio.Event)

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def requests_by_key(self) -> Counter[str]:
        """How many requests arrived under each Idempotency-Key."""
        return Counter(r.key for r in self.received if r.key is not None)

    async def wait_for(self, count: int, timeout: float = 30) -> list[Received]:
        """Wait until at least ``count`` requests arrived."""
        async def _until() -> None:
            while len(self.received) < count:
                self._event.clear()
                await self._event.wait()
        await asyncio.wait_for(_until(), timeout)
        return self.received

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        seen = Received(request.method, request.path, dict(request.headers), body)
        self.received.append(seen)
        self._event.set()
        if self.secrets:
            seen.verified = self.verify(body, seen.headers)
            if not seen.verified:
                seen.status = 401
                return web.Response(status=401, text="bad or stale signature")
        response = await self._answer(request)
        seen.status = response.status
        return response

    def verify(self, body: bytes, headers: dict[str, str]) -> bool:
        """Whether one of the secrets signed the request, less than five minutes ago."""
        for secret in self.secrets:
            try:
                Webhook(secret).verify(body, headers, json_parse=False)
                return True
            except WebhookVerificationError:
                continue
        return False

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        parts = request.path.strip("/").split("/")
        if parts[0] == "status" and len(parts) > 1:
            return web.Response(status=int(parts[1]), text=f"answered {parts[1]}")
        if parts[0] == "nul" and len(parts) > 1:
            return web.Response(status=int(parts[1]), body=b"ok\x00then more")
        if parts[0] == "redirect":
            raise web.HTTPFound(request.query["to"])
        if parts[0] == "slow" and len(parts) > 1:
            await asyncio.sleep(float(parts[1]))
        if parts[0] == "hang":
            await self._closing.wait()
        return web.json_response({"ok": True, "path": request.path})


@asynccontextmanager
async def hook_comes_up(port: int) -> AsyncIterator[list[str]]:
    """A target that comes up on ``port`` (where nothing listened, so runs failed): it answers
    ``POST /hook`` 200 and notes each request's Idempotency-Key, in the list it yields."""
    keys: list[str] = []

    async def hook(request: web.Request) -> web.Response:
        keys.append(request.headers["Idempotency-Key"])
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield keys
    finally:
        await runner.cleanup()
