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

    shots = Path(os.environ.get("UI_SCREENSHOT_DIR") or tmp_path)  # set it to look at them
    async with open_page(binary, tmp_path / "profile") as page:
        await page.load("Page.navigate", url=f"{stack.base_url}/ui/tasks/{task['task_id']}")
        assert await page.evaluate("location.pathname") == "/ui/login"
        key = stack.keys["t1"]
        await page.load("Runtime.evaluate", expression=(
            f"document.querySelector('input[name=key]').value = {key!r};"
            "document.querySelector('form[action=\"/ui/login\"]').submit()"))
        assert await page.evaluate("location.pathname") == "/ui"
        assert await page.evaluate("document.cookie") == ""  # HttpOnly: scripts cannot read it
        assert "browser-every-second" in await page.evaluate("document.querySelector('table').innerText")
        listing = await page.screenshot(shots / "tasks.png")

        await page.load("Page.navigate", url=f"{stack.base_url}/ui/tasks/{task['task_id']}")
        assert await page.evaluate("document.querySelector('h1').innerText") == "browser-every-second PAUSED"
        bars = await page.evaluate("document.querySelectorAll('#lateness rect').length")
        assert bars >= 4
        width = await page.evaluate("document.querySelector('#lateness').getBoundingClientRect().width")
        assert width > 1000  # the chart spans the content column
        detail = await page.screenshot(shots / "task.png")

    for shot in (listing, detail):
        colours = png_colours(shot)
        # A blank or unstyled page has a handful of colours; text, badges and borders add many.
        assert len(colours) > 50, shot
        assert any(r < 60 and g > 100 and b < 80 for r, g, b in colours), shot  # green: COMPLETED


def png_colours(path: Path) -> set[tuple[int, int, int]]:
    """The distinct colours of a 1200x800 PNG screenshot."""
    assert path.stat().st_size > 10_000
    with Image.open(path) as image:
        assert image.format == "PNG" and image.size == (1200, 800)
        counts = image.convert("RGB").getcolors(maxcolors=1 << 20) or []
        return {(c[0], c[1], c[2]) for _, c in counts if isinstance(c, tuple)}
