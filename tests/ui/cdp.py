"""Headless Chromium driven over the DevTools protocol (a websocket, through aiohttp).

Chromium's own --screenshot mode cannot sign in, so the browser tests drive a real page:
type the key into the login form, follow the cookie, then capture the screen.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp

FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--window-size=1200,800", "--remote-debugging-port=0",
]


def chromium_binary() -> str | None:
    """The Debian chromium package's binary, if installed."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Page:
    """One browser tab: send commands, await events."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.ids = itertools.count(1)
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.events: dict[str, asyncio.Queue[dict[str, Any]]] = {}
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for message in self.ws:
            body = message.json()
            if "id" in body and body["id"] in self.pending:
                self.pending.pop(body["id"]).set_result(body)
            elif "method" in body:
                self.events.setdefault(body["method"], asyncio.Queue()).put_nowait(body["params"])

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        """Run a DevTools command and return its result."""
        call_id = next(self.ids)
        self.pending[call_id] = asyncio.get_running_loop().create_future()
        await self.ws.send_json({"id": call_id, "method": method, "params": params})
        answer = await asyncio.wait_for(self.pending[call_id], timeout=30)
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        result: dict[str, Any] = answer["result"]
        return result

    def expect(self, event: str) -> asyncio.Queue[dict[str, Any]]:
        """The queue of an event; drain it before the action that causes the event."""
        queue = self.events.setdefault(event, asyncio.Queue())
        while not queue.empty():
            queue.get_nowait()
        return queue

    async def load(self, action: str, **params: Any) -> None:
        """Run a command (navigate, or evaluate a submit) and wait for the page to load."""
        loaded = self.expect("Page.loadEventFired")
        await self.send(action, **params)
        await asyncio.wait_for(loaded.get(), timeout=30)

    async def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page."""
        result = await self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        return result["result"].get("value")

    async def screenshot(self, path: Path) -> Path:
        """Capture the viewport as a PNG file."""
        data = (await self.send("Page.captureScreenshot", format="png"))["data"]
        path.write_bytes(base64.b64decode(data))
        return path


@asynccontextmanager
async def open_page(binary: str, profile: Path, width: int = 1200, height: int = 800) -> AsyncIterator[Page]:
    """Start Chromium with a throwaway profile and yield its first tab."""
    process = await asyncio.create_subprocess_exec(
        binary, *FLAGS, f"--user-data-dir={profile}", "about:blank",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        port_file = profile / "DevToolsActivePort"
        for _ in range(300):  # Chromium writes its chosen port here once it listens
            if port_file.is_file() and port_file.read_text().count("\n") >= 1:
                break
            await asyncio.sleep(0.1)
        port = int(port_file.read_text().splitlines()[0])
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/json/list") as answer:
                targets = await answer.json()
            url = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
            async with session.ws_connect(url, max_msg_size=0) as ws:
                page = Page(ws)
                await page.send("Page.enable")
                await page.send("Emulation.setDeviceMetricsOverride", width=width, height=height,
                                deviceScaleFactor=1, mobile=False)
                try:
                    yield page
                finally:
                    page.reader.cancel()
    finally:
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), timeout=10)
        except TimeoutError:
            process.kill()
            await process.wait()
