"""A real local HTTP server that answers the way a hostile or broken target does: huge bodies
(on answers and redirects), bytes trickling in, slow redirect chains, no answer at all."""

from __future__ import annotations

import asyncio
import gzip
from dataclasses import dataclass, field

from aiohttp import web

from tests.target import LocalServer

CHUNK = b"x" * 65536


@dataclass
class HostileTarget(LocalServer):
    """``/big/<bytes>`` and ``/big-redirect/<bytes>`` (a 302 to ``/ok`` carrying that body),
    ``/trickle/<seconds>`` (a byte every 0.2 s for that long), ``/slow-redirect/<hops>`` (each
    hop answers after 1.5 s), ``/gzip/<bytes>`` (compressed text), ``/loop`` (redirects to itself),
    ``/hang``, ``/cookie`` (sets one), anything else 200 ``ok``. ``sent`` counts the body bytes
    the server handed to the connection, whatever the client did with them."""

    sent: int = 0
    paths: list[str] = field(default_factory=list)
    cookies: list[str] = field(default_factory=list)  # Cookie headers that came in

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.paths.append(request.path)
        if "Cookie" in request.headers:
            self.cookies.append(request.headers["Cookie"])
        parts = request.path.strip("/").split("/")
        if parts[0] == "big":
            return await self._stream(request, web.StreamResponse(status=200), int(parts[1]))
        if parts[0] == "big-redirect":
            moved = web.StreamResponse(status=302, headers={"Location": "/ok"})
            return await self._stream(request, moved, int(parts[1]))
        if parts[0] == "trickle":
            return await self._trickle(request, float(parts[1]))
        if parts[0] == "slow-redirect":
            await asyncio.sleep(1.5)
            hops = int(parts[1])
            raise web.HTTPFound(f"/slow-redirect/{hops - 1}" if hops > 1 else "/ok")
        if parts[0] == "gzip":
            text = b"ab" * (int(parts[1]) // 2)
            return web.Response(body=gzip.compress(text), headers={"Content-Encoding": "gzip"})
        if parts[0] == "loop":
            raise web.HTTPFound("/loop")
        if parts[0] == "cookie":
            answer = web.Response(text="ok")
            answer.set_cookie("session", "tenant-a-secret")
            return answer
        if parts[0] == "hang":
            await self._closing.wait()
        return web.Response(text="ok")

    async def _stream(self, request: web.Request, response: web.StreamResponse,
                      size: int) -> web.StreamResponse:
        response.content_length = size
        await response.prepare(request)
        written = 0
        try:
            while written < size:
                await response.write(CHUNK)
                written += len(CHUNK)
                self.sent += len(CHUNK)
        except ConnectionError:
            pass  # the client closed the connection: what it read is what it got
        return response

    async def _trickle(self, request: web.Request, seconds: float) -> web.StreamResponse:
        response = web.StreamResponse(status=200)
        await response.prepare(request)
        try:
            for _ in range(int(seconds / 0.2)):
                await response.write(b".")
                self.sent += 1
                await asyncio.sleep(0.2)
        except ConnectionError:
            pass
        return response
