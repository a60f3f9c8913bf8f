"""An API process that dies right after a create has started its task's workflow and before
it writes the task's row: `python -m tests.faults.dying_api` (exit status 70)."""

from __future__ import annotations

import os
import sys
from typing import Any

from api.temporal import TemporalGateway
from cli.main import main

_start = TemporalGateway.start_task


async def _start_then_die(self: TemporalGateway, **kwargs: Any) -> bool:
    await _start(self, **kwargs)
    os._exit(70)


TemporalGateway.start_task = _start_then_die  # type: ignore[method-assign]

if __name__ == "__main__":
    sys.exit(main(["api"]))
