"""The status page in headless Chromium: sign in through the form, then screenshot a task."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from PIL import Image

from tests.api.conftest import Stack
from tests.ui.cdp import chromium_binary, open_page
from tests.ui.tasks import ran_and_paused


async def test_task_page_renders_in_chromium(stack: Stack, tmp_path: Path) -> None:
    binary = chromium_binary()
    if binary is None:
        pytest.fail("chromium is not installed; `make chromium` installs Debian's package")
    async with stack.client("t1") as api:
        task = await ran_and_paused(api, "browser-every-second")

    async with open_page(binary, tmp_path / "profile") as page:
        await page.load("Page.navigate", url=f"{stack.base_url}/ui/tasks/{task['task_id']}")
        assert await page.evaluate("location.pathname") == "/ui/login"
        key = stack.keys["t1"]
        await page.load("Runtime.evaluate", expression=(
            f"document.querySelector('input[name=key]').value = {key!r};"
            "document.querySelector('form[action=\"/ui/login\"]').submit()"))
        assert await page.evaluate("location.pathname") == "/ui"
        assert await page.evaluate("document.cookie") == ""  # HttpOnly: scripts cannot read it

        await page.load("Page.navigate", url=f"{stack.base_url}/ui/tasks/{task['task_id']}")
        assert await page.evaluate("document.querySelector('h1').innerText") == "browser-every-second\nPAUSED"
        bars = await page.evaluate("document.querySelectorAll('#lateness rect').length")
        assert bars >= 4
        box = await page.evaluate(
            "JSON.stringify(document.querySelector('#lateness').getBoundingClientRect())")
        assert '"width":1072' in box or '"width":10' in box  # the chart spans the content width
        shot = await page.screenshot(Path(os.environ.get("UI_SCREENSHOT", tmp_path / "task.png")))

    assert shot.stat().st_size > 10_000
    with Image.open(shot) as image:
        assert image.format == "PNG" and image.size == (1200, 800)
        colours = image.convert("RGB").getcolors(maxcolors=1 << 20) or []
    # A blank or unstyled page has a handful of colours; text, badges and the chart add many.
    assert len(colours) > 50
    assert any(r < 60 and g > 100 and b < 80 for _, (r, g, b) in colours)  # green bars
