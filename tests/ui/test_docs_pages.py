"""/docs and /redoc in headless Chromium: they render the API's operations from assets this
server ships, and the page asks nothing of any other host."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.api.conftest import Stack
from tests.ui.cdp import Page, chromium_binary, open_page


async def wait_for(page: Page, expression: str, timeout: float = 30) -> Any:
    """The first truthy value of a JavaScript expression, polled while the page renders."""
    async with asyncio.timeout(timeout):
        while not (value := await page.evaluate(expression)):
            await asyncio.sleep(0.1)
    return value


async def requested_hosts(page: Page, url: str) -> set[str]:
    """Load the URL and return the host of every request the page made."""
    await page.send("Network.enable")
    requests = page.expect("Network.requestWillBeSent")
    await page.load("Page.navigate", url=url)
    hosts: set[str] = set()
    while not requests.empty():
        hosts.add(urlsplit(requests.get_nowait()["request"]["url"]).netloc)
    return hosts


@pytest.fixture
def chromium() -> str:
    binary = chromium_binary()
    if binary is None:
        pytest.fail("chromium is not installed; `make chromium` installs Debian's package")
    return binary


async def test_swagger_ui_renders_the_operations(stack: Stack, chromium: str, tmp_path: Path) -> None:
    own = urlsplit(stack.base_url).netloc
    async with open_page(chromium, tmp_path / "profile") as page:
        hosts = await requested_hosts(page, f"{stack.base_url}/docs")
        paths = await wait_for(page, "Array.from(document.querySelectorAll("
                                     "'.opblock-summary-path')).map(e => e.innerText)")
        assert "/task/create" in paths and "/tasks/{task_id}" in paths
        title = await page.evaluate("document.querySelector('.info .title').innerText")
        assert title.startswith("task-scheduler")
        await page.send("Network.disable")
    assert hosts == {own}, hosts


async def test_redoc_renders_the_operations(stack: Stack, chromium: str, tmp_path: Path) -> None:
    own = urlsplit(stack.base_url).netloc
    async with open_page(chromium, tmp_path / "profile") as page:
        hosts = await requested_hosts(page, f"{stack.base_url}/redoc")
        text = await wait_for(page, "document.querySelector('.api-content')?.innerText")
        assert "/task/create" in text and "Create a one-time, cron, interval or explicit-dates task" in text
        await page.send("Network.disable")
    # ReDoc also makes blob: and data: requests for its own worker and images: no host.
    assert hosts - {""} == {own}, hosts
